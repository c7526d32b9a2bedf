"""The health check at the start of every rank of a job: its device works, one all-reduce across the ranks
completes, and the run directory's disk has room for two checkpoints.

A job that would fail on one of these hours later (a GPU fallen off the bus, a broken interconnect, a full
disk at the first checkpoint) ends at once with one line naming the node and the cause. Where the node is at
fault and the job runs under Slurm, the job is requeued (`scontrol requeue`), with the node excluded where the
failure is surely its own (its device: `scontrol update ExcNodeList=`); a failed all-reduce cannot say which node
is at fault, so that requeue excludes none. A full disk is the run's, not the node's: it ends the job with the fix.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from datetime import timedelta
from pathlib import Path

from exoformer.errors import UserError
from exoformer.faults import ResumableFault
from exoformer.model.config import ModelConfig

ALL_REDUCE_TIMEOUT_S = 120.0
"""How long the check's one all-reduce may take: far longer than it needs on any link, far shorter than the
collective timeout a broken link would otherwise hold every rank for."""
CHECKPOINTS_OF_ROOM = 2


class NodeUnhealthy(ResumableFault):
    """This node cannot run the job (its device, its link to the other ranks): run it elsewhere."""

    exclude_node = True
    """Whether the failure is this node's for sure (its device), so that the requeued job avoids it."""


class LinkUnhealthy(NodeUnhealthy):
    """The ranks cannot all-reduce: a node or the network between them is at fault, which one is not known."""

    exclude_node = False


def checkpoint_bytes(model: ModelConfig, precision: str) -> int:
    """Estimated size of one training checkpoint: the weights, Muon's momentum (and its small second moment) and
    AdamW's two moments, each in its parameter's dtype (exoformer/train/optim.py), plus the file's own overhead
    (RNG states, configs, a few hundred bytes a tensor): 1%, 48 KiB and 256 bytes a stored tensor."""
    from exoformer.budget.module_figures import parameters

    tensors = parameters(model)  # the real model's, built on the meta device (cached per model config)
    total = 48 * 1024 + 3 * 256 * len(tensors)
    for p in tensors:
        if p.group == "muon":
            rows, cols = p.shape
            total += p.nbytes(precision) * 2 + (p.nbytes(precision) // p.numel) * max(rows, cols)
        else:
            total += p.nbytes(precision) * 3
    return int(total * 1.01)


def check_disk(run_dir: Path, model: ModelConfig, precision: str) -> None:
    """Room for CHECKPOINTS_OF_ROOM checkpoints on the run directory's disk, or a ResumableFault with the numbers."""
    need = CHECKPOINTS_OF_ROOM * checkpoint_bytes(model, precision)
    probe = run_dir if run_dir.exists() else next(p for p in run_dir.parents if p.exists())
    free = shutil.disk_usage(probe).free
    if free < need:
        raise ResumableFault(f"health check: {free / 1e9:.2f} GB free on the disk of the run directory, "
                             f"{CHECKPOINTS_OF_ROOM} checkpoints need {need / 1e9:.2f} GB", where=str(run_dir),
                             fix="free space on that disk (or use another runs directory), then run the same "
                                 "command again")


def check_device(device: str) -> None:
    """The job's device takes a tensor and computes with it; NodeUnhealthy naming the node otherwise."""
    import torch

    try:
        dev = torch.device(device)
        value = float((torch.ones(4, device=dev) * 2).sum().item())
    except Exception as err:  # noqa: BLE001 - any failure of the device is the node's
        raise NodeUnhealthy(f"health check: device {device} does not work ({type(err).__name__}: "
                            f"{' '.join(str(err).split())[:200]})", where=_here(),
                            fix="the job is requeued without this node where Slurm runs it; else check the node's "
                                "GPUs (nvidia-smi) and run the same command again") from None
    if value != 8.0:
        raise NodeUnhealthy(f"health check: device {device} computed 2 x 4 ones = {value}", where=_here(),
                            fix="check the node's GPUs (nvidia-smi); the job is requeued without it under Slurm")


def check_all_reduce(device: str, *, timeout_s: float = ALL_REDUCE_TIMEOUT_S) -> None:
    """One all-reduce across the job's ranks sums their ranks correctly within `timeout_s` (nothing without a
    process group)."""
    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return
    rank, world = dist.get_rank(), dist.get_world_size()
    tensor = torch.tensor([float(rank + 1)], device=device)
    try:
        dist.all_reduce(tensor, async_op=True).wait(timeout=timedelta(seconds=timeout_s))
        total = float(tensor.item())
    except Exception as err:  # noqa: BLE001 - a collective that fails here would fail in training too
        raise LinkUnhealthy(f"health check: the all-reduce across {world} ranks failed on rank {rank} "
                            f"({type(err).__name__}: {' '.join(str(err).split())[:200]})", where=_here(),
                            fix="check the nodes' network (NCCL_DEBUG=INFO); under Slurm the job is requeued") from None
    expected = world * (world + 1) / 2
    if total != expected:
        raise LinkUnhealthy(f"health check: the all-reduce across {world} ranks gave {total:g}, not {expected:g}",
                            where=_here(), fix="check the nodes' interconnect; under Slurm the job is requeued")


def requeue_elsewhere(error: NodeUnhealthy) -> bool:
    """Under Slurm: requeue this job, with this node excluded when the failure is surely its own; True when Slurm
    took the commands."""
    job, node = os.environ.get("SLURM_JOB_ID"), os.environ.get("SLURMD_NODENAME")
    if not job or not node:
        return False
    commands = [["scontrol", "requeue", job]]
    if error.exclude_node:
        commands.append(["scontrol", "update", f"JobId={job}", f"ExcNodeList={node}"])
    for command in commands:
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return False
        if done.returncode != 0:
            return False
    return True


def _here() -> str:
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    return f"node {node}, rank {os.environ.get('RANK', '0')}"


def health_check_or_exit(run_dir: str | os.PathLike, model: ModelConfig, precision: str, device: str) -> None:
    """The three checks of the module docstring, ending the process at once with the error's one line (`error: ...`,
    exit code 1) at the first that fails; a node fault under Slurm first requeues the job without this node.
    STATUS says the same line first (`record_failure`), so that `run` and `status` print it."""
    try:
        check_device(device)
        check_all_reduce(device)
        check_disk(Path(run_dir), model, precision)
    except NodeUnhealthy as err:
        requeued = requeue_elsewhere(err)
        where = " without this node" if err.exclude_node else ""
        line = err.render() + (f"; requeued by Slurm{where}" if requeued else "")
        record_failure(run_dir, line, requeued=requeued)
        raise SystemExit(f"error: {line}") from None
    except UserError as err:
        record_failure(run_dir, err.render())
        raise SystemExit(f"error: {err.render()}") from None


AGAIN = "run the same command again"
RETRY = f"{AGAIN} with --retry-failed"


def record_failure(run_dir: str | os.PathLike, line: str, *, requeued: bool = False) -> None:
    """STATUS of a run whose job failed its health check: FAILED with the check's line, its fix ending in
    `run --retry-failed` (a plain `run` skips a FAILED run), or PENDING with the line when Slurm requeued the job.
    Written only into a prepared run directory, atomically; where STATUS cannot be written (the full disk itself),
    the line is left to the job's stderr under the runs root's .jobs/."""
    from exoformer.rundir import FAILED, PENDING, RunDir

    rd = RunDir(run_dir)
    if not rd.identity_file.is_file():
        return
    reason = line
    if not requeued:
        reason = reason.replace(AGAIN, RETRY) if AGAIN in reason else f"{reason}; then {RETRY}"
    try:
        rd.update_status(state=PENDING if requeued else FAILED, reason=reason, pid=None, log=_job_stderr(),
                         host=os.environ.get("SLURMD_NODENAME") or socket.gethostname())
    except (OSError, UserError):
        pass


def _job_stderr() -> str | None:
    """The stderr file of this submitit job (local or Slurm), where the line is written too; None outside one."""
    try:
        import submitit

        return str(submitit.JobEnvironment().paths.stderr)
    except Exception:  # noqa: BLE001 - not a submitit job, or one without the file
        return None
