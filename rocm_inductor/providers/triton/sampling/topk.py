"""Kernels of the two-launch top-k path (package docstring, "Top-k path"): :func:`_group_max_kernel` (launch 1,
the group maxima) and :func:`_topk_draw_kernel` (launch 2, one program per row: the bound, the gathered candidates,
the compact or searched tail, the draw). Launched by ``launch._sample_topk``; shapes ``configs.fast_config``.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .common import (
    _KEY_MIN,
    _count_ge_reg,
    _fold_best,
    _key,
    _load_at,
    _mass_below_reg,
    _narrow,
    _noise_at,
    _pivots,
    _row_min_p,
    _row_temperature,
    _row_top_p,
    _scaled,
    _unkey,
)


@triton.jit
def _group_max_kernel(X, stride_x, BAN, stride_ban, T_PTR, GM, B, V, NG, t_val,
                      T_ROWS: tl.constexpr, IS_PROBS: tl.constexpr, HAS_BAN: tl.constexpr,
                      G: tl.constexpr, CG: tl.constexpr, SBG: tl.constexpr, ROWS: tl.constexpr):
    """Launch 1 of the top-k path, program (row block, group block): ``GM[row, g] = max(x / T)`` over the
    ``G`` columns of group ``g`` (the only full read of the logits)."""
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    rmask = rows < B
    t = _row_temperature(T_PTR, rows, rmask, t_val, T_ROWS, ROWS)
    t_safe = tl.where(t <= 0.0, 1.0, t)
    g0 = tl.program_id(1).to(tl.int64) * CG
    ag = tl.arange(0, SBG)
    aj = tl.arange(0, G)
    for s0 in tl.static_range(0, CG, SBG):
        gi = g0 + s0 + ag
        cols = gi[None, :, None] * G + aj[None, None, :]
        msk = rmask[:, None, None] & (cols < V)
        x = _load_at(X, rows[:, None, None] * stride_x + cols, BAN, rows[:, None, None] * stride_ban + cols, msk,
                     IS_PROBS, HAS_BAN)
        gm = tl.max(_scaled(x, t_safe[:, None, None]), axis=2)
        tl.store(GM + rows[:, None] * NG + gi[None, :], gm, mask=rmask[:, None] & (gi < NG)[None, :])


@triton.jit
def _cand(CAND, rows, q, full, n_keep, V, G: tl.constexpr, GCAP: tl.constexpr):
    """(ROWS, FB) columns and validity of candidate positions ``q``: the whole row when ``full``, else
    position ``q`` = column ``q % G`` of the ``q // G``-th gathered group (ascending columns)."""
    slot = q // G
    sel = (slot < n_keep[:, None]) & (~full[:, None])
    gid = tl.load(CAND + rows[:, None] * GCAP + slot, mask=sel, other=0).to(tl.int64)
    cols = tl.where(full[:, None], q.to(tl.int64), gid * G + (q % G))
    valid = tl.where(full[:, None], q < V, sel & (cols < V))
    return cols, valid


@triton.jit
def _row_tile(X, xrow, BAN, brow, CAND, rows, rmask, full, n_keep, t_safe, q, V, IS_PROBS: tl.constexpr,
              HAS_BAN: tl.constexpr, G: tl.constexpr, GCAP: tl.constexpr):
    """One tile of :func:`_topk_slow`'s whole-row loop: columns ``q``, their validity (``full`` rows only) and
    the scaled logits ``x / T`` there."""
    cols, valid = _cand(CAND, rows, q, full, n_keep, V, G, GCAP)
    valid = valid & rmask[:, None] & full[:, None]
    return cols, valid, _scaled(_load_at(X, xrow + cols, BAN, brow + cols, valid, IS_PROBS, HAS_BAN), t_safe[:, None])


@triton.jit
def _topk_slow(X, stride_x, BAN, stride_ban, seed, CAND, rows, rmask, full, t_safe, m_safe, key_max, k, t0,
               p, omp, p_on, mp, V, USE_P: tl.constexpr, USE_MINP: tl.constexpr, IS_PROBS: tl.constexpr,
               HAS_BAN: tl.constexpr, G: tl.constexpr, GCAP: tl.constexpr, FB: tl.constexpr, NP: tl.constexpr,
               NPASS: tl.constexpr, ROWS: tl.constexpr):
    """Whole-row fallback of launch 2 for the ``full`` rows (more than GCAP groups reach T0: ties): the same
    searches and draw as the register path, streaming the row in FB-column tiles. Returns (ROWS,) tokens."""
    n_keep = tl.zeros([ROWS], dtype=tl.int32)
    n_items = V
    qa = tl.arange(0, FB)[None, :]
    xrow = rows[:, None] * stride_x
    brow = rows[:, None] * stride_ban
    lo = t0
    hi = key_max + 1
    for _it in range(NPASS):  # a loop, not unrolled: compile time
        piv = _pivots(lo, hi, NP)
        cnt = tl.zeros([ROWS, NP], dtype=tl.int32)
        for q0 in range(0, n_items, FB):
            cols, valid, y = _row_tile(X, xrow, BAN, brow, CAND, rows, rmask, full, n_keep, t_safe, q0 + qa, V,
                                        IS_PROBS, HAS_BAN, G, GCAP)
            cnt += _count_ge_reg(_key(y), valid, piv)
        lo, hi = _narrow(lo, hi, piv, cnt.to(tl.int64) >= k[:, None])
    tk = lo
    tp = tl.full([ROWS], _KEY_MIN, tl.int64)
    if USE_P:
        z = tl.zeros([ROWS], dtype=tl.float32)
        for q0 in range(0, n_items, FB):
            cols, valid, y = _row_tile(X, xrow, BAN, brow, CAND, rows, rmask, full, n_keep, t_safe, q0 + qa, V,
                                        IS_PROBS, HAS_BAN, G, GCAP)
            kk = _key(y).to(tl.int64)
            z += tl.sum(tl.where(valid & (kk >= tk[:, None]), tl.exp(y - m_safe[:, None]), 0.0), axis=1)
        thr = omp * z
        lo = tk
        hi = tl.where(p_on & (p > 0.0), key_max + 1, lo + 1)
        for _it in range(NPASS):  # a loop, not unrolled: compile time
            piv = _pivots(lo, hi, NP)
            mass = tl.zeros([ROWS, NP], dtype=tl.float32)
            for q0 in range(0, n_items, FB):
                cols, valid, y = _row_tile(X, xrow, BAN, brow, CAND, rows, rmask, full, n_keep, t_safe, q0 + qa, V,
                                            IS_PROBS, HAS_BAN, G, GCAP)
                kk = _key(y)
                e = tl.where(valid & (kk.to(tl.int64) >= tk[:, None]), tl.exp(y - m_safe[:, None]), 0.0)
                mass += _mass_below_reg(kk, e, piv)
            lo, hi = _narrow(lo, hi, piv, mass <= thr[:, None])
        tp = tl.where(p_on & (p <= 0.0), key_max, tl.where(p_on, lo, _KEY_MIN))
    keep_from = tl.maximum(tk, tp)
    best = tl.full([ROWS], float("-inf"), tl.float32)
    best_i = tl.zeros([ROWS], dtype=tl.int64)
    for q0 in range(0, n_items, FB):
        cols, valid, y = _row_tile(X, xrow, BAN, brow, CAND, rows, rmask, full, n_keep, t_safe, q0 + qa, V,
                                    IS_PROBS, HAS_BAN, G, GCAP)
        blk, blk_i = _gumbel_best(y, cols, valid, _key(y).to(tl.int64) >= keep_from[:, None], rows, m_safe, mp,
                                  seed, V, USE_MINP, ROWS, FB)
        best, best_i = _fold_best(blk, blk_i, best, best_i)
    return best_i


@triton.jit
def _gumbel_best(y, cols, valid, keep, rows, m_safe, mp, seed, V, USE_MINP: tl.constexpr, ROWS: tl.constexpr,
                 W: tl.constexpr):
    """Per row, the best Gumbel-perturbed kept logit of a (ROWS, W) tile and its column (lowest among ties);
    noise :func:`_noise_at` (lane column % 4 of Philox(seed; counter (column // 4, row))), as the general path."""
    keep = keep & valid
    if USE_MINP:
        keep = keep & ~(tl.exp(y - m_safe[:, None]) < mp[:, None])
    score = tl.where(keep, y + _noise_at(seed, cols, rows, ROWS, W), float("-inf"))
    blk = tl.max(score, axis=1)
    blk_i = tl.min(tl.where(keep & (score == blk[:, None]), cols, V), axis=1)
    return blk, blk_i


@triton.jit
def _gather(X, stride_x, BAN, stride_ban, CAND, rows, rmask, n_keep, t_safe, V, IS_PROBS: tl.constexpr,
            HAS_BAN: tl.constexpr, G: tl.constexpr, GCAP: tl.constexpr, CT: tl.constexpr):
    """Launch 2's (ROWS, CT) candidates: the columns of the row's ``n_keep`` gathered groups (``CAND``), their
    validity, scaled logits ``x / T`` and int32 keys."""
    cols, valid = _cand(CAND, rows, tl.arange(0, CT)[None, :], rows < 0, n_keep, V, G, GCAP)
    valid = valid & rmask[:, None]
    y = _scaled(_load_at(X, rows[:, None] * stride_x + cols, BAN, rows[:, None] * stride_ban + cols, valid,
                         IS_PROBS, HAS_BAN), t_safe[:, None])
    return cols, valid, y, _key(y)


@triton.jit
def _bound_pass(ek, em, piv, k, lo, hi, c_lo, active, GCAP: tl.constexpr):
    """One pass of launch 2's bound search over the group-max keys ``ek`` (ROWS, ET) with pivots ``piv``
    (ROWS, NPB, any order): rows still ``active`` raise ``lo`` to the largest pivot with at least k groups
    reaching it (``c_lo``: that count) and lower ``hi``; a row stops once at most GCAP groups reach ``lo``."""
    cnt = _count_ge_reg(ek, em, piv).to(tl.int64)
    ok = cnt >= k[:, None]
    c_new = tl.min(tl.where(ok, cnt, c_lo[:, None]), axis=1)  # count at the largest pivot kept (decreasing)
    lo2, hi2 = _narrow(lo, hi, piv, ok)
    lo = tl.where(active, lo2, lo)
    hi = tl.where(active, hi2, hi)
    c_lo = tl.where(active, c_new, c_lo)
    return lo, hi, c_lo, active & ((hi - lo) > 1) & (c_lo > GCAP)


@triton.jit
def _topk_search_draw(y, cols, valid, kk, rows, rmask, t0, key_max, m_safe, k, p, omp, p_on, mp, seed, V,
                      USE_P: tl.constexpr, USE_MINP: tl.constexpr, NP: tl.constexpr, ROWS: tl.constexpr,
                      CT: tl.constexpr):
    """Launch 2's tail over the (ROWS, CT) gathered candidates by pivot searches: the exact k-th key from
    [T0, max] (ties kept), HF top-p on the renormalised top-k set (the largest key whose strictly-lower mass
    is <= (1 - p) * Z; p <= 0 keeps the largest token(s)), min-p, the Gumbel-max draw. Returns (ROWS,) int64
    tokens. Used where more than ``CC`` candidates reach T0 (ties), or everywhere with ``CC = 0``."""
    lo = t0
    hi = key_max + 1
    while tl.max((rmask & ((hi - lo) > 1)).to(tl.int32), axis=0) > 0:  # until every row's interval is one key
        piv = _pivots(lo, hi, NP)
        lo, hi = _narrow(lo, hi, piv, _count_ge_reg(kk, valid, piv).to(tl.int64) >= k[:, None])
    tk = lo
    tp = tl.full([ROWS], _KEY_MIN, tl.int64)
    if USE_P:
        e = tl.where(valid & (kk.to(tl.int64) >= tk[:, None]), tl.exp(y - m_safe[:, None]), 0.0)
        thr = omp * tl.sum(e, axis=1)
        lo = tk
        hi = tl.where(p_on & (p > 0.0), key_max + 1, lo + 1)
        while tl.max((rmask & ((hi - lo) > 1)).to(tl.int32), axis=0) > 0:
            piv = _pivots(lo, hi, NP)
            lo, hi = _narrow(lo, hi, piv, _mass_below_reg(kk, e, piv) <= thr[:, None])
        tp = tl.where(p_on & (p <= 0.0), key_max, tl.where(p_on, lo, _KEY_MIN))
    keep_from = tl.maximum(tk, tp)
    _best, best_i = _gumbel_best(y, cols, valid, kk.to(tl.int64) >= keep_from[:, None], rows, m_safe, mp, seed, V,
                                 USE_MINP, ROWS, CT)
    return best_i


@triton.jit
def _cbuf_piece(CBUF, rows, rmask, n_c, j0, CC: tl.constexpr, CJ: tl.constexpr):
    """(ROWS, CJ) int32 keys (``_KEY_MIN`` past the row's ``n_c`` packed candidates) and float32 values of
    slots ``j0 .. j0 + CJ`` of the compact scratch row (re-read: L1-resident, written by this program)."""
    ja = j0 + tl.arange(0, CJ)
    vj = rmask[:, None] & (ja[None, :] < n_c[:, None])
    kj = tl.where(vj, (tl.load(CBUF + rows[:, None] * CC + ja[None, :], mask=vj, other=0) >> 32).to(tl.int32),
                  _KEY_MIN)
    return kj, _unkey(kj)


@triton.jit
def _topk_compact_draw(CBUF, y, cols, valid, kk, rows, rmask, t0, key_max, m_safe, k, p, omp, p_on, mp, seed, V,
                       USE_P: tl.constexpr, USE_MINP: tl.constexpr, ROWS: tl.constexpr, CT: tl.constexpr,
                       CC: tl.constexpr, CJ: tl.constexpr):
    """Launch 2's tail by compaction (``knobs.Knobs.cand_cap``): the candidates with key >= T0 (every column >= the
    k-th value) are packed ``key << 32 | column`` (ascending column) into the row's ``CBUF`` scratch row and
    read back as (ROWS, CC) registers; then, with all-pairs (CC x CC) compares (the j side in CJ-wide pieces
    re-read from the scratch row when CJ < CC: fewer live registers) and no search:

    - k-th key ``tk`` = the largest key ``key_i`` with ``count(key >= key_i) >= k`` (the pivot search's answer:
      ``count(key >= t)`` only steps at candidate keys), at least T0;
    - top-p: candidate i is kept iff ``mass(key <= key_i) > (1 - p) * Z`` over the top-k set, i.e. ``tp`` is
      the smallest such key (the largest key whose strictly-lower mass is <= (1 - p) * Z, as the search),
      at most the row max; p <= 0 keeps the largest token(s);
    - min-p and the Gumbel-max draw with the same (seed, column, row) noise.

    Returns (ROWS,) int64 tokens and (ROWS,) bool ``big``: rows with more than CC candidates (their token is
    not valid here; the caller runs :func:`_topk_search_draw` for them). Masses are float32 sums in another
    order than the search's: a top-p boundary may differ within float32 rounding, as between chunkings."""
    kk64 = kk.to(tl.int64)
    sel = valid & (kk64 >= t0[:, None])
    n_c = tl.sum(sel.to(tl.int32), axis=1)
    pos = tl.cumsum(sel.to(tl.int32), axis=1) - 1
    tl.store(CBUF + rows[:, None] * CC + pos, (kk64 << 32) | cols, mask=sel & (pos < CC))
    tl.debug_barrier()
    ca = tl.arange(0, CC)
    vc = rmask[:, None] & (ca[None, :] < n_c[:, None])
    pk = tl.load(CBUF + rows[:, None] * CC + ca[None, :], mask=vc, other=0)
    kc = tl.where(vc, (pk >> 32).to(tl.int32), _KEY_MIN)  # below every real key (-inf's: -2^31 + 2^23)
    colc = pk - ((pk >> 32) << 32)
    yc = _unkey(kc)
    kc64 = kc.to(tl.int64)
    # exact k-th key (ties kept): count_i = #{j: key_j >= key_i} (int32 compares), j in CJ-wide pieces
    if CJ >= CC:
        cnt = tl.sum((kc[:, None, :] >= kc[:, :, None]).to(tl.int32), axis=2)
    else:
        cnt = tl.zeros([ROWS, CC], dtype=tl.int32)
        for j0 in tl.static_range(0, CC, CJ):
            kj, _yj = _cbuf_piece(CBUF, rows, rmask, n_c, j0, CC, CJ)
            cnt += tl.sum((kj[:, None, :] >= kc[:, :, None]).to(tl.int32), axis=2)
    tk = tl.max(tl.where(vc & (cnt >= k[:, None]), kc64, t0[:, None]), axis=1)
    tp = tl.full([ROWS], _KEY_MIN, tl.int64)
    top = vc & (kc64 >= tk[:, None])
    if USE_P:
        e = tl.where(top, tl.exp(yc - m_safe[:, None]), 0.0)
        thr = omp * tl.sum(e, axis=1)
        if CJ >= CC:
            mle = tl.sum(tl.where(kc[:, None, :] <= kc[:, :, None], e[:, None, :], 0.0), axis=2)
        else:
            mle = tl.zeros([ROWS, CC], dtype=tl.float32)
            for j0 in tl.static_range(0, CC, CJ):
                kj, yj = _cbuf_piece(CBUF, rows, rmask, n_c, j0, CC, CJ)
                ej = tl.where(kj.to(tl.int64) >= tk[:, None], tl.exp(yj - m_safe[:, None]), 0.0)
                mle += tl.sum(tl.where(kj[:, None, :] <= kc[:, :, None], ej[:, None, :], 0.0), axis=2)
        tpd = tl.min(tl.where(top & (mle > thr[:, None]), kc64, key_max[:, None]), axis=1)
        tp = tl.where(p_on & (p <= 0.0), key_max, tl.where(p_on, tl.minimum(tpd, key_max), _KEY_MIN))
    keep_from = tl.maximum(tk, tp)
    _best, best_i = _gumbel_best(yc, colc, vc, kc64 >= keep_from[:, None], rows, m_safe, mp, seed, V, USE_MINP,
                                 ROWS, CC)
    return best_i, (n_c > CC) & rmask


@triton.jit
def _topk_draw_kernel(
    X, stride_x, BAN, stride_ban, SEED, T_PTR, P_PTR, MINP_PTR, GM, CAND, CBUF, OUT,
    B, V, NG, k_val, t_val, p_val, omp_val, minp_val,
    T_ROWS: tl.constexpr, P_ROWS: tl.constexpr, MINP_ROWS: tl.constexpr,
    USE_P: tl.constexpr, USE_MINP: tl.constexpr, IS_PROBS: tl.constexpr, HAS_BAN: tl.constexpr,
    G: tl.constexpr, GCAP: tl.constexpr, ET: tl.constexpr, CT: tl.constexpr, FB: tl.constexpr,
    NP: tl.constexpr, NPASS: tl.constexpr, CC: tl.constexpr, CJ: tl.constexpr, NPB: tl.constexpr,
    GEO: tl.constexpr, ROWS: tl.constexpr,
):
    """Launch 2 of the top-k path, one program per row block (one row on a GPU); module docstring. The group
    maxima (ET) and the gathered candidate columns (CT) stay in registers; the tail runs on the compacted
    candidates (``CC`` > 0, :func:`_topk_compact_draw`) or by pivot searches (:func:`_topk_search_draw`)."""
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    rmask = rows < B
    t = _row_temperature(T_PTR, rows, rmask, t_val, T_ROWS, ROWS)
    greedy_t = t <= 0.0
    t_safe = tl.where(greedy_t, 1.0, t)
    k = tl.zeros([ROWS], dtype=tl.int64) + k_val
    ea = tl.arange(0, ET)
    em = rmask[:, None] & (ea < NG)[None, :]
    ev = tl.load(GM + rows[:, None] * NG + ea[None, :], mask=em, other=float("-inf"))
    m = tl.max(ev, axis=1)
    best_g = tl.argmax(ev, axis=1).to(tl.int64)
    greedy = greedy_t | (m == float("inf")) | (m == float("-inf"))
    m_safe = tl.where(greedy, 0.0, m)
    key_max = _key(m_safe).to(tl.int64)
    # Greedy token: the first column of the first group holding the max (torch.argmax's tie rule).
    aj = tl.arange(0, G)
    gcols = best_g[:, None] * G + aj[None, :]
    gm2 = rmask[:, None] & (gcols < V)
    yg = _scaled(_load_at(X, rows[:, None] * stride_x + gcols, BAN, rows[:, None] * stride_ban + gcols, gm2,
                          IS_PROBS, HAS_BAN), t_safe[:, None])
    tok_g = tl.min(tl.where(gm2 & (yg == m[:, None]), gcols, V), axis=1)
    tok_g = tl.where(tok_g >= V, 0, tok_g)

    # 1. T0 = a lower bound of the k-th largest group max: every column >= the row's k-th value lies in a
    #    group whose max is >= T0. Any lo of the search is such a bound (count(>= lo) >= k): stop as soon as at
    #    most GCAP groups reach it.
    ek = _key(ev)
    lo = tl.full([ROWS], _KEY_MIN, tl.int64)
    hi = key_max + 1
    c_lo = tl.zeros([ROWS], dtype=tl.int64) + NG
    active = rmask & ((hi - lo) > 1) & (c_lo > GCAP)
    if GEO:  # first pass: pivots 2^31 .. 2^10 keys below the row max (geometric), clamped into (lo, hi)
        sh = 31 - (21 * tl.arange(0, NPB).to(tl.int64)) // (NPB - 1)
        d = tl.full([NPB], 1, tl.int64) << sh
        piv = tl.maximum(hi[:, None] - d[None, :], lo[:, None] + 1).to(tl.int32)
        lo, hi, c_lo, active = _bound_pass(ek, em, piv, k, lo, hi, c_lo, active, GCAP)
    while tl.max(active.to(tl.int32), axis=0) > 0:  # a loop, not unrolled: compile time
        lo, hi, c_lo, active = _bound_pass(ek, em, _pivots(lo, hi, NPB), k, lo, hi, c_lo, active, GCAP)
    t0 = lo
    # 2. Those groups' ids, ascending, at most GCAP per row (more: the row takes the whole-row fallback).
    sel = em & (ek.to(tl.int64) >= t0[:, None])
    pos = tl.cumsum(sel.to(tl.int32), axis=1) - 1
    tl.store(CAND + rows[:, None] * GCAP + pos, ea[None, :] + tl.zeros([ROWS, ET], dtype=tl.int32),
             mask=sel & (pos < GCAP))
    n_g = tl.sum(sel.to(tl.int32), axis=1)
    tl.debug_barrier()
    full = (n_g > GCAP) & (~greedy) & rmask
    n_keep = tl.minimum(n_g, GCAP)
    cols, valid, y, kk = _gather(X, stride_x, BAN, stride_ban, CAND, rows, rmask, n_keep, t_safe, V, IS_PROBS,
                                 HAS_BAN, G, GCAP, CT)

    # 3. Row parameters of top-p / min-p (HF order: top-p on the renormalised top-k set).
    p = tl.zeros([ROWS], dtype=tl.float32) + 1.0
    omp = tl.zeros([ROWS], dtype=tl.float32)
    p_on = p < 0.0
    if USE_P:
        p, omp = _row_top_p(P_PTR, rows, rmask, p_val, omp_val, P_ROWS, ROWS)
        p_on = (p < 1.0) & (~greedy)
    mp = tl.zeros([ROWS], dtype=tl.float32)
    if USE_MINP:
        mp = _row_min_p(MINP_PTR, rows, rmask, minp_val, MINP_ROWS, ROWS)
    seed = tl.load(SEED).to(tl.int64)

    # 4. Exact k-th value (ties kept), top-p, min-p and the Gumbel-max draw over the kept candidates; noise
    #    keyed by (seed, column, row) as the general path, so both paths draw the same token from the same set.
    if CC > 0:
        best_i, big = _topk_compact_draw(CBUF, y, cols, valid, kk, rows, rmask, t0, key_max, m_safe, k, p, omp,
                                         p_on, mp, seed, V, USE_P, USE_MINP, ROWS, CT, CC, CJ)
        if tl.sum(big.to(tl.int32), axis=0) > 0:  # gathered again: the candidates' registers are free meanwhile
            cols, valid, y, kk = _gather(X, stride_x, BAN, stride_ban, CAND, rows, rmask, n_keep, t_safe, V,
                                         IS_PROBS, HAS_BAN, G, GCAP, CT)
            srch = _topk_search_draw(y, cols, valid, kk, rows, rmask & big, t0, key_max, m_safe, k, p, omp, p_on,
                                     mp, seed, V, USE_P, USE_MINP, NP, ROWS, CT)
            best_i = tl.where(big, srch, best_i)
    else:
        best_i = _topk_search_draw(y, cols, valid, kk, rows, rmask, t0, key_max, m_safe, k, p, omp, p_on, mp, seed,
                                   V, USE_P, USE_MINP, NP, ROWS, CT)
    if tl.sum(full.to(tl.int32), axis=0) > 0:
        slow = _topk_slow(X, stride_x, BAN, stride_ban, seed, CAND, rows, rmask, full, t_safe, m_safe, key_max,
                          k, t0, p, omp, p_on, mp, V, USE_P, USE_MINP, IS_PROBS, HAS_BAN, G, GCAP, FB, NP, NPASS,
                          ROWS)
        best_i = tl.where(full, slow, best_i)
    tl.store(OUT + rows, tl.where(greedy, tok_g, best_i), mask=rmask)
