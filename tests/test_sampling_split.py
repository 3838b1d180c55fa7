"""Triton sampler with rows split across programs (``force_chunk``): same draws as one chunk, statistics, ties.

On CPU the interpreter runs one chunk per row by default; forcing a small chunk exercises the multi-launch
split path (per-chunk partials reduced in a fixed order, best chunk picked last). On a GPU the same tests run
compiled on CUDA tensors.
"""

from __future__ import annotations

import pytest
import torch
from sampling_checks import chi2_pvalue

from rocm_inductor.providers.reference_sampling import exact_distribution
from rocm_inductor.providers.triton import sampling as S

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def draw(x, chunk, seed=1234, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, ban=None, is_probs=False,
         top_k_first=True, t_rows=None, k_rows=None, p_rows=None, sampler_knobs=None):
    """The Triton provider's ``sample`` with chunk width ``chunk`` (None: the default layout)."""
    sampler_knobs(force_chunk=chunk)
    seed_t = torch.tensor([seed], dtype=torch.int64, device=x.device)
    return S.sample(x, seed_t, t_rows, temperature, k_rows, top_k, p_rows, top_p, None, min_p, ban, is_probs,
                    top_k_first).cpu()


def test_launch_config_splits_rows():
    cfg = S.launch_config(4, 1000, chunk=128)
    assert cfg["CHUNK"] == 128 and cfg["NCH"] == 8 and cfg["NCH"] * cfg["CHUNK"] >= 1000
    assert cfg["ROWS"] * cfg["BLOCK"] * cfg["NP"] <= 2**20 and cfg["num_warps"] * 64 <= 1024
    assert S.launch_config(4, 1000, chunk=4096)["NCH"] == 1  # capped at next_pow2(V)
    for npiv in (16, 32, 64):  # the fixed pass count always narrows a 2^32-wide interval to width 1
        d = 2**32
        for _ in range(S.search_passes(npiv)):
            d = max(((d * (j + 1)) // (npiv + 1)) - ((d * j) // (npiv + 1)) for j in range(npiv + 1))
        assert d <= 1
    assert S.search_passes(16) == 8 and S.search_passes(64) == 6


def test_winner_passes_cover_the_candidate_pivot():
    """The chain's passes narrow to width 1 even when every pass spends a pivot on its candidate's key:
    ``NP - 1`` pivots at ``d*j // NP`` plus the candidate leave at most ``ceil(d / NP)`` (``_winner_pivot``),
    at the same launch counts as the plain search for the NPs the launcher picks (8, 16)."""
    for npiv in (8, 16, 64):
        d = 2**32
        for _ in range(S.winner_passes(npiv)):
            cuts = [(d * j) // npiv for j in range(npiv)] + [d]
            d = max(b - a for a, b in zip(cuts, cuts[1:]))  # the candidate pivot only splits a gap further
        assert d <= 1, npiv
    assert (S.winner_passes(8), S.winner_passes(16)) == (S.search_passes(8), S.search_passes(16)) == (11, 8)
    with pytest.raises(ValueError):
        S.winner_passes(1)


_G = torch.Generator().manual_seed(11)
X1000 = (torch.randn(48, 1000, generator=_G) * 2.0).to(DEV)


@pytest.mark.slow
@pytest.mark.parametrize("case", ["hf", "top_p_first", "minp_ban_rows"])
def test_split_draws_equal_single_chunk(case, sampler_knobs):
    """The Philox counter is (column, row) and the partials reduce deterministically: the tokens do not
    depend on the chunking (V = 1000 = 7 * 128 + 104: a partial last chunk)."""
    kw: dict = dict(temperature=0.8, top_k=50, top_p=0.9)
    if case == "top_p_first":
        kw.update(top_k=30, top_p=0.7, top_k_first=False)
    if case == "minp_ban_rows":
        b = X1000.shape[0]
        kw = dict(min_p=0.05, ban=torch.arange(1000, device=DEV) % 7 == 0,
                  t_rows=torch.linspace(0.0, 1.5, b, device=DEV),  # row 0 greedy
                  k_rows=torch.arange(b, device=DEV) * 3,           # row 0: k = 0 (off)
                  p_rows=torch.linspace(0.0, 1.0, b, device=DEV))   # row 0: p = 0; last row: p = 1 (off)
    one = draw(X1000, None, sampler_knobs=sampler_knobs, **kw)
    split = draw(X1000, 128, sampler_knobs=sampler_knobs, **kw)
    assert torch.equal(one, split)
    assert torch.equal(draw(X1000, 256, sampler_knobs=sampler_knobs, **kw), one)
    assert int(one.min()) >= 0 and int(one.max()) < 1000


@pytest.mark.slow
def test_split_chi_square_vs_exact_distribution(sampler_knobs):
    """4 chunks of 32 over V = 100 (last chunk 4 wide): draws match HF's filtered distribution."""
    v, n = 100, 10_000
    logits = torch.randn(v, generator=torch.Generator().manual_seed(5)) * 1.5
    t, k, p = 0.9, 20, 0.85
    exact = exact_distribution(logits, t, k, p)
    tok = draw(logits.to(DEV).expand(n, v).contiguous(), 32, seed=77, temperature=t, top_k=k, top_p=p,
               sampler_knobs=sampler_knobs)
    assert chi2_pvalue(tok, exact) > 1e-4


@pytest.mark.slow
def test_split_ties_greedy_and_bad_rows(sampler_knobs):
    """Ties spread over chunks (the last one partial): top-k keeps them all, greedy takes the lowest index;
    an all -inf row gives 0 and a +inf in the last chunk wins."""
    v, reps = 1000, 100
    row = torch.full((v,), -5.0)
    row[[5, 300, 999]] = 3.0
    x = row.expand(reps, v).contiguous().to(DEV)
    for k in (1, 3):
        assert set(draw(x, 128, top_k=k, sampler_knobs=sampler_knobs).tolist()) == {5, 300, 999}
    assert set(draw(x, 128, top_p=0.0, sampler_knobs=sampler_knobs).tolist()) == {5, 300, 999}
    assert set(draw(x, 128, temperature=0.0, sampler_knobs=sampler_knobs).tolist()) == {5}
    y = torch.full((3, v), -float("inf"))
    y[1, 998] = float("inf")
    y[1, 10] = 50.0
    y[2, 4] = float("nan")
    y[2, 700] = 1.0
    tok = draw(y.to(DEV), 128, top_k=5, top_p=0.9, sampler_knobs=sampler_knobs)
    assert tok.tolist() == [0, 998, 700]
