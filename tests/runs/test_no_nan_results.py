"""No NaN is a result: a diverged run ends FAILED at the step it diverged, a checkpoint with NaN weights is refused
before anything is written, and result rows edited after the run read DAMAGED in every reading verb."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from exoformer.cli import main
from exoformer.registry.registry import Registry
from exoformer.report.reading.selection import Selection
from exoformer.runs.run_index import find_runs
from exoformer.rundir import RunDir

torch.set_num_threads(1)

SETS = ["train.steps=3", "train.batch_tokens=512", "train.micro_batch_seqs=2", "train.checkpoint_every=1",
        "train.val_every=0", "train.val_batches=1", "train.final_val_tokens=512", "train.warmup_steps=1",
        "train.muon_momentum_steps=1", "eval.limit=2", "analysis.enabled=false"]


def args(*extra: str) -> list[str]:
    return ["--preset", "smoke", *[a for s in [*SETS, *extra] for a in ("--set", s)], "--backend", "inline"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    assert main(["run", "gated-s42", *args(), "--runs-dir", str(root)]) == 0
    (run,) = root.glob("gated-s42/*")
    return root, run


def test_a_diverged_run_ends_failed_at_its_step_keeping_the_last_good_checkpoint(tmp_path, capsys):
    root = tmp_path / "runs"
    code = main(["run", "gated-s42", *args("train.steps=6", "train.adam_lr=1e8", "train.muon_lr=1e8",
                                           "train.grad_clip=1e30"), "--runs-dir", str(root)])
    assert code != 0
    (run,) = root.glob("gated-s42/*")
    status = RunDir(run).read_status()
    assert status.state == "FAILED" and "diverged at step" in status.reason, status.reason
    step = int(status.reason.split("diverged at step ")[1].split(":")[0])
    saved = sorted((run / "checkpoints").glob("step_*.pt"))
    assert saved and saved[-1].name == f"step_{step - 1:08d}.pt"  # the newest kept is the step before
    for path in saved:  # every checkpoint kept is good
        state = torch.load(path, map_location="cpu", weights_only=True)
        assert all(torch.isfinite(t).all() for t in state["model"].values() if t.is_floating_point())
    losses = [json.loads(line)["loss"] for line in (run / "metrics.jsonl").read_text().splitlines()
              if json.loads(line).get("kind") == "train"]
    assert len(losses) == step - 1 and all(loss == loss for loss in losses)
    assert not (run / "eval" / "long.jsonl").exists()


def test_a_checkpoint_with_nan_weights_is_refused_before_anything_is_written(trained, tmp_path, capsys):
    _, run = trained
    final = sorted((run / "checkpoints").glob("step_*3.pt"))[0]
    state = torch.load(final, map_location="cpu", weights_only=True)
    name = next(k for k, v in state["model"].items() if v.dim() == 2)
    state["model"][name][0, 0] = float("nan")
    bad = tmp_path / "nan.pt"
    torch.save(state, bad)
    root = tmp_path / "runs"
    capsys.readouterr()
    assert main(["evaluate", str(bad), "--as", "gated", *args(), "--runs-dir", str(root)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: ") and "not finite" in err and name in err
    assert not root.exists() or not any(root.rglob("*.json"))


def _tamper_eval(run: Path, edit) -> None:
    path = run / "eval" / "long.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps(r) + "\n" for r in edit(rows)))


def _set_first(value):
    return lambda rows: [{**rows[0], "value": value}, *rows[1:]]


def _flipped(row: dict) -> dict:
    """The row with another accuracy in range."""
    return {**row, "value": 0.0 if row["value"] else 1.0}


def _rename(run: Path) -> None:
    data = json.loads((run / "identity.json").read_text())
    (run / "identity.json").write_text(json.dumps({**data, "spec": "base-s42"}))


TAMPERING = {
    "accuracy 7.5": (lambda run: _tamper_eval(run, _set_first(7.5)), "outside its range"),
    "accuracy above 100": (lambda run: _tamper_eval(run, _set_first(150.0)), "outside its range"),
    "duplicate row": (lambda run: _tamper_eval(run, lambda rows: [*rows, rows[0]]), "duplicate rows"),
    "conflicting row": (lambda run: _tamper_eval(run, lambda rows: [*rows, _flipped(rows[0])]), "conflicting"),
    "disagrees with the stage": (lambda run: _tamper_eval(run, lambda rows: [_flipped(rows[0]), *rows[1:]]),
                                 "stage recorded"),
    "renamed spec": (_rename, "under 'gated-s42'"),
}


@pytest.mark.parametrize("case", TAMPERING)
def test_tampered_rows_read_damaged_in_every_reading_verb(trained, tmp_path, capsys, case):
    source_root, source_run = trained
    root = tmp_path / "runs"
    run = root / "gated-s42" / source_run.name
    shutil.copytree(source_run, run)
    assert [r.state for r in find_runs(root)] == ["SUCCEEDED"]
    edit, why = TAMPERING[case]
    edit(run)

    (info,) = find_runs(root)
    assert info.state == "DAMAGED" and why in info.damage
    read = Selection.of_root(Registry(), root, preset="smoke")
    read.pick("gated-s42")  # reads the spec directory (a renamed run is filed under the name it gives)
    picked = read.pick(info.spec)
    assert picked.rows.empty and picked.run.damage == info.damage and picked.note.endswith(info.damage)
    capsys.readouterr()
    assert main(["status", "--runs-dir", str(root), "--json"]) in (0, 1)
    (shown,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert shown["state"] == "DAMAGED" and why in shown["reason"]
    if case != "renamed spec":
        main(["table", "table1", *args()[:2], "--runs-dir", str(root)])
        table = capsys.readouterr().out
        assert "DAMAGED gated-s42" in table and why in table
        gated = next(line for line in table.splitlines() if line.startswith("| Gated Attention"))
        assert "DAMAGED" in gated and "not run" not in gated  # one word for a damaged run, as `status` says
        assert not any(ch.isdigit() for ch in gated.replace("DAMAGED", "").split("|", 2)[2].split("/")[0])
