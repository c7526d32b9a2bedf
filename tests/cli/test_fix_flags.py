"""Every fix text names only flags the command showing it has: each `fix=` text of the library is read from the
source (ast) and its `--flags` are run through that verb's argparse parser. A text that names a verb
(`reproduce.py VERB`, `run TARGET`) is checked against that verb; one from a module of a job (train/, runs/,
the run directory) against `run`, the verb that shows a job's errors; any other against the verbs' flags."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from exoformer.cli import build_parser

PACKAGE = Path(__file__).resolve().parents[2] / "exoformer"
FOREIGN = {"--help", "--gpus-per-task", "--reservation", "--write"}
"""Flags of other programs a fix text may name (srun's, sbatch's, `python -m exoformer.data.smoke.tasks`'s) or that
every verb has."""
JOB_MODULES = ("train/", "runs/", "rundir.py", "faults.py", "io.py")


def _verb_flags() -> dict[str, set[str]]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, type(parser._subparsers._group_actions[0])))
    return {name: {o for a in sp._actions for o in a.option_strings} for name, sp in sub.choices.items()}


def _text(node: ast.AST) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join("{}" if isinstance(v, ast.FormattedValue) else _text(v) for v in node.values)
    if isinstance(node, ast.BinOp):
        return _text(node.left) + _text(node.right)
    if isinstance(node, ast.IfExp):
        return _text(node.body) + " | " + _text(node.orelse)
    return ""


def _fix_texts() -> list[tuple[str, str]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            value = None
            if isinstance(node, ast.keyword) and node.arg == "fix":
                value = node.value
            elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and (t.id == "fix" or t.id.endswith("_FIX"))
                                                     for t in node.targets):
                value = node.value
            if value is not None and (text := _text(value)):
                out.append((f"{path.relative_to(PACKAGE)}:{value.lineno}", text))
    return out


FIXES = _fix_texts()


def test_fix_texts_are_found():
    assert len(FIXES) > 100


@pytest.mark.parametrize(("where", "text"), [f for f in FIXES if re.search(r"(?<![\w-])--[a-z]", f[1])],
                         ids=lambda v: v if ".py:" in str(v) else "")
def test_every_flag_of_a_fix_text_is_a_flag_of_its_command(where, text):
    verbs = _verb_flags()
    named = set(re.findall(r"reproduce\.py (\w+)", text)) | ({"run"} if re.search(r"\brun TARGET\b", text) else set())
    named &= set(verbs)
    if named:
        allowed = set().union(*(verbs[v] for v in named))
    elif where.startswith(JOB_MODULES):
        allowed = verbs["run"] | verbs["evaluate"]
    else:
        allowed = set().union(*verbs.values())
    flags = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", text)) - FOREIGN
    assert flags <= allowed, f"{where}: {sorted(flags - allowed)} not flags of {sorted(named) or 'the command'}"
    parser = build_parser()
    choices = parser._subparsers._group_actions[0].choices
    for flag in sorted(flags):  # argparse itself accepts each flag under the verb that owns it
        verb = sorted(v for v in (named or verbs) if flag in verbs[v])[0]
        actions = choices[verb]._actions
        argv = [verb, *("x" for a in actions if not a.option_strings and a.nargs not in ("*", "?"))]
        action = next(a for a in actions if flag in a.option_strings)
        given = re.search(rf"{flag}[ =]([^\s,;)`'\"]+)", text)
        value = [] if action.nargs == 0 else [str(next(iter(action.choices)))] if action.choices else \
            [given.group(1).replace("{}", "1") if given and not given.group(1).startswith("-") else "1"]
        for other in actions:  # required options (evaluate's --as) get a value, unless they are the flag
            if other.required and other.option_strings and flag not in other.option_strings:
                argv += [other.option_strings[0], "x"]
        assert parser.parse_args([*argv, flag, *value]).verb == verb
