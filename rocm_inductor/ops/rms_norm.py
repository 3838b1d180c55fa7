"""``rocm_fused::rms_norm`` and ``rocm_fused::fused_add_rms_norm``.

Meaning (pure-torch reference: ``rocm_inductor.providers.reference``):
    rms_norm(x, weight, eps, offset)            = (x * rsqrt(mean(x^2, -1) + eps) * (weight + offset)).to(x.dtype)
    fused_add_rms_norm(x, residual, weight, ...) = (rms_norm(s), s) with s = (x + residual).to(x.dtype)
computed in float32, rounded once (round-to-nearest-even). ``offset`` is 1.0 for Gemma's ``1 + weight``.
``weight=None`` is the weightless norm. Both ops are functional (``mutates_args=()``); outputs are
contiguous.

The fused op normalises the *rounded* sum ``s``, as the eager HF code does (it adds in the model dtype, then
normalises that tensor): the reference and Triton give eager's bits. FlashInfer's and the fork's
``fused_add_rmsnorm`` normalise the unrounded float32 sum instead (``s`` itself is stored rounded, the same
bits): their ``y`` is within one ulp of the output dtype of this definition, and never farther from the
float64 ground truth than eager plus one ulp, which is the numerics contract (docs/ops.md); so every
provider meets it with this definition, while defining ``y`` from the unrounded sum would put the eager-exact
providers one ulp off a definition they were never meant to reproduce (tests/test_norm_providers.py checks
both bounds on a stand-in that computes as FlashInfer does).

Compile-time spec keys read by providers' ``check`` (built by :func:`norm_spec`):
    dtype, weight_dtype (None if weightless), hidden (int or None if symbolic), ndim, offset, fused_add,
    rows (the rows normalised, x.numel() / hidden; None if symbolic: the tuning store's key, a norm of one token
    and of 4096 tokens win or lose apart).
"""

from __future__ import annotations

from typing import Any

import torch

from ..providers import get_provider


@torch.library.custom_op("rocm_fused::rms_norm", mutates_args=())
def rms_norm(
    x: torch.Tensor, weight: torch.Tensor | None, eps: float, offset: float, provider: str
) -> torch.Tensor:
    """RMSNorm over the last dim (arXiv:1910.07467) by ``provider``.

    Args:
        x: (..., H) float16/bfloat16/float32.
        weight: (H,) or None.
        eps: variance epsilon.
        offset: 0.0, or 1.0 for Gemma's ``(1 + weight)``.
        provider: provider name chosen at compile time (``"reference"``, ``"triton"``, ``"flashinfer"``...).

    Returns:
        (..., H) contiguous tensor of ``x.dtype``.

    Raises:
        KeyError: unknown provider. ProviderUnavailable: its library cannot be imported here.
    """
    return get_provider(provider).rms_norm(x, weight, eps, offset).contiguous()


@rms_norm.register_fake
def _rms_norm_fake(x, weight, eps, offset, provider):
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


@torch.library.custom_op("rocm_fused::fused_add_rms_norm", mutates_args=())
def fused_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None, eps: float, offset: float,
    provider: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Residual add + RMSNorm in one kernel (functional form of FlashInfer's ``fused_add_rmsnorm``).

    ``y`` is the norm of the rounded ``s`` (eager's order); providers that normalise the unrounded float32
    sum (FlashInfer, the fork) are within one ulp of it (module docstring).

    Args:
        x, residual: (..., H) of one float dtype.
        weight, eps, offset, provider: as in :func:`rms_norm`.

    Returns:
        ``(y, s)``: the normalised ``s`` and the new residual ``s = x + residual`` (model dtype), both
        contiguous.

    Raises:
        KeyError / ProviderUnavailable: as in :func:`rms_norm`.
    """
    y, s = get_provider(provider).fused_add_rms_norm(x, residual, weight, eps, offset)
    return y.contiguous(), s.contiguous()


@fused_add_rms_norm.register_fake
def _fused_add_rms_norm_fake(x, residual, weight, eps, offset, provider):
    def out():
        return torch.empty(x.shape, dtype=x.dtype, device=x.device)

    return out(), out()


def norm_spec(x: Any, weight: Any, offset: float, fused_add: bool) -> dict[str, Any]:
    """Build the compile-time spec of a norm match from fake tensors (``node.meta["val"]``).

    Args:
        x: the input's fake tensor; weight: the weight's fake tensor or None.

    Returns:
        dict with the keys listed in the module docstring.
    """
    h = x.shape[-1] if x.ndim else None
    n = x.numel()
    rows = n // h if isinstance(h, int) and h and isinstance(n, int) else None
    return {
        "dtype": x.dtype,
        "weight_dtype": None if weight is None else weight.dtype,
        "hidden": h if isinstance(h, int) else None,
        "ndim": x.ndim,
        "offset": offset,
        "fused_add": fused_add,
        "rows": rows,
    }
