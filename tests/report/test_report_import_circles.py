"""No file of the report layer is on an import circle (imports inside functions count: a lazy import only hides one)."""

from __future__ import annotations

import ast
from pathlib import Path

from exoformer.registry.registry import REPO_ROOT

PACKAGE = REPO_ROOT / "exoformer"


def _module(path: Path) -> str:
    parts = path.relative_to(REPO_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """module -> the exoformer modules it imports anywhere in its file (`from a import b` counts a.b when b is one)."""
    files = {_module(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module)
                found |= {f"{node.module}.{alias.name}" for alias in node.names}
        graph[name] = {m for m in found if m in files and m != name and not name.startswith(m + ".")}
    return graph


def cycles_through(graph: dict[str, set[str]], prefix: str) -> list[list[str]]:
    """Import circles that pass through a module whose name starts with `prefix` (one per starting module)."""
    out = []
    for start in sorted(m for m in graph if m.startswith(prefix)):
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for nxt in sorted(graph[node]):
                if nxt == start:
                    out.append(path + [start])
                    stack.clear()
                    break
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, path + [nxt]))
    return out


def test_the_detector_finds_a_circle():
    graph = {"exoformer.report.a": {"exoformer.report.b"}, "exoformer.report.b": {"exoformer.x"},
             "exoformer.x": {"exoformer.report.a"}, "exoformer.y": set()}
    assert cycles_through(graph, "exoformer.report.a") == [["exoformer.report.a", "exoformer.report.b", "exoformer.x",
                                                           "exoformer.report.a"]]
    assert cycles_through(graph, "exoformer.y") == []


def test_no_report_file_is_on_an_import_circle():
    assert cycles_through(import_graph(), "exoformer.report.") == []
