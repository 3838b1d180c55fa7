"""Triton ``rope_kv_write``: q's rotation, k's rotation into the K cache and v into the V cache, one launch.

Math: exactly :func:`rocm_inductor.providers.reference.rope_kv_write_ref` (``rocm_fused::rope``'s
rotation, RoFormer arXiv:2104.09864 as HF spells it, in float32 — float64 for float64 input — one RTNE rounding
at the store through ``rms_norm._round_to``, so the interpreter rounds like the GPU; then the cache writes of HF
``StaticCache.update`` / gpt-fast ``KVCache.update``).

Layout: q is viewed as (n0, n1, n2, D) with any strides and rotated by :func:`rope._rope_rows` into a contiguous
output (the same code as ``rocm_fused::rope``). k and v are (B, H_kv, S, D) with any strides; row (b, h, s) of k
is rotated and stored at ``k_cache[b, h, positions[s], :]``, row (b, h, s) of v copied to
``v_cache[b, h, positions[s], :]`` (cache strides any); a position outside [0, max_len) stores nothing. cos/sin are
broadcast by stride 0, separately for q and k. Programs [0, NQP) take q rows (``ROWS`` per program, the rope
kernel's packing), [NQP, NQP + NKP) k rows, the rest v rows (``ROWS_V`` rows of ``BLOCK_V`` features): at batch-1
decode of Llama-3.2-1B (32 q heads, 8 kv heads, head_dim 64) that is 2 + 1 + 1 programs in one launch, in place of
Inductor's q-RoPE kernel, its k-RoPE + K-write kernel and its V-write kernel (issue 31's profile). Not tuned on a
GPU.

Limits (:func:`check`): ``rope.check``'s, with the on-the-fly tables only (no cached table), and the caches,
k, v of q's dtype.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from ...report import dtype_name
from . import rope as _rope
from ._launch import on_device
from .rms_norm import _round_to
from .rope import _pair_index, _pair_tables, _rope_rows

#: Elements per v tile (rows x BLOCK_V): the same budget as the rope kernel's tile of both halves (2 x 1024).
_V_TILE = 2048


def check(spec: dict[str, Any]) -> str | None:
    """Compile-time limits (spec keys: ``rocm_inductor.ops.rope_kv``); ``None`` if the kernel takes the match."""
    reason = _rope.check({**spec, "cached": False})
    if reason is not None:
        return reason
    dt = spec.get("dtype")
    for key in ("k_dtype", "v_dtype", "cache_dtype"):
        if spec.get(key) != dt:
            return (f"triton rope_kv_write needs q, k, v and the caches of one dtype, {key} is "
                    f"{dtype_name(spec.get(key))}")
    return None


def launch_config(rotary_dim: int, head_dim: int) -> tuple[int, int, int, int, int, int]:
    """``(BLOCK_H, BLOCK_T, ROWS, BLOCK_V, ROWS_V, num_warps)``: the rope kernel's (``rope.launch_config``) plus the v
    tile, ``BLOCK_V = next_pow2(D)``, ``ROWS_V = clamp(2048 // BLOCK_V, 1, 64)``. Not yet tuned on a GPU."""
    block_h, block_t, rows, warps = _rope.launch_config(rotary_dim, head_dim)
    block_v = triton.next_power_of_2(head_dim)
    rows_v = max(1, min(_rope.MAX_ROWS, _V_TILE // block_v))
    return block_h, block_t, rows, block_v, rows_v, warps


@triton.jit
def _slots(pid, P, ps0, n1, n2, M, L, R: tl.constexpr):
    """Rows ``pid * R ...`` of a (B, H, S) grid: (b, h, s, slot, load mask, store mask)."""
    rows = pid.to(tl.int64) * R + tl.arange(0, R)
    rmask = rows < M
    i2 = rows % n2
    t = rows // n2
    i1 = t % n1
    i0 = t // n1
    pos = tl.load(P + i2 * ps0, mask=rmask, other=-1).to(tl.int64)
    wmask = rmask & (pos >= 0) & (pos < L)  # a slot outside the cache is never written (the op's contract)
    return i0, i1, i2, pos, rmask, wmask


@triton.jit
def _k_rows(pid, X, KC, C, S, P, ps0, n1, n2, M, L,
            xs0, xs1, xs2, xs3, cs0, cs1, cs2, cs3, ss0, ss1, ss2, ss3, kc0, kc1, kc2, kc3, D, RD,
            INTERLEAVED: tl.constexpr, HALF_TABLE: tl.constexpr, HAS_TAIL: tl.constexpr,
            BLOCK_H: tl.constexpr, BLOCK_T: tl.constexpr, ROWS: tl.constexpr, CT: tl.constexpr):
    """Rotate ROWS rows of k and store them into their cache slots (``_rope_rows``' math, scattered store)."""
    i0, i1, i2, pos, rmask, wmask = _slots(pid, P, ps0, n1, n2, M, L, ROWS)
    xo = i0 * xs0 + i1 * xs1 + i2 * xs2
    oo = i0 * kc0 + i1 * kc1 + pos * kc2
    half, j, a, b = _pair_index(RD, INTERLEAVED, BLOCK_H)
    m = rmask[:, None] & (j < half)[None, :]
    wm = wmask[:, None] & (j < half)[None, :]
    xa = tl.load(X + xo[:, None] + a[None, :] * xs3, mask=m, other=0.0).to(CT)
    xb = tl.load(X + xo[:, None] + b[None, :] * xs3, mask=m, other=0.0).to(CT)
    ca, cb, sa, sb = _pair_tables(C, S, i0 * cs0 + i1 * cs1 + i2 * cs2, i0 * ss0 + i1 * ss1 + i2 * ss2,
                                  a, b, j, m, cs3, ss3, HALF_TABLE, CT)
    oa = xa * ca - xb * sa
    ob = xb * cb + xa * sb
    ODT: tl.constexpr = KC.dtype.element_ty
    tl.store(KC + oo[:, None] + a[None, :] * kc3, _round_to(oa, ODT), mask=wm)
    tl.store(KC + oo[:, None] + b[None, :] * kc3, _round_to(ob, ODT), mask=wm)
    if HAS_TAIL:  # partial rotary: x[rd:] copied unchanged
        tt = RD + tl.arange(0, BLOCK_T)
        tv = tl.load(X + xo[:, None] + tt[None, :] * xs3, mask=rmask[:, None] & (tt < D)[None, :], other=0.0)
        tl.store(KC + oo[:, None] + tt[None, :] * kc3, tv, mask=wmask[:, None] & (tt < D)[None, :])


@triton.jit
def _v_rows(pid, V, VC, P, ps0, n1, n2, M, L, vs0, vs1, vs2, vs3, vc0, vc1, vc2, vc3, D,
            BLOCK_V: tl.constexpr, ROWS_V: tl.constexpr):
    """Copy ROWS_V rows of v into their cache slots."""
    i0, i1, i2, pos, rmask, wmask = _slots(pid, P, ps0, n1, n2, M, L, ROWS_V)
    dd = tl.arange(0, BLOCK_V)
    dm = (dd < D)[None, :]
    x = tl.load(V + (i0 * vs0 + i1 * vs1 + i2 * vs2)[:, None] + dd[None, :] * vs3, mask=rmask[:, None] & dm)
    tl.store(VC + (i0 * vc0 + i1 * vc1 + pos * vc2)[:, None] + dd[None, :] * vc3, x, mask=wmask[:, None] & dm)


@triton.jit
def _rope_kv_kernel(
    Q, QO, K, V, KC, VC, C, S, P,
    q_n1, q_n2, q_M, qs0, qs1, qs2, qs3, qcs0, qcs1, qcs2, qcs3, qss0, qss1, qss2, qss3,
    k_n1, k_n2, k_M, ks0, ks1, ks2, ks3, kcs0, kcs1, kcs2, kcs3, kss0, kss1, kss2, kss3,
    vs0, vs1, vs2, vs3, kc0, kc1, kc2, kc3, vc0, vc1, vc2, vc3, ps0,
    D, RD, L, NQP, NKP,
    INTERLEAVED: tl.constexpr, HALF_TABLE: tl.constexpr, HAS_TAIL: tl.constexpr, BLOCK_H: tl.constexpr,
    BLOCK_T: tl.constexpr, ROWS: tl.constexpr, BLOCK_V: tl.constexpr, ROWS_V: tl.constexpr, CT: tl.constexpr,
):
    """Programs [0, NQP) rotate q, [NQP, NQP + NKP) rotate k into the K cache, the rest copy v (one launch)."""
    pid = tl.program_id(0)
    if pid < NQP:
        _rope_rows(pid, Q, QO, C, S, P, q_n1, q_n2, q_M, qs0, qs1, qs2, qs3, qcs0, qcs1, qcs2, qcs3,
                   qss0, qss1, qss2, qss3, D, RD, 1, INTERLEAVED, HALF_TABLE, False, HAS_TAIL,
                   BLOCK_H, BLOCK_T, ROWS, CT)
    elif pid < NQP + NKP:
        _k_rows(pid - NQP, K, KC, C, S, P, ps0, k_n1, k_n2, k_M, L, ks0, ks1, ks2, ks3, kcs0, kcs1, kcs2, kcs3,
                kss0, kss1, kss2, kss3, kc0, kc1, kc2, kc3, D, RD, INTERLEAVED, HALF_TABLE, HAS_TAIL,
                BLOCK_H, BLOCK_T, ROWS, CT)
    else:
        _v_rows(pid - NQP - NKP, V, VC, P, ps0, k_n1, k_n2, k_M, L, vs0, vs1, vs2, vs3, vc0, vc1, vc2, vc3, D,
                BLOCK_V, ROWS_V)


def rope_kv_write(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                  k_cache: torch.Tensor, v_cache: torch.Tensor, positions: torch.Tensor, rotary_dim: int,
                  interleaved: bool, half_table: bool) -> torch.Tensor:
    """One launch of :func:`_rope_kv_kernel`; the caches are written in place.

    Args: as ``rocm_fused::rope_kv_write`` (shapes already checked by ``ops.rope_kv.check_args``): q (..., D) <= 4-D,
        k, v (B, H_kv, S, D), caches (B, H_kv, max_len, D), one dtype of float16/bfloat16/float32/float64; positions
        (S,) integer.

    Returns:
        q_rot, contiguous.

    Raises:
        ValueError: a dtype or dim :func:`check` refuses, or cos/sin that don't broadcast to q or k.
    """
    spec = {"dtype": q.dtype, "k_dtype": k.dtype, "v_dtype": v.dtype, "cache_dtype": k_cache.dtype,
            "table_dtype": cos.dtype, "head_dim": q.shape[-1], "rotary_dim": rotary_dim, "ndim": q.dim()}
    if v_cache.dtype != k_cache.dtype:
        spec["cache_dtype"] = v_cache.dtype
    reason = check(spec)
    if reason is not None:
        raise ValueError(reason)
    d = q.shape[-1]
    width = rotary_dim // 2 if half_table else rotary_dim
    tq = (_rope._table_view(cos, q, width), _rope._table_view(sin, q, width))
    tk = (_rope._table_view(cos, k, width), _rope._table_view(sin, k, width))
    qo = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    block_h, block_t, rows, block_v, rows_v, warps = launch_config(rotary_dim, d)
    q4 = _rope._as4d(q)
    mq, mk = q.numel() // d, k.numel() // d
    nqp, nkp, nvp = triton.cdiv(mq, rows), triton.cdiv(mk, rows), triton.cdiv(mk, rows_v)
    if nqp + nkp + nvp == 0:
        return qo
    ct = tl.float64 if q.dtype == torch.float64 else tl.float32
    call = (q4, qo, k, v, k_cache, v_cache, tq[0], tq[1], positions,
            q4.shape[1], q4.shape[2], mq, *q4.stride(), *tq[0].stride(), *tq[1].stride(),
            k.shape[1], k.shape[2], mk, *k.stride(), *tk[0].stride(), *tk[1].stride(),
            *v.stride(), *k_cache.stride(), *v_cache.stride(), positions.stride(0),
            d, rotary_dim, k_cache.shape[2], nqp, nkp)
    kw = dict(INTERLEAVED=bool(interleaved), HALF_TABLE=bool(half_table), HAS_TAIL=rotary_dim < d,
              BLOCK_H=block_h, BLOCK_T=block_t, ROWS=rows, BLOCK_V=block_v, ROWS_V=rows_v, CT=ct, num_warps=warps)
    grid = (nqp + nkp + nvp,)
    with on_device(q):
        _rope_kv_kernel[grid](*call, **kw)
    return qo


def aot_cases() -> list[dict[str, Any]]:
    """Representative compile cases of :func:`_rope_kv_kernel`: Llama-style head_dim 128 NeoX full rotary on bf16
    (HF's full-width tables), head_dim 64 on fp16 (Llama-3.2-1B), and GPT-J partial rotary 64 of 128 on bf16
    (``launch_config``; int64 positions, 4 warps)."""
    def sig(dt: str) -> dict[str, str]:
        s = {n: f"*{dt}" for n in ("Q", "QO", "K", "V", "KC", "VC", "C", "S")}
        s["P"] = "*i64"
        for t in ("q", "k"):
            s.update({f"{t}_n1": "i32", f"{t}_n2": "i32", f"{t}_M": "i32"})
            s.update({f"{t}{g}{i}": "i32" for g in ("s", "cs", "ss") for i in range(4)})
        s.update({f"{g}{i}": "i32" for g in ("vs", "kc", "vc") for i in range(4)})
        s.update({n: "i32" for n in ("ps0", "D", "RD", "L", "NQP", "NKP")})
        s.update({c: "constexpr" for c in ("INTERLEAVED", "HALF_TABLE", "HAS_TAIL", "BLOCK_H", "BLOCK_T", "ROWS",
                                            "BLOCK_V", "ROWS_V", "CT")})
        return s

    # Unit strides (every last dim, positions) arrive as the constant 1: Triton's launcher specialises an int
    # argument equal to 1 (HF's transposed projections, contiguous tables and caches). With all 70 scalars as i32,
    # the kernel spilled 23-55 SGPRs on gfx942/gfx950; with them as constants it still spills 19-54 (triton 3.9,
    # 2026-12-04; no scratch, no VGPR spill: SGPRs spill to VGPR lanes), and GPT-J partial rotary has 8 B of stack on
    # sm_90. Recorded as known spills until a GPU says whether it matters for a 4-program decode launch.
    ones = ("qs3", "qcs3", "qss3", "ks3", "kcs3", "kss3", "vs3", "kc3", "vc3", "ps0")
    cases = []
    for name, dt, inter, rd, d in (("neox_bf16_d128", "bf16", False, 128, 128),
                                   ("neox_fp16_d64", "fp16", False, 64, 64),
                                   ("gptj_partial_bf16_d128", "bf16", True, 64, 128)):
        block_h, block_t, rows, block_v, rows_v, warps = launch_config(rd, d)
        cases.append({"name": name, "fn": _rope_kv_kernel,
                      "signature": {**sig(dt), **dict.fromkeys(ones, "constexpr")},
                      "constexprs": {**dict.fromkeys(ones, 1), "INTERLEAVED": inter, "HALF_TABLE": False,
                                     "HAS_TAIL": rd < d, "BLOCK_H": block_h, "BLOCK_T": block_t, "ROWS": rows,
                                     "BLOCK_V": block_v, "ROWS_V": rows_v, "CT": tl.float32},
                      "num_warps": warps,
                      "known_spill": "SGPR spills on gfx942/gfx950 (70 scalar arguments, three row kinds in one "
                                     "kernel) and, GPT-J partial, 8 B of sm_90 stack (triton 3.9)"})
    return cases
