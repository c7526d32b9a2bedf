"""The training loop: one function that trains (or resumes, or finishes) one run in `out_dir`.

Recipe per update (docs/official_code.md 4.2-4.3): set both LRs and the Muon momentum from the step; for each
micro-batch, forward (bf16 autocast on GPU, none under official-pure-bf16), loss = (CE + z)/accumulation
(computed in chunks of tokens, train/loss.py), backward (DDP all-reduces on the last micro-batch only); clip
the global grad norm to 1.0; step Muon (orthogonalisations shared across ranks) and AdamW; zero grads.
Step numbers count updates done: a train line with step s follows the s-th update, and checkpoint
step_s holds the state after it (the official final checkpoint lacks the last update, hazard H11; ours
does not). After each update the periodic work (the metrics line, progress, TensorBoard, validation, the
checkpoint) runs as the hooks of exoformer/train/hooks.py on the one TrainState.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from exoformer.data.loader import Batch, TrainBatches, validation_batches
from exoformer.errors import UserError
from exoformer.model.config import ModelConfig
from exoformer.rundir import RunDir
from exoformer.train import distributed as dist_util
from exoformer.train import tensorboard
from exoformer.train.checkpoint import (
    check_resumable,
    checkpoint_dir,
    world_size_change,
    checkpoint_name,
    load_branch_start,
    load_final_checkpoint,
    load_latest_verified,
)
from exoformer.train.config import TrainConfig, resolve_precision
from exoformer.train.finite import check_finite_step
from exoformer.train.hooks import HOOKS, Hook, TrainState, Update, run_hooks
from exoformer.train.loss import LossForward, validation_conventions
from exoformer.train.optim import build_optimizers, set_schedules
from exoformer.train.progress import Progress
from exoformer.train.schedule import lr_multiplier_for, momentum_for
from exoformer.train.state import MetricsLog, seed_everything, set_rng_state

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR2)


@dataclass(kw_only=True, slots=True)
class TrainResult:
    step: int
    tokens: int
    final_train_loss: float | None
    interrupted: bool


ModelBuilder = Callable[[ModelConfig], nn.Module]


def _default_builder(config: ModelConfig) -> nn.Module:
    from exoformer.model import ExoTransformer

    return ExoTransformer(config)


def autocast_for(precision: str, device: torch.device):
    """bf16 autocast for `bf16-autocast` only: official-pure-bf16 computes in its weights' dtype with no
    autocast, as the official code (docs/official_code.md 1.1, precision); the model casts norm gains and
    coefficients to the activation dtype where it uses them."""
    if precision == "bf16-autocast":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def to_official_pure_bf16(model: nn.Module) -> None:
    """Hazard H4: Linear and Embedding weights in bf16 with no master copy; norms and coefficients stay fp32."""
    for module in model.modules():
        if isinstance(module, (nn.Linear, nn.Embedding)):
            module.to(torch.bfloat16)


def resolve_data_dir(data: str) -> Path:
    path = Path(data)
    if path.is_dir():
        return path
    from exoformer.data import resolve_data

    return Path(resolve_data(data))


def eot_id_for(data_dir: Path) -> int:
    from exoformer.data.tokenizer import for_data

    return for_data(data_dir).eot_token_id


class StopRequest:
    """SIGTERM / SIGUSR2 (Slurm's warning before a time limit or preemption) set a flag read at step boundaries.

    Installed only in the main thread; the previous handlers are restored on exit. Under submitit this
    replaces submitit's own USR2 handler for the duration of training: the loop saves and returns, and
    the caller decides what follows (the stage pipeline raises StageInterrupted).
    """

    def __init__(self) -> None:
        self.requested = False
        self._previous: dict[int, object] = {}

    def _handle(self, signum, frame) -> None:
        self.requested = True

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def train(model_config: ModelConfig, train_config: TrainConfig, out_dir: str | Path, *,
          device: str | torch.device | None = None, build_model: ModelBuilder | None = None,
          hooks: Sequence[Hook] = HOOKS, runs_root: str | Path | None = None) -> TrainResult:
    """Train, resume or (when finished) do nothing; see the module docstring. `build_model` defaults to
    ExoTransformer (tests pass small stand-ins); `hooks` is the periodic work after each update, in order.
    A decay branch (train.branch_from) with no checkpoint of its own starts from its parent's checkpoint at
    train.branch_step, found under `runs_root` (default: the runs root holding out_dir, out_dir/../..)."""
    if model_config.seq_len < train_config.seq_len:
        raise UserError(f"train.seq_len={train_config.seq_len} exceeds model.seq_len={model_config.seq_len}",
                        where="train.seq_len", fix="use a shorter sequence or a model built for it")
    env = dist_util.distributed_env()
    device = dist_util.pick_device(device, env)
    started = dist_util.init_process_group(env, device)
    try:
        root = Path(runs_root) if runs_root is not None else Path(out_dir).absolute().parent.parent
        return _train(model_config, train_config, Path(out_dir), env, device, build_model or _default_builder,
                      tuple(hooks), root)
    finally:
        if started:
            torch.distributed.destroy_process_group()


def _train(model_config: ModelConfig, cfg: TrainConfig, out_dir: Path, env: dist_util.DistEnv,
           device: torch.device, build_model: ModelBuilder, hooks: tuple[Hook, ...], runs_root: Path) -> TrainResult:
    ckpt_dir = RunDir(out_dir).checkpoints
    resume_path, saved = load_latest_verified(ckpt_dir)  # damaged ones skipped (warned), the newest good one
    branch_path = None
    if saved is None and cfg.is_branch:  # its own checkpoints win: a branch resumes like any run
        branch_path, saved = load_branch_start(runs_root, model_config.to_dict(), cfg.to_dict())
    dist_util.check_same_step(0 if saved is None else saved["step"], where=str(ckpt_dir))
    if saved is not None and branch_path is None:
        check_resumable(saved, model_config.to_dict(), cfg.to_dict(), where=str(resume_path))
        if saved["step"] >= cfg.steps:
            if env.is_main:
                print(f"{out_dir}: already finished ({saved['step']} steps); nothing to do", flush=True)
            return TrainResult(step=saved["step"], tokens=saved["tokens"],
                               final_train_loss=saved.get("final_train_loss"), interrupted=False)
    state = _start(model_config, cfg, out_dir, env, device, build_model, saved)
    if branch_path is not None and env.is_main:
        state.progress.note(f"decay branch of {cfg.branch_from}: started from {branch_path}")
    del saved  # the model and optimisers hold their own copies now
    interrupted = False
    try:
        with StopRequest() as stop:
            while state.step < cfg.steps:
                update = _update(state, stop)
                run_hooks(state, update, hooks)
                if update.stop and state.step < cfg.steps:
                    interrupted = True
                    state.progress.note(f"stop requested: saved step {state.step}; resume by running the same command")
                    break
    finally:
        state.close()
    return TrainResult(step=state.step, tokens=state.tokens, final_train_loss=state.last_loss, interrupted=interrupted)


def _start(model_config: ModelConfig, cfg: TrainConfig, out_dir: Path, env: dist_util.DistEnv, device: torch.device,
           build_model: ModelBuilder, saved: dict | None) -> TrainState:
    """The training state at step 0, or restored from checkpoint `saved` (model, optimisers, data order, RNGs)."""
    if env.is_main:
        with dist_util.working_alone("preparing the data"):
            data_dir = resolve_data_dir(cfg.data)
    dist_util.barrier()
    if not env.is_main:
        data_dir = resolve_data_dir(cfg.data)
    eot = eot_id_for(data_dir)

    seed_everything(cfg.seed)
    model = build_model(model_config)
    precision = resolve_precision(cfg.precision, device)
    if precision == "official-pure-bf16":
        to_official_pure_bf16(model)
    model.to(device)
    muon, adamw = build_optimizers(model, cfg)
    loader = TrainBatches(data_dir, seq_len=cfg.seq_len, step_seqs=cfg.batch_tokens // cfg.seq_len,
                          micro_batch_seqs=cfg.micro_batch_seqs, seed=cfg.seed, rank=env.rank,
                          world_size=env.world_size, vocab_size=model_config.vocab_size, eot=eot)
    loader.shards.check_vocab()
    accumulation = cfg.accumulation_steps(env.world_size)
    val_set = list(validation_batches(data_dir, seq_len=cfg.seq_len, batch_seqs=cfg.micro_batch_seqs,
                                      max_seqs=cfg.val_batches * cfg.micro_batch_seqs,
                                      vocab_size=model_config.vocab_size, eot=eot, rank=env.rank,
                                      world_size=env.world_size))

    step, tokens, last_loss, written_by = 0, 0, None, env.world_size
    if saved is not None:
        written_by = saved.get("world_size", env.world_size)
        model.load_state_dict(saved["model"])
        muon.load_state_dict(saved["muon"])
        adamw.load_state_dict(saved["adamw"])
        loader.load_state_dict(saved["loader"])
        set_rng_state(saved["rng"])
        step, tokens, last_loss = saved["step"], saved["tokens"], saved.get("final_train_loss")

    forward: nn.Module = LossForward(model, cfg.z_loss)
    if env.world_size > 1:
        forward = dist_util.data_parallel(forward, device)
    if cfg.compile and device.type == "cuda":  # on CPU compiling costs a minute and buys nothing here
        forward = torch.compile(forward)

    def validation_losses() -> dict[str, float]:
        return validation_conventions(batch_criteria(model, val_set, device=device, precision=precision,
                                                     doc_masking=cfg.doc_masking), cfg.z_loss)

    files = RunDir(out_dir)
    state = TrainState(
        model_config=model_config, cfg=cfg, env=env, device=device, precision=precision, checkpoints=files.checkpoints,
        model=model, muon=muon, adamw=adamw, loader=loader, forward=forward, autocast=autocast_for(precision, device),
        accumulation=accumulation, validation_losses=validation_losses, progress=Progress(cfg.steps, env.is_main),
        metrics=MetricsLog(files.metrics_file, resume_step=step) if env.is_main else None,
        board=tensorboard.EventWriter(files.tensorboard) if env.is_main and tensorboard.enabled() else None,
        step=step, tokens=tokens, last_loss=last_loss)
    if env.is_main:
        state.progress.note(f"{'resuming at' if step else 'starting'} step {step}/{cfg.steps}: "
                            f"{env.world_size} rank(s) on {device.type}, precision {precision}, "
                            f"{accumulation} micro-batch(es) of {cfg.micro_batch_seqs}x{cfg.seq_len} per rank"
                            + world_size_change(written_by, env.world_size))
    return state


def _update(state: TrainState, stop: StopRequest) -> Update:
    """One optimiser update (module docstring): schedules, the micro-batches, clip, step; the loss and the stop
    flag agreed across ranks. Counts it in `state`; fails on a non-finite loss or gradient norm."""
    cfg, device, world_size = state.cfg, state.device, state.env.world_size
    started = time.perf_counter()
    set_schedules((state.muon, state.adamw), lr_multiplier_for(cfg, state.step), momentum_for(cfg, state.step))
    micro_batches = state.loader.next_step()
    loss_sum = torch.zeros((), device=device)
    forward = state.forward
    for i, batch in enumerate(micro_batches):
        is_last = i == len(micro_batches) - 1
        no_sync = forward.no_sync() if world_size > 1 and not is_last and hasattr(
            forward, "no_sync") else contextlib.nullcontext()
        with no_sync:
            with state.autocast:
                loss, _, _ = forward(batch.x.to(device, non_blocking=True),
                                     batch.doc_starts.to(device) if cfg.doc_masking else None,
                                     batch.y.to(device, non_blocking=True))
            (loss / state.accumulation).backward()
        loss_sum += loss.detach()
    grad_norm = torch.nn.utils.clip_grad_norm_(state.model.parameters(), cfg.grad_clip)
    state.muon.step()
    state.adamw.step()
    state.muon.zero_grad(set_to_none=True)
    state.adamw.zero_grad(set_to_none=True)
    state.step += 1
    state.tokens += cfg.batch_tokens
    shared = torch.stack([loss_sum / state.accumulation, torch.tensor(float(stop.requested), device=device)])
    dist_util.all_reduce_sum(shared)
    state.last_loss = float(shared[0]) / world_size
    norm = float(grad_norm)
    check_finite_step(state.step, state.last_loss, norm)  # before this step's metrics line exists
    stop_now = bool(shared[1] > 0)
    elapsed = time.perf_counter() - started
    return Update(step=state.step, tokens=state.tokens, loss=state.last_loss, grad_norm=norm,
                  lr=state.muon.param_groups[0]["lr"], seconds=elapsed, tokens_per_s=cfg.batch_tokens / elapsed,
                  stop=stop_now)


def final_validation(model_config: ModelConfig, train_config: TrainConfig, out_dir: str | Path, *,
                     tokens: int | None = None, device: str | torch.device | None = None,
                     build_model: ModelBuilder | None = None) -> dict:
    """Validation of the run's final checkpoint (verified: a missing or damaged one is a UserError naming it) on
    the first `tokens` validation tokens (default train_config.final_val_tokens), in order, in batches of
    `train.micro_batch_seqs` sequences with the forward as in training (precision, document masking). Both
    conventions of exoformer.train.loss.validation_conventions: `val_loss`/`val_ppl` as the author's
    `estimate_loss` reports them, `val_loss_ce`/`val_ppl_ce` pure cross-entropy. Under a torch.distributed group
    the batches are split across its ranks (rank r takes batches r, r+W, ...) and gathered, so every rank
    returns the same numbers as one process would."""
    env = dist_util.distributed_env()
    device = dist_util.pick_device(device, env)
    state = load_final_checkpoint(out_dir, train_config.steps)
    path = checkpoint_dir(out_dir) / checkpoint_name(train_config.steps)
    check_resumable(state, model_config.to_dict(), train_config.to_dict(), where=str(path))
    model = (build_model or _default_builder)(model_config)
    precision = resolve_precision(train_config.precision, device)
    if precision == "official-pure-bf16":
        to_official_pure_bf16(model)
    model.load_state_dict(state["model"])
    model.to(device)
    data_dir = resolve_data_dir(train_config.data)
    budget = train_config.final_val_tokens if tokens is None else tokens
    rank, world_size = dist_util.group_rank_and_size()
    batches = validation_batches(data_dir, seq_len=train_config.seq_len, batch_seqs=train_config.micro_batch_seqs,
                                 max_seqs=max(1, budget // train_config.seq_len), vocab_size=model_config.vocab_size,
                                 eot=eot_id_for(data_dir), rank=rank, world_size=world_size)
    per_batch = batch_criteria(model, batches, device=device, precision=precision,
                               doc_masking=train_config.doc_masking)
    return {**validation_conventions(per_batch, train_config.z_loss), "step": state["step"]}


@torch.no_grad()
def batch_criteria(model: nn.Module, batches: Iterable[Batch], *, device: str | torch.device, precision: str,
                   doc_masking: bool) -> list[tuple[float, float, int]]:
    """Per batch (mean CE, mean lse^2, tokens), in stream order over the batches of every rank (this rank scored
    batches rank, rank + W, ...)."""
    rank, world_size = dist_util.group_rank_and_size()
    was_training = model.training
    model.eval()
    criterion = LossForward(model, 0.0)
    sums, tokens = [], []
    for batch in batches:
        x, y = batch.x.to(device), batch.y.to(device)
        with autocast_for(precision, torch.device(device)):
            _, ce, z = criterion(x, batch.doc_starts.to(device) if doc_masking else None, y)
        sums.append(torch.stack([ce, z]))
        tokens.append(int(y.numel()))
    model.train(was_training)
    values = torch.stack(sums).tolist() if sums else []  # one device sync for the whole pass
    mine = [(i * world_size + rank, ce, z, n) for i, ((ce, z), n) in enumerate(zip(values, tokens, strict=True))]
    if world_size > 1:
        shares: list = [None] * world_size
        torch.distributed.all_gather_object(shares, mine)
        mine = [item for share in shares for item in share]
    return [(ce, z, n) for _, ce, z, n in sorted(mine)]
