"""Triton RMSNorm and residual-add + RMSNorm kernels (NVIDIA, ROCm, and CPU under ``TRITON_INTERPRET=1``).

Math: exactly :func:`rocm_inductor.providers.reference.rms_norm_ref` /
:func:`~rocm_inductor.providers.reference.fused_add_rms_norm_ref` (RMSNorm, Zhang & Sennrich 2019,
arXiv:1910.07467): load, accumulate in float32, ``y = x * rsqrt(mean(x**2) + eps) * (w + offset)``, one
rounding at the store. Kernel layout after Liger-Kernel's ``ops/rms_norm.py`` (one row per program, the
whole row in registers, block size = next power of two of H), with a few rows per program for small H.

Rounding. Every store rounds to nearest, ties to even (RTNE), never toward zero (AITER's truncating bf16
store shrank a residual 9% over 64 layers, docs/ops.md). Triton's ``x.to(tl.bfloat16)`` is RTNE when
compiled (``semantic.cast`` defaults ``fp_downcast_rounding`` to RTNE, lowered to ``arith.truncf``), but
Triton's interpreter (checked in triton 3.9.0, ``runtime/interpreter.py::cast_impl``) *truncates*
float32 -> bfloat16, even with ``fp_downcast_rounding="rtne"``. So bfloat16 stores go through
:func:`_round_bf16`, an explicit integer RTNE (the same bit trick as c10's ``round_to_nearest_even``) that
gives the same bits on every backend and lets the CPU tests check the rounding the GPU does. float16 stores
use ``.to(tl.float16)``: RTNE both compiled and interpreted (numpy ``astype``).

Limits (what :func:`check` refuses): input dtype not fp16/bf16/fp32; weight dtype not fp16/bf16/fp32/fp64
(fp8 weights are not loaded portably); hidden size symbolic, < 1 or > :data:`MAX_HIDDEN` (the row must fit
one program's registers).
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from ...report import dtype_name
from ._launch import on_device

#: Input (and output) dtypes the kernels take.
INPUT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
#: Weight dtypes: loaded and upcast to float32 in the kernel.
WEIGHT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
#: Largest hidden size: one program holds a whole row (65536 fp32 = 64 values per lane at 16 warps x 64
#: lanes on ROCm). Liger-Kernel and Unsloth use the same bound (``MAX_FUSED_SIZE``). Not measured here.
MAX_HIDDEN = 65536
#: Upper bound on warps per program on ROCm: 16 x 64-wide wavefronts = 1024 threads, the launch limit
#: (docs/vendors.md "Triton on AMD"); NVIDIA goes to 32 x 32 = 1024 (:func:`launch_config`).
MAX_WARPS = 16
#: Elements per program for small H: rows are packed until a tile holds this many (or :data:`MAX_ROWS`).
_TILE_TARGET = 1024
MAX_ROWS = 16


def check(spec: dict[str, Any]) -> str | None:
    """Compile-time limits of these kernels.

    Args:
        spec: keys ``dtype`` (input torch dtype), ``weight_dtype`` (torch dtype or ``None`` if weightless),
            ``hidden`` (int, or ``None`` when symbolic), ``offset`` (float), ``fused_add`` (bool), ``ndim``.

    Returns:
        ``None`` if the kernels take it, else the reason in plain words.
    """
    dt, wdt, hidden = spec.get("dtype"), spec.get("weight_dtype"), spec.get("hidden")
    if dt not in INPUT_DTYPES:
        return f"triton rms_norm takes float16/bfloat16/float32 input, input is {dtype_name(dt)}"
    if wdt is not None and wdt not in WEIGHT_DTYPES:
        return f"triton rms_norm takes a float16/bfloat16/float32/float64 weight, weight is {dtype_name(wdt)}"
    if spec.get("ndim", 1) < 1:
        return "input is a scalar; RMSNorm needs at least one dim"
    if hidden is None or isinstance(hidden, bool) or not isinstance(hidden, int):
        return "hidden size is symbolic; triton rms_norm picks its block size from a static hidden size"
    if hidden < 1:
        return f"hidden size {hidden} is empty"
    if hidden > MAX_HIDDEN:
        return f"hidden size {hidden} > {MAX_HIDDEN}: one row no longer fits one program's registers"
    return None


def launch_config(hidden: int, warp_size: int = 64) -> tuple[int, int, int]:
    """Block size, rows per program and warps, a pure function of ``hidden`` and the warp size.

    Rule: ``BLOCK_N = next_pow2(hidden)``; ``ROWS = clamp(1024 // BLOCK_N, 1, 16)`` so a small-H tile holds
    about 1024 elements (per-head q/k norms, H = 64..256, would otherwise leave most lanes idle); warps by
    tile size ``T = ROWS * BLOCK_N`` as in Liger-Kernel / Unsloth ``calculate_settings`` (4 below 2048, 8
    below 8192, 16 below 32768, else 32), capped at ``1024 // warp_size`` threads' worth: 16 on ROCm's
    64-wide wavefronts (:data:`MAX_WARPS`), 32 on NVIDIA. The 32-warp step matters: at H = 32768 / 65536
    sm_90 spilled 128 / 888 bytes per thread with 16 warps (ptxas caps a 512-thread block at 128
    registers; AOT compile, tests/test_triton_aot.py, 2026-12-01). The row packing is not yet measured.

    Args:
        hidden: H, 1 <= H <= :data:`MAX_HIDDEN`.
        warp_size: 64 (ROCm CDNA wavefront, the default: always launchable) or 32 (NVIDIA).

    Returns:
        ``(BLOCK_N, ROWS, num_warps)``, all powers of two, ``num_warps * warp_size <= 1024``.

    Raises:
        ValueError: H out of range.
    """
    if not 1 <= hidden <= MAX_HIDDEN:
        raise ValueError(f"hidden size {hidden} outside [1, {MAX_HIDDEN}]")
    block_n = triton.next_power_of_2(hidden)
    rows = max(1, min(MAX_ROWS, _TILE_TARGET // block_n))
    tile = rows * block_n
    num_warps = 4 if tile < 2048 else 8 if tile < 8192 else 16 if tile < 32768 else 32
    return block_n, rows, min(num_warps, 1024 // warp_size)


def early_weight(block_n: int, rows: int, num_warps: int, warp_size: int) -> bool:
    """Whether the kernel loads the weight before the reduction (``EARLY_W``).

    Early, its latency overlaps the reduction (decode rows are latency-bound), but the weight then stays
    live across it: with more than :data:`_EARLY_W_MAX` row elements per thread that doubles the registers
    the row needs and spilled (sm_90, H = 32768 at 16 warps: 128 B of stack; AOT compile 2026-12-01).
    """
    return block_n * rows <= _EARLY_W_MAX * num_warps * warp_size


#: Row elements per thread up to which the weight is loaded before the reduction (:func:`early_weight`):
#: 16 covers H <= 8192 on 16 x 32 threads and every H <= 16384 on ROCm (16 x 64 lanes).
_EARLY_W_MAX = 16


@triton.jit
def _round_bf16(v):
    """float32 -> bfloat16, round to nearest, ties to even, by integer arithmetic (NaN stays NaN).

    Adding 0x7FFF plus the lowest kept bit, then dropping the low 16 bits, is RTNE (c10's
    ``round_to_nearest_even``); a NaN, whose payload could carry into the sign, becomes the quiet NaN.
    """
    bits = v.to(tl.uint32, bitcast=True)
    bits = bits + (((bits >> 16) & 1) + 0x7FFF)
    bits = tl.where(v != v, 0x7FC00000, bits)
    return (bits >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)


@triton.jit
def _round_to(v, DTYPE: tl.constexpr, MANUAL_BF16: tl.constexpr = True):
    """float32 ``v`` rounded once (RTNE) to ``DTYPE`` (bfloat16, float16 or float32).

    Compiled Triton converts to bf16 with round-to-nearest-even (``cvt.rn``); its interpreter truncates,
    so under ``TRITON_INTERPRET=1`` (``MANUAL_BF16``) the rounding is done by integer arithmetic instead,
    bit-identical to the compiled conversion. The default (manual) is right everywhere, just a few integer
    ops slower; kernels that know they are compiled pass ``MANUAL_BF16=False``.
    """
    if DTYPE == tl.bfloat16 and MANUAL_BF16:
        return _round_bf16(v)
    else:
        return v.to(DTYPE)


@triton.jit
def _inv_rms(sum_sq, H, eps):
    """``1 / sqrt(sum_sq / H + eps)`` per row, correctly rounded (``div_rn`` / ``sqrt_rn``).

    Per-row scalars, so correctly rounded sqrt and divisions cost nothing (``tl.math.rsqrt`` and ``/`` may be
    approximate on GPUs, e.g. 2 ulp). ``H * 1.0``, not ``H.to(...)``: Triton specializes an int argument equal
    to 1 into a constexpr. Shared with the RMSNorm prologue of ``gemm_merge``'s kernel.
    """
    mean_sq = tl.math.div_rn(sum_sq, H * 1.0)
    return tl.math.div_rn(1.0, tl.math.sqrt_rn(mean_sq + eps))


@triton.jit
def _rms_norm_kernel(
    X, R, W, Y, S,  # input, residual, weight, out (contiguous), sum out (contiguous)
    stride_x, stride_r,  # row strides of X and R, in elements (columns are unit stride)
    M, H, eps, offset,
    HAS_WEIGHT: tl.constexpr, FUSED_ADD: tl.constexpr, BLOCK_N: tl.constexpr, ROWS: tl.constexpr,
    MANUAL_BF16: tl.constexpr, EARLY_W: tl.constexpr = True,
):
    """ROWS rows of H per program: [s = x + r, stored rounded;] y = x * rsqrt(mean(x^2) + eps) * (w + off)."""
    # int64 row index: M * H may exceed 2**31 elements.
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows < M)[:, None] & (cols < H)[None, :]
    x = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    if HAS_WEIGHT and EARLY_W:
        # Issued before the reduction so its latency overlaps it (decode rows are latency-bound); for long
        # rows after it instead (``early_weight``: keeping it live across the reduction spilled).
        w = tl.load(W + cols, mask=cols < H, other=0.0).to(tl.float32) + offset
    out_ptrs = rows[:, None] * H + cols[None, :]
    if FUSED_ADD:
        r = tl.load(R + rows[:, None] * stride_r + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        # The sum is rounded to the model dtype (as eager adds in that dtype) and the norm reads it back.
        s = _round_to(x + r, S.dtype.element_ty, MANUAL_BF16)
        tl.store(S + out_ptrs, s, mask=mask)
        x = s.to(tl.float32)
    y = x * _inv_rms(tl.sum(x * x, axis=1), H, eps)[:, None]
    if HAS_WEIGHT:
        if not EARLY_W:
            w = tl.load(W + cols, mask=cols < H, other=0.0).to(tl.float32) + offset
        y = y * w[None, :]
    tl.store(Y + out_ptrs, _round_to(y, Y.dtype.element_ty, MANUAL_BF16), mask=mask)


def _rows(t: torch.Tensor, hidden: int) -> torch.Tensor:
    """(..., H) -> (M, H) with unit column stride; a view (any row stride) when possible, else a copy."""
    t2 = t.reshape(-1, hidden)
    if hidden > 1 and t2.stride(1) != 1:
        t2 = t2.contiguous()
    return t2


def _validate(x: torch.Tensor, weight: torch.Tensor | None, residual: torch.Tensor | None = None) -> None:
    """ValueError for what the kernels refuse (:func:`check`), a weight of the wrong shape or device, or a residual
    of another shape, dtype or device than ``x``."""
    if residual is not None and (residual.shape != x.shape or residual.dtype != x.dtype
                                 or residual.device != x.device):
        raise ValueError(f"residual {tuple(residual.shape)} {dtype_name(residual.dtype)} on {residual.device} "
                         f"!= input {tuple(x.shape)} {dtype_name(x.dtype)} on {x.device}")
    spec = {"dtype": x.dtype, "weight_dtype": None if weight is None else weight.dtype,
            "hidden": x.shape[-1] if x.dim() else None, "ndim": x.dim()}
    reason = check(spec)
    if reason is not None:
        raise ValueError(reason)
    if weight is not None:
        if tuple(weight.shape) != (x.shape[-1],):
            raise ValueError(f"weight shape {tuple(weight.shape)} != ({x.shape[-1]},)")
        if weight.device != x.device:
            raise ValueError(f"weight on {weight.device}, input on {x.device}")


def _warp_size(t: torch.Tensor) -> int:
    """64 on ROCm (CDNA wavefronts), 32 on NVIDIA; 64 for CPU tensors (the interpreter: any config runs)."""
    return 32 if t.is_cuda and not getattr(torch.version, "hip", None) else 64


def _launch(x2, r2, weight, y, s, eps, offset, fused_add):
    m, hidden = x2.shape
    ws = _warp_size(x2)
    block_n, rows, num_warps = launch_config(hidden, ws)
    w = x2 if weight is None else weight.contiguous()  # dummy pointer when weightless (never read)
    grid = (triton.cdiv(m, rows),)
    args = (x2, r2, w, y, s, x2.stride(0), r2.stride(0), m, hidden, float(eps), float(offset))
    kw = dict(HAS_WEIGHT=weight is not None, FUSED_ADD=fused_add, BLOCK_N=block_n, ROWS=rows,
              MANUAL_BF16=not x2.is_cuda, EARLY_W=early_weight(block_n, rows, num_warps, ws),
              num_warps=num_warps)
    with on_device(x2):
        _rms_norm_kernel[grid](*args, **kw)


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float, offset: float) -> torch.Tensor:
    """RMSNorm over the last dim; see :func:`rocm_inductor.providers.reference.rms_norm_ref`.

    Args:
        x: (..., H) float16/bfloat16/float32, any strides (a non-unit row stride is read in place; a
            non-unit last-dim stride, or batch dims that don't flatten, cost one copy).
        weight: (H,) float16/bfloat16/float32/float64, or ``None`` (weightless).
        eps: added to the mean square (float).
        offset: added to the weight in float32 (1.0 for Gemma's ``1 + w``).

    Returns:
        (..., H) contiguous tensor of ``x.dtype``, rounded once, to nearest even.

    Raises:
        ValueError: a dtype or hidden size :func:`check` refuses, or a weight of the wrong shape/device.
    """
    _validate(x, weight)
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if x.numel() == 0:
        return y
    x2 = _rows(x, x.shape[-1])
    _launch(x2, x2, weight, y, y, eps, offset, fused_add=False)
    return y


def fused_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None, eps: float, offset: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Residual add then RMSNorm; see :func:`rocm_inductor.providers.reference.fused_add_rms_norm_ref`.

    ``s = x + residual`` (float32 add, rounded to nearest even to ``x.dtype``, stored),
    ``y = rms_norm(s, weight, eps, offset)`` computed from the *rounded* ``s``. Functional: ``x`` and
    ``residual`` are not written.

    Args:
        x, residual: (..., H) of one dtype (float16/bfloat16/float32) and shape, any strides.
        weight, eps, offset: as in :func:`rms_norm`.

    Returns:
        ``(y, s)``: fresh contiguous (..., H) tensors of ``x.dtype``.

    Raises:
        ValueError: as :func:`rms_norm`, or ``residual`` of another shape, dtype or device.
    """
    _validate(x, weight, residual)
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    s = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if x.numel() == 0:
        return y, s
    x2, r2 = _rows(x, x.shape[-1]), _rows(residual, x.shape[-1])
    _launch(x2, r2, weight, y, s, eps, offset, fused_add=True)
    return y, s


#: Hidden sizes :func:`aot_cases` compiles: per-head q/k norm (128), Llama-8B/70B/405B hidden sizes
#: (4096, 8192, 16384) and the largest this kernel takes (:data:`MAX_HIDDEN`).
AOT_HIDDEN = (128, 4096, 8192, 16384, MAX_HIDDEN)


def aot_cases() -> list[dict[str, Any]]:
    """Compile cases for ``rocm_inductor.providers.triton._aot``: the configs :func:`launch_config` picks.

    bf16 input with a bf16 weight (the common case) for each size in :data:`AOT_HIDDEN`, plain and fused
    add, with ROCm's config (64-wide waves) for gfx942/gfx950 and NVIDIA's for sm_90; compiled, so
    ``MANUAL_BF16=False`` as ``_launch`` passes on a GPU. Pointers are 16-aligned and ``H`` / row strides
    multiples of 16, as Triton's launcher specialises them at these sizes.
    """
    cases = []
    sig = {"X": "*bf16", "R": "*bf16", "W": "*bf16", "Y": "*bf16", "S": "*bf16", "stride_x": "i32",
           "stride_r": "i32", "M": "i32", "H": "i32", "eps": "fp32", "offset": "fp32",
           "HAS_WEIGHT": "constexpr", "FUSED_ADD": "constexpr", "BLOCK_N": "constexpr",
           "ROWS": "constexpr", "MANUAL_BF16": "constexpr", "EARLY_W": "constexpr"}
    div = [["tt.divisibility", 16]]
    attrs = {k: div for k in ("X", "R", "W", "Y", "S", "stride_x", "stride_r", "H")}
    for ws, targets in ((64, ("gfx942", "gfx950")), (32, ("sm_90",))):
        for hidden in AOT_HIDDEN:
            block_n, rows, warps = launch_config(hidden, ws)
            for fused in (False, True):
                case = {"name": f"{'fused_add_' if fused else ''}rms_norm H={hidden} wave{ws}",
                        "fn": _rms_norm_kernel, "signature": sig, "attrs": attrs, "num_warps": warps,
                        "targets": targets,
                        "constexprs": {"HAS_WEIGHT": True, "FUSED_ADD": fused, "BLOCK_N": block_n, "ROWS": rows,
                                       "MANUAL_BF16": False,
                                       "EARLY_W": early_weight(block_n, rows, warps, ws)}}
                if hidden > 32768 and ws == 32:
                    case["known_spill"] = (f"sm_90, H = {hidden}: 64 fp32 row values per thread at 1024 threads "
                                           "and ptxas' 64-register cap (128-312 B of stack, triton 3.6-3.9); "
                                           "not a typical size (the largest served hidden size is 16384)")
                cases.append(case)
    return cases
