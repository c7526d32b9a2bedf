"""The verb that fetches data on a machine with internet: prefetch."""

from __future__ import annotations

import argparse

from exoformer.cli import options
from exoformer.registry.registry import REPO_ROOT


def prefetch_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default=str(REPO_ROOT / "data"), metavar="DIR",
                        help="where to write tasks/ and finewebedu10B/ (default: data/ in the repository, where "
                             "training looks for FineWeb-Edu when EXOFORMER_DATA_DIR is unset)")
    parser.add_argument("--fineweb-shards", type=int, default=None, metavar="N",
                        help="FineWeb-Edu train shards of 100M tokens to fetch (default: all of them)")
    parser.add_argument("--checkpoints", action="store_true",
                        help="fetch only the author's released checkpoints of table1 (experiments/released.yaml) "
                             "into <out>/released-checkpoints/table1/<row>/, verified by sha256")
    parser.add_argument("--map", dest="checkpoint_map", action="append", default=[], metavar="ROW=OWNER/NAME",
                        help="with --checkpoints: the hub repository of a row the registry does not know "
                             "(repeatable)")
    options.add_registry(parser)


def prefetch_verb(args: argparse.Namespace) -> int:
    if args.checkpoints or args.checkpoint_map:
        return prefetch_checkpoints_verb(args)
    from exoformer.eval.prefetch import FINEWEB_MAX_TRAIN_SHARDS as ALL_SHARDS
    from exoformer.eval.prefetch import prefetch

    prefetch(args.out, fineweb_shards=ALL_SHARDS if args.fineweb_shards is None else args.fineweb_shards)
    return 0


def prefetch_checkpoints_verb(args: argparse.Namespace) -> int:
    """`prefetch --checkpoints`: the released checkpoints of table1, nothing else."""
    from exoformer.checkpoint_import.released_fetch import format_records, parse_map, prefetch_checkpoints

    reg = options.registry(args)
    table = "table1"
    mapping = parse_map(args.checkpoint_map, [r.id for r in reg.tables[table].rows])
    records = prefetch_checkpoints(reg.checkpoints, args.out, table=table, mapping=mapping)
    print(format_records(records, table))
    return 0


VERBS = [options.Verb("prefetch", "download and verify lm-eval task data and FineWeb-Edu shards for offline compute "
                      "nodes (needs internet)", prefetch_arguments, prefetch_verb)]
