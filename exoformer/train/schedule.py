"""Learning-rate and Muon-momentum schedules (docs/official_code.md section 4.3).

Both are pure functions of the 0-based update index, so the only schedule state a checkpoint needs is
the step itself. One LR multiplier is shared by Muon and AdamW (official: one `WarmupStableDecay`
LambdaLR per optimiser, same lambda).
"""

from __future__ import annotations

from exoformer.train.config import TrainConfig


def lr_multiplier(step: int, *, steps: int, warmup_steps: int, decay_fraction: float, final_fraction: float) -> float:
    """Warmup-stable-decay, mode "linear" (official schedulers.py).

    f(s) = (s+1)/W for s < W; 1 until steps - int(decay_fraction*steps); then
    final + (1-final)*(steps - s)/decay_steps, which ends near `final` (0.1 of peak, not zero).
    """
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    decay_steps = int(decay_fraction * steps)
    if decay_steps <= 0 or step < steps - decay_steps:
        return 1.0
    return final_fraction + (1.0 - final_fraction) * (steps - step) / decay_steps


def momentum(step: int, *, steps: int, start: float, peak: float, ramp_steps: int) -> float:
    """Muon momentum: start -> peak linearly over the first `ramp_steps` updates, back to start over the last.

    Official: 0.85 + 0.10*s/100 for s < 100; 0.95 - 0.10*(s - (steps-100))/100 for s > steps - 100.
    """
    if ramp_steps <= 0:
        return peak
    if step < ramp_steps:
        return start + (peak - start) * step / ramp_steps
    cooldown_start = steps - ramp_steps
    if step > cooldown_start:
        return peak - (peak - start) * (step - cooldown_start) / ramp_steps
    return peak


def lr_multiplier_for(cfg: TrainConfig, step: int) -> float:
    return lr_multiplier(step, steps=cfg.steps, warmup_steps=cfg.warmup_steps,
                         decay_fraction=cfg.decay_fraction, final_fraction=cfg.final_lr_fraction)


def momentum_for(cfg: TrainConfig, step: int) -> float:
    return momentum(step, steps=cfg.steps, start=cfg.muon_momentum_start, peak=cfg.muon_momentum,
                    ramp_steps=cfg.muon_momentum_steps)


BRANCH_FIELDS = frozenset({"steps", "branch_from", "branch_step", "keep_every"})
"""What a decay branch's recipe may differ in from its parent's: its length, the branch itself, and which
checkpoints the parent keeps (never the math)."""


def first_schedule_difference(a: TrainConfig, b: TrainConfig, until: int) -> int | None:
    """The first update index below `until` where the LR multiplier or Muon momentum of `a` and `b` differ,
    else None. A decay branch is exact only when none does before its start (docs/forecast.md)."""
    for step in range(until):
        if lr_multiplier_for(a, step) != lr_multiplier_for(b, step) or momentum_for(a, step) != momentum_for(b, step):
            return step
    return None


def branch_problem(parent: TrainConfig, branch: TrainConfig, *, tolerant: frozenset[str] = frozenset(),
                   kept: bool = False) -> str | None:
    """Why `branch` cannot start from `parent`'s checkpoint at branch.branch_step (None when it can): another
    recipe outside BRANCH_FIELDS and `tolerant`, a parent that is itself a branch or too short, or schedules
    that differ before the start (a decay or momentum cool-down already begun), or no checkpoint kept there
    (not asked when `kept`: the checkpoint is in hand)."""
    if parent.is_branch:
        return f"the parent is itself a branch (of {parent.branch_from})"
    theirs, ours = parent.to_dict(), branch.to_dict()
    differing = sorted(k for k in set(theirs) | set(ours)
                       if k not in BRANCH_FIELDS | tolerant and theirs.get(k) != ours.get(k))
    if differing:
        shown = ", ".join(f"train.{k} (parent {theirs.get(k)!r}, branch {ours.get(k)!r})" for k in differing[:3])
        return f"its recipe differs from the parent's in more than steps: {shown}"
    start = branch.branch_step or 0
    if start > parent.steps:
        return f"the parent trains {parent.steps} steps, fewer than the branch's start {start}"
    step = first_schedule_difference(parent, branch, start)
    if step is not None:
        return (f"the schedules differ at step {step} < {start} (LR {lr_multiplier_for(parent, step):.4g} vs "
                f"{lr_multiplier_for(branch, step):.4g}, momentum {momentum_for(parent, step):.4g} vs "
                f"{momentum_for(branch, step):.4g}): start the branch no later than its own decay")
    if not kept and not (parent.keep_every and start % parent.keep_every == 0) and start != parent.steps:
        return (f"the parent keeps no checkpoint at step {start} (its train.keep_every is {parent.keep_every}): "
                "set the parent's keep_every to a divisor of every branch start")
    return None
