"""The package import graph: data flows one way (docs/architecture.md), so no two packages import each other.

Every `import` and `from ... import` in exoformer/ (top level and inside functions alike) is an edge between
subpackages (exoformer.runs, exoformer.report, ...; a top-level module such as exoformer/rundir.py is a
package of its own). Entry points (`__main__.py`, exoformer/cli/) sit above everything and may import anything,
so they are left out of the cycle check.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "exoformer"
ENTRY_PACKAGES = {"cli"}


def _package_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "exoformer" else None


def _edges() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT)
        source = rel.parts[0].removesuffix(".py")
        if source in ENTRY_PACKAGES or path.name == "__main__.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + ([f"{node.module}.{a.name}" for a in node.names]
                                         if node.module == "exoformer" else [])
            for name in names:
                target = _package_of(name)
                if target and target != source:
                    graph.setdefault(source, set()).add(target)
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_package_cycles():
    assert _cycle(_edges()) is None, " -> ".join(_cycle(_edges()) or [])


def test_harness_never_imports_report_and_report_never_imports_train_or_model():
    graph = _edges()
    assert not {"report"} & (graph.get("registry", set()) | graph.get("runs", set()) | graph.get("budget", set()))
    assert not {"train", "model"} & graph.get("report", set())


def test_the_cycle_finder_finds_a_planted_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
