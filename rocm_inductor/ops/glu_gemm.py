"""``rocm_fused::glu_gemm`` / ``rocm_fused::rms_norm_glu_gemm``: a gated MLP's gate/up GEMMs with the gated
activation in the epilogue: one output, no separate activation kernel.

Meaning (pure-torch reference: ``rocm_inductor.providers.reference_glu``):
    g = x @ w_gate.T (+ b_gate), u = x @ w_up.T (+ b_up)      (float32 accumulators, not rounded)
    out = act(g) * u                                            (float32 epilogue, one rounding to x's dtype)
with ``act`` one of ``silu`` (SwiGLU: HF Llama / Qwen / Mistral, gpt-fast), ``gelu_tanh`` (Gemma's
``gelu_pytorch_tanh``) or ``gelu`` (erf). ``rms_norm_glu_gemm`` first computes ``s = x + residual`` (or x) and
``y = rms_norm(s, norm_weight, eps, offset)`` (rounded to x's dtype, as ``rocm_fused::rms_norm_gemm``), then
``glu_gemm(y as (M, K), ...)``, and returns ``[out]`` followed by ``s`` when there is a residual.

The unfused graph rounds g and u to x's dtype, then act(g), then the product (four roundings in bf16); the op
rounds once, so it is at least as close to float64 (docs/ops.md, glu_gemm). At decode (M <= 32) the product is
M x N elements, a few KB: the separate activation kernel is one more launch per layer (18 us per Llama-3.2-1B
step at B = 1 on the H200, 16 launches: issue 31's profile), and the (M, 2N) intermediate is never written.

Shapes: x (M, K) (``rms_norm_glu_gemm``: (..., K), M = x.numel() / K); w_gate, w_up (N, K) of x's dtype (float16,
bfloat16, float32); biases (N,) or None. Output (M, N) contiguous of x's dtype. Functional (``mutates_args=()``).

Compile-time spec keys (:func:`glu_gemm_spec`, :func:`rms_norm_glu_gemm_spec`): ``merged_gemm_spec``'s (two
weights) or ``norm_gemm_spec``'s, plus ``activation``.
"""

from __future__ import annotations

from typing import Any

import torch

from ..providers import get_provider
from ..providers.reference_glu import ACTIVATIONS
from .gemm_merge import _validate as _validate_gemm
from .gemm_merge import merged_gemm_spec
from .norm_gemm import _validate as _validate_norm
from .norm_gemm import norm_gemm_spec


def _validate(x, w_gate, w_up, b_gate, b_up, activation) -> None:
    if activation not in ACTIVATIONS:
        raise ValueError(f"glu_gemm: activation {activation!r} is not one of {list(ACTIVATIONS)}")
    if tuple(w_gate.shape) != tuple(w_up.shape):
        raise ValueError(f"glu_gemm: gate weight {tuple(w_gate.shape)} and up weight {tuple(w_up.shape)} differ")
    _validate_gemm(x, [w_gate, w_up], [b_gate, b_up])


@torch.library.custom_op("rocm_fused::glu_gemm", mutates_args=())
def glu_gemm(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, b_gate: torch.Tensor | None,
             b_up: torch.Tensor | None, activation: str, provider: str) -> torch.Tensor:
    """``act(x @ w_gate.T (+ b_gate)) * (x @ w_up.T (+ b_up))`` in one launch, by ``provider``.

    Args:
        x: (M, K) float16/bfloat16/float32. w_gate, w_up: (N, K) of x's dtype and device. b_gate, b_up: (N,) or None.
        activation: ``"silu"``, ``"gelu_tanh"`` or ``"gelu"``. provider: chosen at compile time.

    Returns:
        (M, N) contiguous tensor of x's dtype (float32 accumulators and epilogue, one rounding, RTNE).

    Raises:
        ValueError: an unknown activation, gate and up weights of different shapes, shapes/dtypes that do not
            chain (as ``rocm_fused::merged_gemm``). KeyError / ProviderUnavailable: as every op.
    """
    _validate(x, w_gate, w_up, b_gate, b_up, activation)
    return get_provider(provider).glu_gemm(x, w_gate, w_up, b_gate, b_up, activation).contiguous()


@glu_gemm.register_fake
def _glu_gemm_fake(x, w_gate, w_up, b_gate, b_up, activation, provider):
    _validate(x, w_gate, w_up, b_gate, b_up, activation)
    return torch.empty((x.shape[0], w_gate.shape[0]), dtype=x.dtype, device=x.device)


@torch.library.custom_op("rocm_fused::rms_norm_glu_gemm", mutates_args=())
def rms_norm_glu_gemm(x: torch.Tensor, residual: torch.Tensor | None, norm_weight: torch.Tensor | None, eps: float,
                      offset: float, w_gate: torch.Tensor, w_up: torch.Tensor, b_gate: torch.Tensor | None,
                      b_up: torch.Tensor | None, activation: str, provider: str) -> list[torch.Tensor]:
    """RMSNorm of ``x (+ residual)`` (arXiv:1910.07467), then :func:`glu_gemm` of it, by ``provider``.

    Args:
        x, residual, norm_weight, eps, offset: as ``rocm_fused::rms_norm_gemm``; the rest as :func:`glu_gemm`.

    Returns:
        ``[out]`` ((M, N), x's dtype), then ``s = x + residual`` (x's shape) when ``residual`` is given.

    Raises:
        ValueError: as :func:`glu_gemm` and ``rocm_fused::rms_norm_gemm``.
    """
    _validate(x.reshape(-1, x.shape[-1]) if x.ndim else x, w_gate, w_up, b_gate, b_up, activation)
    _validate_norm(x, residual, norm_weight, [w_gate, w_up], [b_gate, b_up])
    outs = get_provider(provider).rms_norm_glu_gemm(x, residual, norm_weight, eps, offset, w_gate, w_up, b_gate,
                                                    b_up, activation)
    return [t.contiguous() for t in outs]


@rms_norm_glu_gemm.register_fake
def _rms_norm_glu_gemm_fake(x, residual, norm_weight, eps, offset, w_gate, w_up, b_gate, b_up, activation, provider):
    _validate_norm(x, residual, norm_weight, [w_gate, w_up], [b_gate, b_up])
    _validate(x.reshape(-1, x.shape[-1]), w_gate, w_up, b_gate, b_up, activation)
    outs = [torch.empty((x.reshape(-1, x.shape[-1]).shape[0], w_gate.shape[0]), dtype=x.dtype, device=x.device)]
    if residual is not None:
        outs.append(torch.empty(x.shape, dtype=x.dtype, device=x.device))
    return outs


def glu_gemm_spec(x: Any, w_gate: Any, w_up: Any, b_gate: Any, b_up: Any, activation: str,
                  m_upper: int | None) -> dict[str, Any]:
    """The compile-time spec of a ``glu_gemm`` from fake tensors: ``merged_gemm_spec`` of the two weights plus
    ``activation``. Raises nothing."""
    spec = merged_gemm_spec(x, [w_gate, w_up], [b_gate, b_up], m_upper)
    spec["activation"] = activation
    return spec


def rms_norm_glu_gemm_spec(x: Any, residual: Any, norm_weight: Any, offset: float, w_gate: Any, w_up: Any,
                           b_gate: Any, b_up: Any, activation: str, m_upper: int | None) -> dict[str, Any]:
    """The compile-time spec of a ``rms_norm_glu_gemm``: ``norm_gemm_spec`` of the two weights plus
    ``activation``. Raises nothing."""
    spec = norm_gemm_spec(x, residual, norm_weight, offset, [w_gate, w_up], [b_gate, b_up], m_upper)
    spec["activation"] = activation
    return spec
