"""Bad training input through the library API: one UserError naming the place, and nothing written."""

import numpy as np
import pytest
from train_tiny import tiny_model, tiny_train

from exoformer.data.shards import write_shard
from exoformer.errors import UserError
from exoformer.train.loop import train


def test_missing_data_directory_is_a_user_error_and_writes_nothing(tmp_path):
    with pytest.raises(UserError) as caught:
        train(tiny_model(), tiny_train(tmp_path / "nowhere", steps=3), tmp_path / "run")
    assert "nowhere" in str(caught.value) and "\n" not in str(caught.value)
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_vocab_smaller_than_largest_token_is_a_user_error(tmp_path):
    data = tmp_path / "data"
    rng = np.random.default_rng(0)
    write_shard(data / "x_train_000000.bin", rng.integers(0, 300, 2000))  # the tiny model has vocab 64
    write_shard(data / "x_val_000000.bin", rng.integers(0, 60, 500))
    with pytest.raises(UserError) as caught:
        train(tiny_model(), tiny_train(data, steps=3), tmp_path / "run")
    assert "vocab_size 64" in str(caught.value) and "x_train_000000.bin" in str(caught.value)
    assert not list((tmp_path / "run").glob("checkpoints/*.pt"))


def test_checkpoint_of_another_variant_is_refused_and_kept(tiny_data, tmp_path):
    out = tmp_path / "run"
    train(tiny_model(), tiny_train(tiny_data, steps=3, val_every=0), out)
    before = {p.name: p.read_bytes() for p in (out / "checkpoints").iterdir()}
    metrics = (out / "metrics.jsonl").read_bytes()
    with pytest.raises(UserError) as caught:
        train(tiny_model(gated=False, mix_paths=("q", "k", "v"), anchor_norm_paths=("q", "k", "v")),
              tiny_train(tiny_data, steps=3, val_every=0), out)
    assert "checkpoint was made for a different run: model.anchor_norm_paths" in str(caught.value)
    assert {p.name: p.read_bytes() for p in (out / "checkpoints").iterdir()} == before
    assert (out / "metrics.jsonl").read_bytes() == metrics
