"""Sampling pass: op counts before/after per spelling, parameters read from the graph, skip cases, misses."""

from __future__ import annotations

import pytest
import sampling_spellings as sp
import torch
from graph_utils import compile_run

from rocm_inductor.providers.reference import ReferenceProvider

SAMPLE = "rocm_fused.sample.default"


@pytest.fixture
def calls(monkeypatch):
    """Record the arguments every reference ``sample`` call receives (what the pass baked in)."""
    seen: list[dict] = []
    orig = ReferenceProvider.sample

    def rec(self, scores, seed, temperature, temperature_value, top_k, top_k_value, top_p, top_p_value,
            min_p, min_p_value, ban, is_probs, top_k_first):
        seen.append(dict(shape=tuple(scores.shape), temperature=temperature, t=temperature_value,
                         k=top_k_value, p=top_p_value, ban=ban, is_probs=is_probs, top_k_first=top_k_first))
        return orig(self, scores, seed, temperature, temperature_value, top_k, top_k_value, top_p, top_p_value,
                    min_p, min_p_value, ban, is_probs, top_k_first)

    monkeypatch.setattr(ReferenceProvider, "sample", rec)
    return seen


LOGITS = torch.randn(3, 2, 40, generator=torch.Generator().manual_seed(0))

# name, sampler, expected baked parameters
CASES = [
    ("hf_top_k", sp.hf_sampler(top_k=5), dict(t=1.0, k=5, p=1.0, top_k_first=True)),
    ("hf_top_p", sp.hf_sampler(top_p=0.9), dict(t=1.0, k=0, p=pytest.approx(0.9, abs=1e-15))),
    ("hf_both_T", sp.hf_sampler(0.7, 5, 0.9), dict(t=0.7, k=5, p=pytest.approx(0.9, abs=1e-15),
                                                  top_k_first=True)),
    ("hf_top_p_first", sp.hf_sampler(1.3, 7, 0.8, top_p_first=True), dict(t=1.3, k=7, top_k_first=False)),
    ("hf_plain", sp.hf_sampler(), dict(t=1.0, k=0, p=1.0)),
    ("gpt_fast_top_k", sp.gpt_fast_sampler(0.8, 5), dict(t=0.8, k=5, p=1.0)),
    ("gpt_fast_no_top_k", sp.gpt_fast_sampler(0.8, None), dict(t=0.8, k=0, p=1.0)),
    ("gpt_fast_top_k_ge_vocab", sp.gpt_fast_sampler(0.8, 500), dict(t=0.8, k=40)),
]


@pytest.mark.parametrize("name,fn,expect", CASES, ids=[c[0] for c in CASES])
def test_chain_becomes_one_op(name, fn, expect, calls):
    out, seen = compile_run(fn, LOGITS)
    before, after = seen[-1].before, seen[-1].after
    assert after[SAMPLE] == 1
    # Everything of the chain is gone: no sort/cumsum/topk/softmax/random draw left.
    for op in ("aten.sort.default", "aten.cumsum.default", "aten.topk.default", "aten.multinomial.default",
               "aten.exp.default", "prims.inductor_random.default", "aten.argmax.default"):
        assert after[op] == 0, (op, dict(after))
    assert before["aten.multinomial.default"] + before["aten.argmax.default"] == 1
    assert seen[-1].report.count("sample") == 1 and not seen[-1].report.near_misses
    assert len(calls) == 1
    for key, val in expect.items():
        assert calls[0][key] == val, (key, calls[0])
    assert calls[0]["is_probs"] is False and calls[0]["shape"] == (3, 40)
    assert out.shape[0] == 3 and int(out.min()) >= 0 and int(out.max()) < 40


def test_eos_floor_becomes_ban_mask(calls):
    fn = sp.hf_sampler(0.7, 5, 0.9, eos=[3, 7])
    logits = torch.zeros(3, 1, 10)
    logits[..., 3] = logits[..., 7] = 10.0  # EOS would win every draw without the floor
    out, seen = compile_run(fn, logits)
    assert seen[-1].after[SAMPLE] == 1 and seen[-1].after["aten.where.self"] == 0
    ban = calls[0]["ban"]
    assert ban is not None and ban.dtype == torch.bool and ban.reshape(-1).nonzero().flatten().tolist() == [3, 7]
    assert not set(out.tolist()) & {3, 7}


def test_per_row_temperature_tensor(calls):
    fn = sp.per_row_temperature_sampler(top_k=5)
    temps = torch.tensor([0.5, 1.0, 2.0])
    out, seen = compile_run(fn, LOGITS[:, 0], temps)
    assert seen[-1].after[SAMPLE] == 1 and seen[-1].after["aten.div.Tensor"] == 0
    assert calls[0]["temperature"] is not None and calls[0]["temperature"].reshape(-1).tolist() == [0.5, 1.0, 2.0]
    assert calls[0]["k"] == 5 and out.shape == (3, 1)


def test_greedy_argmax_left_alone():
    out, seen = compile_run(sp.greedy, LOGITS)
    assert seen[-1].after[SAMPLE] == 0 and seen[-1].after["aten.argmax.default"] == 1
    assert torch.equal(out, LOGITS[:, -1].argmax(-1))


def test_min_tokens_to_keep_2_is_a_near_miss(calls):
    """A top-p we can't prove equal stays in Inductor (with everything above it); the draw is still ours."""
    out, seen = compile_run(sp.hf_sampler(0.7, 5, 0.9, min_tokens_to_keep=2), LOGITS)
    after = seen[-1].after
    assert after[SAMPLE] == 1 and after["aten.sort.default"] == 1 and after["aten.topk.default"] == 1
    misses = seen[-1].report.near_misses
    assert len(misses) == 1 and "min_tokens_to_keep = 2" in misses[0].reason
    assert calls[0]["k"] == 0 and calls[0]["p"] == 1.0 and calls[0]["t"] == 1.0


def test_bare_multinomial_of_probs():
    def fn(p):
        return torch.multinomial(p / p.sum(-1, keepdim=True), 1)

    probs = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 2.0]])
    out, seen = compile_run(fn, probs)
    assert seen[-1].after[SAMPLE] == 1
    assert out.flatten().tolist() == [1, 2]


def test_two_samples_left_alone():
    def fn(x):
        return torch.multinomial(torch.softmax(x, -1), 2)

    out, seen = compile_run(fn, LOGITS[:, 0])
    assert seen[-1].after[SAMPLE] == 0 and seen[-1].after["aten.multinomial.default"] == 1


def test_dynamic_batch_compiles_and_samples():
    """The case that crashed Inductor on the H200 (torch 2.11 SplitScan): dynamic batch, HF top-k + top-p."""
    fn = sp.hf_sampler(0.7, 5, 0.9)
    out, seen = compile_run(fn, LOGITS, dynamic=True)
    assert any(c.after[SAMPLE] == 1 for c in seen)
    assert out.shape == (3,)


def test_default_cpu_policy_leaves_graph_alone():
    """No forced provider on CPU: the pass is off by default (Inductor's C++ code is right for CPU)."""
    out, seen = compile_run(sp.hf_sampler(0.7, 5, 0.9), LOGITS, options={"provider": None})
    assert all(c.after[SAMPLE] == 0 for c in seen)
