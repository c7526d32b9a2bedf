"""Acceptance check of the GPU paths in one command: prints a table and writes its rows as JSON.

Checks (each a function returning one row: name, value, unit, device, ok, notes; a check that raises
becomes a row with its error, and the remaining checks still run):
- FlexAttention with a document mask against dense-mask SDPA in bf16 (max |difference|, time ratio);
- compiled against eager loss for each variant family (bf16 autocast on GPU, fp32 with --cpu);
- train step of gated and dynamic-e-exoformer as the 450m preset runs it and `plan` prices it (its model at the
  450M shape with its attention kernel, its precision official-pure-bf16, compiled as it says, micro-batch 16 x
  seq 2048, document masks, chunked CE + z-loss, backward, clip, Muon + AdamW): ms/step, tokens/s, MFU, peak
  memory, and the ratios of dynamic-e-exoformer to gated;
- the memory model (exoformer/budget/memory.py) for that step against `torch.cuda.max_memory_allocated`:
  the measured / estimated ratio goes into the JSON (`memory_ratio`), which `plan` and `preflight` then apply;
- one row per fix of the GPU paths: resume of a pure-bf16 run, evaluation on the job's device, flex against
  sdpa step time, the per-batch document block mask's build time, Muon shared across ranks, chunked loss memory;
- 30 bf16 training steps eager against compiled (largest loss difference, speed-up);
- eval loglikelihood requests/s and peak memory, batched against batch 1, and lean scoring against full
  (B, T, V) logits;
- process-group init with the ranks present (NCCL, one rank per visible GPU);
- numerics as the author's code: bf16 scoring at batch 1 against run_eval.py's loglikelihood on this device
  (its own log_softmax kernel, a bf16 sum), batched against batch 1, CUDA against CPU (decision agreement per
  multiple-choice question); Polar Express on a bf16 update against a transcription of the official kernels'
  rounding (and the rounding after every op, for scale).
MFU = (6N + attention) FLOPs per token (exoformer.budget.cost.flops_per_token) x tokens/s over the
device's dense bf16 peak from PEAK_BF16_TFLOPS; a device not in that table gets "unknown peak", never a
guess. Once results/gpu_check.json holds an MFU, `plan` uses it instead of the assumed 40%.

`--cpu` runs the same checks at toy scale on the CPU (values marked CPU; gloo with world size 1; compiled
with the aot_eager backend, which traces like inductor but needs no C++ compiler) for CI.

    python benchmarks/gpu_check.py [--cpu] [--out PATH] [--only NAME ...] [--budget-s SECONDS]

Rows run in the order listed by `checks()`: the train steps and MFU first, the compile checks last.
"""

from __future__ import annotations

import argparse
import datetime
import platform
import statistics
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from measure import measure, mib, sync, token_requests

from exoformer.budget.cost import MEASURED_TOOL, flops_per_token
from exoformer.io import atomic_write_json
from exoformer.model import ExoTransformer, variant_config
from exoformer.model.config import ModelConfig, resolve_attention
from exoformer.train.config import resolve_precision

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = {False: REPO_ROOT / "results" / "gpu_check.json", True: REPO_ROOT / "results" / "gpu_check_cpu.json"}

PEAK_BF16_TFLOPS = (
    ("H100 PCIe", 756.0),
    ("H100 NVL", 835.0),
    ("H100", 989.0),
    ("H200", 989.0),
    ("A100", 312.0),
)
"""Dense bf16 peak per GPU (vendor datasheets, no sparsity), matched in order on the CUDA device name."""

FAMILIES = {
    "base": "base",
    "gated": "gated",
    "resformer": "gated-resformer",
    "nuresformer": "e-nuresformer",
    "exoformer": "e-exoformer",
    "exoformer-scalar": "s-exoformer",
    "dynamic-exoformer": "dynamic-e-exoformer",
    "exoformer-from-h1": "dynamic-e-exoformer-from-h1",
}
"""One variant per family of the paper: every anchor source, the coefficient granularities, dynamic."""

STEP_VARIANTS = ("gated", "dynamic-e-exoformer")
GPU_BUDGET_S = 420.0
"""On a GPU no check starts after this many seconds, so that the whole run stays within ~8 minutes (the
train-step rows compile the 450M model, about a minute each)."""


def peak_tflops(device_name: str) -> float | None:
    for key, tflops in PEAK_BF16_TFLOPS:
        if key.lower() in device_name.lower():
            return tflops
    return None


@dataclass(slots=True)
class Row:
    name: str
    value: float | None
    unit: str
    device: str
    ok: bool | None
    """True / False against the check's tolerance; None for a measurement without one."""
    notes: str = ""
    seconds: float = 0.0
    """Wall time of the check itself (shared measurements count in the first row that needs them)."""


@dataclass(frozen=True, slots=True)
class Scale:
    """Sizes of every check: the real ones on a GPU, toy ones with --cpu."""

    cpu: bool
    attention: tuple[int, int, int, int]  # B, H, T, d_head
    family_shape: dict
    family_batch: int
    step_shape: dict
    """Shape of the train-step rows over the 450m preset's model ({}: the preset's own)."""
    step_batch: int
    step_warmup: int
    step_reps: int
    train_shape: dict
    train_batch: int
    train_steps: int
    eval_shape: dict
    eval_window: int
    eval_requests: int
    eval_batch: int

    @property
    def backend(self) -> str:
        return "aot_eager" if self.cpu else "inductor"

    @property
    def precision(self) -> str:
        """What `auto` trains in on this scale's device (bf16 autocast on CUDA, fp32 on CPU)."""
        return resolve_precision("auto", "cpu" if self.cpu else "cuda")


GPU_SCALE = Scale(
    cpu=False, attention=(4, 16, 2048, 64),
    family_shape={"shape": "proxy", "n_layer": 3}, family_batch=4,
    step_shape={}, step_batch=16, step_warmup=2, step_reps=5,
    train_shape={"shape": "proxy", "n_layer": 4}, train_batch=8, train_steps=30,
    eval_shape={"shape": "450m", "vocab_size": 57601}, eval_window=1024, eval_requests=64, eval_batch=16,
)
CPU_SCALE = Scale(
    cpu=True, attention=(1, 2, 128, 16),
    family_shape={"shape": "tiny", "seq_len": 32}, family_batch=2,
    step_shape={"shape": "tiny", "seq_len": 64}, step_batch=2, step_warmup=2, step_reps=2,
    train_shape={"shape": "tiny", "seq_len": 32}, train_batch=2, train_steps=30,
    eval_shape={"shape": "tiny", "seq_len": 64}, eval_window=64, eval_requests=16, eval_batch=8,
)


def config(variant: str, shape: dict) -> ModelConfig:
    shape = dict(shape)
    return variant_config(variant, shape.pop("shape"), **shape)


class CheckFailed(Exception):
    """A shared measurement failed earlier; the message is its description."""


def describe_error(err: BaseException) -> str:
    """'Class: message (file:line)', one line, the line being where it was raised."""
    if isinstance(err, CheckFailed):
        return str(err)
    frames = traceback.extract_tb(err.__traceback__) if err.__traceback__ else []
    where = f" ({Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
    return f"{err.__class__.__name__}: {' '.join(str(err).split())[:300]}{where}"


@dataclass
class Context:
    """The device, the scale, and measurements shared by several rows (each computed once)."""

    scale: Scale
    device: torch.device
    label: str
    """What the rows' device column says: 'CPU' or the CUDA device name."""
    peak: float | None
    memo: dict = field(default_factory=dict)

    def once(self, key, compute: Callable):
        """compute() the first time; later calls return its result or raise its error again.

        An error is kept as text: a kept exception would hold its frames, and with them the GPU memory of
        the model that failed, through every later check."""
        if key not in self.memo:
            try:
                self.memo[key] = (True, compute())
            except Exception as err:  # noqa: BLE001 - every dependent row reports it
                self.memo[key] = (False, describe_error(err))
        ok, value = self.memo[key]
        if not ok:
            raise CheckFailed(value)
        return value

    def row(self, value, unit: str, ok: bool | None = None, notes: str = "") -> Row:
        """A row of this device; the runner names it."""
        if self.scale.cpu:
            notes = "CPU toy scale" + (f"; {notes}" if notes else "")
        return Row("", None if value is None else float(value), unit, self.label, ok, notes)


def autocast(ctx: Context):
    from exoformer.train.loop import autocast_for

    return autocast_for(ctx.scale.precision, ctx.device)


def timed_median(fn: Callable, device: torch.device, warmup: int, reps: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        _, elapsed, _ = measure(fn, device)
        times.append(elapsed)
    return statistics.median(times)


# ----------------------------------------------------------------------------- attention

def flex_against_sdpa(ctx: Context) -> dict:
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    b, h, t, dh = ctx.scale.attention
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(b, h, t, dh, generator=g).to(ctx.device, torch.bfloat16) for _ in range(3))
    starts = torch.zeros(b, t, dtype=torch.bool)
    starts[:, 0] = True
    for row in range(b):  # each row its own document boundaries
        starts[row, torch.randint(1, t, (max(1, t // 400) + 2,), generator=g)] = True
    doc_ids = torch.cumsum(starts.to(torch.int32), dim=1).to(ctx.device)

    def same_doc_causal(bi, hi, q_idx, kv_idx):
        return (kv_idx <= q_idx) & (doc_ids[bi, kv_idx] == doc_ids[bi, q_idx])

    block = create_block_mask(same_doc_causal, b, None, t, t, device=ctx.device)
    dense = (torch.ones(t, t, dtype=torch.bool, device=ctx.device).tril()
             & (doc_ids[:, :, None] == doc_ids[:, None, :]))[:, None]
    attend = flex_attention if ctx.scale.cpu else torch.compile(flex_attention, dynamic=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # eager flex on CPU warns that it is unfused
        flex_out = attend(q, k, v, block_mask=block)
        flex_s = timed_median(lambda: attend(q, k, v, block_mask=block), ctx.device, 1, 5)
    sdpa_out = F.scaled_dot_product_attention(q, k, v, attn_mask=dense)
    sdpa_s = timed_median(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=dense), ctx.device, 1, 5)
    return {"max_diff": float((flex_out.float() - sdpa_out.float()).abs().max()),
            "flex_ms": 1000 * flex_s, "sdpa_ms": 1000 * sdpa_s, "docs": int(starts.sum())}


def row_flex_diff(ctx: Context) -> Row:
    r = ctx.once("flex", lambda: flex_against_sdpa(ctx))
    b, h, t, dh = ctx.scale.attention
    return ctx.row(r["max_diff"], "abs", r["max_diff"] <= 2e-2,
                   f"B{b} H{h} T{t} dh{dh}, {r['docs']} documents; tolerance 2e-2")


def row_flex_time(ctx: Context) -> Row:
    r = ctx.once("flex", lambda: flex_against_sdpa(ctx))
    return ctx.row(r["flex_ms"] / r["sdpa_ms"], "x", None,
                   f"flex {r['flex_ms']:.3g} ms, SDPA {r['sdpa_ms']:.3g} ms" + (" (flex eager)" if ctx.scale.cpu
                                                                                  else " (flex compiled)"))


# ----------------------------------------------------------------------------- compile vs eager

def batch_for(cfg: ModelConfig, batch: int, seq: int, device: torch.device, seed: int = 0):
    """Random tokens with a few document starts per row: (x, y, doc_starts)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(1, cfg.vocab_size, (batch, seq), generator=g)
    y = torch.randint(1, cfg.vocab_size, (batch, seq), generator=g)
    starts = torch.zeros(batch, seq, dtype=torch.bool)
    starts[:, 0] = True
    for row in range(batch):  # each row its own document boundaries, as packed batches have
        starts[row, torch.randint(1, seq, (2,), generator=g)] = True
    return x.to(device), y.to(device), starts.to(device)


def build_model(cfg: ModelConfig, device: torch.device, seed: int = 0) -> ExoTransformer:
    torch.manual_seed(seed)
    with torch.device(device):
        return ExoTransformer(cfg)


def compiled_against_eager(ctx: Context, variant: str) -> Row:
    from exoformer.train.loss import lm_loss

    cfg = config(variant, ctx.scale.family_shape)
    model = build_model(cfg, ctx.device)
    with torch.no_grad():  # zero-initialised out-projections and head would hide most of the model
        for p in model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    x, y, starts = batch_for(cfg, ctx.scale.family_batch, cfg.seq_len, ctx.device)
    torch._dynamo.reset()  # a fresh cache per model: no recompile limit, no stale guards
    compiled = torch.compile(model, backend=ctx.scale.backend)
    with torch.no_grad(), autocast(ctx):
        eager_loss = float(lm_loss(model(x, starts), y, 1e-5)[0])
        compiled_loss = float(lm_loss(compiled(x, starts), y, 1e-5)[0])
    diff = abs(compiled_loss - eager_loss) / abs(eager_loss)
    tol = 1e-5 if ctx.scale.precision == "fp32" else 1e-2
    return ctx.row(diff, "rel", diff <= tol,
                   f"{ctx.scale.backend}, {ctx.scale.precision}, document mask; eager {eager_loss:.5f}, "
                   f"compiled {compiled_loss:.5f}; tolerance {tol:g}")


def model_flex_against_sdpa(ctx: Context) -> Row:
    """Our model with `model.attention: flex` against `sdpa`, same weights and document mask (no grad on CPU,
    where FlexAttention cannot train)."""
    from dataclasses import replace

    from exoformer.train.loss import lm_loss

    cfg = config("dynamic-e-exoformer", ctx.scale.family_shape)
    sdpa = build_model(replace(cfg, attention="sdpa"), ctx.device)
    with torch.no_grad():
        for p in sdpa.parameters():
            p.add_(0.02 * torch.randn_like(p))
    flex = build_model(replace(cfg, attention="flex"), ctx.device)
    flex.load_state_dict(sdpa.state_dict())
    x, y, starts = batch_for(cfg, ctx.scale.family_batch, cfg.seq_len, ctx.device)
    with torch.no_grad(), autocast(ctx), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = float(lm_loss(sdpa(x, starts), y, 1e-5)[0])
        b = float(lm_loss(flex(x, starts), y, 1e-5)[0])
    diff = abs(a - b) / abs(a)
    tol = 1e-5 if ctx.scale.precision == "fp32" else 1e-2
    return ctx.row(diff, "rel", diff <= tol, f"dynamic-e-exoformer, {ctx.scale.precision}, document mask; "
                   f"sdpa {a:.5f}, flex {b:.5f}; tolerance {tol:g}")


# ----------------------------------------------------------------------------- training steps

class Trainer:
    """One model, the paper's optimisers and recipe, fixed batches; `step()` does one full update."""

    def __init__(self, ctx: Context, cfg: ModelConfig, batch: int, steps: int, *, precision: str,
                 compile_backend: str | None = None) -> None:
        from exoformer.train.config import TrainConfig
        from exoformer.train.optim import build_optimizers

        self.cfg = cfg
        seq = self.cfg.seq_len
        self.recipe = TrainConfig(steps=steps, batch_tokens=batch * seq, micro_batch_seqs=batch, seq_len=seq,
                                  warmup_steps=max(1, steps // 10), precision=precision)
        self.device, self.precision = ctx.device, precision
        self.model = build_model(self.cfg, ctx.device)
        if precision == "official-pure-bf16":
            from exoformer.train.loop import to_official_pure_bf16

            to_official_pure_bf16(self.model)
        self.optimizers = build_optimizers(self.model, self.recipe)
        if compile_backend:
            torch._dynamo.reset()
        from exoformer.train.loss import LossForward

        loss_forward = LossForward(self.model, self.recipe.z_loss)  # the training loop's module: chunked loss
        self.forward = torch.compile(loss_forward, backend=compile_backend) if compile_backend else loss_forward
        self.batches = [batch_for(self.cfg, batch, seq, ctx.device, seed=i) for i in range(4)]
        self.tokens_per_step = batch * seq
        self.done = 0

    def step(self) -> torch.Tensor:
        from exoformer.train.loop import autocast_for
        from exoformer.train.optim import set_schedules
        from exoformer.train.schedule import lr_multiplier_for, momentum_for

        set_schedules(self.optimizers, lr_multiplier_for(self.recipe, self.done), momentum_for(self.recipe, self.done))
        x, y, starts = self.batches[self.done % len(self.batches)]
        with autocast_for(self.precision, self.device):
            loss, _, _ = self.forward(x, starts, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.recipe.grad_clip)
        for opt in self.optimizers:
            opt.step()
            opt.zero_grad(set_to_none=True)
        self.done += 1
        return loss.detach()


def paper_step(ctx: Context, variant: str):
    """The spec `plan` prices for this variant: the 450m preset's seed-42 run (experiments/presets.yaml), its
    model at `scale.step_shape` (the true shape on a GPU, a toy one with --cpu) and micro-batch `step_batch`
    (resolved once per variant)."""
    return ctx.once(("paper step", variant), lambda: _paper_step(ctx, variant))


def _paper_step(ctx: Context, variant: str):
    from exoformer.registry.registry import Registry
    from exoformer.model.variants import shape_fields

    spec = Registry().resolve(f"{variant}-s42", preset="450m")
    shape = dict(ctx.scale.step_shape)
    if "shape" in shape:
        shape = {**shape_fields(shape.pop("shape")), **shape}
    model = replace(spec.model, **shape)
    return replace(spec, model=model, train=replace(spec.train, seq_len=model.seq_len,
                                                    micro_batch_seqs=ctx.scale.step_batch))


def step_precision(ctx: Context, variant: str) -> str:
    """The preset's training precision on this device (`auto` resolved as the training loop does)."""
    from exoformer.budget.cost import training_precision

    return training_precision(paper_step(ctx, variant), ctx.device.type)


def step_compiled(ctx: Context, variant: str) -> bool:
    """Compiled as the training loop compiles the preset's spec on a GPU; with --cpu too (aot_eager), so that the
    toy run traces the same compiled region."""
    return paper_step(ctx, variant).train.compile and (ctx.device.type == "cuda" or ctx.scale.cpu)


def train_step(ctx: Context, variant: str, attention: str | None = None) -> dict:
    scale = ctx.scale
    if ctx.device.type == "cuda":
        torch.cuda.empty_cache()
    spec = paper_step(ctx, variant)
    precision, compiled = step_precision(ctx, variant), step_compiled(ctx, variant)
    model = spec.model if attention is None else replace(spec.model, attention=attention)
    trainer = Trainer(ctx, model, scale.step_batch, 1000, precision=precision,
                      compile_backend=scale.backend if compiled else None)
    for _ in range(scale.step_warmup):
        trainer.step()
    times, peak = [], None
    for _ in range(scale.step_reps):
        _, elapsed, used = measure(trainer.step, ctx.device)
        times.append(elapsed)
        peak = used if peak is None or (used is not None and used > peak) else peak
    if ctx.device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(ctx.device)  # the whole step: weights, states, activations
    seconds = statistics.median(times)
    tokens_per_s = trainer.tokens_per_step / seconds
    flops = flops_per_token(trainer.cfg, trainer.cfg.seq_len) * tokens_per_s
    mfu = None if ctx.peak is None else flops / (ctx.peak * 1e12)
    cfg = trainer.cfg
    del trainer
    kernel = resolve_attention(cfg.attention, ctx.device.type)
    how = f"compiled ({scale.backend})" if compiled else "eager"
    return {"seconds": seconds, "tokens_per_s": tokens_per_s, "tflops": flops / 1e12, "mfu": mfu, "peak": peak,
            "precision": precision, "compiled": compiled, "attention": kernel,
            "shape": f"{cfg.n_layer}x{cfg.d_model}, seq {cfg.seq_len}, micro-batch {scale.step_batch}, "
                     f"{precision}, {kernel}, {how}, median of {scale.step_reps}"}


def kernel_step(ctx: Context, variant: str, kernel: str) -> dict:
    """The train step with this attention kernel: the preset's own step where its kernel resolves to it here."""
    if resolve_attention(paper_step(ctx, variant).model.attention, ctx.device.type) == kernel:
        return ctx.once(("step", variant), lambda: train_step(ctx, variant))
    return ctx.once(("step", variant, kernel), lambda: train_step(ctx, variant, attention=kernel))


def step_rows(variant: str) -> list[Callable[[Context], Row]]:
    def run(ctx: Context) -> dict:
        return ctx.once(("step", variant), lambda: train_step(ctx, variant))

    def ms(ctx: Context) -> Row:
        r = run(ctx)
        return ctx.row(1000 * r["seconds"], "ms", None, r["shape"])

    def tokens(ctx: Context) -> Row:
        return ctx.row(run(ctx)["tokens_per_s"], "tokens/s")

    def mfu(ctx: Context) -> Row:
        r = run(ctx)
        if r["mfu"] is None:
            return ctx.row(None, "fraction", None,
                           f"unknown peak for {ctx.label}; {r['tflops']:.3g} TFLOP/s achieved")
        return ctx.row(r["mfu"], "fraction", 0 < r["mfu"] <= 1,
                       f"{r['tflops']:.4g} TFLOP/s of {ctx.peak:g} peak (6N + attention)")

    def memory(ctx: Context) -> Row:
        r = run(ctx)
        return ctx.row(mib(r["peak"]), "MiB", None,
                       "allocator peak" if ctx.device.type == "cuda" else "resident high-water mark above start")

    return [ms, tokens, mfu, memory]


def row_step_ratio(ctx: Context) -> Row:
    a, b = (ctx.once(("step", v), lambda v=v: train_step(ctx, v)) for v in STEP_VARIANTS)
    return ctx.row(b["seconds"] / a["seconds"], "x",
                   None, "paper's reference implementation: 1.08-1.15 (v4 appendix D)")


def row_memory_ratio(ctx: Context) -> Row:
    a, b = (ctx.once(("step", v), lambda v=v: train_step(ctx, v)) for v in STEP_VARIANTS)
    value = None if not a["peak"] or b["peak"] is None else b["peak"] / a["peak"]
    return ctx.row(value, "x")


def step_memory_estimate(ctx: Context, variant: str):
    """The memory model's peak for the step `train_step` measured: its model, precision and compile, one rank,
    the chunked loss (the estimate `plan` and `preflight` scale by the measured ratio)."""
    from exoformer.budget.memory import estimate_memory
    from exoformer.train.config import LOSS_CHUNK_TOKENS

    spec = paper_step(ctx, variant)
    return estimate_memory(spec.model, precision=step_precision(ctx, variant), micro_batch=ctx.scale.step_batch,
                           seq_len=spec.model.seq_len, doc_masking=spec.train.doc_masking,
                           compiled=step_compiled(ctx, variant) and ctx.device.type == "cuda", device=ctx.device.type,
                           logits_chunk=LOSS_CHUNK_TOKENS)


def memory_model_rows(variant: str) -> list[Callable[[Context], Row]]:
    def estimate(ctx: Context) -> Row:
        est = step_memory_estimate(ctx, variant)
        return ctx.row(mib(est.peak_tensors), "MiB", None, f"peak at {est.peak_phase}; weights "
                       f"{mib(est.weights)}, optimizer {mib(est.optimizer)}, activations {mib(est.activations)}, "
                       f"logits {mib(est.logits)} MiB")

    def ratio(ctx: Context) -> Row:
        measured = ctx.once(("step", variant), lambda: train_step(ctx, variant))
        if ctx.device.type != "cuda" or not measured.get("peak"):
            return ctx.row(None, "x", None, "needs a GPU: the CPU's resident high-water mark above the step's start "
                                            "is not the allocator peak the model estimates")
        est = step_memory_estimate(ctx, variant)
        value = measured["peak"] / est.peak_tensors
        ctx.memo[("memory_ratio", variant)] = (True, value)
        return ctx.row(value, "x", 0.85 <= value <= 1.15, "torch.cuda.max_memory_allocated / estimated peak "
                                                         "(within 15% is ok)")

    return [estimate, ratio]


def eager_against_compiled_steps(ctx: Context) -> dict:
    scale, variant = ctx.scale, "dynamic-e-exoformer"
    runs = {}
    for name, backend in (("eager", None), ("compiled", scale.backend)):
        trainer = Trainer(ctx, config(variant, scale.train_shape), scale.train_batch, scale.train_steps,
                          precision="bf16-autocast", compile_backend=backend)
        losses, times = [], []
        for _ in range(scale.train_steps):
            loss, elapsed, _ = measure(trainer.step, ctx.device)
            losses.append(float(loss))
            times.append(elapsed)
        runs[name] = {"losses": losses, "step_s": statistics.median(times[scale.train_steps // 3:])}
        del trainer
    diffs = [abs(a - b) for a, b in zip(runs["eager"]["losses"], runs["compiled"]["losses"], strict=True)]
    return {"max_diff": max(diffs), "first": runs["eager"]["losses"][0], "last_eager": runs["eager"]["losses"][-1],
            "last_compiled": runs["compiled"]["losses"][-1],
            "speedup": runs["eager"]["step_s"] / runs["compiled"]["step_s"]}


def row_steps_loss(ctx: Context) -> Row:
    r = ctx.once("steps", lambda: eager_against_compiled_steps(ctx))
    learned = r["last_eager"] < r["first"]
    return ctx.row(r["max_diff"], "abs",
                   r["max_diff"] <= 5e-2 and learned,
                   f"dynamic-e-exoformer, {ctx.scale.backend}; loss {r['first']:.4f} -> eager {r['last_eager']:.4f}, "
                   f"compiled {r['last_compiled']:.4f}; tolerance 5e-2")


def row_steps_speed(ctx: Context) -> Row:
    r = ctx.once("steps", lambda: eager_against_compiled_steps(ctx))
    return ctx.row(r["speedup"], "x", None,
                   "median step time, eager / compiled, after the first third")


# ----------------------------------------------------------------------------- evaluation

def eval_scoring(ctx: Context) -> dict:
    """ExoLM's token side (`exoformer.eval.scoring.Scorer`, no lm-eval needed) in three settings."""
    from exoformer.eval.scoring import Scorer

    scale = ctx.scale
    cfg = config("dynamic-e-exoformer", scale.eval_shape)
    model = build_model(cfg, ctx.device)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    model.eval()
    pairs = [(context, continuation) for _, context, continuation in
             token_requests(scale.eval_requests, scale.eval_window, cfg.vocab_size)]
    settings = {"batched": (scale.eval_batch, False), "batch1": (1, False), "full_logits": (scale.eval_batch, True)}
    out = {}
    for name, (batch_size, full_logits) in settings.items():
        scorer = Scorer(model, pad_id=0, device=ctx.device, full_logits=full_logits)
        scorer.score(pairs[:2], batch_size)  # warm-up
        scores, seconds, peak = measure(lambda s=scorer, b=batch_size: s.score(pairs, b), ctx.device)
        out[name] = {"scores": scores, "requests_per_s": len(pairs) / seconds, "peak": peak}
    out["delta_batch1"] = max(abs(a[0] - b[0]) for a, b in zip(out["batched"]["scores"], out["batch1"]["scores"]))
    out["delta_full"] = max(abs(a[0] - b[0]) for a, b in zip(out["batched"]["scores"], out["full_logits"]["scores"]))
    out["shape"] = (f"{cfg.n_layer}x{cfg.d_model}, vocab {cfg.vocab_size}, {len(pairs)} requests of "
                    f"{scale.eval_window + 1} tokens")
    return out


def eval_rows() -> list[Callable[[Context], Row]]:
    def run(ctx: Context) -> dict:
        return ctx.once("eval", lambda: eval_scoring(ctx))

    def batched(ctx: Context) -> Row:
        r = run(ctx)
        return ctx.row(r["batched"]["requests_per_s"],
                       "requests/s", None, r["shape"])

    def batch1(ctx: Context) -> Row:
        return ctx.row(run(ctx)["batch1"]["requests_per_s"], "requests/s")

    def speedup(ctx: Context) -> Row:
        r = run(ctx)
        same = r["delta_batch1"] <= 1e-4
        return ctx.row(r["batched"]["requests_per_s"]
                       / r["batch1"]["requests_per_s"], "x", same,
                       f"max |delta loglik| {r['delta_batch1']:.2g} (tolerance 1e-4)")

    def mem_batched(ctx: Context) -> Row:
        return ctx.row(mib(run(ctx)["batched"]["peak"]), "MiB")

    def mem_batch1(ctx: Context) -> Row:
        return ctx.row(mib(run(ctx)["batch1"]["peak"]), "MiB")

    def lean(ctx: Context) -> Row:
        r = run(ctx)
        lean_peak, full_peak = r["batched"]["peak"], r["full_logits"]["peak"]
        ratio = None if lean_peak is None or not full_peak else lean_peak / full_peak
        memory_ok = ctx.scale.cpu or (ratio is not None and ratio <= 0.2)
        return ctx.row(ratio, "x", memory_ok and r["delta_full"] <= 1e-5,
                       f"full logits {mib(full_peak)} MiB; max |delta loglik| {r['delta_full']:.2g} (targets <= 0.2"
                       f"{', judged at GPU scale only' if ctx.scale.cpu else ''}; <= 1e-5)")

    return [batched, batch1, speedup, mem_batched, mem_batch1, lean]


# ----------------------------------------------------------------------------- process group

def _init_and_reduce(rank: int, world: int, backend: str, store_path: str) -> tuple[float, float]:
    """Join the group, all-reduce a one; (seconds, reduced value)."""
    import torch.distributed as dist

    start = time.perf_counter()
    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", rank)
        torch.cuda.set_device(device)
    dist.init_process_group(backend, store=dist.FileStore(store_path, world), rank=rank, world_size=world)
    try:
        value = torch.ones(1, device=device)
        dist.all_reduce(value)
        sync(device)
        return time.perf_counter() - start, float(value.item())
    finally:
        dist.destroy_process_group()


def _rank_main(rank: int, world: int, backend: str, store_path: str, result_dir: str) -> None:
    seconds, value = _init_and_reduce(rank, world, backend, store_path)
    Path(result_dir, f"rank{rank}").write_text(f"{seconds} {value}")


def row_process_group(ctx: Context) -> Row:
    import torch.distributed as dist

    if dist.is_initialized():
        return ctx.row(None, "s", None, "already initialised by the launcher: not re-tested")
    backend = "gloo" if ctx.scale.cpu else "nccl"
    world = 1 if ctx.scale.cpu else torch.cuda.device_count()
    with tempfile.TemporaryDirectory() as tmp:
        store = str(Path(tmp) / "store")
        if world == 1:
            results = [_init_and_reduce(0, 1, backend, store)]
        else:
            torch.multiprocessing.spawn(_rank_main, args=(world, backend, store, tmp), nprocs=world)
            results = [tuple(map(float, Path(tmp, f"rank{r}").read_text().split())) for r in range(world)]
    ok = all(value == world for _, value in results)
    return ctx.row(max(s for s, _ in results), "s", ok,
                   f"{backend}, world size {world}: all-reduced sums {[v for _, v in results]} "
                   f"(expected {world} on every rank)")



# ----------------------------------------------------------------------------- fixes of the GPU paths
# One row per fix of the CUDA and multi-rank paths, so that one run on a lent GPU checks them all.

def _tiny_run_files(directory: Path) -> Path:
    """Random documents in token shards with a compact vocabulary (64 ids), for a tiny real training run."""
    import numpy as np

    from exoformer.data.shards import write_shard
    from exoformer.data.tokenizer import CompactTokenizer, gpt2

    rng = np.random.default_rng(0)
    for name, n in (("tiny_train_000000.bin", 4000), ("tiny_val_000000.bin", 1200)):
        tokens = rng.integers(1, 62, n)
        tokens[::37] = 0  # EOT every 37 tokens: documents
        write_shard(directory / name, tokens)
    CompactTokenizer(gpt2(), range(62)).save(directory / "vocab.json")
    return directory


def _tiny_configs(data: Path):
    from exoformer.model.config import ModelConfig
    from exoformer.train.config import TrainConfig

    model = ModelConfig(n_layer=2, n_head=2, d_model=32, vocab_size=64, seq_len=32, gated=True,
                        mix_paths=("q", "k", "v", "g"), anchor="h0", anchor_norm_paths=("q", "k", "v", "g"))
    recipe = TrainConfig(steps=4, batch_tokens=4 * 32, micro_batch_seqs=2, seq_len=32, data=str(data), warmup_steps=1,
                         muon_momentum_steps=1, val_every=0, checkpoint_every=2, keep_checkpoints=3,
                         precision="official-pure-bf16")
    return model, recipe


def _tensors(tree, prefix=""):
    if isinstance(tree, torch.Tensor):
        yield prefix, tree
    elif isinstance(tree, dict):
        for key, sub in tree.items():
            yield from _tensors(sub, f"{prefix}.{key}")
    elif isinstance(tree, (list, tuple)):
        for i, sub in enumerate(tree):
            yield from _tensors(sub, f"{prefix}[{i}]")


def row_resume_pure_bf16(ctx: Context) -> Row:
    """An official-pure-bf16 run resumed at step 2 of 4 against the uninterrupted run, on the device."""
    import shutil

    from exoformer.train.checkpoint import load_checkpoint
    from exoformer.train.loop import train

    with tempfile.TemporaryDirectory() as tmp:
        data = _tiny_run_files(Path(tmp) / "data")
        model, recipe = _tiny_configs(data)
        reference, resumed = Path(tmp) / "reference", Path(tmp) / "resumed"
        train(model, recipe, reference, device=ctx.device)
        shutil.copytree(reference, resumed)
        for path in (resumed / "checkpoints").glob("step_00000004.pt*"):
            path.unlink()
        train(model, recipe, resumed, device=ctx.device)
        saved = load_checkpoint(reference / "checkpoints" / "step_00000002.pt")
        ours = load_checkpoint(resumed / "checkpoints" / "step_00000004.pt")
        theirs = load_checkpoint(reference / "checkpoints" / "step_00000004.pt")
    keys = ("model", "muon", "adamw")
    a = dict(kv for key in keys for kv in _tensors(ours[key], key))
    b = dict(kv for key in keys for kv in _tensors(theirs[key], key))
    dtypes_saved = {k: v.dtype for key in ("muon", "adamw") for k, v in _tensors(saved[key], key)}
    same_dtypes = a.keys() == b.keys() and all(a[k].dtype == b[k].dtype for k in a) and all(
        a[k].dtype == dtype for k, dtype in dtypes_saved.items())
    differing = [k for k in a if not torch.equal(a[k], b[k])]
    worst = max((float((a[k].float() - b[k].float()).abs().max()) for k in differing), default=0.0)
    return ctx.row(len(differing), "tensors", same_dtypes and worst <= 1e-2,
                   f"state dtypes as saved: {same_dtypes}; {len(differing)} of {len(a)} tensors differ from the "
                   f"uninterrupted run (max |diff| {worst:.2g}; 0 = bitwise; nondeterministic GPU kernels may differ)")


def row_eval_on_device(ctx: Context) -> Row:
    """The pipeline's stage device is this accelerator, and scoring there equals scoring on the CPU."""
    from exoformer.eval.scoring import Scorer
    from exoformer.runs.pipeline import job_device

    device = job_device()
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    cfg = config("dynamic-e-exoformer", ctx.scale.family_shape)
    model = build_model(cfg, torch.device("cpu"))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    model.eval()
    pairs = [(c, t) for _, c, t in token_requests(8, cfg.seq_len - 1, cfg.vocab_size)]
    on_cpu = Scorer(model, pad_id=0, device="cpu").score(pairs, 4)
    on_device = Scorer(model.to(device), pad_id=0, device=device).score(pairs, 4)
    delta = max(abs(a[0] - b[0]) for a, b in zip(on_cpu, on_device, strict=True))
    on_accelerator = torch.device(device).type == expected
    return ctx.row(delta, "abs", on_accelerator and delta <= 1e-3,
                   f"stage device {device} (expected {expected}); max |delta loglik| vs CPU {delta:.2g} "
                   "(tolerance 1e-3, fp32)")


def row_flex_step_time(ctx: Context) -> Row:
    """A training step of dynamic-e-exoformer with FlexAttention over one with sdpa (same shape and batch)."""
    if ctx.device.type != "cuda":
        return ctx.row(None, "x", None, "not run: FlexAttention has no backward on the CPU")
    variant = STEP_VARIANTS[1]
    flex, sdpa = (kernel_step(ctx, variant, kernel) for kernel in ("flex", "sdpa"))
    return ctx.row(flex["seconds"] / sdpa["seconds"], "x", None,
                   f"flex {1000 * flex['seconds']:.4g} ms, sdpa {1000 * sdpa['seconds']:.4g} ms; {sdpa['shape']}")


def _muon_rank(rank: int, world: int, store_path: str, result_dir: str) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.FileStore(store_path, world), rank=rank, world_size=world)
    try:
        torch.save(_muon_steps(), Path(result_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def _muon_steps() -> list[torch.Tensor]:
    from exoformer.train.config import TrainConfig
    from exoformer.train.optim import build_optimizers

    torch.manual_seed(0)
    model = ExoTransformer(config("dynamic-e-exoformer", {"shape": "tiny", "seq_len": 32}))
    muon, _ = build_optimizers(model, TrainConfig())
    params = muon.param_groups[0]["params"]
    g = torch.Generator().manual_seed(1)
    for _ in range(2):
        for p in params:
            p.grad = torch.randn(p.shape, generator=g)
        muon.step()
    return [p.detach().clone() for p in params]


def row_muon_sharded(ctx: Context) -> Row:
    """Muon with its orthogonalisations shared by 2 gloo ranks against one process doing them all."""
    import torch.distributed as dist

    if dist.is_initialized():
        return ctx.row(None, "abs", None, "already initialised by the launcher: not re-tested")
    world = 2
    with tempfile.TemporaryDirectory() as tmp:
        torch.multiprocessing.spawn(_muon_rank, args=(world, str(Path(tmp) / "store"), tmp), nprocs=world)
        ranks = [torch.load(Path(tmp, f"rank{r}.pt"), weights_only=True) for r in range(world)]
    replicated = _muon_steps()
    diff = max(float((a - b).abs().max()) for rank in ranks for a, b in zip(rank, replicated, strict=True))
    return ctx.row(diff, "abs", diff <= 1e-6, f"gloo, {world} ranks, {len(replicated)} matrices; tolerance 1e-6")


def row_chunked_loss(ctx: Context) -> Row:
    """Peak memory of CE + z-loss forward and backward from the LM head's input, chunked over unchunked."""
    from exoformer.train.loss import chunked_lm_loss, lm_loss

    tokens, d_model, vocab = (1024, 64, 50304) if ctx.scale.cpu else (16 * 2048, 1024, 50304)
    dtype = torch.float32 if ctx.scale.cpu else torch.bfloat16
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(tokens, d_model, generator=g).to(ctx.device, dtype)
    weight = (0.02 * torch.randn(vocab, d_model, generator=g)).to(ctx.device, dtype)
    targets = torch.randint(0, vocab, (tokens,), generator=g).to(ctx.device)

    def run(chunked: bool) -> tuple[float, torch.Tensor]:
        h, w = hidden.detach().requires_grad_(), weight.detach().requires_grad_()
        if chunked:
            loss = chunked_lm_loss(h, w, targets, 1e-5, chunk_tokens=max(256, tokens // 8))[0]
        else:
            loss = lm_loss(h @ w.T, targets, 1e-5)[0]
        loss.backward()
        return float(loss.detach()), w.grad

    run(False), run(True)  # warm-up
    (full, full_grad), _, full_peak = measure(lambda: run(False), ctx.device)
    (ours, ours_grad), _, ours_peak = measure(lambda: run(True), ctx.device)
    ratio = None if not full_peak or ours_peak is None else ours_peak / full_peak
    rel = abs(ours - full) / abs(full)
    grad = float((ours_grad.float() - full_grad.float()).abs().max() / full_grad.float().abs().max())
    memory_ok = ctx.scale.cpu or (ratio is not None and ratio <= 0.5)
    return ctx.row(ratio, "x", memory_ok and rel <= 1e-5 and grad <= 2e-2,
                   f"{tokens} tokens, vocab {vocab}, {str(dtype).split('.')[-1]}; unchunked {mib(full_peak)} MiB, "
                   f"chunked {mib(ours_peak)} MiB; loss rel diff {rel:.2g}, grad rel diff {grad:.2g}"
                   f"{' (memory judged at GPU scale only)' if ctx.scale.cpu else ''}")


def row_document_block_mask(ctx: Context) -> Row:
    """Building the FlexAttention document BlockMask of one micro-batch (done per batch: its boundaries are the
    batch's own), against the step it serves."""
    from exoformer.model.model import flex_block_mask

    variant = STEP_VARIANTS[1]
    spec = paper_step(ctx, variant)
    seq = spec.model.seq_len
    _, _, starts = batch_for(spec.model, ctx.scale.step_batch, seq, ctx.device)
    doc_ids = torch.cumsum(starts.to(torch.int32), dim=1)
    seconds = timed_median(lambda: flex_block_mask(doc_ids, seq, ctx.device), ctx.device, 1, 5)
    flex = kernel_step(ctx, variant, "flex") if ctx.device.type == "cuda" else None
    share = "" if flex is None else f"; {100 * seconds / flex['seconds']:.2g}% of the flex step"
    return ctx.row(1000 * seconds, "ms", None, f"micro-batch {ctx.scale.step_batch} x {seq}, median of 5{share}")


def fix_rows() -> list[tuple[str, Callable[[Context], Row]]]:
    return [("resume official-pure-bf16: tensors differing from the uninterrupted run", row_resume_pure_bf16),
            ("eval on the job's device: max |delta loglik| vs CPU", row_eval_on_device),
            ("train step FlexAttention / sdpa (dynamic-e-exoformer)", row_flex_step_time),
            ("document block mask build per micro-batch", row_document_block_mask),
            ("Muon shared by 2 ranks vs replicated: max |diff|", row_muon_sharded),
            ("loss peak memory chunked / unchunked", row_chunked_loss)]


# ----------------------------------------------------------------------------- numerics as the author's code

def multiple_choice(cfg: ModelConfig, questions: int, window: int, seed: int = 0) -> list[list[tuple]]:
    """Per question, 4 (context, continuation) pairs: one random context of `window` tokens and continuations
    of 1-8 random tokens, the shape of an ARC / HellaSwag request."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(questions):
        context = torch.randint(1, cfg.vocab_size, (window,), generator=g).tolist()
        out.append([(context, torch.randint(1, cfg.vocab_size, (int(torch.randint(1, 9, (1,), generator=g)),),
                                            generator=g).tolist()) for _ in range(4)])
    return out


def author_loglikelihood(model: torch.nn.Module, context: list[int], continuation: list[int],
                         device: torch.device) -> float:
    """run_eval.py's loglikelihood (docs/official_code.md section 5): one sequence on bf16 weights, no autocast,
    this device's own log_softmax kernel on the bf16 logits, the continuation's bf16 log-probs summed as a bf16
    tensor."""
    tokens = (context + continuation)[-(model.config.seq_len + 1):]
    with torch.no_grad():
        logits = model(torch.tensor([tokens[:-1]], device=device))[0, -len(continuation):]
    logp = torch.log_softmax(logits, dim=-1)
    return float(logp.gather(-1, torch.tensor(continuation, device=device)[:, None]).sum())


def decisions(questions: list[list[tuple]], lls: list[float]) -> list[tuple[int, int]]:
    """(argmax log-likelihood, argmax log-likelihood per continuation token) per question, first maximum wins."""
    out, i = [], 0
    for choices in questions:
        scores = lls[i:i + len(choices)]
        lengths = [len(c) for _, c in choices]
        out.append((max(range(len(scores)), key=lambda k: (scores[k], -k)),
                    max(range(len(scores)), key=lambda k: (scores[k] / lengths[k], -k))))
        i += len(choices)
    return out


def bf16_scoring(ctx: Context) -> dict:
    """bf16 scoring (exoformer/eval/scoring.py) at the default batch size 1, batched, against the author's
    loglikelihood on this device, and (on CUDA) against the same scoring on the CPU."""
    from exoformer.eval.scoring import Scorer, scoring_model

    scale = ctx.scale
    cfg = config("dynamic-e-exoformer", scale.eval_shape if not scale.cpu else scale.family_shape)
    model = build_model(cfg, torch.device("cpu"))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    model = scoring_model(model.eval(), "bf16")
    questions = multiple_choice(cfg, 8 if scale.cpu else 64, min(scale.eval_window, cfg.seq_len - 9))
    pairs = [pair for choices in questions for pair in choices]
    model.to(ctx.device)
    ours = [ll for ll, _ in Scorer(model, pad_id=0, device=ctx.device, precision="bf16").score(pairs, 1)]
    batched = [ll for ll, _ in Scorer(model, pad_id=0, device=ctx.device,
                                      precision="bf16").score(pairs, scale.eval_batch)]
    author = [author_loglikelihood(model, c, t, ctx.device) for c, t in pairs]
    return {"pairs": len(pairs), "questions": len(questions), "model": f"{cfg.n_layer}x{cfg.d_model}, vocab "
            f"{cfg.vocab_size}, random init", "ours": ours, "batched": batched, "author": author}


CROSS_DEVICE_SHAPE = {"shape": "proxy"}
"""A model small enough for bf16 matmuls on the CPU (8 x 256, vocab 2,048, seq 512)."""


def bf16_scoring_across_devices(ctx: Context) -> dict:
    """The same bf16 model and requests scored at batch 1 on this device and on the CPU."""
    from exoformer.eval.scoring import Scorer, scoring_model

    cfg = config("dynamic-e-exoformer", CROSS_DEVICE_SHAPE)
    model = build_model(cfg, torch.device("cpu"))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    model = scoring_model(model.eval(), "bf16")
    questions = multiple_choice(cfg, 32, 256, seed=1)
    pairs = [pair for choices in questions for pair in choices]
    on_cpu = [ll for ll, _ in Scorer(model, pad_id=0, device="cpu", precision="bf16").score(pairs, 1)]
    model.to(ctx.device)
    on_device = [ll for ll, _ in Scorer(model, pad_id=0, device=ctx.device, precision="bf16").score(pairs, 1)]
    return {"questions": questions, "cpu": on_cpu, "device": on_device}


def _agreement(ref: list[float], got: list[float], shape: list[list[tuple]]) -> tuple[float, str]:
    """(the smaller of the acc and acc_norm decision agreements, a note) of `got` against `ref`."""
    a, b = decisions(shape, ref), decisions(shape, got)
    acc = sum(x[0] == y[0] for x, y in zip(a, b)) / len(a)
    norm = sum(x[1] == y[1] for x, y in zip(a, b)) / len(a)
    same = sum(x == y for x, y in zip(ref, got)) / len(ref)
    return min(acc, norm), (f"acc {acc:.4f}, acc_norm {norm:.4f} of {len(a)} questions; {same:.4f} of "
                            "log-likelihoods bit-identical")


def bf16_scoring_rows() -> list[tuple[str, Callable[[Context], Row]]]:
    def run(ctx: Context) -> dict:
        return ctx.once("bf16_scoring", lambda: bf16_scoring(ctx))

    def shape_of(ctx: Context, r: dict) -> list[list[tuple]]:
        cfg = config("dynamic-e-exoformer", ctx.scale.eval_shape if not ctx.scale.cpu else ctx.scale.family_shape)
        return multiple_choice(cfg, r["questions"], min(ctx.scale.eval_window, cfg.seq_len - 9))

    def author(ctx: Context) -> Row:
        r = run(ctx)
        value, notes = _agreement(r["author"], r["ours"], shape_of(ctx, r))
        on_cuda = ctx.device.type == "cuda"
        return ctx.row(value, "share", (value >= 0.995) if on_cuda else None,
                       f"{notes}; {r['model']}; ours = batch 1, explicit bf16 log-softmax and sum"
                       + ("" if on_cuda else "; judged on CUDA (the CPU log_softmax kernel rounds differently)"))

    def batched(ctx: Context) -> Row:
        r = run(ctx)
        value, notes = _agreement(r["ours"], r["batched"], shape_of(ctx, r))
        return ctx.row(value, "share", None, f"{notes}; batch {ctx.scale.eval_batch} right-padded vs batch 1 "
                                              "(the default, eval.batch_size 1)")

    def cpu(ctx: Context) -> Row:
        if ctx.device.type != "cuda":
            return ctx.row(None, "", None, "needs CUDA")
        r = ctx.once("bf16_scoring_across_devices", lambda: bf16_scoring_across_devices(ctx))
        value, notes = _agreement(r["cpu"], r["device"], r["questions"])
        cfg = config("dynamic-e-exoformer", CROSS_DEVICE_SHAPE)
        return ctx.row(value, "share", None, f"{notes}; {cfg.n_layer}x{cfg.d_model} random init, batch 1 on both")

    return [("bf16 scoring batch 1 vs the author's loglikelihood: decisions agreeing", author),
            ("bf16 scoring batched vs batch 1: decisions agreeing", batched),
            ("bf16 scoring CUDA vs CPU: decisions agreeing", cpu)]


def author_polar_express_step(x: torch.Tensor, a: float, b: float, c: float) -> torch.Tensor:
    """The official Triton formulation of one Polar Express iteration (docs/official_code.md 4.3), transcribed
    with fp32 matmuls of bf16 values: A = XX^T rounded once, bA + cA^2 rounded once, aX + BX rounded once."""
    xf = x.float()
    gram = (xf @ xf.T).bfloat16().float()
    poly = (c * (gram @ gram) + b * gram).bfloat16().float()
    return (poly @ xf + a * xf).bfloat16()


def polar_express_numerics(ctx: Context) -> dict:
    """Ours (exoformer.train.optim.polar_express on a bf16 update, as official-pure-bf16 runs it) and the
    rounding after every bf16 op, each against the transcription, relative Frobenius difference."""
    from exoformer.train.optim import POLAR_EXPRESS_COEFFICIENTS, polar_express

    rows, cols = (256, 64) if ctx.scale.cpu else (4096, 1024)  # c_attn of the 450M shape: 4C x C
    torch.manual_seed(0)
    with torch.no_grad():
        update = torch.randn(rows, cols, device=ctx.device).bfloat16()
        x = update.float().T
        x = (x / (torch.linalg.vector_norm(x) * 1.02 + 1e-6)).bfloat16()
        for a, b, c in POLAR_EXPRESS_COEFFICIENTS:
            x = author_polar_express_step(x, a, b, c)
        want = x.T.float()
        per_op = update.T / (update.norm() * 1.02 + 1e-6)
        for a, b, c in POLAR_EXPRESS_COEFFICIENTS:
            gram = per_op @ per_op.T
            per_op = a * per_op + (b * gram + c * (gram @ gram)) @ per_op
        ours = polar_express(update).float()

    def rel(t: torch.Tensor) -> float:
        return float((t.float() - want).norm() / want.norm())

    return {"ours": rel(ours), "per_op": rel(per_op.T), "shape": f"{rows}x{cols}"}


def row_polar_express(ctx: Context) -> Row:
    r = ctx.once("polar_express", lambda: polar_express_numerics(ctx))
    try:
        import triton  # noqa: F401
        triton_note = "Triton present; the official kernels are not vendored, the transcription stands in"
    except ImportError:
        triton_note = "no Triton: against the transcription"
    return ctx.row(r["ours"], "rel", r["ours"] <= 0.5 * r["per_op"],
                   f"{r['shape']} bf16 update; rounding after every bf16 op: {r['per_op']:.3g}; {triton_note}")


# ----------------------------------------------------------------------------- runner

def checks() -> list[tuple[str, Callable[[Context], Row]]]:
    """(row name, check), most needed first (what the cost model reads comes before what a budget may cut)."""
    out = []
    for variant in STEP_VARIANTS:
        names = (f"train step {variant}", f"train tokens/s {variant}", f"train MFU {variant}",
                 f"train peak memory {variant}")
        out += list(zip(names, step_rows(variant), strict=True))
    for variant in STEP_VARIANTS:
        out += list(zip((f"train peak memory estimate {variant}", f"train peak memory measured / estimate {variant}"),
                        memory_model_rows(variant), strict=True))
    out += [(f"train step time {STEP_VARIANTS[1]} / {STEP_VARIANTS[0]}", row_step_ratio),
            (f"train peak memory {STEP_VARIANTS[1]} / {STEP_VARIANTS[0]}", row_memory_ratio)]
    out += list(zip(("eval requests/s, batched", "eval requests/s, batch 1", "eval batched / batch 1 requests/s",
                     "eval peak memory, batched", "eval peak memory, batch 1", "eval peak memory lean / full logits"),
                    eval_rows(), strict=True))
    out.append(("process group init + all-reduce (NCCL; gloo with --cpu)", row_process_group))
    out += fix_rows()
    out += bf16_scoring_rows()
    out.append(("Polar Express bf16 vs the official kernels' rounding: rel |diff|", row_polar_express))
    out += [("flex doc mask vs dense SDPA, bf16: max |diff|", row_flex_diff), ("flex / dense SDPA time", row_flex_time),
            ("model loss, attention flex vs sdpa", model_flex_against_sdpa)]
    out += [("30 bf16 steps eager vs compiled: max |loss diff|", row_steps_loss),
            ("30 bf16 steps: compiled speed-up", row_steps_speed)]
    out += [(f"compiled vs eager loss: {v}", lambda ctx, v=v: compiled_against_eager(ctx, v))
            for v in FAMILIES.values()]
    return out


def run_check(ctx: Context, name: str, check: Callable[[Context], Row]) -> Row:
    start = time.perf_counter()
    try:
        row = check(ctx)
    except Exception as err:  # noqa: BLE001 - a failing check is a row, never the end of the script
        row = ctx.row(None, "", False, f"error: {describe_error(err)}")
    finally:
        if ctx.device.type == "cuda":
            torch.cuda.empty_cache()
    row.name, row.seconds = name, round(time.perf_counter() - start, 2)
    return row


def format_value(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def print_row(row: Row, width: int) -> None:
    status = {True: "ok", False: "FAIL", None: ""}[row.ok]
    print(f"{row.name:<{width}}  {format_value(row.value):>10}  {row.unit:<10}  {row.device:<14}  {status:<4}  "
          f"{row.seconds:>6.1f}  {row.notes}", flush=True)


def report(ctx: Context, rows: list[Row], complete: bool) -> dict:
    mfu = {}
    if not ctx.scale.cpu and ctx.peak is not None:
        for variant in STEP_VARIANTS:
            ok, value = ctx.memo.get(("step", variant), (False, None))
            if ok and value["mfu"] is not None:
                mfu[variant] = round(value["mfu"], 4)
    return {
        "format": 1, "tool": MEASURED_TOOL, "cpu_mode": ctx.scale.cpu, "complete": complete,
        "device": ctx.label, "peak_bf16_tflops": ctx.peak,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
        "threads": torch.get_num_threads(), "mfu": mfu, "memory_ratio": memory_ratios(ctx),
        "rows": [asdict(r) for r in rows],
    }


def memory_ratios(ctx: Context) -> dict[str, float]:
    """variant -> measured / estimated peak memory of the train step, from a GPU run only."""
    if ctx.scale.cpu:
        return {}
    out = {}
    for variant in STEP_VARIANTS:
        ok, value = ctx.memo.get(("memory_ratio", variant), (False, None))
        if ok and value:
            out[variant] = round(value, 4)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", action="store_true", help="the same checks at toy scale on the CPU (CI)")
    parser.add_argument("--out", type=Path, default=None,
                        help="JSON path (default results/gpu_check.json; with --cpu results/gpu_check_cpu.json)")
    parser.add_argument("--only", nargs="*", default=None, help="run only the rows whose name contains one of these")
    parser.add_argument("--budget-s", type=float, default=None,
                        help="start no check after this many seconds (its row says 'skipped'); "
                             f"default {GPU_BUDGET_S:g} on a GPU, none with --cpu")
    args = parser.parse_args(argv)
    if args.cpu:
        ctx = Context(CPU_SCALE, torch.device("cpu"), "CPU", None)
    elif not torch.cuda.is_available():
        print("error: no CUDA device is visible; run the toy-scale version with --cpu", file=sys.stderr)
        return 2
    else:
        name = torch.cuda.get_device_name(0)
        ctx = Context(GPU_SCALE, torch.device("cuda", 0), name, peak_tflops(name))
    out = args.out or DEFAULT_OUT[args.cpu]
    if args.budget_s is None and not args.cpu:
        args.budget_s = GPU_BUDGET_S
    selected = [(n, c) for n, c in checks() if not args.only or any(s in n for s in args.only)]
    width = max(len(n) for n, _ in selected) + 4
    print(f"gpu_check on {ctx.label} (bf16 peak {'unknown' if ctx.peak is None else f'{ctx.peak:g} TFLOP/s'}), "
          f"torch {torch.__version__}, writing {out}", flush=True)
    print(f"{'check':<{width}}  {'value':>10}  {'unit':<10}  {'device':<14}  {'ok':<4}  {'s':>6}  notes", flush=True)
    rows: list[Row] = []
    started = time.perf_counter()
    for name, check in selected:
        if args.budget_s is not None and time.perf_counter() - started > args.budget_s:
            rows.append(Row(name, None, "", ctx.label, None, f"skipped: past the {args.budget_s:g} s budget"))
        else:
            rows.append(run_check(ctx, name, check))
        print_row(rows[-1], width)
        atomic_write_json(out, report(ctx, rows, complete=False))  # a run cut short keeps what it measured
    atomic_write_json(out, report(ctx, rows, complete=True))
    failed = [r.name for r in rows if r.ok is False]
    print(f"{len(rows)} rows, {len(failed)} failed{': ' + '; '.join(failed) if failed else ''}; "
          f"{time.perf_counter() - started:.0f} s; wrote {out}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
