"""Run a function on N gloo ranks in fresh processes (torch.multiprocessing spawn, no Slurm, no torchrun).

`run_ranks(fn, n, *args)` -> [fn's result on rank 0, ..., rank n-1]; fn(rank, *args) must be a module-level
function of an importable module. A rank whose fn raises returns `RankError(type, message)` instead.
With `group=False` the ranks get only the torch.distributed environment variables, no process group.
"""

from __future__ import annotations

import os
import pickle
import queue as queue_module
import socket
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


@dataclass(frozen=True)
class RankError:
    type: str
    message: str


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(fn, rank: int, world: int, port: int, group: bool, results, args) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    torch.set_num_threads(1)
    try:
        if group:
            dist.init_process_group("gloo", rank=rank, world_size=world)
        value = fn(rank, *args)
    except Exception as err:  # noqa: BLE001 - handed to the test as data
        value = RankError(type(err).__name__, str(err))
    results.put((rank, pickle.dumps(value)))  # plain bytes: no shared memory that dies with this process
    if group and dist.is_initialized():
        dist.destroy_process_group()


def run_ranks(fn, world: int, *args, group: bool = True, timeout_s: float = 120.0) -> list:
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_entry, args=(fn, rank, world, port, group, results, args)) for rank in range(world)]
    for p in procs:
        p.start()
    out: dict[int, object] = {}
    try:
        for _ in range(world):
            rank, value = results.get(timeout=timeout_s)
            out[rank] = pickle.loads(value)
    except queue_module.Empty:
        pass
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    assert sorted(out) == list(range(world)), f"ranks {sorted(set(range(world)) - set(out))} returned nothing"
    return [out[r] for r in range(world)]
