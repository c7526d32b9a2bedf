"""The single-node test cluster behaves like a real Slurm for what our backends rely on.

sbatch/sacct states and exit codes, scancel, submitit's slurm executor, job arrays with a parallelism
limit, and a short requeue hold; and the site limits start.sh sets (MaxArraySize=8, QOS `capped` with
MaxSubmitJobsPerUser=6). Each test is a few seconds; the requeue test ~15 s.
"""

from __future__ import annotations

import os
import pwd
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import submitit
import yaml

if TYPE_CHECKING:
    from conftest import SlurmCluster

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slurm


def test_trivial_job_completes_and_is_accounted(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    out = tmp_path / "hello.out"
    job_id = slurm_cluster.sbatch(f"--output={out}", "--wrap", "echo hello from $SLURM_JOB_ID")
    record = slurm_cluster.wait_final(job_id)
    assert (record.state, record.exit_code) == ("COMPLETED", "0:0")
    assert out.read_text().strip() == f"hello from {job_id}"


def test_failing_job_is_failed_with_its_exit_code(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    job_id = slurm_cluster.sbatch(f"--output={tmp_path / 'fail.out'}", "--wrap", "exit 3")
    record = slurm_cluster.wait_final(job_id)
    assert (record.state, record.exit_code) == ("FAILED", "3:0")


def test_scancel_shows_cancelled(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    job_id = slurm_cluster.sbatch(f"--output={tmp_path / 'sleep.out'}", "--time=2", "--wrap", "sleep 120")
    try:
        slurm_cluster.wait_running(job_id)
    finally:
        slurm_cluster.run("scancel", job_id)
    record = slurm_cluster.wait_final(job_id, timeout=30)
    assert record.state == "CANCELLED"


def test_submitit_slurm_job_returns_a_value(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    executor = submitit.AutoExecutor(folder=tmp_path / "%j", cluster="slurm")
    executor.update_parameters(timeout_min=5, slurm_partition=slurm_cluster.partition, cpus_per_task=1)
    # A stdlib function pickles by reference, so the job needs nothing from this test module.
    job = executor.submit(os.getenv, "SLURM_JOB_ID")
    assert job.result() == job.job_id  # it really ran inside the Slurm allocation
    assert slurm_cluster.wait_final(job.job_id).state == "COMPLETED"


def test_submitit_array_with_parallelism_two(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    executor = submitit.AutoExecutor(folder=tmp_path / "%j", cluster="slurm")
    executor.update_parameters(
        timeout_min=5, slurm_partition=slurm_cluster.partition, cpus_per_task=1, slurm_array_parallelism=2
    )
    jobs = executor.map_array(os.getenv, ["SLURM_ARRAY_TASK_ID"] * 4)
    array_id = jobs[0].job_id.split("_")[0]
    # With "%j" in the folder, submitit 1.5.4 writes the one array script to <folder>/<A>/<A>_submission.sh,
    # while job.paths.submission_file points into <folder>/<A>_0/ (where it is not).
    script = tmp_path / array_id / f"{array_id}_submission.sh"
    assert "#SBATCH --array=0-3%2" in script.read_text().splitlines()
    assert [job.result() for job in jobs] == ["0", "1", "2", "3"]
    states = {r.job_id: r.state for r in slurm_cluster.sacct(array_id)}
    deadline = time.monotonic() + 30
    while sorted(states.values()) != ["COMPLETED"] * 4 and time.monotonic() < deadline:
        time.sleep(0.3)
        states = {r.job_id: r.state for r in slurm_cluster.sacct(array_id)}
    assert states == {f"{array_id}_{i}": "COMPLETED" for i in range(4)}


@pytest.mark.slow
def test_requeued_job_restarts_after_the_short_hold(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    """`scontrol requeue` (what submitit does on timeout/preemption) holds the job for cred_expire.

    Stock Slurm holds it 120 s; start.sh sets AuthInfo=cred_expire to 10 s so the backends' requeue
    tests fit in CI. The job counts its runs in a file, so the second run proves a real restart.
    """
    runs = tmp_path / "runs.txt"
    script = f"echo run >> {runs}; sleep 170"
    job_id = slurm_cluster.sbatch(f"--output={tmp_path / 'rq.out'}", "--time=3", "--wrap", script)
    try:
        slurm_cluster.wait_running(job_id)
        slurm_cluster.run("scontrol", "requeue", job_id)
        requeued_at = time.monotonic()
        # squeue can still say R for a moment after the requeue: wait for the second run itself.
        while runs.read_text().count("run") < 2 and time.monotonic() - requeued_at < 150:
            time.sleep(0.1)
        hold_s = time.monotonic() - requeued_at
        assert runs.read_text().count("run") == 2
        assert "Restarts=1" in slurm_cluster.run("scontrol", "show", "job", job_id)
        cred_expire = int(os.environ.get("EXOFORMER_TESTCLUSTER_CRED_EXPIRE_S", "10"))
        assert hold_s < cred_expire + 20, f"requeued job waited {hold_s:.1f} s (cred_expire={cred_expire})"
    finally:
        slurm_cluster.run("scancel", job_id)


def test_testcluster_profile_fits_the_cluster(slurm_cluster: SlurmCluster) -> None:
    """slurm/profiles/testcluster.yaml has exactly the documented keys and asks only for what exists."""
    profile = yaml.safe_load((REPO / "slurm/profiles/testcluster.yaml").read_text())
    documented = _documented_profile_keys()
    assert set(profile) == set(documented) and set(profile["slurm"]) == set(documented["slurm"])
    slurm = profile["slurm"]
    assert profile["gpu"] is None and slurm["gpus_per_node"] == 0
    assert slurm["partition"] == slurm_cluster.partition
    assert slurm["nodes"] == 1
    assert slurm["cpus_per_task"] <= slurm_cluster.cpus
    assert slurm["mem_gb"] * 1024 <= slurm_cluster.real_memory_mb
    assert slurm["array_parallelism"] * slurm["cpus_per_task"] <= slurm_cluster.cpus


def _documented_profile_keys() -> dict:
    """The profile example in docs/architecture.md ("Cluster profiles"), parsed."""
    text = (REPO / "docs/architecture.md").read_text()
    section = text[text.index("## Cluster profiles") :]
    block = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    return yaml.safe_load(block)


# ----------------------------------------------------------------------------- the site limits (start.sh)
# The test cluster has a real site's limits, so that splitting a large plan into several arrays is tested for
# real: MaxArraySize=8 (array indices 0-7) and QOS `capped` with MaxSubmitJobsPerUser=6. Jobs without --qos
# get the user's default QOS `normal`, which has no limits. Every job submitted here is held and cancelled.


def _user() -> str:
    return pwd.getpwuid(os.getuid()).pw_name  # what `id -un` says; $USER may differ (sudo, CI)


def _cancel_named(slurm_cluster: SlurmCluster, name: str) -> None:
    slurm_cluster.run("scancel", f"--user={_user()}", f"--name={name}")


def test_array_index_of_eight_is_refused_and_zero_to_seven_accepted(slurm_cluster: SlurmCluster) -> None:
    config = slurm_cluster.run("scontrol", "show", "config")
    assert re.search(r"^MaxArraySize\s+= 8$", config, re.MULTILINE), "start.sh sets MaxArraySize=8"
    name = f"exo-arraysize-{os.getpid()}"
    held = ("--hold", f"--job-name={name}", "--output=/dev/null", "--wrap", "true")
    try:
        with pytest.raises(RuntimeError, match="Invalid job array specification"):
            slurm_cluster.sbatch("--array=0-8", *held)
        with pytest.raises(RuntimeError, match="Invalid job array specification"):
            slurm_cluster.sbatch("--array=8", *held)  # the index, not the count, is limited
        array_id = slurm_cluster.sbatch("--array=0-7%2", *held)
        tasks = slurm_cluster.run("squeue", "-h", "-r", "-j", array_id, "-o", "%i").split()
        assert tasks == [f"{array_id}_{i}" for i in range(8)]
    finally:
        _cancel_named(slurm_cluster, name)


def test_qos_capped_refuses_the_seventh_queued_job(slurm_cluster: SlurmCluster) -> None:
    user = _user()
    qos = slurm_cluster.run("sacctmgr", "-n", "-P", "show", "qos", "capped", "format=Name,MaxSubmitPU")
    assert qos == "capped|6\n"
    fields = "format=User,Account,QOS,DefaultQOS"
    assoc = slurm_cluster.run("sacctmgr", "-n", "-P", "show", "assoc", f"user={user}", fields)
    assert f"{user}|exo|capped,normal|normal" in assoc.splitlines()
    name = f"exo-capped-{os.getpid()}"
    held = ("--hold", f"--job-name={name}", "--output=/dev/null", "--wrap", "true")
    try:
        first = [slurm_cluster.sbatch("--qos=capped", *held) for _ in range(6)]
        with pytest.raises(RuntimeError, match="QOSMaxSubmitJobPerUserLimit"):
            slurm_cluster.sbatch("--qos=capped", *held)
        # The limit is the QOS's: without --qos the job gets `normal` and is accepted as before.
        plain = slurm_cluster.sbatch(*held)
        assert slurm_cluster.run("squeue", "-h", "-j", plain, "-o", "%q").strip() == "normal"
        assert slurm_cluster.run("squeue", "-h", "-j", first[0], "-o", "%q").strip() == "capped"
        _cancel_named(slurm_cluster, name)  # cancelled jobs no longer count
        # Array tasks count one each, and so does a job waiting on a dependency: 5 + 1, then the 7th is refused.
        array_id = slurm_cluster.sbatch("--qos=capped", "--array=0-4", *held)
        slurm_cluster.sbatch("--qos=capped", f"--dependency=afterany:{array_id}_0", *held)
        with pytest.raises(RuntimeError, match="QOSMaxSubmitJobPerUserLimit"):
            slurm_cluster.sbatch("--qos=capped", *held)
    finally:
        _cancel_named(slurm_cluster, name)


def test_capped_profile_is_the_testcluster_profile_with_qos_capped() -> None:
    """slurm/profiles/testcluster-capped.yaml differs from testcluster.yaml only in its QOS and description."""
    base = yaml.safe_load((REPO / "slurm/profiles/testcluster.yaml").read_text())
    capped = yaml.safe_load((REPO / "slurm/profiles/testcluster-capped.yaml").read_text())
    assert capped["slurm"].pop("qos") == "capped" and base["slurm"].pop("qos") is None
    assert capped.pop("description") != base.pop("description")
    assert capped == base
