"""Adversarial inputs for the restricted-winner chain's pivot schedule (``_chain`` / ``_chain_kernel``, session 6:
``chain_schedule`` switches from the launch's ``NP`` pivots to ``chain_tail_np`` once the key interval is at most
``chain_tail_width`` wide; every launch passes ``FP_OPTIONS``), under the interpreter (tiny shapes).

Contract: the chain draws exactly the plain search's token (``winner=False``, same seed) on every input, tokens
in [0, V), no crash. The one-program-per-row kernel is kept out (``row_path=False``) so the chain runs.

- The GPU launch shapes (:func:`launch_config` at B = 1..256, V = 32000..262144) give every pass of every schedule
  a power-of-two ``BLOCK`` >= 4 dividing ``CHUNK`` and a power-of-two ``CB`` <= ``NCHB``, within the launch's
  compare tile.
- Rows of ties (constant, two-valued, quarter steps; bf16 / fp16), -inf / NaN mixes, two finite tokens, bans,
  per-row p (0, 1e-30, 1e-8, 0.01, 1 - 1e-7, 1), tiny scalar p, high and per-row temperature, min-p with top-p,
  under extreme schedules (2 or 4 pivots from the start, 64 from the start, a tail that never starts, 128
  pivots), split rows (4 / 8 / 64-column chunks, V not a multiple of the chunk), several programs of rows with a
  partly masked last one: all draw the plain search's tokens.
- Known exception (xfail, not strict: it rests on rounding coincidences that another numpy build could sum
  away): where ``(1 - p) * Z`` lies within float32 rounding of the mass below a token, a tail pass's masses
  (another ``BLOCK`` / ``CB``, so another summation order) can put the threshold one key-set away from the plain
  search's, and the token differs: the same float32-rounding exception the module documents between chunkings.
"""

from __future__ import annotations

import pytest
import torch

from rocm_inductor.providers.triton import sampling as S

INF, NAN = float("inf"), float("nan")


@pytest.fixture(autouse=True)
def _chain_path(sampler_knobs):
    """The multi-launch chain, not the one-program-per-row kernel."""
    sampler_knobs(row_path=False)


def _draw(x, seed, temperature=1.0, top_p=1.0, min_p=0.0, t_rows=None, p_rows=None, mp_rows=None, ban=None):
    seed_t = torch.tensor([seed], dtype=torch.int64)
    return S.sample(x, seed_t, t_rows, temperature, None, 0, p_rows, top_p, mp_rows, min_p, ban, False, True)


def _check(sampler_knobs, x, seed, **kw):
    """Chain == plain search, tokens in [0, V)."""
    sampler_knobs(winner=True)
    a = _draw(x, seed, **kw)
    sampler_knobs(winner=False)
    ref = _draw(x, seed, **kw)
    v = x.shape[1]
    assert ((a >= 0) & (a < v)).all(), a
    assert torch.equal(a, ref), ((a != ref).nonzero().flatten().tolist(), a, ref)


#: Vocabularies where the GPU shapes change: below / at / above small_work and mid_work with the batch, powers of two
#: and not (GPT-2 50257, Llama-3 128256, Qwen 151936 / 152064, Gemma 256000).
_VOCABS = (32000, 50257, 65536, 128256, 151936, 152064, 256000, 262144)


def test_chain_pass_shapes_at_gpu_sizes():
    """Every pass of the default schedule and of 2 / 4 / 128-pivot tails, at the GPU shapes of B = 1..256: BLOCK a
    power of two >= 4 dividing CHUNK, CB a power of two <= NCHB, the compare tile no larger than the launch's
    (or the 4-column floor's); the default schedules end at width 1 and switch at 2^24."""
    for b in range(1, 257):
        for v in _VOCABS:
            cfg = S.launch_config(b, v, interp=False)
            sched = S.chain_schedule(cfg["NP"])
            assert sched == {8: (8, 8, 8, 64, 64, 64, 64), 16: (16, 16, 64, 64, 64, 64)}[cfg["NP"]], (b, v)
            for npiv in set(sched) | {2, 4, 128}:
                sh = S.chain_pass_shape(cfg, npiv)
                blk, cb = sh["BLOCK"], sh["CB"]
                assert blk >= 4 and blk & (blk - 1) == 0 and cfg["CHUNK"] % blk == 0, (b, v, npiv, cfg, sh)
                assert cb >= 1 and cb & (cb - 1) == 0 and cb <= cfg["NCHB"], (b, v, npiv, cfg, sh)
                tile = cfg["ROWS"] * npiv * blk
                assert tile <= max(cfg["ROWS"] * cfg["NP"] * cfg["BLOCK"], cfg["ROWS"] * npiv * 4), (b, v, npiv)


def test_chain_schedule_extremes():
    """Width 2^32 with 2 / 4 pivots (tail from the start), width 2 (the tail never starts), a 128-pivot tail; a pivot
    count that is not a power of two is refused up front (it crashed in the first tail launch)."""
    assert S.chain_schedule(16, width=2**32, tail=2) == (2,) * 32
    assert S.chain_schedule(16, width=2**32, tail=4) == (4,) * 16
    assert S.chain_schedule(16, width=2, tail=64) == (16,) * 8
    assert S.chain_schedule(16, width=2**32, tail=64) == (64,) * 6
    assert S.chain_schedule(16, tail=128) == (16, 16, 128, 128, 128, 128)
    assert S.chain_schedule(8, width=2**24, tail=None) == S.chain_schedule(8, width=2**24, tail=64)  # module default
    with pytest.raises(ValueError, match="powers of two"):  # tl.arange(0, 48) failed inside the first tail launch
        S.chain_schedule(16, tail=48)
    with pytest.raises(ValueError, match="powers of two"):
        S.chain_schedule(12, tail=0)


def _adversarial_rows(b, v, g):
    """(b, v) float32 logits: row kinds cycle through random, constant, two-valued, every third -inf, every fourth
    NaN, two finite tokens, quarter-step ties, random."""
    x = torch.randn(b, v, generator=g) * 2.5
    for i in range(b):
        k = i % 8
        if k == 1:
            x[i] = 0.75
        elif k == 2:
            x[i] = torch.where(torch.rand(v, generator=g) < 0.3, 2.0, -1.0)
        elif k == 3:
            x[i, ::3] = -INF
        elif k == 4:
            x[i, 1::4] = NAN
        elif k == 5:
            x[i, : v - 2] = -INF
        elif k == 6:
            x[i] = (x[i] * 4).round() / 4
    return x


def _cases(b, v, g):
    p_rows = torch.tensor([0.0, 1e-30, 1e-8, 0.01, 1 - 1e-7, 0.3, 0.9, 1.0], dtype=torch.float64).repeat(b)[:b]
    p_rows = p_rows[torch.randperm(b, generator=g)]
    ban = torch.rand(b, v, generator=g) < 0.2
    return [dict(temperature=5.0, top_p=0.05), dict(p_rows=p_rows, temperature=1.7),
            dict(p_rows=p_rows, min_p=0.1, temperature=2.0, ban=ban),
            dict(top_p=1e-8, min_p=0.02, t_rows=torch.rand(b, generator=g) * 4),
            dict(top_p=0.999, mp_rows=torch.rand(b, generator=g) * 0.3, temperature=30.0)]


# (module settings, (B, V), marks): the default schedule, tails from the first pass (2 / 4 / 64 pivots), a tail that
# never starts, a 128-pivot tail; unsplit rows and 4 / 8 / 64-column chunks (V not a multiple of them). With 64-column
# chunks interp_compare_tile = 32768 makes programs of 32 rows (16 pivots x 64 columns; B = 70: 3 programs, the last
# with 6 rows; V = 67: a 3-column last chunk), 4096 programs of 4 rows (18 programs, the last with 2 rows; slow:
# ~25 s under the interpreter; V = 37, one chunk).
_SLOW = pytest.mark.slow
_SCHEDULES = [
    (dict(), (17, 203), ()),
    (dict(force_chunk=64, interp_compare_tile=32768), (70, 67), ()),
    (dict(force_chunk=64, interp_compare_tile=4096), (70, 37), (_SLOW,)),
    (dict(chain_tail_width=2**32, chain_tail_np=2), (3, 37), ()),
    (dict(force_chunk=4, chain_tail_width=2**32, chain_tail_np=4), (5, 37), (_SLOW,)),
    (dict(force_chunk=64, chain_tail_width=2, chain_tail_np=64), (9, 130), ()),
    (dict(force_chunk=8, chain_tail_np=128), (9, 67), (_SLOW,)),
    (dict(chain_tail_width=2**32, chain_tail_np=64), (1, 517), ()),
]


@pytest.mark.parametrize("case", [pytest.param(i, marks=m) for i, (_, _, m) in enumerate(_SCHEDULES)])
def test_chain_adversarial_rows_draw_the_searchs_tokens(case, sampler_knobs):
    """Ties, -inf / NaN mixes, bans, extreme and per-row p, per-row temperature, min-p with top-p, in float32 /
    bfloat16 / float16, under the schedule and launch shape ``settings``: the plain search's tokens."""
    settings, shape, _ = _SCHEDULES[case]
    sampler_knobs(**settings)
    g = torch.Generator().manual_seed(1000 + case)
    x = _adversarial_rows(*shape, g)
    cases = _cases(*shape, g)
    dtypes = (torch.float32, torch.bfloat16, torch.float16)
    for i, kw in enumerate(cases):
        _check(sampler_knobs, x.to(dtypes[i % 3]), 100 + i, **kw)


def _edge_top_p(x, temperature, j):
    """Per-row float64 p whose ``1 - p`` (float32) is within 0, +-1, +-2 float32 ulps (by row) of the exact share
    of the mass below the (j+2)-th largest token: the top-p threshold sits on float32 rounding of the masses."""
    y = x.float() / temperature
    e = torch.exp(y - y.max(1, keepdim=True).values).double()
    cum = torch.cumsum(torch.sort(e, 1).values, 1)
    omp = (cum[:, -2 - j] / cum[:, -1]).float()
    for i in range(x.shape[0]):
        off = i % 5 - 2
        for _ in range(abs(off)):
            omp[i] = torch.nextafter(omp[i], torch.tensor(2.0 if off > 0 else -1.0))
    return 1.0 - omp.double()


def _edge_draws(sampler_knobs, tail, js=(0, 1)):
    sampler_knobs(force_chunk=64)
    sampler_knobs(chain_tail_np=tail)
    g = torch.Generator().manual_seed(3)
    differ = []
    for j in js:  # 0 / 1: the threshold at the 2nd / 3rd largest token
        x = torch.randn(64, 301, generator=g) * 3
        p = _edge_top_p(x, 1.3, j)
        for seed in (1, 2):
            sampler_knobs(winner=True)
            a = _draw(x, seed, p_rows=p, temperature=1.3)
            sampler_knobs(winner=False)
            ref = _draw(x, seed, p_rows=p, temperature=1.3)
            differ += [(j, seed, r) for r in (a != ref).nonzero().flatten().tolist()]
            assert ((a >= 0) & (a < x.shape[1])).all()
    assert not differ, differ


def test_chain_without_tail_matches_on_rounding_edges(sampler_knobs):
    """Top-p thresholds on float32 rounding edges: with one pivot count throughout (no tail), every pass sums the
    masses in the plain search's order (same BLOCK / CB), so the tokens agree exactly."""
    _edge_draws(sampler_knobs, None, js=(0,))


@pytest.mark.xfail(strict=False, raises=AssertionError, reason=(
    "tail passes (chain_pass_shape: BLOCK * NP / 64 columns, CB * NP / 64 chunks) sum the masses below the pivots in "
    "another float32 order than the plain search, so where (1 - p) * Z is within rounding of the mass below a "
    "token the threshold moves by one token and the draw differs (interpreter, defaults chain_tail_width 2^24, "
    "CHAIN_TAIL_NP 64: 3 of 256 draws here; not small to fix: same BLOCK / CB for 64 pivots is an 8x "
    "larger compare tile, and on a GPU tl.sum's order also follows the (ROWS, NP, BLOCK) layout)"))
def test_chain_tail_matches_on_rounding_edges(sampler_knobs):
    """The same inputs with the default 64-pivot tail."""
    _edge_draws(sampler_knobs, 64)
