"""Muon's orthogonalisations shared across 2 gloo ranks give the single-process result."""

import torch
from ranks import run_ranks
from train_tiny import tiny_model

from exoformer.model import ExoTransformer
from exoformer.train import optim
from exoformer.train.config import TrainConfig
from exoformer.train.optim import build_optimizers


def muon_steps(rank: int = 0, dtype: torch.dtype = torch.float32) -> dict:
    """Two Muon steps on a tiny model with seeded gradients (the same on every rank, as after all-reduce)."""
    calls = []
    real = optim.polar_express
    optim.polar_express = lambda update: calls.append(1) or real(update)
    torch.manual_seed(0)
    model = ExoTransformer(tiny_model()).to(dtype)
    muon, _ = build_optimizers(model, TrainConfig())
    params = muon.param_groups[0]["params"]
    g = torch.Generator().manual_seed(1)
    for _ in range(2):
        for p in params:
            p.grad = torch.randn(p.shape, generator=g).to(dtype)
        muon.step()
    optim.polar_express = real
    return {"orthogonalised": len(calls), "params": [p.detach().clone() for p in params],
            "state": [{k: v.clone() for k, v in muon.state[p].items()} for p in params]}


DTYPES = (torch.float32, torch.bfloat16)


def muon_steps_per_dtype(rank: int) -> dict:
    return {dtype: muon_steps(rank, dtype) for dtype in DTYPES}


def test_two_ranks_sharing_muon_equal_the_replicated_update():
    results = run_ranks(muon_steps_per_dtype, 2)
    assert all(isinstance(result, dict) for result in results), results
    for dtype in DTYPES:
        reference = muon_steps(dtype=dtype)
        assert len(reference["params"]) > 2  # several parameters, so both ranks own some
        counts = [result[dtype]["orthogonalised"] for result in results]  # each rank does its half of the work
        assert sum(counts) == reference["orthogonalised"] and max(counts) - min(counts) <= 2, counts
        for result in results:
            for ours, theirs in zip(result[dtype]["params"], reference["params"]):
                torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-6)
            for ours, theirs in zip(result[dtype]["state"], reference["state"]):
                for key in theirs:
                    assert ours[key].dtype == theirs[key].dtype
                    torch.testing.assert_close(ours[key], theirs[key], rtol=0, atol=1e-6)
