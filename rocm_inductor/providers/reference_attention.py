"""Pure-torch reference of ``rocm_fused::decode_attention`` (defines its meaning; see ``ops/attention.py``)."""

from __future__ import annotations

import torch


def decode_attention_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                         scale: float, sinks: torch.Tensor | None = None, positions: torch.Tensor | None = None,
                         window: int = 0, softcap: float = 0.0) -> torch.Tensor:
    """Scaled dot-product attention (Vaswani et al. 2017) over un-repeated GQA K/V, in float32.

    Query head ``h`` attends kv head ``h // (Hq // Hkv)`` (HF ``repeat_kv``'s mapping). A boolean mask keeps
    the True positions; a float mask is added to the scores. Rows with no finite score return zeros (SDPA's
    ``_safe_softmax`` behaviour on torch >= 2.5). ``sinks`` (GPT-OSS's attention sinks, transformers
    models/gpt_oss/modeling_gpt_oss.py): per query head ``h`` the logit ``sinks[h]`` joins the row's max and
    softmax denominator and contributes no value; a row with no finite score then is zeros too (the denominator
    is the sink's alone, as in GPT-OSS's eager code).

    Args:
        q: (B, Hq, Lq, D); k: (B, Hkv, Lkv, D); v: (B, Hkv, Lkv, Dv); one float dtype.
        mask: None or 4D broadcastable to (B, Hq, Lq, Lkv), bool or float.
        scale: multiplies the scores.
        sinks: None or (Hq,) float32 / q's dtype, taken in float32.
        positions: None or (B|1, Lq|1) int32/int64, the absolute position ``p`` of each query row: slot ``j`` is
            kept iff ``j <= p`` and, with ``window > 0``, ``j > p - window`` (HF's causal and sliding-window
            masks of a static cache); with a mask too, a slot must pass both.
        window: sliding-window length in slots (0: none).
        softcap: with ``softcap > 0`` the scaled scores become ``softcap * tanh(s / softcap)`` before the mask
            (Gemma2's ``attn_logit_softcapping``, transformers models/gemma2/modeling_gemma2.py); 0: none.

    Returns:
        (B, Hq, Lq, Dv) of q's dtype, contiguous, rounded once from float32.
    """
    g = q.shape[1] // k.shape[1]
    kf = k.float().repeat_interleave(g, dim=1)
    vf = v.float().repeat_interleave(g, dim=1)
    s = torch.matmul(q.float(), kf.transpose(-1, -2)) * scale
    if softcap:
        s = torch.tanh(s / softcap) * softcap
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask.float()
    if positions is not None:
        p = positions.to(torch.int64)[:, None, :, None]  # (B|1, 1, Lq|1, 1)
        j = torch.arange(k.shape[2], device=q.device)
        keep = j <= p
        if window > 0:
            keep = keep & (j > p - window)
        s = s.masked_fill(~keep, float("-inf"))
    m = s.amax(-1, keepdim=True)
    if sinks is not None:
        sk = sinks.float().view(1, -1, 1, 1)
        m = torch.maximum(m, sk)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    p = torch.exp(s - m)  # exp(-inf) = 0 for removed keys; a row with none left sums to 0
    denom = p.sum(-1, keepdim=True)
    if sinks is not None:
        denom = denom + torch.exp(sk - m)  # the sink's share of the softmax: in the denominator only
    out = torch.matmul(p, vf) / torch.where(denom > 0, denom, torch.ones_like(denom))
    return out.to(q.dtype).contiguous()
