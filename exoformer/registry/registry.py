"""The registry: every named spec, preset, table and figure, loaded from experiments/ (YAML only).

Loading starts at `registry.yaml` in the registry directory and follows `include:` lists (paths relative to
the including file, and inside the registry directory; a cycle is an error naming the files). Each file may
hold any of the sections `include`, `presets`, `shapes`, `groups`, `metrics`, `tables`, `figures`. The
directory's `variants.yaml` (named variants, shapes, shape aliases) is read through the registry too.

Names are global and checked against exoformer/limits.py. Specs, groups, tables and figures share one
namespace, so a TARGET never means two things (a spec named like a table would shadow it). Two pairings are
not shadowing and are allowed: a group and the table of its runs, and a figure drawn from exactly the table
of its name (`specs: [table:ID]`). Presets, shapes and metrics each have their own namespace.

Resolution (`Registry.resolve`) merges, per spec: dataclass defaults -> preset -> variant -> group defaults
-> spec -> CLI overrides (spec.py). Nothing here imports torch.
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from exoformer import limits
from exoformer.environ import env_directory
from exoformer.errors import UserError, did_you_mean
from exoformer.registry import released as released_mod
from exoformer.registry.ladders import check_branches, check_ladders
from exoformer.registry import sweeps as sweeps_mod
from exoformer.registry.claims_schema import DeclaredClaim, parse_claims
from exoformer.registry.spec import (
    SECTIONS,
    AnalysisConfig,
    Entry,
    EvalConfig,
    Layer,
    Placement,
    Spec,
    build_section,
    flatten_body,
    parse_override,
    set_flat,
)
from exoformer.registry.tables import Figure, Metric, Table, parse_figure, parse_metrics, parse_table
from exoformer.model import variants as variants_mod
from exoformer.model.config import ModelConfig
from exoformer.train.config import TrainConfig
from exoformer.yaml_lines import LineDict, load_yaml_with_lines

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_REGISTRY = REPO_ROOT / "experiments"
ROOT_FILE = "registry.yaml"
NOT_REGISTRY_FILES = (variants_mod.VARIANTS_NAME,)
"""Files in the registry directory that are not reached by include: (variants.yaml is read on its own)."""
TARGET_KINDS = ("spec", "group", "table", "figure")
"""Kinds whose names share one namespace (see the module docstring)."""
FILE_SECTIONS = ("include", "presets", "shapes", "groups", "metrics", "tables", "figures", "claims", "released")
SPEC_KEYS = ("variant", "preset", "seed", "note", *SECTIONS)
PRESET_KEYS = tuple(SECTIONS)
DEFAULT_PRESET = "450m"


def registry_dir(explicit: str | os.PathLike | None = None) -> Path:
    """--registry DIR, else $EXOFORMER_REGISTRY, else the repository's experiments/ (an empty value is an error,
    never a silent fallback to the default)."""
    if explicit is not None and not str(explicit).strip():
        raise UserError("empty registry directory", where="--registry",
                        fix="name a directory with registry.yaml, or leave --registry out for experiments/")
    if explicit is None:
        env = os.environ.get("EXOFORMER_REGISTRY")
        if env is not None and not env.strip():
            raise UserError("empty registry directory", where="$EXOFORMER_REGISTRY",
                            fix="unset it, or name a directory with registry.yaml")
        explicit = env_directory("EXOFORMER_REGISTRY", fix="unset it (experiments/ is the default) or point it at "
                                                           "a directory with registry.yaml")
    return Path(explicit) if explicit else DEFAULT_REGISTRY


@dataclass(kw_only=True, slots=True)
class Preset:
    name: str
    why: str
    shape: str | dict[str, str]
    """A shape name (or the alias '450m'), or {gated: NAME, ungated: NAME}."""
    profile: str | None
    layer: Layer
    source: str


@dataclass(kw_only=True, slots=True)
class SpecEntry:
    """A declared (unresolved) spec: group defaults and its own keys, already flattened and type-checked."""

    name: str
    group: str
    layer: Layer
    shapes: dict[str, tuple[str, str]]
    """preset -> (shape name, origin): the spec's own shape for that preset (e.g. the size ladder)."""
    source: str


@dataclass(kw_only=True, slots=True)
class Group:
    name: str
    why: str
    source: str
    specs: list[str] = field(default_factory=list)


class Registry:
    """All registry files of one directory, parsed and cross-checked for names (not yet resolved)."""

    def __init__(self, directory: str | os.PathLike | None = None) -> None:
        self.directory = registry_dir(directory)
        self.files: list[Path] = []
        self.presets: dict[str, Preset] = {}
        self.shapes: dict[str, tuple[dict, str]] = {}
        self.groups: dict[str, Group] = {}
        self.specs: dict[str, SpecEntry] = {}
        self.metrics: dict[str, Metric] = {}
        self.tables: dict[str, Table] = {}
        self.figures: dict[str, Figure] = {}
        self.claims: dict[str, DeclaredClaim] = {}
        self.checkpoints: dict[tuple[str, str], released_mod.Released] = {}
        """(table id, row id) -> the released checkpoint of that row (exoformer.registry.released)."""
        self._defined: dict[tuple[str, str], str] = {}
        self._targets: dict[str, tuple[str, str]] = {}
        root = self.directory / ROOT_FILE
        if not root.is_file():
            raise UserError(f"no {ROOT_FILE} in the registry directory", where=str(self.directory),
                            fix="point --registry (or $EXOFORMER_REGISTRY) at a directory with registry.yaml")
        self._root_dir = self.directory.resolve()
        vfile = self.directory / variants_mod.VARIANTS_NAME
        if not vfile.is_file():
            raise UserError(f"no {variants_mod.VARIANTS_NAME} in the registry directory", where=str(self.directory),
                            fix="add the variants table (copy experiments/variants.yaml)")
        self.variants = variants_mod.load_variants(vfile, display=self.display(vfile))
        self._load_file(root, stack=[])
        self._check_pairings()
        released_mod.check_rows(self.checkpoints, self.tables)
        check_ladders(self)
        check_branches(self)

    # ------------------------------------------------------------------ loading
    def display(self, path: Path) -> str:
        try:
            return str(path.resolve().relative_to(Path.cwd().resolve()))
        except ValueError:
            return str(path)

    def _load_file(self, path: Path, stack: list[Path]) -> None:
        path = path.resolve()
        if path in stack:
            cycle = " -> ".join(self.display(p) for p in [*stack[stack.index(path):], path])
            raise UserError(f"include cycle: {cycle}", where=self.display(stack[-1]),
                            fix="remove one of these include: entries")
        if path in self.files:
            return  # a diamond include: loaded once
        file = self.display(path)
        data = load_yaml_with_lines(path, display=file)
        self.files.append(path)
        if data is None:
            return
        if not isinstance(data, dict):
            raise UserError("a registry file must be a mapping of sections", where=f"{file}:1",
                            fix=f"use the sections {', '.join(FILE_SECTIONS)}")
        for key in data:
            if key not in FILE_SECTIONS:
                raise UserError(f"unknown section {key!r}", where=f"{file}:{data.line_of(key)}",
                                fix=did_you_mean(str(key), FILE_SECTIONS))
        includes = data.get("include") or []
        if not isinstance(includes, list) or not all(isinstance(i, str) for i in includes):
            raise UserError("include must be a list of file names", where=f"{file}:{data.line_of('include')}",
                            fix="write include: [a.yaml, b.yaml]")
        for i, name in enumerate(includes):
            if "\0" in name or len(name) > limits.MAX_INCLUDE_LEN \
                    or any(len(part.encode()) > limits.MAX_COMPONENT_BYTES for part in name.split("/")):
                shown = repr(name[:40] + "..." if len(name) > 40 else name)
                raise UserError(f"included file name {shown} is not a usable file name (NUL byte or too long)",
                                where=f"{file}:{includes.line_of(i)}",
                                fix=f"name a .yaml file of at most {limits.MAX_COMPONENT_BYTES} characters")
            target = path.parent / name
            if Path(name).is_absolute() or not target.resolve().is_relative_to(self._root_dir):
                raise UserError(f"included file {name!r} is outside the registry directory",
                                where=f"{file}:{includes.line_of(i)}",
                                fix=f"include only files inside {self.display(self._root_dir)}")
            if not target.is_file():
                here = [p.name for p in path.parent.glob("*.yaml")]
                raise UserError(f"included file {name!r} not found", where=f"{file}:{includes.line_of(i)}",
                                fix=did_you_mean(name, here))
            self._load_file(target, stack=[*stack, path])
        for section, loader in (("metrics", self._load_metrics), ("presets", self._load_presets),
                                ("shapes", self._load_shapes), ("groups", self._load_groups),
                                ("tables", self._load_tables), ("figures", self._load_figures),
                                ("claims", self._load_claims), ("released", self._load_checkpoints)):
            if section in data:
                body = data[section]
                if not isinstance(body, dict):
                    raise UserError(f"section {section!r} must be a mapping name -> entry",
                                    where=f"{file}:{data.line_of(section)}", fix="indent entries under it")
                loader(body, file)

    def _define(self, kind: str, name: Any, where: str) -> str:
        if not isinstance(name, str):
            raise UserError(f"{kind} name {name!r} is not a string", where=where, fix="quote it")
        limits.check_name(name, where=where, what=f"{kind} name")
        key = (kind, name)
        if key in self._defined:
            raise UserError(f"duplicate {kind} name {name!r} (first defined at {self._defined[key]})", where=where,
                            fix="rename one of them")
        if kind in TARGET_KINDS:
            if name in self._targets and not self._may_pair(self._targets[name][0], kind):
                other_kind, other_where = self._targets[name]
                raise UserError(f"{kind} name {name!r} is already the name of a {other_kind} (defined at "
                                f"{other_where}); specs, groups, tables and figures share one namespace",
                                where=where, fix="rename one of them")
            self._targets.setdefault(name, (kind, where))
            if kind == "spec" and len(self.specs) >= limits.MAX_SPECS:
                raise UserError(f"more than {limits.MAX_SPECS} specs in the registry", where=where,
                                fix="split the registry or shrink its sweeps")
        self._defined[key] = where
        return name

    @staticmethod
    def _may_pair(first: str, second: str) -> bool:
        """The two name sharings that are not shadowing (checked fully by `_check_pairings`)."""
        return {first, second} in ({"group", "table"}, {"table", "figure"})

    def _check_pairings(self) -> None:
        """A figure sharing a table's name must draw exactly that table; nothing else may share a name."""
        for name, fig in self.figures.items():
            if name in self.tables and fig.specs != (f"table:{name}",):
                raise UserError(f"figure name {name!r} is already the name of a table (defined at "
                                f"{self.tables[name].source}) but the figure draws other specs", where=fig.source,
                                fix=f"rename the figure, or draw exactly that table (specs: [table:{name}])")
            if name in self.groups:
                raise UserError(f"figure name {name!r} is already the name of a group", where=fig.source,
                                fix="rename one of them")

    def _load_metrics(self, body: dict, file: str) -> None:
        for mid, metric in parse_metrics(body, file).items():
            self._define("metric", mid, f"{file}:{body.line_of(mid)}")
            self.metrics[mid] = metric

    def _load_presets(self, body: dict, file: str) -> None:
        for name, pbody in body.items():
            where = f"{file}:{body.line_of(name)}"
            self._define("preset", name, where)
            layer, raw = flatten_body(pbody, file=file, line=body.line_of(name), allowed=PRESET_KEYS,
                                      extra=("why", "shape", "profile"))
            why, shape, profile = raw.get("why"), raw.get("shape"), raw.get("profile")
            if not isinstance(why, str) or not why.strip():
                raise UserError(f"preset {name!r} has no one-line why:", where=where, fix="add why: <one line>")
            ok_map = isinstance(shape, dict) and set(shape) == {"gated", "ungated"} and all(
                isinstance(v, str) for v in shape.values())
            if not (isinstance(shape, str) or ok_map):
                raise UserError(f"preset {name!r}: shape must be a shape name or {{gated: NAME, ungated: NAME}}, "
                                f"got {shape!r}", where=where, fix="e.g. shape: smoke")
            if profile is not None and not isinstance(profile, str):
                raise UserError(f"preset {name!r}: profile must be a profile name", where=where,
                                fix="e.g. profile: h100")
            self.presets[name] = Preset(name=name, why=why, shape=dict(shape) if ok_map else shape, profile=profile,
                                        layer=layer, source=where)

    def _load_shapes(self, body: dict, file: str) -> None:
        for name, sbody in body.items():
            where = f"{file}:{body.line_of(name)}"
            self._define("shape", name, where)
            if name in self.variants.shapes or name in self.variants.aliases:
                raise UserError(f"shape {name!r} is already defined in {self.variants.file}", where=where,
                                fix="pick another name")
            if not isinstance(sbody, dict):
                raise UserError(f"shape {name!r} must be a mapping of model shape fields", where=where,
                                fix="write n_layer:, d_model:, n_head:")
            layer: Layer = {}
            for key, value in sbody.items():
                if key == "description":
                    continue
                kw = f"{file}:{sbody.line_of(key)}"
                if key not in variants_mod.SHAPE_FIELDS:
                    raise UserError(f"unknown shape field {key!r}", where=kw,
                                    fix=did_you_mean(str(key), variants_mod.SHAPE_FIELDS))
                set_flat(layer, f"model.{key}", value, kw)
            self.shapes[name] = ({k.split(".", 1)[1]: e.value for k, e in layer.items()}, where)

    def _load_groups(self, body: dict, file: str) -> None:
        for gname, gbody in body.items():
            where = f"{file}:{body.line_of(gname)}"
            self._define("group", gname, where)
            if not isinstance(gbody, dict):
                raise UserError(f"group {gname!r} must be a mapping", where=where,
                                fix="write why:, specs: and/or sweeps:")
            for key in gbody:
                if key not in ("why", "defaults", "specs", "sweeps"):
                    raise UserError(f"unknown key {key!r} in group {gname!r}", where=f"{file}:{gbody.line_of(key)}",
                                    fix=did_you_mean(str(key), ("why", "defaults", "specs", "sweeps")))
            why = gbody.get("why")
            if not isinstance(why, str) or not why.strip() or "\n" in why.strip():
                raise UserError(f"group {gname!r} needs a one-line why:", where=where,
                                fix="add why: <one line saying why this group exists>")
            group = Group(name=gname, why=why.strip(), source=where)
            self.groups[gname] = group
            defaults_layer, defaults_shapes = self._spec_layer(gbody.get("defaults") or {}, file,
                                                               gbody.line_of("defaults"))
            specs = gbody.get("specs") or {}
            if not isinstance(specs, dict):
                raise UserError(f"group {gname!r}: specs must be a mapping name -> spec",
                                where=f"{file}:{gbody.line_of('specs')}",
                                fix="indent `name: {variant: ...}` under specs:")
            for sname, sbody in specs.items():
                swhere = f"{file}:{specs.line_of(sname)}"
                self._define("spec", sname, swhere)
                layer, shapes = self._spec_layer(sbody, file, specs.line_of(sname))
                self._add_spec(sname, group, {**defaults_layer, **layer}, {**defaults_shapes, **shapes}, swhere)
            sweeps = gbody.get("sweeps") or []
            if not isinstance(sweeps, list):
                raise UserError(f"group {gname!r}: sweeps must be a list", where=f"{file}:{gbody.line_of('sweeps')}",
                                fix="write - name: ... grid: ...")
            for i, sweep in enumerate(sweeps):
                line = sweeps.line_of(i)
                if not isinstance(sweep, dict):
                    raise UserError("a sweep must be a mapping", where=f"{file}:{line}", fix="write name: and grid:")
                common_body = {k: v for k, v in sweep.items() if k not in sweeps_mod.SWEEP_KEYS}
                common_body = _with_lines(common_body, sweep)
                common, shapes = self._spec_layer(common_body, file, line)
                for point in sweeps_mod.expand(sweep, {**defaults_layer, **common}, file=file, line=line):
                    self._define("spec", point.name, point.origin)
                    self._add_spec(point.name, group, point.layer, {**defaults_shapes, **shapes}, point.origin)

    def _spec_layer(self, body: Any, file: str, line: int | None) -> tuple[Layer, dict[str, tuple[str, str]]]:
        layer, raw = flatten_body(body, file=file, line=line, allowed=SPEC_KEYS, extra=("shape",))
        shapes: dict[str, tuple[str, str]] = {}
        if "shape" in raw:
            shape = raw["shape"]
            where = f"{file}:{body.line_of('shape')}"
            if not isinstance(shape, dict) or not all(isinstance(v, str) for v in shape.values()):
                raise UserError(f"shape must map preset -> shape name, got {shape!r}", where=where,
                                fix="e.g. shape: {450m: ladder-125m-gated} (other presets keep their own shape)")
            shapes = {str(k): (v, where) for k, v in shape.items()}
        return layer, shapes

    def _add_spec(self, name: str, group: Group, layer: Layer, shapes: dict, source: str) -> None:
        if "variant" not in layer:
            raise UserError(f"spec {name!r} names no variant", where=source,
                            fix=f"add variant: (one of {', '.join(self.variants.list_variants()[:6])}, ...)")
        self.specs[name] = SpecEntry(name=name, group=group.name, layer=layer, shapes=shapes, source=source)
        group.specs.append(name)

    def _load_tables(self, body: dict, file: str) -> None:
        for tid, tbody in body.items():
            where = f"{file}:{body.line_of(tid)}"
            self._define("table", tid, where)
            self.tables[tid] = parse_table(tid, tbody, file, where)

    def _load_figures(self, body: dict, file: str) -> None:
        for fid, fbody in body.items():
            where = f"{file}:{body.line_of(fid)}"
            self._define("figure", fid, where)
            self.figures[fid] = parse_figure(fid, fbody, file, where)

    def _load_claims(self, body: dict, file: str) -> None:
        for cid, claim in parse_claims(body, file).items():
            self._define("claim", cid, claim.source)
            self.claims[cid] = claim

    def _load_checkpoints(self, body: dict, file: str) -> None:
        for key, entry in released_mod.parse_checkpoints(body, file).items():
            self._define("checkpoint", f"{key[0]}.{key[1]}", entry.source)
            self.checkpoints[key] = entry

    # ------------------------------------------------------------------ resolving
    def resolve(self, name: str, *, preset: str | None = None, overrides: list[str] | tuple[str, ...] = ()) -> Spec:
        """The fully resolved Spec of `name`, optionally under another preset and with `--set` overrides."""
        entry = self.specs.get(name)
        if entry is None:
            raise UserError(f"unknown spec {name!r}", where="spec", fix=did_you_mean(name, self.specs))
        layer: Layer = dict(entry.layer)
        cli_shape = None
        for text in overrides:
            key, value = parse_override(text)
            if key == "shape":
                if not isinstance(value, str):
                    raise UserError(f"shape must be a shape name, got {value!r}", where="--set shape",
                                    fix="e.g. --set shape=tiny")
                cli_shape = value
                continue
            set_flat(layer, key, value, f"--set {key}")
        preset_name = preset or (layer["preset"].value if "preset" in layer else DEFAULT_PRESET)
        preset_where = "--preset" if preset else (layer["preset"].origin if "preset" in layer else entry.source)
        if preset_name not in self.presets:
            raise UserError(f"unknown preset {preset_name!r}", where=preset_where, fix=did_you_mean(preset_name,
                                                                                                    self.presets))
        pre = self.presets[preset_name]
        variant = layer["variant"]
        try:
            vfields = self.variants.variant_fields(variant.value)
        except UserError as err:
            raise UserError(err.problem, where=variant.origin, fix=err.fix) from None
        merged: Layer = {f"model.{k}": Entry(v, f"{self.variants.file} (variant {variant.value})")
                         for k, v in vfields.items()}
        merged.update({k: v for k, v in layer.items() if k.startswith("model.")})
        gated_entry = merged.get("model.gated")
        gated = bool(gated_entry.value) if gated_entry else False
        shape_name, shape_where = self._pick_shape(entry, pre, gated, cli_shape)
        shape_values, shape_origin = self._shape_values(shape_name, shape_where)
        model_layer: Layer = {f"model.{k}": Entry(v, shape_origin) for k, v in shape_values.items()}
        model_layer.update({k: v for k, v in pre.layer.items() if k.startswith("model.")})
        model_layer.update(merged)
        full: Layer = {**{k: v for k, v in pre.layer.items() if not k.startswith("model.")},
                       **{k: v for k, v in layer.items() if not k.startswith("model.")}, **model_layer}
        seed = layer["seed"].value if "seed" in layer else 42
        src = entry.source
        model = build_section(ModelConfig, full, "model", {}, fallback=src)
        train = build_section(TrainConfig, full, "train", {"seed": seed}, fallback=src)
        ev = build_section(EvalConfig, full, "eval", {}, fallback=src)
        analysis = build_section(AnalysisConfig, full, "analysis", {}, fallback=src)
        placement = build_section(Placement, full, "placement", {}, fallback=src)
        _cross_check(model, train, analysis, full, src)
        return Spec(name=name, group=entry.group, variant=variant.value, shape=shape_name, preset=preset_name,
                    seed=seed, model=model, train=train, eval=ev, analysis=analysis, placement=placement,
                    source=src)

    def _pick_shape(self, entry: SpecEntry, pre: Preset, gated: bool, cli_shape: str | None) -> tuple[str, str]:
        if cli_shape:
            return cli_shape, "--set shape"
        if pre.name in entry.shapes:
            return entry.shapes[pre.name]
        shape = pre.shape
        if isinstance(shape, dict):
            return shape["gated" if gated else "ungated"], pre.source
        return self.variants.resolve_alias(shape, gated), pre.source

    def _shape_values(self, name: str, where: str) -> tuple[dict, str]:
        if name in self.shapes:
            values, origin = self.shapes[name]
            return values, origin
        if name not in self.variants.shapes:
            raise UserError(f"unknown shape {name!r}", where=where,
                            fix=did_you_mean(name, [*self.variants.shapes, *self.shapes]))
        return self.variants.shape_fields(name), f"{self.variants.file} (shape {name})"

    # ------------------------------------------------------------------ targets
    def select(self, target: str, *, replicates: bool = False) -> list[str]:
        """Spec names for a TARGET: a spec name, a glob over names, a table id, a figure id or a group name.

        A table gives each row's first spec (the paper's run); `replicates=True` adds the seed replicates.
        """
        if target in self.specs:
            return [target]
        if target in self.tables:
            table = self.tables[target]
            return table.spec_names() if replicates else list(dict.fromkeys(r.specs[0] for r in table.rows))
        if target in self.figures:
            return self.figure_specs(self.figures[target])
        if target in self.groups:  # a group of specs, e.g. the CPU ladder `smoke-ladder`
            return list(self.groups[target].specs)
        if any(ch in target for ch in "*?["):
            matched = [n for n in self.specs if fnmatch.fnmatchcase(n, target)]
            if matched:
                return matched
            raise UserError(f"pattern {target!r} matches no spec", where="TARGET",
                            fix="run `reproduce.py list` to see the names")
        choices = [*self.specs, *self.tables, *self.figures]
        raise UserError(f"unknown target {target!r} (not a spec, table or figure)", where="TARGET",
                        fix=did_you_mean(target, choices))

    def figure_specs(self, fig: Figure) -> list[str]:
        names: list[str] = []
        for item in fig.specs:
            if item.startswith("table:"):
                tid = item.split(":", 1)[1]
                if tid not in self.tables:
                    raise UserError(f"figure {fig.id!r} names unknown table {tid!r}", where=fig.source,
                                    fix=did_you_mean(tid, self.tables))
                names.extend(self.tables[tid].spec_names())
            else:
                names.append(item)
        return list(dict.fromkeys(names))

    def yaml_files_in_directory(self) -> list[Path]:
        return sorted(p.resolve() for p in self.directory.glob("*.yaml") if p.name not in NOT_REGISTRY_FILES)


def _with_lines(body: dict, parent: Any) -> dict:
    """A sub-dict keeping the parent's key lines (so errors in a sweep's shared keys keep file:line)."""
    out = LineDict(body)
    out.line = getattr(parent, "line", None)
    out.key_lines = {k: v for k, v in getattr(parent, "key_lines", {}).items() if k in body}
    return out


def _cross_check(model: ModelConfig, train: TrainConfig, analysis: AnalysisConfig, layer: Layer, src: str) -> None:
    def origin(key: str) -> str:
        return layer[key].origin if key in layer else src

    if train.seq_len > model.seq_len:
        raise UserError(f"train.seq_len={train.seq_len} exceeds model.seq_len={model.seq_len}",
                        where=origin("train.seq_len"), fix="lower train.seq_len or pick a longer shape")
    if analysis.seq_len is not None and analysis.seq_len > model.seq_len:
        raise UserError(f"analysis.seq_len={analysis.seq_len} exceeds model.seq_len={model.seq_len}",
                        where=origin("analysis.seq_len"), fix="use null (the model's seq_len)")
    try:
        train.accumulation_steps(1)
    except UserError as err:
        raise UserError(err.problem, where=f"{err.where} at {origin('train.micro_batch_seqs')}", fix=err.fix) from None
