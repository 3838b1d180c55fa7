"""Shared RoPE limits and layout helpers for the vendor providers (spec keys: ``rocm_inductor.ops.rope``).

Library limits as data (docs/vendors.md): FlashInfer 0.5.3-0.6.x and AMD's fork dispatch head dims 64/128/256/512
only (the fork has no fallback), fp16/bf16 q/k of one dtype, a float32 [max_pos, rotary_dim] cos_sin_cache
(cos half then sin half), positions per token. None of them takes the model's own cos/sin tensors, so the
on-the-fly op (``rope``) always goes to Triton/reference; vendors serve ``rope_cached`` only.
"""

from __future__ import annotations

from typing import Any

import torch

from ..report import dtype_name

#: Head dims FlashInfer's / the AMD fork's RoPE kernels are instantiated for.
VENDOR_HEAD_DIMS = (64, 128, 256, 512)
HALF_DTYPES = (torch.float16, torch.bfloat16)


def check_vendor_rope(lib: str, op: str, spec: dict[str, Any], head_dims=VENDOR_HEAD_DIMS) -> str | None:
    """Why a FlashInfer-style cached RoPE kernel can't take the match (``None`` if it can)."""
    if op == "rope" or not spec.get("cached"):
        return (f"{lib} needs a float32 cos_sin_cache indexed by position; the model's own cos/sin "
                "(on-the-fly) go to Triton")
    dt, kdt = spec.get("dtype"), spec.get("k_dtype")
    if dt not in HALF_DTYPES:
        return f"{lib} rope takes float16/bfloat16, q is {dtype_name(dt)}"
    if kdt is None:
        return f"{lib} rope rotates q and k together; this match has no k"
    if kdt != dt:
        return f"{lib} rope needs q and k of one dtype, got {dtype_name(dt)} and {dtype_name(kdt)}"
    if spec.get("table_dtype") != torch.float32:
        return f"{lib} cos_sin_cache must be float32, is {dtype_name(spec.get('table_dtype'))}"
    if spec.get("head_dim") not in head_dims:
        return f"{lib} rope supports head_dim {head_dims} only, head_dim is {spec.get('head_dim')}"
    if spec.get("ndim") not in (3, 4):
        return f"{lib} rope needs (tokens, heads, dim) or 4-D q, q is {spec.get('ndim')}-D"
    return None


def token_major(x: torch.Tensor, positions: torch.Tensor):
    """View ``x`` as (tokens, heads, D) and ``positions`` as (tokens,), plus a function restoring x's shape.

    The head axis is the one dim (before the last) over which ``positions`` broadcasts (size 1 there); q of
    (b, h, s, d) with positions (b, 1, s) becomes (b*s, h, d) through a permute (a copy when not a view).

    Raises:
        ValueError: positions don't broadcast or the head axis is ambiguous.
    """
    lead = x.dim() - 1
    pos = positions
    while pos.dim() < lead:
        pos = pos.unsqueeze(0)
    cands = [i for i in range(lead) if pos.shape[i] == 1 and x.shape[i] != 1]
    if x.dim() == 3 and not cands:
        cands = [1]
    if len(cands) > 1 or (not cands and lead > 1):
        cands = [i for i in range(lead) if pos.shape[i] == 1] or cands
    if len(cands) != 1:
        raise ValueError(f"cannot tell the head axis of q {tuple(x.shape)} from positions {tuple(positions.shape)}")
    h = cands[0]
    perm = [i for i in range(lead) if i != h] + [h, lead]
    xt = x.permute(perm)
    shape_t = xt.shape
    x3 = xt.reshape(-1, x.shape[h], x.shape[-1])
    p1 = pos.expand(*x.shape[:-1]).permute(perm[:-1]).select(-1, 0).reshape(-1)
    inv = [perm.index(i) for i in range(x.dim())]

    def restore(y3: torch.Tensor) -> torch.Tensor:
        return y3.reshape(shape_t).permute(inv)

    return x3, p1, restore
