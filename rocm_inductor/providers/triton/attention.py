"""Triton split-KV flash-decoding for ``rocm_fused::decode_attention`` (GQA packed per program, mask skip).

Meaning: :func:`rocm_inductor.providers.reference_attention.decode_attention_ref` (see ``ops/attention.py``).
Math: online softmax (Milakov & Gimelshein 2018) as in FlashAttention (Dao et al. 2022), with the KV length
split across programs and a second pass combining the splits (flash-decoding, Dao et al. 2023).

Layout: grid ``(B * Hkv * MB, NSPLIT)``. A program serves one batch row ``b``, one kv head ``hk``, one slice
of ``BLOCK_M`` of the ``M = g * Lq`` (query head, query position) rows that share ``hk`` (``g = Hq // Hkv``;
row ``r`` is query head ``hk * g + r // Lq`` at position ``r % Lq``; MB = cdiv(M, BLOCK_M), 1 in decode), and
one split: a contiguous range of ``split_len`` KV slots (a multiple of ``BLOCK_N``). Packing the ``g`` heads
and ``Lq`` rows into the M dim of ``tl.dot`` (padded to >= 16) means K and V are read once per kv head (not
``g`` times, as SDPA over HF's ``repeat_kv`` copies does). Per KV block:

1. with a mask, load its ``(BLOCK_M, BLOCK_N)`` tile first (broadcast dims have stride 0; a mask broadcast
   over heads and query positions, HF's decode ``(B, 1, 1, L)``, loads one ``BLOCK_N`` row); ``keep`` = bool
   True or additive ``!= -inf``. If no row of the program keeps any slot of the block (a scalar ``tl.max``),
   skip the block: its K and V are never loaded. Inside a kept block, slots no row keeps are not loaded
   either (predicated loads, ``other=0``), so NaN or garbage in removed cache slots cannot leak in.
2. ``S = (Q K^T) * scale (+ additive mask)`` in float32, removed entries ``-inf``; online softmax in natural
   units for the running max (an additive ``finfo.min`` mask therefore behaves like SDPA: a row with only
   such entries averages them), ``exp2`` of ``(s - m) * log2(e)``; ``P`` rounded to the K/V dtype for
   ``P @ V`` (as FlashAttention does; float32 inputs use IEEE float32 dots), float32 accumulator. Under
   ``TRITON_INTERPRET=1`` bfloat16 dots are done on float32 copies (the interpreter's bfloat16 ``tl.dot``
   returned garbage, triton 3.9 on CPU, 2026-12-01), with the same rounding of ``P``.
3. ``NSPLIT == 1``: write ``acc / l`` (``l == 0``, a row nothing kept: zeros) rounded once to q's dtype.
   Otherwise write the float32 partial ``(acc, m, l)``; :func:`_combine_kernel` (grid ``B * Hq * Lq``)
   merges the splits of each row with a fixed-order reduction (deterministic, no atomics).
4. Sinks (GPT-OSS): the row's sink logit joins the final max and adds ``exp(sink - m)`` to ``l`` only, where
   the row is written: the unsplit program's store, or the combine of the splits (the split programs do not
   read it). A row nothing kept then has ``l = 1``, ``acc = 0``: zeros, as GPT-OSS's eager code gives.

Capture-safe: no host sync; the launch shape and constexprs come from static shapes only (the mask and
any lengths are read on the device); partial buffers come from ``torch.empty`` (the caching allocator).

Launch choice (:func:`launch_config`): ``NSPLIT`` a power of two from (B, Hkv, Lkv, MB) and the SM count,
aiming at :data:`PROGRAMS_PER_SM` programs per SM with at least :data:`MIN_SPLIT_LEN` slots per split;
``BLOCK_N`` from the head dim, the row tile and the platform (:func:`block_sizes`). Tuned on an H200 sweep
(benchmarks/results/runs/attention_sweep.csv); ROCm not measured.

Performance (H200, per layer, 513 of 1024 slots kept, benchmarks/results/runs/attention_layer.csv): Llama-3.2-1B
5.5 / 7.6 / 17.2 us at B = 1 / 8 / 32 (2.2x the HBM floor of the kept K/V at B = 32). Skipped blocks are not
free: each still costs its mask load, one dependent round trip per block, which is why flex_attention (whose
block mask lists the kept blocks up front) stays ahead at Qwen3-0.6B B = 32 with 4096 slots (35.8 vs 44.1 us).

Limits (:func:`check`): q/k/v float16/bfloat16/float32, head_dim and v head_dim <= 256, last dim contiguous,
mask None / bool / float16 / bfloat16 / float32, 4D, each dim 1 or full; query length <= :data:`MAX_Q_LEN`
(longer queries are prefill: Inductor's flash kernels are built for those).
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import triton
import triton.language as tl

from ...report import dtype_name
from .rms_norm import _round_to

INPUT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
MASK_DTYPES = (torch.bool, torch.float16, torch.bfloat16, torch.float32)
MAX_HEAD_DIM = 256
#: Longest query the kernel is offered for (decode buckets; the default decode bucket is <= 32). The kernel is
#: correct for any length (M is tiled), but for prefill lengths one program per (kv head, M tile) re-reads K/V.
MAX_Q_LEN = 64
#: Split heuristic: aim at this many programs per SM (flash-decoding wants several resident per SM to hide
#: load latency; with the loop's `if` skip the compiler does not software-pipeline the K/V loads: no async
#: copies in the sm_90 TTGIR, triton 3.6). 8: on the
#: H200 sweep (benchmarks/results/runs/attention_sweep.csv, 2026-12-01; 132 SMs) the configuration it picks (with
#: :func:`block_sizes`) was the fastest swept, or within 2% of it, at 10 of the 18 issue-13 shapes and within
#: 17% at the rest (worst: gemma-2b B=1, 1024 slots, 7.9 vs 6.8 us; Qwen3-0.6B B=32, 1024 slots, 4 splits
#: 32.6 us vs 1 split 28.2 us). 4 and 6 lost up to 30% (Llama-3.2-1B B=8, 4096 slots), 16 up to 25%.
PROGRAMS_PER_SM = 8
#: Fewest KV slots per split (one BLOCK_N = 128 block; the sweep's best B = 1 configs used 128-slot splits).
MIN_SPLIT_LEN = 128
#: Most splits (the combine kernel holds (MAX_SPLITS, Dv) float32 per row).
MAX_SPLITS = 64
#: Tests only: force this many splits / this BLOCK_N (exercise the split path under the interpreter).
FORCE_SPLITS: int | None = None
FORCE_BLOCK_N: int | None = None
#: SM count used under the interpreter (CPU tests): small, so the default there is one split.
INTERP_SMS = 1
_LOG2E = tl.constexpr(1.4426950408889634)


def check(spec: dict[str, Any]) -> str | None:
    """Compile-time limits of the kernel (spec keys: ``rocm_inductor.ops.attention``); ``None`` if it takes it."""
    dt = spec.get("dtype")
    if dt not in INPUT_DTYPES:
        return f"triton decode attention takes float16/bfloat16/float32 q/k/v, got {dtype_name(dt)}"
    for key, what in (("head_dim", "head_dim"), ("v_head_dim", "v head_dim")):
        d = spec.get(key)
        if not isinstance(d, int) or isinstance(d, bool):
            return f"{what} is symbolic; the kernel's block sizes come from a static head dim"
        if not 1 <= d <= MAX_HEAD_DIM:
            return f"{what} {d} outside [1, {MAX_HEAD_DIM}]"
    lq = spec.get("q_len")
    if isinstance(lq, int) and lq > MAX_Q_LEN:
        return f"query length {lq} > {MAX_Q_LEN}: a prefill shape, Inductor's flash attention serves it"
    if not spec.get("last_dim_contiguous", False):
        return "q, k, v or the mask is not contiguous in its last dim"
    kind = spec.get("mask_kind", "none")
    if kind != "none":
        mdt = spec.get("mask_dtype")
        if mdt not in MASK_DTYPES:
            return f"mask dtype {dtype_name(mdt)}: the kernel takes bool or float16/bfloat16/float32 masks"
        shape = spec.get("mask_shape")
        if shape is None or len(shape) != 4:
            return "mask is not 4D"
    sdt = spec.get("sinks_dtype")
    if sdt is not None and sdt not in INPUT_DTYPES:
        return f"sinks dtype {dtype_name(sdt)}: the kernel takes float16/bfloat16/float32 sinks"
    return None


@functools.cache
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def _on_rocm() -> bool:
    return torch.version.hip is not None


def block_sizes(d: int, dv: int, m: int, base: int = 1, rocm: bool | None = None) -> tuple[int, int, int, int]:
    """``(BLOCK_M, BLOCK_N, BLOCK_D, BLOCK_DV)`` for head dims ``d``/``dv``, ``m = g * Lq`` rows per kv head
    and ``base = B * Hkv`` (programs before splitting); ``rocm`` defaults to the running torch's platform.

    BLOCK_M: ``next_pow2(m)``, at least 16 (``tl.dot``'s smallest M), at most 64 (32 for a 256 head dim: the
    float32 accumulator is BLOCK_M x BLOCK_DV per program). BLOCK_D/BLOCK_DV: next power of two, >= 16.
    BLOCK_N, with BLOCK_M = 16 (decode: g <= 16, Lq = 1): 128 for head dims <= 128: the fastest of 32/64/128 at
    every Llama-3.2-1B / Qwen3-0.6B shape of the H200 sweep (benchmarks/results/runs/attention_sweep.csv,
    2026-12-01: the loop's mask test keeps the loads unpipelined, so fewer, larger blocks win). Head dim 256:
    128 when ``base <= 8``, else 64 (gemma-2b: bn128 7.9-9.8 us vs bn64 9.1-11.0 at B = 1 and 8; bn64 11.3 vs
    13.6 us at B = 32, 1024 slots); on ROCm always 64 (bn128 needs the whole 64 KiB LDS of gfx942 and spilled
    5-84 VGPRs in the AOT compile, triton 3.6/3.9). With BLOCK_M >= 32 (query lengths > 1): 64, or 32 for a
    256 head dim (64/128 spilled on sm_90 or gfx942 at those BLOCK_M; not timed on a GPU).
    """
    rocm = _on_rocm() if rocm is None else rocm
    bd = max(16, triton.next_power_of_2(d))
    bdv = max(16, triton.next_power_of_2(dv))
    wide = max(bd, bdv) > 128
    bm = max(16, min(32 if wide else 64, triton.next_power_of_2(max(m, 1))))
    if bm > 16:
        bn = 32 if wide else 64
    elif wide:
        bn = 128 if base <= 8 and not rocm else 64
    else:
        bn = 128
    return bm, FORCE_BLOCK_N or bn, bd, bdv


def _prev_pow2(x: int) -> int:
    return 1 << (max(1, x).bit_length() - 1)


def launch_config(b: int, hkv: int, lq: int, lkv: int, g: int, d: int, dv: int, sms: int,
                  num_splits: int | None = None, block_n: int | None = None,
                  rocm: bool | None = None) -> dict[str, int]:
    """Launch shape for one call (static shapes only).

    Splits: ``prev_pow2(min(PROGRAMS_PER_SM * sms // base, lkv // MIN_SPLIT_LEN, MAX_SPLITS))`` with ``base =
    B * Hkv * MB`` programs before splitting (H200, 132 SMs: Llama-3.2-1B B = 1 / 8 / 32 -> 8 / 8 / 4 splits at
    1024 slots, 32 / 16 / 4 at 4096), each split a multiple of BLOCK_N slots.

    Args:
        b, hkv, lq, lkv, g: batch, kv heads, query length, KV length (cache slots), query heads per kv head.
        d, dv: head dims of q/k and v. sms: SM (CU) count of the device.
        num_splits, block_n: overrides (tests, tuning); else :data:`FORCE_SPLITS` / the heuristic.
        rocm: pick ROCm's block sizes (default: the running torch's platform).

    Returns:
        dict with BLOCK_M, BLOCK_N, BLOCK_D, BLOCK_DV, MB (M tiles), NSPLIT, SPLIT_LEN (slots per split, a
        multiple of BLOCK_N), num_warps (4, or 8 for a 256 head dim; <= 16 so ROCm's 64-wide waves fit 1024).
    """
    bm = block_sizes(d, dv, g * lq)[0]
    mb = triton.cdiv(g * lq, bm)
    base = max(1, b * hkv * mb)
    bm, bn, bd, bdv = block_sizes(d, dv, g * lq, base, rocm)
    if block_n:
        bn = block_n
    nblocks = max(1, triton.cdiv(lkv, bn))
    ns = num_splits or FORCE_SPLITS
    if not ns:
        ns = _prev_pow2(min(PROGRAMS_PER_SM * sms // base, lkv // MIN_SPLIT_LEN, MAX_SPLITS))
    ns = max(1, min(ns, nblocks, MAX_SPLITS))
    split_len = triton.cdiv(nblocks, ns) * bn
    ns = max(1, triton.cdiv(lkv, split_len))
    # sm_90 AOT (triton 3.6 and 3.9, 2026-12-01), BLOCK_M 16: head dims <= 128 took 115-236 registers at 4
    # warps, no spills (gfx942: 134-236 VGPRs, no scratch); a 256 head dim 188 registers at 4 warps, 128-208
    # at 8 (bn 32-128).
    warps = 8 if max(bd, bdv) > 128 else 4
    return dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_D=bd, BLOCK_DV=bdv, MB=mb, NSPLIT=ns, SPLIT_LEN=split_len,
                num_warps=warps)


def combine_warps(block_s: int, block_dv: int) -> int:
    """Warps of the combine kernel: 8 when its (splits, Dv) float32 tile is >= 8192 elements (64 x 256 took
    180 registers at 4 warps, 96 at 8, sm_90 AOT 2026-12-01), else 4."""
    return 8 if block_s * block_dv >= 8192 else 4


@triton.jit
def _split_kernel(
    Q, K, V, Mask, Sinks, Out, OP, MP, LP,
    sqb, sqh, sqi, skb, skh, skn, svb, svh, svn, smb, smh, smi, smj,
    Hq, LQ, LKV, SPLIT_LEN, NSPLIT, MB, scale,
    HKV: tl.constexpr, G: tl.constexpr, D: tl.constexpr, DV: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_DV: tl.constexpr,
    HAS_MASK: tl.constexpr, MASK_BOOL: tl.constexpr, MASK_ROW: tl.constexpr, WRITE_PARTIAL: tl.constexpr,
    IEEE: tl.constexpr, UPCAST_DOT: tl.constexpr, MANUAL_BF16: tl.constexpr, HAS_SINKS: tl.constexpr,
):
    """One (batch, kv head, M tile, KV split): online softmax over the split's kept blocks (module doc)."""
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

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_DV], tl.float32)
    lo = sid * SPLIT_LEN
    hi = tl.minimum(lo + SPLIT_LEN, LKV)
    for start in range(lo, hi, BLOCK_N):
        n = start + tl.arange(0, BLOCK_N)
        n_ok = n < hi
        tile_ok = row_ok[:, None] & n_ok[None, :]
        if HAS_MASK:
            if MASK_ROW:  # one mask row for every row of the program (HF decode: (B, 1, 1, L)): load it once
                mv1 = tl.load(Mask + b * smb + n * smj, mask=n_ok, other=0)
                mv = tl.broadcast_to(mv1[None, :], [BLOCK_M, BLOCK_N])
            else:
                mv = tl.load(mrow[:, None] + n[None, :] * smj, mask=tile_ok, other=0)
            if MASK_BOOL:
                keep = (mv != 0) & tile_ok
                madd = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
            else:
                madd = mv.to(tl.float32)
                keep = (madd != float("-inf")) & tile_ok
        else:
            keep = tile_ok
            madd = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
        col = tl.max(keep.to(tl.int32), axis=0)  # (BLOCK_N,): some row keeps this slot
        if tl.max(col, axis=0) > 0:
            col_ok = col > 0
            k = tl.load(kbase + n[:, None] * skn + dq[None, :], mask=col_ok[:, None] & (dq[None, :] < D),
                        other=0.0)
            if IEEE:
                s = tl.dot(q, tl.trans(k), input_precision="ieee")
            elif UPCAST_DOT:
                s = tl.dot(q.to(tl.float32), tl.trans(k.to(tl.float32)), input_precision="ieee")
            else:
                s = tl.dot(q, tl.trans(k))
            s = s * scale + madd
            s = tl.where(keep, s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, axis=1))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
            alpha = tl.math.exp2((m_i - m_safe) * _LOG2E)
            p = tl.math.exp2((s - m_safe[:, None]) * _LOG2E)
            l_i = l_i * alpha + tl.sum(p, axis=1)
            v = tl.load(vbase + n[:, None] * svn + dvv[None, :], mask=col_ok[:, None] & (dvv[None, :] < DV),
                        other=0.0)
            if IEEE:
                pv = tl.dot(p, v, input_precision="ieee")
            elif UPCAST_DOT:
                pv = tl.dot(p.to(v.dtype).to(tl.float32), v.to(tl.float32), input_precision="ieee")
            else:
                pv = tl.dot(p.to(v.dtype), v)
            acc = acc * alpha[:, None] + pv
            m_i = m_new

    orow = (b * Hq + h) * LQ + i  # output row (B, Hq, Lq) flattened
    if WRITE_PARTIAL:
        prow = orow * NSPLIT + sid
        tl.store(MP + prow, m_i, mask=row_ok)
        tl.store(LP + prow, l_i, mask=row_ok)
        tl.store(OP + prow[:, None] * DV + dvv[None, :], acc, mask=row_ok[:, None] & (dvv[None, :] < DV))
    else:
        if HAS_SINKS:  # step 4 of the module doc: the sink joins the max and the denominator
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
    mx = tl.max(m, axis=0)
    if HAS_SINKS:
        sk = tl.load(Sinks + (row // LQ) % Hq).to(tl.float32)
        mx = tl.maximum(mx, sk)
    mx = tl.where(mx == float("-inf"), 0.0, mx)
    w = tl.math.exp2((m - mx) * _LOG2E)  # a split with nothing kept: m = -inf, weight 0
    den = tl.sum(w * lsum, axis=0)
    if HAS_SINKS:
        den += tl.math.exp2((sk - mx) * _LOG2E)
    num = tl.sum(w[:, None] * o, axis=0)
    out = num / tl.where(den > 0, den, 1.0)
    tl.store(Out + row * DV + dv, _round_to(out, Out.dtype.element_ty, MANUAL_BF16), mask=dv < DV)


def _mask_strides(mask: torch.Tensor) -> tuple[int, int, int, int]:
    """The mask's strides with 0 for every size-1 (broadcast) dim."""
    return tuple(0 if mask.shape[i] == 1 else mask.stride(i) for i in range(4))  # type: ignore[return-value]


def decode_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, scale: float,
                     num_splits: int | None = None, block_n: int | None = None,
                     sinks: torch.Tensor | None = None) -> torch.Tensor:
    """Split-KV flash-decoding over un-repeated GQA K/V (module docstring; meaning in ``ops/attention.py``).

    Args:
        q: (B, Hq, Lq, D); k: (B, Hkv, Lkv, D); v: (B, Hkv, Lkv, Dv); float16/bfloat16/float32, one dtype,
            last dim contiguous (other strides free), ``Hq % Hkv == 0``, D and Dv <= 256.
        mask: None or 4D broadcastable to (B, Hq, Lq, Lkv), bool (True = attend) or float16/bfloat16/float32
            (added to the scores; ``-inf`` entries count as removed and let blocks be skipped).
        scale: multiplies q.k.
        num_splits, block_n: launch overrides (tests and tuning); ``None`` = :func:`launch_config`'s choice.
        sinks: None or (Hq,) float32 / q's dtype per-head sink logits (GPT-OSS; module doc, step 4).

    Returns:
        (B, Hq, Lq, Dv) contiguous, q's dtype. Rows with nothing kept are zeros (with or without sinks).

    Raises:
        ValueError: a last dim not contiguous, a head dim over 256, or a dtype outside the limits.
    """
    from . import interpreting

    bsz, hq, lq, d = q.shape
    hkv, lkv, dv = k.shape[1], k.shape[2], v.shape[3]
    if q.dtype not in INPUT_DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"triton decode attention: dtypes {q.dtype}, {k.dtype}, {v.dtype}")
    if max(d, dv) > MAX_HEAD_DIM:
        raise ValueError(f"triton decode attention: head dims {d}/{dv} > {MAX_HEAD_DIM}")
    if sinks is not None and (sinks.dtype not in INPUT_DTYPES or sinks.shape != (hq,)):
        raise ValueError(f"triton decode attention: sinks {tuple(sinks.shape)} {sinks.dtype}, want ({hq},) float")
    for name, t in (("q", q), ("k", k), ("v", v)) + ((("mask", mask),) if mask is not None else ()):
        if t.shape[-1] != 1 and t.stride(-1) != 1:
            raise ValueError(f"triton decode attention: {name} is not contiguous in its last dim")
    out = torch.empty((bsz, hq, lq, dv), dtype=q.dtype, device=q.device)
    if out.numel() == 0:
        return out
    interp = interpreting()
    sms = INTERP_SMS if interp or q.device.type != "cuda" else _sm_count(q.device.index or 0)
    g = hq // hkv
    cfg = launch_config(bsz, hkv, lq, lkv, g, d, dv, sms, num_splits, block_n)
    if mask is None:
        mptr, ms, has_mask, mbool, mrow_only = q, (0, 0, 0, 0), False, False, False
    else:
        if mask.dtype not in MASK_DTYPES:
            raise ValueError(f"triton decode attention: mask dtype {mask.dtype}")
        mbool = mask.dtype == torch.bool
        mptr = mask.view(torch.uint8) if mbool else mask
        ms, has_mask = _mask_strides(mask), True
        mrow_only = ms[1] == 0 and ms[2] == 0  # the same mask row for every query head and position
    ns = cfg["NSPLIT"]
    if ns > 1:
        rows = bsz * hq * lq
        op = torch.empty((rows, ns, dv), dtype=torch.float32, device=q.device)
        mp = torch.empty((rows, ns), dtype=torch.float32, device=q.device)
        lp = torch.empty((rows, ns), dtype=torch.float32, device=q.device)
    else:
        op = mp = lp = out
    grid = (bsz * hkv * cfg["MB"], ns)
    sptr = q if sinks is None else sinks.contiguous()  # (Hq,): a view of the model's parameter, no copy
    _split_kernel[grid](
        q, k, v, mptr, sptr, out, op, mp, lp,
        q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2), *ms,
        hq, lq, lkv, cfg["SPLIT_LEN"], ns, cfg["MB"], float(scale),
        HKV=hkv, G=g, D=d, DV=dv, BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_D=cfg["BLOCK_D"],
        BLOCK_DV=cfg["BLOCK_DV"], HAS_MASK=has_mask, MASK_BOOL=mbool, MASK_ROW=mrow_only, WRITE_PARTIAL=ns > 1,
        IEEE=q.dtype == torch.float32, UPCAST_DOT=interp and q.dtype == torch.bfloat16, MANUAL_BF16=interp,
        HAS_SINKS=sinks is not None and ns == 1, num_warps=cfg["num_warps"],
    )
    if ns > 1:
        bs = triton.next_power_of_2(ns)
        _combine_kernel[(bsz * hq * lq,)](out, op, mp, lp, sptr, ns, hq, lq, DV=dv, BLOCK_S=bs,
                                          BLOCK_DV=cfg["BLOCK_DV"], MANUAL_BF16=interp, HAS_SINKS=sinks is not None,
                                          num_warps=combine_warps(bs, cfg["BLOCK_DV"]))
    return out


def aot_cases() -> list[dict]:
    """Representative compile cases (the specialisations :func:`decode_attention` picks) for the AOT check.

    bf16, picks of :func:`launch_config` for ROCm (the same as CUDA's except a 256 head dim with B * Hkv <= 8,
    where CUDA takes BLOCK_N 128: sm_90 208 registers, no stack, checked by hand 2026-12-01; it spills on
    gfx942, hence not a ROCm pick and not listed): Llama-3.2-1B (32/8 heads, D 64) at B = 1 (split) and with an
    8-token query (BLOCK_M 32, a per-position mask) unsplit, Qwen3-0.6B (16/8, D 128), gemma-2b (8/1, D 256)
    at B = 32, an additive bf16 mask; GPT-OSS-20B's attention with sinks (64/8, D 64, HF eager's additive bf16
    mask) on a 128-slot sliding-window layer at B = 32 (unsplit: the sink in the store); the combine kernel at
    64 splits for Dv 64 and 256, and with sinks for Dv 64 (a split full-attention layer).

    The dicts carry the ``tt.divisibility`` attrs the JIT adds at run time (pointers, and integer arguments
    that are multiples of 16 at these sizes, as every contiguous cache has). With them every case compiles
    without spills on sm_90, gfx942 and gfx950 (triton 3.6 and 3.9, 2026-12-01); without them the SGPRs
    spill on gfx942 (88-391 of them) and the D 128 / 256 cases show 144-200 bytes of stack on sm_90.
    """
    sig_common = {"sqb": "i32", "sqh": "i32", "sqi": "i32", "skb": "i32", "skh": "i32", "skn": "i32",
                  "svb": "i32", "svh": "i32", "svn": "i32", "smb": "i32", "smh": "i32", "smi": "i32",
                  "smj": "i32", "Hq": "i32", "LQ": "i32", "LKV": "i32", "SPLIT_LEN": "i32", "NSPLIT": "i32",
                  "MB": "i32", "scale": "fp32"}
    cases = []
    # name, B, Hq, Hkv, Lq, Lkv, D, mask pointer type, mask row-broadcast (HF decode (B, 1, 1, L)), sinks
    for name, b, hq, hkv, lq, lkv, d, mdt, mrow, sinks in (
            ("llama_b1", 1, 32, 8, 1, 1024, 64, "*u8", True, False),
            ("llama_q8_b32", 32, 32, 8, 8, 128, 64, "*u8", False, False),
            ("qwen3_b1", 1, 16, 8, 1, 4096, 128, "*u8", True, False),
            ("gemma_b32", 32, 8, 1, 1, 4096, 256, "*u8", True, False),
            ("llama_additive_b8", 8, 32, 8, 1, 1024, 64, "*bf16", False, False),
            ("gpt_oss_sinks_window_b32", 32, 64, 8, 1, 128, 64, "*bf16", True, True)):
        g = hq // hkv
        cfg = launch_config(b, hkv, lq, lkv, g, d, d, sms=132, rocm=True)
        sig = {"Q": "*bf16", "K": "*bf16", "V": "*bf16", "Mask": mdt, "Sinks": "*bf16", "Out": "*bf16",
               "OP": "*fp32", "MP": "*fp32", "LP": "*fp32", **sig_common}
        consts = dict(HKV=hkv, G=g, D=d, DV=d, BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"],
                      BLOCK_D=cfg["BLOCK_D"], BLOCK_DV=cfg["BLOCK_DV"], HAS_MASK=True, MASK_BOOL=mdt == "*u8",
                      MASK_ROW=mrow, WRITE_PARTIAL=cfg["NSPLIT"] > 1, IEEE=False, UPCAST_DOT=False,
                      MANUAL_BF16=False, HAS_SINKS=sinks and cfg["NSPLIT"] == 1)
        sig.update({c: "constexpr" for c in consts})
        # The integer arguments at this size, for the divisibility hints the JIT adds at run time (a value
        # that is a multiple of 16 is specialised so; contiguous q/k/v and a (B, 1, Lq|1, L) mask).
        mi = 0 if mrow else lkv
        ints = dict(sqb=hq * lq * d, sqh=lq * d, sqi=d, skb=hkv * lkv * d, skh=lkv * d, skn=d,
                    svb=hkv * lkv * d, svh=lkv * d, svn=d, smb=lq * lkv if not mrow else lkv, smh=0, smi=mi,
                    smj=1, Hq=hq, LQ=lq, LKV=lkv, SPLIT_LEN=cfg["SPLIT_LEN"], NSPLIT=cfg["NSPLIT"], MB=cfg["MB"])
        attrs = {k: [["tt.divisibility", 16]] for k, v in sig.items() if v.startswith("*")}
        attrs.update({k: [["tt.divisibility", 16]] for k, v in ints.items() if v and v % 16 == 0})
        ones = {k: 1 for k, v in ints.items() if v == 1}  # the JIT makes an int argument equal to 1 a constant
        sig.update({k: "constexpr" for k in ones})
        consts.update(ones)
        case = {"name": f"decode_attention_{name}", "fn": _split_kernel, "signature": sig,
                "constexprs": consts, "num_warps": cfg["num_warps"], "attrs": attrs}
        if cfg["NSPLIT"] > 1:
            # triton 3.9, 2026-12-01: 13-29 SGPRs spill to VGPR lanes on gfx942/gfx950 (no scratch, no VGPR
            # spill): 20 integer arguments, 8 pointers and the split's 64-bit offsets pass the 106 SGPRs.
            case["known_spill"] = ("split-KV variant: SGPRs spill to VGPR lanes on gfx942/gfx950 (no scratch); "
                                   "not measured on an AMD GPU")
        elif sinks:
            # triton 3.9, 2026-12-02: GPT-OSS's 8 query heads per kv head with a row mask spill SGPRs to VGPR
            # lanes on AMD with or without sinks (gfx942: 16 without, 20 with; gfx950: 15 with; no scratch, no
            # VGPR spill); sm_90 136 registers, no stack. The sinks' combine (below) does not spill.
            case["known_spill"] = ("unsplit, 8 query heads per kv head: SGPRs spill to VGPR lanes on gfx942/gfx950 "
                                   "with or without sinks (no scratch); not measured on an AMD GPU")
        cases.append(case)
    for dv, sinks in ((64, False), (256, False), (64, True)):
        consts = dict(DV=dv, BLOCK_S=MAX_SPLITS, BLOCK_DV=dv, MANUAL_BF16=False, HAS_SINKS=sinks, LQ=1)
        sig = {"Out": "*bf16", "OP": "*fp32", "MP": "*fp32", "LP": "*fp32", "Sinks": "*bf16", "NSPLIT": "i32",
               "Hq": "i32", "LQ": "constexpr",  # LQ = 1 (decode): a constant to the JIT
               **{c: "constexpr" for c in consts if c != "LQ"}}
        cases.append({"name": f"decode_attention_combine_dv{dv}" + ("_sinks" if sinks else ""),
                      "fn": _combine_kernel, "signature": sig, "constexprs": consts,
                      "num_warps": combine_warps(MAX_SPLITS, dv)})
    return cases
