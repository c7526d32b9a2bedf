"""Session fixture for tests against the real single-node Slurm test cluster.

`.ci/run` starts the cluster (slurm/testcluster/ci.sh) and exports EXOFORMER_TEST_SLURM_CONF; without
it the tests here are skipped, unless EXOFORMER_TEST_SLURM_REQUIRED=1 says the cluster should have
been there (then they fail). Every test collected under tests/slurm/ is marked `slurm`.
To run them by hand:

    slurm/testcluster/start.sh /tmp/tc && source /tmp/tc/env.sh
    EXOFORMER_TEST_SLURM_CONF=$SLURM_CONF .venv/bin/pytest tests/slurm -q
    slurm/testcluster/stop.sh /tmp/tc
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

HERE = Path(__file__).resolve().parent
CONF_ENV = "EXOFORMER_TEST_SLURM_CONF"
REQUIRED_ENV = "EXOFORMER_TEST_SLURM_REQUIRED"

#: sacct states after which a job never runs again (REQUEUED and PREEMPTED are not final).
FINAL_STATES = frozenset(
    {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL", "DEADLINE"}
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.slurm)


@dataclass(kw_only=True, slots=True)
class JobRecord:
    """One job's accounting line (`sacct -X`): state word and exit code `code:signal`."""

    job_id: str
    state: str
    exit_code: str


@dataclass(kw_only=True, slots=True)
class SlurmCluster:
    """A running test cluster and small, polling helpers around its command-line clients."""

    conf: Path
    partition: str
    node: str
    cpus: int
    real_memory_mb: int

    def run(self, *args: str, timeout: float = 30) -> str:
        """Run a Slurm client with this cluster's SLURM_CONF; raise with its stderr when it fails."""
        env = {**os.environ, "SLURM_CONF": str(self.conf)}
        done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} exited {done.returncode}: {done.stderr.strip()}")
        return done.stdout

    def sbatch(self, *args: str) -> str:
        """Submit and return the job id (`sbatch --parsable`)."""
        return self.run("sbatch", "--parsable", f"--partition={self.partition}", *args).strip().split(";")[0]

    def squeue_state(self, job_id: str) -> str | None:
        """Compact state (PD, R, CG, ...) while slurmctld still holds the job, else None."""
        out = self.run("squeue", "-h", "-j", job_id, "-o", "%t").strip()
        return out or None

    def sacct(self, job_id: str) -> list[JobRecord]:
        """Accounting lines of a job, or of every task of an array job (allocations only)."""
        out = self.run("sacct", "-X", "-n", "-P", "-D", "-j", job_id, "-o", "JobID,State,ExitCode")
        records = []
        for line in out.splitlines():
            jid, state, exit_code = line.split("|")
            # "CANCELLED by 0" -> "CANCELLED"; -D lists a requeued job's earlier runs first.
            records.append(JobRecord(job_id=jid, state=state.split()[0], exit_code=exit_code))
        return records

    def wait_final(self, job_id: str, *, timeout: float = 60) -> JobRecord:
        """Poll sacct until the job's latest run is in a final state (accounting lags slurmctld a bit)."""
        deadline = time.monotonic() + timeout
        while True:
            records = [r for r in self.sacct(job_id) if r.job_id == job_id]
            if records and records[-1].state in FINAL_STATES:
                return records[-1]
            if time.monotonic() > deadline:
                seen = records[-1].state if records else "no sacct record"
                raise TimeoutError(f"job {job_id} not finished after {timeout} s (last state: {seen})")
            time.sleep(0.3)

    def wait_running(self, job_id: str, *, timeout: float = 60) -> float:
        """Poll squeue until the job runs; return the seconds waited."""
        start = time.monotonic()
        while self.squeue_state(job_id) != "R":
            if time.monotonic() - start > timeout:
                raise TimeoutError(f"job {job_id} not running after {timeout} s (state {self.squeue_state(job_id)})")
            time.sleep(0.1)
        return time.monotonic() - start


def _node_field(show_node: str, key: str) -> str:
    for word in show_node.split():
        if word.startswith(f"{key}="):
            return word.split("=", 1)[1]
    raise KeyError(f"{key} not in scontrol show node output")


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """The running test cluster; skips (or fails, when required) if there is none."""
    conf = os.environ.get(CONF_ENV)
    if not conf:
        reason = (
            f"no Slurm test cluster: set {CONF_ENV} to the slurm.conf of one started with "
            "slurm/testcluster/start.sh (bash .ci/run does this)"
        )
        if os.environ.get(REQUIRED_ENV) == "1":
            pytest.fail(f"{reason}; {REQUIRED_ENV}=1 says it should have started", pytrace=False)
        pytest.skip(reason)
    if not Path(conf).is_file() or shutil.which("sbatch") is None:
        pytest.fail(f"{CONF_ENV}={conf} is not a slurm.conf, or sbatch is not on PATH", pytrace=False)
    probe = SlurmCluster(conf=Path(conf), partition="", node="", cpus=0, real_memory_mb=0)
    try:
        probe.run("scontrol", "ping")
        partition = probe.run("sinfo", "-h", "-o", "%R").split()[0]
        node = probe.run("sinfo", "-h", "-o", "%n").split()[0]
        show_node = probe.run("scontrol", "show", "node", node)
    except (RuntimeError, subprocess.TimeoutExpired, IndexError) as exc:
        pytest.fail(f"the Slurm test cluster at {conf} does not answer: {exc}", pytrace=False)
    # submitit and our backends find the cluster through SLURM_CONF in their own environment.
    previous = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = conf
    yield SlurmCluster(
        conf=Path(conf),
        partition=partition,
        node=node,
        cpus=int(_node_field(show_node, "CPUTot")),
        real_memory_mb=int(_node_field(show_node, "RealMemory")),
    )
    if previous is None:
        os.environ.pop("SLURM_CONF", None)
    else:
        os.environ["SLURM_CONF"] = previous
