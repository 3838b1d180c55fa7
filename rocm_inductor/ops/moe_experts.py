"""``rocm_fused::moe_experts``: the routed experts of a mixture-of-experts layer for a few tokens.

Meaning (pure-torch reference: ``rocm_inductor.providers.reference_moe_experts.moe_experts_ref``), for each
token t and each of its k slots j, with e = topk_ids[t, j]:
    gu   = W_gate_up[e] @ x[t] (+ b_gate_up[e])               (2I,)   float32 accumulation
    g, u = gu[:I], gu[I:]  (concatenated)  or  gu[0::2], gu[1::2]  (interleaved)
    h    = act(g, u)                                          (I,)    float32
    y_j  = W_down[e] @ h (+ b_down[e])                        (H,)    float32
    out[t] = sum_j topk_weights[t, j] * y_j                   rounded once to x.dtype
Activations: ``"silu"`` (SwiGLU: ``silu(g) * u``, Qwen3-MoE, Mixtral, DeepSeek) and ``"swiglu_clamp"``
(GPT-OSS: ``g = min(g, limit)``, ``u = clamp(u, -limit, limit)``, ``(u + 1) * g * sigmoid(alpha * g)``).
Weight layouts: ``transposed=False`` is HF's ``nn.Linear`` order, ``W_gate_up`` (E, 2I, H) and ``W_down``
(E, H, I) (Qwen3-MoE); ``transposed=True`` is (E, H, 2I) and (E, I, H) (GPT-OSS). Everything after the loads
is float32 and the output is rounded once, so the op is at least as exact as HF's ``batched_mm`` /
``grouped_mm`` code, which rounds each GEMM's output and the weighted products to the model dtype
(docs/ops.md, the numerics contract). A provider reads each selected expert's weights where they live: no
gathered copy of ``W[topk_ids]``. Functional (``mutates_args=()``); the output is a new contiguous (T, H).

Compile-time spec keys read by providers' ``check`` (built by :func:`moe_experts_spec`):
    dtype (x's), weight_dtype, tokens (T: int, or None if symbolic), tokens_upper (static value or the
    ShapeEnv's upper bound; None = unbounded), top_k, experts (E), hidden (H), inter (I), activation,
    interleaved, transposed, has_bias, device_type.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.fx.experimental.symbolic_shapes import statically_known_true

from ..buckets import m_upper_bound
from ..providers import get_provider

#: dtypes the op is defined for (activations and weights share one).
DTYPES = (torch.float16, torch.bfloat16, torch.float32)
#: Activation names the op takes (see the module docstring).
ACTIVATIONS = ("silu", "swiglu_clamp")


def _dims(w_gate_up: torch.Tensor, w_down: torch.Tensor, transposed: bool) -> tuple[Any, Any, Any, Any]:
    """(E, H, 2I, I) read off the weights in their layout."""
    if transposed:
        return w_gate_up.shape[0], w_gate_up.shape[1], w_gate_up.shape[2], w_down.shape[1]
    return w_gate_up.shape[0], w_gate_up.shape[2], w_gate_up.shape[1], w_down.shape[2]


def _validate(x, topk_weights, topk_ids, w_gate_up, w_down, b_gate_up, b_down, activation, transposed) -> None:
    if x.dtype not in DTYPES:
        raise ValueError(f"moe_experts takes float16/bfloat16/float32, x is {x.dtype}")
    if activation not in ACTIVATIONS:
        raise ValueError(f"moe_experts: activation {activation!r} is not one of {ACTIVATIONS}")
    if x.ndim != 2 or topk_weights.ndim != 2 or topk_ids.ndim != 2:
        raise ValueError(f"moe_experts: x (T, H), topk_weights and topk_ids (T, k); got {tuple(x.shape)}, "
                         f"{tuple(topk_weights.shape)}, {tuple(topk_ids.shape)}")
    if topk_ids.dtype.is_floating_point or topk_ids.dtype is torch.bool:
        raise ValueError(f"moe_experts: topk_ids must be an integer tensor, got {topk_ids.dtype}")
    if not topk_weights.dtype.is_floating_point:
        raise ValueError(f"moe_experts: topk_weights must be floating point, got {topk_weights.dtype}")
    if w_gate_up.ndim != 3 or w_down.ndim != 3:
        raise ValueError(f"moe_experts: expert weights are 3-D, got {tuple(w_gate_up.shape)} and "
                         f"{tuple(w_down.shape)}")
    if w_gate_up.dtype != x.dtype or w_down.dtype != x.dtype:
        raise ValueError(f"moe_experts: weights {w_gate_up.dtype}/{w_down.dtype} must be x's dtype {x.dtype}")
    e, h, n2, i = _dims(w_gate_up, w_down, transposed)
    want_down = (e, i, h) if transposed else (e, h, i)
    checks = [(x.shape[1], h), (w_down.shape[0], e), (n2, 2 * i), (topk_weights.shape[0], x.shape[0]),
              (topk_ids.shape[0], x.shape[0]), (topk_weights.shape[1], topk_ids.shape[1])]
    checks += [(a, b) for a, b in zip(w_down.shape, want_down, strict=True)]
    if any(not statically_known_true(a == b) for a, b in checks):
        raise ValueError(f"moe_experts: shapes disagree (transposed={transposed}): x {tuple(x.shape)}, topk "
                         f"{tuple(topk_weights.shape)}/{tuple(topk_ids.shape)}, w_gate_up {tuple(w_gate_up.shape)}, "
                         f"w_down {tuple(w_down.shape)}")
    for name, b, n in (("b_gate_up", b_gate_up, n2), ("b_down", b_down, h)):
        if b is not None and (b.ndim != 2 or not statically_known_true(b.shape[0] == e)
                              or not statically_known_true(b.shape[1] == n)):
            raise ValueError(f"moe_experts: {name} must be (E, {n}), got {tuple(b.shape)}")


@torch.library.custom_op("rocm_fused::moe_experts", mutates_args=())
def moe_experts(x: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor, w_gate_up: torch.Tensor,
                w_down: torch.Tensor, b_gate_up: torch.Tensor | None, b_down: torch.Tensor | None, activation: str,
                interleaved: bool, transposed: bool, alpha: float, limit: float, provider: str) -> torch.Tensor:
    """The routed experts' output for T tokens (see the module docstring for the math), by ``provider``.

    Args:
        x: (T, H) float16/bfloat16/float32 token states.
        topk_weights: (T, k) float routing weights (any float dtype; used in float32).
        topk_ids: (T, k) integer expert ids in [0, E).
        w_gate_up: (E, 2I, H), or (E, H, 2I) with ``transposed``; x's dtype.
        w_down: (E, H, I), or (E, I, H) with ``transposed``; x's dtype.
        b_gate_up: (E, 2I) or None; b_down: (E, H) or None.
        activation: ``"silu"`` or ``"swiglu_clamp"``; interleaved: gate/up rows alternate (GPT-OSS) instead
            of gate rows then up rows; alpha, limit: ``swiglu_clamp``'s constants (ignored by ``"silu"``).
        provider: provider name chosen at compile time (``"reference"``, ``"triton"``).

    Returns:
        (T, H) contiguous tensor of ``x.dtype``.

    Raises:
        ValueError: a dtype, shape or activation outside the above.
        KeyError: unknown provider. ProviderUnavailable: its library cannot be imported here.
    """
    _validate(x, topk_weights, topk_ids, w_gate_up, w_down, b_gate_up, b_down, activation, transposed)
    return get_provider(provider).moe_experts(x, topk_weights, topk_ids, w_gate_up, w_down, b_gate_up, b_down,
                                              activation, interleaved, transposed, alpha, limit).contiguous()


@moe_experts.register_fake
def _moe_experts_fake(x, topk_weights, topk_ids, w_gate_up, w_down, b_gate_up, b_down, activation, interleaved,
                      transposed, alpha, limit, provider):
    _validate(x, topk_weights, topk_ids, w_gate_up, w_down, b_gate_up, b_down, activation, transposed)
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


def _int_or_none(s: Any) -> int | None:
    return s if isinstance(s, int) else None


def tokens_upper(t: Any) -> int | None:
    """T's static value, or its ShapeEnv upper bound when symbolic (``None``: unbounded)."""
    if isinstance(t, int):
        return t
    try:
        ranges = t.node.shape_env.var_to_range
    except AttributeError:
        ranges = None
    return m_upper_bound(t, ranges)


def moe_experts_spec(x: Any, topk_ids: Any, w_gate_up: Any, w_down: Any, activation: str, interleaved: bool,
                     transposed: bool, has_bias: bool) -> dict[str, Any]:
    """The compile-time spec of an experts match, from fake tensors (keys in the module docstring)."""
    e, h, _, i = _dims(w_gate_up, w_down, transposed)
    return {
        "dtype": x.dtype, "weight_dtype": w_gate_up.dtype, "tokens": _int_or_none(x.shape[0]),
        "tokens_upper": tokens_upper(x.shape[0]), "top_k": _int_or_none(topk_ids.shape[1]),
        "experts": _int_or_none(e), "hidden": _int_or_none(h), "inter": _int_or_none(i),
        "activation": activation, "interleaved": interleaved, "transposed": transposed, "has_bias": has_bias,
        "device_type": x.device.type,
    }
