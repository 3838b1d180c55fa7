"""Pure-torch reference provider: defines what each ``rocm_fused`` op means, runs anywhere.

It is the provider the pass tests and the CPU example force (``options={"provider": "reference"}``) and the
ground truth the other providers are compared with.
"""

from __future__ import annotations

import torch

from . import Provider


def rms_norm_ref(x: torch.Tensor, weight: torch.Tensor | None, eps: float, offset: float) -> torch.Tensor:
    """RMSNorm (Zhang & Sennrich 2019, arXiv:1910.07467) over the last dim, computed in float32.

    ``y = x / sqrt(mean(x**2, -1) + eps) * (weight + offset)``, rounded once to ``x.dtype``
    (round-to-nearest-even, torch's cast).

    Args:
        x: (..., H) float16/bfloat16/float32, any strides.
        weight: (H,) any float dtype, or ``None`` for a weightless norm.
        eps: added to the mean square (float).
        offset: added to the weight in float32 (1.0 for Gemma's ``1 + w``, else 0.0).

    Returns:
        (..., H) tensor of ``x.dtype``, contiguous.
    """
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    if weight is not None:
        y = y * (weight.float() + offset)
    return y.to(x.dtype).contiguous()


def fused_add_rms_norm_ref(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None, eps: float, offset: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Residual add then RMSNorm, as HF pre-norm decoders do it.

    ``s = x + residual`` rounded to the model dtype (the add happens in the model dtype in eager code),
    ``y = rms_norm_ref(s, weight, eps, offset)``.

    Args:
        x, residual: (..., H) of one float dtype.
        weight, eps, offset: as in :func:`rms_norm_ref`.

    Returns:
        ``(y, s)``, both (..., H) of ``x.dtype``, contiguous.
    """
    s = (x + residual).contiguous()
    return rms_norm_ref(s, weight, eps, offset), s


def sigmoid_gate_ref(x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """Sigmoid output gate of gated attention (Qwen3-Next, HY-V4): ``x * sigmoid(gate)``.

    Computed in float32 and rounded once to ``x.dtype`` (round-to-nearest-even, torch's cast); eager
    bf16/fp16 code rounds the sigmoid and the product separately.

    Args:
        x, gate: (...) of one shape and one float dtype (float16/bfloat16/float32), any strides.

    Returns:
        (...) tensor of ``x.dtype``, contiguous.
    """
    return (x.float() * torch.sigmoid(gate.float())).to(x.dtype).contiguous()


class ReferenceProvider(Provider):
    """Pure-torch implementations of every op (no library, any device, any dtype)."""

    name = "reference"
    library = None
    ops = frozenset({"rms_norm", "fused_add_rms_norm", "sigmoid_gate"})

    def rms_norm(self, x, weight, eps, offset):
        """See :func:`rms_norm_ref`."""
        return rms_norm_ref(x, weight, eps, offset)

    def fused_add_rms_norm(self, x, residual, weight, eps, offset):
        """See :func:`fused_add_rms_norm_ref`."""
        return fused_add_rms_norm_ref(x, residual, weight, eps, offset)

    def sigmoid_gate(self, x, gate):
        """See :func:`sigmoid_gate_ref`."""
        return sigmoid_gate_ref(x, gate)
