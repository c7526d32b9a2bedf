"""One scoring path: a trained smoke run and `evaluate` of its final checkpoint as the same row give the same
accuracy cells, and a cell scored at another precision than the table's reference is marked not comparable."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from exoformer.cli import main
from exoformer.registry.registry import Registry
from exoformer.report.reading.selection import Selection
from exoformer.report.tables.build import TASKS, build_table

torch.set_num_threads(1)

SETS = ["train.steps=3", "train.batch_tokens=512", "train.micro_batch_seqs=2", "train.checkpoint_every=3",
        "train.val_every=0", "train.val_batches=1", "train.final_val_tokens=512", "train.warmup_steps=1",
        "train.muon_momentum_steps=1", "eval.limit=3", "analysis.enabled=false"]
ARGS = ["--preset", "smoke", *[a for s in SETS for a in ("--set", s)], "--backend", "inline"]


@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.setenv("EXOFORMER_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("EXOFORMER_RUNS_DIR", raising=False)
    return tmp_path / "runs"


def accuracy_cells(root: Path, registry: Registry):
    selection = Selection.of_root(registry, root, preset="smoke", overrides=SETS)
    built = build_table(registry, "table1", selection=selection, preset="smoke", runs_root=root)
    row = next(r for r in built.table.rows if r.id == "gated")
    ours = {c: built.cell(row, c).value for c in (*TASKS, "avg6", "val_ppl")}
    ckpt = {c: built.cell(row, c, "checkpoint") for c in (*TASKS, "avg6", "val_ppl")}
    return ours, ckpt


def test_trained_run_and_its_checkpoint_score_alike_and_another_precision_is_not_comparable(root, capsys):
    assert main(["run", "gated-s42", *ARGS, "--runs-dir", str(root)]) == 0, capsys.readouterr().err
    (final,) = root.glob("gated-s42/*/checkpoints/step_*3.pt")
    assert main(["evaluate", str(final), "--as", "gated", *ARGS, "--runs-dir", str(root)]) == 0, \
        capsys.readouterr().err
    registry = Registry()
    ours, ckpt = accuracy_cells(root, registry)
    assert all(v is not None for v in ours.values())
    assert {c: cell.value for c, cell in ckpt.items()} == ours
    assert not any("eval.precision" in cell.why for cell in ckpt.values())

    assert main(["evaluate", str(final), "--as", "gated", *ARGS, "--precision", "fp32",
                 "--runs-dir", str(root)]) == 0, capsys.readouterr().err
    _, ckpt = accuracy_cells(root, registry)
    for column, cell in ckpt.items():
        assert not cell.comparable and "eval.precision=fp32 (smoke bf16)" in cell.why


def test_unknown_scoring_precision_is_one_line_naming_the_field(root, capsys):
    assert main(["plan", "gated-s42", "--preset", "smoke", "--set", "eval.precision=fp16"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "eval.precision" in err and "fp16" in err
