"""Data-parallel setup from the environment: torchrun (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT) or
Slurm / submitit (SLURM_* variables, exported through submitit's TorchDistributedEnvironment).

gloo on CPU, NCCL on GPU. The model code knows nothing of this (STYLE 8).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(kw_only=True, slots=True, frozen=True)
class DistEnv:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def distributed_env() -> DistEnv:
    """Read this process's place in the job; a single process when nothing says otherwise."""
    env = os.environ
    if "RANK" in env and "WORLD_SIZE" in env:
        return DistEnv(rank=int(env["RANK"]), world_size=int(env["WORLD_SIZE"]),
                       local_rank=int(env.get("LOCAL_RANK", 0)))
    if int(env.get("SLURM_NTASKS", "1")) > 1 and "SLURM_PROCID" in env:
        from submitit.helpers import TorchDistributedEnvironment

        exported = TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
        return DistEnv(rank=exported.rank, world_size=exported.world_size, local_rank=exported.local_rank)
    return DistEnv()


def pick_device(device: str | torch.device | None, env: DistEnv) -> torch.device:
    if device is not None:
        return torch.device(device)
    if torch.cuda.is_available():
        return torch.device("cuda", env.local_rank % torch.cuda.device_count())
    return torch.device("cpu")


def init_process_group(env: DistEnv, device: torch.device) -> bool:
    """Start torch.distributed when there are several ranks; True when this call started it."""
    if env.world_size <= 1 or dist.is_initialized():
        return False
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo", rank=env.rank,
                            world_size=env.world_size)
    return True


def barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def all_reduce_sum(tensor: torch.Tensor) -> torch.Tensor:
    if dist.is_initialized():
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor
