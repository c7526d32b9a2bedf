"""Import of the author's released checkpoints (`ckpt_step:38146.pt`) into ExoTransformer, strictly.

The variant is read from the state-dict keys (which official model file wrote it) together with
`model_args` (docs/official_code.md 1.7, 2, 3):
- model1 (no anchor_proj, no v_norm / v_res_norm): internal anchor, raw (no anchor norm). Note H7: an
  "OQKRN" run trained with model3 (q/k anchor norms) has exactly model1's keys; it loads as raw model1,
  which is how the README says to evaluate it.
- model2 (`layers.N.attn.v_norm` in every layer): internal anchor, all four anchors normed; layer 0's
  v_norm/g_norm are the v/g anchor norms, the copies in layers >= 1 are dead parameters (never used by
  the official forward) and are dropped, exactly those.
- model3 with decouple_anchor=False (`layers.0.attn.v_res_norm`): internal anchor; q/k anchor norms from
  the `q/k_residual_norm_enabled` flags, v/g from the presence of the res-norm keys.
- model3 / model4 / model.py (`anchor_proj.weight`): exogenous anchor from H0; dynamic when
  `dynamic_mixing.*` keys exist. The model3 lambda-init doubling (H6) is irrelevant: values are loaded.
"""

from __future__ import annotations

import math
import os
import pickle
import re

import torch

from exoformer.errors import UserError
from exoformer.model.config import PATHS, ModelConfig
from exoformer.model.model import ExoTransformer

OFFICIAL_DEFAULTS = {
    "block_size": 1024, "vocab_size": 57601, "n_layer": 12, "n_head": 12, "n_embd": 768, "mlp_hidden_dim": None,
    "mlp_ratio": 4.0, "weight_tying": False, "act_type": "gelu", "rope_theta": 5e5, "rmsnorm_eps": 1e-6,
    "rmsnorm_use_weight": True, "rmsnorm_use_bias": False, "norm_pos": "after", "qk_norm": True, "clip_qkv": None,
    "init_std": 0.02, "init_cutoff_factor": None, "logit_soft_cap": None, "smear_gate_enabled": True,
    "per_layer_backout": True, "residual_mode": "elementwise", "gated_attention_enabled": True,
    "decouple_anchor": True, "q_residual_norm_enabled": True, "k_residual_norm_enabled": True,
    "embedding_layer0_mix_enabled": False, "dynamic_mixing_enabled": True, "dynamic_mixing_hidden_dim": 16,
    "anchor_delta_enabled": False,
}
"""The official ModelConfig defaults (docs/official_code.md 1.7, trap H6) for flags a checkpoint may omit."""

UNSUPPORTED = {
    # flag: (value we can express, why)
    "smear_gate_enabled": (False, "the smear gate"), "per_layer_backout": (False, "per-layer backout"),
    "norm_pos": ("before", "norm_pos other than 'before'"), "act_type": ("swiglu", "an MLP other than SwiGLU"),
    "anchor_delta_enabled": (False, "anchor delta"), "weight_tying": (False, "tied embeddings"),
    "logit_soft_cap": (None, "a logit soft-cap"), "clip_qkv": (None, "clip_qkv"), "qk_norm": (True, "no QK-norm"),
    "embedding_layer0_mix_enabled": (False, "the embedding/layer-0 alpha mix"),
    "rmsnorm_use_bias": (False, "RMSNorm bias"), "rmsnorm_use_weight": (True, "RMSNorm without gain"),
}
MODES = {"elementwise": "elementwise", "headwise": "headwise", "scalar": "scalar"}
_LAYER = re.compile(r"^transformer\.layers\.(\d+)\.(.+)$")


def load_official_checkpoint(path_or_state_dict: str | os.PathLike | dict) -> tuple[ExoTransformer, ModelConfig]:
    """Build the matching ExoTransformer and load every official tensor into it (fp32; bf16 is cast)."""
    where = "checkpoint" if isinstance(path_or_state_dict, dict) else str(path_or_state_dict)
    ckpt = path_or_state_dict if isinstance(path_or_state_dict, dict) else _read(where)
    if not isinstance(ckpt, dict) or "model" not in ckpt or "model_args" not in ckpt:
        raise UserError("is not an official checkpoint (needs the keys 'model' and 'model_args')", where=where,
                        fix="pass the ckpt_step:N.pt file written by the official train.py")
    state = {k.removeprefix("_orig_mod."): v for k, v in ckpt["model"].items()}
    args = {**OFFICIAL_DEFAULTS, **dict(ckpt["model_args"])}
    config = official_config(state, args, where=where)
    ours = map_state_dict(state, config, where=where)
    check_tensor_shapes(ours, config, where=where, reshape_ok=True)  # on the meta device, before any allocation
    model = ExoTransformer(config)
    expected = model.state_dict()
    for name, tensor in ours.items():
        if tuple(tensor.shape) != tuple(expected[name].shape):
            ours[name] = tensor.reshape(expected[name].shape)  # e.g. headwise lambdas stored as (H, 1)
    model.load_state_dict(ours, strict=True)
    return model, config


def expected_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Name -> shape of every tensor an ExoTransformer of `config` holds, from a model built on the meta device
    (no memory is allocated, so a config that declares a huge model costs nothing to check)."""
    with torch.device("meta"):
        model = ExoTransformer(config)
    return {name: tuple(t.shape) for name, t in model.state_dict().items()}


def check_tensor_shapes(state: dict, config: ModelConfig, *, where: str, reshape_ok: bool = False) -> None:
    """Refuse, in one line, a state dict whose tensors are not exactly those of `config` (names, shapes and a
    floating-point dtype), before any real model is built. `reshape_ok`: a tensor may differ in shape with the same
    number of values."""
    expected = expected_shapes(config)
    missing = sorted(set(expected) - set(state))
    if missing:
        raise UserError(f"missing {len(missing)} tensors for the declared model: {', '.join(missing[:8])}",
                        where=where, fix="the checkpoint does not match its model config; check the file")
    extra = sorted(set(state) - set(expected))
    if extra:
        raise UserError(f"{len(extra)} tensors have no place in the declared model: {', '.join(extra[:8])}",
                        where=where, fix="the checkpoint does not match its model config; check the file")
    for name, tensor in state.items():
        shape = tuple(getattr(tensor, "shape", ()))
        if not isinstance(tensor, torch.Tensor):
            raise UserError(f"entry {name} is not a tensor", where=where, fix="the file is damaged")
        if not tensor.is_floating_point():  # integer, bool or complex values would be cast silently into a model
            raise UserError(f"tensor {name} has dtype {str(tensor.dtype).removeprefix('torch.')}; a model's weights "
                            "are floating point (float32, bfloat16, float16)", where=where,
                            fix="the file is damaged or not a model checkpoint; use the checkpoint as saved")
        if shape != expected[name] and not (reshape_ok and tensor.numel() == math.prod(expected[name])):
            raise UserError(f"tensor {name} has shape {shape}, but the declared model needs {expected[name]}",
                            where=where, fix="the checkpoint does not match its model config; check the file")


def _read(path: str) -> dict:
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError as e:
        raise UserError("file not found", where=path, fix="check the path") from e
    except pickle.UnpicklingError as e:
        raise UserError(f"refused by torch.load(weights_only=True): {str(e).splitlines()[0]}", where=path,
                        fix="the file pickles Python objects besides tensors; load it once in a trusted session "
                            "and re-save {'model': ckpt['model'], 'model_args': dict(ckpt['model_args'])}") from e


def official_config(state: dict, args: dict, *, where: str = "checkpoint") -> ModelConfig:
    """Our ModelConfig for an official state dict (prefix stripped) and its model_args."""
    for flag, (ok, what) in UNSUPPORTED.items():
        if args.get(flag) != ok:
            raise UserError(f"model_args.{flag}={args.get(flag)!r}: {what} is not supported", where=where,
                            fix=f"only checkpoints with {flag}={ok!r} (as the official train.py) can be imported")
    yarn_switches = [k for k, v in args.items() if "yarn" in str(k) and str(k).endswith(("enabled", "_on")) and v]
    if yarn_switches or args.get("use_yarn"):  # other yarn_* values are parameters, inert while it is off
        raise UserError(f"YaRN RoPE scaling ({yarn_switches or 'use_yarn'}) is not supported", where=where,
                        fix="use a checkpoint trained without YaRN (the official train.py never enables it)")
    d, n_head = int(args["n_embd"]), int(args["n_head"])
    hidden = args["mlp_hidden_dim"] or int(d * args["mlp_ratio"])
    if hidden % d or (hidden // d) % 2:
        raise UserError(f"MLP width {hidden} is not an even multiple of n_embd {d}", where=where,
                        fix="only mlp_ratio 2, 4, ... can be imported")
    gated = bool(args["gated_attention_enabled"])
    layer_keys = {}
    for key in state:
        m = _LAYER.match(key)
        if m:
            layer_keys.setdefault(int(m.group(1)), set()).add(m.group(2))
    all_layer_keys = set().union(*layer_keys.values()) if layer_keys else set()
    mix_paths = tuple(p for p in PATHS if f"attn.lambda_{p}1" in all_layer_keys)
    dynamic = any(k.startswith("attn.dynamic_mixing.") for k in all_layer_keys)
    if "anchor_proj.weight" in state:
        anchor = "h0"
        anchor_norm_paths = tuple(p for p in mix_paths if f"anchor_{p}_norm.weight" in state)
    elif mix_paths:
        anchor = "internal"
        l0 = layer_keys.get(0, set())
        if "attn.v_norm.weight" in layer_keys.get(1, set()):  # model2: every anchor normed
            anchor_norm_paths = mix_paths
        elif any(f"attn.{p}_res_norm.weight" in l0 for p in "vg"):  # model3, decouple_anchor=False
            qk = tuple(p for p in "qk" if args.get(f"{p}_residual_norm_enabled"))
            vg = tuple(p for p in "vg" if f"attn.{p}_res_norm.weight" in l0)
            anchor_norm_paths = tuple(p for p in mix_paths if p in qk + vg)
        else:  # model1: raw anchors
            anchor_norm_paths = ()
    else:
        anchor, anchor_norm_paths = "none", ()
    mode = args["residual_mode"]
    if mode not in MODES:
        raise UserError(f"model_args.residual_mode={mode!r} is unknown", where=where, fix=f"one of {list(MODES)}")
    try:
        return ModelConfig(
            n_layer=int(args["n_layer"]), n_head=n_head, d_model=d, vocab_size=int(args["vocab_size"]),
            seq_len=int(args["block_size"]), mlp_ratio=hidden // d, rope_theta=float(args["rope_theta"]),
            norm_eps=float(args["rmsnorm_eps"]), init_std=float(args["init_std"]),
            init_cutoff=float(args["init_cutoff_factor"] or 3.0), gated=gated, mix_paths=mix_paths, anchor=anchor,
            anchor_norm_paths=anchor_norm_paths, granularity=MODES[mode], dynamic=dynamic,
            dynamic_hidden=int(args["dynamic_mixing_hidden_dim"]),
            coef_init=float(args.get("value_res_lambda_init", 0.5)),  # only matters when training on from init
        )
    except UserError as e:
        raise UserError(f"model_args describe an inconsistent model: {e}", where=where) from e


_TOP = {"transformer.wte.weight": "embed.weight", "transformer.final_norm.weight": "final_norm.weight",
        "lm_head.weight": "lm_head.weight", "anchor_proj.weight": "anchor.proj.weight",
        **{f"anchor_{p}_norm.weight": f"anchor.norms.{p}.weight" for p in PATHS}}
_IN_LAYER = {"attn_norm.weight": "attn_norm.weight", "mlp_norm.weight": "mlp_norm.weight",
             "attn.c_attn.weight": "attn.qkv.weight", "attn.c_proj.weight": "attn.out.weight",
             "attn.q_norm.weight": "attn.q_norm.weight", "attn.k_norm.weight": "attn.k_norm.weight",
             "mlp.fc1.weight": "mlp.fc1.weight", "mlp.fc2.weight": "mlp.fc2.weight",
             **{f"attn.lambda_{p}1": f"attn.mix.{p}.coef_anchor" for p in PATHS},
             **{f"attn.lambda_{p}2": f"attn.mix.{p}.coef_self" for p in PATHS},
             **{f"attn.dynamic_mixing.{n}": f"attn.mix.dynamic.{n}" for n in ("fc1.weight", "fc2.weight", "fc2.bias")}}


def map_state_dict(state: dict, config: ModelConfig, *, where: str = "checkpoint") -> dict:
    """Official names -> ours, every key accounted for; unknown keys are an error listing them."""
    ours, unexpected = {}, []
    model2 = config.anchor == "internal" and any(k.endswith(".attn.v_norm.weight") for k in state)
    for key, tensor in state.items():
        name = _TOP.get(key)
        m = _LAYER.match(key)
        if name is None and m:
            layer, rest = int(m.group(1)), m.group(2)
            norm = re.fullmatch(r"attn\.([vg])_(res_)?norm\.weight", rest)
            if norm and layer == 0:
                name = f"blocks.0.attn.anchor_norms.{norm.group(1)}.weight"
            elif norm and model2 and not norm.group(2):
                continue  # model2's dead v_norm/g_norm in layers >= 1: never used by the official forward
            elif rest in _IN_LAYER:
                name = f"blocks.{layer}.{_IN_LAYER[rest]}"
        if name is None:
            unexpected.append(key)
            continue
        ours[name] = tensor.detach().to(torch.float32)
    if unexpected:
        raise UserError(f"{len(unexpected)} unexpected tensors: {', '.join(sorted(unexpected)[:8])}", where=where,
                        fix="this importer knows the official model1-4/model.py layouts only")
    return ours
