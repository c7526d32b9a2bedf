"""Offline GPT-2 tokenizer (hash-checked) and the compact smoke vocabulary."""

import shutil

import pytest

from exoformer.data import tokenizer as tok
from exoformer.errors import UserError


def test_gpt2_known_ids_offline():
    enc = tok.gpt2()
    assert enc.encode("Hello world") == [15496, 995]
    assert enc.eot_token_id == 50256 and enc.n_vocab == 50257
    assert enc.decode([15496, 995]) == "Hello world"


def test_text_never_produces_eot():
    assert 50256 not in tok.gpt2().encode("end <|endoftext|> start")


def test_hash_mismatch_is_a_one_line_error(tmp_path, monkeypatch):
    source = tok._bpe_files_dir()
    shutil.copy(source / "encoder.json", tmp_path / "encoder.json")
    (tmp_path / "vocab.bpe").write_bytes((source / "vocab.bpe").read_bytes() + b"x")
    monkeypatch.setenv("EXOFORMER_GPT2_DIR", str(tmp_path))
    tok.gpt2.cache_clear()
    try:
        with pytest.raises(UserError, match="does not match tiktoken's gpt2 hash") as info:
            tok.gpt2()
        assert "\n" not in str(info.value) and "vocab.bpe" in str(info.value)
    finally:
        tok.gpt2.cache_clear()


def test_compact_tokenizer_renumbers_and_round_trips(tmp_path):
    base = tok.gpt2()
    text = "Anna lives in a small town. The cow says moo."
    compact = tok.CompactTokenizer(base, base.encode(text))
    ids = compact.encode(text)
    assert max(ids) < compact.n_vocab and compact.decode(ids) == text
    assert compact.eot_token_id == 0 and compact.decode([0]) == "<|endoftext|>"
    assert compact.encode(" zebra")[0] == compact.unk_token_id
    assert compact.decode(compact.encode("moo zebra")).endswith("<unk>")
    compact.save(tmp_path / "vocab.json")
    again = tok.for_data(tmp_path)
    assert isinstance(again, tok.CompactTokenizer) and again.ids == compact.ids
    assert tok.for_data(tmp_path / "elsewhere") is base


def test_corrupt_vocab_file_is_a_user_error(tmp_path):
    (tmp_path / "vocab.json").write_text("{}")
    with pytest.raises(UserError, match="vocab.json"):
        tok.for_data(tmp_path)
