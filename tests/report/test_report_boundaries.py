"""The report's boundaries: it reads run directories only through RunDir and never imports torch, train or model."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

from exoformer.registry.registry import REPO_ROOT

PACKAGE = REPO_ROOT / "exoformer"
REPORT_MODULES = sorted((PACKAGE / "report").glob("*.py"))
TORCH_FREE_HARNESS = [PACKAGE / package / f"{name}.py"
                      for package, name in (("runs", "run_index"), ("registry", "figure_kinds"), ("registry", "claims_schema"))]
RUN_DIR_NAMES = re.compile(
    r'spec\.yaml|STATUS|metrics\.jsonl|checkpoints|long\.jsonl|validation\.json|probes\.json|spikes\.json'
    r'|coefficients\.json|provenance\.json|\b(eval|analysis|stages|logs)/'
    r'|/\s*"(eval|analysis|stages|checkpoints|logs)"')
"""Names of a run directory's files and folders (docs/architecture.md "Runs"), as a module would spell them."""
FORBIDDEN_IMPORTS = ("torch", "exoformer.train", "exoformer.model")


def imported_modules(path: Path) -> set[str]:
    """Every module an `import` or `from ... import` anywhere in the file names (lazy imports included)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_only_rundir_spells_run_directory_names():
    hits = [f"{path.relative_to(REPO_ROOT)}:{number}: {line.strip()}"
            for path in [*REPORT_MODULES, *TORCH_FREE_HARNESS]
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
            if RUN_DIR_NAMES.search(line)]
    assert hits == []
    owner = (PACKAGE / "rundir.py").read_text(encoding="utf-8")
    for name in ("spec.yaml", "STATUS", "metrics.jsonl", "checkpoints", "long.jsonl", "coefficients.json"):
        assert name in owner  # the pattern names what the owner spells


def test_report_never_imports_torch_train_or_model():
    offenders = {str(path.relative_to(REPO_ROOT)): sorted(m for m in imported_modules(path)
                                                          if m.split(".")[0] == "torch" or m.startswith(
                                                              FORBIDDEN_IMPORTS[1:]))
                 for path in [*REPORT_MODULES, *TORCH_FREE_HARNESS]}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_importing_every_report_module_loads_no_torch():
    modules = [f"exoformer.report.{p.stem}" for p in REPORT_MODULES if p.stem != "__init__"]
    modules += [f"exoformer.{p.parent.name}.{p.stem}" for p in TORCH_FREE_HARNESS]
    code = (f"import importlib, sys; [importlib.import_module(m) for m in {modules!r}]; "
            "bad = sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')); "
            "assert not bad, bad[:5]")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
