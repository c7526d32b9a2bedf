"""The smoke world: every fact the smoke corpus states and the smoke evaluation tasks ask about.

One place: the corpus generator (corpus.py) and the task generator (tasks.py) both draw from
`world()`, so a task's gold answer is always something the corpus says. No arithmetic. Entities are fixed
lists; which person has which home, job, colour, food and pet is drawn once with a fixed seed and balanced
(each value used equally often), so no answer is favoured by frequency alone.

Entities are not equally famous: `salience` gives each one a Zipf weight (a seeded rank, so list order means
nothing), and the corpus mentions an entity in proportion to it. A few facts are stated thousands of times,
most a few dozen, the rarest a handful, so a short smoke run learns only part of the world and a model that
learns faster learns more of it: the task scores land between chance and the ceiling and differ between
variants. Gold answers stay balanced over values, so the frequency of a value never gives the answer away.
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass

WORLD_SEED = 20240520
SALIENCE_EXPONENT = 1.5  # Zipf exponent of how often the corpus mentions each entity (0: all equally often)


@dataclass(frozen=True, slots=True, kw_only=True)
class Job:
    name: str  # "baker"
    activity: str  # what the person does at work, present tense: "bakes bread"


@dataclass(frozen=True, slots=True, kw_only=True)
class Animal:
    name: str  # "cow"
    sound: str  # the verb: "moos"
    habitat: str  # "field"
    size: int  # rank for "bigger than" facts (higher is bigger)


@dataclass(frozen=True, slots=True, kw_only=True)
class Material:
    name: str  # "glass"
    dropped: str  # what happens when an object of it is dropped: "breaks into pieces"
    in_water: str  # what it does in water: "sinks"
    in_fire: str  # what it does in a fire: "cracks"


@dataclass(frozen=True, slots=True, kw_only=True)
class Thing:
    name: str  # "cup"
    material: str  # a Material name
    use: str  # what it is for, as a gerund phrase: "drinking water"
    weight: int  # rank for "heavier than" facts


@dataclass(frozen=True, slots=True, kw_only=True)
class Effect:
    """Simple physical cause and effect: when `subject` `cause`, it `effect`."""

    subject: str  # "ice"
    cause: str  # "gets warm"
    effect: str  # "melts"


@dataclass(frozen=True, slots=True, kw_only=True)
class Tool:
    goal: str  # infinitive phrase: "dig a hole in the garden"
    tool: str  # with article: "a shovel"


@dataclass(frozen=True, slots=True, kw_only=True)
class Person:
    name: str
    town: str
    job: Job
    colour: str
    food: str
    pet: Animal


@dataclass(frozen=True, slots=True, kw_only=True)
class World:
    people: tuple[Person, ...]
    towns: tuple[str, ...]
    jobs: tuple[Job, ...]
    colours: tuple[str, ...]
    foods: tuple[str, ...]
    animals: tuple[Animal, ...]
    materials: tuple[Material, ...]
    things: tuple[Thing, ...]
    effects: tuple[Effect, ...]
    tools: tuple[Tool, ...]

    def material(self, name: str) -> Material:
        return next(m for m in self.materials if m.name == name)


NAMES = (
    "Anna Ben Carl Dan Emma Fred Grace Harry Jack Kate Leo Mary Nick Olivia Paul Rose Sam Tom Victor Will "
    "Adam Beth Chris David Frank George Helen Ian James Julia Karen Laura Mark Nina Oscar Peter Ruth Sarah Tim Lucy"
).split()
TOWNS = ("Paris", "London", "Rome", "Berlin", "Madrid", "Dublin", "Oslo", "Vienna")
COLOURS = ("red", "blue", "green", "yellow", "purple", "orange", "pink", "brown")
FOODS = ("apples", "bread", "cheese", "rice", "soup", "cake", "fish", "carrots")
JOBS = (
    Job(name="baker", activity="bakes bread"),
    Job(name="farmer", activity="grows corn"),
    Job(name="doctor", activity="helps sick people"),
    Job(name="teacher", activity="teaches children"),
    Job(name="driver", activity="drives a bus"),
    Job(name="painter", activity="paints houses"),
    Job(name="fisher", activity="catches fish"),
    Job(name="builder", activity="builds walls"),
)
ANIMALS = (
    Animal(name="cow", sound="moos", habitat="field", size=7),
    Animal(name="dog", sound="barks", habitat="house", size=5),
    Animal(name="cat", sound="meows", habitat="house", size=4),
    Animal(name="duck", sound="quacks", habitat="pond", size=3),
    Animal(name="horse", sound="neighs", habitat="stable", size=8),
    Animal(name="pig", sound="oinks", habitat="farm", size=6),
    Animal(name="lion", sound="roars", habitat="jungle", size=7),
    Animal(name="snake", sound="hisses", habitat="desert", size=2),
    Animal(name="owl", sound="hoots", habitat="forest", size=3),
    Animal(name="sheep", sound="bleats", habitat="hill", size=6),
    Animal(name="frog", sound="croaks", habitat="river", size=1),
    Animal(name="wolf", sound="howls", habitat="forest", size=6),
    Animal(name="bee", sound="buzzes", habitat="garden", size=0),
    Animal(name="mouse", sound="squeaks", habitat="barn", size=1),
    Animal(name="elephant", sound="trumpets", habitat="jungle", size=9),
    Animal(name="bird", sound="sings", habitat="tree", size=2),
)
PET_ANIMALS = ("cow", "dog", "cat", "duck", "horse", "pig", "sheep", "mouse")
MATERIALS = (
    Material(name="glass", dropped="breaks into pieces", in_water="sinks", in_fire="cracks"),
    Material(name="rubber", dropped="bounces back up", in_water="floats", in_fire="melts"),
    Material(name="wood", dropped="makes a loud knock", in_water="floats", in_fire="burns"),
    Material(name="metal", dropped="makes a loud clang", in_water="sinks", in_fire="gets hot"),
    Material(name="paper", dropped="flutters to the floor", in_water="gets soggy", in_fire="burns"),
    Material(name="cloth", dropped="falls softly", in_water="gets wet", in_fire="burns"),
)
THINGS = (
    Thing(name="cup", material="glass", use="drinking water", weight=2),
    Thing(name="vase", material="glass", use="holding flowers", weight=3),
    Thing(name="window", material="glass", use="letting in light", weight=5),
    Thing(name="ball", material="rubber", use="playing games", weight=2),
    Thing(name="boot", material="rubber", use="walking in the rain", weight=3),
    Thing(name="chair", material="wood", use="sitting down", weight=6),
    Thing(name="table", material="wood", use="eating meals", weight=8),
    Thing(name="spoon", material="metal", use="eating soup", weight=1),
    Thing(name="hammer", material="metal", use="hitting nails", weight=4),
    Thing(name="key", material="metal", use="opening doors", weight=1),
    Thing(name="book", material="paper", use="reading stories", weight=3),
    Thing(name="letter", material="paper", use="sending news", weight=0),
    Thing(name="coat", material="cloth", use="keeping warm", weight=4),
    Thing(name="towel", material="cloth", use="drying hands", weight=2),
)
EFFECTS = (
    Effect(subject="ice", cause="gets warm", effect="melts"),
    Effect(subject="water", cause="gets very cold", effect="freezes"),
    Effect(subject="water", cause="gets very hot", effect="boils"),
    Effect(subject="snow", cause="is in the sun", effect="melts"),
    Effect(subject="a plant", cause="gets no water", effect="dries up"),
    Effect(subject="a plant", cause="gets sun and water", effect="grows"),
    Effect(subject="bread", cause="stays in the oven too long", effect="burns"),
    Effect(subject="milk", cause="is left out for days", effect="goes sour"),
    Effect(subject="a candle", cause="is lit", effect="gives light"),
    Effect(subject="a wet shirt", cause="hangs in the sun", effect="dries"),
    Effect(subject="a balloon", cause="is poked with a pin", effect="pops"),
    Effect(subject="a ball", cause="is kicked", effect="rolls away"),
    Effect(subject="iron", cause="is left in the rain", effect="rusts"),
    Effect(subject="butter", cause="is put in a hot pan", effect="melts"),
    Effect(subject="a seed", cause="is planted in soil", effect="sprouts"),
    Effect(subject="a bell", cause="is shaken", effect="rings"),
)
TOOLS = (
    Tool(goal="dig a hole in the garden", tool="a shovel"),
    Tool(goal="cut a piece of paper", tool="scissors"),
    Tool(goal="dry your wet hands", tool="a towel"),
    Tool(goal="light a dark room", tool="a lamp"),
    Tool(goal="write a letter", tool="a pen"),
    Tool(goal="sweep the dusty floor", tool="a broom"),
    Tool(goal="open a locked door", tool="a key"),
    Tool(goal="boil some water", tool="a kettle"),
    Tool(goal="cut a loaf of bread", tool="a knife"),
    Tool(goal="hit a nail into wood", tool="a hammer"),
    Tool(goal="carry water from the well", tool="a bucket"),
    Tool(goal="stay dry in the rain", tool="an umbrella"),
    Tool(goal="see things far away", tool="a telescope"),
    Tool(goal="tie a box shut", tool="a rope"),
    Tool(goal="eat a bowl of soup", tool="a spoon"),
    Tool(goal="brush your teeth", tool="a toothbrush"),
)


def _balanced(values: tuple, n: int, rng: random.Random) -> list:
    """n draws that use every value equally often (up to one), in a shuffled order."""
    drawn = [values[i % len(values)] for i in range(n)]
    rng.shuffle(drawn)
    return drawn


@functools.cache
def world() -> World:
    """The smoke world, identical on every call and every machine (fixed seed, fixed lists)."""
    rng = random.Random(WORLD_SEED)
    n = len(NAMES)
    pets = tuple(a for a in ANIMALS if a.name in PET_ANIMALS)
    people = tuple(
        Person(name=name, town=town, job=job, colour=colour, food=food, pet=pet)
        for name, town, job, colour, food, pet in zip(
            NAMES,
            _balanced(TOWNS, n, rng),
            _balanced(JOBS, n, rng),
            _balanced(COLOURS, n, rng),
            _balanced(FOODS, n, rng),
            _balanced(pets, n, rng),
        )
    )
    return World(people=people, towns=TOWNS, jobs=JOBS, colours=COLOURS, foods=FOODS, animals=ANIMALS,
                 materials=MATERIALS, things=THINGS, effects=EFFECTS, tools=TOOLS)


@functools.cache
def salience(items: tuple) -> tuple[float, ...]:
    """Zipf weights 1 / rank**SALIENCE_EXPONENT for `items`, aligned with them; the ranks are a seeded shuffle."""
    ranks = list(range(1, len(items) + 1))
    random.Random(f"salience-{WORLD_SEED}-{items!r}").shuffle(ranks)
    return tuple(1.0 / rank**SALIENCE_EXPONENT for rank in ranks)
