"""No smoke task can be passed without knowing the world: shortcut baselines and a fresh model stay near chance.

Checked on the committed task files themselves (no training): text-only baselines (length, words shared with
the context, how common a choice's words are in the corpus) and an untrained smoke model scored the way
lm-eval scores it (acc and length-normalised acc_norm). Near chance means within three binomial standard
errors of 1/n_choices, plus a small slack.
"""

import math

import pytest
import torch

from exoformer.data.smoke import corpus, shortcuts
from exoformer.data.smoke import tasks as t
from exoformer.data.tokenizer import CompactTokenizer, gpt2
from exoformer.registry.registry import Registry
from exoformer.model.model import ExoTransformer

SLACK = 0.02


def tolerance(task: str, n_docs: int) -> float:
    chance = t.CHANCE[task]
    return 3 * math.sqrt(chance * (1 - chance) / n_docs) + SLACK


@pytest.fixture(scope="module")
def scored():
    return shortcuts.scored_docs()


def test_credit_shares_ties_and_rewards_only_the_best():
    assert shortcuts.credit([1.0, 3.0, 2.0], 1) == 1.0
    assert shortcuts.credit([1.0, 3.0, 2.0], 2) == 0.0
    assert shortcuts.credit([3.0, 3.0, 2.0, 3.0], 3) == pytest.approx(1 / 3)


def test_a_planted_shortcut_is_caught():
    """The check can fail: a task whose gold is always the longest choice is solved by `longest`."""
    docs = [{"goal": "How?", "sol1": "Use a very long tool.", "sol2": "Use it.", "label": 0},
            {"goal": "How?", "sol1": "Use it.", "sol2": "Use a much longer tool.", "label": 1}]
    assert shortcuts.baseline_accuracy("longest", "smoke_piqa", docs) == 1.0
    assert shortcuts.baseline_accuracy("shortest", "smoke_piqa", docs) == 0.0


@pytest.mark.parametrize("baseline", sorted(shortcuts.BASELINES))
def test_shortcut_baselines_stay_near_chance_on_every_task(scored, baseline):
    for task, docs in scored.items():
        accuracy = shortcuts.baseline_accuracy(baseline, task, docs)
        assert abs(accuracy - t.CHANCE[task]) <= tolerance(task, len(docs)), (baseline, task, accuracy)


def _fresh_scores(model, tokenizer, task: str, doc: dict) -> tuple[list[float], list[int]]:
    """Sum log-probability of each continuation given its context, and the continuation's length in chars."""
    sequences, spans = [], []
    for context, continuation in t.requests(task, doc):
        whole = tokenizer.encode(context + continuation)
        start = len(tokenizer.encode(context))
        sequences.append(whole)
        spans.append((start, len(whole)))
    width = max(len(s) for s in sequences)
    idx = torch.tensor([s + [tokenizer.eot_token_id] * (width - len(s)) for s in sequences])
    with torch.no_grad():
        logp = torch.log_softmax(model(idx).float(), dim=-1)
    scores = []
    for row, (start, end) in enumerate(spans):
        targets = idx[row, start:end]
        scores.append(float(logp[row, start - 1 : end - 1].gather(-1, targets[:, None]).sum()))
    return scores, [len(c) for _, c in t.requests(task, doc)]


def _argmax_first(values: list[float]) -> int:
    return max(range(len(values)), key=lambda i: (values[i], -i))  # ties: the first, as numpy's argmax


@pytest.mark.parametrize("head", ["as_initialised", "random"])
def test_fresh_smoke_model_is_near_chance_on_every_task(scored, head):
    """An untrained smoke model (the zero LM head training starts from, and a random head with token
    preferences of its own) scores within noise of chance under both acc and acc_norm."""
    torch.manual_seed(0)
    config = Registry().resolve("base-s42", preset="smoke").model
    model = ExoTransformer(config).eval()
    if head == "random":
        torch.nn.init.normal_(model.lm_head.weight, std=0.5)
    tokenizer = CompactTokenizer(gpt2(), {i for ids in gpt2().encode_batch(corpus.task_texts()) for i in ids})
    assert tokenizer.n_vocab <= config.vocab_size
    for task, docs in scored.items():
        acc = acc_norm = 0
        for doc in docs:
            gold, _ = t.gold_and_choices(task, doc)
            scores, lengths = _fresh_scores(model, tokenizer, task, doc)
            acc += _argmax_first(scores) == gold
            acc_norm += _argmax_first([s / n for s, n in zip(scores, lengths)]) == gold
        for metric, hits in (("acc", acc), ("acc_norm", acc_norm)):
            assert abs(hits / len(docs) - t.CHANCE[task]) <= tolerance(task, len(docs)), (head, task, metric, hits)
