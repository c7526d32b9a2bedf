"""The FlexAttention guard (CUDA only in real use), exercised on CPU with a stand-in kernel."""

import torch

from exoformer.model import attention


def _inputs():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 12, 8, generator=g) for _ in range(3))
    starts = torch.zeros(1, 12, dtype=torch.bool)
    starts[0, 0] = starts[0, 5] = True
    return q, k, v, starts


def _masked(monkeypatch, kernel):
    q, k, v, starts = _inputs()
    monkeypatch.setattr(attention, "_FLEX", {"ok": True, "attend": kernel})
    mask = attention.build_mask(starts, 12, torch.device("cpu"))
    mask.block, mask.dense = object(), None  # pretend CUDA built a block mask
    return q, k, v, mask


def test_wrong_flex_kernel_is_caught_and_disabled(monkeypatch):
    calls = []

    def broken(q, k, v, block_mask):
        calls.append(1)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)  # ignores documents

    q, k, v, mask = _masked(monkeypatch, broken)
    dense = attention.AttentionMask(doc_ids=mask.doc_ids).dense_mask(12, q.device)
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=dense)
    torch.testing.assert_close(attention.attend(q, k, v, mask), expected)
    torch.testing.assert_close(attention.attend(q, k, v, mask), expected)  # later layers: SDPA, no retry
    assert calls == [1] and attention._FLEX["ok"] is False


def test_correct_flex_kernel_is_used_after_check(monkeypatch):
    calls = []

    def good(q, k, v, block_mask):
        calls.append(1)
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=dense)

    q, k, v, mask = _masked(monkeypatch, good)
    dense = attention.AttentionMask(doc_ids=mask.doc_ids).dense_mask(12, q.device)
    first, second = attention.attend(q, k, v, mask), attention.attend(q, k, v, mask)
    torch.testing.assert_close(first, second)
    assert calls == [1, 1] and attention._FLEX["verified"] is True
