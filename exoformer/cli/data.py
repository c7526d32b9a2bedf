"""The verb that fetches data on a machine with internet: prefetch."""

from __future__ import annotations

import argparse

from exoformer.cli import options
from exoformer.harness.registry import REPO_ROOT


def prefetch_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default=str(REPO_ROOT / "data"), metavar="DIR",
                        help="where to write tasks/ and finewebedu10B/ (default: data/ in the repository, where "
                             "training looks for FineWeb-Edu when EXOFORMER_DATA_DIR is unset)")
    parser.add_argument("--fineweb-shards", type=int, default=None, metavar="N",
                        help="FineWeb-Edu train shards of 100M tokens to fetch (default: all of them)")


def prefetch_verb(args: argparse.Namespace) -> int:
    from exoformer.eval.prefetch import FINEWEB_MAX_TRAIN_SHARDS as ALL_SHARDS
    from exoformer.eval.prefetch import prefetch

    prefetch(args.out, fineweb_shards=ALL_SHARDS if args.fineweb_shards is None else args.fineweb_shards)
    return 0


VERBS = [options.Verb("prefetch", "download and verify lm-eval task data and FineWeb-Edu shards for offline compute "
                      "nodes (needs internet)", prefetch_arguments, prefetch_verb)]
