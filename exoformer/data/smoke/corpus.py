"""The smoke training corpus: English-like documents about the smoke world, as token shards.

Documents come in six genres (fact lists, person profiles, animal and object notes, cause and effect with
tools, short stories that chain facts, quizzes in the evaluation prompts' "Question: ...\\nAnswer: ..."
scaffolding), drawn with a seeded RNG from `facts.world()` and worded by `phrasing`. Each document starts
with EOT, as in the FineWeb-Edu shards (docs/official_code.md section 4.1). Text is GPT-2-tokenized and then
renumbered into the compact vocabulary (tokenizer.CompactTokenizer, `vocab.json`), which also covers every
token of the smoke evaluation prompts, so evaluation never meets `<unk>` from our own tasks.

Files written into the output folder: smoke_train_000001.bin ..., smoke_val_000000.bin, vocab.json and
smoke.json (generator version, parameters, token counts, unigram entropy).
"""

from __future__ import annotations

import functools
import json
import os
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from exoformer.data.shards import find_shards, read_shard, write_shard
from exoformer.data.smoke import phrasing as ph
from exoformer.data.smoke import tasks as smoke_tasks
from exoformer.data.smoke.facts import World, salience, world
from exoformer.data.tokenizer import CompactTokenizer, gpt2
from exoformer.errors import UserError
from exoformer.io import atomic_write_json

GENERATOR_VERSION = 2
MAX_VOCAB = 2048
META_FILE = "smoke.json"


@dataclass(frozen=True, slots=True, kw_only=True)
class SmokeCorpusConfig:
    train_tokens: int = 3_000_000  # enough that a 4-layer d128 model sees each document about once in a smoke run
    val_tokens: int = 200_000
    shard_tokens: int = 1_000_000  # train shard size; several shards exercise shard boundaries in the loader
    seed: int = 0


# --- genres: each takes (world, rng) and returns one document's text (without the EOT) ---------------------
# Every entity is drawn by its salience (facts.salience), so facts are stated with long-tailed frequencies.


def _pick(rng: random.Random, items: tuple):
    return rng.choices(items, weights=salience(items))[0]


def _sample(rng: random.Random, items: tuple, k: int) -> list:
    """k distinct items, each draw weighted by salience among those not drawn yet."""
    weights = dict(zip(range(len(items)), salience(items)))
    chosen = []
    for _ in range(k):
        index = rng.choices(list(weights), weights=list(weights.values()))[0]
        chosen.append(items[index])
        del weights[index]
    return chosen


def _fact_list(w: World, rng: random.Random) -> str:
    sentences = []
    for _ in range(rng.randint(5, 10)):
        source = rng.randrange(4)
        if source == 0:
            p = _pick(rng, w.people)
            sentences.append(rng.choice(ph.person_statements(p) + ph.person_paraphrases(p)))
        elif source == 1:
            sentences.append(rng.choice(ph.animal_statements(_pick(rng, w.animals))))
        elif source == 2:
            sentences.append(rng.choice(ph.thing_statements(_pick(rng, w.things), w)))
        else:
            e = _pick(rng, w.effects)
            sentences.append(f"When {e.subject} {e.cause}, it {e.effect}.")
    return " ".join(sentences)


def _profile(w: World, rng: random.Random) -> str:
    p = _pick(rng, w.people)
    facts = ph.person_statements(p)
    rng.shuffle(facts)
    extra = rng.sample(ph.person_paraphrases(p), rng.randint(2, 5))
    sentences = [facts[0], *extra, *facts[1 : rng.randint(3, len(facts))]]
    return " ".join(sentences)


def _nature(w: World, rng: random.Random) -> str:
    sentences = []
    for a in _sample(rng, w.animals, rng.randint(2, 4)):
        sentences += rng.sample(ph.animal_statements(a), 2)
    for t in _sample(rng, w.things, rng.randint(1, 3)):
        sentences += rng.sample(ph.thing_statements(t, w), 3)
    a, b = _sample(rng, w.animals, 2)
    if a.size != b.size:
        big, small = (a, b) if a.size > b.size else (b, a)
        sentences.append(f"The {big.name} is bigger than the {small.name}.")
    return " ".join(sentences)


def _causes_and_tools(w: World, rng: random.Random) -> str:
    sentences = []
    for e in _sample(rng, w.effects, rng.randint(2, 5)):
        sentences.append(rng.choice([f"When {e.subject} {e.cause}, it {e.effect}.",
                                     f"{e.subject[0].upper()}{e.subject[1:]} {e.effect} when it {e.cause}."]))
    for t in _sample(rng, w.tools, rng.randint(1, 2)):
        sentences.append(rng.choice([f"To {t.goal}, you should use {t.tool}.",
                                     f"How can you {t.goal}? Use {t.tool}.",
                                     f"If you want to {t.goal}, use {t.tool}."]))
    for t in _sample(rng, w.things, rng.randint(0, 1)):
        sentences.append(f"What can you do with a {t.name}? Use it for {t.use}.")
    rng.shuffle(sentences)
    return " ".join(sentences)


def _story(w: World, rng: random.Random) -> str:
    """A short story chaining facts: each hop and its conclusion are stated (so two-hop answers are learnable)."""
    p, q = _sample(rng, w.people, 2)
    t, u = _sample(rng, w.things, 2)
    events = [
        " ".join(ph.work_frame(p)),
        f"{p.name} is {ph.article(p.job.name)} in {p.town}.",
        " ".join(ph.pet_frame(p)),
        " ".join(ph.lunch_frame(p)),
        f"{p.name} has a pet {p.pet.name}, and {p.name}'s pet {p.pet.sound}.",
        " ".join(ph.drop_frame(p.name, t, w)),
        f"The {t.name} is made of {t.material}, and anything made of {t.material} "
        f"{w.material(t.material).dropped} when it is dropped.",
    ]
    for sentence, _kind in ph.two_people_frames(p, q, rng.random() < 0.5):
        events.append(sentence.replace("_", p.name))
    a, b = _sample(rng, w.animals, 2)
    events.append(ph.two_animals_frame(a, b, rng.random() < 0.5).replace("_", a.name))
    if w.material(t.material).dropped != w.material(u.material).dropped:
        events.append(ph.two_things_frame(p.name, t, u, rng.random() < 0.5, w).replace("_", t.name))
    chosen = sorted(rng.sample(range(len(events)), rng.randint(3, len(events))))
    return " ".join(events[i] for i in chosen)


@functools.cache
def _questions(w: World) -> tuple[tuple[ph.Question, ...], tuple[float, ...]]:
    """Every quiz question with its weight: the salience of what it asks about."""
    weights = {}
    for items, names in ((w.people, [p.name for p in w.people]), (w.animals, [a.name for a in w.animals]),
                         (w.things, [t.name for t in w.things]), (w.tools, [t.goal for t in w.tools])):
        weights.update(zip(names, salience(items)))
    questions = (*ph.easy_questions(w), *ph.challenge_questions(w))
    return questions, tuple(weights[q.about] for q in questions)


def _quiz(w: World, rng: random.Random) -> str:
    """Question/answer pairs in the evaluation prompts' scaffolding, separated like few-shot examples."""
    questions, weights = _questions(w)
    lines = []
    for _ in range(rng.randint(3, 6)):
        style = rng.randrange(8)
        if style < 5:
            q = rng.choices(questions, weights=weights)[0]
            lines.append(f"Question: {q.question}\nAnswer: {q.answer}")
        elif style == 5:
            t = _pick(rng, w.tools)
            lines.append(f"Question: How can you {t.goal}?\nAnswer: Use {t.tool}.")
        else:
            p = _pick(rng, w.people)
            label, (stem, end) = rng.choice([("Working", ph.work_frame(p)), ("Pets", ph.pet_frame(p)),
                                             ("Lunch", ph.lunch_frame(p))])
            lines.append(f"{label}: {stem} {end}")
    return "\n\n".join(lines)


GENRES: tuple[Callable[[World, random.Random], str], ...] = (
    _fact_list, _profile, _nature, _causes_and_tools, _story, _quiz)


def documents(rng: random.Random, n: int) -> list[str]:
    w = world()
    return [rng.choice(GENRES)(w, rng) for _ in range(n)]


# --- vocabulary, tokens, shards ----------------------------------------------------------------------------


def task_texts() -> list[str]:
    """Every text the smoke evaluation will tokenize: prompts with each choice, choices alone, few-shot joins."""
    texts = ["Question:", "Answer:", " ", "\n\n"]
    for task, splits in smoke_tasks.build_tasks().items():
        for docs in splits.values():
            for doc in docs:
                prompts = smoke_tasks.prompt_texts(task, doc)
                texts += prompts
                texts.append("\n\n".join(prompts))
                texts += [" " + choice for choice in smoke_tasks.gold_and_choices(task, doc)[1]]
    return texts


def _gpt2_tokens(rng: random.Random, n_tokens: int) -> np.ndarray:
    """GPT-2 ids of whole documents, each preceded by EOT, until at least `n_tokens` (then cut to size)."""
    enc = gpt2()
    parts: list[np.ndarray] = []
    total = 0
    while total < n_tokens:
        for text in documents(rng, 2000):
            ids = enc.encode(text)
            parts.append(np.array([enc.eot_token_id, *ids], dtype=np.int64))
            total += len(ids) + 1
            if total >= n_tokens:
                break
    return np.concatenate(parts)[:n_tokens]


def build_vocab(*token_arrays: np.ndarray) -> CompactTokenizer:
    base = gpt2()
    ids = set(np.unique(np.concatenate(token_arrays)).tolist())
    for ids_of_text in base.encode_batch(task_texts()):
        ids.update(ids_of_text)
    tokenizer = CompactTokenizer(base, sorted(ids))
    if tokenizer.n_vocab > MAX_VOCAB:
        raise AssertionError(f"smoke vocabulary has {tokenizer.n_vocab} ids, more than {MAX_VOCAB}")
    return tokenizer


def unigram_entropy(data_dir: str | os.PathLike) -> float:
    """Cross-entropy (nats/token) of the val shards under the train shards' unigram frequencies (add-one).

    The loss a model that ignores context would reach; a trained model must fall well below it.
    """
    train = np.concatenate([read_shard(p) for p in find_shards(data_dir, "train")])
    val = np.concatenate([read_shard(p) for p in find_shards(data_dir, "val")])
    size = int(max(train.max(initial=0), val.max(initial=0))) + 1
    counts = np.bincount(train, minlength=size).astype(np.float64) + 1.0
    log_p = np.log(counts) - np.log(counts.sum())
    return float(-log_p[val].mean())


def write_corpus(out_dir: str | os.PathLike, config: SmokeCorpusConfig = SmokeCorpusConfig()) -> dict:
    """Generate the corpus into `out_dir` (deterministic: same config, same bytes); return its metadata."""
    if min(config.train_tokens, config.val_tokens, config.shard_tokens) <= 0:
        raise UserError(f"smoke corpus sizes must be positive, got {config}")
    out_dir = Path(out_dir)
    train = _gpt2_tokens(random.Random(f"train-{config.seed}"), config.train_tokens)
    val = _gpt2_tokens(random.Random(f"val-{config.seed}"), config.val_tokens)
    tokenizer = build_vocab(train, val)
    train_compact = np.asarray(tokenizer.from_gpt2(train), dtype=np.uint16)
    val_compact = np.asarray(tokenizer.from_gpt2(val), dtype=np.uint16)
    for index, start in enumerate(range(0, train_compact.size, config.shard_tokens), start=1):
        write_shard(out_dir / f"smoke_train_{index:06d}.bin", train_compact[start : start + config.shard_tokens])
    write_shard(out_dir / "smoke_val_000000.bin", val_compact)
    tokenizer.save(out_dir / "vocab.json")
    meta = {
        "generator_version": GENERATOR_VERSION,
        "config": asdict(config),
        "n_vocab": tokenizer.n_vocab,
        "eot_token_id": tokenizer.eot_token_id,
        "train_tokens": int(train_compact.size),
        "val_tokens": int(val_compact.size),
        "unigram_entropy_nats": unigram_entropy(out_dir),
    }
    atomic_write_json(out_dir / META_FILE, meta)
    return meta


def read_meta(data_dir: str | os.PathLike) -> dict:
    path = Path(data_dir) / META_FILE
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        raise UserError("smoke corpus metadata missing or unreadable", where=str(path),
                        fix="delete the folder so it is regenerated") from None
