"""Peak memory of one training step per rank, derived from the tensors the code allocates (torch-free).

The estimate is a ledger, not a fit: every term below names the tensor of exoformer/model/model.py,
exoformer/train/loop.py, loss.py and optim.py that it stands for.

- Parameters (`parameter_tensors`) mirror `ExoTransformer.named_parameters()` name by name and shape by shape
  (a test compares them on the meta device). Under `official-pure-bf16` every nn.Linear / nn.Embedding tensor
  is bf16 and norm gains and coefficients stay fp32 (`to_official_pure_bf16`); otherwise all are fp32.
- Gradients have their parameter's dtype. Optimiser states as `Muon` and `torch.optim.AdamW` keep them: Muon a
  momentum buffer in the parameter's dtype and an fp32 second moment of one row or column; AdamW two moments
  in the parameter's dtype (Muon's second moment too).
- Activations: the tensors autograd saves for backward, layer by layer (`_saved_per_layer`), read off the
  forward: norms keep an fp32 copy of their input, the rstd and the pre-gain output; every matmul its input
  (a bf16 copy under autocast) and, under autocast, a bf16 copy of its fp32 weight; the fused mixing its
  scaled weight; the attention kernel q, k, v, output, log-sum-exp and, for SDPA with document masks, a
  (B, 1, T, T) additive mask per layer. Dtypes follow the precision: the residual stream is fp32 under fp32
  and bf16-autocast and bf16 under official-pure-bf16; matmul outputs are bf16 under both bf16 precisions.
  A compiled model keeps only what its matmuls and the attention kernel need (inductor's partitioner
  recomputes pointwise ops); activation checkpointing keeps each block's input and recomputes one block at a
  time in backward.
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

import math
from dataclasses import asdict, dataclass, field

from exoformer.model.config import ModelConfig

FP32, BF16, INT64 = 4, 2, 8
GIB = 1024 ** 3

ALLOCATOR_MARGIN = 0.10
"""Fraction added on a GPU for the caching allocator's fragmentation (reserved over allocated) [assumption]."""
CUDA_CONTEXT_BYTES = 1 * GIB
"""CUDA context, cuBLAS workspaces and NCCL buffers outside torch's allocator [assumption]."""
MEMORY_PRECISIONS = ("fp32", "bf16-autocast", "official-pure-bf16")


@dataclass(frozen=True, slots=True)
class ParamTensor:
    """One parameter as ExoTransformer allocates it: name, shape, what module kind holds it, optimiser group."""

    name: str
    shape: tuple[int, ...]
    kind: str
    """'linear' (nn.Linear weight or bias), 'embedding', 'norm' (RMSNorm gain) or 'coef' (mixing coefficient)."""
    group: str
    """'muon', 'adam' or 'coef', by the rule of exoformer/train/optim.py param_groups."""

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


def _group(name: str, kind: str, ndim: int) -> str:
    if name.rsplit(".", 1)[-1].startswith("coef_"):
        return "coef"
    if kind == "embedding" or name.startswith("lm_head.") or ndim < 2:
        return "adam"
    return "muon"


def parameter_tensors(cfg: ModelConfig) -> list[ParamTensor]:
    """Every parameter of `ExoTransformer(cfg)` in `named_parameters()` order."""
    d, dh, H, n_proj = cfg.d_model, cfg.d_head, cfg.n_head, len(cfg.proj_paths)
    out: list[tuple[str, tuple[int, ...], str]] = [("embed.weight", (cfg.vocab_size, d), "embedding")]
    if cfg.anchor in ("h0", "h1", "h2"):
        out.append(("anchor.proj.weight", (n_proj * d, d), "linear"))
        out += [(f"anchor.norms.{p}.weight", (dh,), "norm") for p in cfg.mix_paths if p in cfg.anchor_norm_paths]
    coef = {"elementwise": (H, dh), "headwise": (H,), "scalar": ()}[cfg.granularity]
    mixing = set(cfg.mixing_layers())
    for i in range(cfg.n_layer):
        b = f"blocks.{i}"
        out.append((f"{b}.attn_norm.weight", (d,), "norm"))
        out += [(f"{b}.attn.qkv.weight", (n_proj * d, d), "linear"), (f"{b}.attn.out.weight", (d, d), "linear"),
                (f"{b}.attn.q_norm.weight", (dh,), "norm"), (f"{b}.attn.k_norm.weight", (dh,), "norm")]
        if i in mixing:
            for p in cfg.mix_paths:
                out += [(f"{b}.attn.mix.{p}.coef_anchor", coef, "coef"), (f"{b}.attn.mix.{p}.coef_self", coef, "coef")]
            if cfg.dynamic:
                out += [(f"{b}.attn.mix.dynamic.fc1.weight", (cfg.dynamic_hidden, d), "linear"),
                        (f"{b}.attn.mix.dynamic.fc2.weight", (2 * n_proj, cfg.dynamic_hidden), "linear"),
                        (f"{b}.attn.mix.dynamic.fc2.bias", (2 * n_proj,), "linear")]
            out += [(f"{b}.attn.mix.post_norm.{p}.weight", (dh,), "norm")
                    for p in cfg.mix_paths if p in cfg.post_mix_norm_paths]
        if cfg.anchor == "internal" and i == 0:
            out += [(f"{b}.attn.anchor_norms.{p}.weight", (dh,), "norm")
                    for p in cfg.mix_paths if p in cfg.anchor_norm_paths and p in ("v", "g")]
        out += [(f"{b}.mlp_norm.weight", (d,), "norm"), (f"{b}.mlp.fc1.weight", (cfg.mlp_ratio * d, d), "linear"),
                (f"{b}.mlp.fc2.weight", (d, cfg.mlp_ratio * d // 2), "linear")]
    out += [("final_norm.weight", (d,), "norm"), ("lm_head.weight", (cfg.vocab_size, d), "linear")]
    return [ParamTensor(n, s, k, _group(n, k, len(s))) for n, s, k in out]


def param_bytes(p: ParamTensor, precision: str) -> int:
    """Bytes per element of a parameter (and of its gradient) under `precision`."""
    return BF16 if precision == "official-pure-bf16" and p.kind in ("linear", "embedding") else FP32


def layer_of(name: str) -> str:
    """'block3', 'anchor', 'embed' or 'head' (lm_head and the final norm): where backward produces its gradient."""
    if name.startswith("blocks."):
        return f"block{name.split('.')[1]}"
    return {"embed": "embed", "anchor": "anchor"}.get(name.split(".")[0], "head")


# ---------------------------------------------------------------------------------------------- activations


class _Ledger:
    """Saved tensors by storage: a key names a tensor that several ops save (counted once)."""

    def __init__(self) -> None:
        self.items: dict[str, int] = {}
        self._n = 0

    def add(self, nbytes: float, key: str | None = None) -> None:
        if key is None:
            self._n += 1
            key = f"#{self._n}"
        self.items.setdefault(key, int(nbytes))

    @property
    def total(self) -> int:
        return sum(self.items.values())


@dataclass(frozen=True, slots=True)
class _Numerics:
    stream: int
    """Bytes of the residual stream (the embedding output and every block's output)."""
    compute: int
    """Bytes of matmul outputs."""
    autocast: bool
    pure: bool


def _numerics(precision: str) -> _Numerics:
    if precision not in MEMORY_PRECISIONS:
        raise ValueError(f"precision must be one of {MEMORY_PRECISIONS} (resolve 'auto' first), got {precision!r}")
    pure = precision == "official-pure-bf16"
    autocast = precision != "fp32"
    return _Numerics(stream=BF16 if pure else FP32, compute=BF16 if autocast else FP32, autocast=autocast, pure=pure)


def _norm(led: _Ledger, num: _Numerics, rows: int, width: int, x_bytes: int, x_key: str | None) -> None:
    """rms_norm(x): F.rms_norm keeps its fp32 input (x itself when fp32, else the .float() copy) and rstd;
    `y * gain` keeps y (in x's dtype) and the gain cast to x's dtype."""
    led.add(rows * width * FP32, x_key if x_bytes == FP32 else None)
    led.add(rows * FP32)
    led.add(rows * width * x_bytes)
    if x_bytes != FP32:
        led.add(width * x_bytes)


def _linear(led: _Ledger, num: _Numerics, tokens: int, d_in: int, d_out: int, x_bytes: int, x_key: str | None,
            *, weight_bytes: int, derived_weight: bool = False) -> None:
    """F.linear(x, W) keeps x (a bf16 copy when autocast casts it) and, when W is not a parameter kept anyway,
    W: a bf16 autocast copy of an fp32 weight, or the derived weight itself (scaled / concatenated; fp32 before
    autocast casts it)."""
    if num.autocast and x_bytes != BF16:
        led.add(tokens * d_in * BF16)
    else:
        led.add(tokens * d_in * x_bytes, x_key)
    if derived_weight:
        led.add(d_out * d_in * (BF16 if num.autocast else FP32))
    elif num.autocast and weight_bytes != BF16:
        led.add(d_out * d_in * BF16)


def attention_kernel(cfg: ModelConfig, device: str) -> str:
    """The kernel the model runs: 'auto' is FlexAttention on CUDA and SDPA elsewhere (exoformer/model/model.py)."""
    if cfg.attention == "auto":
        return "flex" if device == "cuda" else "sdpa"
    return cfg.attention


def _saved_per_layer(cfg: ModelConfig, num: _Numerics, batch: int, seq: int, *, doc_masking: bool,
                     compiled: bool, device: str = "cpu", chunked_loss: bool = False) -> tuple[dict[str, int], int]:
    """Bytes autograd saves for backward, per 'layer' (embed, anchor, block0.., head), and the shared part.
    `chunked_loss`: the head runs inside the loss's per-chunk checkpoint, which keeps only its input."""
    N, d, H, dh = batch * seq, cfg.d_model, cfg.n_head, cfg.d_head
    P, M = len(cfg.proj_paths), len(cfg.mix_paths)
    c, s = num.compute, num.stream
    w_lin = BF16 if num.pure else FP32
    hid = cfg.dynamic_hidden if cfg.dynamic else 0
    mixing = set(cfg.mixing_layers())
    mask = batch * seq * seq * c if doc_masking and attention_kernel(cfg, device) == "sdpa" else 0
    per: dict[str, int] = {}
    shared = _Ledger()  # tensors first saved in one layer and reused by later ones (the anchor)
    if compiled:
        return _saved_compiled(cfg, num, batch, seq, mask)

    led = _Ledger()
    led.add(N * INT64)  # embedding indices
    per["embed"] = led.total
    exo = cfg.anchor in ("h0", "h1", "h2")
    anchor_depth = {"h0": 0, "h1": 1, "h2": 2}.get(cfg.anchor, -1)
    anchor_bytes = 0
    for i in range(cfg.n_layer):
        led = _Ledger()
        h_key = f"h{i}"
        if exo and i == anchor_depth:  # ExogenousAnchor(h): one projection, per-path norms over the stack
            a = _Ledger()
            rows_all = M == P
            _linear(a, num, N, d, M * d, s, h_key, weight_bytes=w_lin, derived_weight=not rows_all)
            normed = len(cfg.anchor_norm_paths)
            if normed == M and M:
                _norm(a, num, N * M * H, dh, c, "anchor_raw")
            else:
                if c == FP32 and normed:
                    a.add(N * M * d * c, "anchor_raw")
                for _ in range(normed):
                    _norm(a, num, N * H, dh, c, "anchor_raw")
            anchor_bytes = N * M * d * c  # the anchor itself, kept by every mixing layer's multiply
            per["anchor"] = a.total
            if h_key in a.items:  # the block's norm saves the same fp32 h again: count it once
                led.items[h_key] = 0
        _norm(led, num, N, d, s, h_key)
        if i in mixing:
            led.add(P * d * FP32)  # the row scale c_self of the fused projection
            _linear(led, num, N, d, P * d + hid, s, None, weight_bytes=w_lin, derived_weight=True)
            led.add(M * d * c if cfg.granularity == "elementwise" else M * H * c)  # c_anchor
            if hid:
                led.add(N * (P * d + hid) * c)  # the fused output: projections and the dynamic MLP's hidden
                led.add(N * hid * c)  # GELU output, fc2's input
                if num.autocast and not num.pure:
                    led.add(2 * P * hid * BF16)
                led.add(N * 2 * P * c)  # sigmoid output: the per-token scales
                led.add(N * M * d * c)  # anchor * c_anchor
            if cfg.post_mix_norm_paths:
                k = len(cfg.post_mix_norm_paths)
                for _ in range(1 if k == M else k):
                    _norm(led, num, N * H * (M if k == M else 1), dh, c, None)
        else:
            _linear(led, num, N, d, P * d, s, None, weight_bytes=w_lin)
        led.add(N * P * d * c)  # the projections attention reads (mixed where this layer mixes)
        # QK-norm over the q, k slices (fp32 copy unless fp32, where it is a view of `own`), RoPE, attention
        if c != FP32:
            led.add(N * 2 * d * FP32)
        led.add(N * 2 * H * FP32)  # rstd
        led.add(N * 2 * d * c)  # y
        led.add(2 * dh * c)  # the stacked q/k gains (cast)
        if cfg.anchor == "internal" and i == 0:  # layer 0 stacks its anchors and norms the v/g ones
            vg = [p for p in cfg.anchor_norm_paths if p in ("v", "g")]
            if vg and c == FP32:
                led.add(N * M * d * c)  # the stacked parts, viewed by the per-path norms
            for _ in vg:
                if c != FP32:
                    led.add(N * d * FP32)
                led.add(N * H * FP32)
                led.add(N * d * c)
                if c != FP32:
                    led.add(dh * c)
            anchor_bytes = N * M * d * c
        if c != FP32:
            led.add(2 * seq * dh * c)  # RoPE tables cast to bf16 (in fp32 the buffers themselves)
        led.add(N * 2 * d * c)  # rotated q, k
        led.add(mask)
        led.add(N * H * FP32)  # log-sum-exp
        led.add(N * d * c)  # attention output
        if cfg.gated:
            led.add(N * d * c)  # sigmoid gate
            led.add(N * d * c)  # gated output, the out-projection's input
        if num.autocast and not num.pure:
            led.add(d * d * BF16)
        # residual, MLP norm, SwiGLU
        _norm(led, num, N, d, s, f"h{i}mid")
        f1 = cfg.mlp_ratio * d
        _linear(led, num, N, d, f1, s, None, weight_bytes=w_lin)
        led.add(N * f1 * c)  # fc1 output (value and gate halves)
        led.add(N * f1 // 2 * c)  # SiLU(gate)
        led.add(N * f1 // 2 * c)  # value * SiLU(gate), fc2's input
        if num.autocast and not num.pure:
            led.add(d * f1 // 2 * BF16)
        per[f"block{i}"] = led.total
    if anchor_bytes:
        shared.add(anchor_bytes, "anchor")
    led = _Ledger()
    _norm(led, num, N, d, s, "hL")
    if chunked_loss:
        led.add(N * d * s)  # the LM head's input, kept by the loss's checkpoint
    else:
        _linear(led, num, N, d, cfg.vocab_size, s, "xnL", weight_bytes=w_lin)
    led.add(N * INT64)  # targets, kept by the loss's gather
    per["head"] = led.total
    return per, shared.total


def _saved_compiled(cfg: ModelConfig, num: _Numerics, batch: int, seq: int, mask: int) -> tuple[dict[str, int], int]:
    """Compiled: per block the block input, the projections (fused output), attention output and log-sum-exp,
    the mid-block residual and fc1's output; pointwise ops (norms, RoPE, mixing, gate, SiLU) are recomputed."""
    N, d, H = batch * seq, cfg.d_model, cfg.n_head
    P, M = len(cfg.proj_paths), len(cfg.mix_paths)
    c, s = num.compute, num.stream
    hid = cfg.dynamic_hidden if cfg.dynamic else 0
    mixing = set(cfg.mixing_layers())
    per = {"embed": N * INT64}
    for i in range(cfg.n_layer):
        width = P * d + (hid if i in mixing else 0)
        per[f"block{i}"] = (N * d * s + N * width * c + mask + N * H * FP32 + N * d * c
                            + N * d * s + N * cfg.mlp_ratio * d * c + 2 * N * FP32)
    per["head"] = N * d * s + N * FP32 + N * INT64
    shared = N * M * d * c if cfg.mix_paths else 0
    if cfg.anchor in ("h0", "h1", "h2"):
        per["anchor"] = N * M * d * c
    return per, shared


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

    @property
    def total_gib(self) -> float:
        return self.total / GIB

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
    num = _numerics(precision)
    params = parameter_tensors(cfg)
    pb = {p.name: p.numel * param_bytes(p, precision) for p in params}
    gradients = sum(pb.values())
    weights = gradients + 2 * cfg.seq_len * cfg.d_head * FP32  # + the RoPE cos/sin buffers (fp32)
    muon = [p for p in params if p.group == "muon"]
    muon_state = sum(pb[p.name] + (p.shape[0] if p.shape[0] >= p.shape[1] else p.shape[1])
                     * param_bytes(p, precision) for p in muon)
    adam = [p for p in params if p.group != "muon"]
    adam_state = sum(2 * pb[p.name] for p in adam) + len({p.group for p in adam}) * FP32
    optimizer = muon_state + adam_state

    N, V = micro_batch * seq_len, cfg.vocab_size
    per, shared = _saved_per_layer(cfg, num, micro_batch, seq_len, doc_masking=doc_masking, compiled=compiled,
                                   device=device, chunked_loss=logits_chunk is not None)
    if activation_checkpointing:
        recompute = dict(per)
        kept = {k: (N * cfg.d_model * num.stream if k.startswith("block") else v) for k, v in per.items()}
    else:
        recompute, kept = {}, per
    activations = sum(kept.values()) + shared

    c = num.compute
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
    lin_max = max((p.numel for p in params if p.kind == "linear" and p.name != "lm_head.weight"), default=0)
    block_transient = N * d * num.stream + N * (f1 + f1) * c + (lin_max * BF16 if num.autocast and not num.pure
                                                                  else 0)
    grads_of = {}
    for p in params:
        grads_of[layer_of(p.name)] = grads_of.get(layer_of(p.name), 0) + pb[p.name]
    head_grad_flow = N * V * (FP32 + (c if c != FP32 else 0)) if logits_chunk is None else chunk * V * (FP32 + c)
    alive_acts = activations
    done_grads = grads_of.get("head", 0)
    phases.append(("backward head", base + max(grads_before, done_grads) + alive_acts + logits_kept
                   + head_grad_flow, logits_kept, head_grad_flow))
    order = [f"block{i}" for i in reversed(range(cfg.n_layer))]
    anchor_depth = {"h0": 0, "h1": 1, "h2": 2}.get(cfg.anchor)
    if anchor_depth is not None:
        order.insert(order.index(f"block{anchor_depth}") + 1, "anchor")
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
        own = param_bytes(p, precision)
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


# ---------------------------------------------------------------------------------------------- FLOPs


def matmul_flops_per_token(cfg: ModelConfig, seq_len: int) -> float:
    """Training FLOPs per token from the module shapes: 6 x (every matmul weight: projections, out-proj, MLP,
    anchor, dynamic MLP, LM head) + the two attention matmuls (causal: half), x3 for forward and backward."""
    linear = sum(p.numel for p in parameter_tensors(cfg) if p.kind == "linear" and len(p.shape) == 2)
    attention = 2 * 2 * seq_len * cfg.d_model / 2 * cfg.n_layer
    return 6.0 * linear + 3.0 * attention
