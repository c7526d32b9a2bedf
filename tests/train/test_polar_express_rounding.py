"""Polar Express under official-pure-bf16 rounds as the author's Triton kernels (docs/official_code.md 4.3).

The transcription below is written from that description, not from exoformer/train/optim.py: per iteration
A = XX^T (the XX^T kernel: fp32 accumulation, one rounding to bf16), B = bA + cA^2 (the fused kernel: fp32
accumulation from the bf16 A, one rounding), X = aX + BX (addmm: fp32 accumulation, one rounding).
"""

import pytest
import torch

from exoformer.train.optim import POLAR_EXPRESS_COEFFICIENTS, polar_express, polar_express_step_bf16

BF16 = torch.bfloat16


def to_bf16(t: torch.Tensor) -> torch.Tensor:
    return t.to(BF16)


def author_step(x: torch.Tensor, a: float, b: float, c: float) -> torch.Tensor:
    """One fused iteration on bf16 X, each kernel's output rounded once (products of bf16 values in fp32)."""
    xf = x.float()
    gram = to_bf16(torch.matmul(xf, xf.transpose(0, 1)))
    gf = gram.float()
    poly = to_bf16(c * torch.matmul(gf, gf) + b * gf)
    return to_bf16(torch.matmul(poly.float(), xf) + a * xf)


def author_polar_express(update: torch.Tensor) -> torch.Tensor:
    """The whole orthogonalisation: wide orientation, X = U / (1.02 ||U||_F + 1e-6), five fused iterations."""
    u = update.float()
    tall = u.shape[0] > u.shape[1]
    if tall:
        u = u.transpose(0, 1)
    x = to_bf16(u / (torch.linalg.vector_norm(u) * 1.02 + 1e-6))
    for a, b, c in POLAR_EXPRESS_COEFFICIENTS:
        x = author_step(x, a, b, c)
    return x.transpose(0, 1) if tall else x


def per_op_rounding(update: torch.Tensor) -> torch.Tensor:
    """Rounding after every bf16 op (what the iteration did before), for the size of the difference."""
    x = update.to(BF16)
    tall = x.shape[0] > x.shape[1]
    if tall:
        x = x.mT
    x = x / (x.norm() * 1.02 + 1e-6)
    for a, b, c in POLAR_EXPRESS_COEFFICIENTS:
        gram = x @ x.mT
        x = a * x + (b * gram + c * (gram @ gram)) @ x
    return x.mT if tall else x


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm())


@pytest.mark.parametrize("shape", [(48, 96), (96, 40)])
def test_one_iteration_rounds_as_the_fused_kernels(shape):
    torch.manual_seed(0)
    u = torch.randn(*shape)
    x = to_bf16(u / (u.norm() * 1.02)) if shape[0] <= shape[1] else to_bf16((u / (u.norm() * 1.02)).mT)
    for a, b, c in POLAR_EXPRESS_COEFFICIENTS:
        got, want = polar_express_step_bf16(x, a, b, c), author_step(x, a, b, c)
        assert got.dtype == BF16 and torch.equal(got, want)  # on the CPU the same fp32 sums: bitwise
        x = want


@pytest.mark.parametrize("shape", [(64, 160), (192, 64), (128, 128)])
def test_bf16_orthogonalisation_equals_the_transcription_and_not_per_op_rounding(shape):
    torch.manual_seed(1)
    update = torch.randn(*shape).to(BF16)  # an official-pure-bf16 Muon update
    got = polar_express(update)
    want = author_polar_express(update)
    assert got.dtype == BF16 and got.shape == update.shape
    assert torch.equal(got, want)
    assert rel(per_op_rounding(update), want) > 0.01  # rounding after every op is ~2-5% away (module docstring)
    assert rel(polar_express(update.float()), want) > 0.005  # and the fp32 iteration ~1%


def test_fp32_path_is_the_plain_fp32_iteration():
    """fp32 weights: the textbook iteration in fp32 (scalars folded into the GEMMs, so equal up to fp32 rounding),
    never the bf16 rounding of the official kernels (about 1% away)."""
    torch.manual_seed(2)
    update = torch.randn(80, 48)
    x = update.mT / (update.norm() * 1.02 + 1e-6)
    for a, b, c in POLAR_EXPRESS_COEFFICIENTS:
        gram = x @ x.mT
        x = a * x + (b * gram + c * (gram @ gram)) @ x
    got = polar_express(update)
    assert got.dtype == torch.float32 and got.shape == update.shape
    assert rel(got, x.mT) < 1e-5
    assert rel(author_polar_express(update).float(), x.mT) > 1e-3
