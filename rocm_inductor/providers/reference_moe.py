"""Pure-torch reference of the mixture-of-experts router's top-k (``rocm_fused::moe_routing``).

The eager HF router code, op for op, so that on the device it runs on it gives eager's bits, ties and NaN
included (the same ``torch.topk`` calls): Qwen3-MoE / Mixtral (``modeling_qwen3_moe.py`` /
``modeling_mixtral.py``: ``Qwen3MoeTopKRouter``, ``MixtralTopKRouter``), GPT-OSS (``modeling_gpt_oss.py``:
``GptOssTopKRouter``) and DeepSeek-V3 / GLM4-MoE (``modeling_deepseek_v3.py``: ``DeepseekV3TopkRouter``,
``modeling_glm4_moe.py``: ``Glm4MoeTopkRouter``), transformers 5.24.
"""

from __future__ import annotations

import torch

#: DeepSeek-V3's renormalisation guard (HF ``modeling_deepseek_v3.py``: ``sum + 1e-20``).
RENORM_EPS = 1e-20


def moe_routing_ref(router_logits: torch.Tensor, k: int, kind: str, renormalize: bool,
                    correction_bias: torch.Tensor | None, n_group: int, topk_group: int,
                    routed_scaling_factor: float, sorted_topk: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """A router's top-k (the meaning of ``rocm_fused::moe_routing``, ``ops/moe_routing.py``).

    Args:
        router_logits: [T, E] float16/bfloat16/float32.
        k: experts per token; kind: ``softmax_topk`` / ``topk_softmax`` / ``sigmoid_grouped``.
        renormalize: ``w / (sum(w) + 1e-20)``; correction_bias: (E,) float or None (sigmoid_grouped);
        n_group, topk_group: DeepSeek-V3's expert groups (1, 1: ungrouped);
        routed_scaling_factor: final multiplier; sorted_topk: ``torch.topk(..., sorted=)`` of the last top-k.

    Returns:
        ``(weights [T, k] float32, ids [T, k] int64)`` (float64 weights for float64 logits: the compile-time
        verification's float64 math).

    Raises:
        ValueError: an unknown kind.
    """
    x = router_logits.to(torch.promote_types(router_logits.dtype, torch.float32))
    if kind == "softmax_topk":
        w, ids = torch.topk(torch.softmax(x, dim=-1), k, dim=-1, sorted=sorted_topk)
    elif kind == "topk_softmax":
        v, ids = torch.topk(router_logits, k, dim=-1, sorted=sorted_topk)
        w = torch.softmax(v.to(x.dtype), dim=-1)
    elif kind == "sigmoid_grouped":
        scores = x.sigmoid()
        choice = scores if correction_bias is None else scores + correction_bias
        if topk_group < n_group:  # all groups kept: the mask is all ones (HF computes it anyway: a no-op)
            t, e = choice.shape
            group_scores = choice.view(t, n_group, e // n_group).topk(2, dim=-1)[0].sum(dim=-1)
            group_idx = torch.topk(group_scores, k=topk_group, dim=-1, sorted=False)[1]
            group_mask = torch.zeros_like(group_scores).scatter_(1, group_idx, 1)
            score_mask = group_mask.unsqueeze(-1).expand(t, n_group, e // n_group).reshape(t, e)
            choice = choice.masked_fill(~score_mask.bool(), float("-inf"))
        ids = torch.topk(choice, k=k, dim=-1, sorted=sorted_topk)[1]
        w = scores.gather(1, ids)
    else:
        raise ValueError(f"moe_routing: unknown kind {kind!r}")
    if renormalize:
        w = w / (w.sum(dim=-1, keepdim=True) + RENORM_EPS)
    if routed_scaling_factor != 1.0:
        w = w * routed_scaling_factor
    return w.contiguous(), ids.contiguous()
