"""Options shared by the reading verbs (table, diff, figure): which runs to read and where."""

from __future__ import annotations

import argparse
from pathlib import Path

from exoformer.harness import runs
from exoformer.harness.cli_common import add_registry_arg


def add_reading_args(parser: argparse.ArgumentParser) -> None:
    add_registry_arg(parser)
    parser.add_argument("--preset", default=None,
                        help="read the runs of this preset (default: each spec's own preset)")
    parser.add_argument("--runs-dir", default=None, metavar="DIR",
                        help="runs root (default: $EXOFORMER_RUNS_DIR or results/runs)")


def reading_root(args: argparse.Namespace) -> Path:
    return runs.runs_root(args.runs_dir)
