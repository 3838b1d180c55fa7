"""Triton grouped small-M GEMM: up to four GEMMs of one activation in one launch (``rocm_fused::merged_gemm``).

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
outputs (M, N_i) contiguous. ``M <= MAX_M`` (32): the tile pads M to BLOCK_M (16 or 32 for ``tl.dot``; 1-8
for the FMA variant, a broadcast multiply + sum over K that skips the tensor cores' padding). ``N_i`` and
``K`` need not be multiples of any block: column loads are clamped to the last row (stores are masked) and
K is masked unless the launcher proved it divides evenly.

Split-K (``SPLIT_K > 1``): each program sums one K range into a float32 workspace ``(SPLIT_K, M, sum N_i)``
(no atomics: deterministic), then :func:`_reduce_kernel` adds the splits in order, adds the bias, rounds and
stores: two launches, both capture-safe (the workspace comes from PyTorch's caching allocator, so from the
graph's pool under capture).

Configs: :func:`candidates` lists (BLOCK_M, BLOCK_N, BLOCK_K, SPLIT_K, warps, stages, dot/FMA) per shape;
:func:`default_config` is the heuristic used without tuning (interpreter, graph capture of an untuned
shape, ``ROCM_FUSED_GEMM_TUNE=0``): the widest column block that still gives one program per SM, then the
smallest power-of-two K split that gives two per SM. On a GPU, the first call of a shape outside a capture
times every candidate with ``triton.testing.do_bench`` (L2 flushed between runs; whole launches, the split-K
reduction included) and keeps the fastest for that shape key. Configs with ``num_warps * warp_size > 1024``
are dropped (ROCm's 64-wide wavefronts), and every tile stays within :data:`TILE_BUDGET`, the register
budget found spill-free by AOT compiles for sm_90 and gfx942. Block sizes follow the issue's guidance
(BLOCK_N 16-128, BLOCK_K 64-256, padded M of 16).

GEMV tile (``late=True``, M <= 8): no ``tl.dot``; each program streams a (BLOCK_N, BLOCK_K) slice of one
weight with 16-byte loads along K, multiplies by the M rows of x and keeps the products in a 3-D float32
register tile, summed over K once after the loop. Measured (H200, torch 2.11, triton 3.6, 2026-12-01,
``benchmarks/results/decode_gemm_layer.md``): it wins at M = 1 and 2 (Llama-3.2-1B q/k/v 6.54 us at M = 1 vs
9.8 us for the dot tile before it, separate cuBLAS 18.1 us, concatenated cuBLAS 6.86 us; gate/up 21.95 us
vs 22.55 separate); from M = 4 the dot tile with M padded to 16 wins (q/k/v 9.3 us at M = 4 / 8).
Its K loop is a runtime loop without ``tl.dot``, which Triton does not pipeline: one DRAM round trip per K step,
~8 KB in flight per program, the speed of a naive read of the same bytes (issue 19's CUPTI diagnosis).

Full-K GEMV tile (``full=True``, M <= 8, 16-bit): BLOCK_K covers the program's whole K range (K / split_k
padded to a power of two), so a program issues all its weight loads (BLOCK_N x K, 16-128 elements per thread)
before the first FMA; then each row of x (``tl.static_range``) is multiplied and summed over K once.
``evict=True`` loads the weights ``evict_first``. Measured (H200, torch 2.11, triton 3.6, 2026-12-01, session
3 rows of ``benchmarks/results/decode_gemm_layer.md``), M = 1: Llama-3.2-1B q/k/v 5.37 us (concatenated cuBLAS
6.93, separate 18.02, floor 2.96), gate/up 18.52 us (20.4 / 23.41 / 15.79); Qwen3-0.6B q/k/v 4.23 us (5.42 /
19.98 / 1.98), gate/up 5.28 us (6.63 / 10.69 / 2.96). evict_first was 0-0.44 us faster in each of the 10
pairs swept (never slower).
At M = 8 it loses (Qwen3 q/k/v 10.4 us: one cross-thread sum per row) to the deep-pipeline dot tile
(:func:`deep_dot_configs`: num_stages 5, 4 warps, no K split: Qwen3 q/k/v 5.95 us at M = 8, 6.27 at 32 vs
8.0 / 8.3 for the 8-warp 3-stage split-K dot tiles; which of the three changes made the difference is not
measured: no 4-warp 3-stage no-split twin was in that sweep).

PDL form (``PDL`` constexpr, module switch :data:`PDL`, off): programmatic dependent launch on CUDA sm_90+
(``launch_pdl=True``; ``gdc_launch_dependents()`` first, the full-K tile's weight loads before ``gdc_wait()``,
x after it). Measured slower in a decode step (see :data:`PDL`), so not used by default.

RMSNorm prologue (``NORM`` constexpr, :class:`NormPrologue`, with the full-K tile and no K split:
:func:`prologue_fits`): x is the input of an RMSNorm (plus a residual) whose output the GEMM reads; every program
normalises whole rows itself (:func:`_norm_row`, the RMSNorm kernels' math) while its weight loads are in flight,
and the program of column block 0 stores the residual sum. Used by ``rocm_fused::rms_norm_gemm``
(``providers/triton/norm_gemm.py``, which holds the measured prologue tiles and the numbers).

Measured table: ``benchmarks/sweep_decode_gemm.py`` times :func:`sweep_configs` per shape and M and writes
the fastest to ``gemm_merge_tuned.json`` (with ours vs separate cuBLAS); :func:`pick_config` uses it first
(the smallest measured M >= m), and :func:`check` refuses merges the table says lose (:func:`measured_loss`).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import Any

import torch
import triton
import triton.language as tl

from .._gemm_limits import MAX_WEIGHTS, single_refused, single_slower, single_unmeasured
from .rms_norm import _inv_rms, _round_to

try:  # Hopper's grid dependency control (programmatic dependent launch); triton 3.6 and 3.9 have both
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
    _HAS_GDC = True
except ImportError:  # a Triton without them: the PDL branches are dead code (PDL=False), never traced
    gdc_launch_dependents = gdc_wait = None
    _HAS_GDC = False

#: dtypes the kernel takes (x, weights and biases of one dtype).
DTYPES = (torch.float16, torch.bfloat16, torch.float32)
#: Largest M (tokens) the kernel takes: the decode buckets of the level-2 override (``aten_gemm_max_m``'s
#: default); larger M is compute-bound and belongs to cuBLAS/hipBLASLt or Inductor's templates.
MAX_M = 32
#: Threads per program a GPU can launch (CUDA and HIP both).
MAX_THREADS = 1024


@dataclasses.dataclass(frozen=True)
class Config:
    """One launch configuration.

    Attributes:
        block_m: padded rows (16/32 with ``dot``; 1/2/4/8 for FMA); block_n, block_k: tile of a weight;
        split_k: K ranges summed through the workspace (1 = direct store); num_warps, num_stages: Triton's;
        dot: ``tl.dot`` tiles (True) or a broadcast multiply + sum (False).
        late: (with ``dot=False``) the GEMV tile: products accumulate in a (BLOCK_M, BLOCK_N, BLOCK_K) float32
            register tile, summed over K once after the K loop (no cross-thread reduction per K step).
        full: (with ``dot=False``) the full-K GEMV tile: BLOCK_K covers the program's whole K range (K / split_k
            padded to a power of two), so every weight load of a program is issued before the first FMA (one
            iteration, no K loop); then one ``tl.sum`` over K per row of x (M in registers, one row at a time).
        evict: load the weights with ``eviction_policy="evict_first"`` (they are streamed once per step).
    """

    block_m: int
    block_n: int
    block_k: int
    split_k: int = 1
    num_warps: int = 4
    num_stages: int = 3
    dot: bool = True
    late: bool = False
    full: bool = False
    evict: bool = False


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
        for k0 in range(k_lo, k_hi, BLOCK_K):
            x, w = _load_xw(x_ptrs, w_ptrs, k0, offs_k, k_hi, EVEN_K)
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


# ---------------------------------------------------------------------------------------------- measured table

#: Configs picked by ``benchmarks/sweep_decode_gemm.py`` (per GPU name, shape and M), with the times of ours
#: and of separate cuBLAS GEMMs. ``ROCM_FUSED_GEMM_TABLE`` names another file (the sweep writes there).
TABLE_PATH = os.path.join(os.path.dirname(__file__), "gemm_merge_tuned.json")
_TABLE_CACHE: dict[str, Any] = {}


def load_table(path: str | None = None) -> list[dict]:
    """Entries of the measured table (empty when the file is absent or unreadable); read once per path.

    Each entry: ``device`` (``torch.cuda.get_device_name``), ``m``, ``k``, ``ns`` (list), ``dtype`` (e.g.
    ``"bfloat16"``), ``config`` (the :class:`Config` fields), ``ours_us``, ``separate_us`` (cuBLAS, one GEMM
    per weight), both us per call in CUDA graphs with the weights streaming from HBM.
    """
    import json

    path = path or os.environ.get("ROCM_FUSED_GEMM_TABLE") or TABLE_PATH
    if path not in _TABLE_CACHE:
        try:
            with open(path) as f:
                _TABLE_CACHE[path] = list(json.load(f).get("entries", []))
        except (OSError, ValueError):
            _TABLE_CACHE[path] = []
    return _TABLE_CACHE[path]


def _device_name() -> str | None:
    if not torch.cuda.is_available():
        return None
    try:
        return torch.cuda.get_device_name(torch.cuda.current_device())
    except Exception:  # no usable device (driver state): no table applies
        return None


def spec_device(spec: dict[str, Any]) -> str | None:
    """The device whose measured tables decide ``spec``: the current GPU's name, or None for a compile of CPU
    tensors (``spec["device_type"] == "cpu"``), which the GPU's table does not describe even on a GPU host (the
    CPU rules apply: :func:`measured_loss` refuses nothing, :func:`measured_single` reads ``"cpu"`` entries)."""
    return None if spec.get("device_type") == "cpu" else _device_name()


def table_entries(k: int, ns: tuple[int, ...], dtype: torch.dtype, device: str | None = None,
                  path: str | None = None) -> list[dict]:
    """Entries for this device, K, Ns and dtype, sorted by M, of the table at ``path`` (:func:`load_table`'s
    default: this GEMM's; ``norm_gemm`` passes its prologue table)."""
    device = device or _device_name()
    if device is None:
        return []
    dt = str(dtype).replace("torch.", "")
    return sorted((e for e in load_table(path) if e.get("device") == device and e.get("k") == k
                   and tuple(e.get("ns", ())) == tuple(ns) and e.get("dtype") == dt), key=lambda e: e["m"])


def table_config(m: int, k: int, ns: tuple[int, ...], dtype: torch.dtype, device: str | None = None
                 ) -> Config | None:
    """The measured config of the smallest measured M >= ``m`` (its BLOCK_M covers ``m``), else None."""
    for e in table_entries(k, ns, dtype, device):
        if e["m"] >= m:
            cfg = Config(**e["config"])
            return cfg if cfg.block_m >= m else None  # one M block per launch: launch() refuses a smaller one
    return None


def _bucket_entries(entries: list[dict], m: int | None, hi: int, beyond: dict | None) -> list[dict]:
    """The table rows (sorted by M) that decide an M bucket: the smallest measured M >= ``hi`` for a static
    ``m``; every row up to it for a symbolic M (``hi`` its upper bound: taken only if it wins at every M it may
    run). ``beyond``: the row to use when no measured M reaches ``hi`` (None: no rows)."""
    cover = next((e for e in entries if e["m"] >= hi), beyond)
    if cover is None:
        return []
    return [cover] if m is not None else [e for e in entries if e["m"] <= cover["m"]]


def measured_loss(spec: dict[str, Any], device: str | None = None) -> str | None:
    """Why the table says not to take this merge on this GPU (None: take it).

    Static M: the entry of the smallest measured M >= m; symbolic M: every entry up to the bucket covering
    ``m_upper`` (a bucket is taken only if ours wins at every M it may run). On a GPU the table has entries
    for, a shape it has none for is refused too ("not measured"), and so is every shape on a GPU the table
    has no entry for (the pass's default is on for CUDA only where it measured faster), unless
    ``ROCM_FUSED_GEMM_UNMEASURED=1`` (then the first call tunes it). CPU / the interpreter refuse nothing.
    """
    k, ns, dt = spec.get("k"), spec.get("ns"), spec.get("dtype")
    if k is None or ns is None or None in ns:
        return None
    device = device or spec_device(spec)
    if device is None:  # no GPU, or CPU tensors
        return None
    entries = table_entries(k, tuple(ns), dt, device)
    if not entries:
        if os.environ.get("ROCM_FUSED_GEMM_UNMEASURED", "0") != "1":
            what = "shape" if any(e.get("device") == device for e in load_table()) else "GPU"
            return (f"{what} not measured: K={k} N={'/'.join(map(str, ns))} on {device} (run "
                    "benchmarks/sweep_decode_gemm.py, or set ROCM_FUSED_GEMM_UNMEASURED=1)")
        return None
    m = spec.get("m")
    hi = m if m is not None else spec.get("m_upper")
    if hi is None:
        return None
    for e in _bucket_entries(entries, m, hi, entries[-1]):
        if e["ours_us"] >= e["separate_us"]:
            return (f"measured slower than separate cuBLAS GEMMs on {e['device']} at M={e['m']}: "
                    f"{e['ours_us']:.1f} vs {e['separate_us']:.1f} us (gemm_merge_tuned.json)")
    return None


#: A single GEMM is taken only when the table has ours faster than cuBLAS by more than this fraction. A guess
#: above the spread of cuBLAS's own time for one weight set across the table's M rows (H200, 2026-12-01:
#: Llama-3.2-1B q/k/v separate 18.02-18.35 us at M = 1-32, 1.8%): a single GEMM gains nothing but speed, so a
#: tie within timing noise stays with cuBLAS (and Inductor keeps fusing around it).
SINGLE_MIN_GAIN = 0.03


def measured_single(spec: dict[str, Any], device: str | None = None) -> str | None:
    """Whether to take a single GEMM (``spec["count"] == 1``): None only where the measured table has an
    entry for this K, N, dtype and device covering the M bucket (static M: the smallest measured M >= m;
    symbolic M: every entry up to the one covering ``m_upper``) and ours beat cuBLAS by more than
    :data:`SINGLE_MIN_GAIN` in each. Never "unmeasured" (``ROCM_FUSED_GEMM_UNMEASURED`` does not apply),
    on CPU / the interpreter too, where the device is ``"cpu"`` (a table passed in through
    ``ROCM_FUSED_GEMM_TABLE``, as the sweep's ``--device cpu`` writes it).

    Returns:
        None (take it), or a typed refusal (``providers/_gemm_limits.py``): measured slower (numbers
        included) or not measured.
    """
    k, ns, dt = spec.get("k"), spec.get("ns"), spec.get("dtype")
    hi = spec.get("m") if spec.get("m") is not None else spec.get("m_upper")
    if k is None or not ns or None in ns or hi is None:
        return single_unmeasured("symbolic K/N or unbounded M")
    device = device or spec_device(spec) or "cpu"
    entries = table_entries(k, tuple(ns), dt, device)
    look = _bucket_entries(entries, spec.get("m"), hi, None)
    if not look:
        return single_unmeasured(f"K={k} N={ns[0]} M<={hi} on {device}")
    for e in look:
        if e["ours_us"] >= e["separate_us"] * (1 - SINGLE_MIN_GAIN):
            return single_slower(f" (by > {SINGLE_MIN_GAIN:.0%}) on {e['device']} at M={e['m']}: "
                                 f"{e['ours_us']:.2f} vs cuBLAS {e['separate_us']:.2f} us (gemm_merge_tuned.json)")
    return None


# ---------------------------------------------------------------------------------------------- limits


def check(spec: dict[str, Any]) -> str | None:
    """Compile-time limits of this kernel.

    Args:
        spec: keys of ``rocm_inductor.ops.gemm_merge.merged_gemm_spec``.

    Returns:
        ``None`` if the kernel takes it, else the reason in plain words.
    """
    if spec.get("device_type") == "cpu" and not _interpreting():  # a CPU graph on a GPU host
        return "CPU tensors: Triton runs them only under TRITON_INTERPRET=1"
    dt = spec.get("dtype")
    if dt not in DTYPES:
        return f"triton merged_gemm takes float16/bfloat16/float32, input is {str(dt).replace('torch.', '')}"
    if any(d != dt for d in spec.get("weight_dtypes", ())) or any(
            d is not None and d != dt for d in spec.get("bias_dtypes", ())):
        return "weights/biases of another dtype than the activation"
    upper = spec.get("m_upper")
    if upper is None or upper > MAX_M:
        return f"M (upper bound {upper}) is not <= {MAX_M}: the kernel is for decode buckets"
    if not 1 <= spec.get("count", 0) <= MAX_WEIGHTS:
        return f"{spec.get('count')} weights; one launch takes 1-{MAX_WEIGHTS}"
    if spec.get("k") is None or any(n is None for n in spec.get("ns", (None,))):
        return "K or an N is symbolic (weights have static shapes in every model we target)"
    single = spec.get("count") == 1
    if single:  # before the layout check: a measured loss is reported whatever the layout
        why = measured_single(spec)
        if why is not None:
            return why
    if not all(spec.get("weight_k_contiguous", ())):
        why = "a weight is not contiguous along K (the kernel streams (N, K) rows with unit K stride)"
        if single:
            return single_refused(why)
        return why
    return None if single else measured_loss(spec)


# ---------------------------------------------------------------------------------------------- configs


def warp_size() -> int:
    """Warp (wavefront) size of the current device: 64 on HIP (CDNA), 32 on NVIDIA and the interpreter."""
    from .sigmoid_gate import warp_size as ws

    return ws()


def _sms() -> int:
    if torch.cuda.is_available():
        return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    return 132  # interpreter: the H200's count, only shapes the default config


def _pow2_at_least(v: int) -> int:
    return triton.next_power_of_2(max(int(v), 1))


def _blocks(ns: tuple[int, ...], block_n: int) -> int:
    return sum(triton.cdiv(n, block_n) for n in ns)


def _split_for(ns: tuple[int, ...], k: int, block_n: int, block_k: int, sms: int) -> int:
    """Smallest power-of-two K split (<= 8, each split >= one BLOCK_K) giving >= 2 programs per SM; none
    when the column blocks alone give >= 1.5 per SM (the split's workspace round trip would cost more)."""
    split, programs = 1, _blocks(ns, block_n)
    if 2 * programs >= 3 * sms:
        return 1
    while programs * split < 2 * sms and split < 8 and k >= 2 * split * block_k:
        split *= 2
    return split


#: Register budget of a ``tl.dot`` program: BLOCK_M * BLOCK_N * BLOCK_K <= TILE_BUDGET * num_warps (16-bit
#: inputs; half for float32). Measured by AOT compiling every :func:`tiles` entry for sm_90 (ptxas -v) and
#: gfx942 (triton 3.9, 2026-12-01): none spilled (sm_90: 127-182 registers; gfx942: 58-194 VGPRs, no scratch),
#: while tiles at twice the budget did: M 16 x N 64 x K 256 at 4 warps 255 registers + 36 B spilled on sm_90,
#: N 128 x K 128 2260 B; N 64 x K 256 at 8 warps spilled 31 VGPRs on gfx942.
TILE_BUDGET = 16384


def tiles(block_m: int, k: int, dtype: torch.dtype, warp: int) -> list[tuple[int, int, int]]:
    """(BLOCK_N, BLOCK_K, num_warps) within :data:`TILE_BUDGET`, BLOCK_N 16-128, BLOCK_K 64-256 (128 for float32;
    <= K padded to a power of two), 4 or 8 warps with ``num_warps * warp <= 1024`` (ROCm wave64: both fit)."""
    budget = TILE_BUDGET // (2 if dtype == torch.float32 else 1)
    kmax = max(16, _pow2_at_least(k))
    # BLOCK_K at most 512 bytes of a weight row: N 16 x K 512 at 8 warps spilled 12 B on sm_90 (128 registers)
    bk_max = 128 if dtype == torch.float32 else 256
    out = []
    for warps in (4, 8):
        if warps * warp > MAX_THREADS:
            continue
        for bn in (16, 32, 64, 128):
            bk = bk_max
            while bk > 64 and block_m * bn * bk > budget * warps:
                bk //= 2
            if block_m * bn * bk <= budget * warps:
                out.append((bn, min(bk, kmax), warps))
    return out


def default_config(m: int, ns: tuple[int, ...], k: int, dtype: torch.dtype, sms: int | None = None,
                   warp: int = 32) -> Config:
    """The untuned config (see the module docstring); a pure function of the shape and SM count.

    ``tl.dot`` with M padded to 16 (32 above 16 rows), 8 warps, the widest BLOCK_N of 64/32/16 giving >= one
    program per SM, the largest BLOCK_K of :func:`tiles` for it, then the K split of :func:`_split_for`.
    A guess from the issue's guidance, not measured: it has to be correct, capture-safe and not slow.
    """
    sms = sms or _sms()
    block_m = 16 if m <= 16 else 32
    block_n = 16
    for bn in (64, 32):
        if _blocks(ns, bn) >= sms:
            block_n = bn
            break
    table = {(bn, w): bk for bn, bk, w in tiles(block_m, k, dtype, warp)}
    warps = 8 if (block_n, 8) in table else 4
    block_k = table[(block_n, warps)]
    return Config(block_m, block_n, block_k, _split_for(ns, k, block_n, block_k, sms), warps, 3, True)


#: Largest M the GEMV tile takes: its 3-D accumulator grows with M (issue 19 asks for M <= 8).
GEMV_MAX_M = 8
#: float32 products each thread of a GEMV tile keeps (BLOCK_M * BLOCK_N * BLOCK_K / threads): 32-64, i.e. at
#: M = 1 four to eight 16-byte weight loads in flight per thread per K step. A guess bounded like the dot
#: tiles' budget (64 float32 accumulators); tests/test_triton_aot.py compiles the aot_cases for spills and
#: benchmarks/sweep_decode_gemm.py measures which tile wins.
GEMV_ELEMS = (32, 64)


def gemv_tiles(m: int, k: int, warp: int) -> list[tuple[int, int, int]]:
    """(BLOCK_N, BLOCK_K, num_warps) of the GEMV tile at M <= :data:`GEMV_MAX_M`: BLOCK_N 4-32, BLOCK_K
    128-512 (<= K padded to a power of two), 4 or 8 warps (``num_warps * warp <= 1024``), with
    :data:`GEMV_ELEMS` products per thread."""
    if m > GEMV_MAX_M:
        return []
    bm = _pow2_at_least(m)
    kmax = max(16, _pow2_at_least(k))
    out = []
    for warps in (4, 8):
        if warps * warp > MAX_THREADS:
            continue
        for bn in (4, 8, 16, 32):
            for bk in (128, 256, 512):
                if bk > kmax and bk != 128:
                    continue
                e = bm * bn * min(bk, kmax) / (warps * warp)
                if GEMV_ELEMS[0] <= e <= GEMV_ELEMS[1]:
                    out.append((bn, min(bk, kmax), warps))
    return sorted(set(out))


def gemv_configs(m: int, ns: tuple[int, ...], k: int, sms: int, warp: int) -> list[Config]:
    """Every GEMV-tile config of :func:`gemv_tiles` at its automatic K split (:func:`_split_for`), and
    without a split where that split is > 1 and the column blocks alone fill the SMs once."""
    out = []
    for bn, bk, warps in gemv_tiles(m, k, warp):
        split = _split_for(ns, k, bn, bk, sms)
        out.append(Config(_pow2_at_least(m), bn, bk, split, warps, 3, False, True))
        if split > 1 and _blocks(ns, bn) >= sms:
            out.append(Config(_pow2_at_least(m), bn, bk, 1, warps, 3, False, True))
    return out


#: 16-bit weight elements each thread of a full-K GEMV tile loads (BLOCK_N * BLOCK_K / threads): 16-128, i.e.
#: 2-16 16-byte loads in flight per thread (8-64 32-bit registers for the packed tile). Issue 19's diagnosis
#: (H200, 2026-12-01, CUPTI kernel times): the runtime-K-loop GEMV tile had ~8 KB in flight per program
#: and ran at the speed of a naive read; the upper end is bounded by the AOT spill check
#: (tests/test_triton_aot.py, sm_90 and gfx942), the rest is left to the sweep.
GEMV_FULL_ELEMS = (16, 128)


def gemv_full_tiles(m: int, k: int, split: int, warp: int, warp_counts: tuple[int, ...] = (4, 8)
                    ) -> list[tuple[int, int, int]]:
    """(BLOCK_N, BLOCK_K, num_warps) of the full-K GEMV tile at M <= :data:`GEMV_MAX_M` and K split ``split``:
    BLOCK_K = ceil(K / split) padded to a power of two (>= 16), BLOCK_N 1-16, ``warp_counts`` warps (the sweep's
    4 and 8; benchmarks pass others) with ``num_warps * warp <= 1024``, :data:`GEMV_FULL_ELEMS` weight elements
    per thread. Empty above M = 8."""
    if m > GEMV_MAX_M:
        return []
    bk = max(16, _pow2_at_least(triton.cdiv(k, split)))
    out = []
    for warps in warp_counts:
        if warps * warp > MAX_THREADS:
            continue
        for bn in (1, 2, 4, 8, 16):
            e = bn * bk / (warps * warp)
            if GEMV_FULL_ELEMS[0] <= e <= GEMV_FULL_ELEMS[1]:
                out.append((bn, bk, warps))
    return out


def gemv_full_configs(m: int, ns: tuple[int, ...], k: int, sms: int, warp: int) -> list[Config]:
    """Full-K GEMV configs (:func:`gemv_full_tiles`), weights loaded ``evict_first``; without a K split, and
    with the smallest power-of-two split (<= 8) that fills the SMs where the column blocks alone cannot
    (a split-K reduce launch costs ~1-2 us, issue 19's CUPTI diagnosis); plus the normal-eviction twins of the
    64-elements-per-thread tiles, so the sweep shows what ``evict_first`` is worth."""
    out = []
    bm = _pow2_at_least(m)
    for split in (1, 2, 4, 8):
        if split > 1 and k < 16 * split:
            break
        for bn, bk, warps in gemv_full_tiles(m, k, split, warp):
            blocks = _blocks(ns, bn)
            if split > 1 and (blocks >= sms or blocks * split // 2 >= sms or warps != 4):
                continue  # columns fill the SMs already (or a smaller split did); splits at 4 warps only
            out.append(Config(bm, bn, bk, split, warps, 1, False, False, True, True))
            if split == 1 and bn * bk == 64 * warps * warp:
                out.append(Config(bm, bn, bk, split, warps, 1, False, False, True, False))
    return out


#: LDS bytes a swept ``tl.dot`` config may ask for its pipeline stages ((BLOCK_M + BLOCK_N) * BLOCK_K * 2 B per
#: stage): gfx942's 64 KiB (the smallest of our targets; sm_90 has 227 KiB).
STAGE_LDS_BYTES = 64 << 10


def deep_dot_configs(m: int, ns: tuple[int, ...], k: int, dtype: torch.dtype, sms: int, warp: int) -> list[Config]:
    """``tl.dot`` tiles with a deeper software pipeline (num_stages 5: more K blocks of the weight in flight
    per program, the lever issue 19's diagnosis points at) for M 8..32, 16-bit dtypes: BLOCK_N 16/32 of
    :func:`tiles` at 4 warps, at the automatic K split and without a split, within :data:`STAGE_LDS_BYTES`;
    plus each tile's 3-stage, no-split twin (to separate the stages' effect from the 4 warps' and the split's).
    Caveat: AOT compiles with the local triton 3.9 report the same shared memory at num_stages 1, 3 and 5
    (even for a plain dot loop), so that Triton pipelines this loop is not confirmed from the CPU machine."""
    if not GEMV_MAX_M <= m <= MAX_M or dtype == torch.float32:
        return []
    block_m = 16 if m <= 16 else 32
    out = []
    for bn, bk, warps in tiles(block_m, k, dtype, warp):
        if bn > 32 or warps != 4:  # 4 warps: the 8-warp dot tiles are candidates() already (3 stages)
            continue
        stages = 5
        while bk > 64 and (block_m + bn) * bk * 2 * stages > STAGE_LDS_BYTES:
            bk //= 2
        if (block_m + bn) * bk * 2 * stages > STAGE_LDS_BYTES:
            continue
        split = _split_for(ns, k, bn, bk, sms)
        for sp in sorted({split, 1}):
            out.append(Config(block_m, bn, bk, sp, warps, stages, True))
        # the 3-stage twin: session 3's winners (4 warps, 5 stages, no split) had none, so what the 5 stages
        # are worth (vs the 4 warps and the missing split) is not measured yet
        out.append(Config(block_m, bn, bk, 1, warps, 3, True))
    return out


def short_configs(m: int, ns: tuple[int, ...], k: int, dtype: torch.dtype, sms: int, warp: int) -> list[Config]:
    """A short sweep list (``sweep_decode_gemm.py --short``: compiles dominate a device call), 4-7 configs,
    the kinds that won session 3's sweeps (``decode_gemm_layer.md``): the default; below M = 8 (16-bit) the
    full-K GEMV tiles with ``evict_first`` at 32 and 64 weight elements per thread, 4 and 8 warps, each at
    its smallest SM-filling K split (none when the columns fill the SMs), i.e. the M = 1 winners' family
    (not at M = 8: it lost there, Qwen3 q/k/v 10.4 vs 5.95 us); from M = 8 the deep-pipeline dot
    tiles (:func:`deep_dot_configs`, 5 stages only) and the 8-warp BLOCK_N 64
    dot tile without a split (Llama gate/up's M = 8 winner)."""
    out = [default_config(m, ns, k, dtype, sms, warp)]
    if dtype != torch.float32 and m < GEMV_MAX_M:
        out += [c for c in gemv_full_configs(m, ns, k, sms, warp)
                if c.evict and c.block_n * c.block_k / (c.num_warps * warp) in (32, 64)]
    if dtype != torch.float32 and m >= GEMV_MAX_M:
        out += [c for c in deep_dot_configs(m, ns, k, dtype, sms, warp) if c.num_stages == 5]
        bm = 16 if m <= 16 else 32
        out += [Config(bm, 64, bk, 1, 8, 3, True) for bn, bk, w in tiles(bm, k, dtype, warp) if (bn, w) == (64, 8)]
    return _distinct_fitting(out, warp)


def _distinct_fitting(configs: list[Config], warp: int) -> list[Config]:
    """``configs`` in order without repeats and without those over ``MAX_THREADS`` threads at ``warp``."""
    seen, kept = set(), []
    for c in configs:
        if c not in seen and c.num_warps * warp <= MAX_THREADS:
            seen.add(c)
            kept.append(c)
    return kept


def sweep_configs(m: int, ns: tuple[int, ...], k: int, dtype: torch.dtype, sms: int, warp: int) -> list[Config]:
    """What ``benchmarks/sweep_decode_gemm.py`` times per shape: :func:`candidates` (with two runtime-K-loop
    GEMV tiles) plus every :func:`gemv_full_configs` and :func:`deep_dot_configs` entry (16-bit dtypes only;
    float32 keeps the dot tiles)."""
    out = list(candidates(m, ns, k, dtype, sms, warp))
    if dtype != torch.float32:
        out += [c for c in gemv_full_configs(m, ns, k, sms, warp) + deep_dot_configs(m, ns, k, dtype, sms, warp)
                if c not in out]
    return out


def candidates(m: int, ns: tuple[int, ...], k: int, dtype: torch.dtype, sms: int, warp: int) -> list[Config]:
    """Configs timed for one shape (first call on a GPU), 4-6 of them, since each is one more Triton compile
    (~0.5-1 s) at the first call of a shape: the default; the 8-warp :func:`tiles` with BLOCK_N 16/32/64 at
    their auto K split (BLOCK_N 128 too when it still gives one program per SM); the default's BLOCK_N
    without a split when it has one; the FMA variant (BLOCK_N 32, BLOCK_K 128, 4 warps: 127 registers on
    sm_90 at M = 1, no spills) for M <= 2. Configs over 1024 threads at ``warp`` are dropped."""
    block_m = 16 if m <= 16 else 32
    default = default_config(m, ns, k, dtype, sms, warp)
    out = [default]
    for bn, bk, warps in tiles(block_m, k, dtype, warp):
        if warps != default.num_warps or (bn == 128 and _blocks(ns, 128) < sms):
            continue
        out.append(Config(block_m, bn, bk, _split_for(ns, k, bn, bk, sms), warps, 3, True))
    if default.split_k > 1:
        out.append(dataclasses.replace(default, split_k=1))
    if m <= 2 and dtype != torch.float32:
        out.append(Config(_pow2_at_least(m), 32, 128, _split_for(ns, k, 32, 128, sms), 4, 2, False))
    if m <= GEMV_MAX_M and dtype != torch.float32:  # two GEMV tiles: narrow and wide column blocks
        g = gemv_configs(m, ns, k, sms, warp)
        out += g[:1] + g[-1:]
        full = gemv_full_configs(m, ns, k, sms, warp)  # and the full-K tile nearest 64 elements per thread
        if full:
            out.append(min(full, key=lambda c: (abs(c.block_n * c.block_k / (c.num_warps * warp) - 64),
                                                c.split_k, not c.evict, c.num_warps)))
    return _distinct_fitting(out, warp)


# ---------------------------------------------------------------------------------------------- launch


def _interpreting() -> bool:
    from . import interpreting

    return interpreting()


def _capturing(x: torch.Tensor) -> bool:
    """True while a CUDA/HIP graph is being captured on the current stream (tests patch this)."""
    return x.is_cuda and torch.cuda.is_current_stream_capturing()


#: Programmatic dependent launch (Hopper+, issue 19): launch the main kernel with ``launch_pdl=True`` and its
#: ``PDL`` form (``gdc_launch_dependents()`` first; the full-K GEMV tile issues its weight loads, then
#: ``gdc_wait()``, then reads x), so its start and weight stream overlap the preceding kernel's tail.
#: False: never; True or None: wherever :func:`pdl_available`. ``ROCM_FUSED_GEMM_PDL=0/1`` overrides it.
#: Off: measured slower where it matters (H200, torch 2.11.0+cu130, triton 3.6.0, 2026-12-01,
#: ``benchmarks/bench_pdl_gemm.py``, Llama-3.2-1B q/k/v at M = 1, us per call in CUDA graphs, weights rotated;
#: the capture keeps PDL: 4 programmatic edges in a 4-pair graph): back to back 5.27 -> 5.00 us, but after a
#: producer kernel (what the decode step has) an ATen elementwise + GEMM pair 6.34 -> 6.78 us and an Inductor
#: add + RMSNorm + GEMM pair 6.75 -> 6.97 us; the Llama-3.2-1B B = 1 decode step (only gemm_merge on, 65 of our
#: launches) 1198.1 -> 1241.2 us. Outputs bitwise equal. RESULTS.md, issue 19, session 5. With Inductor's own
#: PDL codegen too (``triton.enable_pdl``, ``benchmarks/bench_ipdl_pair.py``, same H200 and versions): the
#: (add + RMSNorm, q/k/v) pair 6.73 -> 5.86 us, but the B = 1 step 1189.1 -> 1197.3 us: still off
#: (RESULTS.md, issue 19, "Inductor's own PDL").
PDL: bool | None = False


@functools.cache
def triton_has_pdl() -> bool:
    """Whether the installed Triton has PDL: ``gdc_wait`` / ``gdc_launch_dependents`` and the NVIDIA backend's
    ``launch_pdl`` launch option (a field of its ``CUDAOptions``; triton 3.6 and 3.9 have both)."""
    if not _HAS_GDC:
        return False
    try:
        from triton.backends.nvidia.compiler import CUDAOptions
    except Exception:  # no NVIDIA backend in this Triton (e.g. a ROCm-only build)
        return False
    return "launch_pdl" in getattr(CUDAOptions, "__dataclass_fields__", {})


def pdl_available(x: torch.Tensor) -> bool:
    """True where PDL can be used for a launch on ``x``'s device: a CUDA (not HIP) tensor on sm_90 or newer,
    outside Triton's interpreter, with :func:`triton_has_pdl`."""
    if _interpreting() or not x.is_cuda or getattr(torch.version, "hip", None):
        return False
    if torch.cuda.get_device_capability(x.device)[0] < 9:
        return False
    return triton_has_pdl()


def use_pdl(x: torch.Tensor, weights: list[torch.Tensor]) -> bool:
    """Whether this launch uses PDL: :data:`PDL` (or ``ROCM_FUSED_GEMM_PDL``) on, :func:`pdl_available`, and
    every weight an ``nn.Parameter`` (the PDL form reads the weights before ``gdc_wait()``: a weight computed by
    the preceding kernel, e.g. a dequantized one or the ``.contiguous()`` copy :func:`merged_gemm` makes,
    could be read before it is written; under torch.compile the parameters reach the op as Parameters, seen
    on CPU with the Triton interpreter; freezing's constants are plain tensors, so no PDL there)."""
    env = os.environ.get("ROCM_FUSED_GEMM_PDL")
    wanted = env == "1" if env in ("0", "1") else PDL is not False
    return (wanted and all(isinstance(w, torch.nn.Parameter) for w in weights) and pdl_available(x))


#: Launches of the main kernel in this process with PDL on / off (benchmarks read it; CUDA-graph replays are
#: not launches: one count per capture).
PDL_LAUNCHES = {"on": 0, "off": 0}

#: shape key -> the config tuning picked (this process).
_TUNED: dict[tuple, Config] = {}


def _key(x: torch.Tensor, weights, biases) -> tuple:
    return (x.shape[0], x.shape[1], tuple(w.shape[0] for w in weights), x.dtype,
            tuple(b is not None for b in biases), str(x.device))


@dataclasses.dataclass(frozen=True)
class NormPrologue:
    """The RMSNorm whose output a launch's GEMM reads (``launch(..., norm=...)``): x is then its *input*.

    Attributes:
        residual: (M, K) with unit column stride, or None (plain RMSNorm); its sum with x is stored to ``s_out``.
        weight: (K,) norm weight of any float dtype, or None (weightless); eps, offset: as ``rocm_fused::rms_norm``.
        s_out: (M, K) contiguous tensor of x's dtype for ``x + residual`` (None without a residual). Not written
            when M, an N or K is 0 (:func:`launch` returns before the kernel; ``norm_gemm.rms_norm_gemm`` takes the
            two-launch path there).
    """

    residual: torch.Tensor | None
    weight: torch.Tensor | None
    eps: float
    offset: float
    s_out: torch.Tensor | None


def prologue_fits(cfg: Config, k: int) -> bool:
    """Whether ``cfg`` can run an RMSNorm prologue: the full-K GEMV tile without a K split, so every program
    holds whole rows of x (BLOCK_K >= K) and normalises them itself."""
    return cfg.full and not cfg.dot and cfg.split_k == 1 and cfg.block_k >= k


def launch(x: torch.Tensor, weights: list[torch.Tensor], biases: list[torch.Tensor | None], cfg: Config,
           outs: list[torch.Tensor] | None = None, norm: NormPrologue | None = None) -> list[torch.Tensor]:
    """Run ``cfg`` once (no checks beyond shapes; :func:`merged_gemm` validates). Returns the outputs.

    ``norm``: x is the input of that RMSNorm and the GEMM reads its output (one launch; ``cfg`` must pass
    :func:`prologue_fits`, else ValueError). ValueError too where ``cfg.block_m < M`` (one M block)."""
    m, k = x.shape
    ns = [w.shape[0] for w in weights]
    if outs is None:
        outs = [torch.empty((m, n), dtype=x.dtype, device=x.device) for n in ns]
    if m == 0 or any(n == 0 for n in ns):
        return outs
    if k == 0:
        for o, b in zip(outs, biases, strict=True):
            o.copy_(b.expand_as(o) if b is not None else torch.zeros_like(o))
        return outs
    nw = len(weights)
    blocks = [triton.cdiv(n, cfg.block_n) for n in ns]
    cum = [sum(blocks[: i + 1]) for i in range(nw)]
    c1, c2, c3 = (cum + [cum[-1]] * 3)[:3]
    ntot = sum(ns)
    pad = lambda seq, fill: list(seq) + [fill] * (MAX_WEIGHTS - nw)  # noqa: E731
    ws = pad(weights, weights[0])
    bs = [b if b is not None else weights[0] for b in biases]
    bs = pad(bs, bs[0])
    ys = pad(outs, outs[0])
    nsp = pad(ns, ns[0])
    sw = pad([w.stride(0) for w in weights], weights[0].stride(0))
    hb = pad([b is not None for b in biases], False)
    split = cfg.split_k
    if cfg.block_m < m:  # one program per column block covers every row: rows past BLOCK_M would stay unwritten
        raise ValueError(f"config BLOCK_M {cfg.block_m} < M {m}: the kernel's grid has no M dimension")
    if cfg.full and not cfg.dot and cfg.block_k * split < k:
        raise ValueError(f"full-K GEMV tile needs BLOCK_K * SPLIT_K >= K, got {cfg.block_k} * {split} < {k}")
    if norm is not None and not prologue_fits(cfg, k):
        raise ValueError(f"an RMSNorm prologue needs the full-K GEMV tile without a K split, got {cfg}")
    work = torch.empty((split, m, ntot), dtype=torch.float32, device=x.device) if split > 1 else outs[0]
    nrm = {"R": x, "G": x, "S": x, "stride_rm": 0, "eps": 0.0, "offset": 0.0}
    if norm is not None:
        nrm = {"R": x if norm.residual is None else norm.residual, "G": x if norm.weight is None else norm.weight,
               "S": x if norm.s_out is None else norm.s_out,
               "stride_rm": 0 if norm.residual is None else norm.residual.stride(0),
               "eps": float(norm.eps), "offset": float(norm.offset)}
    even_k = k % (cfg.block_k * split) == 0
    manual = _interpreting()
    ieee = x.dtype == torch.float32
    pdl = use_pdl(x, weights)
    extra = {"launch_pdl": True} if pdl else {}  # never passed where the backend lacks the option
    PDL_LAUNCHES["on" if pdl else "off"] += 1

    def run():
        _merged_gemm_kernel[(cum[-1], split)](
            x, *ws, *bs, *ys, work, nrm["R"], nrm["G"], nrm["S"], m, k, *nsp, *sw, c1, c2, c3, ntot, x.stride(0),
            x.stride(1), nrm["stride_rm"], nrm["eps"], nrm["offset"],
            NUM_W=nw, HB0=hb[0], HB1=hb[1], HB2=hb[2], HB3=hb[3], BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
            BLOCK_K=cfg.block_k, SPLIT_K=split, EVEN_K=even_k, DOT=cfg.dot, IEEE=ieee, MANUAL_BF16=manual,
            LATE=cfg.late and not cfg.dot, FULL=cfg.full and not cfg.dot, EVICT=cfg.evict and not cfg.dot,
            PDL=pdl, NORM=norm is not None, HAS_RES=norm is not None and norm.residual is not None,
            HAS_G=norm is not None and norm.weight is not None, num_warps=cfg.num_warps,
            num_stages=cfg.num_stages, **extra)
        if split > 1:
            _reduce_kernel[(cum[-1],)](
                work, *bs, *ys, m, *nsp, c1, c2, c3, ntot, NUM_W=nw, HB0=hb[0], HB1=hb[1], HB2=hb[2],
                HB3=hb[3], SPLIT_K=split, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, MANUAL_BF16=manual,
                num_warps=4)

    if x.is_cuda and x.device.index != torch.cuda.current_device():
        with torch.cuda.device(x.device):  # Triton launches on the current device
            run()
    else:
        run()
    return outs


def _tune(x, weights, biases, key) -> Config:
    """Time every :func:`candidates` config once for this shape (whole launches) and keep the fastest."""
    from triton.testing import do_bench

    m, k = x.shape
    ns = tuple(w.shape[0] for w in weights)
    outs = [torch.empty((m, n), dtype=x.dtype, device=x.device) for n in ns]
    best, best_ms = None, float("inf")
    for cfg in candidates(m, ns, k, x.dtype, _sms(), warp_size()):
        try:
            ms = do_bench(lambda cfg=cfg: launch(x, weights, biases, cfg, outs), warmup=3, rep=10)
        except Exception:  # a config this device cannot compile/launch (resources): skip it
            continue
        if ms < best_ms:
            best, best_ms = cfg, ms
    return best or default_config(m, ns, k, x.dtype, warp=warp_size())


def pick_config(x: torch.Tensor, weights: list[torch.Tensor], biases: list[torch.Tensor | None]) -> Config:
    """The config for this call: the measured table's (:func:`table_config`), else tuned once per shape on a
    GPU outside capture, else :func:`default_config`."""
    key = _key(x, weights, biases)
    if key in _TUNED:
        return _TUNED[key]
    m, k = x.shape
    ns = tuple(w.shape[0] for w in weights)
    if x.is_cuda and not _interpreting():
        cfg = table_config(m, k, ns, x.dtype)
        if cfg is not None:  # measured (a pure lookup: safe under capture)
            _TUNED[key] = cfg
            return cfg
    if (_interpreting() or not x.is_cuda or _capturing(x)
            or os.environ.get("ROCM_FUSED_GEMM_TUNE", "1") == "0"):
        return default_config(m, ns, k, x.dtype, warp=warp_size())
    cfg = _tune(x, weights, biases, key)
    _TUNED[key] = cfg
    return cfg


def merged_gemm(x: torch.Tensor, weights: list[torch.Tensor], biases: list[torch.Tensor | None],
                config: Config | None = None) -> list[torch.Tensor]:
    """``[x @ w.T (+ b)]`` for 1-4 weights in one launch (two with split-K); see the module docstring.

    Args:
        x: (M, K), M <= :data:`MAX_M`, float16/bfloat16/float32, any strides.
        weights: 1-:data:`MAX_WEIGHTS` tensors (N_i, K) of x's dtype; a weight whose K stride is not 1 is
            copied first (the pass never sends one; direct callers may).
        biases: (N_i,) of x's dtype or None, one per weight.
        config: run this :class:`Config` instead of the tuned/default one (tests, benchmarks).

    Returns:
        list of contiguous (M, N_i) tensors of x's dtype, float32-accumulated, rounded once (RTNE).

    Raises:
        ValueError: M > MAX_M, more than MAX_WEIGHTS weights, dtype/shape mismatch.
    """
    weights, biases = validated(x, weights, biases)
    cfg = config or pick_config(x, weights, biases)
    return launch(x, weights, biases, cfg)


def validated(x: torch.Tensor, weights: list[torch.Tensor], biases: list[torch.Tensor | None]
              ) -> tuple[list[torch.Tensor], list[torch.Tensor | None]]:
    """The weights (unit K stride: copied where not) and biases (unit stride) :func:`launch` can read.

    Raises:
        ValueError: as :func:`merged_gemm`.
    """
    if x.dtype not in DTYPES:
        raise ValueError(f"triton merged_gemm takes float16/bfloat16/float32, got {x.dtype}")
    if x.ndim != 2 or x.shape[0] > MAX_M:
        raise ValueError(f"triton merged_gemm takes x of shape (M <= {MAX_M}, K), got {tuple(x.shape)}")
    if not 1 <= len(weights) <= MAX_WEIGHTS or len(biases) != len(weights):
        raise ValueError(f"triton merged_gemm takes 1-{MAX_WEIGHTS} weights with one bias slot each")
    for w, b in zip(weights, biases, strict=True):
        if w.dtype != x.dtype or w.ndim != 2 or w.shape[1] != x.shape[1]:
            raise ValueError(f"weight {w.dtype} {tuple(w.shape)} does not take x {x.dtype} {tuple(x.shape)}")
        if b is not None and (b.dtype != x.dtype or tuple(b.shape) != (w.shape[0],)):
            raise ValueError(f"bias {b.dtype} {tuple(b.shape)} does not fit weight {tuple(w.shape)}")
    weights = [w if w.stride(1) == 1 or w.shape[1] == 1 else w.contiguous() for w in weights]
    biases = [b if b is None or b.stride(0) == 1 else b.contiguous() for b in biases]
    return weights, biases


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
    # the full-K GEMV tile (issue 19 session 3): the 64- and 128-elements-per-thread ends, M = 1 and 8, a
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
    # one deep-pipeline dot tile (Qwen3's M = 8 pick), compiled at its 5 stages: 61 KiB of the 64 KiB gfx942
    # LDS if every stage is buffered. Only one: the 5-stage compiles took 10-24 s each for gfx950 on the
    # 2-core dev machine (triton 3.9, 2026-12-01), too much for CI's budget
    main_case("gateup_deepdot_s5_m8_bf16", "bf16", 2, Config(16, 32, 128, 1, 4, 5, True))
    cases[-1]["num_stages"] = 5
    # the PDL forms (sm_90 only: griddepcontrol is Hopper PTX): the Llama q/k/v M = 1 pick (full-K GEMV tile,
    # weight loads before gdc_wait) and a runtime-K-loop dot tile (gdc_wait before the loop)
    if _HAS_GDC:
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
