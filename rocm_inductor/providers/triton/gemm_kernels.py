"""Triton kernels of the grouped small-M GEMM: up to four GEMMs of one activation in one launch.

The kernels of ``rocm_fused::merged_gemm`` and ``rocm_fused::rms_norm_gemm`` (launched by ``gemm_merge.launch``;
their configs are ``gemm_configs.Config``), and their ahead-of-time compile cases (:func:`aot_cases`).

Math: exactly :func:`rocm_inductor.providers.reference.merged_gemm_ref`: ``out[i] = x @ w_i.T (+ b_i)``,
accumulated in float32, bias added in float32, one rounding at the store (round-to-nearest-even, through the
RMSNorm kernels' bf16 helper: Triton's interpreter truncates float32 -> bfloat16). float32 inputs use
``tl.dot(..., input_precision="ieee")`` (no TF32), float16/bfloat16 the tensor cores.

Why: at decode (M = batch <= 32 tokens) a GEMM streams its whole weight for a few rows of output, so it is
bound by HBM bandwidth, and small projections (k/v: N = 512) leave most of the GPU idle. On the H200 (issue
19, torch 2.11, CUDA graphs, M = 1, Llama-3.2-1B shape) q/k/v as three cuBLAS GEMMs took 18.8 us, one GEMM on
concatenated weights 6.4 us, the HBM floor is 2.9 us; gate/up 24.2 / 19.1 / 15.6 us. This kernel gets the
concatenated GEMM's parallelism without a concatenated copy: the grid is the union of every weight's
column blocks (x a K split when the columns are too few), and each program streams one (BLOCK_N, K-range)
slice of one weight, read where it lives through its own pointer and row stride.

Layout: ``x`` (M, K) any strides (tiny: each program loads its rows of x per K step, from L2); weight i
(N_i, K) with unit stride along K (``nn.Linear`` layout, any row stride); bias i (N_i,) contiguous or absent;
outputs (M, N_i) contiguous. ``M <= gemm_configs.MAX_M`` (32): the tile pads M to BLOCK_M (16 or 32 for ``tl.dot``; 1-8
for the FMA variant, a broadcast multiply + sum over K that skips the tensor cores' padding). ``N_i`` and
``K`` need not be multiples of any block: column loads are clamped to the last row (stores are masked) and
K is masked unless the launcher proved it divides evenly.

Split-K (``SPLIT_K > 1``): each program sums one K range into a float32 workspace ``(SPLIT_K, M, sum N_i)``
(no atomics: deterministic), then :func:`_reduce_kernel` adds the splits in order, adds the bias, rounds and
stores: two launches, both capture-safe (the workspace comes from PyTorch's caching allocator, so from the
graph's pool under capture).

GEMV tile (``LATE``, M <= 8): no ``tl.dot``; each program streams a (BLOCK_N, BLOCK_K) slice of one
weight with 16-byte loads along K, multiplies by the M rows of x and keeps the products in a 3-D float32
register tile, summed over K once after the loop. Measured (H200, torch 2.11, triton 3.6, 2026-12-01,
``benchmarks/results/runs/decode_gemm_layer.csv``): it wins at M = 1 and 2 (Llama-3.2-1B q/k/v 6.54 us at M = 1 vs
9.8 us for the dot tile before it, separate cuBLAS 18.1 us, concatenated cuBLAS 6.86 us; gate/up 21.95 us
vs 22.55 separate); from M = 4 the dot tile with M padded to 16 wins (q/k/v 9.3 us at M = 4 / 8).
Its K loop is a runtime loop without ``tl.dot``, which Triton does not pipeline: one DRAM round trip per K step,
~8 KB in flight per program, the speed of a naive read of the same bytes (CUPTI, H200).

Full-K GEMV tile (``FULL``, M <= 8, 16-bit): BLOCK_K covers the program's whole K range (K / split_k
padded to a power of two), so a program issues all its weight loads (BLOCK_N x K, 16-128 elements per thread)
before the first FMA; then each row of x (``tl.static_range``) is multiplied and summed over K once.
``EVICT`` loads the weights ``evict_first``. Measured (H200, torch 2.11, triton 3.6, 2026-12-01, session
3 rows of ``benchmarks/results/runs/decode_gemm_layer.csv``), M = 1: Llama-3.2-1B q/k/v 5.37 us (concatenated cuBLAS
6.93, separate 18.02, floor 2.96), gate/up 18.52 us (20.4 / 23.41 / 15.79); Qwen3-0.6B q/k/v 4.23 us (5.42 /
19.98 / 1.98), gate/up 5.28 us (6.63 / 10.69 / 2.96). evict_first was 0-0.44 us faster in each of the 10
pairs swept (never slower).
At M = 8 it loses (Qwen3 q/k/v 10.4 us: one cross-thread sum per row) to the deep-pipeline dot tile
(``gemm_configs.deep_dot_configs``: num_stages 5, 4 warps, no K split: Qwen3 q/k/v 5.95 us at M = 8, 6.27 at 32
vs 8.0 / 8.3 for the 8-warp 3-stage split-K dot tiles; which of the three changes made the difference is not
measured: no 4-warp 3-stage no-split twin was in that sweep).

PDL form (``PDL`` constexpr, switch ``gemm_knobs.Knobs.pdl``, off): programmatic dependent launch on CUDA sm_90+
(``launch_pdl=True``; ``gdc_launch_dependents()`` first, the full-K tile's weight loads before ``gdc_wait()``,
x after it). Measured slower in a decode step (see ``gemm_knobs.Knobs.pdl``), so not used by default.

RMSNorm prologue (``NORM`` constexpr, ``gemm_merge.NormPrologue``, with the full-K tile and no K split:
``gemm_configs.prologue_fits``): x is the input of an RMSNorm (plus a residual) whose output the GEMM reads; every
program normalises whole rows itself (:func:`_norm_row`, the RMSNorm kernels' math) while its weight loads are in
flight, and the program of column block 0 stores the residual sum. Used by ``rocm_fused::rms_norm_gemm``
(``providers/triton/norm_gemm.py``; the measured prologue tiles are ``gemm_tables.prologue_config``'s).
The dot tiles (M 2..32, no K split, bf16/fp32: ``gemm_configs.dot_prologue_fits``) take the same prologue in their
K loop (:func:`_norm_tile`): the sums of squares of the rows are accumulated next to the dot, the norm weight is
folded into the activation tile and the rows' rstd scales the float32 accumulator after the loop. Not measured:
the fold takes it on a GPU only when asked (``options={"features": {"norm_gemm_dot": True}}``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .gemm_configs import Config, default_config
from .rms_norm import _inv_rms, _round_to

try:  # Hopper's grid dependency control (programmatic dependent launch); triton 3.6 and 3.9 have both
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
    HAS_GDC = True
except ImportError:  # a Triton without them: the PDL branches are dead code (PDL=False), never traced
    gdc_launch_dependents = gdc_wait = None
    HAS_GDC = False


@triton.jit
def _load_xw(x_ptrs, w_ptrs, k0, offs_k, k_hi, EVEN_K: tl.constexpr):
    """One K block of the activation rows and the weight rows (masked past ``k_hi`` unless EVEN_K)."""
    if EVEN_K:
        x = tl.load(x_ptrs)
        w = tl.load(w_ptrs)
    else:
        mk = (k0 + offs_k) < k_hi
        x = tl.load(x_ptrs, mask=mk[None, :], other=0.0)
        w = tl.load(w_ptrs, mask=mk[None, :], other=0.0)
    return x, w


@triton.jit
def _norm_row(X, R, G, S, row, stride_xm, stride_xk, stride_rm, offs_k, K, eps, offset, store_s,
              HAS_RES: tl.constexpr, HAS_G: tl.constexpr, MANUAL_BF16: tl.constexpr):
    """Row ``row`` of ``rms_norm(x [+ r])`` over the whole K (``offs_k`` covers it), rounded to x's dtype.

    Exactly the RMSNorm kernels' math (``rms_norm._rms_norm_kernel``): ``s = x + r`` rounded to the model dtype
    and stored (where ``store_s``: one program per row writes it), then ``s * rstd * (g + offset)`` in float32,
    one rounding: the GEMM reads the same bf16/fp16 activation the norm kernel would have written.
    """
    kmask = offs_k < K
    xv = tl.load(X + row.to(tl.int64) * stride_xm + offs_k * stride_xk, mask=kmask, other=0.0).to(tl.float32)
    if HAS_RES:
        rv = tl.load(R + row.to(tl.int64) * stride_rm + offs_k, mask=kmask, other=0.0).to(tl.float32)
        sv = _round_to(xv + rv, X.dtype.element_ty, MANUAL_BF16)
        tl.store(S + row.to(tl.int64) * K + offs_k, sv, mask=offs_k < K * store_s)  # store_s: 0 or 1
        xv = sv.to(tl.float32)
    yv = xv * _inv_rms(tl.sum(xv * xv, axis=0), K, eps)
    if HAS_G:
        yv = yv * (tl.load(G + offs_k, mask=kmask, other=0.0).to(tl.float32) + offset)
    return _round_to(yv, X.dtype.element_ty, MANUAL_BF16)


@triton.jit
def _norm_tile(x, ss, R, G, S, x_rows, mask_m, offs, K, stride_rm, offset, store_s,
               HAS_RES: tl.constexpr, HAS_G: tl.constexpr, MANUAL_BF16: tl.constexpr):
    """One K block of the dot tile's RMSNorm prologue (``NORM`` with ``DOT``): ``x`` (BLOCK_M, BLOCK_K) is the
    norm's input at columns ``offs``; returns the GEMM's activation tile ``round(s * (g + offset))`` and the
    running row sums of squares ``ss`` (float32, of ``s``).

    ``s = round(x + r)`` to x's dtype as the RMSNorm kernels round it (stored by the programs of column block 0,
    ``store_s``), the sum of squares in float32 of that rounded ``s``; the row's ``rstd`` is only known after the
    K loop, so it scales the float32 accumulator rows instead of the activation (``acc * rstd``): one rounding
    of the activation, as the unfolded graph has, at another place (``round(s * g) * rstd`` instead of
    ``round(s * rstd * g)``; docs/ops.md, rms_norm_gemm).
    """
    kmask = offs < K
    xv = x.to(tl.float32)
    if HAS_RES:
        rv = tl.load(R + x_rows[:, None].to(tl.int64) * stride_rm + offs[None, :], mask=kmask[None, :],
                     other=0.0).to(tl.float32)
        sv = _round_to(xv + rv, x.dtype, MANUAL_BF16)
        tl.store(S + x_rows[:, None].to(tl.int64) * K + offs[None, :], sv,
                 mask=mask_m[:, None] & (offs < K * store_s)[None, :])  # store_s: 0 or 1
        xv = sv.to(tl.float32)
    ss += tl.sum(xv * xv, axis=1)
    if HAS_G:
        xv = xv * (tl.load(G + offs, mask=kmask, other=0.0).to(tl.float32) + offset)[None, :]
    return _round_to(xv, x.dtype, MANUAL_BF16), ss


@triton.jit
def _tile(X, W, B, Y, P, M, N, K, col0, NTOT, stride_xm, stride_xk, stride_wn, nb, ks,
          R, G, S, stride_rm, eps, offset,
          HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
          SPLIT_K: tl.constexpr, EVEN_K: tl.constexpr, DOT: tl.constexpr, IEEE: tl.constexpr,
          MANUAL_BF16: tl.constexpr, LATE: tl.constexpr, FULL: tl.constexpr, EVICT: tl.constexpr,
          PDL: tl.constexpr, NORM: tl.constexpr, HAS_RES: tl.constexpr, HAS_G: tl.constexpr):
    """Column block ``nb`` of one weight (``N`` rows, K contiguous) times x, over K split ``ks``.

    ``LATE`` (the GEMV tile, ``DOT`` False): each thread keeps its products of contiguous K elements (Triton
    vectorises the weight row loads to 16 bytes when the row stride allows) in a 3-D float32 tile and the
    K sum happens once at the end, in a fixed order.

    ``FULL`` (the full-K GEMV tile, ``DOT`` False, BLOCK_K >= the K range): one (BLOCK_N, BLOCK_K) weight load
    (all of the program's bytes in flight at once, instead of one DRAM round trip per K step of a runtime
    loop), then per row of x (``tl.static_range``: M stays in registers) a float32 multiply and one ``tl.sum``
    over K; row ``mi`` of the result is selected into the (BLOCK_M, BLOCK_N) accumulator.

    ``PDL`` (programmatic dependent launch, see :data:`PDL`): ``gdc_wait()`` (wait for the preceding kernel to
    complete and its writes to be visible) before the first read of x; with ``FULL`` the weight tile's loads are
    issued before it (the weights are not written by the step: the launcher checks they are parameters).

    ``NORM`` (with ``FULL``, no K split: BLOCK_K covers K): x is the *input* of an RMSNorm (``HAS_RES``: plus a
    residual, the sum stored to ``S`` by the program of column block 0 of weight 0; ``HAS_G``: weight ``G``),
    normalised per row in the prologue (:func:`_norm_row`) while the weight tile's loads are in flight, so
    norm + GEMM is one launch (``rocm_fused::rms_norm_gemm``).
    """
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = nb * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_m = offs_m < M
    mask_n = offs_n < N
    rows_n = tl.where(mask_n, offs_n, N - 1)  # clamp: unmasked weight loads, the store is masked
    x_rows = tl.where(mask_m, offs_m, 0)
    k_chunk = tl.cdiv(tl.cdiv(K, SPLIT_K), BLOCK_K) * BLOCK_K
    k_lo = ks * k_chunk
    k_hi = tl.minimum(k_lo + k_chunk, K)
    offs_k = tl.arange(0, BLOCK_K)
    x_ptrs = X + x_rows[:, None].to(tl.int64) * stride_xm + (k_lo + offs_k)[None, :] * stride_xk
    w_ptrs = W + rows_n[:, None].to(tl.int64) * stride_wn + (k_lo + offs_k)[None, :]
    if FULL:
        if EVEN_K:
            w = tl.load(w_ptrs, eviction_policy="evict_first" if EVICT else "")
        else:
            w = tl.load(w_ptrs, mask=((k_lo + offs_k) < k_hi)[None, :], other=0.0,
                        eviction_policy="evict_first" if EVICT else "")
        if PDL:
            gdc_wait()  # the weight loads are in flight; x (written by the preceding kernel) only after this
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for mi in tl.static_range(BLOCK_M):
            if NORM:
                xr = _norm_row(X, R, G, S, tl.where(mi < M, mi, 0), stride_xm, stride_xk, stride_rm, offs_k, K,
                               eps, offset, tl.where((nb + col0) == 0, 1, 0) * tl.where(mi < M, 1, 0), HAS_RES, HAS_G,
                               MANUAL_BF16)
            else:
                xr_ptrs = X + tl.where(mi < M, mi, 0).to(tl.int64) * stride_xm + (k_lo + offs_k) * stride_xk
                if EVEN_K:
                    xr = tl.load(xr_ptrs)
                else:
                    xr = tl.load(xr_ptrs, mask=(k_lo + offs_k) < k_hi, other=0.0)
            row = tl.sum(w.to(tl.float32) * xr.to(tl.float32)[None, :], axis=1)
            acc = tl.where(offs_m[:, None] == mi, row[None, :], acc)
    elif LATE:
        if PDL:
            gdc_wait()
        acc3 = tl.zeros((BLOCK_M, BLOCK_N, BLOCK_K), dtype=tl.float32)
        for k0 in range(k_lo, k_hi, BLOCK_K):
            x, w = _load_xw(x_ptrs, w_ptrs, k0, offs_k, k_hi, EVEN_K)
            acc3 += x.to(tl.float32)[:, None, :] * w.to(tl.float32)[None, :, :]
            x_ptrs += BLOCK_K * stride_xk
            w_ptrs += BLOCK_K
        acc = tl.sum(acc3, axis=2)
    else:
        if PDL:
            gdc_wait()
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        ss = tl.zeros((BLOCK_M,), dtype=tl.float32)  # NORM: the rows' sums of squares (dead code otherwise)
        for k0 in range(k_lo, k_hi, BLOCK_K):
            x, w = _load_xw(x_ptrs, w_ptrs, k0, offs_k, k_hi, EVEN_K)
            if NORM:  # the dot tile's prologue: x becomes round(s * (g + offset)); rstd scales acc after the loop
                x, ss = _norm_tile(x, ss, R, G, S, x_rows, mask_m, k0 + offs_k, K, stride_rm, offset,
                                   tl.where((nb + col0) == 0, 1, 0), HAS_RES, HAS_G, MANUAL_BF16)
            if DOT:
                if MANUAL_BF16:  # interpreter: its bf16 tl.dot returns garbage (seen with triton 3.9): exact fp32
                    acc = tl.dot(x.to(tl.float32), tl.trans(w.to(tl.float32)), acc, input_precision="ieee")
                elif IEEE:
                    acc = tl.dot(x, tl.trans(w), acc, input_precision="ieee")
                else:
                    acc = tl.dot(x, tl.trans(w), acc)
            else:
                acc += tl.sum(x.to(tl.float32)[:, None, :] * w.to(tl.float32)[None, :, :], axis=2)
            x_ptrs += BLOCK_K * stride_xk
            w_ptrs += BLOCK_K
        if NORM:
            acc = acc * _inv_rms(ss, K, eps)[:, None]
    mask = mask_m[:, None] & mask_n[None, :]
    if SPLIT_K == 1:
        if HAS_BIAS:
            acc += tl.load(B + rows_n).to(tl.float32)[None, :]
        y_ptrs = Y + offs_m[:, None].to(tl.int64) * N + offs_n[None, :]
        tl.store(y_ptrs, _round_to(acc, Y.dtype.element_ty, MANUAL_BF16), mask=mask)
    else:
        p_ptrs = P + (ks * M + offs_m[:, None]).to(tl.int64) * NTOT + col0 + offs_n[None, :]
        tl.store(p_ptrs, acc, mask=mask)


@triton.jit
def _merged_gemm_kernel(
    X, W0, W1, W2, W3, B0, B1, B2, B3, Y0, Y1, Y2, Y3, P, R, G, S,
    M, K, N0, N1, N2, N3, SW0, SW1, SW2, SW3, C1, C2, C3, NTOT, stride_xm, stride_xk, stride_rm, eps, offset,
    NUM_W: tl.constexpr, HB0: tl.constexpr, HB1: tl.constexpr, HB2: tl.constexpr, HB3: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr,
    EVEN_K: tl.constexpr, DOT: tl.constexpr, IEEE: tl.constexpr, MANUAL_BF16: tl.constexpr,
    LATE: tl.constexpr, FULL: tl.constexpr, EVICT: tl.constexpr, PDL: tl.constexpr,
    NORM: tl.constexpr = False, HAS_RES: tl.constexpr = False, HAS_G: tl.constexpr = False,
):
    """Program (column block ``pid0``, K split ``pid1``); column blocks C1, C2, C3 start weights 1, 2, 3.

    Slots past ``NUM_W`` are never read (the launcher passes weight 0's pointers there). ``PDL``: signal
    ``gdc_launch_dependents()`` first (a following PDL-launched kernel may start; it waits for this one's
    completion before reading what this one writes), and ``gdc_wait()`` in :func:`_tile` before x is read.
    ``NORM``: x (row stride ``stride_xm``), residual ``R`` and norm weight ``G`` are an RMSNorm's inputs
    (:func:`_tile`); ``S`` gets the residual sum. Without ``NORM`` the three are never read.
    """
    if PDL:
        gdc_launch_dependents()
    pid = tl.program_id(0)
    ks = tl.program_id(1)
    if pid < C1:
        _tile(X, W0, B0, Y0, P, M, N0, K, 0, NTOT, stride_xm, stride_xk, SW0, pid, ks,
              R, G, S, stride_rm, eps, offset, HB0, BLOCK_M, BLOCK_N, BLOCK_K, SPLIT_K, EVEN_K, DOT, IEEE,
              MANUAL_BF16, LATE, FULL, EVICT, PDL, NORM, HAS_RES, HAS_G)
    else:
        if NUM_W > 1:
            if pid < C2:
                _tile(X, W1, B1, Y1, P, M, N1, K, N0, NTOT, stride_xm, stride_xk, SW1, pid - C1, ks,
                      R, G, S, stride_rm, eps, offset, HB1, BLOCK_M, BLOCK_N, BLOCK_K, SPLIT_K, EVEN_K, DOT, IEEE,
                      MANUAL_BF16, LATE, FULL, EVICT, PDL, NORM, HAS_RES, HAS_G)
            else:
                if NUM_W > 2:
                    if pid < C3:
                        _tile(X, W2, B2, Y2, P, M, N2, K, N0 + N1, NTOT, stride_xm, stride_xk, SW2, pid - C2, ks,
                              R, G, S, stride_rm, eps, offset, HB2, BLOCK_M, BLOCK_N, BLOCK_K, SPLIT_K, EVEN_K,
                              DOT, IEEE, MANUAL_BF16, LATE, FULL, EVICT, PDL, NORM, HAS_RES, HAS_G)
                    else:
                        if NUM_W > 3:
                            _tile(X, W3, B3, Y3, P, M, N3, K, N0 + N1 + N2, NTOT, stride_xm, stride_xk, SW3,
                                  pid - C3, ks, R, G, S, stride_rm, eps, offset, HB3, BLOCK_M, BLOCK_N, BLOCK_K,
                                  SPLIT_K, EVEN_K, DOT, IEEE, MANUAL_BF16, LATE, FULL, EVICT, PDL, NORM, HAS_RES,
                                  HAS_G)


@triton.jit
def _reduce_one(P, B, Y, M, N, col0, NTOT, nb, HAS_BIAS: tl.constexpr, SPLIT_K: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, MANUAL_BF16: tl.constexpr):
    """Sum the ``SPLIT_K`` partials of column block ``nb`` (in split order), add bias, round, store."""
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = nb * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (offs_m < M)[:, None] & (offs_n < N)[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for s in tl.static_range(SPLIT_K):
        p_ptrs = P + (s * M + offs_m[:, None]).to(tl.int64) * NTOT + col0 + offs_n[None, :]
        acc += tl.load(p_ptrs, mask=mask, other=0.0)
    if HAS_BIAS:
        acc += tl.load(B + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)[None, :]
    y_ptrs = Y + offs_m[:, None].to(tl.int64) * N + offs_n[None, :]
    tl.store(y_ptrs, _round_to(acc, Y.dtype.element_ty, MANUAL_BF16), mask=mask)


@triton.jit
def _reduce_kernel(
    P, B0, B1, B2, B3, Y0, Y1, Y2, Y3, M, N0, N1, N2, N3, C1, C2, C3, NTOT,
    NUM_W: tl.constexpr, HB0: tl.constexpr, HB1: tl.constexpr, HB2: tl.constexpr, HB3: tl.constexpr,
    SPLIT_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, MANUAL_BF16: tl.constexpr,
):
    """Split-K epilogue: one program per column block, dispatched to its weight as in the main kernel."""
    pid = tl.program_id(0)
    if pid < C1:
        _reduce_one(P, B0, Y0, M, N0, 0, NTOT, pid, HB0, SPLIT_K, BLOCK_M, BLOCK_N, MANUAL_BF16)
    else:
        if NUM_W > 1:
            if pid < C2:
                _reduce_one(P, B1, Y1, M, N1, N0, NTOT, pid - C1, HB1, SPLIT_K, BLOCK_M, BLOCK_N, MANUAL_BF16)
            else:
                if NUM_W > 2:
                    if pid < C3:
                        _reduce_one(P, B2, Y2, M, N2, N0 + N1, NTOT, pid - C2, HB2, SPLIT_K, BLOCK_M, BLOCK_N,
                                    MANUAL_BF16)
                    else:
                        if NUM_W > 3:
                            _reduce_one(P, B3, Y3, M, N3, N0 + N1 + N2, NTOT, pid - C3, HB3, SPLIT_K, BLOCK_M,
                                        BLOCK_N, MANUAL_BF16)


# ---------------------------------------------------------------------------------------------- AOT cases


def _signature(dt: str, nw: int) -> dict[str, str]:
    sig = {"X": f"*{dt}"}
    sig.update({f"W{i}": f"*{dt}" for i in range(4)})
    sig.update({f"B{i}": f"*{dt}" for i in range(4)})
    sig.update({f"Y{i}": f"*{dt}" for i in range(4)})
    sig["P"] = "*fp32"
    sig.update({"R": f"*{dt}", "G": f"*{dt}", "S": f"*{dt}"})
    for name in ("M", "K", "N0", "N1", "N2", "N3", "SW0", "SW1", "SW2", "SW3", "C1", "C2", "C3", "NTOT",
                 "stride_xm", "stride_xk", "stride_rm"):
        sig[name] = "i32"
    sig.update({"eps": "fp32", "offset": "fp32"})
    for name in ("NUM_W", "HB0", "HB1", "HB2", "HB3", "BLOCK_M", "BLOCK_N", "BLOCK_K", "SPLIT_K", "EVEN_K",
                 "DOT", "IEEE", "MANUAL_BF16", "LATE", "FULL", "EVICT", "PDL", "NORM", "HAS_RES", "HAS_G"):
        sig[name] = "constexpr"
    return sig


def aot_cases() -> list[dict]:
    """Representative compile cases (the preamble's format): the default configs of the decode shapes.

    Llama-3.2-1B q/k/v (K 2048 -> 2048, 512, 512) and gate/up (2048 -> 8192 x 2) at M = 1 and 32, Qwen3-0.6B
    q/k/v with biases-free and a biased (Qwen2-style) fp16 case, the FMA variant, a float32 IEEE case and
    the split-K reduction.
    """
    cases = []

    def main_case(name, dt, nw, cfg: Config, hb=(False,) * 4, ieee=False, even_k=True, pdl=False,
                  norm=(False,) * 3):
        cases.append({
            "name": name, "fn": _merged_gemm_kernel, "signature": _signature(dt, nw),
            "constexprs": {"NUM_W": nw, "HB0": hb[0], "HB1": hb[1], "HB2": hb[2], "HB3": hb[3],
                           "BLOCK_M": cfg.block_m, "BLOCK_N": cfg.block_n, "BLOCK_K": cfg.block_k,
                           "SPLIT_K": cfg.split_k, "EVEN_K": even_k, "DOT": cfg.dot, "IEEE": ieee,
                           "MANUAL_BF16": False, "LATE": cfg.late and not cfg.dot,
                           "FULL": cfg.full and not cfg.dot, "EVICT": cfg.evict and not cfg.dot, "PDL": pdl,
                           "NORM": norm[0], "HAS_RES": norm[1], "HAS_G": norm[2]},
            "num_warps": cfg.num_warps, **({"targets": ["sm_90"]} if pdl else {})})

    bf = torch.bfloat16
    main_case("qkv_llama1b_m1_bf16", "bf16", 3, default_config(1, (2048, 512, 512), 2048, bf))
    main_case("qkv_llama1b_m32_bf16", "bf16", 3, default_config(32, (2048, 512, 512), 2048, bf))
    main_case("gateup_llama1b_m1_bf16", "bf16", 2, default_config(1, (8192, 8192), 2048, bf))
    main_case("qkv_qwen3_m8_bf16", "bf16", 3, default_config(8, (2048, 1024, 1024), 1024, bf))
    main_case("qkv_bias_m4_fp16", "fp16", 3, default_config(4, (896, 128, 128), 896, torch.float16),
              hb=(True, True, True, False), even_k=False)
    main_case("qkv_fma_m1_bf16", "bf16", 3, Config(1, 32, 128, 2, 4, 2, False))
    main_case("gateup_bn128_m16_bf16", "bf16", 2, Config(16, 128, 64, 1, 8, 3, True))
    main_case("qkv_4warps_m16_bf16", "bf16", 3, Config(16, 16, 256, 2, 4, 3, True))
    main_case("qkv_4warps_m32_fp16", "fp16", 3, Config(32, 32, 64, 1, 4, 3, True))
    main_case("qkv_gemv_m1_bf16", "bf16", 3, Config(1, 16, 512, 2, 4, 3, False, True))
    main_case("gateup_gemv_m8_bf16", "bf16", 2, Config(8, 8, 256, 1, 8, 3, False, True))
    main_case("kproj_gemv_m4_fp16_bias", "fp16", 1, Config(4, 8, 256, 4, 4, 3, False, True), hb=(True,) * 4,
              even_k=False)
    # the full-K GEMV tile (H200 sweep, 2026-12-01): the 64- and 128-elements-per-thread ends, M = 1 and 8, a
    # masked K (896 -> 1024) with biases, a K split (k_proj-sized), evict_first on and off
    main_case("qkv_gemvfull_m1_bf16", "bf16", 3, Config(1, 4, 2048, 1, 4, 1, False, False, True, True))
    main_case("qkv_gemvfull_n8_m1_bf16", "bf16", 3, Config(1, 8, 2048, 1, 4, 1, False, False, True, False))
    main_case("gateup_gemvfull_m8_bf16", "bf16", 2, Config(8, 16, 2048, 1, 8, 1, False, False, True, True))
    main_case("qkv_qwen3_gemvfull_m1_bf16", "bf16", 3, Config(1, 8, 1024, 1, 4, 1, False, False, True, True))
    main_case("qkv_bias_gemvfull_m4_fp16", "fp16", 3, Config(4, 4, 1024, 1, 4, 1, False, False, True, True),
              hb=(True, True, True, False), even_k=False)
    main_case("kproj_gemvfull_split2_m1_bf16", "bf16", 1, Config(1, 8, 1024, 2, 4, 1, False, False, True, True))
    # the RMSNorm prologue (rocm_fused::rms_norm_gemm): Llama q/k/v's M = 1 pick with add + RMSNorm, and a
    # masked K (896) fp16 weightless plain norm at M = 2
    main_case("qkv_addnorm_gemvfull_m1_bf16", "bf16", 3, Config(1, 2, 2048, 1, 8, 1, False, False, True, True),
              norm=(True, True, True))
    # M = 1 as the launch specializes it (an int argument equal to 1 becomes a constexpr): triton 3.6 on the
    # H200 failed to compile the prologue's first form, `(M > mi).to(...)` on a constexpr bool (2026-12-01)
    cases[-1]["signature"]["M"] = "constexpr"
    cases[-1]["constexprs"]["M"] = 1
    main_case("qkv_norm_gemvfull_m2_fp16", "fp16", 3, Config(2, 4, 1024, 1, 4, 1, False, False, True, True),
              even_k=False, norm=(True, False, False))
    # the dot tile's RMSNorm prologue (M 2..32, gemm_configs.NORM_DOT_MK): the fold's own tile at M = 8 with add +
    # RMSNorm (BLOCK_K 64), and at M = 32 (BLOCK_K 32) with a masked K and a weightless plain norm
    main_case("qkv_addnorm_dot_m8_bf16", "bf16", 3, Config(16, 32, 64, 1, 4, 3, True), norm=(True, True, True))
    main_case("gateup_norm_dot_m32_fp32", "fp32", 2, Config(32, 32, 32, 1, 4, 3, True), ieee=True, even_k=False,
              norm=(True, False, False))
    # one deep-pipeline dot tile (Qwen3's M = 8 pick), compiled at its 5 stages: 61 KiB of the 64 KiB gfx942
    # LDS if every stage is buffered. Only one: the 5-stage compiles took 10-24 s each for gfx950 on the
    # 2-core dev machine (triton 3.9, 2026-12-01), too much for CI's budget
    main_case("gateup_deepdot_s5_m8_bf16", "bf16", 2, Config(16, 32, 128, 1, 4, 5, True))
    cases[-1]["num_stages"] = 5
    # the PDL forms (sm_90 only: griddepcontrol is Hopper PTX): the Llama q/k/v M = 1 pick (full-K GEMV tile,
    # weight loads before gdc_wait) and a runtime-K-loop dot tile (gdc_wait before the loop)
    if HAS_GDC:
        main_case("qkv_gemvfull_pdl_m1_bf16", "bf16", 3, Config(1, 2, 2048, 1, 8, 1, False, False, True, True),
                  pdl=True)
        main_case("qkv_dot_pdl_m8_bf16", "bf16", 3, Config(16, 32, 128, 1, 4, 3, True), pdl=True)
    main_case("qkv_m4_fp32_ieee", "fp32", 3, default_config(4, (512, 128, 128), 512, torch.float32), ieee=True)
    red_sig = {"P": "*fp32", **{f"B{i}": "*bf16" for i in range(4)}, **{f"Y{i}": "*bf16" for i in range(4)}}
    red_sig.update({n: "i32" for n in ("M", "N0", "N1", "N2", "N3", "C1", "C2", "C3", "NTOT")})
    red_sig.update({n: "constexpr" for n in ("NUM_W", "HB0", "HB1", "HB2", "HB3", "SPLIT_K", "BLOCK_M", "BLOCK_N",
                                             "MANUAL_BF16")})
    # triton 3.9 + cuobjdump, 2026-12-01: these two show 8 B of stack on sm_90 (none on gfx942/gfx950); the
    # ptxas -v check at development time reported no spills. Reported, not failed; not measured on a GPU.
    for c in cases:
        if c["name"] in ("qkv_llama1b_m1_bf16", "qkv_bias_m4_fp16"):
            c["known_spill"] = "8 B of stack on sm_90 with triton 3.9 (cuobjdump STACK); no AMD scratch"
    cases.append({"name": "splitk_reduce_bf16", "fn": _reduce_kernel, "signature": red_sig,
                  "constexprs": {"NUM_W": 3, "HB0": True, "HB1": True, "HB2": True, "HB3": False, "SPLIT_K": 4,
                                 "BLOCK_M": 16, "BLOCK_N": 32, "MANUAL_BF16": False}, "num_warps": 4})
    return cases
