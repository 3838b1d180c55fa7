"""Triton gate/up GEMM with the gated activation in the epilogue (``rocm_fused::glu_gemm``,
``rocm_fused::rms_norm_glu_gemm``): the launcher, its config, the op's limits, the kernel and its AOT cases.

Math: exactly :func:`rocm_inductor.providers.reference_glu.glu_gemm_ref`: both GEMMs accumulated in float32, the
biases added in float32, ``act(g) * u`` in float32 and one rounding at the store (RTNE, through the RMSNorm
kernels' bf16 helper: Triton's interpreter truncates float32 -> bfloat16). ``silu(g) = g * sigmoid(g)``,
``gelu_tanh(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3)))`` (tanh as ``2 sigmoid(2z) - 1``: portable to
ROCm and the interpreter, saturating for large |z|), ``gelu(g) = 0.5 g (1 + erf(g / sqrt(2)))``.

Layout: each program owns one column block of N for *both* weights (``_acc2``: two accumulators over one x
tile), so the epilogue has g and u of the same columns in registers; no K split (the activation needs the whole
sum; at decode gate/up has N = 3072-8192 columns, 96-2048 programs). Two tile kinds, as the merged GEMM's
(``gemm_kernels``): the full-K GEMV tile (``FULL``, M <= 8, 16-bit: both weight tiles loaded at once before the
first FMA, the measured M = 1 winner of the merged gate/up) and the ``tl.dot`` tile with a K loop (M padded to
16 / 32). ``NORM``: the RMSNorm is the prologue (``gemm_kernels._norm_row`` for the GEMV tile,
``gemm_kernels._norm_tile`` for the dot tile, bf16 / fp32), as in ``rocm_fused::rms_norm_gemm``; elsewhere the
norm kernel runs first (two launches).

Configs (:func:`glu_config`): from the merged GEMM's own pick for (M, K, (N, N)) (its measured table, else its
default): a full-K GEMV or dot pick keeps its warps with half its BLOCK_N (two weight tiles per program: the same
bytes in flight per thread) and no K split (a dot tile's BLOCK_K capped for registers); otherwise the full-K GEMV
tile at 64 weight elements per thread for M <= 8 (16-bit), else the 4-warp dot tile. Not measured: the glu_gemm
pass is off on every platform until ``benchmarks/e2e/decode_step.py`` has A/B'd it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import triton
import triton.language as tl

from ..reference_glu import ACTIVATIONS
from . import gemm_merge as gm
from . import rms_norm as rms
from ._launch import on_device
from .gemm_configs import GEMV_MAX_M, MAX_THREADS, NORM_DOT_MK, Config, warp_size
from .gemm_kernels import _norm_row, _norm_tile
from .rms_norm import _inv_rms, _round_to

#: 16-bit weight elements per thread of the GLU full-K GEMV tile, both weights together (2 * BLOCK_N * BLOCK_K /
#: threads): the merged gate/up's measured M = 1 tile (Llama-3.2-1B: BLOCK_N 8, K 2048, 8 warps) has 64.
FULL_ELEMS = 64


@triton.jit
def _act(g, ACT: tl.constexpr):
    """The gate activation in float32: 0 silu, 1 gelu_tanh, 2 gelu (erf)."""
    if ACT == 0:
        return g * tl.sigmoid(g)
    elif ACT == 1:
        z = 0.7978845608028654 * (g + 0.044715 * g * g * g)
        return 0.5 * g * (2.0 * tl.sigmoid(2.0 * z))  # 1 + tanh(z) = 2 sigmoid(2z)
    else:
        return 0.5 * g * (1.0 + tl.math.erf(g * 0.7071067811865476))


@triton.jit
def _glu_kernel(X, WG, WU, BG, BU, Y, R, G, S, M, N, K, stride_xm, stride_xk, stride_wg, stride_wu, stride_rm,
                eps, offset, ACT: tl.constexpr, HBG: tl.constexpr, HBU: tl.constexpr, BLOCK_M: tl.constexpr,
                BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr, FULL: tl.constexpr,
                EVICT: tl.constexpr, IEEE: tl.constexpr, MANUAL_BF16: tl.constexpr, NORM: tl.constexpr,
                HAS_RES: tl.constexpr, HAS_G: tl.constexpr):
    """Column block ``program_id(0)`` of ``act(x @ WG.T + BG) * (x @ WU.T + BU)`` (module docstring)."""
    nb = tl.program_id(0)
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = nb * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_m = offs_m < M
    mask_n = offs_n < N
    rows_n = tl.where(mask_n, offs_n, N - 1)  # clamp: unmasked weight loads, the store is masked
    x_rows = tl.where(mask_m, offs_m, 0)
    offs_k = tl.arange(0, BLOCK_K)
    wg_ptrs = WG + rows_n[:, None].to(tl.int64) * stride_wg + offs_k[None, :]
    wu_ptrs = WU + rows_n[:, None].to(tl.int64) * stride_wu + offs_k[None, :]
    accg = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    accu = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if FULL:
        kmask = offs_k < K
        wg = tl.load(wg_ptrs, mask=kmask[None, :], other=0.0, eviction_policy="evict_first" if EVICT else "")
        wu = tl.load(wu_ptrs, mask=kmask[None, :], other=0.0, eviction_policy="evict_first" if EVICT else "")
        for mi in tl.static_range(BLOCK_M):
            row = tl.where(mi < M, mi, 0)
            if NORM:
                xr = _norm_row(X, R, G, S, row, stride_xm, stride_xk, stride_rm, offs_k, K, eps, offset,
                               tl.where(nb == 0, 1, 0) * tl.where(mi < M, 1, 0), HAS_RES, HAS_G, MANUAL_BF16)
            else:
                xr = tl.load(X + row.to(tl.int64) * stride_xm + offs_k * stride_xk, mask=kmask, other=0.0)
            xf = xr.to(tl.float32)[None, :]
            accg = tl.where(offs_m[:, None] == mi, tl.sum(wg.to(tl.float32) * xf, axis=1)[None, :], accg)
            accu = tl.where(offs_m[:, None] == mi, tl.sum(wu.to(tl.float32) * xf, axis=1)[None, :], accu)
    else:
        ss = tl.zeros((BLOCK_M,), dtype=tl.float32)  # NORM: the rows' sums of squares
        x_ptrs = X + x_rows[:, None].to(tl.int64) * stride_xm + offs_k[None, :] * stride_xk
        for k0 in range(0, K, BLOCK_K):
            if EVEN_K:
                x = tl.load(x_ptrs)
                wg = tl.load(wg_ptrs)
                wu = tl.load(wu_ptrs)
            else:
                mk = (k0 + offs_k) < K
                x = tl.load(x_ptrs, mask=mk[None, :], other=0.0)
                wg = tl.load(wg_ptrs, mask=mk[None, :], other=0.0)
                wu = tl.load(wu_ptrs, mask=mk[None, :], other=0.0)
            if NORM:
                x, ss = _norm_tile(x, ss, R, G, S, x_rows, mask_m, k0 + offs_k, K, stride_rm, offset,
                                   tl.where(nb == 0, 1, 0), HAS_RES, HAS_G, MANUAL_BF16)
            if MANUAL_BF16:  # interpreter: its bf16 tl.dot returns garbage (triton 3.9): exact fp32 instead
                xf = x.to(tl.float32)
                accg = tl.dot(xf, tl.trans(wg.to(tl.float32)), accg, input_precision="ieee")
                accu = tl.dot(xf, tl.trans(wu.to(tl.float32)), accu, input_precision="ieee")
            elif IEEE:
                accg = tl.dot(x, tl.trans(wg), accg, input_precision="ieee")
                accu = tl.dot(x, tl.trans(wu), accu, input_precision="ieee")
            else:
                accg = tl.dot(x, tl.trans(wg), accg)
                accu = tl.dot(x, tl.trans(wu), accu)
            x_ptrs += BLOCK_K * stride_xk
            wg_ptrs += BLOCK_K
            wu_ptrs += BLOCK_K
        if NORM:
            rstd = _inv_rms(ss, K, eps)[:, None]
            accg = accg * rstd
            accu = accu * rstd
    if HBG:
        accg += tl.load(BG + rows_n).to(tl.float32)[None, :]
    if HBU:
        accu += tl.load(BU + rows_n).to(tl.float32)[None, :]
    out = _act(accg, ACT) * accu
    y_ptrs = Y + offs_m[:, None].to(tl.int64) * N + offs_n[None, :]
    tl.store(y_ptrs, _round_to(out, Y.dtype.element_ty, MANUAL_BF16), mask=mask_m[:, None] & mask_n[None, :])


def _pow2(v: int) -> int:
    return triton.next_power_of_2(max(int(v), 1))


def full_fits(cfg: Config, m: int, k: int) -> bool:
    """Whether ``cfg`` is a GLU full-K GEMV tile for M rows of width K (no K split, BLOCK_K >= K, BLOCK_M >= M)."""
    return cfg.full and not cfg.dot and cfg.split_k == 1 and cfg.block_k >= k and cfg.block_m >= m


def glu_config(m: int, k: int, n: int, dtype: torch.dtype, merged: Config | None = None, warp: int = 32) -> Config:
    """The GLU kernel's config (module docstring): from the merged GEMM's pick ``merged`` where it is a full-K
    GEMV tile without a split (half its BLOCK_N) or a dot tile (half its BLOCK_N, >= 16, no split), else the
    full-K GEMV tile of :data:`FULL_ELEMS` elements per thread (M <= 8, 16-bit, 8 warps where
    ``8 * warp <= 1024``), else the 4-warp dot tile (BLOCK_N 32 / 16 at BLOCK_M 16 / 32). Dot tiles keep
    BLOCK_M * BLOCK_K within ``gemm_configs.NORM_DOT_MK`` (with or without the prologue: the AOT compile of a
    32 x 16 x 128 tile with it spilled 680 B of stack on sm_90 and 81 SGPRs on gfx942, triton 3.9)."""
    if merged is not None and full_fits(merged, m, k):
        return dataclasses.replace(merged, block_n=max(1, merged.block_n // 2))
    if merged is not None and merged.dot:  # the measured dot tile, without its K split, half as wide
        return dataclasses.replace(merged, block_n=max(16, merged.block_n // 2), split_k=1,
                                   block_k=max(16, min(merged.block_k, NORM_DOT_MK // merged.block_m)))
    bk = max(16, _pow2(k))
    if m <= GEMV_MAX_M and dtype != torch.float32:
        warps = 8 if 8 * warp <= MAX_THREADS else 4
        bn = 16
        while bn > 1 and 2 * bn * bk > FULL_ELEMS * warps * warp:
            bn //= 2
        if 2 * bn * bk <= 2 * FULL_ELEMS * warps * warp:
            return Config(_pow2(m), bn, bk, 1, warps, 1, False, False, True, True)
    block_m = 16 if m <= 16 else 32
    return Config(block_m, 32 if block_m == 16 else 16, min(bk, NORM_DOT_MK // block_m), 1, 4, 3, True)


def pick_config(x: torch.Tensor, w_gate: torch.Tensor, b_gate, b_up) -> Config:
    """:func:`glu_config` from the merged GEMM's pick for the same shapes (``gemm_merge.pick_config``: the
    measured table on a GPU, else its default; never tuned here: a capture-safe lookup)."""
    m, k = x.shape
    n = w_gate.shape[0]
    merged = None
    if x.is_cuda and not gm._interpreting():
        merged = gm.table_config(m, k, (n, n), x.dtype)
    return glu_config(m, k, n, x.dtype, merged, warp_size())


def launch(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, b_gate, b_up, activation: str, cfg: Config,
           norm: gm.NormPrologue | None = None) -> torch.Tensor:
    """Run ``cfg`` once: ``out`` (M, N) of x's dtype. ``norm``: x is that RMSNorm's input (one launch; the config
    must take the prologue: :func:`full_fits` or ``gemm_configs.dot_prologue_fits``).

    Raises:
        ValueError: a K split, BLOCK_M < M, a prologue the config cannot run.
    """
    m, k = x.shape
    n = w_gate.shape[0]
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if m == 0 or n == 0:
        return out
    if cfg.split_k != 1 or cfg.block_m < m or (cfg.full and cfg.block_k < k):
        raise ValueError(f"glu_gemm: config {cfg} cannot run M={m} K={k} (no K split; BLOCK_M >= M; full-K tile)")
    if norm is not None and not (full_fits(cfg, m, k) or (cfg.dot and x.dtype in (torch.bfloat16, torch.float32))):
        raise ValueError(f"glu_gemm: an RMSNorm prologue needs the full-K GEMV tile or a bf16/fp32 dot tile, got {cfg}")
    r = g = s = x
    stride_rm, eps, offset = 0, 0.0, 0.0
    if norm is not None:
        r = x if norm.residual is None else norm.residual
        g = x if norm.weight is None else norm.weight
        s = x if norm.s_out is None else norm.s_out
        stride_rm = 0 if norm.residual is None else norm.residual.stride(0)
        eps, offset = float(norm.eps), float(norm.offset)
    full = cfg.full and not cfg.dot
    manual = gm._interpreting()

    def run():
        _glu_kernel[(triton.cdiv(n, cfg.block_n),)](
            x, w_gate, w_up, w_gate if b_gate is None else b_gate, w_gate if b_up is None else b_up, out, r, g, s,
            m, n, k, x.stride(0), x.stride(1), w_gate.stride(0), w_up.stride(0), stride_rm, eps, offset,
            ACT=ACTIVATIONS.index(activation), HBG=b_gate is not None, HBU=b_up is not None, BLOCK_M=cfg.block_m,
            BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, EVEN_K=k % cfg.block_k == 0, FULL=full,
            EVICT=cfg.evict and full, IEEE=x.dtype == torch.float32, MANUAL_BF16=manual, NORM=norm is not None,
            HAS_RES=norm is not None and norm.residual is not None,
            HAS_G=norm is not None and norm.weight is not None, num_warps=cfg.num_warps, num_stages=cfg.num_stages)

    with on_device(x):
        run()
    return out


def _validated(x, w_gate, w_up, b_gate, b_up, activation):
    if activation not in ACTIVATIONS:
        raise ValueError(f"glu_gemm: activation {activation!r} is not one of {list(ACTIVATIONS)}")
    if tuple(w_gate.shape) != tuple(w_up.shape):
        raise ValueError(f"glu_gemm: gate {tuple(w_gate.shape)} and up {tuple(w_up.shape)} weights differ")
    (wg, wu), (bg, bu) = gm.validated(x, [w_gate, w_up], [b_gate, b_up])
    return wg, wu, bg, bu


def glu_gemm(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, b_gate: torch.Tensor | None,
             b_up: torch.Tensor | None, activation: str, config: Config | None = None) -> torch.Tensor:
    """``act(x @ w_gate.T + b_gate) * (x @ w_up.T + b_up)`` in one launch (module docstring).

    Args:
        x: (M <= 32, K) float16/bfloat16/float32; w_gate, w_up: (N, K) of x's dtype; b_gate, b_up: (N,) or None;
        activation: ``silu`` / ``gelu_tanh`` / ``gelu``; config: run this one instead of :func:`pick_config`'s.

    Returns:
        (M, N) contiguous tensor of x's dtype.

    Raises:
        ValueError: what ``gemm_merge.validated`` refuses, an unknown activation, weights of different shapes.
    """
    wg, wu, bg, bu = _validated(x, w_gate, w_up, b_gate, b_up, activation)
    return launch(x, wg, wu, bg, bu, activation, config or pick_config(x, wg, bg, bu))


def rms_norm_glu_gemm(x: torch.Tensor, residual: torch.Tensor | None, norm_weight: torch.Tensor | None, eps: float,
                      offset: float, w_gate: torch.Tensor, w_up: torch.Tensor, b_gate: torch.Tensor | None,
                      b_up: torch.Tensor | None, activation: str, config: Config | None = None) -> list[torch.Tensor]:
    """RMSNorm of ``x (+ residual)``, then :func:`glu_gemm` of it: one launch where the config takes the prologue
    (the full-K GEMV tile; the dot tile for bf16 / fp32), else the norm kernel then the GLU kernel.

    Returns:
        ``[out]`` ((M, N)), then ``s`` (x's shape) when ``residual`` is given.

    Raises:
        ValueError: as :func:`glu_gemm` and ``rms_norm.fused_add_rms_norm``.
    """
    rms._validate(x, norm_weight, residual)
    k = x.shape[-1]
    x2 = rms._rows(x, k)
    m = x2.shape[0]
    wg, wu, bg, bu = _validated(x2, w_gate, w_up, b_gate, b_up, activation)
    cfg = config or pick_config(x2, wg, bg, bu)
    one = full_fits(cfg, m, k) or (cfg.dot and x.dtype in (torch.bfloat16, torch.float32))
    if m > 0 and wg.shape[0] > 0 and one:
        s = None if residual is None else torch.empty(x.shape, dtype=x.dtype, device=x.device)
        norm = gm.NormPrologue(None if residual is None else rms._rows(residual, k),
                               None if norm_weight is None else norm_weight.contiguous(), eps, offset,
                               None if s is None else s.view(m, k))
        return [launch(x2, wg, wu, bg, bu, activation, cfg, norm=norm)] + ([] if s is None else [s])
    if residual is not None:
        y, s = rms.fused_add_rms_norm(x, residual, norm_weight, eps, offset)
    else:
        y, s = rms.rms_norm(x, norm_weight, eps, offset), None
    return [launch(y.reshape(m, k), wg, wu, bg, bu, activation, cfg)] + ([] if s is None else [s])


def check(spec: dict[str, Any], norm: bool = False) -> str | None:
    """Compile-time limits of the GLU kernel (and, with ``norm``, of the RMSNorm kernels).

    Args:
        spec: keys of ``ops.glu_gemm.glu_gemm_spec`` / ``rms_norm_glu_gemm_spec``.

    Returns:
        ``None`` if taken, else the reason in plain words. No measured table is asked: the pass that emits the op
        is off until measured, so a compile that runs it asked for it.
    """
    if spec.get("device_type") == "cpu" and not gm._interpreting():
        return "CPU tensors: Triton runs them only under TRITON_INTERPRET=1"
    if spec.get("activation") not in ACTIVATIONS:
        return f"activation {spec.get('activation')!r} is not one of {list(ACTIVATIONS)}"
    why = gm.dtype_and_bucket_refused(spec, "glu_gemm")
    if why is not None:
        return why
    ns = tuple(spec.get("ns") or ())
    if spec.get("k") is None or len(ns) != 2 or None in ns or ns[0] != ns[1]:
        return f"gate and up need one static N and a static K (N {ns}, K {spec.get('k')})"
    if not all(spec.get("weight_k_contiguous", ())):
        return "a weight is not contiguous along K (the kernel streams (N, K) rows with unit K stride)"
    return rms.check(spec) if norm else None


# ---------------------------------------------------------------------------------------------- AOT cases


def aot_cases() -> list[dict]:
    """Compile cases: Llama-3.2-1B gate/up (K 2048, N 8192) at M = 1 (the full-K GEMV tile, SwiGLU; and with the
    add + RMSNorm prologue), Gemma's GELU-tanh at M = 8 (the GEMV tile at its limit), M = 32 dot tiles (bf16
    SwiGLU with the prologue, fp32 erf GELU with biases and a masked K)."""
    def case(name, dt, cfg: Config, act="silu", norm=(False, False, False), hb=(False, False), even_k=True):
        sig = {n: f"*{dt}" for n in ("X", "WG", "WU", "BG", "BU", "Y", "R", "G", "S")}
        sig.update({n: "i32" for n in ("M", "N", "K", "stride_xm", "stride_xk", "stride_wg", "stride_wu",
                                        "stride_rm")})
        sig.update({"eps": "fp32", "offset": "fp32"})
        consts = {"ACT": ACTIVATIONS.index(act), "HBG": hb[0], "HBU": hb[1], "BLOCK_M": cfg.block_m,
                  "BLOCK_N": cfg.block_n, "BLOCK_K": cfg.block_k, "EVEN_K": even_k, "FULL": cfg.full and not cfg.dot,
                  "EVICT": cfg.evict, "IEEE": dt == "fp32", "MANUAL_BF16": False, "NORM": norm[0],
                  "HAS_RES": norm[1], "HAS_G": norm[2]}
        sig.update({n: "constexpr" for n in consts})
        return {"name": name, "fn": _glu_kernel, "signature": sig, "constexprs": consts, "num_warps": cfg.num_warps,
                "num_stages": cfg.num_stages}

    bf = torch.bfloat16
    return [
        case("gateup_silu_gemvfull_m1_bf16", "bf16", glu_config(1, 2048, 8192, bf, warp=32)),
        case("gateup_silu_addnorm_gemvfull_m1_bf16", "bf16", glu_config(1, 2048, 8192, bf, warp=32),
             norm=(True, True, True)),
        case("gateup_gelutanh_gemvfull_m8_bf16", "bf16", glu_config(8, 1024, 3072, bf, warp=32), act="gelu_tanh"),
        case("gateup_silu_norm_dot_m32_bf16", "bf16", glu_config(32, 2048, 8192, bf), norm=(True, True, True)),
        case("gateup_gelu_bias_dot_m32_fp32", "fp32", glu_config(32, 896, 4864, torch.float32), act="gelu",
             hb=(True, True), even_k=False),
    ]
