"""`TrainConfig`: the training recipe of one run, validated once at construction.

Torch-free so that the registry, hashing and cost model can read it. Defaults are the paper's recipe
(docs/official_code.md section 4): Muon + AdamW, warmup-stable-decay, z-loss, 262,144 tokens per step,
38,147 steps (10B tokens).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from exoformer.errors import UserError, did_you_mean
from exoformer.limits import SEED_MAX, check_range, check_size
from exoformer.records import check_fields, load

PRECISIONS = ("auto", "fp32", "bf16-autocast", "official-pure-bf16")
"""auto: bf16 autocast with fp32 master weights on GPU, fp32 on CPU. official-pure-bf16 mimics the
author's code: bf16 weights and optimizer states, no master copy, no autocast (hazard H4)."""
STEP_PRECISIONS = PRECISIONS[1:]
"""What a training step runs: a precision with `auto` resolved for its device (resolve_precision)."""
BF16_PRECISIONS = ("bf16-autocast", "official-pure-bf16")
"""The step precisions that need a device computing bf16."""
LOSS_CHUNK_TOKENS = 4096
"""Tokens per chunk of the training loss (exoformer/train/loss.py): 4096 x 50,304 fp32 logits are 0.8 GiB (the
paper's micro-batch of 16 x 2048 is 8 chunks); the chunk's matmul stays large enough to run at full speed."""


def resolve_precision(precision: str, device: Any) -> str:
    """`auto` for a device (a torch.device or its type, 'cuda' / 'cpu'): bf16 autocast with fp32 master weights
    on CUDA, plain fp32 elsewhere; the other precisions are themselves."""
    if precision == "auto":
        return "bf16-autocast" if getattr(device, "type", device) == "cuda" else "fp32"
    return precision


UNSET_OMITTED = ("keep_every", "branch_from", "branch_step")
"""Fields left out of TrainConfig.to_dict (and so of the hash and of checkpoints) while they are null."""


@dataclass(kw_only=True, slots=True, frozen=True)
class TrainConfig:
    """One training run's recipe. Every field changes the result, so every field is hashed."""

    steps: int = 38_147
    """Optimizer steps (official: 38,147 x 262,144 = 10.0B tokens)."""
    batch_tokens: int = 262_144
    """Global tokens per optimizer step, over all ranks and accumulation micro-steps."""
    micro_batch_seqs: int = 16
    """Sequences per micro-batch per rank; accumulation steps = batch_tokens / (seq_len * this * ranks)."""
    seq_len: int = 2048
    """Tokens per packed training sequence."""
    seed: int = 42
    """Seeds model init, data order and every RNG."""
    data: str = "fineweb-edu-10b"
    """'smoke' (the bundled synthetic corpus) or a dataset name / directory of modded-nanogpt shards."""
    doc_masking: bool = True
    """Attention never crosses an EOT-delimited document boundary inside a packed sequence."""

    muon_lr: float = 0.01
    """Peak LR of Muon (every 2-D weight inside the stack, anchor projection, dynamic-MLP weights)."""
    muon_momentum: float = 0.95
    """Muon Nesterov momentum after warm-up."""
    muon_momentum_start: float = 0.85
    """Muon momentum at step 0 and at the last step (warm-up and cool-down)."""
    muon_momentum_steps: int = 100
    """Length of the momentum warm-up and of the cool-down."""
    muon_weight_decay: float = 0.1
    """Cautious weight decay of Muon (decay only where update and weight agree in sign)."""
    muon_beta2: float = 0.95
    """NorMuon-style second-moment EMA."""
    adam_lr: float = 0.003
    """Peak LR of AdamW (embeddings, head, 1-D parameters, norm gains, dynamic-MLP bias)."""
    coef_lr: float = 0.003
    """Peak LR of the mixing-coefficient AdamW group."""
    adam_beta1: float = 0.9
    adam_beta2: float = 0.95
    adam_eps: float = 1e-8
    adam_weight_decay: float = 0.0

    warmup_steps: int = 1000
    """Linear LR warm-up (f(s) = (s+1)/warmup for s < warmup)."""
    decay_fraction: float = 0.2
    """Last fraction of steps with linear decay (official: int(0.2 * steps) steps)."""
    final_lr_fraction: float = 0.1
    """LR multiplier the decay ends at (not zero)."""
    grad_clip: float = 1.0
    """Global gradient-norm clip."""
    z_loss: float = 1e-5
    """Weight of mean(logsumexp^2), counted once (the official code logs it twice, hazard H3)."""

    precision: str = "auto"
    """One of PRECISIONS."""
    compile: bool = False
    """torch.compile the model on CUDA, as the author's train.py does (speed only; ignored on CPU, where compiling a
    shrunk spec would cost a minute per run). Kernels may reorder float operations: hashed like any field."""

    val_every: int = 100
    """Validation loss every this many steps (0: never during training)."""
    val_batches: int = 10
    """Validation batches of micro_batch_seqs sequences used during training (always the same ones)."""
    final_val_tokens: int = 100_000_000
    """Tokens of the final validation perplexity (paper: the 100M-token validation shard)."""
    checkpoint_every: int = 1000
    """Checkpoint every this many steps, and always at the end."""
    keep_checkpoints: int = 2
    """Newest checkpoints kept on disk (older ones are deleted after a newer one is safely written)."""
    keep_every: int | None = None
    """Also checkpoint at every multiple of this step and never delete those: the points a WSD ladder's decay
    branches start from (docs/forecast.md "The CPU ladder"). null: none."""
    branch_from: str | None = None
    """A decay branch: the spec whose checkpoint at `branch_step` this run starts from (model, optimisers, data
    position, RNG), then trains to its own `steps`. Its recipe may differ from that spec's only in `steps`. null:
    train from scratch."""
    branch_step: int | None = None
    """The parent's step a decay branch starts from: before it, both schedules must agree (warm-up and stable)."""

    def __post_init__(self) -> None:
        _validate(self)

    @property
    def tokens(self) -> int:
        return self.steps * self.batch_tokens

    def accumulation_steps(self, world_size: int = 1) -> int:
        per_micro = self.seq_len * self.micro_batch_seqs * world_size
        if self.batch_tokens % per_micro:
            raise UserError(
                f"batch_tokens={self.batch_tokens} is not a multiple of seq_len*micro_batch_seqs*ranks={per_micro}",
                where="train.batch_tokens",
                fix="choose batch_tokens, micro_batch_seqs or the GPU count to divide evenly")
        return self.batch_tokens // per_micro

    def dividing_micro_batches(self, world_size: int = 1) -> list[int]:
        """Micro-batch sizes up to the current one whose sequences x ranks divide the global batch, largest first
        (what a refusal of an uneven batch suggests instead)."""
        return [m for m in range(self.micro_batch_seqs, 0, -1)
                if self.batch_tokens % (self.seq_len * m * world_size) == 0]

    def to_dict(self) -> dict:
        """Every field, except the WSD-ladder fields when unset (UNSET_OMITTED), so that the hash of every spec
        that does not use them is the one it had before they existed."""
        return {k: v for k, v in asdict(self).items() if not (k in UNSET_OMITTED and v is None)}

    @property
    def is_branch(self) -> bool:
        return self.branch_from is not None

    @classmethod
    def from_dict(cls, data: dict, *, where: str = "train") -> TrainConfig:
        """Strict construction from plain data: unknown keys are an error."""
        return load(cls, data, where=where, what="train")


def _validate(cfg: TrainConfig) -> None:
    check_fields(cfg, section="train")
    positive = ("steps", "batch_tokens", "micro_batch_seqs", "seq_len", "val_batches", "checkpoint_every",
                "keep_checkpoints", "final_val_tokens")
    for name in positive:
        if getattr(cfg, name) <= 0:
            raise UserError(f"must be positive, got {getattr(cfg, name)}", where=f"train.{name}", fix="use a value > 0")
    for f in fields(cfg):
        check_size(getattr(cfg, f.name), where=f"train.{f.name}")
    for name in ("muon_lr", "adam_lr", "coef_lr", "adam_eps", "grad_clip"):
        _in_range(cfg, name, low=0.0, low_open=True)  # learning rates, eps, clip: > 0
    for name in ("adam_beta1", "adam_beta2", "muon_beta2", "muon_momentum", "muon_momentum_start"):
        _in_range(cfg, name, low=0.0, high=1.0, high_open=True)  # EMA coefficients: [0, 1)
    for name in ("muon_weight_decay", "adam_weight_decay", "z_loss"):
        _in_range(cfg, name, low=0.0)
    _in_range(cfg, "final_lr_fraction", low=0.0, high=1.0)
    for name in ("warmup_steps", "muon_momentum_steps", "val_every"):
        _in_range(cfg, name, low=0)  # steps and intervals: >= 0, where 0 means off
    _in_range(cfg, "seed", low=0, high=SEED_MAX, high_open=True)
    if cfg.precision not in PRECISIONS:
        raise UserError(f"unknown precision {cfg.precision!r}", where="train.precision",
                        fix=did_you_mean(cfg.precision, PRECISIONS))
    if not 0.0 <= cfg.decay_fraction <= 1.0:
        raise UserError(f"must lie in [0, 1], got {cfg.decay_fraction}", where="train.decay_fraction", fix="use 0.2")
    _check_branch(cfg)
    if cfg.batch_tokens % cfg.seq_len:
        raise UserError(f"batch_tokens={cfg.batch_tokens} is not a multiple of seq_len={cfg.seq_len}",
                        where="train.batch_tokens", fix="make batch_tokens a multiple of seq_len")


def _in_range(cfg: TrainConfig, name: str, **bounds) -> None:
    """Finite and inside `bounds` (exoformer/limits.py check_range); the error names `train.<name>`."""
    check_range(getattr(cfg, name), where=f"train.{name}", **bounds)



def _check_branch(cfg: TrainConfig) -> None:
    """A decay branch names both its parent and its start step, and starts inside its own run."""
    if cfg.keep_every is not None and cfg.keep_every <= 0:
        raise UserError(f"must be positive or null, got {cfg.keep_every}", where="train.keep_every",
                        fix="use the step that every branch start of the ladder is a multiple of")
    if (cfg.branch_from is None) != (cfg.branch_step is None):
        missing = "train.branch_step" if cfg.branch_step is None else "train.branch_from"
        raise UserError("a decay branch needs both train.branch_from and train.branch_step", where=missing,
                        fix="set both (the parent spec and the step it starts from), or neither")
    if cfg.branch_step is not None and not 0 < cfg.branch_step < cfg.steps:
        raise UserError(f"must lie in (0, steps={cfg.steps}), got {cfg.branch_step}", where="train.branch_step",
                        fix="start the branch before its own last step, e.g. steps - int(decay_fraction * steps)")
