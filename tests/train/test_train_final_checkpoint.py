"""Results come only from the verified checkpoint of the final step; damage is an error or a retrain."""

import hashlib
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from train_tiny import tiny_model, tiny_train

import exoformer.io
from exoformer.errors import UserError
from exoformer.stage import StageContext
from exoformer.train import checkpoint as ckpt
from exoformer.train.checkpoint import (
    final_checkpoint_problem,
    latest_checkpoint,
    load_checkpoint,
    load_final_checkpoint,
    load_model_from_run,
    save_checkpoint,
)
from exoformer.train.loop import final_validation, train

FINAL = "step_00000012.pt"


def truncate(path: Path, keep_fraction: float = 0.6) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep_fraction)])


@pytest.fixture(scope="module")
def reference(tiny_data, tmp_path_factory):
    """An undamaged 12-step run (checkpoints at 10 and 12) and its final validation."""
    run = tmp_path_factory.mktemp("reference")
    train(tiny_model(), tiny_train(tiny_data), run)
    return run, final_validation(tiny_model(), tiny_train(tiny_data), run)


def stage_ctx(tiny_data, run: Path) -> StageContext:
    spec = SimpleNamespace(name="tiny-s0", seed=0, model=tiny_model(), train=tiny_train(tiny_data))
    return StageContext(spec=spec, run_dir=run, device="cpu")


def trained_copy(tiny_data, tmp_path: Path) -> Path:
    run = tmp_path / "run"
    train(tiny_model(), tiny_train(tiny_data), run)
    assert sorted(p.name for p in (run / "checkpoints").glob("*.pt")) == ["step_00000010.pt", FINAL]
    return run


def test_truncated_final_checkpoint_fails_every_result_stage_naming_the_file(tiny_data, tmp_path):
    from exoformer.eval.stage import evaluate_stage, validate_stage

    run = trained_copy(tiny_data, tmp_path)
    final = run / "checkpoints" / FINAL
    truncate(final)
    assert final_checkpoint_problem(run, 12).startswith(f"{final}: checksum mismatch")
    with pytest.raises(UserError) as err:
        final_validation(tiny_model(), tiny_train(tiny_data), run)
    message = str(err.value)
    assert str(final) in message and "checksum mismatch" in message and "step 12" in message and "\n" not in message
    for stage in (validate_stage, evaluate_stage):  # evaluate fails before lm-eval is imported
        with pytest.raises(UserError, match="checksum mismatch") as err:
            stage(stage_ctx(tiny_data, run))
        assert str(final) in str(err.value)
    assert not (run / "eval").exists()  # nothing computed from step 10
    with pytest.raises(UserError, match=FINAL), pytest.warns(UserWarning, match="skipping checkpoint"):
        load_model_from_run(run)  # without the step: read from the checkpoints' own recipe


def test_missing_final_checkpoint_names_it_and_the_newest_good_one(tiny_data, tmp_path):
    run = trained_copy(tiny_data, tmp_path)
    (run / "checkpoints" / FINAL).unlink()
    with pytest.raises(UserError) as err:
        load_final_checkpoint(run, 12)
    assert FINAL in str(err.value) and "step_00000010.pt" in str(err.value)
    assert final_checkpoint_problem(run / "checkpoints", 12).endswith("final checkpoint missing")


def test_final_checkpoint_holding_another_step_is_refused(tmp_path):
    save_checkpoint(tmp_path, 5, {"step": 4}, keep=2)
    with pytest.raises(UserError, match="holds step 4, expected the final step 5"):
        load_final_checkpoint(tmp_path, 5)


def test_analysis_refuses_a_damaged_final_checkpoint(tiny_data, tmp_path):
    from exoformer.analysis.stage import probe_run

    run = trained_copy(tiny_data, tmp_path)
    truncate(run / "checkpoints" / FINAL)
    spec = SimpleNamespace(name="tiny-s0", train=tiny_train(tiny_data))
    with pytest.raises(UserError, match=f"{FINAL}.*checksum mismatch"):
        probe_run(run, spec, ["pca_components"], device="cpu")


def test_retraining_after_a_damaged_final_checkpoint_gives_the_undamaged_numbers(tiny_data, tmp_path, reference):
    ref_run, ref_result = reference
    run = trained_copy(tiny_data, tmp_path)
    truncate(run / "checkpoints" / FINAL)
    with pytest.warns(UserWarning, match=f"skipping checkpoint .*{FINAL}: checksum mismatch"):
        result = train(tiny_model(), tiny_train(tiny_data), run)  # resumes from step 10
    assert result.step == 12
    assert final_validation(tiny_model(), tiny_train(tiny_data), run) == ref_result
    ours, theirs = (load_checkpoint(r / "checkpoints" / FINAL) for r in (run, ref_run))
    for key in ours["model"]:
        assert torch.equal(ours["model"][key], theirs["model"][key]), key


def test_both_checkpoints_damaged_retrains_from_zero_to_the_same_numbers(tiny_data, tmp_path, reference):
    _, ref_result = reference
    run = trained_copy(tiny_data, tmp_path)
    for path in (run / "checkpoints").glob("*.pt"):
        truncate(path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert train(tiny_model(), tiny_train(tiny_data), run).step == 12
    assert final_validation(tiny_model(), tiny_train(tiny_data), run) == ref_result


@pytest.mark.parametrize("keep", [1, 2])
def test_damaged_newer_checkpoints_never_push_a_fresh_valid_one_out(tmp_path, keep):
    for step in (10, 12):
        save_checkpoint(tmp_path, step, {"step": step}, keep=2)
    for path in tmp_path.glob("*.pt"):
        truncate(path)
    fresh = save_checkpoint(tmp_path, 5, {"step": 5}, keep=keep)  # training restarted from scratch
    assert fresh.is_file() and Path(f"{fresh}.sha256").is_file()
    with pytest.warns(UserWarning):
        assert latest_checkpoint(tmp_path) == fresh
    save_checkpoint(tmp_path, 10, {"step": 10}, keep=keep)  # replaces the damaged step 10
    names = sorted(p.name for p in tmp_path.glob("*.pt"))
    assert names == (["step_00000010.pt", FINAL] if keep == 1 else ["step_00000005.pt", "step_00000010.pt", FINAL])


def test_damaged_older_checkpoints_are_pruned_and_do_not_count(tmp_path):
    for step in (1, 2, 3):
        save_checkpoint(tmp_path, step, {"step": step}, keep=5)
    truncate(tmp_path / "step_00000002.pt")
    save_checkpoint(tmp_path, 4, {"step": 4}, keep=2)
    assert sorted(p.name for p in tmp_path.glob("*.pt")) == ["step_00000003.pt", "step_00000004.pt"]


class HashCounter:
    """Counts the bytes that the checkpoint module feeds to sha256 (through exoformer.io's file hashing)."""

    def __init__(self, monkeypatch):
        self.bytes = 0
        real = hashlib.sha256
        counter = self

        class Counting:
            def __init__(self, data=b""):
                self._h = real()
                self.update(data)

            def update(self, data):
                counter.bytes += len(data)
                self._h.update(data)

            def hexdigest(self):
                return self._h.hexdigest()

        monkeypatch.setattr(exoformer.io, "hashlib", SimpleNamespace(sha256=Counting))


def test_each_load_hashes_the_file_once(tiny_data, tmp_path, monkeypatch):
    from exoformer.analysis.stage import probe_run

    run = trained_copy(tiny_data, tmp_path)
    final = run / "checkpoints" / FINAL
    size = final.stat().st_size
    counter = HashCounter(monkeypatch)
    spec = SimpleNamespace(name="tiny", hash12="0" * 12, variant="tiny", shape="tiny", train=tiny_train(tiny_data),
                           analysis=SimpleNamespace(seq_len=32, n_sequences=2, ablations=("none",)))
    loads = {"load_final_checkpoint": lambda: load_final_checkpoint(run, 12),
             "load_model_from_run": lambda: load_model_from_run(run, steps=12),
             "load_model_from_run without steps": lambda: load_model_from_run(run),
             "final_validation": lambda: final_validation(tiny_model(), tiny_train(tiny_data), run, tokens=64),
             "probe_run": lambda: probe_run(run, spec, ["pca_components"], device="cpu")}
    for name, load in loads.items():
        ckpt._VERDICTS.clear()  # a fresh process
        counter.bytes = 0
        load()
        assert counter.bytes == size, name
        assert latest_checkpoint(run / "checkpoints") == final and counter.bytes == size, name  # remembered
        load()
        assert counter.bytes == size, name  # the same unchanged file is not hashed again in this process


def test_remembered_verdict_is_dropped_when_the_file_changes(tmp_path):
    path = save_checkpoint(tmp_path, 1, {"step": 1, "w": torch.zeros(100)}, keep=2)
    assert ckpt.verify(path) is None
    truncate(path)
    assert ckpt.verify(path).startswith("checksum mismatch")
