"""Can these specs run where `run` is about to put them? Checked before anything is written or submitted.

Three mistakes otherwise surface deep inside a job, or never: a GPU profile run locally on a machine without
CUDA, a precision the device cannot do, and a rank count that does not divide the global batch. Each is one
UserError naming the field and the fix (exit 2). Torch-free at import: torch is asked about the local device
only when a local or inline backend is checked, no `device` is given and the installed torch has a GPU backend.

The rules:
- Local and inline jobs run on this machine, one rank each (backends.LocalBackend starts one task). A
  profile with `slurm.gpus_per_node > 0` promises GPUs, so on a machine without CUDA it is an error.
- Slurm jobs run nodes x slurm.tasks_per_node ranks (backends.SlurmBackend; one per GPU unless a CPU profile
  sets tasks_per_node); their device is the profile's GPU, judged by `gpu.name` (NO_BF16_GPUS), or the CPU when
  gpus_per_node is 0.
- The bf16 precisions (bf16-autocast, official-pure-bf16, and `auto`, which means bf16 autocast on CUDA)
  need a CUDA device with bf16 (compute capability >= 8.0, Ampere or newer). On CPU every precision is
  allowed: PyTorch computes bf16 autocast and bf16 weights there correctly, only slower, and `auto` is fp32
  there. `compile: true` is allowed on CPU too: it runs (same losses) and only costs compile time.
- `model.attention: flex` trains only on CUDA (no FlexAttention backward on CPU); `auto` is sdpa on CPU.
- bf16 scoring (`eval.precision`, exoformer/eval/precision.py) needs such a device as well.
- batch_tokens must be a multiple of seq_len x micro_batch_seqs x ranks (TrainConfig.accumulation_steps).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from exoformer.errors import UserError
from exoformer.run_identity import OURS
from exoformer.stage import run_source
from exoformer.train.config import BF16_PRECISIONS, resolve_precision

if TYPE_CHECKING:
    from exoformer.registry.profiles import Profile
    from exoformer.registry.spec import Spec

NO_BF16_GPUS = re.compile(r"(?<![A-Z0-9])(K80|M60|P4|P40|P100|V100|T4|TITAN V|GTX 10\d\d|RTX 20\d\d|QUADRO RTX)"
                          r"(?![A-Z0-9])")
"""GPU families before Ampere (compute capability < 8.0, no bf16 units), matched in the upper-cased gpu.name."""
GPU_BACKENDS = ("cuda", "hip")
"""torch/version.py's names for the GPU backends torch.cuda drives (CUDA, and ROCm through the same API)."""


@dataclass(kw_only=True, slots=True, frozen=True)
class DeviceInfo:
    """The device a job trains on, as far as the checks need it."""

    kind: str
    """'cuda' or 'cpu'."""
    name: str
    bf16: bool
    """Computes bf16 natively (CUDA compute capability >= 8.0); CPUs count as True (slow but correct)."""


def probe_local_device() -> DeviceInfo:
    """This machine's training device, as exoformer.train.distributed picks it (the first CUDA GPU, else CPU).

    A torch build with no GPU backend (the CPU wheel requirements.txt installs) can only train on the CPU, which
    its version file says without importing torch, whose import would delay the first local job."""
    if "torch" in sys.modules or torch_build_backends() != {}:
        import torch

        if torch.cuda.is_available():
            # not torch.cuda.is_bf16_supported(): it also says True for bf16 emulated on pre-Ampere GPUs
            return DeviceInfo(kind="cuda", name=torch.cuda.get_device_name(0),
                              bf16=torch.cuda.get_device_capability(0) >= (8, 0))
    return DeviceInfo(kind="cpu", name="cpu", bf16=True)


def torch_build_backends(version_file: Path | None = None) -> dict[str, str] | None:
    """The GPU backends the installed torch was built with ({'cuda': '12.8'}; {} for a CPU-only build), read from
    torch/version.py (`cuda = ...`, `hip = ...`, written by torch's build) without importing torch; None when
    that file cannot be found or read as such, and the caller has to ask torch itself."""
    import ast
    import importlib.util

    if version_file is None:
        found = importlib.util.find_spec("torch")
        if found is None or not found.submodule_search_locations:
            return None
        version_file = Path(next(iter(found.submodule_search_locations))) / "version.py"
    if not version_file.is_file():  # a regular file only (never a FIFO or a directory)
        return None
    try:
        tree = ast.parse(version_file.read_text())
    except (OSError, SyntaxError, ValueError):
        return None
    values = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        elif isinstance(node, ast.AnnAssign) and node.value is not None:  # `cuda: Optional[str] = None`
            target = node.target
        else:
            continue
        if isinstance(target, ast.Name) and target.id in GPU_BACKENDS:
            try:
                values[target.id] = ast.literal_eval(node.value)
            except ValueError:
                return None
    if set(values) != set(GPU_BACKENDS):
        return None
    return {name: str(value) for name, value in values.items() if value is not None}


def profile_device(profile: Profile) -> DeviceInfo:
    """The device of a Slurm job placed by `profile`: its GPU (bf16 judged by name) or, without GPUs, a CPU."""
    if profile.slurm.gpus_per_node <= 0:
        return DeviceInfo(kind="cpu", name="cpu", bf16=True)
    name = profile.gpu.name if profile.gpu is not None else "unnamed GPU"
    return DeviceInfo(kind="cuda", name=name, bf16=NO_BF16_GPUS.search(name.upper()) is None)


def _on_this_machine(backend_name: str) -> bool:
    """The backend's declared capability: its jobs run on this machine (one rank each)."""
    from exoformer.runs.backends import check_name

    return check_name(backend_name).on_this_machine


def world_size(profile: Profile | None, backend_name: str) -> int:
    """Ranks of one job: 1 locally; nodes x tasks per node on Slurm (one per GPU unless tasks_per_node says)."""
    if _on_this_machine(backend_name) or profile is None:
        return 1
    return profile.slurm.ranks


def check_placement(specs: list[Spec], profile: Profile | None, backend_name: str, *,
                    device: DeviceInfo | None = None) -> None:
    """Raise UserError at the first spec that cannot run on `backend_name` with `profile` (None: no profile).

    `device` replaces the probe of this machine (local/inline) or the profile's GPU (slurm); tests pass fakes.
    """
    local = _on_this_machine(backend_name)  # an unknown name is a UserError here
    if not specs:
        return
    if local:
        device = device or probe_local_device()
        if profile is not None and profile.slurm.gpus_per_node > 0 and device.kind != "cuda":
            raise UserError(
                f"profile {profile.name!r} asks for {profile.slurm.gpus_per_node} GPUs per node "
                f"(slurm.gpus_per_node) but this machine has no CUDA device for the {backend_name} backend",
                where=f"--profile {profile.name}",
                fix="use --profile cpu (CPU-scale specs: --preset smoke), or --backend slurm on a GPU cluster")
    else:
        device = device or (profile_device(profile) if profile is not None else None)
    ranks = world_size(profile, backend_name)
    for spec in specs:
        if device is not None:
            _check_precision(spec, device)
            _check_attention(spec, device)
        _check_batch(spec, ranks, profile)


def _check_precision(spec: Spec, device: DeviceInfo) -> None:
    """The training precision, then the scoring precision, on the job's device."""
    from exoformer.eval.precision import check_scoring_device

    precision = spec.train.precision
    if resolve_precision(precision, device.kind) in BF16_PRECISIONS and not device.bf16:
        meaning = " (bf16 autocast on CUDA)" if precision == "auto" else ""
        raise UserError(f"precision {precision!r}{meaning} needs bf16, which {device.name} does not compute "
                        "(compute capability < 8.0)", where=f"train.precision of {spec.name}",
                        fix="--set train.precision=fp32, or a bf16 GPU (A100, H100, H200)")
    check_scoring_device(spec.eval.precision, kind=device.kind, name=device.name, bf16=device.bf16,
                         where=f"{spec.name}: eval.precision")


def _check_attention(spec: Spec, device: DeviceInfo) -> None:
    """`attention: flex` cannot train on a CPU (torch's FlexAttention has no CPU backward); `auto` is sdpa there.
    A checkpoint run (source `checkpoint`) does not train and may score with flex anywhere."""
    if spec.model.attention == "flex" and device.kind != "cuda" and run_source(spec) == OURS:
        raise UserError("attention 'flex' cannot train on the CPU (torch's FlexAttention has no CPU backward)",
                        where=f"{spec.name}: model.attention",
                        fix="--set model.attention=auto (flex on CUDA, sdpa on CPU) or sdpa, or a GPU profile")


def _check_batch(spec: Spec, ranks: int, profile: Profile | None) -> None:
    cfg = spec.train
    per_step = cfg.seq_len * cfg.micro_batch_seqs * ranks
    if cfg.batch_tokens % per_step == 0:
        return
    per_node = "tasks_per_node" if profile and profile.slurm.tasks_per_node is not None else "gpus_per_node"
    origin = (f"; {ranks} ranks = slurm.nodes {profile.slurm.nodes} x {per_node} "
              f"{profile.slurm.tasks} of profile {profile.name!r}") if profile and ranks > 1 else ""
    fitting = cfg.dividing_micro_batches(ranks)
    fix = (f"--set train.micro_batch_seqs={fitting[0]}" if fitting else
           f"fewer ranks (--set profile.slurm.{per_node}=...) or a train.batch_tokens that is a multiple of "
           f"{cfg.seq_len * ranks}")
    raise UserError(f"batch_tokens={cfg.batch_tokens} is not a multiple of seq_len x micro_batch_seqs x ranks = "
                    f"{cfg.seq_len} x {cfg.micro_batch_seqs} x {ranks} = {per_step}{origin}",
                    where=f"train.batch_tokens of {spec.name}", fix=fix)
