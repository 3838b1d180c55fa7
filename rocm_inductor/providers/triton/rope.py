"""Triton rotary-embedding kernel: q and k in one launch, any head_dim, any strides, NeoX or GPT-J pairs.

Math: exactly :func:`rocm_inductor.providers.reference.rope_ref` / ``rope_cached_ref`` (RoFormer,
arXiv:2104.09864, as HF spells it): for each pair (a, b) of the first ``rotary_dim`` features —
(j, j + rd/2) for NeoX, (2j, 2j + 1) for GPT-J —
``out[a] = x[a] cos[a] - x[b] sin[a]``, ``out[b] = x[b] cos[b] + x[a] sin[b]``, tail copied, computed in
float32 (float64 for float64 input), one rounding at the store (RTNE, bf16 through the integer rounding of
``rms_norm._round_bf16``, so the interpreter rounds like the GPU).

Layout: each tensor is viewed as (n0, n1, n2, D) (leading dims padded with 1s) with arbitrary element
strides, so transposed (b, h, s, d) views, (b, s, h, d), flattened tokens and slices of a fused qkv
projection are read in place. cos/sin are broadcast by stride 0 (``expand``), separately for q and k (q and
k may have different head counts). The cached form reads ``positions`` the same way and gathers the row of
a float32 [max_pos, rd] table (cos half, then sin half), a position outside [0, max_pos) clamped to the nearest
row. Programs [0, NQP) rotate q rows, the rest k rows:
one launch for both. Each program handles ``ROWS`` rows x ``BLOCK_H`` pairs (rows packed so small head
dims still fill a tile; after the row packing of Liger-Kernel's ``rope.py`` which launches one program per
token). Outputs are contiguous.

Limits (what :func:`check` refuses): dtype not fp16/bf16/fp32/fp64; q/k dtypes differing; odd rotary_dim
or rotary_dim > head_dim; symbolic head_dim; more than 4 dims; cached tables that are not float32.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from ...report import dtype_name
from ._launch import on_device
from .rms_norm import _round_to

#: Input dtypes the kernel takes (tables: any float dtype, loaded and upcast).
INPUT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
TABLE_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
#: Largest head dim: one row's pairs live in one program's registers (same bound as rms_norm's rows).
MAX_HEAD_DIM = 65536
MAX_NDIM = 4
#: Pairs per tile target and row cap (row packing for small head dims; not yet tuned on a GPU).
_TILE_PAIRS = 1024
MAX_ROWS = 64


def check(spec: dict[str, Any]) -> str | None:
    """Compile-time limits of the kernel (spec keys: ``rocm_inductor.ops.rope``); ``None`` if it takes it."""
    dt, kdt, tdt = spec.get("dtype"), spec.get("k_dtype"), spec.get("table_dtype")
    d, rd = spec.get("head_dim"), spec.get("rotary_dim")
    if dt not in INPUT_DTYPES:
        return f"triton rope takes float16/bfloat16/float32/float64 q, q is {dtype_name(dt)}"
    if kdt is not None and kdt != dt:
        return f"triton rope needs q and k of one dtype, got {dtype_name(dt)} and {dtype_name(kdt)}"
    if tdt not in TABLE_DTYPES:
        return f"triton rope takes float cos/sin tables, table is {dtype_name(tdt)}"
    if spec.get("cached") and tdt != torch.float32:
        return f"cos_sin_cache must be float32, is {dtype_name(tdt)}"
    if not isinstance(d, int) or isinstance(d, bool):
        return "head_dim is symbolic; triton rope picks its block size from a static head_dim"
    if not isinstance(rd, int) or rd < 2 or rd % 2 or rd > d:
        return f"rotary_dim {rd} must be even and in [2, head_dim={d}]"
    if d > MAX_HEAD_DIM:
        return f"head_dim {d} > {MAX_HEAD_DIM}"
    if spec.get("ndim", 4) > MAX_NDIM:
        return f"{spec['ndim']}-D q: triton rope views tensors as at most 4-D"
    return None


def launch_config(rotary_dim: int, head_dim: int) -> tuple[int, int, int, int]:
    """``(BLOCK_H, BLOCK_T, ROWS, num_warps)`` as a pure function of the dims.

    ``BLOCK_H = next_pow2(rd/2)`` pairs, ``BLOCK_T = next_pow2(D - rd)`` tail (1 when none),
    ``ROWS = clamp(1024 // BLOCK_H, 1, 64)``; 4 warps (a tile is <= 2048 elements: 4 x 64 ROCm lanes
    or 4 x 32 NVIDIA lanes hold it in a few registers each). Not yet tuned on a GPU.
    """
    block_h = triton.next_power_of_2(rotary_dim // 2)
    block_t = triton.next_power_of_2(max(1, head_dim - rotary_dim))
    rows = max(1, min(MAX_ROWS, _TILE_PAIRS // block_h))
    return block_h, block_t, rows, 4


@triton.jit
def _pair_index(RD, INTERLEAVED: tl.constexpr, BLOCK_H: tl.constexpr):
    """A tile's rotation pairs: ``(half, j, a, b)``, pair j rotating features a and b (NeoX: j and j + rd/2; GPT-J:
    2j and 2j + 1). Shared by the rope and the rope_kv_write kernels."""
    half = RD // 2
    j = tl.arange(0, BLOCK_H)
    if INTERLEAVED:
        a = 2 * j
        b = a + 1
    else:
        a = j
        b = j + half
    return half, j, a, b


@triton.jit
def _pair_tables(C, S, co, so, a, b, j, m, cs3, ss3, HALF_TABLE: tl.constexpr, CT: tl.constexpr):
    """cos/sin of a tile's pairs, ``(cos_a, cos_b, sin_a, sin_b)`` at features a and b of the table rows at offsets
    ``co`` / ``so`` (on-the-fly tables; a half table holds one value per pair, index j). Shared by the rope and the
    rope_kv_write kernels."""
    if HALF_TABLE:
        ca = tl.load(C + co[:, None] + j[None, :] * cs3, mask=m, other=0.0).to(CT)
        sa = tl.load(S + so[:, None] + j[None, :] * ss3, mask=m, other=0.0).to(CT)
        cb = ca
        sb = sa
    else:
        ca = tl.load(C + co[:, None] + a[None, :] * cs3, mask=m, other=0.0).to(CT)
        cb = tl.load(C + co[:, None] + b[None, :] * cs3, mask=m, other=0.0).to(CT)
        sa = tl.load(S + so[:, None] + a[None, :] * ss3, mask=m, other=0.0).to(CT)
        sb = tl.load(S + so[:, None] + b[None, :] * ss3, mask=m, other=0.0).to(CT)
    return ca, cb, sa, sb


@triton.jit
def _rope_rows(
    pid, X, O, C, S, P,  # noqa: E741 (Triton pointer names)
    n1, n2, M,
    xs0, xs1, xs2, xs3,  # x strides (elements)
    cs0, cs1, cs2, cs3,  # cos strides; CACHED: positions strides (0..2) and table row stride (3)
    ss0, ss1, ss2, ss3,  # sin strides (unused when CACHED)
    D, RD, NPOS,  # NPOS: table rows (CACHED; positions are clamped to [0, NPOS - 1])
    INTERLEAVED: tl.constexpr, HALF_TABLE: tl.constexpr, CACHED: tl.constexpr, HAS_TAIL: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_T: tl.constexpr, ROWS: tl.constexpr, CT: tl.constexpr,
):
    """Rotate ROWS rows of one tensor (see module docstring)."""
    rows = pid.to(tl.int64) * ROWS + tl.arange(0, ROWS)  # int64: n0*n1*n2*D may exceed 2**31
    rmask = rows < M
    i2 = rows % n2
    t = rows // n2
    i1 = t % n1
    i0 = t // n1
    xo = i0 * xs0 + i1 * xs1 + i2 * xs2
    half, j, a, b = _pair_index(RD, INTERLEAVED, BLOCK_H)
    m = rmask[:, None] & (j < half)[None, :]
    xa = tl.load(X + xo[:, None] + a[None, :] * xs3, mask=m, other=0.0).to(CT)
    xb = tl.load(X + xo[:, None] + b[None, :] * xs3, mask=m, other=0.0).to(CT)
    if CACHED:
        pos = tl.load(P + i0 * cs0 + i1 * cs1 + i2 * cs2, mask=rmask, other=0).to(tl.int64)
        pos = tl.minimum(tl.maximum(pos, 0), NPOS - 1)  # the op's contract: never a row outside the table
        base = pos * cs3
        ca = tl.load(C + base[:, None] + j[None, :], mask=m, other=0.0).to(CT)
        sa = tl.load(C + base[:, None] + half + j[None, :], mask=m, other=0.0).to(CT)
        cb = ca
        sb = sa
    else:
        ca, cb, sa, sb = _pair_tables(C, S, i0 * cs0 + i1 * cs1 + i2 * cs2, i0 * ss0 + i1 * ss1 + i2 * ss2,
                                      a, b, j, m, cs3, ss3, HALF_TABLE, CT)
    oa = xa * ca - xb * sa
    ob = xb * cb + xa * sb
    oo = rows * D
    ODT: tl.constexpr = O.dtype.element_ty
    tl.store(O + oo[:, None] + a[None, :], _round_to(oa, ODT), mask=m)
    tl.store(O + oo[:, None] + b[None, :], _round_to(ob, ODT), mask=m)
    if HAS_TAIL:  # partial rotary: copy x[rd:] unchanged
        tt = RD + tl.arange(0, BLOCK_T)
        tm = rmask[:, None] & (tt < D)[None, :]
        v = tl.load(X + xo[:, None] + tt[None, :] * xs3, mask=tm, other=0.0)
        tl.store(O + oo[:, None] + tt[None, :], v, mask=tm)


@triton.jit
def _rope_kernel(
    Q, QO, K, KO, C, S, P,
    q_n1, q_n2, q_M, qs0, qs1, qs2, qs3, qcs0, qcs1, qcs2, qcs3, qss0, qss1, qss2, qss3,
    k_n1, k_n2, k_M, ks0, ks1, ks2, ks3, kcs0, kcs1, kcs2, kcs3, kss0, kss1, kss2, kss3,
    D, RD, NQP, NPOS,
    INTERLEAVED: tl.constexpr, HALF_TABLE: tl.constexpr, CACHED: tl.constexpr, HAS_TAIL: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_T: tl.constexpr, ROWS: tl.constexpr, CT: tl.constexpr,
):
    """Programs [0, NQP) rotate q, the others k (one launch for both)."""
    pid = tl.program_id(0)
    if pid < NQP:
        _rope_rows(pid, Q, QO, C, S, P, q_n1, q_n2, q_M, qs0, qs1, qs2, qs3, qcs0, qcs1, qcs2, qcs3,
                   qss0, qss1, qss2, qss3, D, RD, NPOS, INTERLEAVED, HALF_TABLE, CACHED, HAS_TAIL,
                   BLOCK_H, BLOCK_T, ROWS, CT)
    else:
        _rope_rows(pid - NQP, K, KO, C, S, P, k_n1, k_n2, k_M, ks0, ks1, ks2, ks3, kcs0, kcs1, kcs2, kcs3,
                   kss0, kss1, kss2, kss3, D, RD, NPOS, INTERLEAVED, HALF_TABLE, CACHED, HAS_TAIL,
                   BLOCK_H, BLOCK_T, ROWS, CT)


def _as4d(t: torch.Tensor) -> torch.Tensor:
    while t.dim() < 4:
        t = t.unsqueeze(0)
    return t


def _table_view(table: torch.Tensor, x: torch.Tensor, width: int) -> torch.Tensor:
    """``table`` broadcast (stride 0) to ``x.shape[:-1] + (width,)`` and padded to 4-D."""
    if table.shape[-1] != width:
        raise ValueError(f"cos/sin last dim {table.shape[-1]} != expected {width}")
    try:
        return _as4d(table.expand(*x.shape[:-1], width))
    except RuntimeError as e:
        raise ValueError(f"cos/sin {tuple(table.shape)} do not broadcast to {tuple(x.shape[:-1])}") from e


def _pos_view(positions: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    try:
        return _as4d(positions.expand(*x.shape[:-1]).unsqueeze(-1))
    except RuntimeError as e:
        shape = tuple(positions.shape)
        raise ValueError(f"positions {shape} do not broadcast to {tuple(x.shape[:-1])}") from e


def _validate(q: torch.Tensor, k: torch.Tensor | None, table: torch.Tensor, rotary_dim: int,
              cached: bool) -> None:
    spec = {"dtype": q.dtype, "k_dtype": None if k is None else k.dtype, "table_dtype": table.dtype,
            "head_dim": q.shape[-1] if q.dim() else None, "rotary_dim": rotary_dim, "ndim": q.dim(),
            "cached": cached}
    reason = check(spec)
    if reason is None and k is not None and (k.shape[-1] != q.shape[-1] or k.dim() > MAX_NDIM):
        reason = f"k {tuple(k.shape)} does not fit q's head_dim {q.shape[-1]} / 4-D limit"
    if reason is not None:
        raise ValueError(reason)


def _launch(q, k, tq, tk, cached, rotary_dim, interleaved, half_table):
    """tq/tk: per-tensor (C, S) 4-D views (or (positions, table) when cached)."""
    d = q.shape[-1]
    qo = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    ko = None if k is None else torch.empty(k.shape, dtype=k.dtype, device=k.device)
    block_h, block_t, rows, num_warps = launch_config(rotary_dim, d)
    q4 = _as4d(q)
    k4 = q4 if k is None else _as4d(k)
    mq = q.numel() // d if d else 0
    mk = 0 if k is None else k.numel() // d
    nqp, nkp = triton.cdiv(mq, rows), triton.cdiv(mk, rows)
    if nqp + nkp == 0:
        return qo, ko

    def args(x4, t):
        a, b = t
        if cached:  # a = positions view (4-D, last dim 1), b = table
            cs = (*a.stride()[:3], b.stride(0))
            ss = (0, 0, 0, 0)
        else:
            cs, ss = a.stride(), b.stride()
        return (x4.shape[1], x4.shape[2], x4.numel() // d if d else 0, *x4.stride(), *cs, *ss)

    if cached:
        c_ptr, s_ptr, p_ptr = tq[1], tq[1], tq[0]
    else:
        c_ptr, s_ptr, p_ptr = tq[0], tq[1], tq[0]
    ct = tl.float64 if q.dtype == torch.float64 else tl.float32
    grid = (nqp + nkp,)
    kw = dict(INTERLEAVED=bool(interleaved), HALF_TABLE=bool(half_table), CACHED=bool(cached),
              HAS_TAIL=rotary_dim < d, BLOCK_H=block_h, BLOCK_T=block_t, ROWS=rows, CT=ct,
              num_warps=num_warps)
    call = (q4, qo, k4, qo if ko is None else ko, c_ptr, s_ptr, p_ptr, *args(q4, tq),
            *args(k4, tk), d, rotary_dim, nqp, tq[1].shape[0] if cached else 1)
    with on_device(q):
        _rope_kernel[grid](*call, **kw)
    return qo, ko


def rope(q: torch.Tensor, k: torch.Tensor | None, cos: torch.Tensor, sin: torch.Tensor, rotary_dim: int,
         interleaved: bool, half_table: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Rotary embedding of q and k (one launch); see :func:`rocm_inductor.providers.reference.rope_ref`.

    Args:
        q, k: (..., D) float16/bfloat16/float32/float64 of one dtype, <= 4 dims, any strides; k may be None.
        cos, sin: any float dtype, broadcastable to (..., rotary_dim) (``half_table``: (..., rotary_dim/2)).
        rotary_dim: even, <= D. interleaved: GPT-J pairs. half_table: one table value per pair.

    Returns:
        ``(q_out, k_out)`` contiguous (``k_out`` None when k is None).

    Raises:
        ValueError: a dtype/dim :func:`check` refuses, or tables that don't broadcast.
    """
    _validate(q, k, cos, rotary_dim, cached=False)
    width = rotary_dim // 2 if half_table else rotary_dim
    tq = (_table_view(cos, q, width), _table_view(sin, q, width))
    tk = tq if k is None else (_table_view(cos, k, width), _table_view(sin, k, width))
    return _launch(q, k, tq, tk, False, rotary_dim, interleaved, half_table)


def rope_cached(q: torch.Tensor, k: torch.Tensor | None, positions: torch.Tensor, cos_sin_cache: torch.Tensor,
                rotary_dim: int, interleaved: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Rotary embedding with a float32 [max_pos, rd] cos/sin table indexed by ``positions`` (one launch).

    Args:
        q, k: as in :func:`rope`. positions: integer, broadcastable to ``x.shape[:-1]``; a position outside
            [0, max_pos) is clamped to the nearest row in the kernel (``rocm_fused::rope_cached``'s contract,
            capture-safe: no host sync), so no row outside the table is ever read.
        cos_sin_cache: float32 (max_pos, rotary_dim), unit last-dim stride. rotary_dim, interleaved: as
            in :func:`rope`.

    Returns / Raises: as :func:`rope`.
    """
    _validate(q, k, cos_sin_cache, rotary_dim, cached=True)
    if cos_sin_cache.dim() != 2 or cos_sin_cache.shape[-1] != rotary_dim:
        raise ValueError(f"cos_sin_cache {tuple(cos_sin_cache.shape)} is not (max_pos, {rotary_dim})")
    if cos_sin_cache.shape[0] < 1:
        raise ValueError("cos_sin_cache has no rows (max_pos = 0)")
    table = cos_sin_cache if cos_sin_cache.stride(-1) == 1 else cos_sin_cache.contiguous()
    tq = (_pos_view(positions, q), table)
    tk = tq if k is None else (_pos_view(positions, k), table)
    return _launch(q, k, tq, tk, True, rotary_dim, interleaved, True)


def aot_cases() -> list[dict[str, Any]]:
    """Representative compile cases of :func:`_rope_kernel` (what :func:`_launch` picks at typical sizes).

    Llama-style head_dim 128 full rotary (q 32 heads, k 8) on bf16, on-the-fly NeoX and the cached table
    (int64 positions), and GPT-J partial rotary 64 of 256 (``launch_config``: BLOCK_H 64/32, ROWS 16/32,
    4 warps = 256 threads at wave64).
    """
    def sig(dt: str, cached: bool) -> dict[str, str]:
        s = {"Q": f"*{dt}", "QO": f"*{dt}", "K": f"*{dt}", "KO": f"*{dt}",
             "C": "*fp32" if cached else f"*{dt}", "S": "*fp32" if cached else f"*{dt}",
             "P": "*i64" if cached else f"*{dt}"}
        for t in ("q", "k"):
            s.update({f"{t}_n1": "i32", f"{t}_n2": "i32", f"{t}_M": "i32"})
            s.update({f"{t}{g}{i}": "i32" for g in ("s", "cs", "ss") for i in range(4)})
        s.update({"D": "i32", "RD": "i32", "NQP": "i32", "NPOS": "i32"})
        s.update({c: "constexpr" for c in ("INTERLEAVED", "HALF_TABLE", "CACHED", "HAS_TAIL", "BLOCK_H",
                                            "BLOCK_T", "ROWS", "CT")})
        return s

    cases = []
    for name, dt, cached, inter, rd, d in (("neox_bf16_d128", "bf16", False, False, 128, 128),
                                           ("cached_bf16_d128", "bf16", True, False, 128, 128),
                                           ("gptj_partial_fp16_d256", "fp16", False, True, 64, 256)):
        block_h, block_t, rows, warps = launch_config(rd, d)
        case = {"name": name, "fn": _rope_kernel, "signature": sig(dt, cached),
                "constexprs": {"INTERLEAVED": inter, "HALF_TABLE": cached, "CACHED": cached,
                               "HAS_TAIL": rd < d, "BLOCK_H": block_h, "BLOCK_T": block_t, "ROWS": rows,
                               "CT": tl.float32},
                "num_warps": warps}
        if d == 256:
            # triton 3.9, 2026-12-01: 333 SGPRs spill on gfx942/gfx950 and 1192 B of stack on sm_90 at
            # head_dim 256 (the ROWS x BLOCK_H tile of both halves); the pass is off by default (policy).
            case["known_spill"] = "head_dim 256 GPT-J partial rotary spills on every target (triton 3.9)"
        cases.append(case)
    return cases
