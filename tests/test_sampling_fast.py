"""Triton sampler's two-launch top-k path (issue 14) under the interpreter: exact distribution, ties, fallback.

The path (``providers/triton/sampling/``, :func:`fast_path_ok`) serves a scalar ``0 < k <= topk_cap``: launch 1
keeps one max per group of columns, launch 2 gathers the groups whose max reaches the k-th largest group max
and finishes top-k (ties kept), top-p on the renormalised top-k set, min-p and the Gumbel draw over them. Small
vocabularies (V ~ 100-1000) keep the interpreter fast; ``group_cap`` is lowered to reach the whole-row
fallback that ties beyond the cap take. Statistics are chi-square tests against HF's exact distribution.
"""

from __future__ import annotations

import pytest
import torch
from sampling_checks import chi2_pvalue

from rocm_inductor.providers.reference_sampling import exact_distribution
from rocm_inductor.providers.triton import sampling as S

N = 3000


def draw(x, seed=1234, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, ban=None, is_probs=False,
         top_k_first=True, t_rows=None, p_rows=None, mp_rows=None):
    seed_t = torch.tensor([seed], dtype=torch.int64)
    return S.sample(x, seed_t, t_rows, temperature, None, top_k, p_rows, top_p, mp_rows, min_p, ban, is_probs,
                    top_k_first)


def chi2_ok(tok, exact):
    return chi2_pvalue(tok, exact) > 1e-4


def test_host_choice_and_config():
    assert S.fast_path_ok(4, 1000, None, 50, True, True)
    assert not S.fast_path_ok(4, 1000, torch.tensor([5]), 50, True, True)   # per-row k: general path
    assert not S.fast_path_ok(4, 1000, None, S.knobs.current().topk_cap + 1, True, True)
    assert not S.fast_path_ok(4, 1000, None, 50, True, False)              # top-p first
    assert S.fast_path_ok(4, 1000, None, 50, False, False)                  # top-p off: order irrelevant
    assert not S.fast_path_ok(4, 40, None, 40, False, True)                 # k >= V: off
    cfg = S.fast_config(3, 1003)
    assert cfg["NG"] * cfg["G"] >= 1003 and cfg["ROWS"] * max(cfg["ET"], cfg["CT"]) * cfg["NP"] <= 2**20


_G = torch.Generator().manual_seed(21)
L203 = torch.randn(203, generator=_G) * 1.5          # V = 203: no block divides it


@pytest.mark.parametrize("t,k,p,mp", [(0.8, 7, 1.0, 0.0), (0.7, 9, 0.8, 0.0), (1.2, 12, 0.9, 0.05),
                                       (1.0, 10, 1.0, 0.2)])
def test_chi_square_top_k_paths(t, k, p, mp):
    """top-k only, HF top-k + top-p, top-k + top-p + min-p, top-k + min-p (V = 203, 26 groups)."""
    tok = draw(L203.expand(N, 203).contiguous(), temperature=t, top_k=k, top_p=p, min_p=mp)
    assert chi2_ok(tok, exact_distribution(L203, t, k, p, mp))


def test_chi_square_ties_at_the_kth_value():
    """Ten tokens tie at the 5th largest value, spread over several groups: top-k keeps all 13."""
    row = torch.randn(160, generator=_G) - 4.0
    row[[3, 50, 140]] = torch.tensor([3.0, 2.5, 2.0])
    row[[7, 9, 33, 61, 62, 90, 100, 101, 130, 159]] = 1.0
    exact = exact_distribution(row, 1.0, 5, 1.0)
    assert int((exact > 0).sum()) == 13
    assert chi2_ok(draw(row.expand(N, 160).contiguous(), top_k=5), exact)


def test_chi_square_per_row_parameters():
    """Per-row temperature / top-p / min-p in one launch: each row kind follows its own distribution."""
    rows = torch.tensor([[0.7, 0.8, 0.0], [1.3, 0.95, 0.1]])
    n2 = N // 2
    t_rows, p_rows, mp_rows = (rows[:, i].repeat(n2) for i in range(3))
    tok = draw(L203.expand(N, 203).contiguous(), top_k=11, t_rows=t_rows, p_rows=p_rows, mp_rows=mp_rows)
    tok = tok.reshape(n2, 2)
    for j in range(2):
        t, p, mp = rows[j].tolist()
        assert chi2_ok(tok[:, j], exact_distribution(L203, t, 11, p, mp)), rows[j]


def test_chi_square_top_p_only_and_min_p_only():
    """The general path's whole-row searches (no top-k): top-p alone, min-p alone."""
    x = L203[:101].expand(N, 101).contiguous()
    assert chi2_ok(draw(x, temperature=0.9, top_p=0.7), exact_distribution(L203[:101], 0.9, 0, 0.7))
    assert chi2_ok(draw(x, temperature=1.1, min_p=0.15), exact_distribution(L203[:101], 1.1, 0, 1.0, 0.15))


X1000 = torch.randn(24, 603, generator=_G) * 2.0


@pytest.mark.parametrize("case", ["hf", "minp_ban_rows_bf16"])
def test_same_tokens_as_general_path_and_fallback(case, sampler_knobs):
    """Same kept set, same (seed, column, row) noise: the top-k path draws the general path's tokens, also
    through the whole-row fallback (group_cap lowered below the gathered groups)."""
    b = X1000.shape[0]
    x = X1000
    kw: dict = dict(temperature=0.8, top_k=50, top_p=0.9)
    if case != "hf":
        x = X1000.to(torch.bfloat16)  # bf16: many exact ties
        kw = dict(top_k=20, min_p=0.05, ban=torch.arange(603) % 7 == 0,
                  t_rows=torch.linspace(0.0, 1.5, b),   # row 0 greedy
                  p_rows=torch.linspace(0.0, 1.0, b))   # row 0: p = 0; last row: p = 1 (off)
    fast = draw(x, **kw)
    sampler_knobs(fast_topk=False)
    general = draw(x, **kw)
    assert torch.equal(fast, general)
    sampler_knobs(fast_topk=True)
    sampler_knobs(group_cap=4)
    assert torch.equal(draw(x, **kw), general)
    assert draw(x, **{**kw, "seed": 99}).ne(general).any()  # another seed, other tokens
    assert torch.equal(draw(x, **kw), general)               # same seed, same tokens


def test_bad_rows_greedy_and_wide_ties(sampler_knobs):
    """All -inf -> 0, all NaN -> 0, +inf in the last (partial) group wins, T = 0 takes the first max, a row
    of one repeated value keeps every token (ties beyond group_cap: whole-row fallback)."""
    sampler_knobs(group_cap=4)
    v = 203
    x = torch.randn(6, v, generator=_G)
    x[0] = -float("inf")
    x[1] = float("nan")
    x[2, 202] = float("inf")
    x[3, [17, 90]] = 9.0                         # greedy row (T = 0): first of the tied maxima
    x[4] = 0.5                                   # all tied: top-k keeps all
    x[5, :200] = -float("inf")                   # fewer finite tokens than k
    t_rows = torch.tensor([1.0, 1.0, 1.0, 0.0, 1.0, 1.0])
    tok = draw(x, top_k=8, top_p=0.9, t_rows=t_rows)
    assert tok[:4].tolist() == [0, 0, 202, 17] and 200 <= int(tok[5]) < v
    wide = draw(x[4:5].expand(2000, v).contiguous(), top_k=8)
    assert wide.unique().numel() > 150 and int(wide.max()) < v


@pytest.mark.parametrize("case", ["hf", "minp_ban_rows_bf16"])
def test_compact_tail_and_geometric_bound_draw_the_search_tokens(case, sampler_knobs):
    """Launch 2's compact tail (all-pairs k-th value / top-p over <= cand_cap candidates) and the geometric
    first bound pass draw the pivot searches' tokens: default vs searches only (cand_cap = 0, uniform first
    pass) vs a cap below k (every row's candidates overflow: the searches run for them inside the launch)."""
    x = X1000 if case == "hf" else X1000.to(torch.bfloat16)
    kw: dict = dict(temperature=0.8, top_k=50, top_p=0.9)
    if case != "hf":
        kw = dict(top_k=20, min_p=0.05, ban=torch.arange(603) % 7 == 0, t_rows=torch.linspace(0.0, 1.5, 24),
                  p_rows=torch.linspace(0.0, 1.0, 24))
    assert S.fast_config(24, 603)["CC"] > 0 and S.fast_config(24, 603)["GEO"]
    default = draw(x, **kw)
    sampler_knobs(cand_cap=1024)   # capped at CT (512 here): every row's candidates fit
    assert S.fast_config(24, 603)["CC"] == S.fast_config(24, 603)["CT"]
    assert torch.equal(draw(x, **kw), default)
    sampler_knobs(cand_tile=None)  # one all-pairs tile, not cand_tile-wide pieces
    assert torch.equal(draw(x, **kw), default)
    sampler_knobs(cand_cap=8)      # below k: every row overflows to the searches
    assert torch.equal(draw(x, **kw), default)
    sampler_knobs(cand_cap=0)
    sampler_knobs(fast_geo=False)
    assert S.fast_config(24, 603)["CC"] == 0
    assert torch.equal(draw(x, **kw), default)


@pytest.mark.parametrize("t,k,p,mp", [(0.7, 9, 0.8, 0.0), (1.2, 12, 0.9, 0.05), (1.0, 5, 1.0, 0.0)])
def test_chi_square_compact_tail(t, k, p, mp, sampler_knobs):
    """The compact tail on every row (cand_cap >= CT: at these small V every candidate fits): HF top-k + top-p,
    + min-p, and ten tokens tied at the 5th largest value (top-k keeps all 13). One all-pairs tile (the
    interpreter's fastest; the pieces are checked against it above)."""
    sampler_knobs(cand_cap=1024)
    sampler_knobs(cand_tile=None)
    if k == 5:
        row = torch.randn(160, generator=torch.Generator().manual_seed(5)) - 4.0
        row[[3, 50, 140]] = torch.tensor([3.0, 2.5, 2.0])
        row[[7, 9, 33, 61, 62, 90, 100, 101, 130, 159]] = 1.0
    else:
        row = L203
    exact = exact_distribution(row, t, k, p, mp)
    assert k != 5 or int((exact > 0).sum()) == 13
    tok = draw(row.expand(N, row.numel()).contiguous(), temperature=t, top_k=k, top_p=p, min_p=mp)
    assert chi2_ok(tok, exact)
