"""What the real model allocates and computes, measured on the meta device and on fake tensors, and cached.

The budget (exoformer/budget/cost.py, memory.py, preflight.py) reads its model figures here instead of copying
the forward:
- parameters: `ExoTransformer(cfg)` built on the meta device; per tensor its name, size, optimiser group
  (exoformer/train/optim.py `param_groups`) and whether `official-pure-bf16` keeps it in bf16
  (exoformer/train/loop.py `to_official_pure_bf16`);
- FLOPs per token: the forward on fake tensors (torch's FakeTensorMode: shapes, no data) counted by
  torch.utils.flop_counter.FlopCounterMode, the attention kernel's count halved (causal), x3 for the backward;
- activations: the tensors autograd saves in the forward at the true sequence length under the step's precision,
  recorded by storage with torch.autograd.graph.saved_tensors_hooks on fake tensors and attributed to the layer
  ('embed', 'anchor', 'block<i>', 'head') that saves them first (in backward they are freed when that layer is
  done). Saved bytes are affine in the micro-batch, so two traces (1 and 2 sequences) give them for any.
Traces run the model at the probe depth (`probe_depth`): every block from the first mixing one on is built and
runs alike, so the blocks a deeper model adds each save and compute what its last probed block does.

Measuring imports torch and takes about a second per question; each answer is cached as JSON under
<cache>/module_figures/ (`exoformer.data.cache_dir`: $EXOFORMER_CACHE, default results/cache), keyed by the
question and a hash of the source files that answer it, so the planning verbs stay torch-free for a model they
have seen. A cache file that cannot be read is measured again.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from exoformer.io import atomic_write_json
from exoformer.model.config import ModelConfig

SOURCES = ("model/model.py", "train/optim.py", "train/loop.py", "budget/module_figures.py")
"""The files whose code decides the figures (the model, the optimiser groups, the precision casts, this one)."""
PURE_BF16 = "official-pure-bf16"


@dataclass(frozen=True, slots=True)
class Parameter:
    """One parameter of the built model."""

    name: str
    shape: tuple[int, ...]
    group: str
    """'muon', 'adam' or 'coef' (exoformer/train/optim.py param_groups)."""
    bf16_when_pure: bool
    """An nn.Linear / nn.Embedding tensor, which official-pure-bf16 stores in bf16 (norm gains, coefficients: fp32)."""

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def nbytes(self, precision: str) -> int:
        """Bytes of the tensor (and of its gradient) under a step precision."""
        return self.numel * (2 if precision == PURE_BF16 and self.bf16_when_pure else 4)

    @property
    def layer(self) -> str:
        """Where backward produces its gradient: 'block<i>', 'embed', 'anchor' or 'head' (final norm, LM head)."""
        top = self.name.split(".")[0]
        if top == "blocks":
            return f"block{self.name.split('.')[1]}"
        return top if top in ("embed", "anchor") else "head"


def parameters(cfg: ModelConfig) -> list[Parameter]:
    """Every parameter of `ExoTransformer(cfg)`, in `named_parameters()` order."""
    rows = _cached("structure", cfg, {}, _measure_structure)["parameters"]
    return [Parameter(name=n, shape=tuple(s), group=g, bf16_when_pure=b) for n, s, g, b in rows]


def buffer_bytes(cfg: ModelConfig) -> int:
    """Bytes of the model's buffers (the fp32 RoPE tables), which no precision casts."""
    return _cached("structure", cfg, {}, _measure_structure)["buffers"]


def probe_depth(cfg: ModelConfig) -> int:
    """Blocks of the shallowest model with every kind of block of `cfg`: up to the first mixing one, plus one."""
    return min(cfg.n_layer, (cfg.first_mixing_layer if cfg.mix_paths else 0) + 2)


def flops_per_token(cfg: ModelConfig, seq_len: int) -> float:
    """Training FLOPs (forward + backward) per token at `seq_len`, counted on the real forward (module docstring)."""
    return _cached("flops", cfg, {"seq_len": seq_len}, _measure_flops)


def saved_activations(cfg: ModelConfig, *, precision: str, seq_len: int, micro_batch: int, dense_mask: bool,
                      chunked_loss: bool) -> dict[str, int]:
    """Bytes autograd saves in one forward, per layer, at `micro_batch` sequences of `seq_len` tokens.

    precision: a step precision (auto resolved); dense_mask: sdpa with document masks, a (B, 1, T, T) mask per
    layer (flex, or no document masking: none); chunked_loss: the LM head runs inside the loss's per-chunk
    checkpoint, which keeps only the head's input (exoformer/train/loss.py), else the head saves its own."""
    per_seq = _cached("activations", cfg, {"precision": precision, "seq_len": seq_len, "dense_mask": dense_mask,
                                           "chunked_loss": chunked_loss}, _measure_activations)
    return {layer: fixed + micro_batch * each for layer, (fixed, each) in per_seq.items()}


# ---------------------------------------------------------------------------------------------- the cache


@cache
def _code_hash() -> str:
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for name in SOURCES:
        digest.update((root / name).read_bytes())
    return digest.hexdigest()[:16]


def _cache_file(kind: str, cfg: ModelConfig, question: dict) -> Path:
    from exoformer.data import cache_dir

    key = json.dumps({"kind": kind, "model": cfg.to_dict(), **question, "code": _code_hash()}, sort_keys=True)
    return cache_dir() / "module_figures" / f"{kind}-{hashlib.sha256(key.encode()).hexdigest()[:24]}.json"


_MEMO: dict[Path, object] = {}


def _cached(kind: str, cfg: ModelConfig, question: dict, measure):
    path = _cache_file(kind, cfg, question)
    if path in _MEMO:
        return _MEMO[path]
    try:
        value = json.loads(path.read_text())["value"]
    except (OSError, ValueError, KeyError, TypeError):
        value = json.loads(json.dumps(measure(cfg, **question)))  # the JSON form, as a cached read returns it
        try:
            atomic_write_json(path, {"kind": kind, "model": cfg.to_dict(), **question, "value": value})
        except OSError:
            pass  # a read-only cache: measure again next time
    _MEMO[path] = value
    return value


# ---------------------------------------------------------------------------------------------- measuring


def _meta_model(cfg: ModelConfig, precision: str):
    import torch

    from exoformer.model import ExoTransformer
    from exoformer.train.loop import to_official_pure_bf16

    with torch.device("meta"):
        model = ExoTransformer(cfg)
    if precision == PURE_BF16:
        to_official_pure_bf16(model)
    return model


def _measure_structure(cfg: ModelConfig) -> dict:
    """Parameters (name, shape, group, bf16 under official-pure-bf16) and buffer bytes, built at the probe depth;
    the blocks past it repeat the last probed block's parameters under their own index."""
    from exoformer.train.loop import to_official_pure_bf16
    from exoformer.train.optim import param_groups

    depth = probe_depth(cfg)
    model = _meta_model(_probe(cfg, depth), "fp32")
    group = {n: g for g, members in param_groups(model).items() for n, _ in members}
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    to_official_pure_bf16(model)
    rows = [[n, list(p.shape), group[n], p.element_size() == 2] for n, p in model.named_parameters()]
    last = f"blocks.{depth - 1}."
    repeated = [[f"blocks.{i}.{n.removeprefix(last)}", *rest] for i in range(depth, cfg.n_layer)
                for n, *rest in rows if n.startswith(last)]
    cut = max(i for i, row in enumerate(rows) if row[0].startswith(last)) + 1
    return {"parameters": rows[:cut] + repeated + rows[cut:], "buffers": buffers}


def _probe(cfg: ModelConfig, depth: int) -> ModelConfig:
    """`cfg` at `depth` blocks, with the sdpa kernel (the one fake CPU tensors run; flex saves what sdpa does
    without a document mask)."""
    return ModelConfig.from_dict({**cfg.to_dict(), "n_layer": depth, "attention": "sdpa"})


def _fake_model(cfg: ModelConfig, precision: str, mode):
    """The model on fake CPU tensors (built on meta, cast there: fake parameters cannot be cast in place)."""
    model = _meta_model(cfg, precision)
    with mode:
        return model.to_empty(device="cpu")


def _measure_flops(cfg: ModelConfig, *, seq_len: int) -> float:
    """Forward FLOPs of one sequence at two depths, extended to the model's, x3, per token."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils.flop_counter import FlopCounterMode, sdpa_flop_count

    def causal_attention(query, key, value, *args, out_shape=None, **kwargs) -> int:
        return sdpa_flop_count(query, key, value) // 2

    aten = torch.ops.aten
    kernels = (aten._scaled_dot_product_flash_attention_for_cpu, aten._scaled_dot_product_flash_attention,
               aten._scaled_dot_product_efficient_attention)

    def forward_flops(depth: int) -> int:
        mode = FakeTensorMode(allow_non_fake_inputs=True)
        model = _fake_model(_probe(cfg, depth), "fp32", mode)
        counter = FlopCounterMode(display=False, custom_mapping={k: causal_attention for k in kernels})
        with mode, counter, torch.no_grad():
            model(torch.zeros(1, seq_len, dtype=torch.long))
        return counter.get_total_flops()

    depth = probe_depth(cfg)
    probed = forward_flops(depth)
    per_block = forward_flops(depth + 1) - probed if cfg.n_layer > depth else 0
    return 3.0 * (probed + (cfg.n_layer - depth) * per_block) / seq_len


def _measure_activations(cfg: ModelConfig, *, precision: str, seq_len: int, dense_mask: bool,
                         chunked_loss: bool) -> dict[str, list[int]]:
    one = _trace_saved(cfg, precision, seq_len, 1, dense_mask, chunked_loss)
    two = _trace_saved(cfg, precision, seq_len, 2, dense_mask, chunked_loss)
    return {layer: [2 * one.get(layer, 0) - two[layer], two[layer] - one.get(layer, 0)] for layer in two}


def _trace_saved(cfg: ModelConfig, precision: str, seq_len: int, batch: int, dense_mask: bool,
                 chunked_loss: bool) -> dict[str, int]:
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from exoformer.train.loop import autocast_for

    mode = FakeTensorMode(allow_non_fake_inputs=True)
    depth = probe_depth(cfg)
    model = _fake_model(_probe(cfg, depth), precision, mode)
    layer = ["embed"]
    for name, module in [("embed", model.embed), ("anchor", model.anchor), ("head", model.final_norm),
                         *((f"block{i}", b) for i, b in enumerate(model.blocks))]:
        if module is not None:
            module.register_forward_pre_hook(lambda _m, _a, name=name: layer.__setitem__(0, name))
    owned = {t.untyped_storage()._cdata for t in [*model.parameters(), *model.buffers()]}
    first: dict[int, tuple[str, int]] = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage._cdata not in owned:
            first.setdefault(storage._cdata, (layer[0], storage.nbytes()))
        return t

    with mode:
        idx = torch.zeros(batch, seq_len, dtype=torch.long)
        targets = torch.zeros(batch, seq_len, dtype=torch.long)
        starts = torch.zeros(batch, seq_len, dtype=torch.bool) if dense_mask else None
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), autocast_for(precision, torch.device("cpu")):
            hidden = model.hidden_states(idx, starts)
            if chunked_loss:
                pack(hidden)  # the loss's checkpoint keeps the head's input
            else:
                model.lm_head(hidden)
            pack(targets)  # the loss's gather keeps the targets
    per: dict[str, int] = {}
    for name, nbytes in first.values():
        per[name] = per.get(name, 0) + nbytes
    for i in range(depth, cfg.n_layer):
        per[f"block{i}"] = per[f"block{depth - 1}"]
    return per
