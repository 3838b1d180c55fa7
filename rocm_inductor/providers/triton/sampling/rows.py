"""Triton sampler, one program per row: top-p and/or min-p without top-k in two launches (issue 14).

Same meaning, noise and tokens as :mod:`rocm_inductor.providers.triton.sampling`'s restricted-winner chain
(package docstring: int32 order-preserving keys, HF top-p ``t`` = the largest key whose strictly-lower
mass is ``<= (1 - p) * Z``, min-p ``exp(s - max) >= min_p``, Gumbel-max draw with Philox noise of (seed,
column, row)), but each row's decisions run in one program, so the chain's per-launch row state and its
fixed launch sequence (``P + 2`` launches, ~2.5 us each at small V) become a loop inside one kernel
(after a split first pass, see "Two launches" below):

1. one pass over the row: the max of ``s = x / T``, the whole-row Gumbel winner ``c`` (greedy rows:
   temperature <= 0 or a non-finite max take it at once; a row greedy by its max with T > 0, i.e. ``x / T``
   overflowed to +-inf or T is NaN, takes the argmax of x instead, one more pass, as the plain search) and
   every column's score;
2. while the row is open: ``c`` lies in ``S(lo) = {key >= lo} & min-p`` for a lower bound ``lo <= t``, so it
   is the draw's answer iff ``key(c) >= t``, i.e. iff the mass of ``{key <= key(c)}`` exceeds ``(1 - p) Z``
   (one pass: that mass and ``Z``; skipped for the row max, always kept). A kept ``c`` closes the row;
   a rejected one proves ``t > key(c)``: ``lo = key(c) + 1`` and one more pass draws the Gumbel-max over the
   new ``S(lo)`` with the same noise (the stored scores; a ``c`` that fails min-p, possible only for the
   first, is redrawn inside min-p without moving ``lo``).
3. after ``knobs.Knobs.row_tries`` redraws the row runs the exact (NP+1)-ary search of ``t`` over ``[lo, key_max]``
   and one draw over ``{key >= t}`` (bounded: :func:`.configs.search_passes` passes), so no input makes
   the loop long. With p = 0.9 a candidate is rejected with probability <= 0.1, so the expected cost is
   about three passes over the row (the first from HBM, the others from L2).

Measured (H200, ``benchmarks/results/runs/sampling.csv``, run 2026-12-01-1756-sampling-op; the variants in
``knobs.Knobs.row_path``'s comment): top-p 0.9 alone at V=32000 B = 1 / 8 / 32 / 64 12.8 / 18.1 / 25.1 / 31.0 us (the
chain: 22.0 / 27.5 / 48.2 / 63.2; FlashInfer 0.6.18, the fastest measured, 22.6 / 27.5 / 31.9 / 34.0 in an
earlier run, RESULTS.md); the same tokens as the plain search at B=64 for V in {32000, 128256, 151936}.

Every pass streams the row in tiles of ``BLOCK`` columns with per-lane accumulators reduced once; masses
are float32 lane sums in a fixed order (deterministic: the same seed gives the same token). The token equals
the chain's except where the top-p boundary lies within float32 rounding of the differently ordered sums.

Two launches: the first pass runs split over chunks of the row (:func:`_first_kernel`, all SMs busy at any
B: the Philox noise is most of its work) and stores every column's draw score ``s + g`` (float32, B x V of
scratch), so the row kernel's redraws read scores instead of recomputing noise; the row kernel reduces the
chunks' partials and runs steps 2-3.

Where it runs (:func:`row_path`): where it measured faster than the chain (small V at every B, and B >= 64):
one program per row re-reads a 128k+ row alone, which the chain's split passes do faster at B <= 32.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from . import knobs
from .common import (
    AOT_FLAGS,
    FP_OPTIONS,
    _key,
    _lane_best,
    _load,
    _load_at,
    _mass_below,
    _narrow,
    _noise,
    _pivots,
    _row_temperature,
    _scaled,
    _winner_filters,
)


def row_path(b: int, v: int, use_p: bool) -> bool:
    """Whether a (b, v) batch without top-k (top-p and/or min-p: ``use_p`` says whether top-p is on) takes the
    one-program-per-row kernel: ``knobs.Knobs.row_path`` when set, else where it measured faster (see that knob):
    top-p at ``v <= ROW_MAX_V`` or ``b >= ROW_MIN_B_WIDE``; min-p alone at ``b >= ROW_MIN_B_WIDE`` or
    ``b >= ROW_MIN_B_MINP`` with ``v <= ROW_MAX_V``."""
    kn = knobs.current()
    if kn.row_path is not None:
        return bool(kn.row_path)
    if b >= kn.row_min_b_wide:
        return True
    return v <= kn.row_max_v and (use_p or b >= kn.row_min_b_minp)


def row_config(b: int, v: int, interp: bool | None = None) -> dict[str, int]:
    """Launch shape for a (b, v) batch: ``BLOCK`` (tile columns of the row kernel's passes, a power of two >= 4:
    the noise takes four columns per Philox call), ``FB`` (the exact search's tile, BLOCK / NP), ``ROWS`` (rows
    per program: 1 on a GPU), ``num_warps``; the split first pass's ``CHUNK`` (0: none), ``NCH`` chunks per
    row, ``NCHB`` (next_pow2(NCH), 0 without a split), ``BLOCK1``, ``num_warps1``."""
    kn = knobs.current()
    from .. import interpreting

    interp = interpreting() if interp is None else interp
    vp = max(4, triton.next_power_of_2(max(v, 1)))
    block = min(vp, kn.interp_row_block if interp else kn.row_block if v <= kn.row_max_v else kn.row_block_wide)
    rows = max(1, min(kn.interp_tile // block, triton.next_power_of_2(max(b, 1)))) if interp else 1
    if interp:
        chunk = kn.interp_row_chunk or 0
    elif kn.row_chunk is not None:
        chunk = kn.row_chunk
    else:
        chunk = min(max(triton.next_power_of_2(triton.cdiv(b * v, kn.row_target_programs)), kn.row_min_chunk),
                    kn.row_max_chunk)
    chunk = min(max(4, triton.next_power_of_2(chunk)), vp) if chunk else 0
    nch = triton.cdiv(v, chunk) if chunk else 0
    block1 = min(chunk, block if interp else kn.row_block1) if chunk else 0
    return dict(BLOCK=block, FB=max(4, block // kn.row_np), NP=kn.row_np, ROWS=rows, num_warps=kn.row_warps,
                CHUNK=chunk, NCH=nch, NCHB=triton.next_power_of_2(nch) if nch else 0, BLOCK1=block1,
                num_warps1=kn.row_warps1)


@triton.jit
def _lane_pick(bv, bi, V):
    """(ROWS,) best score of the lanes and its column: the lowest column among the lanes holding the maximum
    (all -inf: 0). :func:`.common._lane_reduce` for int32 columns (``V`` as the sentinel: 2^31 is no int32)."""
    best = tl.max(bv, axis=1)
    return best, tl.min(tl.where(bv == best[:, None], bi, V), axis=1).to(tl.int64)


@triton.jit
def _first_pass(X, stride_x, BAN, stride_ban, SC, seed, rows, rmask, c_lo, c_hi, V, t_safe, greedy_t,
                IS_PROBS: tl.constexpr, HAS_BAN: tl.constexpr, BLOCK: tl.constexpr, ROWS: tl.constexpr):
    """Over columns ``[c_lo, c_hi)`` (c_lo a multiple of BLOCK): (ROWS,) max of ``x / T``, best draw score and
    its column (the Gumbel winner; temperature <= 0: the argmax of ``x``). Stores every column's draw score
    ``s + g`` in ``SC`` (float32 (B, V)), so later draws need no Philox."""
    ar = tl.arange(0, BLOCK)
    mv = tl.full([ROWS, BLOCK], float("-inf"), tl.float32)
    bv = tl.full([ROWS, BLOCK], float("-inf"), tl.float32)
    bi = tl.zeros([ROWS, BLOCK], dtype=tl.int32)
    for c0 in range(c_lo, c_hi, BLOCK):
        cols = c0 + ar
        x, m2 = _load(X, stride_x, BAN, stride_ban, rows, rmask, cols, V, IS_PROBS, HAS_BAN)
        y = _scaled(x, t_safe[:, None])
        mv = tl.maximum(mv, y)
        sc = y + _noise(seed, c0, rows, ROWS, BLOCK)
        tl.store(SC + rows[:, None] * V + cols[None, :], sc, mask=m2)
        score = tl.where(greedy_t[:, None], x, sc)
        bv, bi = _lane_best(tl.where(m2, score, float("-inf")), cols[None, :] + bi * 0, bv, bi)
    best, best_i = _lane_pick(bv, bi, V)
    return tl.max(mv, axis=1), best, best_i


@triton.jit
def _first_kernel(X, stride_x, BAN, stride_ban, SEED, T_PTR, SC, PM, PV, PI, B, V, NCH, t_val,
                  T_ROWS: tl.constexpr, IS_PROBS: tl.constexpr, HAS_BAN: tl.constexpr, CHUNK: tl.constexpr,
                  BLOCK: tl.constexpr, ROWS: tl.constexpr):
    """Split first pass, program (row block, chunk): the chunk's :func:`_first_pass` partials to
    ``PM/PV/PI[row, chunk]`` (max, best draw score, its column), scores to ``SC``."""
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    rmask = rows < B
    chunk = tl.program_id(1)
    seed = tl.load(SEED).to(tl.int64)
    t = _row_temperature(T_PTR, rows, rmask, t_val, T_ROWS, ROWS)
    greedy_t = t <= 0.0
    t_safe = tl.where(greedy_t, 1.0, t)
    c_lo = chunk * CHUNK
    m, best, best_i = _first_pass(X, stride_x, BAN, stride_ban, SC, seed, rows, rmask, c_lo,
                                  tl.minimum(c_lo + CHUNK, V), V,
                                  t_safe, greedy_t, IS_PROBS, HAS_BAN, BLOCK, ROWS)
    off = rows * NCH + chunk
    tl.store(PM + off, m, mask=rmask)
    tl.store(PV + off, best, mask=rmask)
    tl.store(PI + off, best_i, mask=rmask)


@triton.jit
def _mass_pass(X, stride_x, BAN, stride_ban, rows, rmask, V, t_safe, m_safe, ck,
               IS_PROBS: tl.constexpr, HAS_BAN: tl.constexpr, BLOCK: tl.constexpr, ROWS: tl.constexpr):
    """(ROWS,) ``Z = sum exp(s - max)`` and the mass of the keys ``<= ck``."""
    ar = tl.arange(0, BLOCK)
    za = tl.zeros([ROWS, BLOCK], dtype=tl.float32)
    la = tl.zeros([ROWS, BLOCK], dtype=tl.float32)
    for c0 in range(0, V, BLOCK):
        x, m2 = _load(X, stride_x, BAN, stride_ban, rows, rmask, c0 + ar, V, IS_PROBS, HAS_BAN)
        y = _scaled(x, t_safe[:, None])
        e = tl.exp(y - m_safe[:, None])
        za += e
        la += tl.where(_key(y).to(tl.int64) <= ck[:, None], e, 0.0)
    return tl.sum(za, axis=1), tl.sum(la, axis=1)


@triton.jit
def _draw_pass(X, stride_x, BAN, stride_ban, SC, rows, rmask, V, t_safe, m_safe, lo, mp,
               USE_MINP: tl.constexpr, IS_PROBS: tl.constexpr, HAS_BAN: tl.constexpr, BLOCK: tl.constexpr,
               ROWS: tl.constexpr, RAW: tl.constexpr):
    """(ROWS,) Gumbel-max column over ``{key >= lo}`` (and min-p): the chain's draw with the same noise (the
    first pass's scores ``SC``, read only where kept). ``RAW``: instead the argmax of the masked logits ``x``
    (lowest column among ties; nothing finite: 0), the greedy answer of a row whose ``x / T`` overflowed to
    +-inf (or a NaN temperature), as the plain search draws it (``SC``, t_safe .. mp unused)."""
    ar = tl.arange(0, BLOCK)
    bv = tl.full([ROWS, BLOCK], float("-inf"), tl.float32)
    bi = tl.zeros([ROWS, BLOCK], dtype=tl.int32)
    for c0 in range(0, V, BLOCK):
        cols = c0 + ar
        x, m2 = _load(X, stride_x, BAN, stride_ban, rows, rmask, cols, V, IS_PROBS, HAS_BAN)
        if RAW:
            score = tl.where(m2, x, float("-inf"))
        else:
            y = _scaled(x, t_safe[:, None])
            keep = m2 & (_key(y).to(tl.int64) >= lo[:, None])
            if USE_MINP:
                keep = keep & ~(tl.exp(y - m_safe[:, None]) < mp[:, None])
            score = tl.load(SC + rows[:, None] * V + cols[None, :], mask=keep, other=float("-inf"))
        bv, bi = _lane_best(score, cols[None, :] + bi * 0, bv, bi)
    return _lane_pick(bv, bi, V)[1]


@triton.jit
def _search(X, stride_x, BAN, stride_ban, rows, rmask, V, t_safe, m_safe, lo, hi, thr,
            IS_PROBS: tl.constexpr, HAS_BAN: tl.constexpr, FB: tl.constexpr, NP: tl.constexpr,
            ROWS: tl.constexpr):
    """(ROWS,) the top-p threshold ``t`` in ``[lo, hi)``: (NP+1)-ary search on the mass strictly below each
    pivot (``<= thr`` moves lo up), one pass per step until every interval is one key wide."""
    ar = tl.arange(0, FB)
    while tl.max((hi - lo).to(tl.int64), axis=0) > 1:
        piv = _pivots(lo, hi, NP)
        mass = tl.zeros([ROWS, NP], dtype=tl.float32)
        for c0 in range(0, V, FB):
            x, m2 = _load(X, stride_x, BAN, stride_ban, rows, rmask, c0 + ar, V, IS_PROBS, HAS_BAN)
            y = _scaled(x, t_safe[:, None])
            mass += _mass_below(_key(y), tl.exp(y - m_safe[:, None]), piv)
        lo, hi = _narrow(lo, hi, piv, mass <= thr[:, None])
    return lo


@triton.jit
def _row_kernel(
    X, stride_x, BAN, stride_ban, SEED, T_PTR, P_PTR, MINP_PTR, SC, PM, PV, PI, OUT,
    B, V, NCH, t_val, p_val, omp_val, minp_val,
    T_ROWS: tl.constexpr, P_ROWS: tl.constexpr, MINP_ROWS: tl.constexpr,
    USE_P: tl.constexpr, USE_MINP: tl.constexpr, IS_PROBS: tl.constexpr, HAS_BAN: tl.constexpr,
    BLOCK: tl.constexpr, FB: tl.constexpr, NP: tl.constexpr, TRIES: tl.constexpr, ROWS: tl.constexpr,
    NCHB: tl.constexpr,
):
    """Program i samples rows ``i * ROWS ..`` (module docstring; ROWS = 1 on a GPU); writes ``OUT``. Rows of
    one program share the loop: a pass runs while any of them needs it, and updates only those.
    ``NCHB`` 0: the first pass runs here; else :func:`_first_kernel` ran it in ``NCH`` chunks per row
    (partials ``PM/PV/PI``, NCHB = next_pow2(NCH))."""
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    rmask = rows < B
    t = _row_temperature(T_PTR, rows, rmask, t_val, T_ROWS, ROWS)
    greedy_t = t <= 0.0
    t_safe = tl.where(greedy_t, 1.0, t)
    if NCHB == 0:
        seed = tl.load(SEED).to(tl.int64)
        m, _best, tok = _first_pass(X, stride_x, BAN, stride_ban, SC, seed, rows, rmask, 0, V, V, t_safe, greedy_t,
                                    IS_PROBS, HAS_BAN, BLOCK, ROWS)
    else:
        # the chunks' partials: the first chunk holding the best score (its lowest column), as one pass
        cc = tl.arange(0, NCHB)
        pm2 = rmask[:, None] & (cc < NCH)[None, :]
        poff = rows[:, None] * NCH + cc[None, :]
        m = tl.max(tl.load(PM + poff, mask=pm2, other=float("-inf")), axis=1)
        pv = tl.load(PV + poff, mask=pm2, other=float("-inf"))
        win = tl.argmax(pv, axis=1).to(tl.int64)
        tok = tl.load(PI + rows * NCH + win, mask=rmask, other=0).to(tl.int64)
    # greedy rows (temperature <= 0, a +inf score, nothing finite) keep the first pass's winner
    greedy, m_safe, key_max, mp, omp, srch, lo = _winner_filters(
        m, greedy_t, P_PTR, MINP_PTR, rows, rmask, p_val, omp_val, minp_val, P_ROWS, MINP_ROWS, USE_P, USE_MINP, ROWS)
    # The first pass's winner is the argmax of x only where T <= 0; a row made greedy by ``x / T`` reaching
    # +-inf (tiny T, huge |x|, a NaN T) takes the argmax of x as the plain search does (not the lowest column
    # whose score overflowed, nor column 0 when every score is -inf but some x is finite).
    regreedy = rmask & greedy & (~greedy_t)
    if tl.max(regreedy.to(tl.int32), axis=0) > 0:
        raw = _draw_pass(X, stride_x, BAN, stride_ban, SC, rows, rmask, V, t_safe, m, lo, mp, False, IS_PROBS,
                         HAS_BAN, BLOCK, ROWS, True)
        tok = tl.where(regreedy, raw, tok)
    live = rmask & (~greedy)
    yw = _scaled(_load_at(X, rows * stride_x + tok, BAN, rows * stride_ban + tok, live, IS_PROBS, HAS_BAN), t_safe)
    ck = _key(yw).to(tl.int64)
    ok = ck >= lo
    if USE_MINP:
        ok = ok & ~(tl.exp(yw - m_safe) < mp)  # the first winner ignored min-p; redraws are inside it
    tries = 0
    while tl.max(live.to(tl.int32), axis=0) > 0:
        chk = live & ok & srch & (ck < key_max)  # the row max is always kept
        if tl.max(chk.to(tl.int32), axis=0) > 0:
            z, mle = _mass_pass(X, stride_x, BAN, stride_ban, rows, rmask, V, t_safe, m_safe, ck, IS_PROBS,
                                HAS_BAN, BLOCK, ROWS)
            kept = mle > omp * z
            lo = tl.where(chk & (~kept), ck + 1, lo)
            ok = ok & (kept | (~chk))
        live = live & (~ok)
        if tl.max(live.to(tl.int32), axis=0) > 0:
            tries += 1
            if tries > TRIES:
                # the exact search of t from the bound reached: the draw below is then the answer
                if USE_P:
                    z, _mle = _mass_pass(X, stride_x, BAN, stride_ban, rows, rmask, V, t_safe, m_safe, ck,
                                         IS_PROBS, HAS_BAN, BLOCK, ROWS)
                    run = live & srch
                    hi = tl.where(run, key_max + 1, lo + 1)
                    lo = _search(X, stride_x, BAN, stride_ban, rows, rmask, V, t_safe, m_safe, lo, hi, omp * z,
                                 IS_PROBS, HAS_BAN, FB, NP, ROWS)
            new = _draw_pass(X, stride_x, BAN, stride_ban, SC, rows, rmask, V, t_safe, m_safe, lo, mp, USE_MINP,
                             IS_PROBS, HAS_BAN, BLOCK, ROWS, False)
            tok = tl.where(live, new, tok)
            if tries > TRIES:
                live = rows < 0
            else:
                yw = _scaled(_load_at(X, rows * stride_x + tok, BAN, rows * stride_ban + tok, live, IS_PROBS,
                                      HAS_BAN), t_safe)
                ck = tl.where(live, _key(yw).to(tl.int64), ck)
                ok = live  # a redraw lies in S(lo) and min-p by construction
    tl.store(OUT + rows, tok, mask=rmask)


def sample_rows(x: torch.Tensor, seed: torch.Tensor, ts: torch.Tensor | None, ps: torch.Tensor | None,
                mps: torch.Tensor | None, ban_t: torch.Tensor | None, ban_stride: int, use_p: bool, use_minp: bool,
                is_probs: bool, scalars: tuple, out: torch.Tensor) -> torch.Tensor:
    """Launch :func:`_first_kernel` (unless the first pass is unsplit) and :func:`_row_kernel` for top-p and/or
    min-p without top-k (capture-safe: no host sync, a B x V float32 scratch of scores).

    Args:
        x: (B, V) float16/bfloat16/float32 scores, unit column stride, B >= 0.
        seed: int64 device tensor (its first element keys the Philox noise).
        ts / ps / mps: (B,) per-row temperature (float32) / top-p (float64) / min-p (float32), or None for
            the scalars; ban_t: (B or 1, V) bool/uint8 mask of banned tokens (row stride ``ban_stride``) or None.
        scalars: ``(temperature, top_k, p, 1 - p, min_p)`` as :func:`.launch._sample` prepares them.
        out: (B,) int64, written and returned.

    Returns:
        ``out``: one token id in [0, V) per row (math: the module docstring; meaning: HF's chain as
        :func:`rocm_inductor.providers.reference_sampling.sample_ref`). Raises nothing itself: the arguments are
        validated by ``rocm_inductor.ops.sampling`` before any provider runs.
    """
    kn = knobs.current()
    b, v = x.shape
    if b == 0:
        return out
    cfg = row_config(b, v)
    t_val, _k, p_val, omp_val, minp_val = scalars
    dummy = out
    ban_arg = dummy if ban_t is None else ban_t
    t_arg = dummy if ts is None else ts
    seed = seed.reshape(-1)
    sc = torch.empty(b, v, dtype=torch.float32, device=x.device)
    nch = cfg["NCH"]
    if nch:
        pm = torch.empty(b, nch, dtype=torch.float32, device=x.device)
        pv = torch.empty_like(pm)
        pi = torch.empty(b, nch, dtype=torch.int32, device=x.device)
        _first_kernel[(triton.cdiv(b, cfg["ROWS"]), nch)](
            x, x.stride(0), ban_arg, ban_stride, seed, t_arg, sc, pm, pv, pi, b, v, nch, t_val,
            T_ROWS=ts is not None, IS_PROBS=is_probs, HAS_BAN=ban_t is not None, CHUNK=cfg["CHUNK"],
            BLOCK=cfg["BLOCK1"], ROWS=cfg["ROWS"], num_warps=cfg["num_warps1"], **FP_OPTIONS)
    else:
        pm = pv = pi = sc
    _row_kernel[(triton.cdiv(b, cfg["ROWS"]),)](
        x, x.stride(0), ban_arg, ban_stride, seed, t_arg, dummy if ps is None else ps,
        dummy if mps is None else mps, sc, pm, pv, pi, out, b, v, nch, t_val, p_val, omp_val, minp_val,
        T_ROWS=ts is not None, P_ROWS=ps is not None, MINP_ROWS=mps is not None, USE_P=use_p, USE_MINP=use_minp,
        IS_PROBS=is_probs, HAS_BAN=ban_t is not None, BLOCK=cfg["BLOCK"], FB=cfg["FB"], NP=cfg["NP"],
        TRIES=kn.row_tries, ROWS=cfg["ROWS"], NCHB=cfg["NCHB"], num_warps=cfg["num_warps"], **FP_OPTIONS)
    return out


def aot_cases() -> list[dict[str, Any]]:
    """The row kernel (first pass split and in-kernel) and the split first pass at their GPU specialisations
    for V = 32000: float32 top-p alone and bf16 top-p + min-p with per-row parameters and a ban mask
    (preamble targets: sm_90, gfx942, gfx950)."""
    kn = knobs.current()
    sig = {"X": "*fp32", "stride_x": "i32", "BAN": "*i1", "stride_ban": "i32", "SEED": "*i64", "T_PTR": "*fp32",
           "P_PTR": "*fp64", "MINP_PTR": "*fp32", "SC": "*fp32", "PM": "*fp32", "PV": "*fp32", "PI": "*i32",
           "OUT": "*i64", "B": "i32", "V": "i32", "NCH": "i32", "t_val": "fp32", "p_val": "fp32",
           "omp_val": "fp32", "minp_val": "fp32"}
    flags = ("T_ROWS", "P_ROWS", "MINP_ROWS", "USE_P", "USE_MINP", "IS_PROBS", "HAS_BAN", "BLOCK", "FB", "NP",
             "TRIES", "ROWS", "NCHB")
    sig1 = {k: sig[k] for k in ("X", "stride_x", "BAN", "stride_ban", "SEED", "T_PTR", "SC", "PM", "PV", "PI", "B",
                                "V", "NCH", "t_val")}
    flags1 = ("T_ROWS", "IS_PROBS", "HAS_BAN", "CHUNK", "BLOCK", "ROWS")
    cfg = row_config(64, 32000, interp=False)
    consts = {"BLOCK": cfg["BLOCK"], "FB": cfg["FB"], "NP": cfg["NP"], "TRIES": kn.row_tries, "ROWS": 1}
    cases = []
    for name, (dt, on) in AOT_FLAGS.items():
        for nchb in (0, cfg["NCHB"] or 8):
            case = {"name": f"sample rows {name} NCHB={nchb}", "fn": _row_kernel,
                    "signature": {**sig, "X": dt, **{k: "constexpr" for k in flags}},
                    "constexprs": {**on, **consts, "NCHB": nchb}, "num_warps": cfg["num_warps"]}
            if nchb == 0:
                # AOT 2026-12-01, triton 3.9: 16 / 128 B of sm_90 stack (the noise of an 8192-column tile in the
                # row's own program); the GPU default splits the first pass (ROW_CHUNK None), clean
                case["known_spill"] = "unsplit first pass (ROW_CHUNK=0, not the GPU default): sm_90 stack"
            cases.append(case)
        case = {"name": f"sample rows first pass {name}", "fn": _first_kernel,
                "signature": {**sig1, "X": dt, **{k: "constexpr" for k in flags1}},
                "constexprs": {"T_ROWS": on["T_ROWS"], "IS_PROBS": False, "HAS_BAN": on["HAS_BAN"],
                               "CHUNK": cfg["CHUNK"] or 4096, "BLOCK": cfg["BLOCK1"] or 2048, "ROWS": 1},
                "num_warps": cfg["num_warps1"]}
        if on["HAS_BAN"]:
            case["known_spill"] = "bf16 + per-row T + ban: 8 B of sm_90 stack (triton 3.9; float32 scalars clean)"
        cases.append(case)
    return [{**c, "options": dict(FP_OPTIONS)} for c in cases]  # as launched
