"""ExoLM against direct, unbatched computations with the same model (docs/ecosystem.md A1: how adapters go wrong)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from lm_eval.api.instance import Instance

from exoformer.errors import UserError
from exoformer.eval.lm import ExoLM

sys.path.insert(0, str(Path(__file__).parent))
from eval_fakes import CharTokenizer, SuccessorLM, TinyCausalLM  # noqa: E402

torch.set_num_threads(1)


def instances(kind: str, args: list[tuple]) -> list[Instance]:
    return [Instance(request_type=kind, doc={}, arguments=a, idx=0) for a in args]


def split_like_lm_eval(tok, context: str, continuation: str) -> tuple[list[int], list[int]]:
    """The documented contract: empty context -> EOT; trailing context spaces move to the continuation;
    encode context+continuation together and split at len(encode(context))."""
    if context == "":
        return [tok.eot_token_id], tok.encode(continuation)
    spaces = len(context) - len(context.rstrip())
    if spaces:
        context, continuation = context[:-spaces], context[-spaces:] + continuation
    whole, ctx = tok.encode(context + continuation), tok.encode(context)
    return ctx, whole[len(ctx):]


def direct_loglikelihood(model, tok, context: str, continuation: str, seq_len: int) -> tuple[float, bool]:
    """One request, one forward, no padding, float64 log-softmax."""
    ctx, cont = split_like_lm_eval(tok, context, continuation)
    seq = (ctx + cont)[-(seq_len + 1):]
    with torch.no_grad():
        logp = model(torch.tensor([seq[:-1]]))[0].double().log_softmax(-1)
    positions = range(len(seq) - 1 - len(cont), len(seq) - 1)
    total = sum(float(logp[p, seq[p + 1]]) for p in positions)
    greedy = all(int(logp[p].argmax()) == seq[p + 1] for p in positions)
    return total, greedy


MIXED_REQUESTS = [
    ("Question: which is heavy?\nAnswer:", " stone"),
    ("", "abc"),                                   # empty context: EOT is the context
    ("Answer: ", "no"),                            # trailing space moves into the continuation
    ("x" * 40 + " long context", " is truncated"),  # longer than seq_len: left-truncated
    ("a", " b"),
    ("Question: which is heavy?\nAnswer:", " feather"),
    ("", "q" * 16),                                # EOT + 16 tokens: exactly seq_len + 1
    ("short", " longer one"),
]


@pytest.mark.parametrize("batch_size", [1, 3, 32])
def test_loglikelihood_equals_direct_unbatched_computation_in_request_order(batch_size):
    model, tok = TinyCausalLM(seq_len=16), CharTokenizer()
    lm = ExoLM(model, tok, batch_size=batch_size)
    got = lm.loglikelihood(instances("loglikelihood", MIXED_REQUESTS), disable_tqdm=True)
    want = [direct_loglikelihood(model, tok, c, x, 16) for c, x in MIXED_REQUESTS]
    assert len(got) == len(want)
    for (g_ll, g_greedy), (w_ll, w_greedy) in zip(got, want, strict=True):
        assert isinstance(g_ll, float) and isinstance(g_greedy, bool)
        assert g_ll == pytest.approx(w_ll, abs=1e-4)
        assert g_greedy == w_greedy
    # the two spellings of the same split score the same tokens
    assert got[2][0] == pytest.approx(lm.loglikelihood(instances("loglikelihood", [("Answer:", " no")]),
                                                       disable_tqdm=True)[0][0], abs=1e-6)


def test_loglikelihood_is_deterministic_and_batch_size_invariant():
    model, tok = TinyCausalLM(seq_len=16, seed=3), CharTokenizer()
    reqs = instances("loglikelihood", MIXED_REQUESTS * 3)
    a = ExoLM(model, tok, batch_size=5).loglikelihood(reqs, disable_tqdm=True)
    b = ExoLM(model, tok, batch_size=5).loglikelihood(reqs, disable_tqdm=True)
    c = ExoLM(model, tok, batch_size=1).loglikelihood(reqs, disable_tqdm=True)
    assert a == b
    assert [x[0] for x in a] == pytest.approx([x[0] for x in c], abs=1e-4)


def test_greedy_flag_is_true_exactly_for_the_models_own_continuation():
    tok = CharTokenizer()
    lm = ExoLM(SuccessorLM(), tok)  # predicts the next character in code-point order
    got = lm.loglikelihood(instances("loglikelihood", [("ab", "cde"), ("ab", "cdf"), ("", " !"), ("", " #")]),
                           disable_tqdm=True)  # " " is id 1, the successor of EOT (id 0)
    assert [g for _, g in got] == [True, False, True, False]
    assert got[0][0] > got[1][0]


def test_exoformer_scores_equal_direct_computation_with_gpt2_tokens():
    from exoformer.data.tokenizer import gpt2
    from exoformer.model import ExoTransformer, variant_config

    torch.manual_seed(0)
    model = ExoTransformer(variant_config("dynamic-e-exoformer", shape="tiny", vocab_size=50257, seq_len=24))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))  # random logits, not a flat initial distribution
    tok = gpt2()
    reqs = [("The capital of France is", " Paris"), ("", "Hello world"), ("Answer: ", "yes, of course"),
            ("One two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
             "seventeen eighteen nineteen twenty", " twenty-one"), ("Hello", " world")]
    got = ExoLM(model, tok, batch_size=2).loglikelihood(instances("loglikelihood", reqs), disable_tqdm=True)
    want = [direct_loglikelihood(model, tok, c, x, 24) for c, x in reqs]
    assert [g for _, g in got] == [w for _, w in want]
    assert [g for g, _ in got] == pytest.approx([w for w, _ in want], abs=1e-4)
    assert len({round(g, 3) for g, _ in got}) == len(got)  # the scores really differ


def test_continuation_longer_than_the_context_window_is_refused():
    lm = ExoLM(TinyCausalLM(seq_len=8), CharTokenizer())
    with pytest.raises(ValueError, match="cannot be scored"):
        lm.loglikelihood(instances("loglikelihood", [("a", "b" * 9)]), disable_tqdm=True)


def test_rolling_uses_lm_evals_disjoint_windows():
    """The worked example of LM.loglikelihood_rolling: 10 tokens, context 4 -> windows
    [EOT 0 1 2]->[0 1 2 3], [3 4 5 6]->[4 5 6 7], [5 6 7 8]->[8 9]; plus a short string in one window."""
    model, tok = TinyCausalLM(seq_len=4, seed=1), CharTokenizer()
    text = "ABCDEFGHIJ"
    t = tok.encode(text)
    eot = tok.eot_token_id
    windows = [([eot, t[0], t[1], t[2]], 0), ([t[3], t[4], t[5], t[6]], 0), ([t[5], t[6], t[7], t[8]], 2)]
    preds = [t[0:4], t[4:8], t[8:10]]
    want = 0.0
    with torch.no_grad():
        for (inp, first), pred in zip(windows, preds, strict=True):
            logp = model(torch.tensor([inp]))[0].double().log_softmax(-1)
            want += sum(float(logp[first + i, tok_id]) for i, tok_id in enumerate(pred))
    short = "xyz"
    with torch.no_grad():
        s = tok.encode(short)
        logp = model(torch.tensor([[eot] + s[:-1]]))[0].double().log_softmax(-1)
        want_short = sum(float(logp[i, s[i]]) for i in range(len(s)))
    got = ExoLM(model, tok, batch_size=2).loglikelihood_rolling(
        instances("loglikelihood_rolling", [(text,), (short,), ("",)]), disable_tqdm=True)
    assert got == pytest.approx([want, want_short, 0.0], abs=1e-4)


def test_generate_until_is_greedy_and_stops_at_until_max_tokens_and_eot():
    tok = CharTokenizer()
    model = SuccessorLM()
    lm = ExoLM(model, tok)
    reqs = instances("generate_until", [("a", {"until": ["e"], "max_gen_toks": 50}),
                                        ("a", {"until": "d", "max_gen_toks": 50}),
                                        ("a", {"until": ["zz"], "max_gen_toks": 3}),
                                        ("k", {"until": ["\n\n"], "do_sample": False})])
    up_to_eot = "".join(chr(i + 31) for i in range(tok.encode("l")[0], 100))  # id 99 is followed by EOT (0)
    assert lm.generate_until(reqs, disable_tqdm=True) == ["bcd", "bc", "bcd", up_to_eot]
    stops_at_eot = ExoLM(SuccessorLM(eot_after=tok.encode("c")[0]), tok)
    assert stops_at_eot.generate_until(instances("generate_until", [("a", {"until": ["q"]})]),
                                       disable_tqdm=True) == ["bc"]
    with pytest.raises(ValueError, match="greedy only"):
        lm.generate_until(instances("generate_until", [("a", {"do_sample": True})]), disable_tqdm=True)


def test_model_runs_in_eval_mode_without_grad_and_its_mode_is_restored():
    seen = []

    class Probe(TinyCausalLM):
        def forward(self, idx, doc_starts=None):
            seen.append((self.training, torch.is_grad_enabled()))
            return super().forward(idx)

    model = Probe(seq_len=16)
    model.train()
    ExoLM(model, CharTokenizer()).loglikelihood(instances("loglikelihood", [("a", " b")]), disable_tqdm=True)
    assert seen == [(False, False)]
    assert model.training


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_bad_batch_size_is_a_user_error(bad):
    with pytest.raises(UserError, match="batch size"):
        ExoLM(TinyCausalLM(), CharTokenizer(), batch_size=bad)


def test_tokenizer_larger_than_the_models_vocabulary_is_a_user_error():
    with pytest.raises(UserError, match="for_data"):
        ExoLM(TinyCausalLM(vocab_size=50), CharTokenizer())  # 100 character ids, 50 rows
