"""Options shared by several verbs, defined once: --registry, --preset, --set, --runs-dir."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from exoformer.errors import UserError
from exoformer.harness import runs
from exoformer.harness.registry import Registry


def add_registry(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--registry", metavar="DIR", default=None,
                        help="registry directory (default: $EXOFORMER_REGISTRY or experiments/)")


def add_runs_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--runs-dir", default=None, metavar="DIR",
                        help="runs root (default: $EXOFORMER_RUNS_DIR, else results/runs)")


def add_preset(parser: argparse.ArgumentParser, *, reading: bool = False) -> None:
    parser.add_argument("--preset", default=None,
                        help="read the runs of this preset (default: each spec's own preset)" if reading
                        else "resolve under this preset instead of each spec's own")


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


def runs_root(args: argparse.Namespace) -> Path:
    return runs.runs_root(args.runs_dir)


def existing_runs_root(args: argparse.Namespace, *, default_may_be_missing: bool = False) -> Path:
    """The runs root of a verb that reads runs: one that does not exist is an error (a typo would otherwise
    read as "not run" everywhere). `default_may_be_missing`: the default root of a fresh clone is fine."""
    root = runs_root(args)
    if root.is_dir():
        return root
    if root.exists():
        raise UserError(f"runs root {root} is a file, not a directory", where="--runs-dir",
                        fix="name the directory that holds the run directories")
    named = args.runs_dir is not None or bool(os.environ.get(runs.RUNS_ENV))
    if default_may_be_missing and not named:
        return root
    where = "--runs-dir" if args.runs_dir is not None else (f"${runs.RUNS_ENV}" if named else str(root))
    raise UserError(f"runs root {root} does not exist", where=where,
                    fix="name the directory that holds the runs (--runs-dir DIR), or run something first")


class Verb:
    """One verb: its name, one line of help, its arguments and what it runs (args -> exit code)."""

    def __init__(self, name: str, help: str, add_arguments, run) -> None:  # noqa: A002 - argparse's word
        self.name, self.help, self.add_arguments, self.run = name, help, add_arguments, run
