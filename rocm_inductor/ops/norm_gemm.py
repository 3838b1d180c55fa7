"""``rocm_fused::rms_norm_gemm``: an RMSNorm (optionally after a residual add) and the GEMMs that read it.

Meaning (pure-torch reference: ``rocm_inductor.providers.reference.rms_norm_gemm_ref``):
    s = x + residual                        (model dtype, as ``rocm_fused::fused_add_rms_norm``; s = x without one)
    y = rms_norm(s, norm_weight, eps, offset)            (``rocm_fused::rms_norm``, rounded once to x's dtype)
    out[i] = y.reshape(M, K) @ weights[i].T (+ biases[i])            (``rocm_fused::merged_gemm``)
and the op returns ``[out_0, ..., out_{n-1}]`` followed by ``s`` when there is a residual. ``y`` itself is not
returned: the pass folds a norm into the GEMMs only where they are its output's only readers. Decode's pre-norm
layers have this shape twice per layer (input_layernorm -> q/k/v, post_attention_layernorm -> gate/up) and once
at the end (final norm -> lm_head): one launch instead of two (the fixed cost of a launch is ~2 us at
the H200's decode sizes, as much as the q/k/v weights take to stream).

Shapes: x and residual (..., K) of one dtype (float16/bfloat16/float32), M = x.numel() / K; norm_weight (K,)
or None; weights (N_i, K) of x's dtype; biases (N_i,) or None. Outputs: (M, N_i) contiguous of x's dtype; s
of x's shape, contiguous. Functional (``mutates_args=()``).

Compile-time spec keys read by providers' ``check`` (built by :func:`norm_gemm_spec`): the norm's keys
(``rocm_inductor.ops.rms_norm.norm_spec``) and the GEMMs' (``rocm_inductor.ops.gemm_merge.merged_gemm_spec``)
in one dict (the norm's ``dtype`` is the GEMMs' too; ``fused_add`` says whether there is a residual), and
``dot_prologue`` (bool, False here; the pass sets it from ``options={"features": {"norm_gemm_dot": True}}``: take
M >= 2 with the dot tile's prologue where nothing was measured).
"""

from __future__ import annotations

from typing import Any

import torch

from ..providers import get_provider
from .gemm_merge import _validate as _validate_gemm
from .gemm_merge import merged_gemm_spec
from .rms_norm import norm_spec


def _rows_view(x: torch.Tensor) -> torch.Tensor:
    """(..., K) -> (M, K), a view where possible (the GEMM operand the norm's output was reshaped to)."""
    return x.reshape(-1, x.shape[-1])


def _validate(x, residual, norm_weight, weights, biases) -> None:
    if x.ndim < 1:
        raise ValueError("rms_norm_gemm: x is a scalar; RMSNorm needs at least one dim")
    if residual is not None and (residual.shape != x.shape or residual.dtype != x.dtype):
        raise ValueError(f"rms_norm_gemm: residual {residual.dtype} {tuple(residual.shape)} does not match x "
                         f"{x.dtype} {tuple(x.shape)}")
    if norm_weight is not None and tuple(norm_weight.shape) != (x.shape[-1],):
        raise ValueError(f"rms_norm_gemm: norm weight shape {tuple(norm_weight.shape)} != ({x.shape[-1]},)")
    _validate_gemm(_rows_view(x), weights, biases)


@torch.library.custom_op("rocm_fused::rms_norm_gemm", mutates_args=())
def rms_norm_gemm(x: torch.Tensor, residual: torch.Tensor | None, norm_weight: torch.Tensor | None, eps: float,
                  offset: float, weights: list[torch.Tensor], biases: list[torch.Tensor | None],
                  provider: str) -> list[torch.Tensor]:
    """RMSNorm of ``x (+ residual)`` (arXiv:1910.07467) and ``[y @ w.T (+ b)]`` for 1-4 weights, by ``provider``.

    Args:
        x: (..., K) float16/bfloat16/float32, the norm's input.
        residual: (..., K) of x's shape and dtype (the residual add before the norm), or None.
        norm_weight: (K,) any float dtype, or None (weightless norm).
        eps: added to the mean square; offset: 0.0, or 1.0 for Gemma's ``(1 + weight)``.
        weights: 1-4 (N_i, K) tensors of x's dtype (``nn.Linear.weight`` layout); biases: (N_i,) or None each.
        provider: provider name chosen at compile time (``"reference"``, ``"triton"``).

    Returns:
        ``[out_0, ..., out_{n-1}]`` ((M, N_i), x's dtype, float32-accumulated, rounded once), then ``s``
        (x's shape) when ``residual`` is given.

    Raises:
        ValueError: shapes or dtypes that do not chain (as ``rocm_fused::merged_gemm`` / ``rms_norm``).
        KeyError: unknown provider. ProviderUnavailable: its library cannot be imported here.
    """
    _validate(x, residual, norm_weight, weights, biases)
    outs = get_provider(provider).rms_norm_gemm(x, residual, norm_weight, eps, offset, list(weights), list(biases))
    return [t.contiguous() for t in outs]


@rms_norm_gemm.register_fake
def _rms_norm_gemm_fake(x, residual, norm_weight, eps, offset, weights, biases, provider):
    _validate(x, residual, norm_weight, weights, biases)
    m = _rows_view(x).shape[0]
    outs = [torch.empty((m, w.shape[0]), dtype=x.dtype, device=x.device) for w in weights]
    if residual is not None:
        outs.append(torch.empty(x.shape, dtype=x.dtype, device=x.device))
    return outs


def norm_gemm_spec(x: Any, residual: Any, norm_weight: Any, offset: float, weights: list[Any], biases: list[Any],
                   m_upper: int | None) -> dict[str, Any]:
    """The compile-time spec of a fold from fake tensors (``node.meta["val"]``).

    Args:
        x: the norm's (..., K) fake input; residual: fake or None; norm_weight: fake (K,) or None;
        offset: the norm's weight offset (0.0, or 1.0 for Gemma's ``1 + w``);
        weights / biases: fake (N_i, K) / (N_i,) or None; m_upper: as :func:`merged_gemm_spec`.

    Returns:
        the union of :func:`norm_spec` and :func:`merged_gemm_spec` (module docstring). Raises nothing: the
        providers' ``check`` reads it and gives reasons.
    """
    spec = merged_gemm_spec(_rows_view(x), weights, biases, m_upper)
    spec.update(norm_spec(x, norm_weight, offset, residual is not None))
    spec["dot_prologue"] = False
    return spec
