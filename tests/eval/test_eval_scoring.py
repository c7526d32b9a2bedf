"""Lean continuation scoring (LM head only at scored positions) against the full-logits path it replaces."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from lm_eval.api.instance import Instance

from exoformer.eval.lm import ExoLM
from exoformer.eval.scoring import continuation_logprobs
from exoformer.model import ExoTransformer, variant_config

sys.path.insert(0, str(Path(__file__).parent))
from eval_fakes import CharTokenizer  # noqa: E402

torch.set_num_threads(1)


def perturbed_model(seed: int = 0, **overrides) -> ExoTransformer:
    torch.manual_seed(seed)
    model = ExoTransformer(variant_config("dynamic-e-exoformer", shape="tiny", **{"seq_len": 32, **overrides}))
    with torch.no_grad():  # the head is zero-initialised: perturb so that log-probs differ between tokens
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return model


def token_requests(n: int, seq_len: int, vocab: int, seed: int = 0) -> list[tuple]:
    """Mixed lengths: short, exactly seq_len + 1 tokens, longer (left-truncated), long continuations."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        ctx_len = [1, 3, seq_len - 4, seq_len, 2 * seq_len][i % 5]
        cont_len = [1, 2, 5, seq_len][i % 4] if ctx_len != seq_len else 1
        tokens = torch.randint(1, vocab, (ctx_len + cont_len,), generator=g).tolist()
        out.append((None, tokens[:ctx_len], tokens[ctx_len:]))
    return out


def test_chunked_logprobs_equal_a_float64_reference_for_any_chunk_size():
    torch.manual_seed(0)
    hidden, head = torch.randn(37, 16), torch.nn.Linear(16, 50, bias=False)
    targets = torch.randint(0, 50, (37,))
    with torch.no_grad():
        targets[::2] = head(hidden[::2]).argmax(-1)  # half the targets are the greedy token
        full = head(hidden).double().log_softmax(-1)
        want = full.gather(-1, targets[:, None])[:, 0]
        want_greedy = full.argmax(-1) == targets
        for chunk in (1, 50, 3 * 50 + 7, 10**9):  # one row at a time, exact rows, ragged, all at once
            got, greedy = continuation_logprobs(hidden, targets, 50, to_logits=head, chunk_elements=chunk)
            assert got.dtype == torch.float64 and got.shape == (37,)
            assert torch.allclose(got, want, atol=1e-5, rtol=0)
            assert torch.equal(greedy, want_greedy)
        from_logits, _ = continuation_logprobs(head(hidden), targets, 50, chunk_elements=100)
    assert torch.allclose(from_logits, want, atol=1e-5, rtol=0)
    assert want_greedy.any() and not want_greedy.all()  # the greedy comparison is exercised both ways
    with pytest.raises(ValueError, match="rows for"):
        continuation_logprobs(hidden, targets[:3], 50)


@pytest.mark.parametrize("batch_size", [1, 4, 64])
def test_lean_loglikelihoods_equal_the_full_logits_path(batch_size):
    model = perturbed_model(vocab_size=256)
    requests = token_requests(23, 32, 256)
    lean = ExoLM(model, CharTokenizer(), batch_size=batch_size)
    full = ExoLM(model, CharTokenizer(), batch_size=batch_size, full_logits=True)
    assert lean.lean and not full.lean
    got = lean._loglikelihood_tokens(requests, disable_tqdm=True)
    want = full._loglikelihood_tokens(requests, disable_tqdm=True)
    assert [g for _, g in got] == [w for _, w in want]
    assert [ll for ll, _ in got] == pytest.approx([ll for ll, _ in want], abs=1e-5, rel=0)
    assert len({round(ll, 3) for ll, _ in got}) > len(got) // 2  # real, varied scores


def test_lean_path_runs_the_head_only_on_scored_rows_and_never_the_full_forward(monkeypatch):
    model = perturbed_model(vocab_size=256)
    requests = token_requests(10, 32, 256, seed=1)
    head_rows = []
    model.lm_head.register_forward_hook(lambda module, args, out: head_rows.append(args[0].shape))

    def no_full_forward(*args, **kwargs):
        raise AssertionError("the lean path called forward(), which builds (B, T, V) logits")

    monkeypatch.setattr(model, "forward", no_full_forward)
    ExoLM(model, CharTokenizer(), batch_size=4)._loglikelihood_tokens(requests, disable_tqdm=True)
    assert all(len(shape) == 2 for shape in head_rows)  # (rows, d): no sequence dimension
    assert sum(shape[0] for shape in head_rows) == sum(len(cont) for _, _, cont in requests)


def test_lean_greedy_generation_equals_the_full_logits_path():
    model = perturbed_model(vocab_size=128)
    reqs = [Instance(request_type="generate_until", doc={}, arguments=(ctx, {"until": ["~"], "max_gen_toks": 6}),
                     idx=0) for ctx in ("abc", "hello there", "")]
    lean = ExoLM(model, CharTokenizer(), batch_size=2).generate_until(reqs, disable_tqdm=True)
    full = ExoLM(model, CharTokenizer(), batch_size=2, full_logits=True).generate_until(reqs, disable_tqdm=True)
    assert lean == full and any(lean)


def test_bf16_scoring_takes_the_log_softmax_on_bf16_logits_as_the_author():
    """The bf16 log-softmax of the author's run (CUDA: x - max - log(sum(exp(x - max))) in fp32, rounded once to
    bf16) on every device: within one bf16 step of the exact value and mostly equal to its rounding, with each
    row's values independent of the other rows in the batch."""
    from exoformer.eval.scoring import bf16_log_softmax

    torch.manual_seed(0)
    logits = (torch.randn(300, 500) * 4).to(torch.bfloat16)
    targets = torch.randint(0, 500, (300,))
    got, _ = continuation_logprobs(logits, targets, 500, precision="bf16")
    full = bf16_log_softmax(logits)
    assert full.dtype == torch.bfloat16
    assert torch.equal(got, full.gather(-1, targets[:, None])[:, 0].double())
    exact = torch.log_softmax(logits.double(), -1)
    assert (full != exact.to(torch.bfloat16)).float().mean() < 1e-3
    assert ((full.double() - exact).abs() <= exact.abs() * 2.0 ** -8).all()
    assert all(torch.equal(bf16_log_softmax(logits[i:i + 1])[0], full[i]) for i in range(0, 300, 37))
    fp32, _ = continuation_logprobs(logits, targets, 500, precision="fp32")
    assert not torch.equal(got, fp32)
    assert torch.allclose(fp32, exact.gather(-1, targets[:, None])[:, 0], atol=1e-5)


def author_loglikelihood(model: ExoTransformer, context: list[int], continuation: list[int]) -> tuple[float, bool]:
    """run_eval.py's loglikelihood for one request (docs/official_code.md section 5), on a bf16-weight model:
    one sequence, no autocast, log_softmax of the bf16 logits as CUDA's kernel computes it, the continuation's
    bf16 log-probs summed as a bf16 tensor (left truncation to the context length as ours)."""
    tokens = (context + continuation)[-(model.config.seq_len + 1):]
    n = len(continuation)
    with torch.no_grad():
        logits = model(torch.tensor([tokens[:-1]]))[0]
    assert logits.dtype == torch.bfloat16
    lf = logits.float()  # the CUDA kernel's arithmetic for a bf16 input: fp32 inside, one rounding
    top = lf.max(dim=-1, keepdim=True).values
    logp = (lf - top - torch.log(torch.exp(lf - top).sum(dim=-1, keepdim=True))).to(torch.bfloat16)[-n:]
    picked = logp.gather(-1, torch.tensor(continuation)[:, None])[:, 0]
    return float(picked.sum()), bool((logp.argmax(-1) == torch.tensor(continuation)).all())


@pytest.mark.parametrize("full_logits", [False, True])
def test_bf16_scoring_at_batch_one_is_the_authors_loglikelihood_bit_for_bit(full_logits):
    from exoformer.eval.scoring import scoring_model

    model = scoring_model(perturbed_model(vocab_size=256).eval(), "bf16")
    requests = token_requests(23, 32, 256, seed=3)
    got = ExoLM(model, CharTokenizer(), batch_size=1, full_logits=full_logits,
                precision="bf16")._loglikelihood_tokens(requests, disable_tqdm=True)
    want = [author_loglikelihood(model, ctx, cont) for _, ctx, cont in requests]
    assert got == want
    assert all(float(torch.tensor(ll).to(torch.bfloat16)) == ll for ll, _ in got)  # each a bf16 value


def test_bf16_scoring_runs_without_autocast():
    from exoformer.eval.scoring import scoring_model

    model = scoring_model(perturbed_model(vocab_size=256).eval(), "bf16")
    seen = []
    model.lm_head.register_forward_hook(lambda *_: seen.append(torch.is_autocast_enabled("cpu")))
    ExoLM(model, CharTokenizer(), batch_size=4, precision="bf16")._loglikelihood_tokens(
        token_requests(6, 32, 256), disable_tqdm=True)
    assert seen and not any(seen)


def test_bf16_sum_accumulates_in_fp32_and_rounds_once():
    from exoformer.eval.scoring import bf16_sum

    torch.manual_seed(4)
    for n in (1, 3, 17, 200):
        values = torch.log_softmax(torch.randn(n, 64) * 3, -1)[:, 0].to(torch.bfloat16)
        assert bf16_sum(values.tolist()) == float(values.sum())  # torch's bf16 reduction: fp32 accumulator
    assert bf16_sum([]) == 0.0


def test_the_paper_presets_score_every_request_as_the_authors_batch_one():
    """Batched bf16 scoring is not batch 1: right padding and other matmul shapes move a few bf16 sums by a
    step (benchmarks/bench_bf16_batching.py). The paper presets' batch size must give the author's numbers."""
    from exoformer.eval.scoring import scoring_model
    from exoformer.registry.registry import Registry

    registry = Registry()
    sizes = {preset: registry.resolve("base-s42", preset=preset).eval.batch_size for preset in ("450m", "1b")}
    assert sizes == {"450m": 1, "1b": 1}
    model = scoring_model(perturbed_model(vocab_size=256, seq_len=64).eval(), "bf16")
    requests = token_requests(40, 64, 256, seed=5)
    got = ExoLM(model, CharTokenizer(), batch_size=sizes["450m"],
                precision="bf16")._loglikelihood_tokens(requests, disable_tqdm=True)
    assert got == [author_loglikelihood(model, ctx, cont) for _, ctx, cont in requests]
