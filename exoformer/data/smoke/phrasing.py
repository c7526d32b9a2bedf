"""How the smoke world's facts are put into words, shared by the corpus and the evaluation tasks.

Each function returns the exact phrases both sides use, so a task's question and gold answer read the way
the corpus states the fact (the tasks test whether a model learned the world, not whether it can
paraphrase). Questions are (question, answer) pairs; `*_options` give the pool distractors come from.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from exoformer.data.smoke.facts import Animal, Person, Thing, World


def article(noun: str) -> str:
    return ("an " if noun[0] in "aeiou" else "a ") + noun


def Article(noun: str) -> str:  # noqa: N802 (sentence-initial form of `article`)
    return article(noun).capitalize()


@dataclass(frozen=True, slots=True, kw_only=True)
class Question:
    """A multiple-choice question: `answer` is gold; distractors come from `options` minus `answer`."""

    kind: str
    about: str  # the entity asked about (a person's, animal's or thing's name, a tool's goal): its salience
    question: str
    answer: str
    options: tuple[str, ...]


def person_statements(p: Person) -> list[str]:
    """Every fact about a person, in several paraphrases each (a list of lists flattened by the caller)."""
    return [
        f"{p.name} lives in {p.town}.",
        f"{p.name} is {article(p.job.name)}.",
        f"Every day {p.name} {p.job.activity}.",
        f"{p.name}'s favourite colour is {p.colour}.",
        f"{p.name} likes to eat {p.food}.",
        f"{p.name} has a pet {p.pet.name}.",
        f"{p.name}'s pet {p.pet.name} {p.pet.sound}.",
    ]


def person_paraphrases(p: Person) -> list[str]:
    return [
        f"{p.name} has a home in {p.town}.",
        f"{p.name} works as {article(p.job.name)} in {p.town}.",
        f"As {article(p.job.name)}, {p.name} {p.job.activity}.",
        f"All day long, {p.name} {p.job.activity}.",
        f"The colour {p.name} loves most is {p.colour}.",
        f"For lunch {p.name} eats {p.food}.",
        f"{p.name}'s pet is {article(p.pet.name)}.",
        f"When {p.name} comes home, the {p.pet.name} {p.pet.sound}.",
        f"{p.name}'s pet {p.pet.sound}.",
        f"{p.name} took the train to {p.town}.",
        f"{p.name} fed the pet {p.pet.name}.",
    ]


def animal_statements(a: Animal) -> list[str]:
    return [
        f"{Article(a.name)} {a.sound}.",
        f"The {a.name} lives in the {a.habitat}.",
        f"You can find {article(a.name)} in the {a.habitat}.",
        f"The {a.name} {a.sound} loudly.",
        f"Listen to the {a.name}: it {a.sound}.",
    ]


def thing_statements(t: Thing, world: World) -> list[str]:
    m = world.material(t.material)
    return [
        f"A {t.name} is made of {t.material}.",
        f"People use a {t.name} for {t.use}.",
        f"A {t.name} is good for {t.use}.",
        f"When a {t.name} is dropped, it {m.dropped}.",
        f"The {t.name} {m.dropped}.",
        f"If you put a {t.name} in water, it {m.in_water}.",
        f"If you put a {t.name} in a fire, it {m.in_fire}.",
        f"Things made of {m.name} {m.in_water} in water.",
        f"Anything made of {m.name} {m.dropped} when it is dropped.",
    ]


def easy_questions(world: World) -> Iterator[Question]:
    """One-hop questions (ARC-Easy style). The answer restates the fact as the corpus words it, so the
    choices differ only in the asked-for value (no surface cue) and the value follows its cue words."""
    towns, jobs = world.towns, tuple(j.name for j in world.jobs)
    pets = tuple(sorted({p.pet.name for p in world.people}))
    habitats = tuple(sorted({a.habitat for a in world.animals}))
    materials = tuple(m.name for m in world.materials)
    uses = tuple(t.use for t in world.things)
    for p in world.people:
        n = p.name
        yield Question(kind="town", about=n, question=f"Where does {n} live?", answer=f"{n} lives in {p.town}.",
                       options=tuple(f"{n} lives in {v}." for v in towns))
        yield Question(kind="job", about=n, question=f"What is {n}'s job?", answer=f"{n} is {article(p.job.name)}.",
                       options=tuple(f"{n} is {article(v)}." for v in jobs))
        yield Question(kind="colour", about=n, question=f"What is {n}'s favourite colour?",
                       answer=f"{n}'s favourite colour is {p.colour}.",
                       options=tuple(f"{n}'s favourite colour is {v}." for v in world.colours))
        yield Question(kind="food", about=n, question=f"What does {n} like to eat?", answer=f"{n} likes to eat {p.food}.",
                       options=tuple(f"{n} likes to eat {v}." for v in world.foods))
        yield Question(kind="pet", about=n, question=f"What pet does {n} have?", answer=f"{n} has a pet {p.pet.name}.",
                       options=tuple(f"{n} has a pet {v}." for v in pets))
    for a in world.animals:
        yield Question(kind="sound", about=a.name, question=f"How does {article(a.name)} sound?",
                       answer=f"{Article(a.name)} {a.sound}.",
                       options=tuple(f"{Article(a.name)} {b.sound}." for b in world.animals))
        yield Question(kind="habitat", about=a.name, question=f"Where does {article(a.name)} live?",
                       answer=f"The {a.name} lives in the {a.habitat}.",
                       options=tuple(f"The {a.name} lives in the {v}." for v in habitats))
    for t in world.things:
        yield Question(kind="material", about=t.name, question=f"What is a {t.name} made of?",
                       answer=f"A {t.name} is made of {t.material}.",
                       options=tuple(f"A {t.name} is made of {v}." for v in materials))
        yield Question(kind="use", about=t.name, question=f"What is a {t.name} used for?",
                       answer=f"People use a {t.name} for {t.use}.",
                       options=tuple(f"People use a {t.name} for {v}." for v in uses))


def challenge_questions(world: World) -> Iterator[Question]:
    """Two-hop questions (ARC-Challenge style): person -> pet -> sound, thing -> material -> behaviour."""
    sounds = tuple(f"It {a.sound}." for a in world.animals)
    dropped = tuple(f"It {m.dropped}." for m in world.materials)
    in_water = tuple(sorted({f"It {m.in_water}." for m in world.materials}))
    in_fire = tuple(sorted({f"It {m.in_fire}." for m in world.materials}))
    tools = tuple(t.tool for t in world.tools)
    for p in world.people:
        yield Question(kind="pet_sound", about=p.name, question=f"What sound does {p.name}'s pet make?",
                       answer=f"It {p.pet.sound}.", options=sounds)
        yield Question(kind="work", about=p.name, question=f"What does {p.name} do at work?",
                       answer=f"{p.name} {p.job.activity}.",
                       options=tuple(f"{p.name} {j.activity}." for j in world.jobs))
    for t in world.things:
        m = world.material(t.material)
        yield Question(kind="drop", about=t.name, question=f"What happens when you drop a {t.name}?", answer=f"It {m.dropped}.",
                       options=dropped)
        yield Question(kind="water", about=t.name, question=f"What happens when you put a {t.name} in water?",
                       answer=f"It {m.in_water}.", options=in_water)
        yield Question(kind="fire", about=t.name, question=f"What happens when you put a {t.name} in a fire?",
                       answer=f"It {m.in_fire}.", options=in_fire)
    for tool in world.tools:
        yield Question(kind="tool", about=tool.goal, question=f"What do you need to {tool.goal}?", answer=tool.tool, options=tools)


# Sentence frames used by the HellaSwag-, OpenBookQA-, PIQA- and WinoGrande-style tasks. Each frame is a
# pair (prefix, gold ending); the corpus states the full sentence `prefix + " " + ending`.


def work_frame(p: Person) -> tuple[str, str]:
    return f"It is morning and {p.name} goes to work. All day long, {p.name}", f"{p.job.activity}."


def pet_frame(p: Person) -> tuple[str, str]:
    """The pet is not named: the ending needs the person's pet and its sound (or the rarer direct statement)."""
    return f"{p.name} comes home and the pet runs to the door. The pet", f"{p.pet.sound} happily."


def lunch_frame(p: Person) -> tuple[str, str]:
    return f"It is noon and {p.name} sits down to eat. For lunch {p.name} eats", f"{p.food}."


def drop_frame(name: str, t: Thing, world: World) -> tuple[str, str]:
    return f"{name} drops a {t.name} on the floor. The {t.name}", f"{world.material(t.material).dropped}."


def two_people_frames(gold: Person, other: Person, gold_first: bool) -> list[tuple[str, str]]:
    """(sentence with "_" where a name goes, template kind): only `gold` makes the sentence true (WinoGrande)."""
    pair = f"{gold.name} and {other.name}" if gold_first else f"{other.name} and {gold.name}"
    return [
        (f"{pair} went to work, and _ {gold.job.activity} all day.", "work"),
        (f"{pair} came home, and _ fed the pet {gold.pet.name}.", "pet"),
        (f"{pair} said goodbye, and _ took the train to {gold.town}.", "town"),
        (f"{pair} went shopping, and _ bought {gold.food} for lunch.", "food"),
        (f"{pair} painted their rooms, and _ picked {gold.colour} paint.", "colour"),
    ]


def two_animals_frame(gold: Animal, other: Animal, gold_first: bool) -> str:
    pair = f"{gold.name} and the {other.name}" if gold_first else f"{other.name} and the {gold.name}"
    return f"The {pair} were outside, and the _ {gold.sound} loudly."


def two_things_frame(name: str, gold: Thing, other: Thing, gold_first: bool, world: World) -> str:
    pair = f"{gold.name} and the {other.name}" if gold_first else f"{other.name} and the {gold.name}"
    return f"{name} dropped the {pair}, and the _ {world.material(gold.material).dropped}."
