"""Options and helpers shared by the registry verbs (list, show, plan, validate); torch-free."""

from __future__ import annotations

import argparse
from pathlib import Path

from exoformer.harness import runs
from exoformer.harness.registry import Registry
from exoformer.harness.spec import Spec, parse_override


def add_registry_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--registry", metavar="DIR", default=None,
                        help="registry directory (default: $EXOFORMER_REGISTRY or experiments/)")


def add_resolve_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", default=None, help="resolve under this preset instead of each spec's own")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a field, e.g. --set train.steps=100 (repeatable)")
    parser.add_argument("--runs-dir", default=None, metavar="DIR",
                        help="runs root (default: $EXOFORMER_RUNS_DIR or results/runs)")


def load_registry(args: argparse.Namespace) -> Registry:
    return Registry(args.registry)


def split_overrides(overrides: list[str]) -> tuple[list[str], dict[str, object]]:
    """Spec overrides vs `profile.*` overrides (which feed the cost model, never a spec)."""
    spec_sets, profile_sets = [], {}
    for text in overrides:
        key, value = parse_override(text)
        if key.startswith("profile."):
            profile_sets[key[len("profile."):]] = value
        else:
            spec_sets.append(text)
    return spec_sets, profile_sets


def run_dir(spec: Spec, cli_dir: str | None) -> Path:
    return runs.run_dir_for(spec, runs.runs_root(cli_dir, spec))


def run_state(directory: Path) -> tuple[str | None, bool]:
    """(first word of STATUS or None, whether a checkpoint exists) of a run directory."""
    from exoformer.harness.runs import read_status  # STATUS is JSON (docs/architecture.md "Runs")

    record = read_status(directory)
    status = record.state if record else None
    ckpt = directory / "checkpoints"
    has_ckpt = ckpt.is_dir() and any(ckpt.iterdir())
    return status, has_ckpt


def action_for(directory: Path) -> tuple[str, str | None]:
    """run / skip (SUCCEEDED) / resume (a checkpoint exists), and the STATUS word."""
    status, has_ckpt = run_state(directory)
    if status == "SUCCEEDED":
        return "skip", status
    if has_ckpt:
        return "resume", status
    return "run", status
