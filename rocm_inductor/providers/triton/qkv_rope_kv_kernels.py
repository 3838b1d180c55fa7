"""Triton kernel of ``rocm_fused::qkv_rope_kv``: RMSNorm + q/k/v GEMMs + q/k RoPE + the K/V cache writes, one launch.

Launched by ``qkv_rope_kv.qkv_rope_kv`` (configs: ``gemm_configs.Config``, split-free: ``qkv_rope_kv.tile_config``);
ahead-of-time compile cases in :func:`aot_cases`.

Math: exactly :func:`rocm_inductor.providers.reference.qkv_rope_kv_ref`, stage by stage with the existing kernels'
device functions: the RMSNorm prologue of the merged GEMM (``gemm_kernels._norm_row`` for the full-K GEMV tile,
``gemm_kernels._norm_tile`` for the dot tile), its float32 accumulation (``tl.dot`` IEEE for float32, exact float32
under the interpreter), bias in float32, one rounding to the model dtype (what the unfused graph stores between the
projection and the RoPE), then ``rope_kv._k_rows``' rotation in float32 (``rope._pair_tables``' table loads),
rounded once (RTNE through ``rms_norm._round_to``).

Tile: one program computes BLOCK_N output rows of one weight for every token, BLOCK_N / 2 *pairs* of them: row
``2p`` is feature a and row ``2p + 1`` feature b of pair p (:func:`_pairs`), so after the GEMM the accumulator
``(BLOCK_M, BLOCK_N)`` splits (``tl.reshape`` + ``tl.split``, as ``moe_experts_kernels``' interleaved gate/up) into
the two halves of each rotation, and the whole epilogue stays in registers. Over a head of D features, pair
``i < rotary_dim / 2`` rotates (NeoX: features i and i + rd/2; GPT-J: 2i and 2i + 1); the others pass through
(t = i - rd/2: features rd + t and rd + t + (D - rd) / 2). The v weight is the same code with rotary_dim 0 and no
table loads. The GEMM is the merged kernel's (``gemm_kernels._tile``): the full-K GEMV tile (``FULL``: the
program's whole (BLOCK_N, K) weight tile loaded at once, then one row of x at a time) or the dot tile (``DOT``: a
K loop of ``tl.dot``), never a K split (the epilogue needs complete sums).

Grid: programs [0, NQP) take q's pair blocks, [NQP, NQP + NKP) k's, the rest v's (each ``cdiv(H * D / 2,
BLOCK_N / 2)``): the merged GEMM's column blocks, so as many programs as ``merged_gemm`` launches for the same
BLOCK_N (Llama-3.2-1B at B = 1 with its measured prologue tile, BLOCK_N 2: 1024 + 256 + 256). Row m of x is token
(b, s) = (m // S, m % S); q goes to ``out[b, h, s, :]`` of a contiguous (B, H_q, S, D) tensor, k and v to
``cache[b, h, positions[s], :]`` (any cache strides; a position outside [0, max_len) stores nothing). With the
norm, program 0 stores the residual sum (``store_s``, as the merged kernel's column block 0). Not measured on a GPU.
"""

from __future__ import annotations

from typing import Any

import triton
import triton.language as tl

from .gemm_configs import Config
from .gemm_kernels import _load_xw, _norm_row, _norm_tile
from .rms_norm import _inv_rms, _round_to
from .rope import _pair_tables


@triton.jit
def _pairs(jg, H, D, RD, INTERLEAVED: tl.constexpr):
    """Global pair indices ``jg`` of a weight of H heads: ``(valid, head, i, a, b, rotated)``, pair i of head
    ``head`` being features a and b (module docstring); invalid indices are mapped to pair 0 (loads stay in bounds)."""
    hd = D // 2
    valid = jg < H * hd
    jg = tl.where(valid, jg, 0)
    h = jg // hd
    i = jg % hd
    half = RD // 2
    rot = i < half
    if INTERLEAVED:
        ra = 2 * i
        rb = ra + 1
    else:
        ra = i
        rb = i + half
    pa = RD + (i - half)  # pass-through pairs: the tail's two halves
    a = tl.where(rot, ra, pa)
    b = tl.where(rot, rb, pa + (D - RD) // 2)
    return valid, h, i, a, b, rot


@triton.jit
def _acc(X, W, rows_n, M, K, sw, stride_xm, stride_xk, R, G, SUM, stride_rm, eps, offset, store_s,
         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr,
         DOT: tl.constexpr, IEEE: tl.constexpr, MANUAL_BF16: tl.constexpr, FULL: tl.constexpr,
         EVICT: tl.constexpr, NORM: tl.constexpr, HAS_RES: tl.constexpr, HAS_G: tl.constexpr):
    """float32 ``x @ W[rows_n].T`` (BLOCK_M, BLOCK_N) over the whole K: the ``FULL`` and ``DOT`` branches of
    ``gemm_kernels._tile`` without a K split (``NORM``: x is the RMSNorm's input, as there; ``store_s`` 0 or 1)."""
    offs_m = tl.arange(0, BLOCK_M)
    mask_m = offs_m < M
    x_rows = tl.where(mask_m, offs_m, 0)
    offs_k = tl.arange(0, BLOCK_K)
    w_ptrs = W + rows_n[:, None].to(tl.int64) * sw + offs_k[None, :]
    if FULL:
        if EVEN_K:
            w = tl.load(w_ptrs, eviction_policy="evict_first" if EVICT else "")
        else:
            w = tl.load(w_ptrs, mask=(offs_k < K)[None, :], other=0.0, eviction_policy="evict_first" if EVICT else "")
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for mi in tl.static_range(BLOCK_M):
            if NORM:
                xr = _norm_row(X, R, G, SUM, tl.where(mi < M, mi, 0), stride_xm, stride_xk, stride_rm, offs_k, K,
                               eps, offset, store_s * tl.where(mi < M, 1, 0), HAS_RES, HAS_G, MANUAL_BF16)
            else:
                xr_ptrs = X + tl.where(mi < M, mi, 0).to(tl.int64) * stride_xm + offs_k * stride_xk
                if EVEN_K:
                    xr = tl.load(xr_ptrs)
                else:
                    xr = tl.load(xr_ptrs, mask=offs_k < K, other=0.0)
            row = tl.sum(w.to(tl.float32) * xr.to(tl.float32)[None, :], axis=1)
            acc = tl.where(offs_m[:, None] == mi, row[None, :], acc)
    else:
        x_ptrs = X + x_rows[:, None].to(tl.int64) * stride_xm + offs_k[None, :] * stride_xk
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        ss = tl.zeros((BLOCK_M,), dtype=tl.float32)  # NORM: the rows' sums of squares (dead code otherwise)
        for k0 in range(0, K, BLOCK_K):
            x, w = _load_xw(x_ptrs, w_ptrs, k0, offs_k, K, EVEN_K)
            if NORM:
                x, ss = _norm_tile(x, ss, R, G, SUM, x_rows, mask_m, k0 + offs_k, K, stride_rm, offset, store_s,
                                   HAS_RES, HAS_G, MANUAL_BF16)
            if MANUAL_BF16:  # interpreter: exact float32 (its bf16 tl.dot is wrong, gemm_kernels._tile)
                acc = tl.dot(x.to(tl.float32), tl.trans(w.to(tl.float32)), acc, input_precision="ieee")
            elif IEEE:
                acc = tl.dot(x, tl.trans(w), acc, input_precision="ieee")
            else:
                acc = tl.dot(x, tl.trans(w), acc)
            x_ptrs += BLOCK_K * stride_xk
            w_ptrs += BLOCK_K
        if NORM:
            acc = acc * _inv_rms(ss, K, eps)[:, None]
    return acc


@triton.jit
def _segment(X, W, BIAS, OUT, COS, SIN, P, R, G, SUM, nb, M, K, SEQ, H, D, RD, L, sw, stride_xm, stride_xk, stride_rm,
             cs0, cs1, cs2, cs3, ss0, ss1, ss2, ss3, o0, o1, o2, o3, ps0, eps, offset, store_s,
             HAS_BIAS: tl.constexpr, ROT: tl.constexpr, AT_POS: tl.constexpr, INTERLEAVED: tl.constexpr,
             HALF_TABLE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
             EVEN_K: tl.constexpr, DOT: tl.constexpr, IEEE: tl.constexpr, MANUAL_BF16: tl.constexpr,
             FULL: tl.constexpr, EVICT: tl.constexpr, NORM: tl.constexpr, HAS_RES: tl.constexpr,
             HAS_G: tl.constexpr):
    """Pair block ``nb`` of one weight: the GEMM of its 2 x BLOCK_N / 2 rows, the rounding, the rotation (``ROT``)
    and the store to ``OUT[b * o0 + h * o1 + slot * o2 + feature * o3]`` (slot: s, or ``positions[s]`` with
    ``AT_POS``, masked outside [0, L))."""
    BLOCK_P: tl.constexpr = BLOCK_N // 2
    r = tl.arange(0, BLOCK_N)
    _, hr, _, ar, br, _ = _pairs(nb * BLOCK_P + r // 2, H, D, RD, INTERLEAVED)
    rows_n = hr * D + tl.where(r % 2 == 0, ar, br)  # row 2p: feature a of pair p, row 2p + 1: feature b
    acc = _acc(X, W, rows_n, M, K, sw, stride_xm, stride_xk, R, G, SUM, stride_rm, eps, offset, store_s,
               BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K, DOT, IEEE, MANUAL_BF16, FULL, EVICT, NORM, HAS_RES, HAS_G)
    if HAS_BIAS:
        acc += tl.load(BIAS + rows_n).to(tl.float32)[None, :]
    ODT: tl.constexpr = OUT.dtype.element_ty
    y = _round_to(acc, ODT, MANUAL_BF16).to(tl.float32)  # the projection as the unfused graph stores it
    ya, yb = tl.split(tl.reshape(y, (BLOCK_M, BLOCK_P, 2)))
    pm, h, i, a, b, rot = _pairs(nb * BLOCK_P + tl.arange(0, BLOCK_P), H, D, RD, INTERLEAVED)
    offs_m = tl.arange(0, BLOCK_M)
    rmask = offs_m < M
    bi = (offs_m // SEQ).to(tl.int64)
    si = (offs_m % SEQ).to(tl.int64)
    if AT_POS:
        slot = tl.load(P + si * ps0, mask=rmask, other=-1).to(tl.int64)
        wrow = rmask & (slot >= 0) & (slot < L)  # a slot outside the cache is never written (the op's contract)
    else:
        slot = si
        wrow = rmask
    if ROT:
        hh = h.to(tl.int64)
        mr = rmask[:, None] & (pm & rot)[None, :]
        ca, cb, sa, sb = _pair_tables(COS + (hh * cs1)[None, :], SIN + (hh * ss1)[None, :], bi * cs0 + si * cs2,
                                      bi * ss0 + si * ss2, a, b, i, mr, cs3, ss3, HALF_TABLE, tl.float32)
        oa = tl.where(rot[None, :], ya * ca - yb * sa, ya)  # rope_kv._k_rows' rotation; the tail passes through
        ob = tl.where(rot[None, :], yb * cb + ya * sb, yb)
    else:
        oa = ya
        ob = yb
    base = bi * o0 + slot * o2
    col = h.to(tl.int64) * o1
    wm = wrow[:, None] & pm[None, :]
    tl.store(OUT + base[:, None] + (col + a.to(tl.int64) * o3)[None, :], _round_to(oa, ODT, MANUAL_BF16), mask=wm)
    tl.store(OUT + base[:, None] + (col + b.to(tl.int64) * o3)[None, :], _round_to(ob, ODT, MANUAL_BF16), mask=wm)


@triton.jit
def _qkv_rope_kv_kernel(
    X, WQ, WK, WV, BQ, BK, BV, QO, KC, VC, COS, SIN, P, R, G, SUM,
    M, K, SEQ, HQ, HKV, D, RD, L, NQP, NKP, stride_xm, stride_xk, stride_rm, SWQ, SWK, SWV,
    qcs0, qcs1, qcs2, qcs3, qss0, qss1, qss2, qss3, kcs0, kcs1, kcs2, kcs3, kss0, kss1, kss2, kss3,
    kc0, kc1, kc2, kc3, vc0, vc1, vc2, vc3, ps0, eps, offset,
    HBQ: tl.constexpr, HBK: tl.constexpr, HBV: tl.constexpr, INTERLEAVED: tl.constexpr, HALF_TABLE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr, DOT: tl.constexpr,
    IEEE: tl.constexpr, MANUAL_BF16: tl.constexpr, FULL: tl.constexpr, EVICT: tl.constexpr, NORM: tl.constexpr,
    HAS_RES: tl.constexpr, HAS_G: tl.constexpr,
):
    """Programs [0, NQP) are q's pair blocks (into the contiguous (B, HQ, SEQ, D) ``QO``), [NQP, NQP + NKP) k's
    (into ``KC`` at the positions), the rest v's (into ``VC``, no rotation). ``COS`` / ``SIN`` strides: the tables
    broadcast against q's and k's head views. Without ``NORM``, ``R``, ``G`` and ``SUM`` are never read."""
    pid = tl.program_id(0)
    store_s = tl.where(pid == 0, 1, 0)
    if pid < NQP:
        _segment(X, WQ, BQ, QO, COS, SIN, P, R, G, SUM, pid, M, K, SEQ, HQ, D, RD, L, SWQ, stride_xm, stride_xk,
                 stride_rm, qcs0, qcs1, qcs2, qcs3, qss0, qss1, qss2, qss3, HQ * SEQ * D, SEQ * D, D, 1, ps0, eps,
                 offset, store_s, HBQ, True, False, INTERLEAVED, HALF_TABLE, BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K, DOT,
                 IEEE, MANUAL_BF16, FULL, EVICT, NORM, HAS_RES, HAS_G)
    elif pid < NQP + NKP:
        _segment(X, WK, BK, KC, COS, SIN, P, R, G, SUM, pid - NQP, M, K, SEQ, HKV, D, RD, L, SWK, stride_xm,
                 stride_xk, stride_rm, kcs0, kcs1, kcs2, kcs3, kss0, kss1, kss2, kss3, kc0, kc1, kc2, kc3, ps0, eps,
                 offset, store_s, HBK, True, True, INTERLEAVED, HALF_TABLE, BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K, DOT,
                 IEEE, MANUAL_BF16, FULL, EVICT, NORM, HAS_RES, HAS_G)
    else:
        _segment(X, WV, BV, VC, COS, SIN, P, R, G, SUM, pid - NQP - NKP, M, K, SEQ, HKV, D, 0, L, SWV, stride_xm,
                 stride_xk, stride_rm, 0, 0, 0, 0, 0, 0, 0, 0, vc0, vc1, vc2, vc3, ps0, eps, offset, store_s, HBV,
                 False, True, INTERLEAVED, HALF_TABLE, BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K, DOT, IEEE, MANUAL_BF16,
                 FULL, EVICT, NORM, HAS_RES, HAS_G)


# ---------------------------------------------------------------------------------------------- AOT cases

_SCALARS = ("M", "K", "SEQ", "HQ", "HKV", "D", "RD", "L", "NQP", "NKP", "stride_xm", "stride_xk", "stride_rm",
            "SWQ", "SWK", "SWV", *(f"{t}{g}{i}" for t in "qk" for g in ("cs", "ss") for i in range(4)),
            *(f"{c}{i}" for c in ("kc", "vc") for i in range(4)), "ps0")
_CONSTEXPRS = ("HBQ", "HBK", "HBV", "INTERLEAVED", "HALF_TABLE", "BLOCK_M", "BLOCK_N", "BLOCK_K", "EVEN_K", "DOT",
               "IEEE", "MANUAL_BF16", "FULL", "EVICT", "NORM", "HAS_RES", "HAS_G")
#: Arguments equal to 1 in the HF decode layout, which Triton's launcher specialises into constants: unit strides
#: (x's K, the tables' and caches' last dims, positions) and, at batch-1 decode, M and S.
_ONES = ("stride_xk", "qcs3", "qss3", "kcs3", "kss3", "kc3", "vc3", "ps0")


def aot_cases() -> list[dict[str, Any]]:
    """Representative compile cases of :func:`_qkv_rope_kv_kernel` (the preamble's format): Llama-3.2-1B (K 2048,
    32 q heads, 8 kv heads, head_dim 64, NeoX full rotary, HF's full tables) bf16 with add + RMSNorm at M = 1 on the
    measured prologue tile (full-K GEMV, BLOCK_N 2, 8 warps; M and S = 1 as constants), without a norm on the
    merged GEMM's M = 1 tile, float16 at M = 8 on the full-K GEMV tile, and bf16 at M = 8 on the dot tile
    (``norm_dot_config``'s BLOCK_N 32, BLOCK_K 64); GPT-J partial rotary (64 of 256, half tables) bf16 at M = 4 on
    a dot tile without a norm; Qwen2-0.5B-style fp16 with biases and no norm (K 896 masked, head_dim 64) at M = 2
    on the full-K GEMV tile; and float32 (IEEE dot) with a plain RMSNorm at M = 16."""
    def sig(dt: str) -> dict[str, str]:
        s = {n: f"*{dt}" for n in ("X", "WQ", "WK", "WV", "BQ", "BK", "BV", "QO", "KC", "VC", "COS", "SIN", "R",
                                    "G", "SUM")}
        s["P"] = "*i64"
        s.update(dict.fromkeys(_SCALARS, "i32"))
        s.update({"eps": "fp32", "offset": "fp32"})
        s.update(dict.fromkeys(_ONES, "constexpr"))
        s.update(dict.fromkeys(_CONSTEXPRS, "constexpr"))
        return s

    cases = []

    def case(name, dt, cfg: Config, k, interleaved=False, half=False, bias=False, norm=(False, False, False),
             ieee=False, ones=()):
        c = {"name": name, "fn": _qkv_rope_kv_kernel, "signature": sig(dt),
             "constexprs": {**dict.fromkeys(_ONES, 1), "HBQ": bias, "HBK": bias, "HBV": bias,
                            "INTERLEAVED": interleaved, "HALF_TABLE": half, "BLOCK_M": cfg.block_m,
                            "BLOCK_N": cfg.block_n, "BLOCK_K": cfg.block_k, "EVEN_K": k % cfg.block_k == 0,
                            "DOT": cfg.dot, "IEEE": ieee, "MANUAL_BF16": False, "FULL": cfg.full and not cfg.dot,
                            "EVICT": cfg.evict and not cfg.dot, "NORM": norm[0], "HAS_RES": norm[1],
                            "HAS_G": norm[2]},
             "num_warps": cfg.num_warps, "num_stages": cfg.num_stages}
        for n in ones:  # M = S = 1 at batch-1 decode: constants too, as the launch specialises them
            c["signature"][n] = "constexpr"
            c["constexprs"][n] = 1
        cases.append(c)

    full = dict(dot=False, late=False, full=True, evict=True)
    case("llama1b_addnorm_gemvfull_m1_bf16", "bf16", Config(1, 2, 2048, 1, 8, 1, **full), 2048,
         norm=(True, True, True), ones=("M", "SEQ"))
    # without a norm: the merged GEMM's M = 1 full-K tile at 64 weight elements per thread (BLOCK_N 4, 4 warps)
    case("llama1b_gemvfull_m1_bf16", "bf16", Config(1, 4, 2048, 1, 4, 1, **full), 2048, ones=("M", "SEQ"))
    # float16 + add + RMSNorm at M = 8: qkv_rope_kv.tile_config's full-K GEMV tile (the dot prologue is bf16/fp32
    # only), eight rows normalised per program
    case("llama1b_addnorm_gemvfull_m8_fp16", "fp16", Config(8, 4, 2048, 1, 4, 1, **full), 2048,
         norm=(True, True, True))
    case("llama1b_addnorm_dot_m8_bf16", "bf16", Config(16, 32, 64, 1, 4, 3, True), 2048, norm=(True, True, True))
    case("gptj_partial_half_dot_m4_bf16", "bf16", Config(16, 32, 128, 1, 4, 3, True), 4096, interleaved=True,
         half=True)
    case("qwen2_bias_gemvfull_m2_fp16", "fp16", Config(2, 4, 1024, 1, 4, 1, **full), 896, bias=True)
    case("norm_dot_m16_fp32", "fp32", Config(16, 32, 64, 1, 4, 3, True), 2048, norm=(True, False, True), ieee=True)
    return cases

