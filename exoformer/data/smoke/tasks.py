"""The six smoke evaluation tasks, generated from the smoke world in the real datasets' schemas.

Each task copies the schema of the dataset it stands in for, so lm-eval 0.4.13's built-in prompt logic
(doc_to_text / doc_to_choice / doc_to_target, HellaSwag's process_docs, WinoGrande's partial scoring) runs
unchanged (docs/feasibility.md section 2b). Every gold answer is a fact the smoke corpus states; distractors are
answers of the same kind to other questions, so form and length do not give the answer away, and gold
positions are balanced within every split. The corpus states facts with long-tailed frequencies
(facts.salience); two-choice tasks pair each gold entity with a rival of about the same salience.
tests/data/test_smoke_shortcuts.py checks that no text-only shortcut and no untrained model beats chance. Questions about one fact stay in one split (no few-shot leak).

The files are committed under exoformer/eval/smoke_data/<task>/<split>.jsonl with SHA256SUMS;
`python -m exoformer.data.smoke.tasks --check` regenerates them in memory and compares (`--write` rewrites).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from exoformer.data.smoke import phrasing as ph
from exoformer.data.smoke.facts import World, salience, world
from exoformer.errors import UserError
from exoformer.io import atomic_write_bytes, atomic_write_text

TASKS_SEED = 1234
SMOKE_DATA_DIR = Path(__file__).resolve().parents[2] / "eval" / "smoke_data"
SUMS_FILE = "SHA256SUMS"
LETTERS = ("A", "B", "C", "D")

# split sizes as the built-in configs name the splits; the last one is what lm-eval scores
SPLITS: dict[str, dict[str, int]] = {
    "smoke_arc_easy": {"train": 40, "validation": 40, "test": 150},
    "smoke_arc_challenge": {"train": 20, "validation": 20, "test": 96},
    "smoke_hellaswag": {"train": 40, "validation": 150},
    "smoke_openbookqa": {"train": 20, "validation": 20, "test": 120},
    "smoke_piqa": {"train": 40, "validation": 150},
    "smoke_winogrande": {"train": 40, "validation": 150},
}
N_CHOICES = {"smoke_arc_easy": 4, "smoke_arc_challenge": 4, "smoke_hellaswag": 4, "smoke_openbookqa": 4,
             "smoke_piqa": 2, "smoke_winogrande": 2}
CHANCE: dict[str, float] = {task: 1.0 / n for task, n in N_CHOICES.items()}
TASKS = tuple(SPLITS)


@dataclass(frozen=True, slots=True, kw_only=True)
class Item:
    """One question before its choices are laid out: `group` is the fact it tests (kept in one split)."""

    group: str
    stem: str
    answer: str
    pool: tuple[str, ...]  # answers of the same kind; distractors are drawn from it
    label: str = ""  # HellaSwag activity label


def _distractors(item: Item, n: int, rng: random.Random) -> list[str]:
    pool = sorted(set(item.pool) - {item.answer})
    return rng.sample(pool, n)


def _layout(item: Item, n_choices: int, gold: int, rng: random.Random) -> list[str]:
    choices = _distractors(item, n_choices - 1, rng)
    choices.insert(gold, item.answer)
    return choices


def _near(gold, others: list, items: tuple, k: int, rng: random.Random, pool: int | None = None) -> list:
    """k of the `pool` (default k) entities of `others` nearest to `gold` in salience rank (facts.salience).

    Two-choice tasks pit the gold entity against a rival about as famous, so knowing only the more famous
    one's fact (and ruling it out) does not settle the choice.
    """
    weights = dict(zip(items, salience(items)))
    rank = {item: r for r, item in enumerate(sorted(items, key=lambda i: -weights[i]))}
    nearest = sorted(others, key=lambda o: (abs(rank[o] - rank[gold]), rank[o]))[: pool or k]
    return rng.sample(nearest, k)


def _question_items(questions: Iterable[ph.Question]) -> list[Item]:
    return [Item(group=q.question, stem=q.question, answer=q.answer, pool=q.options) for q in questions]


def _hellaswag_items(w: World, rng: random.Random) -> list[Item]:
    sounds = tuple(f"{a.sound} happily." for a in w.animals)
    activities = tuple(f"{j.activity}." for j in w.jobs)
    dropped = tuple(f"{m.dropped}." for m in w.materials)
    effects = tuple(sorted({f"{e.effect}." for e in w.effects}))
    foods = tuple(f"{f}." for f in w.foods)
    items = []
    for p in w.people:
        stem, end = ph.work_frame(p)
        items.append(Item(group=f"work:{p.name}", stem=stem, answer=end, pool=activities, label="Working"))
        stem, end = ph.pet_frame(p)
        items.append(Item(group=f"pet:{p.name}", stem=stem, answer=end, pool=sounds, label="Pets"))
        stem, end = ph.lunch_frame(p)
        items.append(Item(group=f"lunch:{p.name}", stem=stem, answer=end, pool=foods, label="Lunch"))
    for t in w.things:
        for p in rng.sample(w.people, 4):
            stem, end = ph.drop_frame(p.name, t, w)
            items.append(Item(group=f"drop:{t.name}", stem=stem, answer=end, pool=dropped, label="Accidents"))
    for e in w.effects:
        items.append(Item(group=f"effect:{e.subject}:{e.cause}", stem=f"When {e.subject} {e.cause}, it",
                          answer=f"{e.effect}.", pool=effects, label="Nature"))
    return items


def _openbookqa_items(w: World) -> list[Item]:
    effects = tuple(sorted({e.effect for e in w.effects}))
    tools = tuple(t.tool for t in w.tools)
    materials = tuple(m.name for m in w.materials)
    in_fire = tuple(sorted({m.in_fire for m in w.materials}))
    uses = tuple(t.use for t in w.things)
    habitats = tuple(sorted({a.habitat for a in w.animals}))
    pets = tuple(sorted({ph.article(p.pet.name) for p in w.people}))
    items = [Item(group=f"effect:{e.subject}:{e.cause}", stem=f"When {e.subject} {e.cause}, it", answer=e.effect,
                  pool=effects) for e in w.effects]
    items += [Item(group=f"tool:{t.goal}", stem=f"To {t.goal}, you should use", answer=t.tool, pool=tools)
              for t in w.tools]
    for t in w.things:
        m = w.material(t.material)
        items.append(Item(group=f"material:{t.name}", stem=f"A {t.name} is made of", answer=t.material,
                          pool=materials))
        items.append(Item(group=f"fire:{t.name}", stem=f"If you put a {t.name} in a fire, it", answer=m.in_fire,
                          pool=in_fire))
        items.append(Item(group=f"use:{t.name}", stem=f"A {t.name} is good for", answer=t.use, pool=uses))
    for a in w.animals:
        items.append(Item(group=f"habitat:{a.name}", stem=f"The {a.name} lives in the", answer=a.habitat,
                          pool=habitats))
    for p in w.people:
        items.append(Item(group=f"town:{p.name}", stem=f"{p.name} lives in", answer=p.town, pool=w.towns))
        items.append(Item(group=f"pet:{p.name}", stem=f"{p.name}'s pet is", answer=ph.article(p.pet.name),
                          pool=pets))
    return items


def _piqa_items(w: World, rng: random.Random) -> list[Item]:
    items = []
    for t in w.tools:
        answer = f"Use {t.tool}."
        items += [Item(group=f"tool:{t.goal}", stem=f"How can you {t.goal}?", answer=answer,
                       pool=(answer, f"Use {other.tool}.")) for other in _near(t, [o for o in w.tools if o != t],
                                                                              w.tools, 7, rng)]
    for t in w.things:
        answer = f"Use it for {t.use}."
        items += [Item(group=f"use:{t.name}", stem=f"What can you do with a {t.name}?", answer=answer,
                       pool=(answer, f"Use it for {other.use}.")) for other in _near(t, [o for o in w.things if o != t],
                                                                                    w.things, 7, rng)]
    return items


def _winogrande_items(w: World, rng: random.Random) -> list[Item]:
    """stem = sentence with "_", answer = the gold option, pool = (gold, other).

    Only people: their facts are the long tail (40 people against 16 animals and 14 things), and the rival
    has about the gold person's salience, so the choice needs the gold person's own fact. The job, the most
    often restated fact, is left to the other tasks; food and colour, the least restated, get two rivals."""
    items = []
    for gold in w.people:
        for kind, differs, n in (("pet", lambda o: o.pet != gold.pet, 1), ("town", lambda o: o.town != gold.town, 1),
                                 ("food", lambda o: o.food != gold.food, 2),
                                 ("colour", lambda o: o.colour != gold.colour, 2)):
            for other in _near(gold, [o for o in w.people if differs(o)], w.people, n, rng, pool=4):
                sentence = dict((k, s) for s, k in ph.two_people_frames(gold, other, rng.random() < 0.5))[kind]
                items.append(Item(group=f"{kind}:{gold.name}", stem=sentence, answer=gold.name,
                                  pool=(gold.name, other.name)))
    return items


def _split(items: list[Item], sizes: dict[str, int], rng: random.Random, task: str) -> dict[str, list[Item]]:
    """Assign whole groups to splits in a shuffled order, so a fact never appears in two splits."""
    groups: dict[str, list[Item]] = {}
    for item in items:
        groups.setdefault(item.group, []).append(item)
    order = sorted(groups)
    rng.shuffle(order)
    out: dict[str, list[Item]] = {name: [] for name in sizes}
    names = iter(sizes)
    current = next(names)
    for group in order:
        if len(out[current]) >= sizes[current]:
            current = next(names, None)
            if current is None:
                break
        out[current] += groups[group][: sizes[current] - len(out[current])]
    for name, size in sizes.items():
        if len(out[name]) != size:
            raise AssertionError(f"{task}/{name}: only {len(out[name])} of {size} docs; the world is too small")
    return out


def _balanced_positions(n_docs: int, n_choices: int, rng: random.Random) -> list[int]:
    positions = [i % n_choices for i in range(n_docs)]
    rng.shuffle(positions)
    return positions


def _arc_doc(task: str, split: str, i: int, item: Item, choices: list[str], gold: int) -> dict:
    return {"id": f"{task}/{split}/{i}", "question": item.stem,
            "choices": {"text": choices, "label": list(LETTERS[: len(choices)])}, "answerKey": LETTERS[gold]}


def _openbookqa_doc(task: str, split: str, i: int, item: Item, choices: list[str], gold: int) -> dict:
    return {"id": f"{task}/{split}/{i}", "question_stem": item.stem,
            "choices": {"text": choices, "label": list(LETTERS[: len(choices)])}, "answerKey": LETTERS[gold]}


def _hellaswag_doc(task: str, split: str, i: int, item: Item, choices: list[str], gold: int) -> dict:
    # HellaSwag's process_docs builds ctx_a + " " + ctx_b.capitalize(), which lower-cases all but the first
    # letter of ctx_b, so a name may only sit in ctx_a.
    head, _, tail = item.stem.rpartition(". ")
    if head and tail[1:] == tail[1:].lower():
        ctx_a, ctx_b = head + ".", tail[0].lower() + tail[1:]
    else:
        ctx_a, ctx_b = item.stem, ""
    return {"ind": i, "activity_label": item.label, "ctx_a": ctx_a, "ctx_b": ctx_b,
            "ctx": f"{ctx_a} {ctx_b}".strip(), "endings": choices, "source_id": f"{task}/{split}/{i}",
            "split": split, "split_type": "indomain", "label": str(gold)}


def _piqa_doc(task: str, split: str, i: int, item: Item, choices: list[str], gold: int) -> dict:
    return {"goal": item.stem, "sol1": choices[0], "sol2": choices[1], "label": gold}


def _winogrande_doc(task: str, split: str, i: int, item: Item, choices: list[str], gold: int) -> dict:
    return {"sentence": item.stem, "option1": choices[0], "option2": choices[1], "answer": str(gold + 1)}


def _items(task: str, w: World, rng: random.Random) -> list[Item]:
    if task == "smoke_arc_easy":
        return _question_items(ph.easy_questions(w))
    if task == "smoke_arc_challenge":
        return _question_items(ph.challenge_questions(w))
    if task == "smoke_hellaswag":
        return _hellaswag_items(w, rng)
    if task == "smoke_openbookqa":
        return _openbookqa_items(w)
    if task == "smoke_piqa":
        return _piqa_items(w, rng)
    return _winogrande_items(w, rng)


DOC_BUILDERS: dict[str, Callable[..., dict]] = {
    "smoke_arc_easy": _arc_doc, "smoke_arc_challenge": _arc_doc, "smoke_hellaswag": _hellaswag_doc,
    "smoke_openbookqa": _openbookqa_doc, "smoke_piqa": _piqa_doc, "smoke_winogrande": _winogrande_doc,
}


def build_tasks() -> dict[str, dict[str, list[dict]]]:
    """Every task's docs per split, deterministic (fixed seed per task, fixed world)."""
    w = world()
    out: dict[str, dict[str, list[dict]]] = {}
    for index, task in enumerate(TASKS):
        rng = random.Random(TASKS_SEED * 100 + index)
        splits = _split(_items(task, w, rng), SPLITS[task], rng, task)
        out[task] = {}
        for split, items in splits.items():
            golds = _balanced_positions(len(items), N_CHOICES[task], rng)
            out[task][split] = [
                DOC_BUILDERS[task](task, split, i, item, _layout(item, N_CHOICES[task], gold, rng), gold)
                for i, (item, gold) in enumerate(zip(items, golds))
            ]
    return out


def gold_and_choices(task: str, doc: dict) -> tuple[int, list[str]]:
    """(gold index, choice texts) of a doc, read the way lm-eval's built-in configs read it."""
    if task in ("smoke_arc_easy", "smoke_arc_challenge", "smoke_openbookqa"):
        return doc["choices"]["label"].index(doc["answerKey"].lstrip()), doc["choices"]["text"]
    if task == "smoke_hellaswag":
        return int(doc["label"]), doc["endings"]
    if task == "smoke_piqa":
        return doc["label"], [doc["sol1"], doc["sol2"]]
    return int(doc["answer"]) - 1, [doc["option1"], doc["option2"]]


def requests(task: str, doc: dict) -> list[tuple[str, str]]:
    """(context, continuation) per choice, as lm-eval's built-in configs build them; the continuation is scored.

    WinoGrande's partial scoring puts each option in the context and scores the shared rest of the sentence.
    """
    _, choices = gold_and_choices(task, doc)
    if task == "smoke_winogrande":
        cut = doc["sentence"].index("_")
        rest = " " + doc["sentence"][cut + 1 :].strip()
        return [(doc["sentence"][:cut] + option, rest) for option in choices]
    if task in ("smoke_arc_easy", "smoke_arc_challenge"):
        context = f"Question: {doc['question']}\nAnswer:"
    elif task == "smoke_piqa":
        context = f"Question: {doc['goal']}\nAnswer:"
    elif task == "smoke_openbookqa":
        context = doc["question_stem"]
    else:
        context = f"{doc['activity_label']}: {doc['ctx_a']} {doc['ctx_b'].capitalize()}".strip()
    return [(context, " " + choice) for choice in choices]


def prompt_texts(task: str, doc: dict) -> list[str]:
    """Every text lm-eval scores for a doc (context + " " + choice), as its built-in configs build them."""
    return [context + continuation for context, continuation in requests(task, doc)]


def render_jsonl(docs: list[dict]) -> bytes:
    return "".join(json.dumps(doc, ensure_ascii=False) + "\n" for doc in docs).encode("utf-8")


def rendered_files() -> dict[str, bytes]:
    """Relative path -> bytes of every data file, as the generator makes them."""
    files = {f"{task}/{split}.jsonl": render_jsonl(docs)
             for task, splits in build_tasks().items() for split, docs in splits.items()}
    return dict(sorted(files.items()))


def render_sums(files: dict[str, bytes]) -> str:
    return "".join(f"{hashlib.sha256(data).hexdigest()}  {name}\n" for name, data in files.items())


def smoke_task_files(root: str | Path | None = None) -> dict[str, dict[str, Path]]:
    """task -> split -> path of its JSONL file (the files may not exist; see verify_smoke_data)."""
    root = Path(root) if root is not None else SMOKE_DATA_DIR
    return {task: {split: root / task / f"{split}.jsonl" for split in sizes} for task, sizes in SPLITS.items()}


def verify_smoke_data(root: str | Path | None = None) -> None:
    """Check every smoke task file against SHA256SUMS; UserError naming the first bad or missing file."""
    root = Path(root) if root is not None else SMOKE_DATA_DIR
    fix = "restore it from git or run `python -m exoformer.data.smoke.tasks --write`"
    sums_path = root / SUMS_FILE
    if not sums_path.is_file():
        raise UserError("smoke task checksum file is missing", where=str(sums_path), fix=fix)
    from exoformer.data.checksums import read_sums

    expected = read_sums(sums_path, fix=fix)  # a malformed line is an error at file:line
    for splits in smoke_task_files(root).values():
        for path in splits.values():
            name = path.relative_to(root).as_posix()
            if not path.is_file():
                raise UserError("smoke task data file is missing", where=str(path), fix=fix)
            if name not in expected:
                raise UserError(f"no checksum for this file in {SUMS_FILE}", where=str(path), fix=fix)
            found = hashlib.sha256(path.read_bytes()).hexdigest()
            if found != expected[name]:
                raise UserError(f"checksum mismatch (sha256 {found[:12]}..., expected {expected[name][:12]}...)",
                                where=str(path), fix=fix)


def check(root: str | Path | None = None) -> list[str]:
    """Regenerate in memory and list every difference with the files on disk (empty: all equal)."""
    root = Path(root) if root is not None else SMOKE_DATA_DIR
    files = rendered_files()
    files[SUMS_FILE] = render_sums(files).encode()
    problems = []
    for name, data in files.items():
        path = root / name
        if not path.is_file():
            problems.append(f"{path}: missing")
        elif path.read_bytes() != data:
            problems.append(f"{path}: differs from the generator's output")
    return problems


def write(root: str | Path | None = None) -> None:
    root = Path(root) if root is not None else SMOKE_DATA_DIR
    files = rendered_files()
    for name, data in files.items():
        atomic_write_bytes(root / name, data)
    atomic_write_text(root / SUMS_FILE, render_sums(files))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m exoformer.data.smoke.tasks", description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="verify the committed files equal the generator's")
    parser.add_argument("--write", action="store_true", help="(re)write the files and SHA256SUMS")
    parser.add_argument("--root", default=None, help="data folder (default: exoformer/eval/smoke_data)")
    args = parser.parse_args(argv)
    if args.write:
        write(args.root)
        print(f"wrote smoke task files under {args.root or SMOKE_DATA_DIR}")
    if args.check or not args.write:
        problems = check(args.root)
        for problem in problems:
            print(problem, file=sys.stderr)
        if problems:
            return 1
        print("smoke task files match the generator")
    return 0


if __name__ == "__main__":
    sys.exit(main())
