"""The smoke corpus: deterministic bytes, documents each start with EOT, compact vocabulary, entropy, cache."""

import collections
import random

import numpy as np
import pytest

import exoformer.data as data
from exoformer.data.shards import find_shards, read_shard, write_shard
from exoformer.data.smoke import corpus
from exoformer.data.tokenizer import CompactTokenizer, for_data, gpt2
from exoformer.errors import UserError

SMALL = corpus.SmokeCorpusConfig(train_tokens=40_000, val_tokens=8_000, shard_tokens=15_000, seed=3)


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory):
    out = tmp_path_factory.mktemp("smoke")
    return out, corpus.write_corpus(out, SMALL)


def test_generation_is_deterministic(small_corpus, tmp_path):
    first, _ = small_corpus
    corpus.write_corpus(tmp_path, SMALL)
    names = sorted(p.name for p in first.iterdir())
    assert names == sorted(p.name for p in tmp_path.iterdir())
    assert names == ["smoke.json", "smoke_train_000001.bin", "smoke_train_000002.bin", "smoke_train_000003.bin",
                     "smoke_val_000000.bin", "vocab.json"]
    for name in names:
        assert (first / name).read_bytes() == (tmp_path / name).read_bytes(), name


def test_other_seed_gives_other_tokens(small_corpus, tmp_path):
    first, _ = small_corpus
    corpus.write_corpus(tmp_path, corpus.SmokeCorpusConfig(train_tokens=40_000, val_tokens=8_000,
                                                           shard_tokens=15_000, seed=4))
    assert (first / "smoke_val_000000.bin").read_bytes() != (tmp_path / "smoke_val_000000.bin").read_bytes()


def test_every_document_starts_with_eot_and_holds_no_other(small_corpus):
    out, meta = small_corpus
    tokenizer = for_data(out)
    assert isinstance(tokenizer, CompactTokenizer) and meta["eot_token_id"] == tokenizer.eot_token_id == 0
    tokens = np.concatenate([read_shard(p) for p in find_shards(out, "train")])
    assert tokens.size == SMALL.train_tokens and tokens[0] == tokenizer.eot_token_id
    starts = np.flatnonzero(tokens == tokenizer.eot_token_id)
    expected = corpus.documents(random.Random(f"train-{SMALL.seed}"), len(starts))
    segments = np.split(tokens, starts[1:])
    for segment, text in zip(segments[:-1], expected):  # the last document is cut at the size limit
        assert segment[0] == tokenizer.eot_token_id
        assert tokenizer.decode(segment[1:]) == text
    assert len(segments) > 100


def test_compact_vocabulary_is_small_and_covers_the_tasks(small_corpus):
    out, meta = small_corpus
    tokenizer = for_data(out)
    assert meta["n_vocab"] == tokenizer.n_vocab <= corpus.MAX_VOCAB
    for shard in find_shards(out, "train") + find_shards(out, "val"):
        tokens = read_shard(shard)
        assert int(tokens.max()) < tokenizer.n_vocab
        assert not (tokens == tokenizer.unk_token_id).any()
    for text in corpus.task_texts()[:2000:7]:
        assert tokenizer.unk_token_id not in tokenizer.encode(text), text


def test_unigram_entropy_matches_a_hand_computation(tmp_path):
    write_shard(tmp_path / "t_train_000001.bin", [0, 0, 0, 1])
    write_shard(tmp_path / "t_val_000000.bin", [0, 1, 2])
    # add-one counts over ids 0..2: [4, 2, 1] / 7
    expected = -np.mean(np.log([4 / 7, 2 / 7, 1 / 7]))
    assert corpus.unigram_entropy(tmp_path) == pytest.approx(expected)


def test_corpus_entropy_is_well_below_uniform(small_corpus):
    out, meta = small_corpus
    assert meta["unigram_entropy_nats"] == pytest.approx(corpus.unigram_entropy(out))
    assert 2.0 < meta["unigram_entropy_nats"] < np.log(meta["n_vocab"])


def test_resolve_smoke_generates_once_then_reuses(tmp_path, monkeypatch):
    monkeypatch.setenv("EXOFORMER_CACHE", str(tmp_path))
    calls = []
    real = corpus.write_corpus
    monkeypatch.setattr(corpus, "write_corpus", lambda out: calls.append(out) or real(out, SMALL))
    first = data.resolve_data("smoke")
    assert first.parent == tmp_path and first.name.startswith("smoke-v")
    assert data.resolve_data("smoke") == first and len(calls) == 1
    assert [p.name for p in tmp_path.iterdir()] == [first.name]  # no temporary build folder left behind
    assert len(find_shards(first, "train")) == 3


def test_resolve_directory_and_named_data_errors(small_corpus, tmp_path, monkeypatch):
    out, _ = small_corpus
    assert data.resolve_data(str(out)) == out.resolve()
    with pytest.raises(UserError, match="did you mean 'smoke'"):
        data.resolve_data("smoek")
    monkeypatch.setenv("EXOFORMER_DATA_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(UserError, match="prefetch"):
        data.resolve_data("fineweb-edu-10b")
    (tmp_path / "x_train_000001.bin").write_bytes(b"\0" * 2048)
    write_shard(tmp_path / "x_val_000000.bin", [1])
    with pytest.raises(UserError, match="bad magic"):
        data.resolve_data(tmp_path)


def test_gpt2_and_compact_agree_on_text(small_corpus):
    out, _ = small_corpus
    compact = for_data(out)
    text = "Question: Where does Anna live?\nAnswer: Paris"
    assert compact.from_gpt2(gpt2().encode(text)) == compact.encode(text)
    assert compact.decode(compact.encode(text)) == text


def test_salience_is_a_seeded_zipf_over_a_shuffled_order():
    from exoformer.data.smoke.facts import SALIENCE_EXPONENT, salience, world

    people = world().people
    weights = salience(people)
    assert salience(people) == weights and len(weights) == len(people)
    expected = sorted(1 / rank**SALIENCE_EXPONENT for rank in range(1, len(people) + 1))
    assert sorted(weights) == pytest.approx(expected)
    assert list(weights) != sorted(weights, reverse=True)  # the list order is not the fame order


def test_corpus_mentions_people_with_long_tailed_frequencies():
    """The most famous person is mentioned far more often than the least, and mention counts follow salience."""
    import re

    from exoformer.data.smoke.facts import salience, world

    people = world().people
    text = " ".join(corpus.documents(random.Random("train-0"), 1500))
    counts = collections.Counter(re.findall(r"[A-Z][a-z]+", text))
    mentions = np.array([counts[p.name] for p in people], dtype=float)
    weights = np.array(salience(people))
    assert mentions.max() > 30 * max(mentions.min(), 1)
    assert np.corrcoef(np.log(mentions + 1), np.log(weights))[0, 1] > 0.8
