"""Device functions and constants shared by every sampler kernel (general path, top-k path, row path).

The scaled logit and its order-preserving int32 key, loads with the masking rules, per-row parameters, the Philox
Gumbel noise, pivot searches and partial reductions, running argmax folds (``@triton.jit``, inlined into the
kernels of ``search``, ``topk`` and ``rows``), and the host constants every launch and AOT case shares
(:data:`FP_OPTIONS`, :data:`AOT_FLAGS`). Math and layout: the package docstring.
"""

from __future__ import annotations

import triton
import triton.language as tl

_KEY_MIN = tl.constexpr(-(2**31))  # a constexpr: compiled Triton reads no plain globals


_KEY_END = tl.constexpr(2**31)  # one past the largest key (held in int64)


#: Compile options of every sampler launch: no FP contraction, so ``x / T`` and ``exp(y - max)`` round alike in every
#: kernel (with contraction ptxas fused the ``sub.f32`` differently per kernel, and min-p >= 1 kept nothing on the
#: row path at T = 0.7 / 0.8); no cost: V=128256 top-p 0.9 B = 32 / 64 73.1 / 107.5 us off vs 74.6 / 108.2 on, IEEE
#: ``div_rn`` 90.3 / 154.9 (benchmarks/RESULTS.md, "History: Sampling"). ROCm takes the same option (HIPOptions),
#: so far only compiled ahead of time.
FP_OPTIONS = {"enable_fp_fusion": False}


#: Flag sets of the sampler AOT cases (:mod:`.aot` and :mod:`.rows`): name -> (score pointer type, flags):
#: float32 scores with scalar parameters, top-p on; bf16 scores with per-row T / p / min-p, min-p on, a ban mask.
AOT_FLAGS = {
    "f32": ("*fp32", dict(T_ROWS=False, P_ROWS=False, MINP_ROWS=False, USE_P=True, USE_MINP=False, IS_PROBS=False,
                          HAS_BAN=False)),
    "bf16_rows_minp_ban": ("*bf16", dict(T_ROWS=True, P_ROWS=True, MINP_ROWS=True, USE_P=True, USE_MINP=True,
                                         IS_PROBS=False, HAS_BAN=True)),
}


@triton.jit
def _scaled(x, t):
    """``x / t``, the scaled logit every pass of every sampler kernel computes through this one function; launched
    with :data:`FP_OPTIONS` (no FP contraction) so the same quotient is the same float in every kernel."""
    return x / t


@triton.jit
def _key(y):
    """float32 -> int32 key with the same order (NaN never reaches here): ``bits`` for ``y >= +0``, minus the
    magnitude bits below (``(bits ^ 0x7FFFFFFF) + 1``), so -0.0 and +0.0 share key 0 (they are equal logits: HF's
    ``scores < kth`` keeps both); -inf is ``-2^31 + 2^23``. Inverse: :func:`_unkey`."""
    bits = y.to(tl.int32, bitcast=True)
    return tl.where(bits >= 0, bits, (bits ^ 0x7FFFFFFF) + 1)


@triton.jit
def _unkey(k):
    """int32 key -> the float32 it came from (key 0 -> +0.0; ``_KEY_MIN``, below every real key, -> NaN)."""
    return tl.where(k >= 0, k, (tl.maximum(k, _KEY_MIN + 1) - 1) ^ 0x7FFFFFFF).to(tl.float32, bitcast=True)


@triton.jit
def _running_argmax(score, best, best_i, base):
    """Fold one (ROWS, BLOCK) block of draw scores into each row's running (best, index): strictly greater
    wins, so ties keep the lowest column (``torch.argmax``'s rule); ``base`` is the block's first column."""
    return _fold_best(tl.max(score, axis=1), tl.argmax(score, axis=1).to(tl.int64) + base, best, best_i)


@triton.jit
def _lane_best(score, cols, bv, bi):
    """Per lane of a (ROWS, BLOCK) tile, the running best draw score and its column (``LANE``): strictly greater
    wins, so each lane keeps its lowest column among ties (columns grow along the loop)."""
    better = score > bv
    return tl.where(better, score, bv), tl.where(better, cols, bi)


@triton.jit
def _fold_draw(score, base, bv, bi, best, best_i, ROWS: tl.constexpr, BLOCK: tl.constexpr, LANE: tl.constexpr):
    """Fold one (ROWS, BLOCK) block of draw scores (first column ``base``) into the running draw: the per-lane
    accumulators ``bv``/``bi`` of :func:`_lane_best` (``LANE``) or each row's (best, best_i) of
    :func:`_running_argmax`; the other pair passes through unchanged (callers without LANE pass placeholders)."""
    if LANE:
        cols = (base + tl.arange(0, BLOCK))[None, :] + tl.zeros([ROWS, BLOCK], tl.int32)
        bv, bi = _lane_best(score, cols.to(tl.int64), bv, bi)
    else:
        best, best_i = _running_argmax(score, best, best_i, base)
    return bv, bi, best, best_i


@triton.jit
def _lane_reduce(bv, bi):
    """Per row, (best, index) of the lane accumulators of :func:`_lane_best`: the lowest column among the lanes
    holding the maximum, i.e. what the block-wise :func:`_running_argmax` gives (all -inf: the first lane's
    initial column, the chunk's first)."""
    best = tl.max(bv, axis=1)
    return best, tl.min(tl.where(bv == best[:, None], bi, _KEY_END), axis=1)


@triton.jit
def _fold_best(blk, blk_i, best, best_i):
    """Per row, the running (best, index) after one more block's (blk, blk_i): strictly greater wins."""
    better = blk > best
    return tl.where(better, blk, best), tl.where(better, blk_i, best_i)


@triton.jit
def _load(X, stride_x, BAN, stride_ban, rows, rmask, cols, V, IS_PROBS: tl.constexpr, HAS_BAN: tl.constexpr):
    """(ROWS, BLOCK) float32 logits: -inf outside V, NaN -> -inf, log of probabilities, banned -> -inf."""
    cmask = cols < V
    m2 = rmask[:, None] & cmask[None, :]
    x = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=m2, other=float("-inf")).to(tl.float32)
    if IS_PROBS:
        x = tl.log(x)
    x = tl.where(x != x, float("-inf"), x)
    if HAS_BAN:
        b = tl.load(BAN + rows[:, None] * stride_ban + cols[None, :], mask=m2, other=0)
        x = tl.where(b != 0, float("-inf"), x)
    return x, m2


@triton.jit
def _load_at(X, xoff, BAN, boff, msk, IS_PROBS: tl.constexpr, HAS_BAN: tl.constexpr):
    """float32 logits at element offsets ``xoff`` (any shape): -inf where ``msk`` is false, NaN -> -inf, log
    of probabilities, banned -> -inf."""
    x = tl.load(X + xoff, mask=msk, other=float("-inf")).to(tl.float32)
    if IS_PROBS:
        x = tl.log(x)
    x = tl.where(x != x, float("-inf"), x)
    if HAS_BAN:
        bn = tl.load(BAN + boff, mask=msk, other=0)
        x = tl.where(bn != 0, float("-inf"), x)
    return x


@triton.jit
def _row_temperature(T_PTR, rows, rmask, t_val, T_ROWS: tl.constexpr, ROWS: tl.constexpr):
    """(ROWS,) temperature (a tensor wins over the scalar)."""
    if T_ROWS:
        t = tl.load(T_PTR + rows, mask=rmask, other=1.0).to(tl.float32)
    else:
        t = tl.zeros([ROWS], dtype=tl.float32) + t_val
    return t


@triton.jit
def _row_top_p(P_PTR, rows, rmask, p_val, omp_val, P_ROWS: tl.constexpr, ROWS: tl.constexpr):
    """(ROWS,) float32 ``p`` (clamped into [1e-30, 1 - 2^-24], 0 and 1 kept; a per-row NaN -> 1, off, as the
    reference: ``cumsum <= 1 - NaN`` drops nothing) and ``1 - p`` (a tensor wins over the scalars). A per-row
    float64 ``p`` gives ``1 - p`` rounded once to float32, as HF's threshold for a float32 top_p (exact
    difference, one rounding) and for dynamic=True's 0-d float64 one."""
    if P_ROWS:
        p64 = tl.load(P_PTR + rows, mask=rmask, other=1.0).to(tl.float64)
        omp = (1.0 - p64).to(tl.float32)
        p = tl.where(p64 < 1.0, tl.minimum(p64.to(tl.float32), 0.99999994), 1.0)
        p = tl.where(p64 > 0.0, tl.maximum(p, 1e-30), tl.where(p64 <= 0.0, 0.0, p))
    else:
        p = tl.zeros([ROWS], dtype=tl.float32) + p_val
        omp = tl.zeros([ROWS], dtype=tl.float32) + omp_val  # 1 - p rounded once, as HF's threshold
    return p, omp


@triton.jit
def _row_min_p(MINP_PTR, rows, rmask, minp_val, MINP_ROWS: tl.constexpr, ROWS: tl.constexpr):
    """(ROWS,) float32 min-p (a tensor wins over the scalar); HF drops ``probs < min_p * max``: NaN drops
    nothing, and its top token survives any min_p (min_p > 1 -> 1 keeps the maxima)."""
    if MINP_ROWS:
        mp = tl.load(MINP_PTR + rows, mask=rmask, other=0.0).to(tl.float32)
    else:
        mp = tl.zeros([ROWS], dtype=tl.float32) + minp_val
    return tl.where(mp > 1.0, 1.0, mp)


@triton.jit
def _philox4(seed, c4, r):
    """The four uint32 lanes of Philox4x32-10 (``tl.random.philox``: Salmon et al. 2011) keyed by ``seed``
    (int64) at counter ``(c4, r, 0, 0)``: int tiles of one shape (column // 4, row)."""
    c4 = c4.to(tl.uint32)
    return tl.random.philox(seed, c4, r.to(tl.uint32), c4 * 0, c4 * 0)


@triton.jit
def _gumbel(r):
    """Gumbel noise ``-log(-log(u))`` of the 24-bit uniform ``u`` made from uint32 ``r``."""
    return -tl.log(-tl.log(tl.random.uint_to_uniform_float(r)))


@triton.jit
def _noise(seed, col0, rows, ROWS: tl.constexpr, W: tl.constexpr):
    """(ROWS, W) float32 Gumbel noise of columns ``col0 .. col0 + W - 1`` (``col0 % 4 == 0``, ``W % 4 == 0``):
    column c of row r is lane ``c % 4`` of Philox(seed; counter (c // 4, r)), so one Philox call serves four
    columns (the draw's noise everywhere; :func:`_noise_at` gives the same values at arbitrary columns)."""
    q = col0 // 4 + tl.arange(0, W // 4)
    c4 = q[None, :] + tl.zeros([ROWS, W // 4], dtype=tl.int32)
    r2 = rows[:, None] + tl.zeros([ROWS, W // 4], dtype=tl.int64)
    a, b, c, d = _philox4(seed, c4, r2)
    # join(join(a, c), join(b, d)) is (ROWS, W/4, 2, 2) with [.., i, j] = (a, b, c, d)[2i + j]: row-major
    # reshape puts lane l of counter q at column 4q + l
    u = tl.reshape(tl.join(tl.join(a, c), tl.join(b, d)), [ROWS, W])
    return _gumbel(u)


@triton.jit
def _noise_at(seed, cols, rows, ROWS: tl.constexpr, W: tl.constexpr):
    """:func:`_noise` at a (ROWS, W) int tile of arbitrary columns ``cols`` (one Philox call per element: the
    top-k path's gathered candidates)."""
    r2 = rows[:, None] + tl.zeros([ROWS, W], dtype=tl.int64)
    a, b, c, d = _philox4(seed, cols // 4, r2)
    lane = cols % 4
    return _gumbel(tl.where(lane == 0, a, tl.where(lane == 1, b, tl.where(lane == 2, c, d))))


@triton.jit
def _pivots(lo, hi, NP: tl.constexpr):
    """(ROWS, NP) int32 pivots strictly inside (lo, hi) whenever hi - lo >= 2 (lo/hi int64 (ROWS,))."""
    j = tl.arange(0, NP).to(tl.int64) + 1
    d = hi - lo
    return (lo[:, None] + (d[:, None] * j[None, :]) // (NP + 1)).to(tl.int32)


@triton.jit
def _narrow(lo, hi, piv, ok):
    """Shrink (lo, hi) given per-pivot predicate ``ok`` (true on a prefix of increasing pivots); rows
    already at width <= 1 keep their interval."""
    p64 = piv.to(tl.int64)
    new_lo = tl.maximum(lo, tl.max(tl.where(ok, p64, lo[:, None]), axis=1))
    new_hi = tl.minimum(hi, tl.min(tl.where(ok, hi[:, None], p64), axis=1))
    active = (hi - lo) > 1
    return tl.where(active, new_lo, lo), tl.where(active, new_hi, hi)


@triton.jit
def _count_ge(kk, m2, piv):
    """(ROWS, NP) int32: per pivot, how many in-range keys of the (ROWS, BLOCK) tile are >= it. Pivots of a
    row still searching are > -2^31, so out-of-range columns are given that key (one 2D select, not a 3D
    mask)."""
    return tl.sum(_count_ge3(kk, m2, piv), axis=2)


@triton.jit
def _count_ge_reg(kk, m2, piv):
    """:func:`_count_ge` on a (ROWS, W, NP) tile (pivots on the fast axis): the top-k path's register-resident
    searches, whose keys are computed once outside the loop; the layout its H200 timings ran with."""
    kk = tl.where(m2, kk, _KEY_MIN)
    return tl.sum((kk[:, :, None] >= piv[:, None, :]).to(tl.int32), axis=1)


@triton.jit
def _mass_below_reg(kk, e, piv):
    """:func:`_mass_below` on a (ROWS, W, NP) tile (see :func:`_count_ge_reg`)."""
    below = kk[:, :, None] < piv[:, None, :]
    return tl.sum(tl.where(below, e[:, :, None], 0.0), axis=1)


@triton.jit
def _count_ge3(kk, m2, piv):
    """(ROWS, NP, BLOCK) int32 indicators of :func:`_count_ge`, not reduced (the ``ACC`` passes sum them over the
    whole chunk in registers and reduce once)."""
    kk = tl.where(m2, kk, _KEY_MIN)
    return (kk[:, None, :] >= piv[:, :, None]).to(tl.int32)


@triton.jit
def _mass_below3(kk, e, piv):
    """(ROWS, NP, BLOCK) float32 terms of :func:`_mass_below`, not reduced."""
    return tl.where(kk[:, None, :] < piv[:, :, None], e[:, None, :], 0.0)


@triton.jit
def _mass_below(kk, e, piv):
    """(ROWS, NP) float32: per pivot, the sum of ``e`` over keys strictly below it."""
    return tl.sum(_mass_below3(kk, e, piv), axis=2)


@triton.jit
def _reduce_parts(P, par, rows, rmask, B, NCH, ROWS: tl.constexpr, NP: tl.constexpr, NCHB: tl.constexpr,
                  CB: tl.constexpr, IS_INT: tl.constexpr):
    """(ROWS, NP) sum over the chunks of partials ``P[par, row, chunk, :]`` (layout [2, B, NCH, NP]), in a
    fixed order (chunk blocks of CB in sequence, a tree within one): identical in every program."""
    jn = tl.arange(0, NP)
    base = (par * B + rows) * NCH
    if IS_INT:
        acc = tl.zeros([ROWS, NP], dtype=tl.int32)
    else:
        acc = tl.zeros([ROWS, NP], dtype=tl.float32)
    for c0 in tl.static_range(0, NCHB, CB):
        cc = c0 + tl.arange(0, CB)
        msk = rmask[:, None, None] & (cc < NCH)[None, :, None]
        off = (base[:, None, None] + cc[None, :, None]) * NP + jn[None, None, :]
        acc += tl.sum(tl.load(P + off, mask=msk, other=0), axis=1)
    return acc


@triton.jit
def _reduce_chunks(P, rows, rmask, NCH, NCHB: tl.constexpr, IS_MAX: tl.constexpr):
    """(ROWS,) max or sum over the chunks of ``P[row, chunk]`` (layout [B, NCH])."""
    cc = tl.arange(0, NCHB)
    msk = rmask[:, None] & (cc < NCH)[None, :]
    if IS_MAX:
        v = tl.load(P + rows[:, None] * NCH + cc[None, :], mask=msk, other=float("-inf"))
        return tl.max(v, axis=1)
    else:
        v = tl.load(P + rows[:, None] * NCH + cc[None, :], mask=msk, other=0.0)
        return tl.sum(v, axis=1)


@triton.jit
def _winner_filters(m, greedy_t, P_PTR, MINP_PTR, rows, rmask, p_val, omp_val, minp_val, P_ROWS: tl.constexpr,
                    MINP_ROWS: tl.constexpr, USE_P: tl.constexpr, USE_MINP: tl.constexpr, ROWS: tl.constexpr):
    """Per row, given the row max ``m`` of ``x / T``: ``greedy`` (temperature <= 0, a +inf score or nothing
    finite), ``m_safe``, ``key_max``, min-p, ``1 - p``, ``srch`` (top-p needs its threshold searched: 0 < p < 1)
    and the search's first lower bound (p <= 0 keeps the largest token(s): key_max; top-p off: the smallest
    key). Shared by the chain and :mod:`.rows`."""
    greedy = greedy_t | (m == float("inf")) | (m == float("-inf"))
    m_safe = tl.where(greedy, 0.0, m)
    key_max = _key(m_safe).to(tl.int64)
    mp = tl.zeros([ROWS], dtype=tl.float32)
    if USE_MINP:
        mp = _row_min_p(MINP_PTR, rows, rmask, minp_val, MINP_ROWS, ROWS)
    if USE_P:
        p, omp = _row_top_p(P_PTR, rows, rmask, p_val, omp_val, P_ROWS, ROWS)
        p_on = (p < 1.0) & (~greedy)
        srch = p_on & (p > 0.0)
    else:
        omp = tl.zeros([ROWS], dtype=tl.float32)
        p_on = rows < 0
        srch = p_on
    lo = tl.where(p_on & (~srch), key_max, _KEY_MIN)
    return greedy, m_safe, key_max, mp, omp, srch, lo
