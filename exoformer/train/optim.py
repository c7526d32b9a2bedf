"""Optimisers of the paper's recipe: Muon for hidden matrices, AdamW for the rest (docs/official_code.md 4.3).

`param_groups` splits a model's parameters by rule (never by a list of names) into
  muon: every 2-D weight that is not an embedding, the LM head or a mixing coefficient
        (attention and MLP matrices, the exogenous anchor projection, the dynamic-MLP weights);
  adam: embeddings, the LM head, every 1-D parameter (norm gains, the dynamic-MLP bias, ...);
  coef: every parameter whose own name starts with `coef_` (the mixing coefficients, AdamW "lambda" group).
"""

from __future__ import annotations

import logging
import math

import torch
from torch import Tensor, nn

from exoformer.train.config import TrainConfig
from exoformer.train.distributed import group_rank_and_size

log = logging.getLogger(__name__)

POLAR_EXPRESS_COEFFICIENTS = (
    (8.156554524902461, -22.48329292557795, 15.878769915207462),
    (4.042929935166739, -2.808917465908714, 0.5000178451051316),
    (3.8916678022926607, -2.772484153217685, 0.5060648178503393),
    (3.285753657755655, -2.3681294933425376, 0.46449024233003106),
    (2.3465413258596377, -1.7097828382687081, 0.42323551169305323),
)
"""(a, b, c) of the 5 Polar Express iterations (safety 1e-2, cushion 0.02), as in the official muon.py."""

GROUPS = ("muon", "adam", "coef")


def param_groups(model: nn.Module) -> dict[str, list[tuple[str, nn.Parameter]]]:
    """Assign every trainable parameter to exactly one of GROUPS by rule; assert totality; log the counts."""
    embedding_ids = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    head = getattr(model, "lm_head", None)
    head_ids = {id(p) for p in head.parameters()} if isinstance(head, nn.Module) else set()
    groups: dict[str, list[tuple[str, nn.Parameter]]] = {g: [] for g in GROUPS}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        if name.rsplit(".", 1)[-1].startswith("coef_"):
            groups["coef"].append((name, p))
        elif id(p) in embedding_ids or id(p) in head_ids or p.ndim < 2:
            groups["adam"].append((name, p))
        elif p.ndim == 2:
            groups["muon"].append((name, p))
        else:
            raise ValueError(f"parameter {name} has shape {tuple(p.shape)}; no optimiser rule covers >2-D tensors")
    trainable = [p for p in model.parameters() if p.requires_grad]
    assigned = [id(p) for g in groups.values() for _, p in g]
    assert len(assigned) == len(set(assigned)) == len({id(p) for p in trainable}), "optimiser groups overlap or miss"
    log.info("optimiser groups: " + ", ".join(
        f"{g}={len(ps)} tensors/{sum(p.numel() for _, p in ps):,} params" for g, ps in groups.items()))
    return groups


def polar_express(update: Tensor) -> Tensor:
    """Approximate the orthogonal polar factor U V^T of `update` (5 Polar Express iterations).

    In bf16 when `update` is bf16 (official-pure-bf16 weights, on any device) or on CUDA, rounded as the
    official Triton kernels round (`polar_express_step_bf16`); in fp32 otherwise (fp32 weights on the CPU,
    where fp32 keeps the exact-resume tests bitwise). Works on the wide orientation (transposed when rows > cols).
    """
    bf16 = update.dtype == torch.bfloat16 or update.is_cuda
    x = update.float()
    transposed = x.size(-2) > x.size(-1)
    if transposed:
        x = x.mT
    x = x / (x.norm() * 1.02 + 1e-6)
    if bf16:
        x = x.to(torch.bfloat16)
        for a, b, c in POLAR_EXPRESS_COEFFICIENTS:
            x = polar_express_step_bf16(x, a, b, c)
    else:
        for a, b, c in POLAR_EXPRESS_COEFFICIENTS:
            gram = x @ x.mT
            # bA + cA^2 and aX + BX with the scalars inside the GEMMs (beta/alpha): no elementwise passes
            x = torch.addmm(x, torch.addmm(gram, gram, gram, beta=b, alpha=c), x, beta=a)
    return x.mT if transposed else x


def polar_express_step_bf16(x: Tensor, a: float, b: float, c: float) -> Tensor:
    """One Polar Express iteration X <- aX + (bA + cA^2)X, A = XX^T, on bf16 X, as the official kernels round
    (docs/official_code.md 4.3): A accumulated in fp32 and rounded once to bf16 (the XX^T kernel); bA + cA^2
    accumulated in fp32 from the bf16 A and rounded once (the fused kernel); aX + BX accumulated in fp32 and
    rounded once (addmm). On CUDA the two large products are bf16 matmuls (fp32 accumulation, one rounding);
    on the CPU every product is an fp32 matmul of the bf16 values, rounded at the same three points.
    """
    if x.is_cuda:
        gram = x @ x.mT
        gram32 = gram.float()
        poly = torch.addmm(gram32, gram32, gram32, beta=b, alpha=c).to(torch.bfloat16)
        return torch.addmm(x, poly, x, beta=a)
    x32 = x.float()
    gram32 = (x32 @ x32.mT).to(torch.bfloat16).float()
    poly32 = (b * gram32 + c * (gram32 @ gram32)).to(torch.bfloat16).float()
    return (a * x32 + poly32 @ x32).to(torch.bfloat16)


class Muon(torch.optim.Optimizer):
    """Polar-Express Muon with a NorMuon-style second moment and cautious weight decay (official muon/muon.py).

    Per 2-D parameter W (rows x cols) with gradient G, in this order:
    Nesterov momentum (buf = mu*buf + (1-mu)*G; U = (1-mu)*G + mu*buf); O = polar_express(U);
    v = beta2*v + (1-beta2)*mean(O^2) per row (rows >= cols) or per column; O' = O/sqrt(max(v, 1e-10))
    rescaled to ||O||_F; O' *= sqrt(max(1, rows/cols)); cautious decay W -= lr*wd*[O'*W >= 0]*W; W -= lr*O'.
    The momentum buffer, the second moment v and the arithmetic after the orthogonalisation are in the
    parameter's dtype, as in the official code (docs/official_code.md 4.3): bf16 under official-pure-bf16,
    fp32 with fp32 master weights. State round-trips exactly through state_dict/load_state_dict.
    """

    def __init__(self, params, *, lr: float = 0.01, momentum: float = 0.95, weight_decay: float = 0.1,
                 beta2: float = 0.95) -> None:
        super().__init__(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay, beta2=beta2))

    @torch.no_grad()
    def step(self, closure=None):
        """One update of every parameter with a gradient. Under torch.distributed (gradients already all-reduced,
        so identical on every rank) the orthogonalisations are shared: parameter i is orthogonalised on rank
        i mod world_size and broadcast from there; the rest of the update is cheap and runs on every rank, so
        weights and state stay identical everywhere and equal to a single process's."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        rank, world = group_rank_and_size()
        work = []
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.ndim != 2:
                    raise ValueError(f"Muon handles 2-D weights only, got shape {tuple(p.shape)}")
                state = self.state[p]
                rows, cols = p.shape
                if not state:
                    state["momentum_buffer"] = torch.zeros_like(p)
                    moment_shape = (rows, 1) if rows >= cols else (1, cols)
                    state["second_moment"] = torch.zeros(moment_shape, dtype=p.dtype, device=p.device)
                grad = p.grad.to(p.dtype)
                buf = state["momentum_buffer"]
                buf.lerp_(grad, 1 - group["momentum"])
                update = grad.lerp(buf, group["momentum"])
                owner = len(work) % world
                # contiguous: broadcast sends the storage as laid out (a transposed view would arrive transposed),
                # and in one process too, so that the norms after it sum in the same order at every world size
                ortho = polar_express(update).to(p.dtype).contiguous() if owner == rank else torch.empty_like(p)
                work.append((group, p, owner, ortho))
        if world > 1:
            for handle in [torch.distributed.broadcast(ortho, src=owner, async_op=True)
                           for _, _, owner, ortho in work]:
                handle.wait()
        for group, p, _, ortho in work:
            self._apply(group, p, ortho)
        return loss

    def _apply(self, group: dict, p: Tensor, ortho: Tensor) -> None:
        """Steps 3-6 of the class docstring for one parameter, given its orthogonalised update."""
        lr, wd, beta2 = group["lr"], group["weight_decay"], group["beta2"]
        rows, cols = p.shape
        v = self.state[p]["second_moment"]
        v.lerp_(ortho.square().mean(dim=1 if rows >= cols else 0, keepdim=True).to(v.dtype), 1 - beta2)
        normed = ortho * v.clamp_min(1e-10).rsqrt().to(p.dtype)
        normed = normed * (ortho.norm() / normed.norm().clamp_min(1e-10))
        normed = normed * math.sqrt(max(1.0, rows / cols))
        if wd:
            agree = (normed * p) >= 0
            p.sub_(p * agree.to(p.dtype), alpha=lr * wd)
        p.sub_(normed, alpha=lr)

    def load_state_dict(self, state_dict: dict) -> None:
        """The inherited load, with every state tensor kept in the dtype (and the values) it was saved with.

        torch's Optimizer casts floating-point state to its parameter's dtype on load: an fp32 buffer of a bf16
        weight would come back rounded to bf16 (or fail at the next step). A resumed run must continue with
        exactly the state it saved, so the saved tensors replace the cast ones (on the parameter's device).
        """
        saved = {int(index): {key: value for key, value in entry.items() if isinstance(value, Tensor)}
                 for index, entry in state_dict["state"].items()}
        super().load_state_dict(state_dict)
        params = [p for group in self.param_groups for p in group["params"]]
        for index, tensors in saved.items():
            entry = self.state[params[index]]
            for key, value in tensors.items():
                entry[key] = value.to(device=params[index].device, copy=True)


def build_optimizers(model: nn.Module, cfg: TrainConfig) -> tuple[Muon, torch.optim.AdamW]:
    """Muon over the `muon` group; one AdamW with the `adam` and `coef` groups (both lr 0.003, no decay).

    Each param group keeps its peak LR in `base_lr`; the loop sets lr = base_lr * lr_multiplier(step).
    """
    groups = param_groups(model)
    muon = Muon([p for _, p in groups["muon"]], lr=cfg.muon_lr, momentum=cfg.muon_momentum,
                weight_decay=cfg.muon_weight_decay, beta2=cfg.muon_beta2)
    muon.param_groups[0]["base_lr"] = cfg.muon_lr
    adam_groups = [
        dict(params=[p for _, p in groups["adam"]], lr=cfg.adam_lr, base_lr=cfg.adam_lr, name="adam"),
        dict(params=[p for _, p in groups["coef"]], lr=cfg.coef_lr, base_lr=cfg.coef_lr, name="coef"),
    ]
    adam_groups = [g for g in adam_groups if g["params"]]
    on_cuda = all(p.is_cuda for g in adam_groups for p in g["params"])
    adamw = torch.optim.AdamW(adam_groups, betas=(cfg.adam_beta1, cfg.adam_beta2), eps=cfg.adam_eps,
                              weight_decay=cfg.adam_weight_decay, fused=True if on_cuda else None)
    return muon, adamw


def set_schedules(optimizers: tuple[Muon, torch.optim.AdamW], lr_factor: float, muon_momentum: float) -> None:
    muon, adamw = optimizers
    for opt in optimizers:
        for group in opt.param_groups:
            group["lr"] = group["base_lr"] * lr_factor
    for group in muon.param_groups:
        group["momentum"] = muon_momentum
