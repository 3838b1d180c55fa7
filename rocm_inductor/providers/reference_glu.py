"""Pure-torch reference of ``rocm_fused::glu_gemm`` (defines its meaning; see ``ops/glu_gemm.py``). The norm form,
``rms_norm_glu_gemm_ref``, is in ``reference.py`` next to the RMSNorm references it calls."""

from __future__ import annotations

import torch

#: The gate activations the ops take: SwiGLU (HF ``ACT2FN["silu"]``: Llama, Qwen, Mistral; gpt-fast's
#: ``F.silu(w1(x)) * w3(x)``), Gemma's GELU with the tanh approximation (``gelu_pytorch_tanh``) and the exact
#: (erf) GELU (``ACT2FN["gelu"]``). Shazeer 2020, "GLU Variants Improve Transformer", arXiv:2002.05202.
ACTIVATIONS = ("silu", "gelu_tanh", "gelu")


def activate(g: torch.Tensor, activation: str) -> torch.Tensor:
    """``act(g)`` in ``g``'s dtype: ``silu``, ``gelu_tanh`` (``F.gelu(approximate="tanh")``) or ``gelu`` (erf).

    Raises:
        ValueError: an activation outside :data:`ACTIVATIONS`.
    """
    if activation == "silu":
        return torch.nn.functional.silu(g)
    if activation == "gelu_tanh":
        return torch.nn.functional.gelu(g, approximate="tanh")
    if activation == "gelu":
        return torch.nn.functional.gelu(g)
    raise ValueError(f"glu_gemm: unknown activation {activation!r}; the op takes {list(ACTIVATIONS)}")


def glu_gemm_ref(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, b_gate: torch.Tensor | None,
                 b_up: torch.Tensor | None, activation: str) -> torch.Tensor:
    """``act(x @ w_gate.T + b_gate) * (x @ w_up.T + b_up)`` with a float32 epilogue, rounded once to x's dtype.

    The two GEMMs accumulate in float32 (at least: float64 stays float64) and are *not* rounded to x's dtype
    before the activation: the op computes the gated product from the accumulators (one rounding where the
    unfused graph rounds g, u, act(g) and the product: at least as close to float64, docs/ops.md).

    Args:
        x: (M, K); w_gate, w_up: (N, K) (``nn.Linear`` layout); b_gate, b_up: (N,) or None; one float dtype.
        activation: one of :data:`ACTIVATIONS`.

    Returns:
        (M, N) contiguous tensor of x's dtype.
    """
    acc = torch.promote_types(x.dtype, torch.float32)
    xa = x.to(acc)
    g = xa @ w_gate.to(acc).t()
    u = xa @ w_up.to(acc).t()
    if b_gate is not None:
        g = g + b_gate.to(acc)
    if b_up is not None:
        u = u + b_up.to(acc)
    return (activate(g, activation) * u).to(x.dtype).contiguous()
