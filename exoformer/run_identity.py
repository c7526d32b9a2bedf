"""What a run is, recorded once at launch: `RunIdentity`, the run directory's identity file (RunDir.identity_file).

The reading verbs (table, diff, claims, figure, report) need per run: which spec and preset it is, how it
differs from the paper's recipe, whose weights it evaluated and how it was scored. Recording that when the
run is launched lets a cell's comparability be read from the run alone, without re-resolving specs or
parsing the launch command back out of provenance.json.

Fields (all JSON data):
- `spec`, `seed`, `preset`, `hash12`: the resolved spec's name, seed, preset and short hash (= directory name);
- `overrides`: the `--set KEY=VALUE` spec overrides it was made with, as {key: value} in command-line order;
- `reference_hash12`: the hash of the unmodified spec (its own preset, no `--set`): the paper's recipe;
- `preset_hash12`: the hash of the spec under the run's preset without `--set`; when the registry resolves
  that to another hash later, the spec's definition changed since the run (a stale run);
- `source` ("ours" / "checkpoint"), and for a checkpoint run `as_row` and `table` (the row it stands for);
- `scoring`: the evaluation settings as data (suite, shots, limit, batch size, validation tokens, precision);
- `differs`: what differs from the paper's recipe ("preset smoke (paper 450m)", "train.steps=30 (smoke 200)"),
  empty when the run is the paper's recipe: the run's comparability, computed once;
- `data`: the fingerprint of the token data the run trains on (`data_fingerprint`: one sha256 over its
  shards' content digests, as provenance.json records them), None when not known (a checkpoint run, data
  absent from the launching machine);
- `steps`: the training steps of the resolved spec (`status` shows progress against it), None when not known;
- `branch_from`, `branch_step`: for a decay branch of a WSD ladder, the parent spec and the step of the parent's
  checkpoint it started from (train.branch_from, docs/forecast.md "The CPU ladder"); None otherwise.
A run directory without a readable identity file reads DAMAGED (exoformer/runs/run_index.py): the identity is
never derived from spec.yaml or a command line.

Adding a field: give it a default here (older identity files then still read, with that default; `from_dict`
checks it by its annotation), fill it in `exoformer.runs.rundirs` (`identity_for`, the one writer, or
`prepare` for a fact that costs reading the data), and when it changes what a number means, let `differences`
name it. `from_dict` ignores keys it does not know, so a newer file still reads. Torch-free and free of harness
imports (the harness, the stages and the report all read it).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, fields
from typing import Any

from exoformer.errors import UserError
from exoformer.records import load

OURS, CHECKPOINT = "ours", "checkpoint"
SOURCES = (OURS, CHECKPOINT)
"""Where a run's weights come from; the paper's own numbers are the third source, "paper" (reported.yaml)."""

SECTIONS = ("model", "train", "eval", "analysis")
"""The spec file's sections that decide a result (what the spec hash covers)."""
FIRST = ("preset", "eval.limit", "eval.suite", "eval.num_fewshot", "train.final_val_tokens", "train.steps",
         "train.data", "model.n_layer", "model.d_model")
"""Fields named first in `differs`: the ones that most change what a number means."""
CHECKPOINT_FIELDS = ("eval.", "train.final_val_tokens", "eval_precision")
"""For a checkpoint run only the evaluation recipe is ours to differ in (its weights are the paper's)."""
SCORING_FIELDS = ("suite", "num_fewshot", "limit", "batch_size")
"""The eval section's fields recorded under `scoring` (with the validation tokens and the precision)."""
REFERENCE_WORD = "paper"
RECIPE_NEUTRAL = ("train.micro_batch_seqs", "model.attention", "train.compile")
"""Settings that leave the paper's recipe unchanged, so they never make a run not comparable: the micro-batch
(the global batch is `train.batch_tokens`; gradient accumulation makes up the rest), the attention kernel (the
same softmax attention by another implementation) and compiling the model (the same graph, fused)."""


@dataclass(kw_only=True, slots=True, frozen=True)
class RunIdentity:
    """One run's identity, written once at launch (module docstring: the fields and how to add one)."""

    spec: str
    seed: int
    preset: str
    hash12: str
    overrides: dict[str, Any] = field(default_factory=dict)
    reference_hash12: str | None = None
    preset_hash12: str | None = None
    source: str = OURS
    as_row: str | None = None
    table: str | None = None
    scoring: dict[str, Any] = field(default_factory=dict)
    differs: tuple[str, ...] = ()
    data: str | None = None
    steps: int | None = None
    branch_from: str | None = None
    branch_step: int | None = None

    @property
    def comparable(self) -> bool:
        return not self.differs

    @property
    def suite(self) -> str:
        return str(self.scoring.get("suite") or "")

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        return {**data, "overrides": dict(self.overrides), "scoring": dict(self.scoring), "differs": list(self.differs)}

    @classmethod
    def from_dict(cls, data: Any, *, where: str) -> RunIdentity:
        """The identity a record holds (an identity file, a run index entry), each field checked against its
        annotation; a record that is not one of ours is a UserError naming `where`."""
        fix = "the run directory is damaged: re-run it with --force"
        identity = load(cls, data, where=where, what="run identity", fix=fix, ignore_unknown=True)
        if identity.source not in SOURCES:
            raise UserError(f"the run identity says source {identity.source!r}", where=where,
                            fix=f"source is one of {', '.join(SOURCES)}")
        return identity


def data_fingerprint(checksums: Any) -> str | None:
    """The `data` field: sha256 over a data directory's shard name -> content digest mapping (what
    exoformer.runs.rundirs.data_checksums computes and provenance.json records); None without one."""
    if not isinstance(checksums, dict) or not checksums:
        return None
    lines = "".join(f"{checksums[name]}  {name}\n" for name in sorted(checksums))
    return "sha256:" + hashlib.sha256(lines.encode()).hexdigest()


def scoring_of(spec_data: dict[str, Any]) -> dict[str, Any]:
    """The evaluation settings of a spec mapping (Spec.to_dict() or a spec file) as `scoring` records them."""
    ev = spec_data.get("eval") if isinstance(spec_data.get("eval"), dict) else {}
    train = spec_data.get("train") if isinstance(spec_data.get("train"), dict) else {}
    out = {key: ev.get(key) for key in SCORING_FIELDS if key in ev}
    if "final_val_tokens" in train:
        out["final_val_tokens"] = train["final_val_tokens"]
    out["precision"] = spec_data.get("eval_precision") or train.get("precision")
    return out


# ------------------------------------------------------------------------------------------ comparability

def flat_fields(data: dict[str, Any]) -> dict[str, Any]:
    """`preset` and every `section.field` of a spec mapping (a spec file or Spec.to_dict())."""
    out: dict[str, Any] = {"preset": data.get("preset")}
    if "eval_precision" in data:
        out["eval_precision"] = data["eval_precision"]
    for section in SECTIONS:
        body = data.get(section)
        if isinstance(body, dict):
            out.update({f"{section}.{key}": value for key, value in body.items()})
    return out


def _show(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(map(str, value)) + "]"
    return str(value)


def _norm(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def differences(run_spec: dict[str, Any], reference: dict[str, Any], *, checkpoint: bool = False,
                word: str = REFERENCE_WORD) -> list[str]:
    """Human items for each field where a run's spec mapping differs from `reference` (a spec mapping too),
    most telling first. Fields absent from either side are not compared (a spec file of an older layout), nor are
    the RECIPE_NEUTRAL settings.
    Items read "eval.limit=20" (reference null) or "train.steps=30 (paper 38147)", `word` naming the reference.
    """
    ours, ref = flat_fields(run_spec), flat_fields(reference)
    keys = [k for k in ours if k in ref and k not in RECIPE_NEUTRAL and _norm(ours[k]) != _norm(ref[k])]
    if checkpoint:
        keys = [k for k in keys if k == "preset" or k.startswith(CHECKPOINT_FIELDS)]
    keys.sort(key=lambda k: (FIRST.index(k) if k in FIRST else len(FIRST), k))
    items = []
    for key in keys:
        text = f"{'preset ' if key == 'preset' else key + '='}{_show(ours[key])}"
        if ref[key] is not None:
            text += f" ({word} {_show(ref[key])})"
        items.append(text)
    return items


def recipe_differences(run_spec: dict[str, Any], reference: dict[str, Any], under_preset: dict[str, Any] | None,
                       *, checkpoint: bool = False) -> list[str]:
    """What a run differs in from the paper's recipe (`reference`: the spec under its own preset, no --set).

    A run of another preset says so first, then only what differs from the spec under that preset
    (`under_preset`: the `--set` on top of it): the preset's own changes are implied by its name.
    """
    preset, own = run_spec.get("preset"), reference.get("preset")
    if not preset or preset == own or under_preset is None:
        return differences(run_spec, reference, checkpoint=checkpoint)
    under = differences(run_spec, under_preset, checkpoint=checkpoint, word=str(preset))
    return [f"preset {preset} ({REFERENCE_WORD} {own})", *[d for d in under if not d.startswith("preset ")]]
