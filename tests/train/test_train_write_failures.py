"""A checkpoint write that fails is a one-line error naming the path; the previous checkpoint stays intact."""

import errno
import os

import pytest
import torch
from train_tiny import tiny_model, tiny_train

from exoformer.errors import UserError
from exoformer.train import checkpoint as ckpt
from exoformer.train.checkpoint import latest_checkpoint, load_verified, save_checkpoint
from exoformer.train.loop import train


def torch_save_fails_midway(state, f):
    """What torch reports when the disk fills during a save (the zip writer's enforce failure)."""
    f.write(b"PK\x03\x04 partial bytes")
    raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 64 vs 10")


def fsync_no_space(fd):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def mkstemp_read_only(*args, **kwargs):
    raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))  # root ignores chmod, so simulate it


@pytest.mark.parametrize("failure", ["torch_save", "enospc", "read_only"])
def test_failed_write_is_one_line_error_and_keeps_the_previous_checkpoint(tmp_path, monkeypatch, failure):
    previous = save_checkpoint(tmp_path, 1, {"step": 1, "w": torch.arange(4.0)}, keep=1)
    before = sorted(p.name for p in tmp_path.iterdir())
    if failure == "torch_save":
        monkeypatch.setattr(ckpt.torch, "save", torch_save_fails_midway)
    elif failure == "enospc":
        monkeypatch.setattr(ckpt.os, "fsync", fsync_no_space)
    else:
        monkeypatch.setattr(ckpt.tempfile, "mkstemp", mkstemp_read_only)
    with pytest.raises(UserError) as err:
        save_checkpoint(tmp_path, 2, {"step": 2, "w": torch.arange(4.0)}, keep=1)
    monkeypatch.undo()
    message = str(err.value)
    assert str(tmp_path / "step_00000002.pt") in message and "\n" not in message
    assert {"torch_save": "inline_container", "enospc": "No space left", "read_only": "Permission denied"}[failure] \
        in message
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no temp file, nothing pruned
    assert latest_checkpoint(tmp_path) == previous and load_verified(previous)["step"] == 1


def test_side_car_write_failure_leaves_no_uncounted_checkpoint(tmp_path, monkeypatch):
    save_checkpoint(tmp_path, 1, {"step": 1}, keep=1)

    def no_space(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(ckpt, "atomic_write_text", no_space)
    with pytest.raises(UserError, match="No space left"):
        save_checkpoint(tmp_path, 2, {"step": 2}, keep=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_00000001.pt", "step_00000001.pt.sha256"]


def test_training_stops_with_the_error_and_resumes_from_the_last_good_checkpoint(tiny_data, tmp_path, monkeypatch):
    calls = []
    real_save = ckpt.torch.save

    def fail_second(state, f):
        calls.append(state["step"])
        if len(calls) == 2:
            return torch_save_fails_midway(state, f)
        return real_save(state, f)

    monkeypatch.setattr(ckpt.torch, "save", fail_second)
    with pytest.raises(UserError, match="step_00000010.pt"):
        train(tiny_model(), tiny_train(tiny_data), tmp_path)
    monkeypatch.undo()
    assert latest_checkpoint(tmp_path / "checkpoints").name == "step_00000005.pt"
    assert train(tiny_model(), tiny_train(tiny_data), tmp_path).step == 12
