"""Tiny offline stand-ins for the eval tests: a character tokenizer, causal models, and task JSONL files."""

from __future__ import annotations

import json
import random
from pathlib import Path
from types import SimpleNamespace

import torch
from lm_eval.api.model import LM
from torch import nn

from exoformer.eval.suites import PAPER_TASKS, builtin_config, named_splits


class CharTokenizer:
    """One token per character (id = code point - 31, clipped), EOT = 0: token counts equal string lengths."""

    eot_token_id = 0
    n_vocab = 100

    def encode(self, text: str) -> list[int]:
        return [min(max(ord(c) - 31, 1), self.n_vocab - 1) for c in text]

    def decode(self, ids) -> str:
        return "".join(chr(int(i) + 31) for i in ids)


class TinyCausalLM(nn.Module):
    """A 1-layer causal transformer (learned positions) with the ExoTransformer call signature."""

    def __init__(self, vocab_size: int = 100, seq_len: int = 32, d_model: int = 16, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.config = SimpleNamespace(seq_len=seq_len, vocab_size=vocab_size)
        self.embed = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(seq_len, d_model)
        self.attn = nn.MultiheadAttention(d_model, 2, batch_first=True)
        self.lm_head = nn.Linear(d_model, vocab_size)

    def forward(self, idx: torch.Tensor, doc_starts=None) -> torch.Tensor:
        _, t = idx.shape
        assert t <= self.config.seq_len, "input longer than the model's context"
        x = self.embed(idx) + self.pos(torch.arange(t))
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
        x = x + self.attn(x, x, x, attn_mask=mask, need_weights=False)[0]
        return self.lm_head(x) * 3.0


class SuccessorLM(nn.Module):
    """Always predicts (last token + 1) mod V, except that token `eot_after` is followed by EOT (id 0)."""

    def __init__(self, vocab_size: int = 100, seq_len: int = 64, eot_after: int | None = None) -> None:
        super().__init__()
        self.config = SimpleNamespace(seq_len=seq_len, vocab_size=vocab_size)
        self.vocab_size = vocab_size
        self.eot_after = eot_after
        self.calls = 0

    def forward(self, idx: torch.Tensor, doc_starts=None) -> torch.Tensor:
        self.calls += 1
        nxt = (idx + 1) % self.vocab_size
        if self.eot_after is not None:
            nxt = torch.where(idx == self.eot_after, torch.zeros_like(nxt), nxt)
        return nn.functional.one_hot(nxt, self.vocab_size).float() * 10.0


def fake_rows(task: str, n: int, rng: random.Random) -> list[dict]:
    """`n` made-up rows in the real dataset's schema (docs/feasibility.md 2b)."""
    words = ["red", "blue", "green", "stone", "water", "lamp", "cat", "dog", "bread", "salt"]
    rows = []
    for i in range(n):
        pick = rng.sample(words, 4)
        if task in ("arc_easy", "arc_challenge"):
            labels = ["A", "B", "C", "D"] if i % 2 else ["1", "2", "3", "4"]
            rows.append({"id": f"q{i}", "question": f"Which thing is {pick[0]} number {i}?",
                         "choices": {"text": pick, "label": labels}, "answerKey": labels[i % 4]})
        elif task == "openbookqa":
            labels = ["A", "B", "C", "D"]
            rows.append({"id": f"o{i}", "question_stem": f"The {pick[0]} is used for",
                         "choices": {"text": pick, "label": labels}, "answerKey": labels[i % 4]})
        elif task == "hellaswag":
            rows.append({"ind": i, "activity_label": "Cooking", "ctx_a": f"A person takes the {pick[0]}.",
                         "ctx_b": "then they", "ctx": "", "endings": [f"put it on the {w} [title] now." for w in pick],
                         "source_id": "x", "split": "val", "split_type": "indomain", "label": str(i % 4)})
        elif task == "piqa":
            rows.append({"goal": f"How do you clean a {pick[0]}?", "sol1": f"Wash it with {pick[1]}.",
                         "sol2": f"Burn it with {pick[2]}.", "label": i % 2})
        elif task == "winogrande":
            rows.append({"sentence": f"The {pick[0]} was bigger than the {pick[1]} because _ was full.",
                         "option1": pick[0], "option2": pick[1], "answer": str(1 + i % 2)})
        else:
            raise KeyError(task)
    return rows


def write_task_dir(root: Path, *, n: int = 6, tasks=PAPER_TASKS, seed: int = 0) -> Path:
    """`root/<task>/<split>.jsonl` for every split lm-eval's config of each task names."""
    rng = random.Random(seed)
    for task in tasks:
        for split in named_splits(builtin_config(task)):
            path = root / task / f"{split}.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("".join(json.dumps(row) + "\n" for row in fake_rows(task, n, rng)))
    return root


class RecordingLM(LM):
    """Scores a continuation by its length (longest wins) and records every request lm-eval makes."""

    def __init__(self):
        super().__init__()
        self.requests = []

    def loglikelihood(self, requests, disable_tqdm=False):
        self.requests += [r.args for r in requests]
        return [(float(len(cont)), False) for _, cont in (r.args for r in requests)]

    def loglikelihood_rolling(self, requests, disable_tqdm=False):
        raise NotImplementedError

    def generate_until(self, requests, disable_tqdm=False):
        raise NotImplementedError
