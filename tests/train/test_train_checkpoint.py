import warnings

import pytest
import torch
from train_tiny import tiny_model, tiny_train

from exoformer.errors import UserError
from exoformer.train.checkpoint import latest_checkpoint, load_checkpoint, load_model_from_run, save_checkpoint
from exoformer.train.loop import final_validation, train


def test_save_names_checksums_and_keeps_newest(tmp_path):
    for step in (1, 2, 3):
        save_checkpoint(tmp_path, step, {"step": step, "w": torch.full((3,), float(step))}, keep=2)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["step_00000002.pt", "step_00000002.pt.sha256", "step_00000003.pt", "step_00000003.pt.sha256"]
    latest = latest_checkpoint(tmp_path)
    assert latest.name == "step_00000003.pt" and load_checkpoint(latest)["step"] == 3


def test_corrupt_or_partial_checkpoints_are_skipped_with_a_warning(tmp_path):
    save_checkpoint(tmp_path, 1, {"step": 1}, keep=5)
    save_checkpoint(tmp_path, 2, {"step": 2}, keep=5)
    newest = tmp_path / "step_00000002.pt"
    newest.write_bytes(newest.read_bytes()[:-7])  # torn
    with pytest.warns(UserWarning, match="checksum mismatch"):
        assert latest_checkpoint(tmp_path).name == "step_00000001.pt"
    (tmp_path / "step_00000003.pt").write_bytes(b"partial")  # renamed but side-car never written
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert latest_checkpoint(tmp_path).name == "step_00000001.pt"
    messages = [str(w.message) for w in caught]
    assert len(messages) == 2 and "step_00000003.pt: no checksum side-car (partial write)" in messages[0]
    assert "step_00000002.pt: checksum mismatch" in messages[1]
    assert latest_checkpoint(tmp_path / "missing") is None


def test_resume_with_other_config_is_refused_and_nothing_deleted(tiny_data, tmp_path):
    train(tiny_model(), tiny_train(tiny_data, steps=2, val_every=0), tmp_path)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    metrics = (tmp_path / "metrics.jsonl").read_text()
    with pytest.raises(UserError) as info:
        train(tiny_model(dynamic=False), tiny_train(tiny_data, steps=2, val_every=0, seed=7), tmp_path)
    message = str(info.value)
    assert "\n" not in message and "model.dynamic" in message and "train.seed" in message
    assert sorted(p.name for p in tmp_path.rglob("*")) == before
    assert (tmp_path / "metrics.jsonl").read_text() == metrics


def test_load_model_from_run_and_final_validation(tiny_data, tmp_path):
    config, recipe = tiny_model(), tiny_train(tiny_data, steps=2, val_every=0)
    train(config, recipe, tmp_path)
    model, loaded_config = load_model_from_run(tmp_path)
    assert loaded_config == config and not model.training
    state = load_checkpoint(latest_checkpoint(tmp_path / "checkpoints"))
    assert all(torch.equal(model.state_dict()[k], v) for k, v in state["model"].items())
    result = final_validation(config, recipe, tmp_path, tokens=4 * 32)
    assert result["tokens"] == 4 * 32
    assert result["val_ppl"] == pytest.approx(torch.tensor(result["val_loss"]).exp().item())
    with pytest.raises(UserError, match="no complete checkpoint"):
        load_model_from_run(tmp_path / "elsewhere")
