"""``rocm_fused::sigmoid_gate``: the output gate of gated attention, ``x * sigmoid(gate)``.

Meaning (pure-torch reference: ``rocm_inductor.providers.reference.sigmoid_gate_ref``):
    sigmoid_gate(x, gate) = (float32(x) * sigmoid(float32(gate))).to(x.dtype)
computed in float32 and rounded once (round-to-nearest-even). Eager bf16/fp16 code rounds twice (the
sigmoid, then the product); the single rounding is within the numerics contract (docs/ops.md). ``x`` and
``gate`` have one shape and one dtype (float16/bfloat16/float32): no broadcasting, that is what separates
this op from a router's scalar sigmoid. Functional (``mutates_args=()``); the output is contiguous.
Gated-attention models that use it: Qwen3-Next / Qwen3.5 (``attn * sigmoid(gate)`` before o_proj), HY-V4.

Compile-time spec keys read by providers' ``check`` (built by :func:`gate_spec`):
    dtype, gate_dtype, ndim, width (last dim: int, or None if symbolic), numel (int or None),
    x_contiguous, gate_contiguous (bool: statically known to be contiguous).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.fx.experimental.symbolic_shapes import statically_known_true

from ..providers import get_provider

#: dtypes the op is defined for (float64 would lose precision in the float32 computation).
DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _validate(x: torch.Tensor, gate: torch.Tensor) -> None:
    if x.dtype not in DTYPES:
        raise ValueError(f"sigmoid_gate takes float16/bfloat16/float32, x is {x.dtype}")
    if gate.dtype != x.dtype:
        raise ValueError(f"sigmoid_gate: gate dtype {gate.dtype} != x dtype {x.dtype}")
    if gate.shape != x.shape:
        raise ValueError(f"sigmoid_gate: gate shape {tuple(gate.shape)} != x shape {tuple(x.shape)} "
                         "(the op does not broadcast)")
    if gate.device != x.device:
        raise ValueError(f"sigmoid_gate: gate on {gate.device}, x on {x.device}")


@torch.library.custom_op("rocm_fused::sigmoid_gate", mutates_args=())
def sigmoid_gate(x: torch.Tensor, gate: torch.Tensor, provider: str) -> torch.Tensor:
    """``x * sigmoid(gate)`` in float32, rounded once to ``x.dtype``, by ``provider``.

    Args:
        x: (...) float16/bfloat16/float32 (the attention output).
        gate: same shape, dtype and device as ``x`` (the gate logits).
        provider: provider name chosen at compile time (``"reference"``, ``"triton"``).

    Returns:
        (...) contiguous tensor of ``x.dtype``.

    Raises:
        ValueError: dtype outside float16/bfloat16/float32, or ``gate`` of another shape/dtype/device.
        KeyError: unknown provider. ProviderUnavailable: its library cannot be imported here.
    """
    _validate(x, gate)
    return get_provider(provider).sigmoid_gate(x, gate).contiguous()


@sigmoid_gate.register_fake
def _sigmoid_gate_fake(x, gate, provider):
    _validate(x, gate)
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


def statically_contiguous(t: Any) -> bool:
    """True when the (fake) tensor ``t`` is contiguous for every value of its symbolic sizes.

    Compares each stride with the row-major product of the sizes after it (size-1 dims skipped), using
    ``statically_known_true`` so that no guard is added to the graph.
    """
    expected: Any = 1
    for size, stride in zip(reversed(t.shape), reversed(t.stride()), strict=True):
        if not statically_known_true(size == 1) and not statically_known_true(stride == expected):
            return False
        expected = expected * size
    return True


def gate_spec(x: Any, gate: Any) -> dict[str, Any]:
    """Build the compile-time spec of a gate match from fake tensors (``node.meta["val"]``).

    Args:
        x: the gated tensor's fake tensor; gate: the gate logits' fake tensor.

    Returns:
        dict with the keys listed in the module docstring.
    """
    width = x.shape[-1] if x.ndim else 1
    numel = x.numel()
    return {
        "dtype": x.dtype,
        "gate_dtype": gate.dtype,
        "ndim": x.ndim,
        "width": width if isinstance(width, int) else None,
        "numel": numel if isinstance(numel, int) else None,
        "x_contiguous": statically_contiguous(x),
        "gate_contiguous": statically_contiguous(gate),
    }
