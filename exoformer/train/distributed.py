"""Data-parallel setup from the environment: torchrun (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT) or
Slurm / submitit (SLURM_* variables, exported through submitit's TorchDistributedEnvironment).

gloo on CPU, NCCL on GPU. The model code knows nothing of this, so one model class serves one rank or many.

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
import re
import socket
import subprocess
import threading
import time
import zlib
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
WATCHER_JOIN_S = 5.0
"""How long leaving `fail_together` waits for its watcher thread (it wakes at once; a store call to a vanished host
can block longer, and that host's store is not this process's to tear down)."""
ACK_WAIT_S = 10.0
"""How long a failing store host stays up so that the waiting ranks can read its message."""
TIMEOUT_ENV = "EXOFORMER_DIST_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 1800.0
"""How long a healthy rank waits for a slow one in a collective or at a meeting point (torch's default for gloo);
the cluster profile's slurm.dist_timeout_s sets TIMEOUT_ENV in its jobs. Time a rank spends `working_alone`
does not count."""


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
            export_slurm_rendezvous()
            return DistEnv(rank=exported.rank, world_size=exported.world_size, local_rank=exported.local_rank)
        return _plain_srun_env(env)
    return DistEnv()


# --------------------------------------------------------------------------------------------- rendezvous

PORT_RANGE = (20000, 60000)
"""Rendezvous ports derived from the job id lie in [low, high) (above the usual service ports)."""


def slurm_hostnames(nodelist: str) -> list[str]:
    """Expand a Slurm host list (`SLURM_JOB_NODELIST`) as `scontrol show hostnames` does: `gpu-[01-03,07],cpu1`
    -> gpu-01 gpu-02 gpu-03 gpu-07 cpu1, keeping zero padding; several bracket groups in one name multiply."""
    names: list[str] = []
    for item in _top_level_items(nodelist.strip()):
        names.extend(_expand(item))
    return names


def _top_level_items(text: str) -> list[str]:
    items, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += (char == "[") - (char == "]")
        if depth < 0 or depth > 1:
            raise ValueError(f"malformed Slurm host list {text!r}")
        if char == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    if depth:
        raise ValueError(f"malformed Slurm host list {text!r}")
    items.append(text[start:])
    return [item for item in items if item]


def _expand(item: str) -> list[str]:
    open_at = item.find("[")
    if open_at < 0:
        return [item]
    close_at = item.index("]", open_at)
    prefix, ranges, rest = item[:open_at], item[open_at + 1:close_at], item[close_at + 1:]
    numbers: list[str] = []
    for part in ranges.split(","):
        low, _, high = part.partition("-")
        if not re.fullmatch(r"\d+", low) or (high and not re.fullmatch(r"\d+", high)):
            raise ValueError(f"malformed range {part!r} in Slurm host list {item!r}")
        width = len(low)
        numbers += [str(n).zfill(width) for n in range(int(low), int(high or low) + 1)]
    return [f"{prefix}{number}{tail}" for number in numbers for tail in _expand(rest)]


def node_address(name: str) -> str:
    """How the other ranks reach node `name`: the name itself where it resolves, else the NodeAddr Slurm has
    for it (`scontrol show node`; node names need not be host names)."""
    with contextlib.suppress(OSError):
        socket.getaddrinfo(name, None)
        return name
    try:
        shown = subprocess.run(["scontrol", "show", "node", "-o", name], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise UserError(f"node {name} of this job does not resolve and scontrol cannot say its address ({err})",
                        where="SLURM_JOB_NODELIST", fix="export MASTER_ADDR=<address of the job's first node> "
                                                         "before the job starts") from None
    found = re.search(r"\bNodeAddr=(\S+)", shown.stdout)
    if shown.returncode != 0 or not found:
        raise UserError(f"node {name} of this job does not resolve and `scontrol show node {name}` names no "
                        f"NodeAddr ({shown.stderr.strip()[:200]})", where="SLURM_JOB_NODELIST",
                        fix="export MASTER_ADDR=<address of the job's first node> before the job starts")
    return found.group(1)


def job_port(job_id: str) -> int:
    """The rendezvous port of a job: the same on every node and on every attempt of the job (a requeued job keeps
    its id), different for jobs whose ids differ by less than the range (neighbours on one node)."""
    low, high = PORT_RANGE
    base = int(job_id) if job_id.isdigit() else zlib.crc32(job_id.encode())
    return low + base % (high - low)


def slurm_rendezvous(env=None) -> tuple[str, int]:
    """(MASTER_ADDR, MASTER_PORT) of a Slurm job: the address of the first node of the allocation (where global
    rank 0 runs: Slurm places tasks in node-list order) and a port derived from the job id. Never the submit
    host (SLURM_SUBMIT_HOST), which is not part of the allocation."""
    env = os.environ if env is None else env
    nodes = slurm_hostnames(env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST", ""))
    job_id = env.get("SLURM_JOB_ID", "")
    if not nodes or not job_id:
        raise UserError("no Slurm allocation to derive the rendezvous from (SLURM_JOB_NODELIST, SLURM_JOB_ID)",
                        where="Slurm job environment", fix="launch through the slurm backend, or set MASTER_ADDR "
                                                           "and MASTER_PORT")
    return node_address(nodes[0]), job_port(job_id)


def export_slurm_rendezvous() -> None:
    """Set MASTER_ADDR/MASTER_PORT from `slurm_rendezvous` inside a Slurm job (a no-op outside one). submitit's
    own export takes the first node's name, which need not resolve, and a random port seeded by the job id."""
    if "SLURM_JOB_ID" in os.environ and ("SLURM_JOB_NODELIST" in os.environ or "SLURM_NODELIST" in os.environ):
        address, port = slurm_rendezvous()
        os.environ.update(MASTER_ADDR=address, MASTER_PORT=str(port))
        print(f"rendezvous {address}:{port}: first node of {os.environ.get('SLURM_JOB_NODELIST')}, job "
              f"{os.environ['SLURM_JOB_ID']}; this is rank {os.environ.get('SLURM_PROCID')} on node "
              f"{os.environ.get('SLURMD_NODENAME')}", flush=True)


def _plain_srun_env(env) -> DistEnv:
    """A task of `srun` without submitit: its place from SLURM_PROCID/NTASKS/LOCALID; the rendezvous as given
    (MASTER_ADDR/MASTER_PORT), else derived from the allocation (`slurm_rendezvous`)."""
    if ("MASTER_ADDR" not in env or "MASTER_PORT" not in env) and "SLURM_JOB_ID" in env and (
            env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")):
        address, port = slurm_rendezvous(env)
        os.environ.update(MASTER_ADDR=env.get("MASTER_ADDR", address), MASTER_PORT=env.get("MASTER_PORT", str(port)))
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
        # joined, so that no thread is inside a store call while the store host's process exits (torch's TCPStore
        # server then ends the process with std::terminate, exit status -6, instead of the rank's own status)
        watcher.join(timeout=WATCHER_JOIN_S)
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


@contextlib.contextmanager
def working_alone(what: str) -> Iterator[None]:
    """This rank does `what` while the others wait for it at the next meeting point (rank 0 saving a checkpoint
    or preparing the data): however long it takes, their wait does not count against the timeout. A rank that
    hangs here holds the job until its time limit; one that fails reports it as everywhere else."""
    link = _link
    if link is None:
        yield
        return
    key = f"alone/{link.env.rank}"
    link.store.set(key, what)
    try:
        yield
    finally:
        with contextlib.suppress(Exception):  # the store is gone: the others learn that at their meeting point
            link.store.set(key, "")


def _alone(store: dist.Store, ranks: list[int]) -> list[str]:
    """What the given ranks are doing alone right now (`working_alone`), as `rank r: what`."""
    busy = []
    for rank in ranks:
        key = f"alone/{rank}"
        if store.check([key]) and (what := store.get(key).decode()):
            busy.append(f"rank {rank}: {what}")
    return busy


def meet(name: str) -> None:
    """Wait until every rank has arrived at the meeting point `name`, or raise `PeerFailed` as soon as a rank
    reports a failure (or the store host is gone), or when a rank has not come within the timeout while doing
    nothing it declared `working_alone`."""
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
                if _alone(store, missing):
                    deadline = time.monotonic() + link.timeout_s
                    continue
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
        dist.init_process_group(backend=backend, rank=env.rank, world_size=env.world_size, timeout=_group_timeout())
        return True
    link.groups += 1
    meet(f"group-{link.groups}")  # every rank is here and none has failed: the group forms at once
    dist.init_process_group(backend=backend, store=dist.PrefixStore(f"group-{link.groups}", link.store),
                            rank=env.rank, world_size=env.world_size, timeout=_group_timeout())
    return True


def _group_timeout() -> timedelta:
    """The collectives' own timeout, explicit for both backends (NCCL's default would be 10 minutes): TIMEOUT_ENV,
    else DEFAULT_TIMEOUT_S."""
    return timedelta(seconds=timeout_s())


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
