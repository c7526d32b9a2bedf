"""The registry as shipped: names, validation, plan output, reported numbers, torch-free verbs."""

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from exoformer.cli import main
from exoformer.registry.registry import Registry
from exoformer.registry.reported import load_reported

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def registry():
    return Registry()


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_list_shows_every_declared_spec_once_and_every_table_row_resolves(capsys, registry):
    code, out, _ = run_cli(capsys, "list", "--json")
    assert code == 0
    data = json.loads(out)
    names = [s["name"] for s in data["specs"]]
    assert len(set(names)) == len(names)
    assert set(names) == set(registry.specs)  # exactly the declared specs, none dropped or invented
    assert len({s["hash"] for s in data["specs"]}) == len(names)  # no config is declared twice
    assert {"name", "group", "hash", "variant", "preset"} <= set(data["specs"][0])
    hashes = {s["name"]: s["hash"] for s in data["specs"]}
    for table in registry.tables.values():
        for row in table.rows:
            assert row.specs, f"table {table.id} row {row.id} names no spec"
            for name in row.specs:
                assert name in hashes, f"table {table.id} row {row.id}: {name} is not a declared spec"
                assert registry.resolve(name).hash12 == hashes[name]


def test_validate_passes(capsys):
    code, out, err = run_cli(capsys, "validate")
    assert code == 0, err
    assert out.startswith("ok: ")


def test_coverage_of_the_paper(registry):
    variants = {registry.resolve(n).variant for n in registry.specs}
    for v in ["base", "gated", "resformer", "gated-resformer", "e-nuresformer", "e-exoformer", "dynamic-e-exoformer",
              "s-nuresformer-qknorm", "dynamic-s-exoformer", "e-exoformer-no-anchor-norm", "e-exoformer-postnorm-qkvg",
              "static-e-exoformer-from-h2", "dynamic-e-exoformer-from-h1", "e-exoformer-vg", "e-nuresformer-vg"]:
        assert v in variants
    for row in registry.tables["table1"].rows:
        assert [registry.resolve(s).seed for s in row.specs] == [42, 1337, 2027]
    subsets = {(s.model.anchor, s.model.mix_paths) for s in map(registry.resolve, registry.tables["path-subsets"].spec_names())}
    assert len(subsets) == 30  # 15 non-empty subsets x {internal, h0}
    for fid in ["val-loss-table1", "accuracy-bars-table1", "lambda-heatmaps", "attention-sink", "token-similarity",
                "pca-components", "spike-scores", "similarity-to-embeddings", "gate-sparsity", "layer-similarity"]:
        assert fid in registry.figures


def test_presets_give_the_paper_recipe_and_smoke_scale(registry):
    base, gated = registry.resolve("base-s42"), registry.resolve("gated-s42")
    assert (base.model.n_layer, gated.model.n_layer, base.model.d_model) == (32, 29, 1024)
    assert base.train.tokens == 38_147 * 262_144 and base.eval.num_fewshot == 5 and base.eval.suite == "paper"
    one_b = registry.resolve("1b-dynamic-e-exoformer")
    assert (one_b.model.n_layer, one_b.model.d_model, one_b.train.steps) == (32, 1536, 76_294)
    smoke = registry.resolve("base-s42", preset="smoke")
    assert smoke.name == "base-s42" and smoke.shape == "smoke" and smoke.train.data == "smoke"
    assert smoke.hash != base.hash
    ladder = registry.resolve("ladder-125m-base-s42")
    assert 115e6 < ladder.model.num_parameters() < 140e6
    assert registry.resolve("ladder-125m-base-s42", preset="smoke").shape == "smoke"


def test_reported_table1_round_trips(registry):
    cells = load_reported(registry)
    rows = [r.id for r in registry.tables["table1"].rows if r.id not in ("h-exoformer", "s-exoformer")]
    assert [cells[("table1", r, "avg6")].value for r in rows] == [48.14, 48.80, 49.65, 49.09, 49.68, 49.85, 50.27]
    assert [cells[("table1", r, "val_ppl")].value for r in rows] == [14.79, 14.64, 14.32, 14.25, 14.15, 14.13, 14.09]
    assert all(cells[("table1", r, "avg6")].source == "WEB" for r in rows)
    assert cells[("table1", "h-exoformer", "avg6")].value == 49.23 and ("table1", "s-exoformer", "avg6") not in cells
    assert ("table1", "base", "piqa") not in cells  # per-task numbers are unknown, never guessed: no line


def test_plan_table1_h100_and_smoke(capsys, tmp_path):
    code, out, _ = run_cli(capsys, "plan", "table1", "--preset", "450m", "--profile", "h100", "--json",
                           "--runs-dir", str(tmp_path))
    data = json.loads(out)
    assert code == 0 and len(data["specs"]) == 9
    assert all(s["gpu_hours"] > 1 and s["action"] == "run" for s in data["specs"])
    assert data["total"]["gpu_hours"] == pytest.approx(sum(s["gpu_hours"] for s in data["specs"]))
    code, out, _ = run_cli(capsys, "plan", "table1", "--preset", "smoke", "--json", "--runs-dir", str(tmp_path))
    data = json.loads(out)
    assert all(s["cpu_minutes"] is not None and s["gpu_hours"] is None for s in data["specs"])
    code, out, _ = run_cli(capsys, "plan", "table1", "--preset", "smoke", "--runs-dir", str(tmp_path))
    assert "CPU-min" in out and out.count(" run ") == 9 and "total:" in out


def test_plan_reads_status_files(capsys, tmp_path, registry):
    done, started, bare = registry.resolve("base-s42"), registry.resolve("gated-s42"), registry.resolve("resformer-s42")
    done_dir = tmp_path / "base-s42" / done.hash12
    (done_dir / "stages").mkdir(parents=True)
    for stage in ("train", "validate", "evaluate", "analyse"):
        (done_dir / "stages" / f"{stage}.json").write_text("{}")
    (done_dir / "STATUS").write_text('{"state": "SUCCEEDED"}')
    ckpt = tmp_path / "gated-s42" / started.hash12 / "checkpoints"
    ckpt.mkdir(parents=True)
    (ckpt / "step_100.pt").write_bytes(b"x")
    (ckpt.parent / "STATUS").write_text('{"state": "FAILED", "reason": "preempted"}')
    (tmp_path / "resformer-s42" / bare.hash12).mkdir(parents=True)
    (tmp_path / "resformer-s42" / bare.hash12 / "STATUS").write_text("SUCCEEDED\n")  # not ours: damaged
    _, out, _ = run_cli(capsys, "plan", "table1", "--json", "--runs-dir", str(tmp_path))
    actions = {s["name"]: s["action"] for s in json.loads(out)["specs"]}
    assert actions["base-s42"] == "skip" and actions["gated-s42"] == "skip" and actions["resformer-s42"] == "resume"
    assert actions["e-exoformer-s42"] == "run"
    _, out, _ = run_cli(capsys, "plan", "table1", "--json", "--retry-failed", "--runs-dir", str(tmp_path))
    assert {s["name"]: s["action"] for s in json.loads(out)["specs"]}["gated-s42"] == "resume"
    _, out, _ = run_cli(capsys, "show", "base-s42", "--json", "--runs-dir", str(tmp_path))
    assert json.loads(out)["status"] == "SUCCEEDED"


def test_cost_model_matches_hand_formula(registry):
    from exoformer.budget.cost import training_flops

    s = registry.resolve("base-s42")
    n = s.model.num_parameters() - s.model.vocab_size * s.model.d_model
    expected = 6 * n * s.train.tokens + 12 * s.model.n_layer * s.model.d_model * 2048 * s.train.tokens / 2
    assert training_flops(s) == pytest.approx(expected)


def test_mfu_override_scales_gpu_hours(capsys, tmp_path):
    _, a, _ = run_cli(capsys, "plan", "base-s42", "--profile", "h100", "--json", "--runs-dir", str(tmp_path))
    _, b, _ = run_cli(capsys, "plan", "base-s42", "--profile", "h100", "--json", "--runs-dir", str(tmp_path),
                      "--set", "profile.gpu.mfu=0.2")
    assert json.loads(b)["total"]["gpu_hours"] == pytest.approx(2 * json.loads(a)["total"]["gpu_hours"])


def test_targets_glob_table_figure_and_unknown(registry, capsys):
    assert registry.select("base-s*") == ["base-s42", "base-s1337", "base-s2027"]
    assert len(registry.select("table1", replicates=True)) == 27
    assert "e-exoformer-s42" in registry.select("lambda-heatmaps")
    code, _, err = run_cli(capsys, "plan", "tabel1")
    assert code == 2 and "did you mean 'table1'" in err and err.count("\n") == 1


def test_show_prints_resolved_yaml_hash_and_params(capsys):
    code, out, _ = run_cli(capsys, "show", "dynamic-e-exoformer-s42", "--set", "placement.partition=gpu")
    assert code == 0 and "dynamic: true" in out and "partition: gpu" in out and "# parameters:" in out


def test_planning_verbs_do_not_import_torch(tmp_path, monkeypatch):
    """list, show and validate never import torch; plan neither, once the model figures it prices are cached
    (exoformer/budget/module_figures.py measures a model on first use)."""
    monkeypatch.setenv("EXOFORMER_CACHE", str(tmp_path / "cache"))
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["plan", "table1", "--runs-dir", str(tmp_path)]) == 0  # measures and caches, in this process
    code = (
        "import sys, io, contextlib\n"
        "from exoformer.cli import main\n"
        f"for argv in (['list'], ['show', 'base-s42'], ['plan', 'table1', '--runs-dir', {str(tmp_path)!r}], ['validate']):\n"
        "    with contextlib.redirect_stdout(io.StringIO()):\n"
        "        assert main(argv) == 0, argv\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
        "print('clean')\n"
    )
    res = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "clean" in res.stdout, res.stderr


def test_reproduce_py_entry_point_exit_codes():
    ok = subprocess.run([sys.executable, "reproduce.py", "validate"], cwd=REPO, capture_output=True, text=True)
    bad = subprocess.run([sys.executable, "reproduce.py", "show", "nope"], cwd=REPO, capture_output=True, text=True)
    assert ok.returncode == 0 and bad.returncode == 2
    assert bad.stderr.startswith("error: ") and bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr


