"""The Triton kernels of the decode attention (the algorithm is described in this package's ``__init__``).

``_split_kernel``: one (batch, kv head, M tile, KV split) program; ``_combine_kernel``: the second launch of the
two-launch form, one output row per program. ``_merge_rows``: the same merge, row after row, in the last split
program of a tile (the one-launch form).
"""

from __future__ import annotations

import triton
import triton.language as tl

from ..rms_norm import _round_to

_LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit
def _merge_splits(m, lsum, o, Sinks, h, HAS_SINKS: tl.constexpr):
    """One row's NSPLIT partials merged in a fixed order (deterministic): ``m`` (BLOCK_S,) running maxima,
    ``lsum`` (BLOCK_S,) sums of exp, ``o`` (BLOCK_S, BLOCK_DV) unnormalised outputs, all float32; under
    ``HAS_SINKS`` query head ``h``'s sink logit joins the max and the denominator. Returns the float32 row
    (BLOCK_DV,); a row with nothing kept (every m = -inf, no sink) is 0. Shared by the two-launch combine and
    the one-launch merge, so both give the same bits."""
    mx = tl.max(m, axis=0)
    if HAS_SINKS:
        sk = tl.load(Sinks + h).to(tl.float32)
        mx = tl.maximum(mx, sk)
    mx = tl.where(mx == float("-inf"), 0.0, mx)
    w = tl.math.exp2((m - mx) * _LOG2E)  # a split with nothing kept: m = -inf, weight 0
    den = tl.sum(w * lsum, axis=0)
    if HAS_SINKS:
        den += tl.math.exp2((sk - mx) * _LOG2E)
    num = tl.sum(w[:, None] * o, axis=0)
    return num / tl.where(den > 0, den, 1.0)


@triton.jit
def _merge_rows(Out, OP, MP, LP, Sinks, b, hk, r0, nrows, Hq, LQ, NSPLIT, G: tl.constexpr, DV: tl.constexpr,
                BLOCK_S: tl.constexpr, BLOCK_DV: tl.constexpr, MANUAL_BF16: tl.constexpr, HAS_SINKS: tl.constexpr):
    """Merge the NSPLIT partials ``(acc_s, m_s, l_s)`` of the tile's rows ``r0 .. r0 + nrows - 1`` (query head
    ``hk * G + r // LQ``, position ``r % LQ``), one row at a time with all its splits in one ``(BLOCK_S,
    BLOCK_DV)`` tile (one round trip per row, as ``_combine_kernel``: the same fixed-order sums), the sink in
    the max and the denominator. Loads bypass L1 (``.cg``): other SMs wrote the partials."""
    s = tl.arange(0, BLOCK_S)
    dv = tl.arange(0, BLOCK_DV)
    s_ok = s < NSPLIT
    for rr in range(0, nrows):
        r = r0 + rr
        h = hk * G + r // LQ
        row = (b * Hq + h) * LQ + r % LQ
        m = tl.load(MP + row * NSPLIT + s, mask=s_ok, other=float("-inf"), cache_modifier=".cg")
        lsum = tl.load(LP + row * NSPLIT + s, mask=s_ok, other=0.0, cache_modifier=".cg")
        o = tl.load(OP + (row * NSPLIT + s)[:, None] * DV + dv[None, :], mask=s_ok[:, None] & (dv[None, :] < DV),
                    other=0.0, cache_modifier=".cg")
        out = _merge_splits(m, lsum, o, Sinks, h, HAS_SINKS)
        tl.store(Out + row * DV + dv, _round_to(out, Out.dtype.element_ty, MANUAL_BF16), mask=dv < DV)


@triton.jit
def _softcap(s, cap):
    """``cap * tanh(s / cap)`` in float32 as ``cap - 2 cap / (exp(2 s / cap) + 1)``: one ``exp2`` (no libdevice
    call, so the interpreter and ROCm take the same code); saturates to ``+-cap`` without NaN for any finite or
    infinite ``s`` (exp2 overflow gives ``cap``, underflow ``-cap``). Absolute error about ``cap * 2^-23``."""
    e = tl.math.exp2(s * (2.0 * _LOG2E / cap))
    return cap - 2.0 * cap / (e + 1.0)


@triton.jit
def _block(q, kbase, vbase, n, dq, dvv, col, keep, madd, m_i, l_i, acc, skn, svn, scale, softcap, D: tl.constexpr,
           DV: tl.constexpr, IEEE: tl.constexpr, UPCAST_DOT: tl.constexpr, HAS_SOFTCAP: tl.constexpr):
    """One KV block of the online softmax: K/V loaded only at the slots some row keeps (``col``), so NaN or
    garbage in removed cache slots cannot leak in; the scaled scores soft-capped (``HAS_SOFTCAP``, Gemma2)
    before the mask; ``P`` rounded to the K/V dtype for ``P @ V``."""
    col_ok = col > 0
    k = tl.load(kbase + n[:, None] * skn + dq[None, :], mask=col_ok[:, None] & (dq[None, :] < D), other=0.0)
    if IEEE:
        s = tl.dot(q, tl.trans(k), input_precision="ieee")
    elif UPCAST_DOT:
        s = tl.dot(q.to(tl.float32), tl.trans(k.to(tl.float32)), input_precision="ieee")
    else:
        s = tl.dot(q, tl.trans(k))
    s = s * scale
    if HAS_SOFTCAP:
        s = _softcap(s, softcap)
    s = s + madd
    s = tl.where(keep, s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.math.exp2((m_i - m_safe) * _LOG2E)
    pr = tl.math.exp2((s - m_safe[:, None]) * _LOG2E)
    l_i = l_i * alpha + tl.sum(pr, axis=1)
    v = tl.load(vbase + n[:, None] * svn + dvv[None, :], mask=col_ok[:, None] & (dvv[None, :] < DV), other=0.0)
    if IEEE:
        pv = tl.dot(pr, v, input_precision="ieee")
    elif UPCAST_DOT:
        pv = tl.dot(pr.to(v.dtype).to(tl.float32), v.to(tl.float32), input_precision="ieee")
    else:
        pv = tl.dot(pr.to(v.dtype), v)
    return m_new, l_i, acc * alpha[:, None] + pv


@triton.jit
def _split_kernel(
    Q, K, V, Mask, Sinks, Pos, Out, OP, MP, LP, Counter,
    sqb, sqh, sqi, skb, skh, skn, svb, svh, svn, smb, smh, smi, smj, spb, spi,
    Hq, LQ, LKV, SPLIT_LEN, NSPLIT, MB, WINDOW, scale, SOFTCAP,
    HKV: tl.constexpr, G: tl.constexpr, D: tl.constexpr, DV: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
    HAS_MASK: tl.constexpr, MASK_BOOL: tl.constexpr, MASK_ROW: tl.constexpr, WRITE_PARTIAL: tl.constexpr,
    IEEE: tl.constexpr, UPCAST_DOT: tl.constexpr, MANUAL_BF16: tl.constexpr, HAS_SINKS: tl.constexpr,
    HAS_POS: tl.constexpr, HAS_WINDOW: tl.constexpr, SKIP: tl.constexpr, INLINE_COMBINE: tl.constexpr,
    BLOCK_S: tl.constexpr, HAS_SOFTCAP: tl.constexpr,
):
    """One (batch, kv head, M tile, KV split): online softmax over the split's kept blocks (package doc)."""
    pid = tl.program_id(0)
    sid = tl.program_id(1)
    mb = pid % MB
    bh = pid // MB
    hk = bh % HKV
    b = (bh // HKV).to(tl.int64)

    r = mb * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = r < G * LQ
    h = hk * G + r // LQ
    i = r % LQ
    dq = tl.arange(0, BLOCK_D)
    dvv = tl.arange(0, BLOCK_DV)
    q = tl.load(Q + b * sqb + h[:, None] * sqh + i[:, None] * sqi + dq[None, :],
                mask=row_ok[:, None] & (dq[None, :] < D), other=0.0)
    kbase = K + b * skb + hk * skh
    vbase = V + b * svb + hk * svh
    mrow = Mask + b * smb + h * smh + i * smi  # only dereferenced when HAS_MASK

    if HAS_POS:  # the rows' positions bound the tile's slots: [min p - WINDOW + 1, max p], split evenly
        p = tl.load(Pos + b * spb + i * spi, mask=row_ok, other=0).to(tl.int32)
        p_hi = tl.minimum(tl.max(tl.where(row_ok, p, -1), axis=0) + 1, LKV)
        if HAS_WINDOW:
            p_lo = tl.maximum(tl.min(tl.where(row_ok, p, 2147483647), axis=0) - WINDOW + 1, 0)
        else:
            p_lo = 0
        span = tl.maximum(p_hi - p_lo, 0)
        chunk = tl.cdiv(tl.cdiv(span, NSPLIT), BLOCK_N) * BLOCK_N
        lo = p_lo + sid * chunk
        hi = tl.minimum(lo + chunk, p_hi)
    else:
        lo = sid * SPLIT_LEN
        hi = tl.minimum(lo + SPLIT_LEN, LKV)

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_DV], tl.float32)
    for start in range(lo, hi, BLOCK_N):
        n = start + tl.arange(0, BLOCK_N)
        n_ok = n < hi
        tile_ok = row_ok[:, None] & n_ok[None, :]
        madd = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
        keep = tile_ok
        if HAS_POS:
            keep = keep & (n[None, :] <= p[:, None])
            if HAS_WINDOW:
                keep = keep & (n[None, :] > p[:, None] - WINDOW)
        if HAS_MASK:
            if MASK_ROW:  # one mask row for every row of the program (HF decode: (B, 1, 1, L)): load it once
                mv1 = tl.load(Mask + b * smb + n * smj, mask=n_ok, other=0)
                mv = tl.broadcast_to(mv1[None, :], [BLOCK_M, BLOCK_N])
            else:
                mv = tl.load(mrow[:, None] + n[None, :] * smj, mask=tile_ok, other=0)
            if MASK_BOOL:
                keep = keep & (mv != 0)
            else:
                madd = mv.to(tl.float32)
                keep = keep & (madd != float("-inf"))
        col = tl.max(keep.to(tl.int32), axis=0)  # (BLOCK_N,): some row keeps this slot
        # SKIP: a block no row keeps is not loaded (a dependent branch per block: the loads stay unpipelined);
        # without it the loads are predicated on `col` only, which the pipeliner can overlap.
        if SKIP:
            if tl.max(col, axis=0) > 0:
                m_i, l_i, acc = _block(q, kbase, vbase, n, dq, dvv, col, keep, madd, m_i, l_i, acc, skn, svn,
                                       scale, SOFTCAP, D, DV, IEEE, UPCAST_DOT, HAS_SOFTCAP)
        else:
            m_i, l_i, acc = _block(q, kbase, vbase, n, dq, dvv, col, keep, madd, m_i, l_i, acc, skn, svn, scale,
                                   SOFTCAP, D, DV, IEEE, UPCAST_DOT, HAS_SOFTCAP)

    orow = (b * Hq + h) * LQ + i  # output row (B, Hq, Lq) flattened
    if WRITE_PARTIAL:
        prow = orow * NSPLIT + sid
        tl.store(MP + prow, m_i, mask=row_ok)
        tl.store(LP + prow, l_i, mask=row_ok)
        tl.store(OP + prow[:, None] * DV + dvv[None, :], acc, mask=row_ok[:, None] & (dvv[None, :] < DV))
        if INLINE_COMBINE:
            # Every thread's partial stores before the counter (CTA barrier, then a gpu-scope acq_rel atomic:
            # the release publishes them, the last arriver's acquire sees every split's). The last program of
            # the tile merges the splits and puts the counter back to 0 for the next launch or graph replay.
            tl.debug_barrier()
            arrived = tl.atomic_add(Counter + pid, 1, sem="acq_rel", scope="gpu")
            if arrived == NSPLIT - 1:
                tl.debug_barrier()
                r0 = mb * BLOCK_M
                _merge_rows(Out, OP, MP, LP, Sinks, b, hk, r0, tl.minimum(BLOCK_M, G * LQ - r0), Hq, LQ, NSPLIT,
                            G, DV, BLOCK_S, BLOCK_DV, MANUAL_BF16, HAS_SINKS)
                tl.atomic_xchg(Counter + pid, 0, sem="relaxed", scope="gpu")
    else:
        if HAS_SINKS:  # step 4 of the package doc: the sink joins the max and the denominator
            sk = tl.load(Sinks + h, mask=row_ok, other=0.0).to(tl.float32)
            m_f = tl.maximum(m_i, sk)
            m_f = tl.where(m_f == float("-inf"), 0.0, m_f)
            alpha = tl.math.exp2((m_i - m_f) * _LOG2E)
            acc = acc * alpha[:, None]
            l_i = l_i * alpha + tl.math.exp2((sk - m_f) * _LOG2E)
        out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
        tl.store(Out + orow[:, None] * DV + dvv[None, :], _round_to(out, Out.dtype.element_ty, MANUAL_BF16),
                 mask=row_ok[:, None] & (dvv[None, :] < DV))


@triton.jit
def _combine_kernel(Out, OP, MP, LP, Sinks, NSPLIT, Hq, LQ, DV: tl.constexpr, BLOCK_S: tl.constexpr,
                    BLOCK_DV: tl.constexpr, MANUAL_BF16: tl.constexpr, HAS_SINKS: tl.constexpr):
    """One output row: merge its NSPLIT partials ``(acc_s, m_s, l_s)`` in a fixed order (deterministic), with
    the row's sink in the max and the denominator under ``HAS_SINKS`` (query head ``(row // LQ) % Hq``)."""
    row = tl.program_id(0).to(tl.int64)
    s = tl.arange(0, BLOCK_S)
    dv = tl.arange(0, BLOCK_DV)
    s_ok = s < NSPLIT
    m = tl.load(MP + row * NSPLIT + s, mask=s_ok, other=float("-inf"))
    lsum = tl.load(LP + row * NSPLIT + s, mask=s_ok, other=0.0)
    o = tl.load(OP + (row * NSPLIT + s)[:, None] * DV + dv[None, :], mask=s_ok[:, None] & (dv[None, :] < DV),
                other=0.0)
    out = _merge_splits(m, lsum, o, Sinks, (row // LQ) % Hq, HAS_SINKS)
    tl.store(Out + row * DV + dv, _round_to(out, Out.dtype.element_ty, MANUAL_BF16), mask=dv < DV)
