"""Command line: one verb per user intent (DESIGN.md "CLI"), each verb's code in its own module.

A verb module defines `HELP`, `add_arguments(parser)` and `run(args) -> int`; adding a verb is one line in
VERBS. Verb modules keep heavy imports (torch) inside `run`, so `list`, `show`, `plan` and `validate` stay
torch-free and fast. Bad input anywhere raises UserError: printed as one `error:` line, exit code 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from exoformer.errors import UserError

VERBS: dict[str, str] = {
    "list": "exoformer.harness.cli_list",
    "show": "exoformer.harness.cli_show",
    "plan": "exoformer.harness.cli_plan",
    "validate": "exoformer.harness.cli_validate",
    "run": "exoformer.harness.cli_run",
    "status": "exoformer.harness.cli_status",
    "table": "exoformer.report.cli_table",
    "diff": "exoformer.report.cli_diff",
    "figure": "exoformer.report.cli_figure",
    "prefetch": "exoformer.report.cli_prefetch",
    "claims": "exoformer.report.cli_claims",
}
"""Verb name -> module. Later verbs (run, status, table, diff, figure, prefetch) register here."""

EXIT_BAD_INPUT = 2


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad command line as a UserError (one line, exit 2) instead of its usage dump."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UserError(message, where=self.prog, fix=f"see `{self.prog} --help`")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="reproduce.py", description="ExoFormer reproduction harness")
    sub = parser.add_subparsers(dest="verb", metavar="VERB", parser_class=_Parser)
    for name, module_name in VERBS.items():
        module = importlib.import_module(module_name)
        verb = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(verb)
        verb.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
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
