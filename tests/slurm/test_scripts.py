"""Safety of the test-cluster scripts themselves; these need no running cluster.

stop.sh must never signal a process it did not start, even when a PID file names one, and must not
fail when nothing runs; start.sh must refuse bad arguments before starting anything.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "slurm" / "testcluster"

pytestmark = pytest.mark.slurm


def _run(*args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=60, env=env)


@pytest.mark.parametrize("script", ["install.sh", "start.sh", "stop.sh", "ci.sh"])
def test_script_parses(script: str) -> None:
    done = _run("bash", "-n", SCRIPTS / script)
    assert done.returncode == 0, done.stderr


def test_stop_without_a_cluster_succeeds(tmp_path: Path) -> None:
    assert _run(SCRIPTS / "stop.sh", tmp_path / "never-started").returncode == 0
    (tmp_path / "empty" / "run").mkdir(parents=True)
    assert _run(SCRIPTS / "stop.sh", tmp_path / "empty").returncode == 0


def test_stop_spares_processes_it_did_not_start(tmp_path: Path) -> None:
    """PID files naming a foreign process: a wrong name, and the right name but another cluster's."""
    base = tmp_path / "cluster"
    (base / "run").mkdir(parents=True)
    impostor = tmp_path / "elsewhere" / "munged"  # comm "munged", but nothing of `base` in it
    impostor.parent.mkdir()
    shutil.copy(shutil.which("sleep") or "/bin/sleep", impostor)
    foreign = [subprocess.Popen(["sleep", "60"]), subprocess.Popen([str(impostor), "60"])]
    try:
        (base / "run" / "slurmctld.pid").write_text(f"{foreign[0].pid}\n")
        (base / "run" / "munged.pid").write_text(f"{foreign[1].pid}\n")
        done = _run(SCRIPTS / "stop.sh", base)
        assert done.returncode == 0, done.stderr
        assert [p.poll() for p in foreign] == [None, None], "stop.sh signalled a process it did not start"
        # Their stale PID files are cleared, so start.sh will not think a cluster runs there.
        assert list((base / "run").iterdir()) == []
    finally:
        for process in foreign:
            process.kill()
            process.wait()


def test_start_refuses_bad_arguments(tmp_path: Path) -> None:
    done = _run(SCRIPTS / "start.sh")
    assert done.returncode == 2 and "usage" in done.stderr
    long_base = tmp_path / ("x" * 100)
    done = _run(SCRIPTS / "start.sh", long_base)
    assert done.returncode == 2 and "too long for unix sockets" in done.stderr
    assert not (long_base / "run").exists()


@pytest.mark.skipif(sys.platform != "linux", reason="the test cluster is Linux-only")
def test_ci_helpers_are_safe_without_a_cluster() -> None:
    """`exoformer_testcluster_stop` in an EXIT trap must succeed even when start never ran."""
    # Without the running CI cluster's variables: this must not stop the cluster the other tests use.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EXOFORMER_TESTCLUSTER_", "SLURM_"))}
    script = f"set -euo pipefail; source {SCRIPTS / 'ci.sh'}; exoformer_testcluster_stop; echo ok"
    done = _run("bash", "-c", script, env=env)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
