import pytest

from exoformer.train.config import TrainConfig
from exoformer.train.schedule import lr_multiplier_for, momentum_for


def official_wsd(s: int) -> float:
    """schedulers.py WarmupStableDecay(linear) with the paper's numbers, written out independently."""
    warmup, max_steps = 1000, 38147
    warmdown = int(0.2 * max_steps)  # 7629
    if s < warmup:
        return (s + 1) / warmup
    if s < max_steps - warmdown:
        return 1.0
    return 0.1 + 0.9 * (max_steps - s) / warmdown


@pytest.mark.parametrize("step", [0, 999, 1000, 30517, 30518, 38146])
def test_lr_multiplier_matches_official_formula(step):
    assert lr_multiplier_for(TrainConfig(), step) == pytest.approx(official_wsd(step), abs=1e-12)


def test_lr_multiplier_landmarks():
    cfg = TrainConfig()
    assert lr_multiplier_for(cfg, 0) == pytest.approx(0.001)
    assert lr_multiplier_for(cfg, 30517) == 1.0
    assert lr_multiplier_for(cfg, 30518) == pytest.approx(1.0)  # decay starts at exactly 1
    assert lr_multiplier_for(cfg, 38146) == pytest.approx(0.1 + 0.9 / 7629)  # ends near 0.1, not 0


@pytest.mark.parametrize("step,expected", [(0, 0.85), (50, 0.90), (100, 0.95), (20000, 0.95), (38047, 0.95),
                                           (38097, 0.90), (38146, 0.95 - 0.10 * 99 / 100)])
def test_muon_momentum_warmup_and_cooldown(step, expected):
    assert momentum_for(TrainConfig(), step) == pytest.approx(expected)
