"""``rocm_fused::sample`` by provider (reference, Triton under TRITON_INTERPRET=1): statistics and bad input.

Statistics, not values: chi-square of 20k draws (one launch of 20k identical rows) against the exact
filtered distribution computed in float64 (HF's rules, ``reference_sampling.exact_distribution``).
"""

from __future__ import annotations

import pytest
import torch
from sampling_checks import chi2_pvalue

from rocm_inductor.providers.reference_sampling import exact_distribution

PROVIDERS = ["reference", "triton"]
N_DRAWS = 20_000
V = 12


def sample(scores, seed=1234, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, ban=None, is_probs=False,
           top_k_first=True, provider="triton", t_rows=None, k_rows=None, p_rows=None, keepdim=False):
    seed_t = torch.tensor([seed], dtype=torch.int64)
    return torch.ops.rocm_fused.sample(scores, seed_t, t_rows, temperature, k_rows, top_k, p_rows, top_p, None,
                                       min_p, ban, is_probs, top_k_first, keepdim, provider)


LOGITS = torch.randn(V, generator=torch.Generator().manual_seed(7)) * 1.5


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("t,k,p,first", [(0.7, 6, 0.8, True), (1.3, 0, 0.9, True), (1.0, 4, 0.7, False)])
def test_chi_square_vs_exact_distribution(provider, t, k, p, first):
    if provider == "reference" and (t, k) != (0.7, 6):
        pytest.skip("the reference is HF's own code; one case checks the harness")
    x = LOGITS.expand(N_DRAWS if provider == "triton" else 4000, V).contiguous()
    tok = sample(x, temperature=t, top_k=k, top_p=p, top_k_first=first, provider=provider)
    exact = exact_distribution(LOGITS, t, k, p, top_k_first=first)
    assert chi2_pvalue(tok, exact) > 1e-4


def test_hf_order_and_top_p_first_differ():
    """The two orders give their own distributions, each matched by the kernel's draws."""
    x = LOGITS.expand(8000, V).contiguous()
    hf = exact_distribution(LOGITS, 2.0, 3, 0.6, top_k_first=True)
    pf = exact_distribution(LOGITS, 2.0, 3, 0.6, top_k_first=False)
    assert (hf > 0).sum() != (pf > 0).sum()
    t_hf = sample(x, temperature=2.0, top_k=3, top_p=0.6, top_k_first=True)
    t_pf = sample(x, temperature=2.0, top_k=3, top_p=0.6, top_k_first=False)
    assert chi2_pvalue(t_hf, hf) > 1e-4 and chi2_pvalue(t_pf, pf) > 1e-4


@pytest.mark.parametrize("provider", PROVIDERS)
def test_top_p_boundary_keeps_exactly_hf_set(provider):
    """probs [0.3, 0.1, 0.1, 0.5], p = 0.8: HF keeps tokens {0, 3}."""
    logits = torch.tensor([0.3, 0.1, 0.1, 0.5]).log()
    exact = exact_distribution(logits, 1.0, 0, 0.8)
    assert (exact > 0).nonzero().flatten().tolist() == [0, 3]
    tok = sample(logits.expand(2000, 4).contiguous(), top_p=0.8, provider=provider)
    assert set(tok.tolist()) == {0, 3}


@pytest.mark.parametrize("provider", PROVIDERS)
def test_top_k_1_is_argmax_and_ties_only_draw_maxima(provider):
    x = torch.tensor([[0.0, 3.0, 1.0, 3.0, -2.0], [5.0, 1.0, 1.0, 1.0, 1.0]]).repeat(500, 1)
    tok = sample(x, top_k=1, provider=provider).reshape(500, 2)
    assert set(tok[:, 0].tolist()) == {1, 3}  # both tied maxima, nothing else
    assert set(tok[:, 1].tolist()) == {0}


@pytest.mark.parametrize("provider", PROVIDERS)
def test_same_seed_same_tokens_other_seed_other_tokens(provider):
    x = torch.zeros(64, 50)
    a, b, c = (sample(x, seed=s, provider=provider) for s in (5, 5, 6))
    assert torch.equal(a, b) and not torch.equal(a, c)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_rows_draw_independent_streams(provider):
    tok = sample(torch.zeros(256, 50), provider=provider)
    assert tok.unique().numel() > 30


@pytest.mark.parametrize("provider", PROVIDERS)
def test_bad_inputs_defined(provider):
    v = 7
    x = torch.randn(9, v)
    x[0] = -float("inf")                        # all -inf -> 0 (torch.argmax of the row)
    x[1, 2] = float("nan")                      # NaN is never drawn
    x[1, :2] = 50.0
    x[2, 4] = float("inf")                      # +inf -> that token
    x[3] = float("nan")                         # all NaN -> 0
    tok = sample(x, top_k=3, top_p=0.9, provider=provider)
    assert tok[0] == 0 and tok[1] in (0, 1) and tok[2] == 4 and tok[3] == 0
    assert int(tok.min()) >= 0 and int(tok.max()) < v
    # top_k > vocab and top_k = -1: filter off; top_p = 0: argmax; temperature 0: greedy (first max)
    y = torch.tensor([[1.0, 4.0, 2.0, 4.0]]).repeat(200, 1)
    for kw in (dict(top_k=100), dict(top_k=-1)):
        assert set(sample(y, provider=provider, **kw).tolist()) == {0, 1, 2, 3}
    z = torch.tensor([[1.0, 4.0, 2.0, 3.9]]).repeat(200, 1)
    assert set(sample(z, top_p=0.0, provider=provider).tolist()) == {1}
    assert set(sample(y, temperature=0.0, provider=provider).tolist()) == {1}
    # batch 0
    out = sample(torch.empty(0, v), provider=provider, keepdim=True)
    assert out.shape == (0, 1) and out.dtype == torch.int64


@pytest.mark.parametrize("provider", PROVIDERS)
def test_vocab_not_a_multiple_of_the_block(provider):
    """V = 2051 > one 2048 block: the kept token sits in the masked tail block."""
    x = torch.full((4, 2051), -10.0)
    x[:, 2050] = 10.0
    x[:, 5] = 9.0
    tok = sample(x, top_k=2, top_p=0.99, provider=provider)
    assert set(tok.tolist()) <= {2050, 5} and 2050 in tok.tolist()


@pytest.mark.parametrize("provider", PROVIDERS)
def test_ban_min_p_probs_and_per_row(provider):
    x = torch.tensor([[5.0, 4.9, 0.0, -1.0]]).repeat(300, 1)
    ban = torch.tensor([True, False, False, False])
    assert set(sample(x, ban=ban, top_k=1, provider=provider).tolist()) == {1}
    # min_p 0.5: only tokens with p >= 0.5 * p_max: {0, 1}
    assert set(sample(x, min_p=0.5, provider=provider).tolist()) == {0, 1}
    probs = torch.tensor([[0.0, 0.2, 0.0, 0.8]]).repeat(300, 1)
    assert set(sample(probs, is_probs=True, provider=provider).tolist()) == {1, 3}
    # per-row: row 0 greedy (T = 0), row 1 top-k 1, row 2 unfiltered
    y = torch.tensor([[0.0, 1.0, 2.0], [3.0, 2.0, 1.0], [0.0, 0.0, 0.0]]).repeat(100, 1)
    t_rows = torch.tensor([0.0, 1.0, 1.0]).repeat(100)
    k_rows = torch.tensor([0, 1, 0]).repeat(100)
    tok = sample(y, t_rows=t_rows, k_rows=k_rows, provider=provider).reshape(100, 3)
    assert set(tok[:, 0].tolist()) == {2} and set(tok[:, 1].tolist()) == {0} and len(set(tok[:, 2].tolist())) == 3


@pytest.mark.parametrize("provider", PROVIDERS)
def test_per_row_min_p_out_of_range(provider):
    """A per-row min_p (the pass passes dynamic=True's lifted one, whose value it can't check) above 1 keeps
    the top token as HF's ``MinPLogitsWarper`` does; NaN removes nothing (``probs < nan`` is false). Triton
    drew token 0 for both."""
    x = torch.tensor([[0.0, 2.0, 1.0, -1.0]]).repeat(300, 1)
    seed_t = torch.tensor([5], dtype=torch.int64)
    for mp, want in ((1.5, {1}), (float("nan"), {0, 1, 2, 3})):
        out = torch.ops.rocm_fused.sample(x, seed_t, None, 1.0, None, 0, None, 1.0, torch.tensor([mp]), 0.0, None,
                                          False, True, False, provider)
        assert set(out.tolist()) == want, (mp, set(out.tolist()))


def test_bad_shapes_raise():
    with pytest.raises(ValueError, match=r"\(B, V\)"):
        sample(torch.zeros(3), provider="reference")
    with pytest.raises(ValueError, match="need 1 or batch"):
        sample(torch.zeros(3, 4), t_rows=torch.ones(2), provider="reference")
    with pytest.raises(ValueError, match="empty vocabulary"):
        sample(torch.zeros(3, 0), provider="reference")


def test_per_row_parameters_move_to_the_kernel_device():
    """dynamic=True lifts a Python float temperature into a 0-d CPU float64 input: per_row moves it."""
    from rocm_inductor.ops.sampling import per_row

    t = per_row(torch.tensor(0.7, dtype=torch.float64), 3, torch.float32, "meta")
    assert t.device.type == "meta" and t.shape == (3,) and t.dtype == torch.float32
