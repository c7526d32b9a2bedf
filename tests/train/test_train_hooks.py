"""The loop's periodic work as hooks: the shipped cadence, the order of a step's writes, and one more hook."""

import json

from train_tiny import tiny_model, tiny_train

from exoformer.train.checkpoint import checkpoint_files, checkpoint_name
from exoformer.train.hooks import HOOKS, Hook, checkpoint_due, validation_due
from exoformer.train.loop import train


def test_a_new_periodic_task_is_one_hook_and_changes_nothing_else(tiny_data, tmp_path):
    seen = []

    def record(state, update):
        seen.append((update.step, state.step, update.tokens, state.tokens, update.loss == state.last_loss))

    plain, extra = tmp_path / "plain", tmp_path / "extra"
    train(tiny_model(), tiny_train(tiny_data), plain)
    every_fifth = Hook("every-fifth", lambda state, update: update.step % 5 == 0, record)
    train(tiny_model(), tiny_train(tiny_data), extra, hooks=(*HOOKS, every_fifth))

    tokens = tiny_train(tiny_data).batch_tokens
    assert seen == [(5, 5, 5 * tokens, 5 * tokens, True), (10, 10, 10 * tokens, 10 * tokens, True)]
    lines = {run: [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
             for run in (plain, extra)}
    timing = ("ms_per_step", "tokens_per_s")
    assert [{k: v for k, v in line.items() if k not in timing} for line in lines[plain]] == \
        [{k: v for k, v in line.items() if k not in timing} for line in lines[extra]]


def test_shipped_cadence_and_order(tiny_data, tmp_path):
    train(tiny_model(), tiny_train(tiny_data), tmp_path)  # steps 12, val_every 4, checkpoint_every 5
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(line["kind"], line["step"]) for line in lines] == [
        ("train", 1), ("train", 2), ("train", 3), ("train", 4), ("val", 4), ("train", 5), ("train", 6), ("train", 7),
        ("train", 8), ("val", 8), ("train", 9), ("train", 10), ("train", 11), ("train", 12), ("val", 12)]
    kept = [path.name for path in checkpoint_files(tmp_path / "checkpoints")]  # keep_checkpoints=2 of 5, 10, 12
    assert kept == [checkpoint_name(12), checkpoint_name(10)]
    assert [hook.name for hook in HOOKS] == ["log", "progress", "tensorboard", "validate", "checkpoint"]


class _Update:
    def __init__(self, step, stop=False):
        self.step, self.stop = step, stop


class _State:
    def __init__(self, cfg):
        self.cfg = cfg


def test_due_predicates(tiny_data):
    state = _State(tiny_train(tiny_data, steps=12, val_every=4, checkpoint_every=5))
    assert [s for s in range(1, 13) if validation_due(state, _Update(s))] == [4, 8, 12]
    assert [s for s in range(1, 13) if checkpoint_due(state, _Update(s))] == [5, 10, 12]
    assert checkpoint_due(state, _Update(7, stop=True))  # a stop request saves at once
    assert not any(validation_due(_State(tiny_train(tiny_data, val_every=0)), _Update(s)) for s in range(1, 13))
