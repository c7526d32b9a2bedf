"""Options shared by several verbs, defined once: --registry, --preset, --set, --runs-dir."""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path

from exoformer.errors import UserError, did_you_mean
from exoformer.runs import rundirs as runs
from exoformer.registry.registry import Registry


def add_registry(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--registry", metavar="DIR", default=None,
                        help="registry directory (default: $EXOFORMER_REGISTRY or experiments/)")


def add_runs_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs-dir", default=None, metavar="DIR",
                        help="runs root (default: $EXOFORMER_RUNS_DIR, else results/runs)")


READING_PRESET_HELP = ("read the runs of this preset (default: each spec's own preset, e.g. 450m; when none of "
                       "the target's specs has results under its own preset but some have under another, that "
                       "preset is read, marked not comparable, with a note naming the flag; with --preset P "
                       "and no results under P, a note names the preset that has them)")


def add_preset(parser: argparse.ArgumentParser, *, reading: bool = False) -> None:
    parser.add_argument("--preset", default=None,
                        help=READING_PRESET_HELP if reading else "resolve under this preset instead of each spec's own")


def add_overrides(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a field, e.g. --set train.steps=100 (repeatable)")


def add_resolve(parser: argparse.ArgumentParser) -> None:
    """--preset, --set, --runs-dir and --registry: what resolves a spec and where its run lives."""
    add_preset(parser)
    add_overrides(parser)
    add_runs_dir(parser)
    add_registry(parser)


def add_reading(parser: argparse.ArgumentParser) -> None:
    """The reading verbs (table, diff, figure, claims): which runs to read and where."""
    add_registry(parser)
    add_preset(parser, reading=True)
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="read the variant run with these overrides (its hash), e.g. --set train.steps=30 "
                             "(repeatable; default: each spec's current run)")
    add_runs_dir(parser)


def registry(args: argparse.Namespace) -> Registry:
    if args.registry is not None and not str(args.registry).strip():
        raise UserError("the option is empty", where="--registry", fix="name a registry directory, or leave it out")
    return Registry(args.registry)


def check_table(registry: Registry, table_id: str) -> None:
    if table_id not in registry.tables:
        raise UserError(f"unknown table {table_id!r}", where="TABLE", fix=did_you_mean(table_id, registry.tables))


def runs_root(args: argparse.Namespace) -> Path:
    return runs.runs_root(args.runs_dir)


def _root_option(args: argparse.Namespace) -> str:
    """Which setting chose the runs root: --runs-dir, $EXOFORMER_RUNS_DIR or the default."""
    if getattr(args, "runs_dir", None) is not None:
        return "--runs-dir"
    return f"${runs.RUNS_ENV}" if os.environ.get(runs.RUNS_ENV) else "runs root"


def existing_runs_root(args: argparse.Namespace, *, default_may_be_missing: bool = False) -> Path:
    """The runs root of a verb that reads runs: one that is a file, a dangling link or missing is the one
    error line of runs.check_runs_root (a typo would otherwise read as "not run" everywhere).
    `default_may_be_missing`: the default root of a fresh clone is fine (`list`)."""
    root = runs_root(args)
    where = _root_option(args)
    runs.check_runs_root(root, where=where, missing_ok=default_may_be_missing and where == "runs root")
    return root


def writable_runs_root(args: argparse.Namespace) -> Path:
    """The runs root of a verb that writes runs (`run`, `evaluate`): a missing one is created when its parent
    can hold it; a file or a dangling link is the same error line as for the reading verbs."""
    root = runs_root(args)
    runs.check_runs_root(root, where=_root_option(args), missing_ok=True)
    return root


class Verb:
    """One verb: its name, one line of help, its arguments and what it runs (args -> exit code)."""

    def __init__(self, name: str, help: str, add_arguments, run) -> None:  # noqa: A002 - argparse's word
        self.name, self.help, self.add_arguments, self.run = name, help, add_arguments, run


def seed_sds(texts: list[str], *, high: float, bare: bool, columns=None) -> tuple[float | None, dict[str, float]]:
    """--seed-sd as given: (a bare number or None; metric -> sd). Each sd a finite number in (0, high] (bare: in
    [0, high]), once per metric; a bare number, where `bare` allows one, serves every metric and stands alone;
    `columns`, when given, names the metrics allowed."""
    forms = "SD or METRIC=SD" if bare else "METRIC=SD"
    fix = "--seed-sd avg6=0.5 --seed-sd val_ppl=0.07"
    alone, per_metric = None, {}
    for text in texts:
        metric, sep, value = (part.strip() for part in text.rpartition("="))
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if (sep and not metric) or (not sep and not bare) or not math.isfinite(number):
            raise UserError(f"expected {forms} with a finite number, got {text!r}", where="--seed-sd", fix=fix)
        if not (0 <= number <= high if bare else 0 < number <= high):
            raise UserError(f"must be a number in {'[' if bare else '('}0, {high:,.0f}], got {text!r}",
                            where="--seed-sd", fix=fix)
        if alone is not None or (not sep and per_metric) or metric in per_metric:
            raise UserError(f"{metric + ' is' if metric in per_metric else 'a bare number is'} given with another "
                            "--seed-sd for it (once per metric; a bare number serves every metric)",
                            where="--seed-sd", fix="one bare number, or one METRIC=SD per metric" if bare else fix)
        if sep and columns is not None and metric not in columns:
            raise UserError(f"the table has no column {metric!r}; its columns are {', '.join(columns)}",
                            where="--seed-sd", fix=f"--seed-sd {columns[-1]}=SD")
        if sep:
            per_metric[metric] = number
        else:
            alone = number
    return alone, per_metric
