"""The spec schema: what one experiment is, fully resolved, and how its YAML layers are merged.

A spec body in YAML is flattened at parse time into dotted keys (`model.n_head`, `train.steps`, `seed`, ...),
each value type-checked against the dataclass field it sets and tagged with its origin (`file:line` or
`--set`). Merging is then a plain dict update in the fixed order
defaults -> preset -> variant (model fields) -> spec (group defaults, then the spec) -> CLI `--set`,
and every error found while building the configs points back at the origin of the offending field.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from exoformer.data import SMOKE_DATA, smoke_key
from exoformer.errors import UserError, did_you_mean
from exoformer.eval.precision import check_scoring_precision
from exoformer.eval.suites import SUITES
from exoformer.registry.hashing import hash12, semantic_hash
from exoformer.limits import check_name, check_seed, check_size
from exoformer.model.config import ABLATIONS, ModelConfig
from exoformer.records import check, field_types
from exoformer.train.config import TrainConfig
from exoformer.yaml_lines import load_yaml_text

PROBES = ("first_token_attention", "attention_entropy", "token_similarity", "similarity_to_embeddings",
          "layer_similarity", "pca_components", "gate_stats", "coefficient_stats", "massive_activation",
          "spike_scores")
"""Analysis probes (docs/official_code.md 6.2; docs/paper.md 4.3-4.4); names follow exoformer.analysis.metrics."""



@dataclass(kw_only=True, slots=True, frozen=True)
class EvalConfig:
    """Downstream evaluation. The per-task metric convention (acc vs acc_norm) is a table setting, not this."""

    suite: str = "paper"
    """'paper' (six lm-eval tasks) or 'smoke' (offline tasks learnable from the smoke corpus)."""
    num_fewshot: int = 5
    """Examples in each prompt (paper: 5-shot; official run_eval.py OLMES_DEFAULT_SHOTS)."""
    batch_size: int = 32
    """Loglikelihood requests per forward pass (hashed: it changes bf16 numerics). 1 is the author's run_eval.py,
    and the paper presets use it (experiments/presets.yaml); larger batches move a few bf16 log-likelihoods by a
    bf16 step (right padding, other matmul shapes): on the bundled smoke tasks batch 32 agrees with batch 1 on
    every decision on CPU (benchmarks/bench_bf16_batching.py), on CUDA gpu_check measures it."""
    limit: int | None = None
    """Examples per task; null = all (anything else is not the paper's number)."""
    precision: str = "bf16"
    """Scoring precision (exoformer/eval/precision.py): 'bf16' as the author's run_eval.py, or 'fp32'."""
    enabled: bool = True
    """Score the tasks. Off for ladder runs that feed only the loss law (experiments/ladder.yaml): they still
    validate. Hashed only when off (to_dict), so every other spec keeps its hash."""

    def __post_init__(self) -> None:
        if self.suite not in SUITES:
            raise UserError(f"unknown suite {self.suite!r}", where="eval.suite", fix=did_you_mean(self.suite, SUITES))
        if self.num_fewshot < 0:
            raise UserError(f"must be >= 0, got {self.num_fewshot}", where="eval.num_fewshot", fix="use 5")
        if self.batch_size <= 0:
            raise UserError(f"must be positive, got {self.batch_size}", where="eval.batch_size", fix="use 1 (the author's)")
        if self.limit is not None and self.limit <= 0:
            raise UserError(f"must be positive or null, got {self.limit}", where="eval.limit", fix="use null")
        for name in ("batch_size", "num_fewshot", "limit"):
            check_size(getattr(self, name), where=f"eval.{name}")
        check_scoring_precision(self.precision)

    def to_dict(self) -> dict:
        """Every field, except `enabled` while it is on, so that the hash of every spec that scores is the one it
        had before the field existed (as TrainConfig.to_dict leaves out its unset ladder fields)."""
        return {k: v for k, v in asdict(self).items() if not (k == "enabled" and v)}


@dataclass(kw_only=True, slots=True, frozen=True)
class AnalysisConfig:
    """Representation probes run on a trained model (official analysis.py: 4 sequences, seed 42)."""

    enabled: bool = True
    """Run the probes after evaluation."""
    probes: tuple[str, ...] = PROBES
    """Which probes, a subset of PROBES."""
    ablations: tuple[str, ...] = ABLATIONS
    """Which inference-time ablations (appendix C), a subset of ABLATIONS."""
    n_sequences: int = 4
    """Validation sequences fed through the model (official: 1 batch of 4)."""
    seq_len: int | None = None
    """Tokens per sequence; null = the model's seq_len (official: 2048)."""

    def __post_init__(self) -> None:
        for name, allowed in (("probes", PROBES), ("ablations", ABLATIONS)):
            for item in getattr(self, name):
                if item not in allowed:
                    raise UserError(f"unknown {name[:-1]} {item!r}", where=f"analysis.{name}",
                                    fix=did_you_mean(item, allowed))
        if self.n_sequences <= 0:
            raise UserError(f"must be positive, got {self.n_sequences}", where="analysis.n_sequences", fix="use 4")
        if self.seq_len is not None and self.seq_len <= 0:
            raise UserError(f"must be positive or null, got {self.seq_len}", where="analysis.seq_len",
                            fix="use null (the model's seq_len)")
        for name in ("n_sequences", "seq_len"):
            check_size(getattr(self, name), where=f"analysis.{name}")


@dataclass(kw_only=True, slots=True, frozen=True)
class Placement:
    """Where and how a run executes. Never hashed: moving a run between clusters keeps its identity."""

    profile: str | None = None
    """Cluster profile in slurm/profiles/ (null: the preset's default profile)."""
    partition: str | None = None
    """Slurm partition (null: the profile's)."""
    account: str | None = None
    """Slurm account (null: the profile's)."""
    qos: str | None = None
    """Slurm QOS (null: the profile's)."""
    runs_root: str | None = None
    """Not settable from a registry file or `--set` (FORBIDDEN): the runs root is chosen by --runs-dir or
    $EXOFORMER_RUNS_DIR only, so a registry file can never redirect where runs are written. Kept so that
    run directories written before keep loading."""

    def __post_init__(self) -> None:
        if self.profile is not None:  # a name in slurm/profiles/, never a path
            check_name(self.profile, where="placement.profile", what="profile name")
        for key in ("partition", "account", "qos"):
            value = getattr(self, key)
            plain = isinstance(value, str) and value and all(c.isprintable() and not c.isspace() for c in value)
            if value is not None and not plain:
                raise UserError(f"invalid {key} {str(value)[:40]!r}", where=f"placement.{key}",
                                fix=f"write the Slurm {key} name, without spaces")


@dataclass(kw_only=True, slots=True, frozen=True)
class Spec:
    """One fully resolved experiment. `hash` covers model, train, eval and analysis only."""

    name: str
    """Unique registry name; the first directory level of the run."""
    group: str
    """Registry group it was declared in."""
    variant: str
    """Variant name in experiments/variants.yaml (its fields are already merged into `model`)."""
    shape: str
    """Shape name the model's shape fields came from."""
    preset: str
    """Preset it was resolved under (a CLI --preset swaps it and keeps the name)."""
    seed: int
    """Seed of model init, data order and every RNG (= train.seed)."""
    model: ModelConfig
    train: TrainConfig
    eval: EvalConfig
    analysis: AnalysisConfig
    placement: Placement = field(default_factory=Placement)
    source: str = ""
    """file:line of the declaration (not hashed)."""

    def semantic(self) -> dict:
        """The fields that decide the result; exactly these are hashed. A spec on the bundled smoke world also
        hashes that world's identity (exoformer.data.smoke_key), since its corpus and tasks are code."""
        out = {"model": self.model.to_dict(), "train": self.train.to_dict(),
               "eval": self.eval.to_dict(), "analysis": _plain(asdict(self.analysis))}
        if self.train.data == SMOKE_DATA or self.eval.suite == SMOKE_DATA:
            out["smoke_world"] = smoke_key()
        return out

    @property
    def hash(self) -> str:
        return semantic_hash(self.semantic())

    def stage_functions(self) -> dict:
        """Stages this kind of spec runs instead of the pipeline's own (none: a checkpoint spec imports instead of
        training, exoformer/checkpoint_import/checkpoint_run.py)."""
        return {}

    @property
    def hash12(self) -> str:
        return hash12(self.hash)

    def to_dict(self) -> dict:
        """Everything, in the layout of the run directory's spec.yaml."""
        return {"name": self.name, "group": self.group, "variant": self.variant, "shape": self.shape,
                "preset": self.preset, "seed": self.seed, **self.semantic(),
                "placement": asdict(self.placement), "hash": self.hash}


def _plain(d: dict) -> dict:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}


# ---------------------------------------------------------------------------------------------------------
# Typed flat layers

SECTIONS: dict[str, type] = {"model": ModelConfig, "train": TrainConfig, "eval": EvalConfig,
                             "analysis": AnalysisConfig, "placement": Placement}
TOP_LEVEL_TYPES = {"variant": "str", "preset": "str", "seed": "int", "note": "str"}
"""Spec keys outside the sections. `shape:` (a mapping preset -> shape name) is handled on its own."""

FIELD_TYPES: dict[str, str] = {
    f"{section}.{name}": kind for section, cls in SECTIONS.items() for name, kind in field_types(cls).items()
}
"""Every dotted key a layer may set -> its annotation (exoformer/records.py checks values against it)."""
FIELD_TYPES.update(TOP_LEVEL_TYPES)
FORBIDDEN = {"train.seed": "set the top-level `seed:` (it seeds model init and training)",
             "placement.runs_root": "choose the runs root with --runs-dir or $EXOFORMER_RUNS_DIR"}


@dataclass(slots=True)
class Entry:
    """One value of a flat layer and where it was written."""

    value: Any
    origin: str


Layer = dict[str, Entry]


def set_flat(layer: Layer, key: str, value: Any, origin: str, *, allowed: tuple[str, ...] | None = None) -> None:
    """Type-check and store one dotted key; unknown keys get a did-you-mean over the valid ones."""
    if key in FORBIDDEN:
        raise UserError(f"{key!r} cannot be set here", where=origin, fix=FORBIDDEN[key])
    valid = [k for k in FIELD_TYPES if allowed is None or k.split(".")[0] in allowed]
    if key not in FIELD_TYPES or key not in valid:
        raise UserError(f"unknown key {key!r}", where=origin, fix=did_you_mean(key, valid))
    where = origin if origin.endswith(key) else f"{key} at {origin}"
    value = check(value, FIELD_TYPES[key], where=where, yaml=True)
    if key == "seed":
        check_seed(value, where=where)
    layer[key] = Entry(value, origin)


def flatten_body(body: Any, *, file: str, line: int | None, allowed: tuple[str, ...],
                 extra: tuple[str, ...] = ()) -> tuple[Layer, dict[str, Any]]:
    """Flatten one YAML mapping (a spec, group defaults or preset) into a typed layer.

    `allowed` are the top-level names that may be set (sections and TOP_LEVEL_TYPES keys); `extra` are keys
    returned raw for the caller to interpret (e.g. `shape`, `why`).
    """
    where = f"{file}:{line}" if line else file
    if not isinstance(body, dict):
        raise UserError(f"expected a mapping, got {_kind(body)}", where=where, fix="write `key: value` lines")
    layer: Layer = {}
    raw: dict[str, Any] = {}
    for key, value in body.items():
        origin = f"{file}:{_line(body, key, line)}"
        if key in extra:
            raw[key] = value
            continue
        if not isinstance(key, str) or key not in allowed:
            choices = list(allowed) + list(extra)
            raise UserError(f"unknown key {key!r}", where=origin, fix=did_you_mean(str(key), choices))
        if key in SECTIONS:
            if not isinstance(value, dict):
                raise UserError(f"section {key!r} must be a mapping, got {_kind(value)}", where=origin,
                                fix=f"write `{key}:` followed by indented `field: value` lines")
            for sub, subvalue in value.items():
                sub_origin = f"{file}:{_line(value, sub, line)}"
                set_flat(layer, f"{key}.{sub}", subvalue, sub_origin, allowed=(key,))
        else:
            set_flat(layer, key, value, origin, allowed=allowed)
    return layer, raw


def _line(container: Any, key: Any, default: int | None) -> int | str:
    lines = getattr(container, "key_lines", None)
    if lines and key in lines:
        return lines[key]
    return getattr(container, "line", default) or "?"


def _kind(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, (str, int, float)):
        return f"the value {value!r}"
    return type(value).__name__


def parse_override(text: str) -> tuple[str, Any]:
    """`key=value` from the CLI: the value is read as a YAML scalar (or flow list), like a registry file."""
    if "=" not in text:
        raise UserError(f"{text!r} has no '='", where="--set", fix="write --set key=value, e.g. train.steps=100")
    key, _, raw = text.partition("=")
    key = key.strip()
    try:
        value = load_yaml_text(raw, where=f"--set {key}", numbered=False) if raw.strip() else None
    except UserError as err:
        if not err.problem.startswith("invalid YAML"):
            raise
        shown = raw if len(raw) <= 40 else raw[:37] + "..."
        raise UserError(f"cannot read value {shown!r}", where=f"--set {key}",
                        fix="quote it or write a plain scalar") from None
    return key, value


def build_section(cls: type, layer: Layer, section: str, base: dict[str, Any], *, fallback: str) -> Any:
    """Construct one config dataclass from `base` updated by the layer's `section.*` keys.

    Validation errors of the dataclass (`where='model.anchor'`) are re-anchored at the origin of that field.
    """
    values = dict(base)
    prefix = section + "."
    for key, entry in layer.items():
        if key.startswith(prefix):
            values[key[len(prefix):]] = entry.value
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}
    try:
        return cls(**values)
    except UserError as err:
        origin = layer[err.where].origin if err.where in layer else fallback
        problem = err.problem
        if not _is_file_origin(origin):  # e.g. a shape field from variants.yaml: point at the spec, say where from
            problem, origin = f"{problem} ({err.where} comes from {origin})", fallback
        elif origin.split(":")[0] != fallback.split(":")[0]:  # set elsewhere (a preset): name the spec too
            problem = f"{problem} (while resolving the spec declared at {fallback})"
        where = origin if not err.where or origin.endswith(err.where) else f"{err.where} at {origin}"
        raise UserError(problem, where=where, fix=err.fix) from None
    except TypeError as err:  # a wrong type the field table did not know about: still one line
        raise UserError(f"invalid {section} config ({err})", where=fallback, fix="check the field types") from None


def _is_file_origin(origin: str) -> bool:
    """True for `file:line` and `--set` origins (the places a user wrote), false for derived ones."""
    return origin.startswith("--set") or (":" in origin and "(" not in origin)


STAGES = ("train", "validate", "evaluate", "analyse")
"""The stages of a run, in order (docs/architecture.md "Runs")."""


def wanted_stages(spec: Spec) -> tuple[str, ...]:
    """The stages this spec runs (its evaluation and its analysis can be switched off)."""
    off = {"evaluate": not spec.eval.enabled, "analyse": not spec.analysis.enabled}
    return tuple(s for s in STAGES if not off.get(s, False))
