"""Peak memory of one training step per rank: the real model's tensors laid out over the phases of the step.

The sizes come from the model itself (exoformer/budget/module_figures.py: built on the meta device, traced on
fake tensors); this module knows what the training code (exoformer/train/loop.py, loss.py, optim.py) keeps
alive when, and adds it up.

- Parameters and gradients: every parameter of the built model, bf16 where `official-pure-bf16` casts it. Optimiser
  states as `Muon` and `torch.optim.AdamW` keep them: Muon a momentum buffer in the parameter's dtype and an fp32
  second moment of one row or column; AdamW two moments in the parameter's dtype (Muon's second moment too).
- Activations: the tensors autograd saves in the forward, per layer, traced at the step's precision and shape
  (sdpa with document masks adds a (B, 1, T, T) mask per layer; flex does not). A compiled model keeps only what
  its matmuls and the attention kernel need (inductor's partitioner recomputes pointwise ops): per block its
  input, the projections, the attention output and log-sum-exp, the mid-block residual and fc1's output.
  Activation checkpointing keeps each block's input and recomputes one block at a time in backward.
- Logits: the full (B*T, V) logits stay referenced by the loop through backward and the optimiser step; the
  loss keeps an fp32 copy, and its backward holds five fp32 (B*T, V) buffers at once (the saved fp32 logits,
  the gather's scattered gradient, and `(x - lse).exp()` with its two temporaries). A chunked loss holds the
  same buffers for one chunk of `logits_chunk` tokens and no full logits.
- The peak is the largest of: the loss backward (all activations alive), each step of the backward walk (the
  layers not yet visited keep their activations, those visited hold gradients), and the optimiser step (all
  gradients, plus the largest temporaries of Muon's Polar Express or of the foreach AdamW).
- Data parallel: DDP keeps one bucket copy of the gradients. Muon keeps every matrix's orthogonalised update
  until all are computed (and, across ranks, broadcast from the rank that computed it): one extra copy of its
  matrices during the step, with or without sharing the work.
- On a GPU the total adds an allocator margin (fragmentation of the caching allocator) and the CUDA context.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from exoformer.budget import module_figures
from exoformer.model.config import ModelConfig, resolve_attention
from exoformer.train.config import STEP_PRECISIONS

FP32, BF16, INT64 = 4, 2, 8
GIB = 1024 ** 3

ALLOCATOR_MARGIN = 0.10
"""Fraction added on a GPU for the caching allocator's fragmentation (reserved over allocated) [assumption]."""
CUDA_CONTEXT_BYTES = 1 * GIB
"""CUDA context, cuBLAS workspaces and NCCL buffers outside torch's allocator [assumption]."""


def _widths(precision: str) -> tuple[int, int]:
    """Bytes per element of (the residual stream, matmul outputs) under a step precision."""
    if precision not in STEP_PRECISIONS:
        raise ValueError(f"precision must be one of {STEP_PRECISIONS} (resolve 'auto' first), got {precision!r}")
    return (BF16 if precision == "official-pure-bf16" else FP32), (FP32 if precision == "fp32" else BF16)


def _saved_compiled(cfg: ModelConfig, params: list[module_figures.Parameter], s: int, c: int, tokens: int,
                    mask: int) -> dict[str, int]:
    """Compiled: per block the block input, the fused projection's output (the dynamic MLP's hidden included),
    attention output and log-sum-exp, the mid-block residual and fc1's output, at the widths of the built model;
    pointwise ops (norms, RoPE, mixing, gate, SiLU) are recomputed."""
    N, d = tokens, cfg.d_model
    rows = {p.name: p.shape[0] for p in params if len(p.shape) == 2}
    anchor = N * len(cfg.mix_paths) * d * c
    per = {"embed": N * INT64, "head": N * d * s + N * FP32 + N * INT64, "anchors": anchor}
    if cfg.anchor_depth is not None:
        per["anchor"] = anchor
    for i in range(cfg.n_layer):
        b = f"blocks.{i}"
        width = rows[f"{b}.attn.qkv.weight"] + rows.get(f"{b}.attn.mix.dynamic.fc1.weight", 0)
        per[f"block{i}"] = (2 * N * d * s + N * width * c + mask + N * cfg.n_head * FP32 + N * d * c
                            + N * rows[f"{b}.mlp.fc1.weight"] * c + 2 * N * FP32)
    return per


# ---------------------------------------------------------------------------------------------- the estimate


@dataclass(kw_only=True, slots=True, frozen=True)
class MemoryEstimate:
    """Bytes per rank; `peak_tensors` is the largest live set, `total` adds the GPU margin and context."""

    weights: int
    gradients: int
    optimizer: int
    activations: int
    logits: int
    """What the loss holds on top of the activations at its backward (the largest logits moment; with a chunked
    loss also the head's gradient and the hidden state's, which its chunks accumulate)."""
    transient: int
    """Temporaries of the phase that makes the peak, beyond the above."""
    ddp_buckets: int
    peak_tensors: int
    peak_phase: str
    """'loss backward', 'backward <layer>', 'optimizer step' or 'end of backward'."""
    margin: int
    context: int
    total: int
    inputs: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def estimate_memory(cfg: ModelConfig, *, precision: str, micro_batch: int, seq_len: int, ranks: int = 1,
                    accumulation: int = 1, doc_masking: bool = True, compiled: bool = False,
                    activation_checkpointing: bool = False, logits_chunk: int | None = None,
                    muon_sharded: bool = False, device: str = "cuda", fused_adam: bool | None = None,
                    keep_logits: bool = True) -> MemoryEstimate:
    """Peak bytes per rank of one training step (see the module docstring).

    precision: fp32 | bf16-autocast | official-pure-bf16 (`auto` resolved by the caller for the device);
    logits_chunk: tokens per chunk of a chunked loss (None: full logits); muon_sharded: whether the ranks share
    the orthogonalisations (exoformer/train/optim.py keeps every state and update on every rank either way, so it
    changes time, not memory); fused_adam: default True on CUDA, as build_optimizers picks it;
    keep_logits: the caller keeps its `logits` through backward and the step (exoformer/train/loop.py does).
    """
    stream, c = _widths(precision)
    params = module_figures.parameters(cfg)
    pb = {p.name: p.nbytes(precision) for p in params}
    gradients = sum(pb.values())
    weights = gradients + module_figures.buffer_bytes(cfg)
    muon = [p for p in params if p.group == "muon"]
    muon_state = sum(pb[p.name] + max(p.shape) * pb[p.name] // p.numel for p in muon)
    adam = [p for p in params if p.group != "muon"]
    adam_state = sum(2 * pb[p.name] for p in adam) + len({p.group for p in adam}) * FP32
    optimizer = muon_state + adam_state

    N, V = micro_batch * seq_len, cfg.vocab_size
    dense_mask = doc_masking and resolve_attention(cfg.attention, device) == "sdpa"
    if compiled:
        mask = micro_batch * seq_len ** 2 * c if dense_mask else 0
        per = _saved_compiled(cfg, params, stream, c, N, mask)
    else:
        per = module_figures.saved_activations(cfg, precision=precision, seq_len=seq_len, micro_batch=micro_batch,
                                               dense_mask=dense_mask, chunked_loss=logits_chunk is not None)
    if activation_checkpointing:
        recompute = dict(per)
        kept = {k: (N * cfg.d_model * stream if k.startswith("block") else v) for k, v in per.items()}
    else:
        recompute, kept = {}, per
    activations = sum(kept.values())

    chunk = N if logits_chunk is None else min(N, logits_chunk)
    logits_kept = N * V * c if logits_chunk is None and keep_logits else 0
    # five fp32 (tokens, V) buffers at the log-sum-exp backward, and the logits in the compute dtype (in fp32 the
    # kept logits are the first of the five; a chunk's bf16 logits live as long as its loss)
    loss_extra = chunk * V * 5 * FP32 + (chunk * V * c if c != FP32 and (keep_logits or logits_chunk) else 0)

    ddp = gradients if ranks > 1 else 0
    base = weights + optimizer + ddp
    grads_before = gradients if accumulation > 1 else 0
    phases: list[tuple[str, int, int, int]] = []  # (phase, live tensors, logits part, transient part)
    head_grads = 0
    if logits_chunk is not None:  # the chunks' backward accumulates the head's gradient and the hidden state's
        head_grads = sum(pb[p.name] for p in params if p.name == "lm_head.weight") + N * cfg.d_model * FP32
    loss_part = loss_extra + max(grads_before, head_grads) - grads_before
    phases.append(("loss backward", base + grads_before + activations + loss_part, loss_part, 0))

    d = cfg.d_model
    f1 = cfg.mlp_ratio * d
    lin_max = max((p.numel for p in params if p.bf16_when_pure and p.layer not in ("embed", "head")), default=0)
    block_transient = N * d * stream + N * 2 * f1 * c + (lin_max * BF16 if precision == "bf16-autocast" else 0)
    grads_of = {}
    for p in params:
        grads_of[p.layer] = grads_of.get(p.layer, 0) + pb[p.name]
    head_grad_flow = N * V * (FP32 + (c if c != FP32 else 0)) if logits_chunk is None else chunk * V * (FP32 + c)
    alive_acts = activations
    done_grads = grads_of.get("head", 0)
    phases.append(("backward head", base + max(grads_before, done_grads) + alive_acts + logits_kept
                   + head_grad_flow, logits_kept, head_grad_flow))
    order = [f"block{i}" for i in reversed(range(cfg.n_layer))]
    if cfg.anchor_depth is not None:
        order.insert(order.index(f"block{cfg.anchor_depth}") + 1, "anchor")
    for layer in order:
        extra = recompute.get(layer, 0)
        live = base + max(grads_before, done_grads) + alive_acts + logits_kept + block_transient + extra
        phases.append((f"backward {layer}", live, logits_kept, block_transient + extra))
        alive_acts -= kept.get(layer, 0)
        done_grads += grads_of.get(layer, 0)
    phases.append(("end of backward", base + gradients + logits_kept + N * INT64, logits_kept, 0))

    pe = BF16 if device == "cuda" else FP32
    per_matrix = 0
    for p in muon:
        r, k = p.shape
        n, m = r * k, min(r, k)
        own = pb[p.name] // p.numel
        polar = n * (own + 4 * pe) + 4 * m * m * pe  # the Nesterov update, its copy and Polar Express's products
        apply = n * (4 * own + 1)  # square, normed (twice), the decay mask and product
        per_matrix = max(per_matrix, polar, apply)
    # Muon keeps every matrix's orthogonalised update until all are computed (and broadcast, across ranks)
    muon_peak = sum(pb[p.name] for p in muon) + per_matrix
    fused = (device == "cuda") if fused_adam is None else fused_adam
    adam_peak = 0 if fused else max(
        (sum(pb[p.name] for p in adam if p.group == g) for g in ("adam", "coef")), default=0)
    opt_transient = max(muon_peak, adam_peak)
    phases.append(("optimizer step", base + gradients + logits_kept + opt_transient, logits_kept, opt_transient))

    phase, peak, logits_part, transient = max(phases, key=lambda t: t[1])
    on_gpu = device == "cuda"
    margin = int(peak * ALLOCATOR_MARGIN) if on_gpu else 0
    context = CUDA_CONTEXT_BYTES if on_gpu else 0
    inputs = {"precision": precision, "micro_batch": micro_batch, "seq_len": seq_len, "ranks": ranks,
              "accumulation": accumulation, "doc_masking": doc_masking, "compiled": compiled,
              "activation_checkpointing": activation_checkpointing, "logits_chunk": logits_chunk,
              "muon_sharded": muon_sharded, "device": device}
    return MemoryEstimate(weights=weights, gradients=gradients, optimizer=optimizer, activations=activations,
                          logits=logits_part, transient=transient, ddp_buckets=ddp, peak_tensors=peak,
                          peak_phase=phase, margin=margin, context=context, total=peak + margin + context,
                          inputs=inputs)
