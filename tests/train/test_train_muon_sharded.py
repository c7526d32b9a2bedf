"""Muon's orthogonalisations shared across 2 gloo ranks give the single-process result."""

import torch
from ranks import run_ranks
from train_tiny import tiny_model

from exoformer.model import ExoTransformer
from exoformer.train import optim
from exoformer.train.config import TrainConfig
from exoformer.train.optim import build_optimizers


POLAR_EXPRESS = optim.polar_express


def column_major(update: torch.Tensor) -> torch.Tensor:
    """The orthogonalisation with its values laid out column-major, as CUDA's addmm path returns it for a tall
    weight (the transpose of a contiguous wide result)."""
    return POLAR_EXPRESS(update).mT.contiguous().mT


def muon_steps(rank: int = 0, dtype: torch.dtype = torch.float32, *, orthogonalise=None) -> dict:
    """Two Muon steps on a tiny model with seeded gradients (the same on every rank, as after all-reduce)."""
    calls = []
    real = orthogonalise or POLAR_EXPRESS
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
    optim.polar_express = POLAR_EXPRESS
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


def muon_steps_column_major(rank: int) -> dict:
    return muon_steps(rank, orthogonalise=column_major)


def test_a_column_major_orthogonalisation_is_broadcast_as_its_values():
    """broadcast sends a tensor's storage as laid out: an owner's column-major result must be made contiguous
    first, or the other rank receives it transposed."""
    reference = muon_steps()
    for result in run_ranks(muon_steps_column_major, 2):
        assert isinstance(result, dict), result
        for ours, theirs in zip(result["params"], reference["params"]):
            torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-6)
