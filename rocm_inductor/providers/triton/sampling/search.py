"""Kernels of the general (search) path and of the restricted-winner chain (package docstring, "Layout" and
"Restricted-winner chain"): :func:`_step_kernel` (every launch of the plain search, and launch 1 of the chain),
:func:`_chain_kernel` (the chain's later launches), :func:`_pick_kernel` (each row's best chunk). Launched by
``launch``; their shapes are ``configs.launch_config``'s.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .common import (
    _KEY_END,
    _KEY_MIN,
    _count_ge,
    _count_ge3,
    _fold_draw,
    _key,
    _lane_reduce,
    _load,
    _load_at,
    _mass_below,
    _mass_below3,
    _narrow,
    _noise,
    _pivots,
    _reduce_chunks,
    _reduce_parts,
    _row_min_p,
    _row_temperature,
    _row_top_p,
    _scaled,
    _winner_filters,
)


@triton.jit(do_not_specialize=["step"])
def _step_kernel(
    X, stride_x, BAN, stride_ban, SEED,
    T_PTR, K_PTR, P_PTR, MINP_PTR,
    PMAX, CNT, MASS, ZP, ST, TK, GV, GI, OUT,
    B, V, NCH, step, t_val, k_val, p_val, omp_val, minp_val,
    T_ROWS: tl.constexpr, K_ROWS: tl.constexpr, P_ROWS: tl.constexpr, MINP_ROWS: tl.constexpr,
    USE_K: tl.constexpr, USE_P: tl.constexpr, USE_MINP: tl.constexpr,
    IS_PROBS: tl.constexpr, HAS_BAN: tl.constexpr, TOP_K_FIRST: tl.constexpr,
    PREV: tl.constexpr, CUR: tl.constexpr,
    CHUNK: tl.constexpr, BLOCK: tl.constexpr, ROWS: tl.constexpr, NP: tl.constexpr,
    NCHB: tl.constexpr, CB: tl.constexpr, WIN: tl.constexpr, ACC: tl.constexpr, LANE: tl.constexpr,
):
    """One launch of the sampler, program (row block, chunk); see the module docstring.

    ``WIN`` (no top-k; top-p and/or min-p; launch 1 only): also write each chunk's whole-row Gumbel-max to
    ``GV``/``GI`` and mark every row open (``OUT = -1``); :func:`_chain_kernel` runs the later launches.
    ``ACC``: search passes accumulate the (ROWS, NP, BLOCK) compare terms over the chunk and reduce once.
    ``LANE``: launch 1's max and the draws' argmax are kept per lane over the chunk and reduced once
    (:func:`_lane_best`; the same values and indices as the per-block reductions).

    ``PREV``: what the previous launch left (0: row maxima only, 1: a top-k pass, 2: a top-p pass).
    ``CUR``: what this launch does (0: maxima (+ top-k pass 1), 1: a top-k pass, 2: a top-p pass, 3: draw).
    ``step``: this launch's search-pass number g: it reads ``ST[g-1]`` and partials ``[(g-1) % 2]``, writes
    ``ST[g]`` (chunk 0) and partials ``[g % 2]``. ``ST``: int64 [passes + 2, 2, B] (lo, hi).
    """
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    rmask = rows < B
    chunk = tl.program_id(1)
    col0 = chunk * CHUNK
    ar = tl.arange(0, BLOCK)
    lead = rmask & ((tl.zeros([ROWS], dtype=tl.int32) + chunk) == 0)
    par_in = (step + 1) % 2
    par_out = step % 2
    st_in = ST + (step - 1).to(tl.int64) * 2 * B
    st_out = ST + step.to(tl.int64) * 2 * B
    # Per-row parameters (a tensor wins over the scalar).
    if T_ROWS:
        t = tl.load(T_PTR + rows, mask=rmask, other=1.0).to(tl.float32)
    else:
        t = tl.zeros([ROWS], dtype=tl.float32) + t_val
    greedy_t = t <= 0.0
    t_safe = tl.where(greedy_t, 1.0, t)
    if USE_K:
        if K_ROWS:
            k = tl.load(K_PTR + rows, mask=rmask, other=0).to(tl.int64)
        else:
            k = tl.zeros([ROWS], dtype=tl.int64) + k_val

    if CUR == 0:
        # Launch 1: this chunk's max; with top-k, pass 1's counts over the whole key range.
        m = tl.full([ROWS], float("-inf"), tl.float32)
        if USE_K:
            lo = tl.full([ROWS], _KEY_MIN, tl.int64)
            hi = tl.full([ROWS], _KEY_END, tl.int64)
            piv = _pivots(lo, hi, NP)
            cnt = tl.zeros([ROWS, NP], dtype=tl.int32)
        if WIN:
            seed = tl.load(SEED).to(tl.int64)
            best = tl.full([ROWS], float("-inf"), tl.float32)
            best_i = tl.zeros([ROWS], dtype=tl.int64) + col0
            if not LANE:  # placeholders: _fold_draw passes them through
                bv = best
                bi = best_i
        if LANE:
            mv = tl.full([ROWS, BLOCK], float("-inf"), tl.float32)
            bv = tl.full([ROWS, BLOCK], float("-inf"), tl.float32)
            bi = tl.zeros([ROWS, BLOCK], dtype=tl.int64) + col0
        for c0 in range(0, CHUNK, BLOCK):
            x, m2 = _load(X, stride_x, BAN, stride_ban, rows, rmask, col0 + c0 + ar, V, IS_PROBS, HAS_BAN)
            y = _scaled(x, t_safe[:, None])
            if LANE:
                mv = tl.maximum(mv, y)
            else:
                m = tl.maximum(m, tl.max(y, axis=1))
            if USE_K:
                cnt += _count_ge(_key(y), m2, piv)
            if WIN:
                score = tl.where(greedy_t[:, None], x, y + _noise(seed, col0 + c0, rows, ROWS, BLOCK))
                score = tl.where(m2, score, float("-inf"))
                bv, bi, best, best_i = _fold_draw(score, col0 + c0, bv, bi, best, best_i, ROWS, BLOCK, LANE)
        if LANE:
            m = tl.max(mv, axis=1)
            if WIN:
                best, best_i = _lane_reduce(bv, bi)
        tl.store(PMAX + rows * NCH + chunk, m, mask=rmask)
        if WIN:
            tl.store(GV + rows * NCH + chunk, best, mask=rmask)
            tl.store(GI + rows * NCH + chunk, best_i, mask=rmask)
            tl.store(OUT + rows, tl.full([ROWS], -1, tl.int64), mask=lead)  # open: :func:`_chain_kernel`
        if USE_K:
            jn = tl.arange(0, NP)
            tl.store(CNT + ((par_out * B + rows[:, None]) * NCH + chunk) * NP + jn[None, :], cnt,
                     mask=rmask[:, None])
            tl.store(st_out + rows, lo, mask=lead)
            tl.store(st_out + B + rows, hi, mask=lead)
    else:
        m = _reduce_chunks(PMAX, rows, rmask, NCH, NCHB, True)
        # Greedy rows: temperature <= 0, a +inf score, or nothing finite (m = -inf).
        greedy = greedy_t | (m == float("inf")) | (m == float("-inf"))
        m_safe = tl.where(greedy, 0.0, m)
        key_max = _key(m_safe).to(tl.int64)
        if USE_P:
            p, omp = _row_top_p(P_PTR, rows, rmask, p_val, omp_val, P_ROWS, ROWS)
            p_on = (p < 1.0) & (~greedy)
        mp = tl.zeros([ROWS], dtype=tl.float32)
        if USE_MINP:
            mp = _row_min_p(MINP_PTR, rows, rmask, minp_val, MINP_ROWS, ROWS)

        # Finish the previous pass: the interval it searched, narrowed by the chunk-summed partials.
        tk = tl.full([ROWS], _KEY_MIN, tl.int64)
        if PREV == 1:
            lo = tl.load(st_in + rows, mask=rmask, other=_KEY_MIN)
            hi = tl.load(st_in + B + rows, mask=rmask, other=_KEY_MIN + 1)
            piv = _pivots(lo, hi, NP)
            cnt = _reduce_parts(CNT, par_in, rows, rmask, B, NCH, ROWS, NP, NCHB, CB, True)
            lo, hi = _narrow(lo, hi, piv, cnt.to(tl.int64) >= k[:, None])
            k_on = (k > 0) & (k < V) & (~greedy)
            lo = tl.where(k_on, lo, _KEY_MIN)
            hi = tl.where(k_on, hi, _KEY_MIN + 1)
            tk = lo
        if PREV == 2:
            lo = tl.load(st_in + rows, mask=rmask, other=_KEY_MIN)
            hi = tl.load(st_in + B + rows, mask=rmask, other=_KEY_MIN + 1)
            piv = _pivots(lo, hi, NP)
            mass = _reduce_parts(MASS, par_in, rows, rmask, B, NCH, ROWS, NP, NCHB, CB, False)
            thr = omp * _reduce_chunks(ZP, rows, rmask, NCH, NCHB, False)
            lo, hi = _narrow(lo, hi, piv, mass <= thr[:, None])
            tk = tl.load(TK + rows, mask=rmask, other=_KEY_MIN)

        if CUR == 1 or CUR == 2:
            if CUR == 2:
                if TOP_K_FIRST:
                    base = tk
                else:
                    base = tl.full([ROWS], _KEY_MIN, tl.int64)
                if PREV != 2:
                    # First top-p pass: record top-k's threshold, start from [base, key_max + 1).
                    tl.store(TK + rows, tk, mask=lead)
                    lo = base
                    hi = tl.where(p_on & (p > 0.0), key_max + 1, lo + 1)
                    z = tl.zeros([ROWS], dtype=tl.float32)
                mass = tl.zeros([ROWS, NP], dtype=tl.float32)
            else:
                cnt = tl.zeros([ROWS, NP], dtype=tl.int32)
            tl.store(st_out + rows, lo, mask=lead)
            tl.store(st_out + B + rows, hi, mask=lead)
            piv = _pivots(lo, hi, NP)
            # a top-p pass after the first skips the chunk when none of its rows is still searching
            n_run = CHUNK
            if CUR == 2 and PREV == 2:
                n_run = CHUNK * (tl.max((rmask & ((hi - lo) > 1)).to(tl.int32), axis=0) > 0).to(tl.int32)
            if ACC:
                if CUR == 1:
                    cnt3 = tl.zeros([ROWS, NP, BLOCK], dtype=tl.int32)
                else:
                    mass3 = tl.zeros([ROWS, NP, BLOCK], dtype=tl.float32)
                    if PREV != 2:
                        z2 = tl.zeros([ROWS, BLOCK], dtype=tl.float32)
            for c0 in range(0, n_run, BLOCK):
                x, m2 = _load(X, stride_x, BAN, stride_ban, rows, rmask, col0 + c0 + ar, V, IS_PROBS, HAS_BAN)
                y = _scaled(x, t_safe[:, None])
                kk = _key(y)
                if CUR == 1:
                    if ACC:
                        cnt3 += _count_ge3(kk, m2, piv)
                    else:
                        cnt += _count_ge(kk, m2, piv)
                else:
                    e = tl.where(kk.to(tl.int64) >= base[:, None], tl.exp(y - m_safe[:, None]), 0.0)
                    if ACC:
                        mass3 += _mass_below3(kk, e, piv)
                        if PREV != 2:
                            z2 += e
                    else:
                        mass += _mass_below(kk, e, piv)
                        if PREV != 2:
                            z += tl.sum(e, axis=1)
            if ACC:
                if CUR == 1:
                    cnt = tl.sum(cnt3, axis=2)
                else:
                    mass = tl.sum(mass3, axis=2)
                    if PREV != 2:
                        z = tl.sum(z2, axis=1)
            jn = tl.arange(0, NP)
            poff = ((par_out * B + rows[:, None]) * NCH + chunk) * NP + jn[None, :]
            if CUR == 1:
                tl.store(CNT + poff, cnt, mask=rmask[:, None])
            else:
                tl.store(MASS + poff, mass, mask=rmask[:, None])
                if PREV != 2:
                    tl.store(ZP + rows * NCH + chunk, z, mask=rmask)

        if CUR == 3:
            # Thresholds, then this chunk's Gumbel-max (greedy rows: argmax of the raw masked logits).
            tp = tl.full([ROWS], _KEY_MIN, tl.int64)
            if PREV == 2:
                # p <= 0: only the largest token(s) survive.
                tp = tl.where(p_on & (p <= 0.0), key_max, tl.where(p_on, lo, _KEY_MIN))
            keep_from = tl.maximum(tk, tp)
            seed = tl.load(SEED).to(tl.int64)
            best = tl.full([ROWS], float("-inf"), tl.float32)
            best_i = tl.zeros([ROWS], dtype=tl.int64) + col0
            todo = tl.max(rmask.to(tl.int32), axis=0) > 0
            if LANE:
                bv = tl.full([ROWS, BLOCK], float("-inf"), tl.float32)
                bi = tl.zeros([ROWS, BLOCK], dtype=tl.int64) + col0
            else:  # placeholders: _fold_draw passes them through
                bv = best
                bi = best_i
            for c0 in range(0, CHUNK * todo.to(tl.int32), BLOCK):
                cols = col0 + c0 + ar
                x, m2 = _load(X, stride_x, BAN, stride_ban, rows, rmask, cols, V, IS_PROBS, HAS_BAN)
                y = _scaled(x, t_safe[:, None])
                keep = _key(y).to(tl.int64) >= keep_from[:, None]
                if USE_MINP:
                    keep = keep & ~(tl.exp(y - m_safe[:, None]) < mp[:, None])
                g = _noise(seed, col0 + c0, rows, ROWS, BLOCK)
                score = tl.where(keep & m2, y + g, float("-inf"))
                score = tl.where(greedy[:, None], x, score)
                score = tl.where(m2, score, float("-inf"))
                bv, bi, best, best_i = _fold_draw(score, col0 + c0, bv, bi, best, best_i, ROWS, BLOCK, LANE)
            if LANE:
                best, best_i = _lane_reduce(bv, bi)
            tl.store(GV + rows * NCH + chunk, best, mask=rmask)
            tl.store(GI + rows * NCH + chunk, best_i, mask=rmask)


@triton.jit
def _winner_pivot(lo, hi, wk, NP: tl.constexpr):
    """(ROWS, NP) int32 pivots of a chain pass over [lo, hi): where the candidate's key + 1 lies strictly inside
    (only in the first top-p pass: afterwards the interval lies on one side of it), ``NP - 1`` pivots at
    ``lo + d*j // NP`` plus that one, else :func:`_pivots`'s ``NP``. Either way the narrowed interval is at most
    ``ceil(d / NP)`` wide (:func:`winner_passes`); replacing the last of ``NP`` evenly spaced pivots instead could
    leave ``2d / (NP + 1)``. The narrowing needs no sorted pivots: the computed mass below a pivot is monotone
    in the pivot."""
    w1 = wk + 1
    inside = (w1 > lo) & (w1 < hi)
    j = tl.arange(0, NP).to(tl.int64) + 1
    # NP-ary pivots by an unsigned constant division (d*j >= 0) beside _pivots' signed one: LLVM folds a select
    # of two signed divisions of one dividend into one division by the selected divisor, a 64-bit division
    # subroutine (div.s64 in the sm_90 PTX) that cost ~10 us per call at V=32000 B=32 / 64 on the H200
    # (2026-12-01; tests/test_sampling_chain.py checks the PTX).
    even = (lo[:, None] + (((hi - lo)[:, None] * j[None, :]).to(tl.uint64) // NP).to(tl.int64)).to(tl.int32)
    piv = tl.where(inside[:, None], even, _pivots(lo, hi, NP))
    last = (j == NP)[None, :]
    return tl.where(last & inside[:, None], w1.to(tl.int32)[:, None], piv)


_NEED = tl.constexpr(-(2**40))  # candidate state: "drawn by this launch, in its GV/GI partials"


@triton.jit(do_not_specialize=["step"])
def _chain_kernel(
    X, stride_x, BAN, stride_ban, SEED, T_PTR, P_PTR, MINP_PTR,
    PMAX, MASS, ZP, CS, GV, GI, OUT,
    B, V, NCH, MSTRIDE, step, t_val, p_val, omp_val, minp_val,
    T_ROWS: tl.constexpr, P_ROWS: tl.constexpr, MINP_ROWS: tl.constexpr,
    USE_P: tl.constexpr, USE_MINP: tl.constexpr, IS_PROBS: tl.constexpr, HAS_BAN: tl.constexpr,
    PREV: tl.constexpr, CUR: tl.constexpr,
    CHUNK: tl.constexpr, BLOCK: tl.constexpr, ROWS: tl.constexpr, NP: tl.constexpr, PNP: tl.constexpr,
    NCHB: tl.constexpr, CB: tl.constexpr, ACC: tl.constexpr, LANE: tl.constexpr, DRAW: tl.constexpr,
):
    """Launch ``step`` >= 2 of the restricted-winner chain (no top-k: top-p and/or min-p; module docstring),
    program (row block, chunk), after :func:`_step_kernel`'s launch 1 (``WIN``: maxima, whole-row winner
    partials in ``GV/GI[1]``, ``OUT = -1``).

    Per row: the threshold interval [lo, hi) of the top-p search (t inside) and a candidate ``c`` = the
    Gumbel-max over ``{key >= lo'} & min-p`` for an earlier lower bound lo' <= t. ``c`` with ``key(c) >= t``
    is the draw's answer (the argmax over a superset of the kept set that lies in it; lowest index among ties
    in both), so the row is *closed*: the lead program (chunk 0) writes ``OUT[row] = c``. ``key(c) < lo``
    rejects ``c``; this launch draws the next candidate over ``{key >= lo}`` (partials ``GV/GI[step % 2]``).
    Otherwise this pass puts a pivot at ``key(c) + 1``, so the next launch decides. Programs whose rows are
    all closed return after one load of ``OUT``; a chunk streams only while one of its rows searches or draws.

    ``PREV``: 0 (the previous launch was launch 1) or 2 (a chain pass). ``CUR``: 2 (a search pass: masses at
    the pivots, ``Z`` in the first) or 3 (the last launch: the interval is one key, so a rejected row's new
    candidate is exact; with one chunk it goes straight to ``OUT``, else :func:`_pick_kernel` picks).
    ``CS``: int64 [launches + 1, 4, B] (lo, hi, candidate key or ``_NEED``, candidate token) per launch.
    ``NP``: this pass's pivots, ``PNP``: the previous pass's (:func:`chain_schedule`); ``CB``: the chunk step of
    the reduction of the previous pass's partials (:func:`chain_pass_shape`). ``MASS`` holds two halves of
    ``MSTRIDE`` (>= B * NCH * max NP) floats, [launch % 2], each a [B, NCH, NP] block of its writer's NP: a pass
    of 64 pivots must not overwrite the half of 8-pivot partials the other programs are still reading.
    ``DRAW`` off (host: launch 2 with top-p, no min-p, no per-row p, scalar p > 0): no row can reject
    launch 1's winner here (lo is the smallest key), so the draw code is compiled out. ``LANE``: as
    :func:`_step_kernel`'s.
    """
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    rmask = rows < B
    chunk = tl.program_id(1)
    col0 = chunk * CHUNK
    ar = tl.arange(0, BLOCK)
    lead = (tl.zeros([ROWS], dtype=tl.int32) + chunk) == 0
    par_in = (step + 1) % 2
    par_out = step % 2
    live = rmask & (tl.load(OUT + rows, mask=rmask, other=0) < 0)
    if tl.max(live.to(tl.int32), axis=0) > 0:
        t = _row_temperature(T_PTR, rows, rmask, t_val, T_ROWS, ROWS)
        greedy_t = t <= 0.0
        t_safe = tl.where(greedy_t, 1.0, t)
        m = _reduce_chunks(PMAX, rows, live, NCH, NCHB, True)
        greedy, m_safe, key_max, mp, omp, srch0, lo0 = _winner_filters(
            m, greedy_t, P_PTR, MINP_PTR, rows, rmask, p_val, omp_val, minp_val, P_ROWS, MINP_ROWS, USE_P, USE_MINP,
            ROWS)
        if PREV == 0:
            lo = lo0
            hi = tl.where(srch0, key_max + 1, lo + 1)
            ck = tl.full([ROWS], _NEED, tl.int64)
            ctok = tl.zeros([ROWS], dtype=tl.int64)
        else:
            st_in = CS + (step - 1).to(tl.int64) * 4 * B
            lo = tl.load(st_in + rows, mask=live, other=_KEY_MIN)
            hi = tl.load(st_in + B + rows, mask=live, other=_KEY_MIN + 1)
            ck = tl.load(st_in + 2 * B + rows, mask=live, other=_NEED)
            ctok = tl.load(st_in + 3 * B + rows, mask=live, other=0)
            if USE_P:  # the previous pass's pivots (PNP of them) and its per-chunk masses
                piv = _winner_pivot(lo, hi, ck, PNP)
                mass = _reduce_parts(MASS + par_in * MSTRIDE, 0, rows, live, B, NCH, ROWS, PNP, NCHB, CB, False)
                thr = omp * _reduce_chunks(ZP, rows, live, NCH, NCHB, False)
                lo, hi = _narrow(lo, hi, piv, mass <= thr[:, None])
        # The candidate the previous launch drew (its best chunk, the first among equals, as the pick).
        need = live & (ck == _NEED)
        cc = tl.arange(0, NCHB)
        pbase = (par_in * B + rows) * NCH
        gv = tl.load(GV + pbase[:, None] + cc[None, :], mask=need[:, None] & (cc < NCH)[None, :],
                     other=float("-inf"))
        tok = tl.load(GI + pbase + tl.argmax(gv, axis=1).to(tl.int64), mask=need, other=0)
        yw = _scaled(_load_at(X, rows * stride_x + tok, BAN, rows * stride_ban + tok, need, IS_PROBS, HAS_BAN), t_safe)
        ok = need & (~greedy)
        if USE_MINP and PREV == 0:
            ok = ok & ~(tl.exp(yw - m_safe) < mp)  # launch 1's winner ignored min-p; later ones are inside it
        ck = tl.where(need, tl.where(ok, _key(yw).to(tl.int64), _KEY_MIN - 1), ck)
        ctok = tl.where(need, tok, ctok)
        # greedy rows (launch 2 only) take launch 1's argmax of the raw logits
        kept = live & (greedy | ((ck >= lo) & (hi <= ck + 1)))
        tl.store(OUT + rows, ctok, mask=kept & lead)
        rej = live & (~kept) & (ck < lo)
        ck = tl.where(rej, _NEED, ck)
        srch = rows < 0
        if CUR == 2:
            st_out = CS + step.to(tl.int64) * 4 * B
            wmask = live & lead
            tl.store(st_out + rows, lo, mask=wmask)
            tl.store(st_out + B + rows, hi, mask=wmask)
            tl.store(st_out + 2 * B + rows, ck, mask=wmask)
            tl.store(st_out + 3 * B + rows, ctok, mask=wmask)
            srch = live & (~kept) & ((hi - lo) > 1)
        n_srch = tl.max(srch.to(tl.int32), axis=0)
        n_rej = tl.max(rej.to(tl.int32), axis=0) * DRAW
        piv = _winner_pivot(lo, hi, ck, NP)
        seed = tl.load(SEED).to(tl.int64)
        best = tl.full([ROWS], float("-inf"), tl.float32)
        best_i = tl.zeros([ROWS], dtype=tl.int64) + col0
        if ACC:
            mass3 = tl.zeros([ROWS, NP, BLOCK], dtype=tl.float32)
            z2 = tl.zeros([ROWS, BLOCK], dtype=tl.float32)
        mass = tl.zeros([ROWS, NP], dtype=tl.float32)
        z = tl.zeros([ROWS], dtype=tl.float32)
        if DRAW and LANE:
            bv = tl.full([ROWS, BLOCK], float("-inf"), tl.float32)
            bi = tl.zeros([ROWS, BLOCK], dtype=tl.int64) + col0
        else:  # placeholders: _fold_draw passes them through
            bv = best
            bi = best_i
        for c0 in range(0, CHUNK * tl.maximum(n_srch, n_rej), BLOCK):
            cols = col0 + c0 + ar
            x, m2 = _load(X, stride_x, BAN, stride_ban, rows, rmask, cols, V, IS_PROBS, HAS_BAN)
            y = _scaled(x, t_safe[:, None])
            kk = _key(y)
            if CUR == 2:
                if n_srch > 0:
                    # top-p alone: every key >= the (absent) top-k threshold, as _step_kernel's passes
                    e = tl.exp(y - m_safe[:, None])
                    if ACC:
                        mass3 += _mass_below3(kk, e, piv)
                        if PREV == 0:
                            z2 += e
                    else:
                        mass += _mass_below(kk, e, piv)
                        if PREV == 0:
                            z += tl.sum(e, axis=1)
            if DRAW:
                if n_rej > 0:
                    keep = rej[:, None] & m2 & (kk.to(tl.int64) >= lo[:, None])
                    if USE_MINP:
                        keep = keep & ~(tl.exp(y - m_safe[:, None]) < mp[:, None])
                    score = tl.where(keep, y + _noise(seed, col0 + c0, rows, ROWS, BLOCK), float("-inf"))
                    bv, bi, best, best_i = _fold_draw(score, col0 + c0, bv, bi, best, best_i, ROWS, BLOCK, LANE)
        if CUR == 2:
            if ACC:
                mass = tl.sum(mass3, axis=2)
                if PREV == 0:
                    z = tl.sum(z2, axis=1)
            jn = tl.arange(0, NP)
            poff = par_out * MSTRIDE + (rows[:, None] * NCH + chunk) * NP + jn[None, :]
            tl.store(MASS + poff, mass, mask=srch[:, None])
            if PREV == 0:
                tl.store(ZP + rows * NCH + chunk, z, mask=live)
        if DRAW:
            if LANE:
                best, best_i = _lane_reduce(bv, bi)
            obase = (par_out * B + rows) * NCH + chunk
            tl.store(GV + obase, best, mask=rej)
            tl.store(GI + obase, best_i, mask=rej)
            if CUR == 3 and NCHB == 1:
                tl.store(OUT + rows, best_i, mask=rej)


@triton.jit
def _pick_kernel(GV, GI, OUT, B, NCH, ROWS: tl.constexpr, NCHB: tl.constexpr, OPEN: tl.constexpr):
    """Per row, the token of the best chunk (the first chunk among equal values: the lowest index). ``OPEN``
    (the chain): only rows still open (``OUT < 0``); closed rows keep their token."""
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    rmask = rows < B
    if OPEN:
        rmask = rmask & (tl.load(OUT + rows, mask=rmask, other=0) < 0)
    cc = tl.arange(0, NCHB)
    msk = rmask[:, None] & (cc < NCH)[None, :]
    v = tl.load(GV + rows[:, None] * NCH + cc[None, :], mask=msk, other=float("-inf"))
    c = tl.argmax(v, axis=1).to(tl.int64)
    tok = tl.load(GI + rows * NCH + c, mask=rmask, other=0)
    tl.store(OUT + rows, tok, mask=rmask)
