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
