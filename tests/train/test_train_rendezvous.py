"""The rendezvous of a Slurm job (exoformer/train/distributed.py slurm_rendezvous) on recorded allocations:
the master address is the first node of the allocation (its NodeAddr when the name does not resolve), the port
comes from the job id, and the submit host never enters.

RECORDED_ALLOCATION is the environment of rank 1 of a 2-node job on the test cluster (slurm/testcluster: nodes
`exotest-n2` and `vm` on one machine, Slurm 22.05.8); the host lists and their expansions were recorded from
`scontrol show hostnames` of the same Slurm."""

import os
import stat

import pytest

from exoformer.errors import UserError
from exoformer.train import distributed
from exoformer.train.distributed import PORT_RANGE, job_port, slurm_hostnames, slurm_rendezvous

RECORDED_ALLOCATION = {
    "SLURM_JOB_ID": "2", "SLURM_JOB_NODELIST": "exotest-n2,vm", "SLURM_JOB_NUM_NODES": "2",
    "SLURM_JOB_PARTITION": "twonode", "SLURM_LOCALID": "0", "SLURM_NNODES": "2", "SLURM_NODEID": "1",
    "SLURM_NODELIST": "exotest-n2,vm", "SLURM_NTASKS": "2", "SLURM_PROCID": "1", "SLURM_SUBMIT_HOST": "vm",
    "SLURM_TASKS_PER_NODE": "1(x2)", "SLURMD_NODENAME": "vm",
}
SCONTROL_SHOW_HOSTNAMES = {  # Slurm 22.05.8
    "gpu-[01-03,07],cpu1": ["gpu-01", "gpu-02", "gpu-03", "gpu-07", "cpu1"],
    "r[1-2]n[8-9]": ["r1n8", "r1n9", "r2n8", "r2n9"],
    "node[009-011]": ["node009", "node010", "node011"],
    "exotest-n2,vm": ["exotest-n2", "vm"],
}


@pytest.mark.parametrize("nodelist", sorted(SCONTROL_SHOW_HOSTNAMES))
def test_host_lists_expand_as_scontrol_does(nodelist):
    assert slurm_hostnames(nodelist) == SCONTROL_SHOW_HOSTNAMES[nodelist]


@pytest.mark.parametrize("bad", ["gpu-[01-03", "gpu-[a-b]", "gpu-[[1]]"])
def test_malformed_host_lists_are_refused(bad):
    with pytest.raises(ValueError):
        slurm_hostnames(bad)


def fake_scontrol(tmp_path, monkeypatch, node_line: str) -> None:
    """A stand-in `scontrol` first on PATH that answers `show node -o NAME` with `node_line`."""
    script = tmp_path / "bin" / "scontrol"
    script.parent.mkdir(exist_ok=True)
    script.write_text(f"#!/bin/sh\necho '{node_line}'\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{script.parent}{os.pathsep}{os.environ['PATH']}")


def test_recorded_two_node_allocation_meets_at_the_first_nodes_address(tmp_path, monkeypatch):
    fake_scontrol(tmp_path, monkeypatch, "NodeName=exotest-n2 Arch=x86_64 CoresPerSocket=1 NodeAddr=10.9.8.7 "
                                         "NodeHostName=vm Port=40001 State=IDLE")
    address, port = slurm_rendezvous(RECORDED_ALLOCATION)
    assert address == "10.9.8.7"  # exotest-n2 does not resolve: Slurm's NodeAddr for it
    assert port == PORT_RANGE[0] + 2 == job_port("2")
    assert address != RECORDED_ALLOCATION["SLURM_SUBMIT_HOST"]


def test_a_first_node_that_resolves_is_used_by_name(monkeypatch):
    allocation = {**RECORDED_ALLOCATION, "SLURM_JOB_NODELIST": "localhost,gpu-[02-03]", "SLURM_SUBMIT_HOST": "login1"}
    assert slurm_rendezvous(allocation) == ("localhost", job_port("2"))


def test_every_rank_of_every_attempt_meets_at_the_same_place(tmp_path, monkeypatch):
    fake_scontrol(tmp_path, monkeypatch, "NodeName=exotest-n2 NodeAddr=10.9.8.7")
    places = {slurm_rendezvous({**RECORDED_ALLOCATION, "SLURM_PROCID": str(r), "SLURMD_NODENAME": node})
              for r, node in enumerate(["exotest-n2", "vm"])}
    assert len(places) == 1


def test_job_ports_lie_in_range_and_neighbouring_jobs_differ():
    ports = [job_port(str(j)) for j in range(123_456, 123_556)]
    assert len(set(ports)) == 100 and all(PORT_RANGE[0] <= p < PORT_RANGE[1] for p in ports)
    assert job_port("12345_7") == job_port("12345_7") and PORT_RANGE[0] <= job_port("12345_7") < PORT_RANGE[1]


def test_an_unknown_first_node_is_one_line_naming_the_fix(tmp_path, monkeypatch):
    fake_scontrol(tmp_path, monkeypatch, "")
    with pytest.raises(UserError) as err:
        slurm_rendezvous(RECORDED_ALLOCATION)
    assert "exotest-n2" in err.value.render() and "MASTER_ADDR" in err.value.render()
    with pytest.raises(UserError, match="no Slurm allocation"):
        slurm_rendezvous({"SLURM_JOB_ID": "2"})


def test_export_overrides_the_node_name_submitit_exports(tmp_path, monkeypatch):
    fake_scontrol(tmp_path, monkeypatch, "NodeName=exotest-n2 NodeAddr=10.9.8.7")
    for key, value in RECORDED_ALLOCATION.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("MASTER_ADDR", "exotest-n2")  # what submitit's TorchDistributedEnvironment exports
    monkeypatch.setenv("MASTER_PORT", "31337")
    distributed.export_slurm_rendezvous()
    assert (os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"]) == ("10.9.8.7", str(job_port("2")))


def test_a_plain_srun_task_derives_its_rendezvous_from_the_allocation(tmp_path, monkeypatch):
    fake_scontrol(tmp_path, monkeypatch, "NodeName=exotest-n2 NodeAddr=10.9.8.7")
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "SUBMITIT_EXECUTOR"):
        monkeypatch.setenv(name, "")  # so that monkeypatch restores each (distributed_env sets them)
        monkeypatch.delenv(name)
    for key, value in RECORDED_ALLOCATION.items():
        monkeypatch.setenv(key, value)
    assert distributed.distributed_env() == distributed.DistEnv(rank=1, world_size=2, local_rank=0)
    assert (os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"]) == ("10.9.8.7", str(job_port("2")))
