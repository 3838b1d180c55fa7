"""Pure-torch reference of ``rocm_fused::moe_experts`` (defines its meaning; see ``ops/moe_experts.py``)."""

from __future__ import annotations

import torch


def activate(g: torch.Tensor, u: torch.Tensor, activation: str, alpha: float, limit: float) -> torch.Tensor:
    """The gated activation of one expert's gate/up halves, in their dtype (float32 in the op).

    ``"silu"``: ``silu(g) * u`` (SwiGLU, Shazeer 2020, arXiv:2002.05202; HF ``ACT2FN["silu"]``).
    ``"swiglu_clamp"``: GPT-OSS's ``GptOssExperts._apply_gate`` (transformers
    ``models/gpt_oss/modeling_gpt_oss.py``): ``g = g.clamp(max=limit)``, ``u = u.clamp(-limit, limit)``,
    ``(u + 1) * g * sigmoid(g * alpha)``.

    Raises:
        ValueError: an unknown activation.
    """
    if activation == "silu":
        return torch.nn.functional.silu(g) * u
    if activation == "swiglu_clamp":
        g = g.clamp(max=limit)
        u = u.clamp(min=-limit, max=limit)
        return (u + 1) * (g * torch.sigmoid(g * alpha))
    raise ValueError(f"moe_experts: unknown activation {activation!r}")


def moe_experts_ref(x: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor, w_gate_up: torch.Tensor,
                    w_down: torch.Tensor, b_gate_up: torch.Tensor | None, b_down: torch.Tensor | None,
                    activation: str, interleaved: bool, transposed: bool, alpha: float,
                    limit: float) -> torch.Tensor:
    """The routed experts in float32 (HF ``batched_mm_experts_forward``'s math, transformers
    ``integrations/moe.py``), rounded once to ``x.dtype``.

    Args:
        x: (T, H); topk_weights, topk_ids: (T, k); w_gate_up: (E, 2I, H) or (E, H, 2I) (``transposed``);
        w_down: (E, H, I) or (E, I, H); b_gate_up: (E, 2I) or None; b_down: (E, H) or None;
        activation, interleaved, alpha, limit: see ``rocm_inductor.ops.moe_experts``. Any float dtype, any
        strides. 16-bit inputs are computed in float32; float32 and float64 inputs in float64 (at least the
        float32 accumulation the op promises: CPU ``bmm`` sums a float32 GEMV in a less exact order than the
        ``mm`` of HF's ``grouped_mm`` fallback, and the reference must not be less exact than the region).

    Returns:
        (T, H) contiguous tensor of ``x.dtype``.

    Raises:
        ValueError: an unknown activation.
    """
    acc = torch.float64 if x.dtype in (torch.float32, torch.float64) else torch.float32
    t, k = topk_ids.shape
    ids = topk_ids.reshape(-1).long()
    xs = x.to(acc).repeat_interleave(k, dim=0)  # (S, H), S = T * k, token-major like topk_ids.reshape(-1)
    wgu = w_gate_up[ids].to(acc)  # the reference may gather: it defines the math, not the memory traffic
    gu = torch.bmm(xs.unsqueeze(1), wgu).squeeze(1) if transposed else torch.bmm(wgu, xs.unsqueeze(-1)).squeeze(-1)
    if b_gate_up is not None:
        gu = gu + b_gate_up[ids].to(acc)
    g, u = (gu[:, 0::2], gu[:, 1::2]) if interleaved else gu.chunk(2, dim=-1)
    h = activate(g, u, activation, alpha, limit)
    wd = w_down[ids].to(acc)
    y = torch.bmm(h.unsqueeze(1), wd).squeeze(1) if transposed else torch.bmm(wd, h.unsqueeze(-1)).squeeze(-1)
    if b_down is not None:
        y = y + b_down[ids].to(acc)
    y = y * topk_weights.reshape(-1, 1).to(acc)
    return y.view(t, k, -1).sum(dim=1).to(x.dtype).contiguous()
