"""Triton sampler without top-k (``winner``): the whole-row Gumbel winner kept -> the same token as the search.

Launch 1 draws ``argmax(s + g)`` over the whole row with the (seed, column, row) Philox noise; the first top-p
pass puts a pivot at the winner's key + 1, so a kept winner is known after one pass and its row skips the rest.
Exact: the argmax over a kept set that holds the whole-row argmax is that argmax, and the pivot is one more
point of the same monotone mass function, so the search's threshold does not change. Checked here by
equality with ``winner=False`` (same seed) over rows where the winner is kept and rows where it is not, and
by chi-square for top-p only, min-p only and both.
"""

from __future__ import annotations

import pytest
import torch
from sampling_checks import assert_rows_follow_filters

from rocm_inductor.providers.triton import sampling as S


@pytest.fixture(autouse=True)
def _chain_path(sampler_knobs):
    """These tests are about the multi-launch chain: keep the one-program-per-row kernel out."""
    sampler_knobs(row_path=False)


DEV = "cuda" if torch.cuda.is_available() else "cpu"
_G = torch.Generator().manual_seed(5)
X = (torch.randn(40, 603, generator=_G) * 2.0).to(DEV)  # V = 603: no block divides it


def draw(x, seed=77, temperature=1.0, top_p=1.0, min_p=0.0, ban=None, t_rows=None, p_rows=None, mp_rows=None):
    seed_t = torch.tensor([seed], dtype=torch.int64, device=x.device)
    return S.sample(x, seed_t, t_rows, temperature, None, 0, p_rows, top_p, mp_rows, min_p, ban, False,
                    True).cpu()


def both(sampler_knobs, x, chunk=None, **kw):
    sampler_knobs(force_chunk=chunk)
    sampler_knobs(winner=True)
    a = draw(x, **kw)
    sampler_knobs(winner=False)
    b = draw(x, **kw)
    return a, b


@pytest.mark.parametrize("chunk", [None, pytest.param(128, marks=pytest.mark.slow)])
def test_winner_draws_the_searchs_tokens(chunk, sampler_knobs):
    """Top-p only, min-p only, both, per-row p (0 and 1 included) and T (0: greedy), bf16 ties, a ban, bad rows;
    one chunk per row and rows split into 128-column chunks (a partial last chunk)."""
    b = X.shape[0]
    x = X.clone()
    x[0] = -float("inf")
    x[1] = float("nan")
    x[2, 602] = float("inf")
    xb = x.to(torch.bfloat16)  # bf16: exact ties at the top-p boundary
    cases = [dict(temperature=0.7, top_p=0.9), dict(temperature=1.1, min_p=0.1),
             dict(top_p=0.6, min_p=0.2, ban=torch.arange(603, device=DEV) % 5 == 0),
             dict(t_rows=torch.linspace(0.0, 1.5, b, device=DEV), p_rows=torch.linspace(0.0, 1.0, b, device=DEV),
                  mp_rows=torch.linspace(0.0, 0.3, b, device=DEV))]
    for kw in cases:
        for xx in (x, xb):
            a, ref = both(sampler_knobs, xx, chunk, **kw)
            assert torch.equal(a, ref), kw
    a, _ = both(sampler_knobs, x, chunk, temperature=0.7, top_p=0.9)
    assert a[0] == 0 and a[1] == 0 and a[2] == 602


def test_winner_rejected_rows_and_batch_0(sampler_knobs):
    """Low p: the winner is often outside the kept set (the search runs on); many seeds, the same tokens.
    B = 0 launches nothing and returns an empty tensor."""
    x = X[:16]
    for seed in range(6):
        a, ref = both(sampler_knobs, x, seed=seed, top_p=0.3)
        assert torch.equal(a, ref)
    assert draw(X[:0], top_p=0.9).shape == (0,)


@pytest.mark.slow
def test_accumulated_passes_draw_the_same_tokens(sampler_knobs):
    """``acc_small`` (search passes reduce their compare terms once per chunk, as large work does): the same
    kept sets, so the same tokens as the per-step reduction, with top-k (counts) and top-p (masses), split
    into 128-column chunks."""
    sampler_knobs(fast_topk=False)
    sampler_knobs(acc_small=False)  # small work: per-step reductions
    kw = dict(seed=3, temperature=0.8, top_p=0.8)
    a, ref = both(sampler_knobs, X, 128, **kw)
    sampler_knobs(acc_small=True)
    acc, acc_ref = both(sampler_knobs, X, 128, **kw)
    assert torch.equal(acc, ref) and torch.equal(acc_ref, ref) and torch.equal(a, ref)
    seed_t = torch.tensor([3], dtype=torch.int64, device=DEV)
    k_acc = S.sample(X, seed_t, None, 0.8, None, 70, None, 0.8, None, 0.0, None, False, True)
    sampler_knobs(acc_small=False)
    assert torch.equal(k_acc, S.sample(X, seed_t, None, 0.8, None, 70, None, 0.8, None, 0.0, None, False, True))


def test_winner_chi_square(sampler_knobs):
    """4000 identical rows of V = 37: top-p only, min-p only, both, against the exact filtered distribution."""
    sampler_knobs(winner=True)
    assert_rows_follow_filters(draw, torch.randn(37, generator=_G) * 1.5, 4000,
                               ((0.8, 0.7, 0.0), (1.2, 1.0, 0.12), (1.0, 0.85, 0.05)), DEV)
