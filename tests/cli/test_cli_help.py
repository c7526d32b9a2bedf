"""Every verb's `--help`, and the top-level one, print and exit 0 (argparse %-formats help text)."""

from __future__ import annotations

import contextlib
import io

import pytest

from exoformer.cli import build_parser


def _verbs() -> list[str]:
    parser = build_parser()
    sub = next(action for action in parser._actions if action.dest == "verb")
    return sorted(sub.choices)


@pytest.mark.parametrize("argv", [["--help"]] + [[verb, "--help"] for verb in _verbs()])
def test_help_prints_and_exits_zero(argv):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as stop:
        build_parser().parse_args(argv)
    assert stop.value.code == 0
    assert "usage: reproduce.py" in out.getvalue()
    assert "%%" not in out.getvalue(), "a help text escaped % twice"
