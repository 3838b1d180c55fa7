"""Triton sampler, one program per row (``sampling/rows.py``): top-p and/or min-p without top-k in one launch.

The row kernel decides the chain's candidates inside one program (check the whole-row Gumbel winner's
mass, redraw over ``{key >= key(c) + 1}`` on a rejection, the exact search after ``row_tries`` redraws), so
it must give the plain search's tokens (``winner=False``, same seed) on every input, and the exact filtered
distribution (chi-square).
"""

from __future__ import annotations

import pytest
import torch
from sampling_checks import assert_rows_follow_filters

from rocm_inductor.providers.triton import sampling as S
from rocm_inductor.providers.triton.sampling import rows as R

DEV = "cuda" if torch.cuda.is_available() else "cpu"
_G = torch.Generator().manual_seed(17)
X = (torch.randn(24, 603, generator=_G) * 2.0).to(DEV)  # V = 603: no tile divides it


def draw(x, seed=77, temperature=1.0, top_p=1.0, min_p=0.0, ban=None, t_rows=None, p_rows=None, mp_rows=None,
         is_probs=False):
    seed_t = torch.tensor([seed], dtype=torch.int64, device=x.device)
    return S.sample(x, seed_t, t_rows, temperature, None, 0, p_rows, top_p, mp_rows, min_p, ban, is_probs,
                    True).cpu()


def rows_and_search(sampler_knobs, x, **kw):
    """(row kernel's tokens, the plain search's tokens) for the same call."""
    sampler_knobs(row_path=True)
    a = draw(x, **kw)
    sampler_knobs(row_path=False)
    sampler_knobs(winner=False)
    b = draw(x, **kw)
    sampler_knobs(winner=True)
    return a, b


def _bad_rows(x):
    x = x.clone()
    x[0] = -float("inf")
    x[1] = float("nan")
    x[2, 602] = float("inf")
    x[3, 100:] = -float("inf")
    return x


CASES = [dict(temperature=0.7, top_p=0.9), dict(temperature=1.1, min_p=0.1),
         dict(top_p=0.6, min_p=0.2, ban=torch.arange(603, device=DEV) % 5 == 0),
         dict(temperature=0.9, top_p=0.0), dict(temperature=0.0, top_p=0.9),
         dict(t_rows=torch.linspace(0.0, 1.5, 24, device=DEV), p_rows=torch.linspace(0.0, 1.0, 24, device=DEV),
              mp_rows=torch.linspace(0.0, 0.3, 24, device=DEV))]


@pytest.mark.parametrize("tries,block,chunk", [(None, None, None), (0, 64, None), (None, 128, 256)])
def test_row_kernel_draws_the_searchs_tokens(tries, block, chunk, sampler_knobs):
    """Top-p only, min-p only, both, p = 0 (largest only), T = 0 (greedy), per-row T / p / min-p (0 and 1
    included), a ban, bf16 ties, rows all -inf / NaN / with +inf / mostly -inf; the default redraw budget,
    none (every undecided row runs the exact search; 64-column tiles: a partial last tile), and the first
    pass split into 256-column chunks (:func:`_first_kernel`, partials reduced by the row kernel)."""
    if tries is not None:
        sampler_knobs(row_tries=tries)
    if block is not None:
        sampler_knobs(interp_row_block=block)
        sampler_knobs(row_block=block)
    if chunk is not None:
        sampler_knobs(interp_row_chunk=chunk)
        sampler_knobs(row_chunk=chunk)
    x = _bad_rows(X)
    for kw in CASES:
        for xx in (x, x.to(torch.bfloat16)):
            a, ref = rows_and_search(sampler_knobs, xx, **kw)
            assert torch.equal(a, ref), kw
    a, _ = rows_and_search(sampler_knobs, x, temperature=0.7, top_p=0.9)
    assert a[0] == 0 and a[1] == 0 and a[2] == 602 and a[3] < 100


def test_row_kernel_low_p_many_seeds_probs_fp16_and_batch_0(sampler_knobs):
    """Low p rejects the first winner often; probabilities in (``is_probs``) and float16 scores; B = 0 launches
    nothing."""
    x = X[:12]
    for seed in range(5):
        a, ref = rows_and_search(sampler_knobs, x, seed=seed, top_p=0.3)
        assert torch.equal(a, ref), seed
    probs = torch.softmax(X[:8].double(), -1).float()
    a, ref = rows_and_search(sampler_knobs, probs, is_probs=True, top_p=0.8, min_p=0.05)
    assert torch.equal(a, ref)
    a, ref = rows_and_search(sampler_knobs, X[:8].half(), temperature=0.6, top_p=0.95)
    assert torch.equal(a, ref)
    sampler_knobs(row_path=True)
    assert draw(X[:0], top_p=0.9).shape == (0,)


@pytest.mark.parametrize("tries", [None, 0])
def test_row_kernel_chi_square(tries, sampler_knobs):
    """3000 identical rows of V = 37: top-p only, min-p only, both, against the exact filtered distribution;
    with the redraws and with the exact search only."""
    sampler_knobs(row_path=True)
    if tries is not None:
        sampler_knobs(row_tries=tries)
    assert_rows_follow_filters(draw, torch.randn(37, generator=_G) * 1.5, 3000,
                               ((0.8, 0.7, 0.0), (1.2, 1.0, 0.12), (1.0, 0.85, 0.05)), DEV)


def test_row_path_routing(sampler_knobs, monkeypatch):
    """Forced on / off, else where measured faster (top-p: small V or B >= 64; min-p alone: B >= 32 at small V
    or B >= 64); top-k never takes it. The GPU shape: split first pass, chunks by B * V."""
    kn = sampler_knobs(row_path=None)
    assert R.row_path(1, kn.row_max_v, True) and not R.row_path(32, kn.row_max_v + 1, True)
    assert R.row_path(kn.row_min_b_wide, 151936, True) and R.row_path(kn.row_min_b_wide, 151936, False)
    assert not R.row_path(8, 32000, False) and R.row_path(kn.row_min_b_minp, 32000, False)
    cfg = R.row_config(1, 32000, interp=False)
    assert (cfg["CHUNK"], cfg["NCH"], cfg["BLOCK"], cfg["ROWS"]) == (kn.row_min_chunk, 16, kn.row_block, 1)
    assert R.row_config(64, 128256, interp=False)["CHUNK"] == kn.row_max_chunk
    assert R.row_config(64, 128256, interp=False)["BLOCK"] == kn.row_block_wide
    calls = []
    real = R.sample_rows
    monkeypatch.setattr(R, "sample_rows", lambda *a, **k: calls.append(1) or real(*a, **k))
    sampler_knobs(row_path=True)
    seed_t = torch.tensor([1], dtype=torch.int64, device=DEV)
    S.sample(X, seed_t, None, 1.0, None, 5, None, 0.9, None, 0.0, None, False, True)  # top-k: not the row path
    assert calls == []
    draw(X, top_p=0.9)
    assert calls == [1]
