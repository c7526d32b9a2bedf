"""The bundled smoke corpus trains: val loss falls well below the corpus's unigram entropy."""

import dataclasses
import json

import numpy as np
import pytest

from exoformer.data import resolve_data
from exoformer.data.shards import find_shards, read_shard
from exoformer.registry.registry import Registry
from exoformer.rundir import VAL_CE_KEY
from exoformer.train.loop import train


def unigram_entropy_nats(data_dir) -> float:
    counts = sum(np.bincount(np.asarray(read_shard(p)), minlength=65536) for p in find_shards(data_dir, "train"))
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_smoke_shape_learns_the_smoke_corpus(tmp_path):
    data = resolve_data("smoke")
    entropy = unigram_entropy_nats(data)
    spec = Registry().resolve("gated-s42", preset="smoke")  # the smoke preset's recipe, as `reproduce.py run` trains it
    recipe = dataclasses.replace(spec.train, steps=60, val_every=30, checkpoint_every=60)
    result = train(spec.model, recipe, tmp_path)
    assert result.step == 60 and not result.interrupted
    vals = [json.loads(line)[VAL_CE_KEY] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()
            if '"val"' in line]
    assert len(vals) == 2 and vals[1] < vals[0]
    assert vals[-1] < 0.75 * entropy, (vals, entropy)
