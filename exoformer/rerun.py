"""The command that re-runs one run, for the fix of an error about that run's files.

A fix must be a command that does what it says: `reproduce.py run SPEC --force` alone would resolve SPEC
under its default preset (another hash, another directory), so the command is rebuilt from the one that made
the run (provenance.json's `command`: its --preset, --set and --registry), aimed at the spec itself and at
the run's own runs root. Harness-free: exoformer.rundir uses it.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

_DROPPED_FLAGS = {"--force", "--retry-failed", "--dry-run", "--json", "--all-seeds", "--wait"}
_DROPPED_OPTIONS = {"--runs-dir", "--jobs", "--threads", "--timeout-min"}


def rerun_command(provenance: dict[str, Any], spec_name: str, run_dir: str | Path) -> str:
    """`reproduce.py run SPEC [--preset P] [--set K=V ...] --runs-dir ROOT --force` for the run in `run_dir`
    (`<root>/<spec>/<hash12>`); the options that chose the spec's hash are those of the recorded command."""
    recorded = provenance.get("command") if isinstance(provenance, dict) else None
    argv = [str(a) for a in recorded] if isinstance(recorded, list) else []
    kept: list[str] = []
    if len(argv) >= 3 and argv[1] == "run":
        rest = iter(argv[3:])
        for arg in rest:
            name = arg.split("=", 1)[0]
            if name in _DROPPED_OPTIONS and "=" not in arg:
                next(rest, None)  # its value
            elif name not in _DROPPED_FLAGS | _DROPPED_OPTIONS:
                kept.append(arg)
    root = Path(run_dir).parent.parent
    return shlex.join(["reproduce.py", "run", spec_name, *kept, "--runs-dir", str(root), "--force"])
