"""What a checkpoint file says about itself, in one block: the author's released `ckpt_step:N.pt` files
(docs/official_code.md 4.5: `model`, `model_args`, `config`, `step`, `tokens_processed`) or a checkpoint of one
of our runs (`model`, `model_config`, `train_config`, `step`).

`describe_checkpoint(path)` reads the file once (torch.load, weights_only=True), learns our ModelConfig from it
through the public importer (exoformer.model.loading) and returns a plain dict: the settings the paper never
states (depth, width, vocabulary, steps, tokens, the official flags that matter, hazards H4, H6 and H7 in
docs/official_code.md) become data. `format_checkpoint_info` prints it. Every refusal is one UserError line.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from exoformer.errors import UserError
from exoformer.io import sha256_file
from exoformer.model.config import ModelConfig
from exoformer.model.loading import OFFICIAL_DEFAULTS, _read, official_config

OFFICIAL, OURS = "official", "ours"
"""The two kinds of checkpoint file the importer knows."""
FLAGS = ("decouple_anchor", "residual_mode", "gated_attention_enabled", "dynamic_mixing_enabled",
         "q_residual_norm_enabled", "k_residual_norm_enabled", "value_res_lambda_init", "flash_attention")
"""model_args flags reported as they were saved (docs/official_code.md 1.7)."""
CONFIG_KEYS = ("max_steps", "max_tokens", "total_batch_size", "batch_size", "block_size", "seed", "dtype",
               "eval_steps", "learning_rate", "warmup_steps")
"""train.py module variables summarised from `config` when the file has them."""


def check_file(path: str | os.PathLike) -> Path:
    """A path that names a readable regular file, or the one-line reason it does not."""
    p = Path(path)
    if not p.exists():
        raise UserError("no such file", where=str(p), fix="give the path of a downloaded ckpt_step:N.pt "
                        "(`reproduce.py prefetch --checkpoints` fetches the released ones)")
    if p.is_dir():
        raise UserError("is a directory, not a checkpoint file", where=str(p),
                        fix="name the .pt file inside it, e.g. <dir>/ckpt_step:38146.pt")
    if not p.is_file():  # a FIFO, socket or device: opening it could block forever or never end
        raise UserError("is not a regular file", where=str(p), fix="give the path of a checkpoint file")
    return p


def read_checkpoint(path: str | os.PathLike) -> dict:
    """The checkpoint's dict (CPU tensors); refuses a non-checkpoint and a pickle that needs code."""
    p = check_file(path)
    with p.open("rb") as f:
        head = f.read(4)
    if not (head.startswith(b"PK\x03\x04") or head[:1] == b"\x80"):  # torch.save's zip, or a legacy pickle
        raise UserError("not a torch checkpoint (neither a torch.save zip archive nor a pickle)", where=str(p),
                        fix="pass a .pt file written by torch.save (the official train.py or our runs)")
    try:
        ckpt = _read(str(p))
    except UserError:
        raise
    except Exception as err:  # noqa: BLE001 - torch's own reason for a file that is not a torch save
        first = (str(err).splitlines() or [type(err).__name__])[0][:160]
        raise UserError(f"not a torch checkpoint ({type(err).__name__}: {first})", where=str(p),
                        fix="pass a .pt file written by torch.save (the official train.py or our runs)") from None
    if not isinstance(ckpt, dict) or "model" not in ckpt or not ({"model_args", "model_config"} & set(ckpt)):
        raise UserError("is not a model checkpoint (needs 'model' and 'model_args' or 'model_config')",
                        where=str(p), fix="pass the ckpt_step:N.pt of the official train.py, or a "
                                          "checkpoints/step_N.pt of one of our runs")
    if not isinstance(ckpt["model"], dict):
        raise UserError("its 'model' entry is not a state dict", where=str(p), fix="re-save the checkpoint")
    return ckpt


def checkpoint_kind(ckpt: dict) -> str:
    return OURS if "model_config" in ckpt else OFFICIAL


def official_layout(state: dict) -> str:
    """Which official model file wrote these keys (`_orig_mod.` already stripped), as docs/official_code.md 2."""
    if any(".attn.dynamic_mixing." in k for k in state):
        return "model4/model.py (dynamic mixing)"
    if "anchor_proj.weight" in state:
        return "model3 (exogenous anchor)"
    if any(k.startswith("transformer.layers.0.attn.") and "_res_norm." in k for k in state):
        return "model3 (internal anchor, decouple_anchor=False)"
    if any(k.startswith("transformer.layers.1.attn.v_norm.") for k in state):
        return "model2 (normed internal anchor)"
    return "model1 (raw internal anchor)" if any(".attn.lambda_" in k for k in state) else "model1 (no mixing)"


def model_config_of(ckpt: dict, *, where: str) -> ModelConfig:
    """Our ModelConfig for a checkpoint dict of either kind (the official one through the importer)."""
    if checkpoint_kind(ckpt) == OURS:
        return ModelConfig.from_dict({k: tuple(v) if isinstance(v, list) else v
                                      for k, v in dict(ckpt["model_config"]).items()}, where=f"{where}: model_config")
    state = {k.removeprefix("_orig_mod."): v for k, v in ckpt["model"].items()}
    args = ckpt["model_args"]
    if not isinstance(args, dict):
        raise UserError("model_args is not a mapping", where=where, fix="re-save with dict(model_args)")
    return official_config(state, {**OFFICIAL_DEFAULTS, **args}, where=where)


def describe_checkpoint(path: str | os.PathLike, ckpt: dict | None = None) -> dict[str, Any]:
    """Everything the file says that the evaluation and the report need, as plain data (JSON-safe)."""
    p = check_file(path)
    ckpt = read_checkpoint(p) if ckpt is None else ckpt
    where = str(p)
    config = model_config_of(ckpt, where=where)
    kind = checkpoint_kind(ckpt)
    check_declared_counts(ckpt, where=where)
    state = {k.removeprefix("_orig_mod."): v for k, v in ckpt["model"].items()}
    dtypes = sorted({str(v.dtype).removeprefix("torch.") for v in state.values() if hasattr(v, "dtype")})
    info: dict[str, Any] = {
        "file": str(p.resolve()), "size": p.stat().st_size, "sha256": sha256_file(p), "kind": kind,
        "model_config": config.to_dict(), "params": config.num_parameters(),
        "shape": {"n_layer": config.n_layer, "n_head": config.n_head, "d_model": config.d_model,
                  "mlp_ratio": config.mlp_ratio, "seq_len": config.seq_len},
        "vocab_size": config.vocab_size, "tensor_dtypes": dtypes,
        "step": _int(ckpt.get("step")), "tokens": _int(ckpt.get("tokens_processed", ckpt.get("tokens"))),
    }
    if kind == OFFICIAL:
        args = {**OFFICIAL_DEFAULTS, **ckpt["model_args"]}
        layout = official_layout(state)
        doubled = layout.startswith("model3 (exo") and bool(args.get("dynamic_mixing_enabled"))
        raw_config = ckpt.get("config") if isinstance(ckpt.get("config"), dict) else {}
        info.update({
            "layout": layout, "compiled": any(k.startswith("_orig_mod.") for k in ckpt["model"]),
            "flags": {k: _plain(args.get(k)) for k in FLAGS if k in args},
            "lambda_init_doubled": doubled,
            "training": {"steps": _int(ckpt.get("step")), "tokens": _int(ckpt.get("tokens_processed")),
                         "precision": "pure bf16 (Linear/Embedding tensors saved in bf16, hazard H4)"
                         if "bfloat16" in dtypes else "fp32",
                         "doc_masking": bool(args.get("flash_attention")),
                         "config": {k: _plain(raw_config[k]) for k in CONFIG_KEYS if k in raw_config}},
        })
    else:
        train = ckpt.get("train_config") if isinstance(ckpt.get("train_config"), dict) else {}
        info.update({"layout": "exoformer run checkpoint", "compiled": False, "flags": {},
                     "lambda_init_doubled": False,
                     "training": {"steps": _int(ckpt.get("step")), "tokens": _int(ckpt.get("tokens")),
                                  "precision": train.get("precision"), "doc_masking": train.get("doc_masking"),
                                  "config": {k: _plain(train[k]) for k in ("steps", "batch_tokens", "seq_len",
                                                                           "data", "seed") if k in train}}})
    return info


def format_checkpoint_info(info: dict[str, Any]) -> str:
    """The importer's report: one block, one fact per line."""
    s, t = info["shape"], info["training"]
    lines = [f"checkpoint {info['file']}",
             f"  sha256     {info['sha256']} ({info['size']:,} bytes)",
             f"  layout     {info['layout']}" + (" (saved from torch.compile)" if info.get("compiled") else ""),
             f"  shape      {s['n_layer']} layers x d_model {s['d_model']} x {s['n_head']} heads, mlp x{s['mlp_ratio']}"
             f", seq_len {s['seq_len']}, {info['params']:,} parameters",
             f"  vocab      {info['vocab_size']:,}",
             f"  training   step {t['steps']}, tokens {_count(t['tokens'])}, precision {t['precision']}, "
             f"doc masking {t['doc_masking']}"]
    m = info["model_config"]
    lines.append(f"  variant    gated {m['gated']}, anchor {m['anchor']}, mix {''.join(m['mix_paths']) or '-'}, "
                 f"anchor norms {''.join(m['anchor_norm_paths']) or '-'}, {m['granularity']}, "
                 f"dynamic {m['dynamic']}")
    if info.get("flags"):
        lines.append("  flags      " + ", ".join(f"{k}={v}" for k, v in info["flags"].items()))
    if info.get("lambda_init_doubled"):
        lines.append("  note       model3 with dynamic_mixing_enabled doubled the lambda init (hazard H6); "
                     "the saved values are used")
    if t.get("config"):
        lines.append("  config     " + ", ".join(f"{k}={v}" for k, v in t["config"].items()))
    return "\n".join(lines)


COUNT_KEYS = ("step", "tokens", "tokens_processed")
"""The counts a checkpoint declares about its training (ours: step, tokens; official: step, tokens_processed)."""


def check_declared_counts(ckpt: dict, *, where: str) -> None:
    """A one-line UserError when a declared count is a number that is not finite or is negative (NaN tokens
    would be recorded as the run's training tokens)."""
    for key in COUNT_KEYS:
        value = ckpt.get(key)
        if hasattr(value, "item") and getattr(value, "numel", lambda: 1)() == 1:
            value = value.item()
        if isinstance(value, (int, float)) and not isinstance(value, bool) and not (math.isfinite(value)
                                                                                    and value >= 0):
            raise UserError(f"the checkpoint declares {key} = {value!r}, not a finite count", where=where,
                            fix="the file is damaged: use the checkpoint as its training saved it")


def _int(value: Any) -> int | None:
    """A count the checkpoint declares (step, tokens); None when it is absent or not a finite number (NaN, inf)."""
    if hasattr(value, "item") and getattr(value, "numel", lambda: 1)() == 1:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return int(value) if math.isfinite(value) else None


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):
        value = value.item()
    return value if value is None or isinstance(value, (bool, int, float, str)) else str(value)


def _count(n: int | None) -> str:
    return "unknown" if n is None else f"{n:,}"
