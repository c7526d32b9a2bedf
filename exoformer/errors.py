"""The one error type that reaches users: a single line saying what is wrong, where, and the fix.

The CLI prints `str(error)` and exits with code 2; every module raises this for bad input instead of
letting a traceback through.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class UserError(Exception):
    """Bad input from a user: a file, a field, a name, a flag.

    `where` is a file (optionally `file:line`) or a field path such as `model.n_head`;
    `fix` is what to do about it. The message is always rendered on one line, as
    `WHERE: MESSAGE (fix: FIX)`; the CLI prefixes `error: `. A message that already opens with WHERE (`runs root
    /x does not exist` where the runs root is the default one) is not prefixed with it again.
    """

    def __init__(self, problem: str, *, where: str | None = None, fix: str | None = None) -> None:
        self.problem = problem
        self.where = where
        self.fix = fix
        super().__init__(self.render())

    def render(self) -> str:
        line = " ".join(self.problem.split())
        where = " ".join((self.where or "").split())
        if where and line != where and not line.startswith(where + " "):
            line = f"{where}: {line}"
        if self.fix:
            line = f"{line} (fix: {' '.join(self.fix.split())})"
        return line


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """A suggestion for an unknown name: the closest valid choices, or the full list when none is close."""
    choices = sorted(set(choices))
    close = difflib.get_close_matches(name, choices, n=3, cutoff=0.6)
    if close:
        return "did you mean " + " or ".join(repr(c) for c in close) + "?"
    shown = ", ".join(choices[:12]) + (", ..." if len(choices) > 12 else "")
    return f"valid choices: {shown}"
