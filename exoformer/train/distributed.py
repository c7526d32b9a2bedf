"""Data-parallel setup from the environment: torchrun (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT) or
Slurm / submitit (SLURM_* variables, exported through submitit's TorchDistributedEnvironment).

gloo on CPU, NCCL on GPU. The model code knows nothing of this (STYLE 8).

Failing together: a job's ranks share one TCPStore (rank 0 hosts it at MASTER_PORT), opened by
`fail_together` before any rank does rank-specific work. The process group is built on that store, and the
process-group start and every `barrier()` are meeting points kept in the store that also watch for a
failure key: a rank whose work raises inside `fail_together` writes its error there, so every rank waiting
at a meeting point raises `PeerFailed` with that message within a poll interval, instead of waiting for
the distributed timeout (a rank that fails before the process group starts would otherwise leave the
others in its rendezvous for 30 minutes; gloo only notices a peer that has exited, with no message, and
NCCL not at all). A store host that vanishes without a word reads as `PeerFailed` too. Without
`fail_together` (torchrun, whose agent tears the workers down together), the plain env:// group is used.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist

from exoformer.errors import UserError

POLL_S = 0.05
"""How often a rank at a meeting point looks at the store."""
WATCH_S = 0.5
"""How often a rank that may be inside a collective looks at the store for another rank's failure."""
ACK_WAIT_S = 10.0
"""How long a failing store host stays up so that the waiting ranks can read its message."""
TIMEOUT_ENV = "EXOFORMER_DIST_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 1800.0
"""How long a healthy rank waits for a slow one at a meeting point (torch's default for gloo)."""


@dataclass(kw_only=True, slots=True, frozen=True)
class DistEnv:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0


class PeerFailed(RuntimeError):
    """Another rank of this job failed (its message is this one's) or vanished; this rank stops too."""


def distributed_env() -> DistEnv:
    """Read this process's place in the job; a single process when nothing says otherwise."""
    env = os.environ
    if "RANK" in env and "WORLD_SIZE" in env:
        return DistEnv(rank=int(env["RANK"]), world_size=int(env["WORLD_SIZE"]),
                       local_rank=int(env.get("LOCAL_RANK", 0)))
    if int(env.get("SLURM_NTASKS", "1")) > 1 and "SLURM_PROCID" in env:
        if "SUBMITIT_EXECUTOR" in env:
            from submitit.helpers import TorchDistributedEnvironment

            exported = TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
            return DistEnv(rank=exported.rank, world_size=exported.world_size, local_rank=exported.local_rank)
        return _plain_srun_env(env)
    return DistEnv()


def _plain_srun_env(env) -> DistEnv:
    """A task of `srun` without submitit: its place from SLURM_PROCID/NTASKS/LOCALID; the rendezvous address
    cannot be derived without parsing the node list, so it must be given."""
    if "MASTER_ADDR" not in env or "MASTER_PORT" not in env:
        raise UserError(f"task {env['SLURM_PROCID']} of {env['SLURM_NTASKS']} started by srun without submitit "
                        "has no MASTER_ADDR/MASTER_PORT", where="srun environment",
                        fix="launch with `reproduce.py run --backend slurm`, or export MASTER_ADDR=$(scontrol show "
                            "hostnames $SLURM_JOB_NODELIST | head -n1) MASTER_PORT=29500 before srun")
    rank, world = int(env["SLURM_PROCID"]), int(env["SLURM_NTASKS"])
    local = int(env.get("SLURM_LOCALID", "0"))
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(local))
    return DistEnv(rank=rank, world_size=world, local_rank=local)


NO_GPU_VALUES = ("", "-1", "none", "NoDevFiles")
"""CUDA_VISIBLE_DEVICES values that mean "no GPU" (Slurm writes NoDevFiles without a GPU allocation)."""


def pick_device(device: str | torch.device | None, env: DistEnv) -> torch.device:
    """`device` when given; else this rank's GPU (local rank modulo the visible GPUs), else the CPU. A rank
    whose CUDA_VISIBLE_DEVICES names GPUs that torch cannot see fails instead of training on the CPU."""
    if device is not None:
        return torch.device(device)
    if torch.cuda.is_available() and torch.cuda.device_count() > 0:
        return torch.device("cuda", env.local_rank % torch.cuda.device_count())
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() not in NO_GPU_VALUES:
        raise UserError(f"rank {env.rank} was given GPU(s) CUDA_VISIBLE_DEVICES={visible} but torch sees none",
                        where=f"rank {env.rank} on {socket.gethostname()}",
                        fix="check the job's GPU binding (--gpus-per-task, CUDA_VISIBLE_DEVICES) and the CUDA "
                            "build of torch (torch.version.cuda); set device cpu to train on the CPU on purpose")
    return torch.device("cpu")


# --------------------------------------------------------------------------------------------- the job's store

@dataclass(kw_only=True, slots=True)
class _Link:
    """This process's handle on the job's shared store, and how many meeting points it has passed."""

    store: dist.Store
    env: DistEnv
    timeout_s: float
    meetings: int = 0
    groups: int = 0
    told: set[str] = field(default_factory=set)


_link: _Link | None = None


def timeout_s() -> float:
    return float(os.environ.get(TIMEOUT_ENV, DEFAULT_TIMEOUT_S))


def _open_link(env: DistEnv) -> _Link:
    host, port = os.environ.get("MASTER_ADDR", "127.0.0.1"), int(os.environ.get("MASTER_PORT", "29500"))
    wait = timeout_s()
    store = dist.TCPStore(host, port, env.world_size, is_master=env.rank == 0, timeout=timedelta(seconds=wait),
                          wait_for_workers=False)
    return _Link(store=store, env=env, timeout_s=wait)


@contextlib.contextmanager
def fail_together(env: DistEnv | None = None) -> Iterator[None]:
    """Run one rank's share of a job so that its failure reaches every rank (see the module docstring).

    A single-rank job runs the block as it is. An error raised in the block is written to the store, then
    re-raised here; a `PeerFailed` (another rank's error) is only re-raised."""
    global _link
    env = env or distributed_env()
    if env.world_size <= 1 or _link is not None:
        yield
        return
    _link = _open_link(env)
    watcher = _Watcher(_link)
    watcher.start()
    try:
        yield
    except PeerFailed:
        raise
    except BaseException as err:
        peer = watcher.peer_message or _peer_failure(_link)
        if peer is not None:  # a collective broke because another rank failed mid-step
            raise PeerFailed(f"stopping rank {env.rank} because {peer}") from None
        _report_failure(_link, err)
        raise
    else:
        if env.rank == 0:
            _wait_for_the_others(_link)
        else:
            with contextlib.suppress(Exception):  # rank 0 may be gone already: nothing waits for this rank then
                _link.store.add("left", 1)
    finally:
        watcher.stop()
        _link = None


def _wait_for_the_others(link: _Link) -> None:
    """Rank 0 hosts the store: it stays until every other rank has left (or failed), so that none loses the
    store while it still reads from it (the last stage announcement, a meeting point)."""
    deadline = time.monotonic() + link.timeout_s
    with contextlib.suppress(Exception):  # noqa: SIM105 - a store error here changes nothing for this rank
        while time.monotonic() < deadline and link.store.add("left", 0) < link.env.world_size - 1:
            if link.store.check(["failed"]):
                return
            time.sleep(POLL_S)


class _Watcher(threading.Thread):
    """Watches the store for another rank's failure while this rank may be blocked inside a collective (a
    failure mid-step): it aborts the process group, so the collective raises at once instead of waiting for
    the collective timeout (NCCL's watchdog: 10 minutes). gloo already raises when a peer exits."""

    def __init__(self, link: _Link) -> None:
        super().__init__(name="exoformer-fail-together", daemon=True)
        self.link = link
        self.peer_message: str | None = None
        self._stop_event = threading.Event()
        self._own = f"rank {link.env.rank} failed:"

    def run(self) -> None:
        store = self.link.store
        while not self._stop_event.wait(WATCH_S):
            try:
                if not store.check(["failed"]):
                    continue
                message = store.get("failed").decode()
            except Exception:  # noqa: BLE001 - the store host is gone; meeting points report that
                return
            if message.startswith(self._own):
                return
            self.peer_message = message
            _abort_group()
            return

    def stop(self) -> None:
        self._stop_event.set()


def _peer_failure(link: _Link) -> str | None:
    """The failure another rank has reported, if any."""
    try:
        if not link.store.check(["failed"]):
            return None
        message = link.store.get("failed").decode()
    except Exception:  # noqa: BLE001 - the store host is gone
        return None
    return None if message.startswith(f"rank {link.env.rank} failed:") else message


def _abort_group() -> None:
    """Abort the default process group (its pending collectives fail); nothing to do without one."""
    if not dist.is_initialized():
        return
    with contextlib.suppress(Exception):  # backends without abort (gloo) raise on a vanished peer anyway
        from torch.distributed.distributed_c10d import _abort_process_group

        _abort_process_group()


def _report_failure(link: _Link, err: BaseException) -> None:
    text = " ".join(str(err).split())[:2000]
    message = f"rank {link.env.rank} failed: {type(err).__name__}: {text}"
    try:
        if link.store.add("failures", 1) == 1:  # the first failure names the cause
            link.store.set("failed", message)
        if link.env.rank == 0:  # the store dies with this process: let the others read it first
            deadline = time.monotonic() + ACK_WAIT_S
            others = link.env.world_size - 1
            while time.monotonic() < deadline and link.store.add("acks", 0) + link.store.add("left", 0) < others:
                time.sleep(POLL_S)
    except Exception:  # noqa: BLE001 - the store is gone: the others see that as a failure too
        pass


def meet(name: str) -> None:
    """Wait until every rank has arrived at the meeting point `name`, or raise `PeerFailed` as soon as a rank
    reports a failure (or the store host is gone)."""
    link = _link
    if link is None:
        return
    store, env = link.store, link.env
    arrived = [f"meet/{name}/{r}" for r in range(env.world_size)]
    deadline = time.monotonic() + link.timeout_s
    try:
        store.set(arrived[env.rank], "1")
        while True:
            if store.check(["failed"]):
                message = store.get("failed").decode()
                store.add("acks", 1)
                raise PeerFailed(f"stopping rank {env.rank} because {message}")
            if store.check(arrived):
                return
            if time.monotonic() > deadline:
                missing = [r for r, key in enumerate(arrived) if not store.check([key])]
                raise PeerFailed(f"rank(s) {missing} did not reach {name!r} within {link.timeout_s:.0f} s "
                                 f"({TIMEOUT_ENV})")
            time.sleep(POLL_S)
    except PeerFailed:
        raise
    except Exception as err:  # noqa: BLE001 - the store host (rank 0) exited or its node went away
        raise PeerFailed(f"stopping rank {env.rank}: lost the job's store at rank 0 ({type(err).__name__}: "
                         f"{' '.join(str(err).split())[:200]}); rank 0 has probably failed, see its log") from None


def announce(key: str, value: str) -> None:
    """Rank 0 tells every rank `value` under `key` (read with `hear`); nothing without a shared store."""
    if _link is not None:
        _link.store.set(f"say/{key}", value)


def hear(key: str) -> str | None:
    """What rank 0 announced under `key`, waiting for it as long as rank 0 works (a stage of rank 0 alone, such
    as the analysis, may take longer than any timeout); a failure or the loss of the store raises `PeerFailed`.
    None without a shared store."""
    link = _link
    if link is None:
        return None
    try:
        while True:
            if link.store.check(["failed"]):
                message = link.store.get("failed").decode()
                link.store.add("acks", 1)
                raise PeerFailed(f"stopping rank {link.env.rank} because {message}")
            if link.store.check([f"say/{key}"]):
                return link.store.get(f"say/{key}").decode()
            time.sleep(POLL_S)
    except PeerFailed:
        raise
    except Exception as err:  # noqa: BLE001 - the store host (rank 0) exited or its node went away
        raise PeerFailed(f"stopping rank {link.env.rank}: lost the job's store at rank 0 ({type(err).__name__}); "
                         "rank 0 has probably failed, see its log") from None


# --------------------------------------------------------------------------------------------- the process group

def init_process_group(env: DistEnv, device: torch.device) -> bool:
    """Start torch.distributed when there are several ranks; True when this call started it."""
    if env.world_size <= 1 or dist.is_initialized():
        return False
    if device.type == "cuda":
        torch.cuda.set_device(device)
    backend = "nccl" if device.type == "cuda" else "gloo"
    link = _link
    if link is None:
        dist.init_process_group(backend=backend, rank=env.rank, world_size=env.world_size)
        return True
    link.groups += 1
    meet(f"group-{link.groups}")  # every rank is here and none has failed: the group forms at once
    dist.init_process_group(backend=backend, store=dist.PrefixStore(f"group-{link.groups}", link.store),
                            rank=env.rank, world_size=env.world_size, timeout=_group_timeout())
    return True


def _group_timeout() -> timedelta | None:
    """The collectives' own timeout: torch's default (gloo 30, NCCL 10 minutes) unless TIMEOUT_ENV is set."""
    return timedelta(seconds=float(os.environ[TIMEOUT_ENV])) if TIMEOUT_ENV in os.environ else None


def barrier() -> None:
    """All ranks wait here; under `fail_together` a failed rank stops the waiting ones at once."""
    if not dist.is_initialized():
        return
    if _link is None:
        dist.barrier()
        return
    _link.meetings += 1
    meet(f"barrier-{_link.meetings}")


def data_parallel(module: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """DDP over `module`. Buffers are not re-broadcast every step unless some are persistent: the model's only
    buffers are the RoPE tables, which every rank builds identically (docs/official_code.md 1.1)."""
    persistent = set(module.state_dict()) & {name for name, _ in module.named_buffers()}
    return torch.nn.parallel.DistributedDataParallel(
        module, device_ids=[device.index] if device.type == "cuda" else None, broadcast_buffers=bool(persistent))


def check_same_step(step: int, *, where: str) -> None:
    """Every rank resumes from the same step, or every rank raises the same one-line UserError."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return
    steps = [None] * dist.get_world_size()
    dist.all_gather_object(steps, int(step))
    if len(set(steps)) > 1:
        shown = ", ".join(f"rank {r} step {s}" for r, s in enumerate(steps))
        raise UserError(f"ranks would resume from different checkpoints ({shown})", where=where,
                        fix="give every rank the same run directory on a shared filesystem, or delete the "
                            "checkpoints newer than the oldest step so that all ranks resume from it")


def group_rank_and_size() -> tuple[int, int]:
    """(rank, world size) of the running torch.distributed group; (0, 1) without one."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    if dist.is_initialized():
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor
