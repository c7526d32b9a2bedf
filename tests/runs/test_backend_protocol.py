"""The backends behind one protocol: one module each, capabilities declared and read by their callers, no caller
testing a backend by name."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from exoformer.runs import backends
from exoformer.runs.backends.base import Backend

REPO = Path(__file__).resolve().parents[2]
CAPABILITIES = ("waits", "submits_under_lock", "on_this_machine")


@pytest.mark.parametrize("name", backends.BACKENDS)
def test_each_backend_declares_the_protocol_in_its_own_module(name):
    cls = backends.backend_class(name)
    assert cls.__module__ == f"exoformer.runs.backends.{name}"
    for attr in (*CAPABILITIES, "name"):
        assert hasattr(cls, attr), (name, attr)
    for method in ("check", "launch", "liveness"):
        assert callable(getattr(cls, method)), (name, method)
    assert set(Backend.__annotations__) >= {"name", *CAPABILITIES}


def _backend_name_tests(path: Path) -> list[str]:
    """`x == "slurm"` / `x != "local"` / `x in ("inline", ...)` comparisons in a module."""
    hits = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Compare):
            values = [c.value for c in [node.left, *node.comparators] if isinstance(c, ast.Constant)]
            for c in node.comparators:  # a collection of backend names only (profile sections share "slurm")
                if isinstance(c, (ast.Tuple, ast.List, ast.Set)) and c.elts and all(
                        isinstance(e, ast.Constant) and e.value in backends.BACKENDS for e in c.elts):
                    values.append(c.elts[0].value)
            if any(v in backends.BACKENDS for v in values):
                hits.append(f"{path.relative_to(REPO)}:{node.lineno}")
    return hits


def test_no_caller_tests_a_backend_by_name():
    package = REPO / "exoformer" / "runs" / "backends"
    hits = [hit for path in sorted((REPO / "exoformer").rglob("*.py")) if package not in path.parents
            for hit in _backend_name_tests(path)]
    assert not hits, hits


def test_declared_capabilities_are_read_outside_the_package():
    package = REPO / "exoformer" / "runs" / "backends"
    text = "\n".join(p.read_text() for p in (REPO / "exoformer").rglob("*.py") if package not in p.parents)
    for attr in CAPABILITIES:
        assert f".{attr}" in text, attr
