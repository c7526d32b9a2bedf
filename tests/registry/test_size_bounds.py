"""Bounded inputs: every size field has an upper bound (docs/input-limits.md), checked in the registry, in `--set`
and in a checkpoint's declared config, which must match its tensor shapes before any model is built; only
regular files are opened as checkpoints."""

from __future__ import annotations

import dataclasses
import os
import resource
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

from exoformer.cli import main
from exoformer.registry.registry import DEFAULT_REGISTRY
from exoformer.model import ExoTransformer
from exoformer.model.variants import variant_config

REPO = Path(__file__).resolve().parents[2]
MEMORY_CAP = 3 << 30


def _one_line_error(capsys, code: int) -> str:
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    return err


SIZE_FIELDS = ["model.n_layer", "model.d_model", "model.n_head", "model.vocab_size", "model.seq_len",
               "model.mlp_ratio", "model.dynamic_hidden", "train.steps", "train.batch_tokens",
               "train.micro_batch_seqs", "train.seq_len", "train.val_batches", "train.final_val_tokens",
               "train.checkpoint_every", "train.keep_checkpoints", "train.warmup_steps", "train.muon_momentum_steps",
               "train.val_every", "eval.batch_size", "eval.num_fewshot", "eval.limit", "analysis.n_sequences",
               "analysis.seq_len"]
"""Every size field (layers, width, heads, vocabulary, sequence, batch, steps, ...)."""
HUGE = 10 ** 15


def test_every_bound_is_documented():
    from exoformer.limits import SIZE_BOUNDS

    assert sorted(SIZE_BOUNDS) == sorted(SIZE_FIELDS)
    doc = (REPO / "docs" / "input-limits.md").read_text()
    for key, bound in SIZE_BOUNDS.items():
        assert f"`{key}`" in doc and f"{bound:,}" in doc, key


@pytest.mark.parametrize("key", SIZE_FIELDS)
def test_a_size_above_its_bound_is_refused_by_set(capsys, key):
    code = main(["plan", "base-s42", "--preset", "smoke", "--set", f"{key}={HUGE}"])
    assert "above the limit" in _one_line_error(capsys, code)


def test_a_huge_width_through_set(capsys):
    code = main(["plan", "base-s42", "--set", "model.d_model=100000000"])
    assert "model.d_model" in _one_line_error(capsys, code)
    code = main(["plan", "base-s42", "--set", "model.n_layer=1000", "--set", "model.d_model=65536"])
    assert "parameters, above the limit" in _one_line_error(capsys, code)


@pytest.mark.parametrize("body", ["model: {n_layer: 1000000000}", "train: {steps: 1000000000000}",
                                  "model: {vocab_size: 100000000000}", "eval: {batch_size: 10000000}"])
def test_a_size_above_its_bound_in_a_registry_file_is_refused_by_validate(tmp_path, capsys, body):
    reg = tmp_path / "experiments"
    shutil.copytree(DEFAULT_REGISTRY, reg)
    (reg / "registry.yaml").write_text((reg / "registry.yaml").read_text().rstrip() + "\n  - big.yaml\n")
    (reg / "big.yaml").write_text(f"groups:\n  big:\n    why: limits\n    specs:\n      big-a:\n"
                                  f"        variant: base\n        {body}\n")
    err = _one_line_error(capsys, main(["validate", "--registry", str(reg)]))
    assert "above the limit" in err and "big.yaml:" in err, err


def _ours(path: Path, **declared) -> Path:
    cfg = variant_config("base", "smoke", n_layer=2)
    model = ExoTransformer(cfg)
    torch.save({"model": model.state_dict(), "model_config": {**dataclasses.asdict(cfg), **declared}, "step": 3},
               path)
    return path


def _capped():
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


def _evaluate(ckpt: Path, root: Path) -> subprocess.CompletedProcess:
    """`evaluate CKPT --as base --dry-run` in a subprocess under a 3 GiB address-space cap: a file that makes it
    allocate without bound fails here instead of exhausting the machine."""
    env = {"PATH": os.environ.get("PATH", ""), "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "reproduce.py", "evaluate", str(ckpt), "--as", "base", "--dry-run",
                           "--runs-dir", str(root)], cwd=REPO, capture_output=True, text=True, env=env, timeout=120,
                          preexec_fn=_capped)


@pytest.mark.parametrize("declared", [{"n_layer": 10 ** 9}, {"vocab_size": 10 ** 11}, {"d_model": 10 ** 8}])
def test_a_checkpoint_declaring_a_huge_model_is_refused_before_anything_is_built(tmp_path, declared):
    done = _evaluate(_ours(tmp_path / "big.pt", **declared), tmp_path / "runs")
    assert done.returncode == 2 and done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
    assert "above the limit" in done.stderr


def test_a_checkpoint_whose_tensors_do_not_match_its_config_is_refused(tmp_path):
    done = _evaluate(_ours(tmp_path / "wide.pt", n_layer=3), tmp_path / "runs")  # declares 3 layers, holds 2
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "declared model" in done.stderr, done.stderr


def test_a_fifo_is_never_opened_as_a_checkpoint(tmp_path, capsys):
    fifo = tmp_path / "f.pt"
    os.mkfifo(fifo)
    result: list[int] = []
    worker = threading.Thread(target=lambda: result.append(
        main(["evaluate", str(fifo), "--as", "base", "--dry-run", "--runs-dir", str(tmp_path / "runs")])),
        daemon=True)
    worker.start()
    worker.join(60)
    if not result:  # unblock the reader so the test process can end
        with open(fifo, "wb"):
            pass
        pytest.fail("evaluate blocked on a FIFO")
    assert "not a regular file" in _one_line_error(capsys, result[0])


def test_a_fifo_among_the_shards_is_refused_without_being_opened(tmp_path):
    from exoformer.runs.rundirs import data_checksums

    (tmp_path / "a.bin").write_bytes(b"\0" * 16)
    fifo = tmp_path / "b.bin"
    os.mkfifo(fifo)
    raised: list[BaseException] = []

    def checksums() -> None:
        try:
            data_checksums(tmp_path)
        except BaseException as err:  # noqa: BLE001 - the test inspects it
            raised.append(err)

    worker = threading.Thread(target=checksums, daemon=True)
    worker.start()
    worker.join(30)
    if worker.is_alive():
        with open(fifo, "wb"):
            pass
        pytest.fail("checksumming the data directory blocked on a FIFO")
    assert raised and "not a regular file" in str(raised[0])
