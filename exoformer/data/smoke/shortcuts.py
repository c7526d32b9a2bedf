"""Shortcut baselines for the smoke tasks: ways to pick an answer without knowing the world.

A task that one of these solves measures the shortcut, not what a model learned, so every baseline must stay
near chance on every task (tests/data/test_smoke_shortcuts.py). Each baseline scores the choices of a doc
from their text alone (length, words shared with the context, how common their words are in the corpus);
ties share the credit, as a random pick among the tied choices would.
"""

from __future__ import annotations

import collections
import functools
import math
import random
import re
from collections.abc import Callable

from exoformer.data.smoke import corpus
from exoformer.data.smoke import tasks as smoke_tasks

WORD = re.compile(r"[a-z']+")
CORPUS_SAMPLE_DOCS = 3000  # documents whose word counts stand in for the corpus's unigram statistics


def words(text: str) -> list[str]:
    return WORD.findall(text.lower())


@functools.cache
def corpus_word_counts() -> collections.Counter:
    """Word counts over a sample of training documents (the same generator and seed as the train shards)."""
    counts: collections.Counter = collections.Counter()
    for doc in corpus.documents(random.Random("train-0"), CORPUS_SAMPLE_DOCS):
        counts.update(words(doc))
    return counts


def _log_frequency(text: str) -> float:
    """Mean log (add-one) corpus frequency of the words of `text`: high for common words."""
    counts = corpus_word_counts()
    ws = words(text) or [""]
    return sum(math.log(counts[w] + 1) for w in ws) / len(ws)


def _context_words(task: str, doc: dict) -> set[str]:
    contexts = [context for context, _ in smoke_tasks.requests(task, doc)]
    if task == "smoke_winogrande":  # the option is inside each context: the shared sentence is what is left
        return set(words(doc["sentence"].replace("_", " ")))
    return set(words(contexts[0]))


Scorer = Callable[[str, dict, str], float]

BASELINES: dict[str, Scorer] = {
    "shortest": lambda task, doc, choice: -len(choice),
    "longest": lambda task, doc, choice: len(choice),
    "fewest_words": lambda task, doc, choice: -len(words(choice)),
    "most_overlap": lambda task, doc, choice: len(set(words(choice)) & _context_words(task, doc)),
    "least_overlap": lambda task, doc, choice: -len(set(words(choice)) & _context_words(task, doc)),
    "most_common_words": lambda task, doc, choice: _log_frequency(choice),
    "rarest_words": lambda task, doc, choice: -_log_frequency(choice),
}


def credit(scores: list[float], gold: int) -> float:
    """1/k when the gold choice is among the k best-scoring choices, else 0."""
    best = max(scores)
    tied = [i for i, s in enumerate(scores) if s == best]
    return 1.0 / len(tied) if gold in tied else 0.0


def baseline_accuracy(name: str, task: str, docs: list[dict]) -> float:
    scorer = BASELINES[name]
    total = 0.0
    for doc in docs:
        gold, choices = smoke_tasks.gold_and_choices(task, doc)
        total += credit([scorer(task, doc, choice) for choice in choices], gold)
    return total / len(docs)


def scored_docs(built: dict[str, dict[str, list[dict]]] | None = None) -> dict[str, list[dict]]:
    """task -> the docs lm-eval scores (test split when the task has one, else validation)."""
    built = built if built is not None else smoke_tasks.build_tasks()
    return {task: splits.get("test") or splits["validation"] for task, splits in built.items()}


def report(built: dict[str, dict[str, list[dict]]] | None = None) -> dict[str, dict[str, float]]:
    """baseline -> task -> accuracy on the scored split."""
    docs = scored_docs(built)
    return {name: {task: baseline_accuracy(name, task, d) for task, d in docs.items()} for name in BASELINES}
