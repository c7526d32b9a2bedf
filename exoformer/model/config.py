"""`ModelConfig`: the shape and the variant of one model, validated once at construction.

Torch-free on purpose: the registry, the planner and the cost model read configs and count parameters
without importing torch. Every variant of the paper is a value of this dataclass (see
`experiments/variants.yaml`); no variant is a class of its own.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from exoformer.errors import UserError, did_you_mean
from exoformer.limits import MAX_PARAMETERS, check_size
from exoformer.records import check_fields, load

PATHS = ("q", "k", "v", "g")
"""The four projections that can be mixed, in the order of the fused projection (official c_attn order)."""

ANCHORS = ("none", "internal", "h0", "h1", "h2")
"""Where the mixing anchor comes from.

none: no mixing. internal: layer 0's own projections (ResFormer / NuResFormer; layer 0 does not mix).
h0: exogenous, one projection of the raw token embeddings mixed into every layer (ExoFormer).
h1 / h2: exogenous, the output of block 1 / block 2 through a dedicated projection (v4 anchor-depth
ablation); only the layers after that block mix [inference: the anchor does not exist before it].
"""

GRANULARITIES = ("elementwise", "headwise", "scalar")
"""Coefficient shape per path and layer: (H, d_head), (H,), or () (paper: E / H / S)."""

ANCHOR_DEPTHS = {"h0": 0, "h1": 1, "h2": 2}
"""Exogenous anchors: the depth of the hidden state the anchor is projected from, right before that block."""

ATTENTION_KERNELS = ("sdpa", "flex", "auto")
"""Attention implementation: torch's scaled_dot_product_attention, FlexAttention (CUDA) with a block mask, or
auto: FlexAttention on CUDA and sdpa elsewhere (the paper presets: flex skips masked blocks; CPU has no flex
backward)."""

DYNAMIC_FC2_INITS = ("zero", "official")
"""Initial dynamic-MLP fc2 weight: zero, or trunc-normal(init_std) as the official code ends up with (hazard H5)."""


def resolve_attention(kernel: str, device_type: str) -> str:
    """The kernel that runs on a device of this type ('cuda', 'cpu', ...): 'auto' is flex on CUDA, else sdpa."""
    if kernel == "auto":
        return "flex" if device_type == "cuda" else "sdpa"
    return kernel


@dataclass(kw_only=True, slots=True, frozen=True)
class ModelConfig:
    """One model: shape fields, then variant fields. Defaults are the paper's 450M gated shape, unmixed."""

    # --- shape ---
    n_layer: int = 29
    """Number of transformer blocks (paper: 29 for gated, 32 for ungated models at ~450M)."""
    n_head: int = 16
    """Attention heads; d_head = d_model / n_head."""
    d_model: int = 1024
    """Residual width C."""
    vocab_size: int = 50304
    """Embedding and head rows. GPT-2 needs 50,257; the official checkpoints use 57,601 (hazard H1)."""
    seq_len: int = 2048
    """Longest sequence the model is built for (RoPE table length)."""
    mlp_ratio: int = 4
    """fc1 is d -> mlp_ratio*d, split into SwiGLU value/gate halves; fc2 is (mlp_ratio/2)*d -> d."""
    rope_theta: float = 500_000.0
    """RoPE base (rotate-half convention)."""
    norm_eps: float = 1e-6
    """Epsilon of every RMSNorm."""
    init_std: float = 0.02
    """Std of the truncated-normal init of every non-zero-init Linear and the embedding."""
    init_cutoff: float = 3.0
    """Truncation of that init, in standard deviations."""

    # --- variant ---
    gated: bool = False
    """Gated attention: an elementwise sigmoid gate on each head's output before the output projection."""
    mix_paths: tuple[str, ...] = ()
    """Which projections are mixed with the anchor: a subset of ('q', 'k', 'v', 'g'), in that order."""
    anchor: str = "none"
    """Anchor source, one of ANCHORS. Must be 'none' exactly when mix_paths is empty."""
    anchor_norm_paths: tuple[str, ...] = ()
    """Mixed paths whose anchor is RMSNorm'd per head before mixing (NuResFormer / ExoFormer: all)."""
    post_mix_norm_paths: tuple[str, ...] = ()
    """Ablation: mixed paths that get an extra per-head RMSNorm after mixing (paper: q,k,v or q,k,v,g)."""
    granularity: str = "elementwise"
    """Coefficient granularity, one of GRANULARITIES."""
    dynamic: bool = False
    """Dynamic coefficients: a per-layer MLP d -> dynamic_hidden -> 2 per projection scales them per token."""
    dynamic_hidden: int = 16
    """Hidden width of the dynamic-coefficient MLP."""
    coef_init: float = 0.5
    """Initial effective value of both coefficients (static: the coefficient; dynamic: coefficient x 0.5 gate)."""
    dynamic_fc2_init: str = "zero"
    """Initial dynamic-MLP fc2 weight, one of DYNAMIC_FC2_INITS: 'zero' (scales exactly 0.5, what the official code
    means) or 'official' (trunc-normal(init_std), what it does by accident: hazard H5, docs/official_code.md)."""

    # --- implementation ---
    attention: str = "sdpa"
    """Attention kernel, one of ATTENTION_KERNELS: 'sdpa' (everywhere), 'flex' (FlexAttention: CUDA, or CPU
    without gradients; skips fully masked blocks of packed documents) or 'auto' (flex on CUDA, else sdpa).
    Same math, different rounding, so hashed."""

    def __post_init__(self) -> None:
        _validate(self)

    # --- derived ---
    @property
    def d_head(self) -> int:
        return self.d_model // self.n_head

    @property
    def proj_paths(self) -> tuple[str, ...]:
        """Projections the attention computes: q, k, v, and g when gated."""
        return PATHS if self.gated else PATHS[:3]

    @property
    def anchor_depth(self) -> int | None:
        """The block before which the exogenous anchor is projected (ANCHOR_DEPTHS); None for no or internal."""
        return ANCHOR_DEPTHS.get(self.anchor)

    @property
    def first_mixing_layer(self) -> int:
        """Index of the first block that mixes (the anchor must exist before it runs)."""
        return {"none": self.n_layer, "internal": 1, **ANCHOR_DEPTHS}[self.anchor]

    def mixing_layers(self) -> range:
        return range(self.first_mixing_layer, self.n_layer) if self.mix_paths else range(0)

    def coefficient_shape(self) -> tuple[int, ...]:
        """Shape of one coefficient tensor (one of the two per mixed path and mixing layer)."""
        return {"elementwise": (self.n_head, self.d_head), "headwise": (self.n_head,), "scalar": ()}[self.granularity]

    def to_dict(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, data: dict, *, where: str = "model") -> ModelConfig:
        """Strict construction from plain data (YAML, checkpoints): unknown keys are an error."""
        return load(cls, data, where=where, what="model")

    def num_parameters(self) -> int:
        """Parameter count from the shapes alone (no torch); a test checks it against the built model."""
        return count_parameters(self)


def count_parameters(cfg: ModelConfig) -> int:
    """Closed-form parameter count, mirroring exactly what `ExoTransformer` allocates."""
    d, dh, n_proj = cfg.d_model, cfg.d_head, len(cfg.proj_paths)
    per_layer = (
        2 * d  # attn_norm, mlp_norm gains
        + n_proj * d * d  # fused q,k,v(,g) projection
        + d * d  # output projection
        + 2 * dh  # q_norm, k_norm gains
        + cfg.mlp_ratio * d * d + (cfg.mlp_ratio // 2) * d * d  # SwiGLU fc1, fc2
    )
    total = cfg.n_layer * per_layer + d + 2 * cfg.vocab_size * d  # + final norm, embedding, untied head
    n_mix_layers = len(cfg.mixing_layers())
    if n_mix_layers:
        coef = 1
        for s in cfg.coefficient_shape():
            coef *= s
        total += n_mix_layers * len(cfg.mix_paths) * 2 * coef
        total += n_mix_layers * len(cfg.post_mix_norm_paths) * dh
        if cfg.dynamic:
            n_out = 2 * n_proj  # two scales per projection, mixed or not (as the official code)
            total += n_mix_layers * (d * cfg.dynamic_hidden + cfg.dynamic_hidden * n_out + n_out)
        if cfg.anchor == "internal":
            # q/k anchors reuse layer 0's QK-norm; v/g anchors get their own norms in layer 0.
            total += sum(dh for p in cfg.anchor_norm_paths if p in ("v", "g"))
        else:
            total += n_proj * d * d  # exogenous anchor projection (all projections, as the official code)
            total += len(cfg.anchor_norm_paths) * dh
    return total


def _validate(cfg: ModelConfig) -> None:
    def bad(field_name: str, problem: str, fix: str) -> UserError:
        return UserError(problem, where=f"model.{field_name}", fix=fix)

    check_fields(cfg, section="model")
    for name in ("n_layer", "n_head", "d_model", "vocab_size", "seq_len", "mlp_ratio", "dynamic_hidden"):
        value = getattr(cfg, name)
        if value <= 0:
            raise bad(name, f"must be a positive integer, got {value!r}", "set a positive integer")
        check_size(value, where=f"model.{name}")
    if cfg.d_model % cfg.n_head:
        raise bad("d_model", f"{cfg.d_model} is not divisible by n_head={cfg.n_head}",
                  "choose d_model a multiple of n_head")
    if cfg.d_head % 2:
        raise bad("n_head", f"d_head={cfg.d_head} is odd; rotate-half RoPE needs an even head width",
                  "choose n_head so that d_model/n_head is even")
    if cfg.mlp_ratio % 2:
        raise bad("mlp_ratio", f"{cfg.mlp_ratio} is odd; SwiGLU splits fc1 in two halves", "use an even ratio (4)")
    if cfg.anchor not in ANCHORS:
        raise bad("anchor", f"unknown anchor {cfg.anchor!r}", did_you_mean(cfg.anchor, ANCHORS))
    if cfg.granularity not in GRANULARITIES:
        raise bad("granularity", f"unknown granularity {cfg.granularity!r}",
                  did_you_mean(cfg.granularity, GRANULARITIES))
    if cfg.dynamic_fc2_init not in DYNAMIC_FC2_INITS:
        raise bad("dynamic_fc2_init", f"unknown init {cfg.dynamic_fc2_init!r}",
                  did_you_mean(cfg.dynamic_fc2_init, DYNAMIC_FC2_INITS))
    if cfg.attention not in ATTENTION_KERNELS:
        raise bad("attention", f"unknown attention {cfg.attention!r}", did_you_mean(cfg.attention, ATTENTION_KERNELS))
    for name in ("mix_paths", "anchor_norm_paths", "post_mix_norm_paths"):
        paths = getattr(cfg, name)
        if any(p not in PATHS for p in paths):
            raise bad(name, f"must be a list drawn from {list(PATHS)}, got {paths!r}", "use q, k, v and/or g")
        if len(set(paths)) != len(paths) or tuple(p for p in PATHS if p in paths) != paths:
            raise bad(name, f"{list(paths)} has repeats or is out of order", f"write it in the order {list(PATHS)}")
    if "g" in cfg.mix_paths and not cfg.gated:
        raise bad("mix_paths", "mixes the gate path 'g' but the model has no gate", "set gated: true or drop 'g'")
    if bool(cfg.mix_paths) != (cfg.anchor != "none"):
        raise bad("anchor", f"anchor={cfg.anchor!r} with mix_paths={list(cfg.mix_paths)}",
                  "use anchor 'none' exactly when no path is mixed")
    for name in ("anchor_norm_paths", "post_mix_norm_paths"):
        extra = [p for p in getattr(cfg, name) if p not in cfg.mix_paths]
        if extra:
            raise bad(name, f"names paths {extra} that are not mixed",
                      f"use a subset of mix_paths {list(cfg.mix_paths)}")
    if cfg.dynamic and cfg.anchor == "none":
        raise bad("dynamic", "dynamic coefficients need mixing", "set anchor and mix_paths, or dynamic: false")
    if cfg.first_mixing_layer >= cfg.n_layer and cfg.mix_paths:
        raise bad("n_layer", f"anchor {cfg.anchor!r} leaves no layer to mix with n_layer={cfg.n_layer}",
                  f"use n_layer > {cfg.first_mixing_layer}")
    for name in ("rope_theta", "norm_eps", "init_std", "init_cutoff"):
        if getattr(cfg, name) <= 0:
            raise bad(name, f"must be > 0, got {getattr(cfg, name)!r}", "use a positive value (see the default)")
    if count_parameters(cfg) > MAX_PARAMETERS:
        raise bad("d_model", f"the model would have {count_parameters(cfg):,} parameters, above the limit of "
                  f"{MAX_PARAMETERS:,}", "choose a smaller n_layer, d_model or vocab_size (docs/input-limits.md)")


ABLATIONS = ("none", "anchor", "self")
"""Inference-time ablations of the mixing terms (paper appendix C): `inspect(ablate=...)` drops the anchor or the
layer's own term in every mixing layer; "none" is the unablated pass. Ignored for non-mixing models."""
