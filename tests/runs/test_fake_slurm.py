"""The fake Slurm of tests/fake_slurm.py answers as its docstring says: the Slurm tests and
benchmarks/bench_slurm_polling.py count on it, so a wrong fake would prove nothing."""

from __future__ import annotations

import subprocess

import pytest

import fake_slurm


@pytest.fixture()
def cluster(tmp_path):
    return fake_slurm.make_fake_cluster(
        tmp_path, user="me", others=300, ours={"5000_0": "PENDING", "5000_1": "RUNNING", "5001": "PENDING"},
        accounting={"5000_2": ("CANCELLED by 0", "0:15"), "4999": ("TIMEOUT", "0:0")}, max_array_size=11,
        max_submit=5, pending_reasons={"5001": "Dependency"})


def slurm(cluster, *argv):
    return subprocess.run(list(argv), env=cluster.env(), capture_output=True, text=True, timeout=30)


def test_squeue_per_user_lists_only_that_users_jobs_and_all_lists_everyone(cluster):
    mine = slurm(cluster, "squeue", "-h", "-r", "-u", "me", "-o", "%i|%T|%r|%u")
    assert mine.stdout.splitlines() == ["5000_0|PENDING|Priority|me", "5000_1|RUNNING|None|me",
                                        "5001|PENDING|Dependency|me"]
    assert slurm(cluster, "squeue", "-h", "-r", "--me", "-o", "%i|%T|%r|%u").stdout == mine.stdout
    everyone = slurm(cluster, "squeue", "-h", "-r", "-o", "%i|%T").stdout.splitlines()
    assert len(everyone) == 303 and "5000_1|RUNNING" in everyone
    assert slurm(cluster, "squeue", "-h", "-j", "5000", "-o", "%i").stdout.split() == ["5000_0", "5000_1"]
    gone = slurm(cluster, "squeue", "-h", "-j", "4999")
    assert gone.returncode == 1 and "Invalid job id" in gone.stderr


def test_sacct_master_id_covers_its_tasks(cluster):
    out = slurm(cluster, "sacct", "-X", "-n", "-P", "-j", "5000,4999", "-o", "JobID,State,ExitCode,Nope")
    rows = {line.split("|")[0]: line.split("|")[1:] for line in out.stdout.splitlines()}
    assert rows["5000_2"] == ["CANCELLED by 0", "0:15", ""] and rows["4999"] == ["TIMEOUT", "0:0", ""]
    assert rows["5000_0"][0] == "PENDING" and set(rows) == {"5000_0", "5000_1", "5000_2", "4999"}
    steps = slurm(cluster, "sacct", "-n", "-P", "-u", "me", "-S", "2020-01-01", "-o", "JobID").stdout.split()
    assert "5000_2.batch" in steps and "5001" in steps


def test_fail_next_fails_any_command_then_answers_again(cluster):
    cluster.fail_next(2)
    for argv in (("squeue", "-h"), ("sacct", "-n")):
        failed = slurm(cluster, *argv)
        assert failed.returncode == 1 and failed.stdout == "" and "Socket timed out" in failed.stderr
    assert slurm(cluster, "sinfo", "-h", "-o", "%G").stdout == "(null)\n"
    assert [c[0] for c in cluster.calls()] == ["squeue", "sacct", "sinfo"]
    assert [e["rc"] for e in cluster.call_log()] == [1, 1, 0]


def test_sbatch_arrays_and_limits(cluster, tmp_path):
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#SBATCH --array=0-11%4\n#SBATCH -J grid\necho hi\n")
    too_big = slurm(cluster, "sbatch", str(script))
    assert too_big.returncode == 1 and "Invalid job array specification" in too_big.stderr
    too_many = slurm(cluster, "sbatch", "--array=0-2", str(script))  # 3 queued + 3 > max_submit 5
    assert too_many.returncode == 1 and "QOSMaxSubmitJobPerUserLimit" in too_many.stderr
    ok = slurm(cluster, "sbatch", "--parsable", "--array=0-1", str(script))
    job = ok.stdout.strip()
    assert ok.returncode == 0 and job.isdigit()
    assert cluster.queue()[f"{job}_1"] == "PENDING"
    assert "MaxArraySize            = 11" in slurm(cluster, "scontrol", "show", "config").stdout
    assert slurm(cluster, "sacctmgr", "-n", "-P", "show", "qos", "format=Name,MaxSubmitPU").stdout == "normal|5\n"
