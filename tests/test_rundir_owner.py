"""Run-directory file names are spelled in exactly one module of exoformer/: exoformer/rundir.py.

Scans every string literal that is code, not documentation (docstrings may name the files to explain them).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "exoformer"
OWNER = PACKAGE / "rundir.py"
NAMES = re.compile(r"((eval|analysis|stages|checkpoints|logs)/)?(spec\.yaml|provenance\.json|STATUS|metrics\.jsonl"
                   r"|checkpoints|stages|logs|long\.jsonl|validation\.json|results\.json|probes\.json"
                   r"|spikes\.json|coefficients\.json|manifest\.json|\.launch\.lock|\.jobs|\.job\.lock"
                   r"|\.stop-requested)/?")
"""A literal that IS a run-directory path (what code joins onto a directory); prose that names one is not."""


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
        if isinstance(node, (ast.Module, ast.ClassDef)):  # attribute docstrings: a string right after an assignment
            for before, after in zip(node.body, node.body[1:]):
                if isinstance(before, (ast.Assign, ast.AnnAssign)) and isinstance(after, ast.Expr) \
                        and isinstance(after.value, ast.Constant):
                    ids.add(id(after.value))
    return ids


def spelled_names(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = _docstrings(tree)
    return [f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {node.value!r}" for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
            and NAMES.fullmatch(node.value)]


def test_only_rundir_spells_run_directory_file_names():
    hits = [hit for path in sorted(PACKAGE.rglob("*.py")) if path != OWNER for hit in spelled_names(path)]
    assert hits == []
    assert len(spelled_names(OWNER)) >= 15  # the owner spells them all, so the pattern matches real names


def test_the_scan_catches_a_literal(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text('"""Mentions metrics.jsonl in prose."""\nPATH = "eval/long.jsonl"\nX = run / "checkpoints"\n')
    assert len([h for h in spelled_names_at(planted)]) == 2


def spelled_names_at(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = _docstrings(tree)
    return [node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docs and NAMES.fullmatch(node.value)]
