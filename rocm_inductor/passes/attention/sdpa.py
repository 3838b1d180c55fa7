"""The SDPA candidate: an ``aten`` scaled-dot-product-attention node, its arguments read by schema name.

Covers every platform's SDPA node (so argument order and the ``attn_mask`` / ``attn_bias`` spelling do not
matter): CPU ``_scaled_dot_product_flash_attention_for_cpu`` (``attn_mask=``, native GQA when K/V have fewer
heads); CUDA ``_scaled_dot_product_efficient_attention`` (``attn_bias``), ``_scaled_dot_product_cudnn_attention``,
``_scaled_dot_product_flash_attention`` (no mask; native GQA under ``enable_gqa``),
``_scaled_dot_product_fused_attention_overrideable`` (XPU/HPU-style), ``_scaled_dot_product_attention_math`` and
``scaled_dot_product_attention`` (``enable_gqa=``), where they survive to this graph. Refused here: dropout,
outputs other than the attention used (logsumexp / RNG state: a training graph), and ``is_causal=True`` (SDPA's
causal mask is top-left aligned, not a decode over a cache, unless Lq == Lkv == 1).
"""

from __future__ import annotations

import operator
from typing import Any

import torch
from torch.fx import Node

from ..contract import Miss
from ..fx import known_equal, val
from .emit import Attention
from .masks import mask_source

aten = torch.ops.aten


def _sdpa_targets() -> dict[Any, str]:
    """SDPA overloads present in this torch (name -> short name for reports)."""
    names = ("_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_efficient_attention",
             "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention",
             "_scaled_dot_product_fused_attention_overrideable", "_scaled_dot_product_attention_math",
             "scaled_dot_product_attention")
    out = {}
    for name in names:
        packet = getattr(aten, name, None)
        op = getattr(packet, "default", None) if packet is not None else None
        if op is not None:
            out[op] = name
    return out


#: The SDPA targets this pass looks for.
SDPA_TARGETS: dict[Any, str] = _sdpa_targets()


def bind(node: Node) -> dict[str, Any]:
    """``node``'s arguments by schema name, defaults filled in (``{"query": <Node>, "attn_mask": None, ...}``)."""
    out = {}
    for i, a in enumerate(node.target._schema.arguments):
        if i < len(node.args):
            out[a.name] = node.args[i]
        elif a.name in node.kwargs:
            out[a.name] = node.kwargs[a.name]
        else:
            out[a.name] = a.default_value if a.has_default_value() else None
    return out


def sdpa_candidate(sdpa: Node) -> Attention:
    """The :class:`~.emit.Attention` of an SDPA node (one of :data:`SDPA_TARGETS`).

    Raises:
        Miss: dropout, an output other than the attention used, or ``is_causal=True`` over more than one query.
    """
    a = bind(sdpa)
    if a.get("dropout_p") not in (0, 0.0, None):
        raise Miss(f"dropout_p={a['dropout_p']} (training): the op has no dropout")
    tuple_out = sdpa.target is not getattr(aten.scaled_dot_product_attention, "default", None)
    if tuple_out:  # only the attention (index 0) may be used
        for u in sdpa.users:
            if u.users and not (u.target is operator.getitem and u.args[1] == 0):
                raise Miss(f"output {u.args[1] if u.target is operator.getitem else '?'} of the SDPA "
                           "(logsumexp / RNG state) is used: a training graph")
    q, k = val(a["query"]), val(a["key"])
    if a.get("is_causal") and not (isinstance(q, torch.Tensor) and q.ndim == 4 and known_equal(q.shape[2], 1)
                                   and isinstance(k, torch.Tensor) and k.ndim == 4 and known_equal(k.shape[2], 1)):
        raise Miss("is_causal=True: SDPA's causal mask is top-left aligned (query i sees keys 0..i), not a "
                   "decode over a cache: left to Inductor (a prefill; for a decode, pass the mask)")
    mask_node = a.get("attn_mask", a.get("attn_bias"))
    return Attention(sdpa, tuple_out, a["query"], a["key"], a["value"], mask_source(mask_node), a.get("scale"),
                     SDPA_TARGETS[sdpa.target])
