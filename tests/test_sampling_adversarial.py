"""Triton sampler, adversarial inputs (session adv3): cases that broke the merged kernels, and cheap boundary cases
no other test covers. Tiny shapes under the interpreter; every case compares the three paths (the top-k path,
the plain search with ``winner`` off, the restricted-winner chain) for equal tokens where they apply, and the
tokens against HF's kept set (:func:`rocm_inductor.providers.reference_sampling.filtered_logits`).
"""

from __future__ import annotations

import pytest
import torch

from rocm_inductor.providers.reference_sampling import filtered_logits, prepare_scores
from rocm_inductor.providers.triton import sampling as S

_G = torch.Generator().manual_seed(31)


def draw(x, seed=5, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, ban=None, is_probs=False, top_k_first=True,
         t_rows=None, k_rows=None, p_rows=None, mp_rows=None):
    seed_t = torch.tensor([seed], dtype=torch.int64, device=x.device)
    return S.sample(x, seed_t, t_rows, temperature, k_rows, top_k, p_rows, top_p, mp_rows, min_p, ban, is_probs,
                    top_k_first).cpu()


def paths(sampler_knobs, x, **kw):
    """Tokens of the default launcher (top-k path / chain), the plain search and the chain without the top-k
    path, same seed."""
    out = {"default": draw(x, **kw)}
    sampler_knobs(fast_topk=False)
    sampler_knobs(winner=False)
    out["search"] = draw(x, **kw)
    sampler_knobs(winner=True)
    out["chain"] = draw(x, **kw)
    sampler_knobs(fast_topk=True)
    return out


def kept(x, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, **_):
    """(B, V) bool: HF's kept set of each row (scalar parameters, finite rows)."""
    xx = prepare_scores(x, None, False)
    return torch.stack([torch.isfinite(filtered_logits(r, temperature, top_k, top_p, min_p, True)) for r in xx])


@pytest.mark.parametrize("v", [1, 2, 3])
def test_vocab_below_four(v, sampler_knobs):
    """V < 4: the interpreter's chunk was next_pow2(V) < 4 columns, and the four-lane noise's arange(0, W // 4)
    was empty (crash on every path without top-k). Now the chunk is at least 4 columns."""
    x = torch.randn(3, v, generator=_G)
    for kw in (dict(top_p=0.5), dict(min_p=0.3), dict(top_k=1, top_p=0.9), dict(temperature=0.0, top_p=0.5)):
        out = paths(sampler_knobs, x, **kw)
        assert all(torch.equal(o, out["search"]) for o in out.values()), kw
        assert bool(kept(x, **kw).gather(1, out["search"][:, None]).all()) or kw.get("temperature") == 0.0


def test_signed_zero_ties(sampler_knobs):
    """+0.0 and -0.0 are equal logits (HF's ``scores < kth`` keeps both), but the order key mapped -0.0 one below
    +0.0: top-k with k = 1 dropped the -0.0 token, and the paths disagreed on rows mixing both (the float max may
    be either zero, so the search interval's top differed). Both must be drawn, on every path alike."""
    v, b = 67, 48
    x = torch.full((b, v), -6.0)
    x[:, 3] = 0.0
    x[:, 40] = -0.0
    for kw in (dict(top_k=1), dict(top_k=1, top_p=0.9), dict(k_rows=torch.ones(b, dtype=torch.int64))):
        tok = draw(x, **kw)
        assert set(tok.tolist()) == {3, 40}, kw
    # rows of only +-0 (the first group all -0.0, so the float max is -0.0 under the interpreter): the top-k path
    # searched below key(-0.0) + 1 and kept every zero, the plain search kept the +0.0 ones (k = 3)
    x = torch.zeros(4, 203)
    x[:, ::2] = -0.0
    x[:, :8] = -0.0
    x[1] = -0.0
    x[1, 100:] = 0.0
    x[2, 150:] = -5.0
    for xx in (x, x.bfloat16()):
        for kw in (dict(top_k=3), dict(top_k=3, top_p=0.9), dict(top_p=0.5)):
            out = paths(sampler_knobs, xx, **kw)
            assert torch.equal(out["default"], out["search"]) and torch.equal(out["chain"], out["search"]), kw


def test_per_row_nan_top_p_is_off(sampler_knobs):
    """A per-row top_p of NaN: the reference (HF's ``cumsum <= 1 - p``, never true) keeps every token, i.e. top-p
    off; the kernels' clamp turned NaN into p = 0 (only the largest token). Same seed, same kept set: the tokens
    of p = NaN must equal those of p = 1, on every path (top-k path, plain search, chain), and min-p NaN drops
    nothing either."""
    x = (torch.randn(1, 50, generator=_G) * 0.5).expand(32, 50).contiguous()
    nan = torch.full((32,), float("nan"))
    for kw in (dict(), dict(top_k=10), dict(min_p=0.05)):
        out = paths(sampler_knobs, x, p_rows=nan, **kw)
        ref = paths(sampler_knobs, x, p_rows=torch.ones(32), **kw)
        for m in out:
            assert torch.equal(out[m], ref[m]), (m, kw)
        assert out["search"].unique().numel() > 5
    out = paths(sampler_knobs, x, mp_rows=nan, top_p=0.95)
    ref = paths(sampler_knobs, x, top_p=0.95)
    assert all(torch.equal(out[m], ref[m]) for m in out)


def test_subnormal_scalar_top_p_is_clamped_as_per_row(sampler_knobs):
    """A scalar top_p below 1e-30 (subnormal at 1e-40: flushed to 0 on a GPU, which would reject the chain's
    candidate after the host compiled the draw out of launch 2) is clamped on the host to 1e-30, as the per-row
    path clamps: same tokens as the per-row tensor, on every path, and only the largest token kept."""
    x = torch.randn(4, 40, generator=_G)
    out = paths(sampler_knobs, x, top_p=1e-40)
    ref = paths(sampler_knobs, x, p_rows=torch.full((4,), 1e-40, dtype=torch.float64))
    for m in out:
        assert torch.equal(out[m], ref[m]), m
        assert torch.equal(out[m], x.argmax(-1)), m


@pytest.mark.xfail(reason="open (adv3): a temperature so small that x / T overflows to +inf for several tokens makes "
                          "the row greedy; the plain search takes the raw argmax, the top-k path and the chain the "
                          "first overflowed column (the reference raises: softmax of +inf is NaN)", strict=False)
def test_overflowing_temperature_is_one_greedy_token(sampler_knobs):
    x = torch.randn(3, 203, generator=_G) * 3.0
    for kw in (dict(temperature=1e-39, top_k=5), dict(temperature=1e-39, top_p=0.9)):
        out = paths(sampler_knobs, x, **kw)
        assert torch.equal(out["search"], x.argmax(1))
        assert torch.equal(out["default"], out["search"]) and torch.equal(out["chain"], out["search"]), kw


@pytest.mark.parametrize("wide", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_gpu_launch_shapes_under_the_interpreter(wide, sampler_knobs, monkeypatch):
    """The GPU's launch shapes (``interpreting()`` patched off: one row per top-k program, 32/64-column groups,
    cand_tile-wide pieces of the compact tail (k = 3), FB-wide tiles of the whole-row fallback (group_cap = 4 < the
    groups reaching T0 for k >= 8 and for a row of ties), 1024-column chunks) run under the interpreter and draw
    the same tokens on every path. ``wide``: group_wide_vocab lowered below V (64-column groups,
    cand_tile_wide). Found nothing wrong (adv3)."""
    import rocm_inductor.providers.triton as PT

    monkeypatch.setattr(PT, "interpreting", lambda: False)
    sampler_knobs(group_cap=4)
    if wide:
        sampler_knobs(group_wide_vocab=100)
    v = 603
    x = torch.randn(3, v, generator=_G) * 2.0
    x[2] = 0.0
    x[2, 1::3] = 1.0
    cfg = S.fast_config(3, v)
    assert cfg["ROWS"] == 1 and cfg["G"] == (64 if wide else 32) and cfg["CJ"] < cfg["CC"]
    assert cfg["FB"] == S.knobs.current().fast_tile
    for kw in (dict(temperature=0.7, top_k=3, top_p=0.9), dict(top_k=8, min_p=0.1, t_rows=torch.tensor([0., .5, 1.])),
               dict(top_p=0.6, min_p=0.05)):
        out = paths(sampler_knobs, x, **kw)
        assert torch.equal(out["default"], out["search"]) and torch.equal(out["chain"], out["search"]), kw
