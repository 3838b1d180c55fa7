"""Triton sampler without top-k, session topp2 (issue 14): the shared four-lane noise and the restricted-winner
chain (``_chain_kernel``), under the interpreter (tiny shapes).

- Noise: :func:`_noise` (one Philox call per four columns, lanes interleaved by join/reshape) and
  :func:`_noise_at` (any columns, lane ``column % 4``) give bit-identical values, and the uniforms behind them
  pass a Kolmogorov-Smirnov test.
- Chain: a row closes when its candidate (the Gumbel-max over ``key >= lo``, lo a lower bound of the top-p
  threshold) is kept; rows whose candidates are rejected again and again (low p, high temperature, split
  rows, per-row p / min-p, a bf16 row of ties) still draw exactly the plain search's token (``winner=False``),
  and closed rows stop early (counted per launch).
"""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl
from sampling_checks import assert_rows_follow_filters
from scipy.stats import kstest

from rocm_inductor.providers.triton import sampling as S
from rocm_inductor.providers.triton.sampling import launch as L


@pytest.fixture(autouse=True)
def _chain_path(sampler_knobs):
    """These tests are about the multi-launch chain: keep the one-program-per-row kernel out."""
    sampler_knobs(row_path=False)


_G = torch.Generator().manual_seed(11)


@triton.jit
def _noise_pair(SEED, PERM, OUT_A, OUT_B, ROWS: tl.constexpr, W: tl.constexpr):
    rows = tl.arange(0, ROWS).to(tl.int64) + 3
    seed = tl.load(SEED)
    a = S._noise(seed, 8, rows, ROWS, W)  # columns 8 .. 8 + W - 1
    off = tl.arange(0, ROWS)[:, None] * W + tl.arange(0, W)[None, :]
    tl.store(OUT_A + off, a)
    cols = tl.load(PERM + off)  # any order of the same columns
    tl.store(OUT_B + off, S._noise_at(seed, cols, rows, ROWS, W))


def test_four_lane_noise_equals_per_column_noise_and_is_uniform():
    rows, w = 4, 256
    seed = torch.tensor([987654321], dtype=torch.int64)
    perm = torch.stack([torch.randperm(w, generator=_G) for _ in range(rows)]).to(torch.int32) + 8
    a = torch.empty(rows, w)
    b = torch.empty(rows, w)
    _noise_pair[(1,)](seed, perm, a, b, ROWS=rows, W=w)
    gathered = torch.gather(a, 1, (perm - 8).long())
    assert torch.equal(gathered, b)
    u = torch.exp(-torch.exp(-a.double())).flatten()  # Gumbel CDF: back to the uniforms
    assert kstest(u.numpy(), "uniform").pvalue > 1e-4
    assert len(set(a.flatten().tolist())) == a.numel()  # four lanes, no repeats


def _draw(x, seed, **kw):
    kw = {"temperature": 1.0, "top_p": 1.0, "min_p": 0.0, "t_rows": None, "p_rows": None, "mp_rows": None} | kw
    seed_t = torch.tensor([seed], dtype=torch.int64)
    return S.sample(x, seed_t, kw["t_rows"], kw["temperature"], None, 0, kw["p_rows"], kw["top_p"], kw["mp_rows"],
                    kw["min_p"], None, False, True)


def _counting(monkeypatch):
    """Wrap ``_chain_kernel`` to record (CUR, closed rows) after every launch."""
    orig, log = L._chain_kernel, []

    class Wrap:
        def __getitem__(self, grid):
            def go(*a, **k):
                orig[grid](*a, **k)
                log.append((k["CUR"], int((a[14] >= 0).sum())))
            return go
    monkeypatch.setattr(L, "_chain_kernel", Wrap())
    return log


@pytest.mark.parametrize("chunk", [None, pytest.param(64, marks=pytest.mark.slow)])
def test_chain_rejected_candidates_draw_the_searchs_tokens(chunk, sampler_knobs):
    """Low p and high temperature reject the first candidates of most rows; per-row p (0 and 1 included) and
    min-p; a bf16 row of exact ties; rows split into 64-column chunks. Same tokens as the plain search."""
    sampler_knobs(force_chunk=chunk)
    x = torch.randn(24, 301, generator=_G) * 2.5
    x[5] = 1.0  # all tied
    cases = [dict(temperature=2.0, top_p=0.1), dict(temperature=1.5, top_p=0.35, min_p=0.05),
             dict(p_rows=torch.linspace(0.0, 1.0, 24), mp_rows=torch.linspace(0.0, 0.2, 24), temperature=1.3)]
    # Split rows (5 chunks) take ~6x the interpreter time of unsplit ones (193 s vs 32 s with two seeds, 2-core
    # machine under load ~15): they draw with seed 1 only (24 rows, most first candidates rejected), unsplit rows
    # with both seeds.
    seeds = (1, 2) if chunk is None else (1,)
    for kw in cases:
        for xx in (x, x.to(torch.bfloat16)):
            for seed in seeds:
                sampler_knobs(winner=True)
                a = _draw(xx, seed, **kw)
                sampler_knobs(winner=False)
                assert torch.equal(a, _draw(xx, seed, **kw)), (kw, xx.dtype, seed)


def test_chain_schedule_covers_the_key_range():
    """Each pass of n pivots leaves at most ceil(d / n) keys: the schedule reaches width 1 from 2^32, no sooner
    than needed; without a tail it is :func:`winner_passes` long; fewer than 2 pivots are refused."""
    assert S.chain_schedule(8, width=2**24, tail=64) == (8, 8, 8, 64, 64, 64, 64)
    assert S.chain_schedule(16, width=2**24, tail=64) == (16, 16, 64, 64, 64, 64)
    assert S.chain_schedule(16, tail=0) == (16,) * S.winner_passes(16)
    assert S.chain_schedule(8, width=2**32, tail=4) == (4,) * 16
    for sched in (S.chain_schedule(8), S.chain_schedule(16, width=2**30, tail=32), S.chain_schedule(2, tail=64)):
        d = 2**32
        for n in sched:
            assert d > 1, sched
            d = -(-d // n)
        assert d == 1, sched
    with pytest.raises(ValueError):
        S.chain_schedule(8, tail=1)
    cfg = S.launch_config(32, 128256, interp=False)
    shape = S.chain_pass_shape(cfg, 64)
    assert shape["BLOCK"] * 64 == cfg["BLOCK"] * cfg["NP"] and shape["CB"] * 64 <= max(cfg["CB"] * cfg["NP"], 64)


@pytest.mark.parametrize("width,tail", [(2**32, 64), (2**28, 2), (2**24, None)])
def test_chain_pivot_schedules_draw_the_searchs_tokens(width, tail, sampler_knobs):
    """Rows still open when the pivot count changes (low p, high temperature: most first candidates rejected; split
    rows): every schedule draws the plain search's tokens."""
    sampler_knobs(chain_tail_width=width)
    sampler_knobs(chain_tail_np=tail)
    sampler_knobs(force_chunk=128)
    x = torch.randn(12, 517, generator=_G) * 2.5
    x[3] = 1.0  # all tied
    for kw in (dict(temperature=2.0, top_p=0.1), dict(p_rows=torch.linspace(0.0, 1.0, 12), temperature=1.4,
                                                     min_p=0.02)):
        for seed in (3, 4):
            sampler_knobs(winner=True)
            a = _draw(x, seed, **kw)
            sampler_knobs(winner=False)
            assert torch.equal(a, _draw(x, seed, **kw)), (width, tail, kw, seed)


def test_chain_closes_rows_early(sampler_knobs, monkeypatch):
    """p = 0.9: every row is closed well before the last launch (the winner is kept with probability >= p, a
    rejected row's next candidate is tested one or two launches later); min-p alone is launch 1 + one launch."""
    sampler_knobs(winner=True)
    x = torch.randn(64, 500, generator=_G) * 3
    log = _counting(monkeypatch)
    _draw(x, 5, temperature=0.7, top_p=0.9)
    assert len(log) == len(S.chain_schedule(S.knobs.current().interp_npiv)) + 1 and log[-1] == (3, 64)
    assert log[3][1] == 64, log  # all closed by the fourth chain launch (launch 5)
    log.clear()
    _draw(x, 5, temperature=0.7, min_p=0.1)
    assert [c for c, _ in log] == [3]


def test_chain_chi_square_with_rejections(sampler_knobs):
    """3000 identical rows, p low enough that the first candidate is rejected about half the time."""
    sampler_knobs(winner=True)
    assert_rows_follow_filters(lambda x, **kw: _draw(x, 17, **kw), torch.randn(29, generator=_G) * 1.2, 3000,
                               ((1.4, 0.5, 0.0), (1.0, 0.6, 0.08)))


def test_lane_accumulators_draw_the_same_tokens(sampler_knobs):
    """``lane_argmax`` (per-lane max / argmax over the chunk, reduced once) against the per-block reductions:
    top-p and min-p (chain), per-row k (the general path's draw), greedy, all -inf and tied rows, split rows."""
    sampler_knobs(force_chunk=64)
    x = torch.randn(12, 203, generator=_G) * 2.0
    x[0] = -float("inf")
    x[1] = 0.5
    x[2, 100] = float("inf")
    t_rows = torch.linspace(0.0, 1.5, 12)
    out = []
    for lane in (False, True):
        sampler_knobs(lane_argmax=lane)
        seed = torch.tensor([9], dtype=torch.int64)
        out.append(torch.stack([
            _draw(x, 9, temperature=0.9, top_p=0.6), _draw(x, 9, min_p=0.1, t_rows=t_rows),
            S.sample(x, seed, t_rows, 1.0, torch.full((12,), 30), 0, None, 0.8, None, 0.0, None, False, True)]))
    assert torch.equal(out[0], out[1])
    assert out[1][0, 0] == 0 and out[1][0, 2] == 100


_PTX_CHECK = """
import re, sys, triton
from triton.backends.compiler import GPUTarget
from rocm_inductor.providers.triton import sampling as S
n = 0
cases = [c for c in S._search_aot_cases() if c["name"].startswith("sample chain PREV=2 CUR=2") and "B=64" in c["name"]]
assert len(cases) == 3, [c["name"] for c in cases]  # head, switch to the tail's pivots, tail
for case in cases:
    src = triton.compiler.ASTSource(case["fn"], case["signature"], case["constexprs"])
    ptx = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": case["num_warps"]}).asm["ptx"]
    n += len(re.findall(r"\\b(?:div|rem)\\.[su]64\\b", ptx))
print(n)
"""


@pytest.mark.slow
def test_chain_pivots_compile_without_64bit_division():
    """sm_90 PTX of the chain's top-p passes (8 and 64 pivots) has no ``div``/``rem`` on 64-bit integers:
    ``_winner_pivot`` divides by two constants (multiply-shift). A select of two signed constant divisions of one
    dividend is folded by LLVM into one division by the selected divisor, a 64-bit division subroutine that cost
    ~10 us per call at V=32000 B=32 / 64 on the H200 (2026-12-01, benchmarks/RESULTS.md). Compiled ahead of time in a
    subprocess without the interpreter (as tests/test_triton_aot.py), no GPU needed."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    r = subprocess.run([sys.executable, "-c", _PTX_CHECK], env=env, capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1] == "0", r.stdout
