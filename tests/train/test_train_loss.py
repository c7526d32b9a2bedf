import torch
import torch.nn.functional as F

from exoformer.train.loss import lm_loss, official_logged_loss


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
