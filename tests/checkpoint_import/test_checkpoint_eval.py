"""`reproduce.py evaluate CKPT --as ROW` end to end through the CLI, offline: synthetic checkpoints in the
official key layouts (model1 gated, model3 E-ExoFormer, model.py dynamic) become ordinary run directories that
validate, evaluate (paper suite on small local task files) and analyse, dedup on a second call, and read back
in the report's long frame as the checkpoint source."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
import yaml

from exoformer.cli import main
from exoformer.rundir import RunDir

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "model"))
sys.path.insert(0, str(HERE.parent / "eval"))
from eval_fakes import write_task_dir  # noqa: E402
from test_loading import official_args, random_model, to_official  # noqa: E402

from exoformer.model import variant_config  # noqa: E402

torch.set_num_threads(1)

LAYOUTS = {"gated": ("gated", "model1"), "e-exoformer": ("e-exoformer", "model3"),
           "dynamic-e-exoformer": ("dynamic-e-exoformer", "model4")}
"""table1 row -> (our variant, official file whose key layout the synthetic checkpoint uses)."""


def write_official(path: Path, row: str, seed: int = 0) -> Path:
    """A released-style file: compiled-model key prefix, bf16 matrices, model_args, step, tokens, config."""
    variant, kind = LAYOUTS[row]
    cfg = variant_config(variant, "smoke", n_layer=2)
    state = to_official(random_model(cfg, seed=seed).state_dict(), kind)
    state = {f"_orig_mod.{k}": (v.to(torch.bfloat16) if v.dim() == 2 else v) for k, v in state.items()}
    torch.save({"model": state, "model_args": official_args(cfg), "step": 38146,
                "tokens_processed": 38146 * 262144, "config": {"max_steps": 38147, "seed": 42}}, path)
    return path


@pytest.fixture
def env(tmp_path, monkeypatch):
    write_task_dir(tmp_path / "tasks", n=4)
    monkeypatch.setenv("EXOFORMER_TASK_DIR", str(tmp_path / "tasks"))
    monkeypatch.setenv("EXOFORMER_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("EXOFORMER_RUNS_DIR", raising=False)
    return tmp_path


def evaluate(paths, row, root, *extra):
    return main(["evaluate", *map(str, paths), "--as", row, "--preset", "smoke", "--suite", "paper",
                 "--set", "eval.limit=2", "--set", "eval.num_fewshot=1",
                 "--set", "train.final_val_tokens=2048", "--backend", "inline",
                 "--runs-dir", str(root), *extra])


def run_dirs(root: Path, spec: str) -> list[Path]:
    return sorted(p for p in (root / spec).iterdir() if p.is_dir())


def test_checkpoints_evaluate_as_rows_and_dedup(env, capsys):
    root = env / "runs"
    files = {row: write_official(env / f"{row}.pt", row, seed=i) for i, row in enumerate(LAYOUTS)}
    for row, path in files.items():
        extra = ("--precision", "fp32") if row == "gated" else ()
        assert evaluate([path], row, root, *extra) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "layout     model1 (no mixing) (saved from torch.compile)" in out
    assert "model4/model.py (dynamic mixing)" in out
    assert "model3 (exogenous anchor)" in out and "2 layers x d_model 128 x 4 heads" in out

    for row in LAYOUTS:
        (run,) = run_dirs(root, f"{row}-s42")
        rd = RunDir(run)
        assert rd.read_status().state == "SUCCEEDED"
        spec = yaml.safe_load(rd.spec_file.read_text())
        assert (spec["source"], spec["as_row"], spec["table"]) == ("checkpoint", row, "table1")
        assert spec["checkpoint"]["step"] == 38146 and spec["model"]["n_layer"] == 2
        assert "spike_scores" not in spec["analysis"]["probes"]
        train = json.loads(rd.stage_file("train").read_text())["result"]
        assert train["sha256"] == spec["checkpoint"]["sha256"] and train["step"] == 38146
        assert not rd.metrics_file.exists()  # nothing was trained
        tasks = {r["task"] for r in rd.result_rows(spec["name"])}
        assert {"arc_challenge", "hellaswag", "winogrande", "validation"} <= tasks
        assert rd.probes.is_file()
        prov = rd.read_provenance()
        assert prov["checkpoint"]["sha256"] == spec["checkpoint"]["sha256"]
        assert prov["checkpoint"]["eval_precision"] == ("fp32" if row == "gated" else "bf16")

    # the reading verbs read them as the checkpoint source of their rows, and no run of ours
    from exoformer.registry.registry import Registry
    from exoformer.report.reading.selection import Selection

    read = Selection.of_root(Registry(), root, preset="smoke")
    for row in LAYOUTS:
        picked = read.pick(f"{row}-s42", source="checkpoint")
        assert picked is not None and not picked.rows.empty and set(picked.rows["source"]) == {"checkpoint"}
        assert read.pick(f"{row}-s42") is None
    # table table1 shows them as the checkpoint source, beside the paper (and no run of ours)
    assert main(["table", "table1", "--preset", "smoke", "--runs-dir", str(root)]) == 0
    table = capsys.readouterr().out
    assert "ckpt" in table and "not comparable" in table
    lines = {line.split("|")[1].strip(): line for line in table.splitlines() if line.startswith("|")}
    gated = next(line for label, line in lines.items() if label.lower().startswith("gated attention"))
    assert gated.count(" / ") >= 6, gated  # ours / ckpt / paper in each accuracy cell

    # the same file again: skipped, nothing new; another precision is another run
    before = run_dirs(root, "gated-s42")
    assert evaluate([files["gated"]], "gated", root, "--precision", "fp32", "--json") == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [r["action"] for r in summary["runs"]] == ["skip"]
    assert run_dirs(root, "gated-s42") == before


def test_eval_result_equals_exolm_on_the_same_model(env, capsys):
    from exoformer.data.tokenizer import for_data
    from exoformer.eval.run import evaluate as lm_evaluate
    from exoformer.eval.run import long_rows
    from exoformer.model import load_official_checkpoint
    from exoformer.train.loop import resolve_data_dir

    root = env / "runs"
    path = write_official(env / "ckpt_step:38146.pt", "e-exoformer")
    assert evaluate([path], "e-exoformer", root, "--precision", "fp32") == 0, capsys.readouterr().err
    (run,) = run_dirs(root, "e-exoformer-s42")
    lines = RunDir(run).eval_rows.read_text().splitlines()
    got = {(r["task"], r["metric"]): r["value"] for r in map(json.loads, lines)}
    model, _ = load_official_checkpoint(path)
    results = lm_evaluate(model.eval(), for_data(resolve_data_dir("smoke")), "paper", data_dir=env / "tasks",
                          num_fewshot=1, batch_size=32, limit=2, cache_dir=env / "cache2")
    want = {(r["task"], r["metric"]): r["value"] for r in long_rows(results, spec="x", seed=42)}
    assert got == want


def test_plan_only_and_identity(env, capsys):
    from exoformer.checkpoint_import.checkpoint_run import resolve_checkpoint_spec
    from exoformer.registry.registry import Registry

    path = write_official(env / "a.pt", "gated")
    assert evaluate([path], "gated", env / "runs", "--dry-run") == 0
    assert "run" in capsys.readouterr().out and not (env / "runs").exists()
    reg = Registry()
    a = resolve_checkpoint_spec(reg, path, as_row="gated", preset="smoke", precision="bf16")
    b = resolve_checkpoint_spec(reg, path, as_row="gated", preset="smoke", precision="fp32")
    trained = reg.resolve("gated-s42", preset="smoke")
    assert len({a.hash, b.hash, trained.hash}) == 3
    import pickle

    again = pickle.loads(pickle.dumps(a))  # what the local and slurm backends ship to the job
    assert again.hash == a.hash and again.stage_functions() == a.stage_functions()
    write_official(env / "b.pt", "gated", seed=5)  # another file: another identity
    assert resolve_checkpoint_spec(reg, env / "b.pt", as_row="gated", preset="smoke").hash != a.hash


class NeedsCode:
    """Pickled by torch.save as a class reference: weights_only=True refuses to load it."""


@pytest.mark.parametrize("case,needle", [
    ("missing", "no such file"), ("directory", "is a directory"), ("text", "not a torch checkpoint"),
    ("code", "weights_only"), ("no-model", "is not a model checkpoint"), ("row", "has no row 'gatd'"),
    ("wrong-row", "is not a base model"), ("unexpected", "unexpected tensors"),
])
def test_bad_input_is_one_line_exit_2(env, capsys, case, needle):
    path = env / "bad.pt"
    row = "gated"
    if case == "directory":
        path.mkdir()
    elif case == "text":
        path.write_text("not a checkpoint\n")
    elif case == "code":
        torch.save({"model": {}, "model_args": {}, "extra": NeedsCode()}, path)
    elif case == "no-model":
        torch.save({"weights": {}}, path)
    elif case in ("row", "wrong-row", "unexpected"):
        write_official(path, "gated")
        row = {"row": "gatd", "wrong-row": "base", "unexpected": "gated"}[case]
        if case == "unexpected":
            ckpt = torch.load(path, weights_only=True)
            ckpt["model"]["_orig_mod.transformer.layers.0.attn.smear.weight"] = torch.zeros(3)
            torch.save(ckpt, path)
    assert evaluate([path], row, env / "runs") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and needle in err, err
    assert not (env / "runs").exists()


def test_raw_model1_anchors_stand_for_a_qk_norm_row_but_not_for_another_model(env):
    from exoformer.errors import UserError
    from exoformer.checkpoint_import.checkpoint_run import resolve_checkpoint_spec
    from exoformer.registry.registry import Registry

    cfg = variant_config("e-nuresformer-qknorm", "smoke", n_layer=2, anchor_norm_paths=())
    path = env / "oqkrn.pt"
    torch.save({"model": to_official(random_model(cfg).state_dict(), "model1"), "model_args": official_args(cfg)}, path)
    reg = Registry()
    spec = resolve_checkpoint_spec(reg, path, as_row="e-nuresformer-qknorm", table="granularity", preset="smoke")
    assert spec.model.anchor_norm_paths == () and spec.name == "e-nuresformer-qknorm-s42"
    with pytest.raises(UserError, match="is not a e-exoformer model: anchor 'internal'"):
        resolve_checkpoint_spec(reg, path, as_row="e-exoformer", preset="smoke")
