import pytest
import torch
import torch.nn.functional as F

from exoformer.train.loss import chunked_lm_loss, lm_loss, official_logged_loss


def test_z_loss_counted_once_and_ce_matches_torch():
    torch.manual_seed(0)
    logits = torch.randn(2, 5, 11, requires_grad=True)
    targets = torch.randint(0, 11, (2, 5))
    loss, ce, z = lm_loss(logits, targets, 1e-2)
    expected_ce = F.cross_entropy(logits.reshape(-1, 11), targets.reshape(-1))
    expected_z = torch.logsumexp(logits, -1).square().mean()
    torch.testing.assert_close(ce, expected_ce.detach())
    torch.testing.assert_close(z, expected_z.detach())
    torch.testing.assert_close(loss, expected_ce + 1e-2 * expected_z)  # once, not twice
    loss.backward()
    reference = logits.detach().clone().requires_grad_()
    (F.cross_entropy(reference.reshape(-1, 11), targets.reshape(-1))
     + 1e-2 * torch.logsumexp(reference, -1).square().mean()).backward()
    torch.testing.assert_close(logits.grad, reference.grad)
    assert official_logged_loss(1.0, 3.0, 1e-2) == 1.0 + 2 * 1e-2 * 3.0


def test_loss_is_fp32_for_bf16_logits():
    logits = torch.randn(1, 4, 7).bfloat16()
    loss, ce, z = lm_loss(logits, torch.zeros(1, 4, dtype=torch.long), 1e-5)
    assert loss.dtype == ce.dtype == z.dtype == torch.float32


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_chunked_loss_equals_the_unchunked_loss_in_value_and_gradients(dtype):
    torch.manual_seed(0)
    hidden = torch.randn(3, 7, 16).to(dtype).requires_grad_()  # 21 tokens: chunks of 8, 8 and 5
    weight = (torch.randn(50, 16) * 0.3).to(dtype).requires_grad_()
    targets = torch.randint(0, 50, (3, 7))
    loss, ce, z = chunked_lm_loss(hidden, weight, targets, 1e-2, chunk_tokens=8)
    loss.backward()
    ref_hidden, ref_weight = hidden.detach().clone().requires_grad_(), weight.detach().clone().requires_grad_()
    ref_loss, ref_ce, ref_z = lm_loss(ref_hidden @ ref_weight.T, targets, 1e-2)
    ref_loss.backward()
    assert loss.dtype == torch.float32 and hidden.grad.dtype == dtype
    tight = dict(rtol=1e-6, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-2, atol=1e-3)
    for ours, theirs in ((loss, ref_loss), (ce, ref_ce), (z, ref_z)):
        torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(hidden.grad, ref_hidden.grad, **tight)
    torch.testing.assert_close(weight.grad, ref_weight.grad, **tight)


def test_chunked_loss_without_gradients_equals_the_unchunked_loss():
    torch.manual_seed(1)
    hidden, weight, targets = torch.randn(2, 9, 8), torch.randn(30, 8), torch.randint(0, 30, (2, 9))
    with torch.no_grad():
        ours = chunked_lm_loss(hidden, weight, targets, 1e-4, chunk_tokens=4)
        theirs = lm_loss(hidden @ weight.T, targets, 1e-4)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("tokens, recomputed", [(16, False), (17, True)])
def test_only_a_loss_of_several_chunks_is_recomputed_in_the_backward(monkeypatch, tokens, recomputed):
    """One chunk's logits are alive at the backward's start either way; recomputing them would only cost time."""
    import exoformer.train.loss as loss_module

    calls = []
    real = loss_module.checkpoint
    monkeypatch.setattr(loss_module, "checkpoint", lambda *a, **k: calls.append(1) or real(*a, **k))
    torch.manual_seed(2)
    hidden = torch.randn(1, tokens, 8, requires_grad=True)
    weight = torch.randn(30, 8, requires_grad=True)
    targets = torch.randint(0, 30, (1, tokens))
    loss, _, _ = chunked_lm_loss(hidden, weight, targets, 1e-2, chunk_tokens=16)
    loss.backward()
    assert bool(calls) is recomputed
    ref_hidden, ref_weight = hidden.detach().clone().requires_grad_(), weight.detach().clone().requires_grad_()
    ref_loss, _, _ = lm_loss(ref_hidden @ ref_weight.T, targets, 1e-2)
    ref_loss.backward()
    torch.testing.assert_close(loss, ref_loss, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(hidden.grad, ref_hidden.grad, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(weight.grad, ref_weight.grad, rtol=1e-6, atol=1e-6)
