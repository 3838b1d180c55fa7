"""Triton sigmoid output gate ``x * sigmoid(gate)`` (NVIDIA, ROCm, and CPU under ``TRITON_INTERPRET=1``).

Math: exactly :func:`rocm_inductor.providers.reference.sigmoid_gate_ref`: load both operands, compute
``x * sigmoid(g)`` in float32 (``tl.sigmoid`` = ``1 / (1 + exp(-g))``: 0 for g -> -inf, 1 for g -> +inf,
NaN stays NaN), one rounding at the store: round-to-nearest-even, through the same bf16 helper as the
RMSNorm kernels (Triton's interpreter truncates float32 -> bfloat16; see ``rms_norm.py``). Neither
FlashInfer nor AITER has this op, so this kernel is the only GPU provider.

Layout: the tensors are contiguous and read as flat arrays of ``n`` elements, ``BLOCK`` per program (an
elementwise kernel: no reduction, so the row structure does not matter beyond alignment). The launch is
capture-safe: no host sync, no allocation besides the output, grid a pure function of ``n``.

Autotuning: :data:`CONFIGS` (block size x warps) is pruned per platform by :func:`prune_configs`, a pure
function of the warp size: on ROCm (64-wide wavefronts) a config with ``num_warps * 64 > 1024`` threads
cannot launch and is dropped; on NVIDIA (32-wide warps) every config is kept. The tuning key is the
power-of-two bucket of ``n`` (and the dtype), so a decode loop with a growing token count does not
re-tune at every size. Autotuning cannot run inside a CUDA/HIP graph capture: Inductor's CUDA-graph trees
warm up (and so tune) before they record, and a bucket first seen during a capture launches
:func:`default_config` instead of tuning.
Under the interpreter only the first surviving config runs (benchmarking interpreted kernels is
meaningless and slow).

Limits (what :func:`check` refuses, so the pass leaves the eager expression to Inductor and reports why):
dtype not float16/bfloat16 (float32 gates gain nothing from a separate kernel); ``x`` or ``gate`` not
contiguous (Inductor reads strided inputs for free inside its fused kernel; we would need a copy); last
dim symbolic or not a multiple of :data:`WIDTH_MULTIPLE`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import triton
import triton.language as tl

from ._launch import on_device
from .rms_norm import _round_to

#: dtypes of the fast path (the pass rewrites only these to this kernel).
DTYPES = (torch.float16, torch.bfloat16)
#: The last dim must be a multiple of this many elements: then ``n`` is a multiple of 16 for every token
#: count, Triton's divisibility specialisation of ``n`` applies and the masked loads stay 128-bit vectors
#: (16 x 2 bytes = two vectors). Gated-attention widths (H * D = 4096, 8192, 2048...) all are.
WIDTH_MULTIPLE = 16
#: Threads per program a GPU can launch (CUDA and HIP both): ``num_warps * warp_size`` must not exceed it.
MAX_THREADS = 1024


def _cfg(block: int, warps: int) -> triton.Config:
    return triton.Config({"BLOCK": block}, num_warps=warps, num_stages=1)


#: Every candidate (BLOCK elements per program, num_warps). Small blocks for decode (1 x 4096 = 4096
#: elements: 2-8 programs), large blocks with many warps for prefill (2048 x 8192 = 16.8M elements).
#: The 32-warp config is the one ROCm cannot launch (32 x 64 = 2048 threads). Not yet measured: the
#: benchmark (benchmarks/ops/bench_sigmoid_gate.py) reports the chosen config per shape.
CONFIGS: tuple[triton.Config, ...] = (
    _cfg(512, 2), _cfg(1024, 4), _cfg(2048, 4), _cfg(2048, 8), _cfg(4096, 8), _cfg(4096, 16),
    _cfg(8192, 16), _cfg(16384, 32),
)


def prune_configs(configs: Sequence[Any], warp_size: int, max_threads: int = MAX_THREADS) -> list[Any]:
    """Drop the configs that cannot launch with ``warp_size``-wide warps (a pure function).

    Args:
        configs: objects with an int ``num_warps`` (``triton.Config``).
        warp_size: 32 on NVIDIA, 64 on ROCm CDNA (wavefront size).
        max_threads: threads per program the hardware launches (1024 on both).

    Returns:
        The configs with ``num_warps * warp_size <= max_threads``, in the given order.

    Raises:
        ValueError: ``warp_size`` not positive, or no config survives.
    """
    if warp_size <= 0:
        raise ValueError(f"warp size must be positive, got {warp_size}")
    kept = [c for c in configs if c.num_warps * warp_size <= max_threads]
    if not kept:
        raise ValueError(f"no config launches with warp size {warp_size} (max {max_threads} threads)")
    return kept


def warp_size() -> int:
    """Warp (wavefront) size of the current device: from its properties, else 64 on HIP, 32 otherwise."""
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        ws = getattr(props, "warp_size", None)
        if isinstance(ws, int) and ws > 0:
            return ws
        return 64 if getattr(torch.version, "hip", None) else 32
    return 32  # interpreter: one config runs anyway


def _interpreting() -> bool:
    from . import interpreting

    return interpreting()


def _early_prune(configs, named_args, **kwargs):
    """Triton ``early_config_prune`` hook: :func:`prune_configs` for this device's warp size."""
    kept = prune_configs(configs, warp_size())
    return kept[:1] if _interpreting() else kept


def check(spec: dict[str, Any]) -> str | None:
    """Compile-time limits of this kernel.

    Args:
        spec: keys of ``rocm_inductor.ops.sigmoid_gate.gate_spec``: ``dtype``, ``gate_dtype``, ``width``,
            ``x_contiguous``, ``gate_contiguous``.

    Returns:
        ``None`` if the kernel takes it, else the reason in plain words.
    """
    dt = spec.get("dtype")
    if dt not in DTYPES:
        return (f"triton sigmoid_gate takes float16/bfloat16, input is {str(dt).replace('torch.', '')} "
                "(Inductor's fused elementwise kernel is as good there)")
    if spec.get("gate_dtype") != dt:
        return "gate dtype differs from the input's"
    if not spec.get("x_contiguous", False):
        return "gated input is not contiguous (Inductor fuses the strided read; we would need a copy)"
    if not spec.get("gate_contiguous", False):
        return "gate is not contiguous (Inductor fuses the strided read; we would need a copy)"
    width = spec.get("width")
    if width is None:
        return "last dim is symbolic; triton sigmoid_gate is tuned for a static width"
    if width % WIDTH_MULTIPLE:
        return f"last dim {width} is not a multiple of {WIDTH_MULTIPLE} (vectorised loads)"
    return None


@triton.jit
def _sigmoid_gate_kernel(X, G, Y, n, size_bucket, BLOCK: tl.constexpr):
    """``Y[i] = round(float32(X[i]) * sigmoid(float32(G[i])))`` for ``i < n``; BLOCK elements per program.

    ``size_bucket`` is not read: it is the autotuning key (power-of-two bucket of ``n``).
    """
    # int64 offsets: n may exceed 2**31 elements (2048 tokens x 8192 is 2**24; long prefills go further).
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(X + offs, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(G + offs, mask=mask, other=0.0).to(tl.float32)
    y = x * tl.sigmoid(g)
    tl.store(Y + offs, _round_to(y, Y.dtype.element_ty), mask=mask)


_tuned_kernel = triton.autotune(
    configs=list(CONFIGS), key=["size_bucket"], prune_configs_by={"early_config_prune": _early_prune},
)(_sigmoid_gate_kernel)


def size_bucket(n: int) -> int:
    """Autotuning bucket of ``n`` elements: the next power of two (at least 1)."""
    return triton.next_power_of_2(max(int(n), 1))


def default_config(n: int) -> triton.Config:
    """The untuned config used while a graph is being captured for a bucket not yet tuned.

    1024 elements x 4 warps up to 1M elements, else 4096 x 8: both launch on 32- and 64-wide warps
    (8 x 64 = 512 threads). A guess, not measured: it only has to be correct and capture-safe.
    """
    return _cfg(1024, 4) if n <= (1 << 20) else _cfg(4096, 8)


#: (bucket, dtype, device) keys autotuned in this process (outside graph capture).
_TUNED: set[tuple[int, torch.dtype, str]] = set()


def _capturing(x: torch.Tensor) -> bool:
    """True while a CUDA/HIP graph is being captured on the current stream (tests patch this)."""
    return x.is_cuda and torch.cuda.is_current_stream_capturing()


def sigmoid_gate(x: torch.Tensor, gate: torch.Tensor, config: triton.Config | None = None) -> torch.Tensor:
    """``x * sigmoid(gate)``; see :func:`rocm_inductor.providers.reference.sigmoid_gate_ref`.

    Args:
        x, gate: (...) of one shape, dtype (float16/bfloat16/float32) and device. Non-contiguous inputs
            are copied first (the pass never sends them; direct callers may).
        config: run this ``triton.Config`` instead of autotuning (tests, benchmarks).

    Returns:
        (...) contiguous tensor of ``x.dtype``, rounded once, to nearest even.

    Raises:
        ValueError: another dtype, or ``gate`` of another shape, dtype or device.
    """
    if x.dtype not in (*DTYPES, torch.float32) or gate.dtype != x.dtype:
        raise ValueError(f"triton sigmoid_gate takes one float16/bfloat16/float32 dtype, got {x.dtype} and "
                         f"{gate.dtype}")
    if gate.shape != x.shape or gate.device != x.device:
        raise ValueError(f"gate {tuple(gate.shape)} on {gate.device} != x {tuple(x.shape)} on {x.device}")
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    n = x.numel()
    if n == 0:
        return y
    xc, gc = x.contiguous(), gate.contiguous()
    bucket = size_bucket(n)
    key = (bucket, x.dtype, str(x.device))
    if config is None and key not in _TUNED and _capturing(x):
        # Autotuning benchmarks (and synchronises), which a graph capture forbids: launch a fixed config.
        config = default_config(n)
    if config is not None:
        block = config.kwargs["BLOCK"]
        launch = lambda: _sigmoid_gate_kernel[(triton.cdiv(n, block),)](  # noqa: E731
            xc, gc, y, n, bucket, BLOCK=block, num_warps=config.num_warps, num_stages=config.num_stages)
    else:
        launch = lambda: _tuned_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](  # noqa: E731
            xc, gc, y, n, bucket)
    with on_device(x):
        launch()
    if config is None:
        _TUNED.add(key)
    return y


def aot_cases() -> list[dict[str, Any]]:
    """Every entry of :data:`CONFIGS` for bf16 (``rocm_inductor.providers.triton._aot``).

    A config :func:`prune_configs` drops at ROCm's 64-wide wavefronts (the 32-warp one: 2048 threads) is
    compiled for sm_90 only, which is what the autotuner can launch; the AOT test checks that every case
    compiled for gfx942/gfx950 fits 1024 threads. ``n`` is a multiple of 16 (:data:`WIDTH_MULTIPLE`).
    """
    rocm = {id(c) for c in prune_configs(CONFIGS, 64)}
    div = [["tt.divisibility", 16]]
    return [{"name": f"sigmoid_gate BLOCK={c.kwargs['BLOCK']} warps={c.num_warps}", "fn": _sigmoid_gate_kernel,
             "signature": {"X": "*bf16", "G": "*bf16", "Y": "*bf16", "n": "i32", "size_bucket": "i32",
                           "BLOCK": "constexpr"},
             "constexprs": {"BLOCK": c.kwargs["BLOCK"]}, "num_warps": c.num_warps,
             "attrs": {"X": div, "G": div, "Y": div, "n": div},
             **({} if id(c) in rocm else {"targets": ("sm_90",)})} for c in CONFIGS]
