"""Command line: one verb per user intent (docs/architecture.md), a thin layer over the library.

Each verb parses its options, calls the library (exoformer.registry, .runs, .budget, .report), prints and returns an exit code; the
verbs are grouped by what they touch (cli/registry.py, cli/runs.py, cli/report.py, cli/data.py), shared options
are defined once in cli/options.py. Heavy imports (torch) happen inside a verb, so `list`, `show`, `plan` and
`validate` stay torch-free and fast. Bad input anywhere raises UserError: one `error:` line, exit code 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from exoformer.errors import UserError
from exoformer.process_exit import collect_then_freeze_at_exit

VERB_MODULES = ("exoformer.cli.registry", "exoformer.cli.runs", "exoformer.cli.preflight", "exoformer.cli.report",
                "exoformer.cli.compare", "exoformer.cli.power", "exoformer.cli.budget", "exoformer.cli.forecast",
                "exoformer.cli.data", "exoformer.cli.checkpoints")
"""Modules whose VERBS lists make up the command line, in help order."""

EXIT_BAD_INPUT = 2


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad command line as a UserError (one line, exit 2) instead of its usage dump."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UserError(message, where=self.prog, fix=f"see `{self.prog} --help`")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="reproduce.py", description="ExoFormer reproduction harness")
    sub = parser.add_subparsers(dest="verb", metavar="VERB", parser_class=_Parser)
    for module_name in VERB_MODULES:
        for verb in importlib.import_module(module_name).VERBS:
            # argparse %-formats help strings: a verb's one line may say "95%".
            parser_ = sub.add_parser(verb.name, help=verb.help.replace("%", "%%"), description=verb.help)
            verb.add_arguments(parser_)
            parser_.set_defaults(_run=verb.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    collect_then_freeze_at_exit()  # the shutdown after `run` has printed its table (exoformer/process_exit.py)
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        if not getattr(args, "verb", None):
            parser.print_help()
            return EXIT_BAD_INPUT
        return int(args._run(args) or 0)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:  # `reproduce.py list | head`
        return 0
    except KeyboardInterrupt:
        print("interrupted; run the same command to resume", file=sys.stderr)
        return 130
