"""Forms of the math form's scores and products the op takes besides ``c * (q @ k^T)`` viewed (B, H, Lq, Lkv)
and ``P @ V`` viewed (B, H, Lq, Dv): soft-capped scores, (B*H)-flattened 3D attention, and 4D attention whose
``P @ V`` is used (B*H, Lq, Dv) (batch 1: :func:`check_merged`).

Soft cap (Gemma2 / Gemma3's ``attn_logit_softcapping``, transformers models/gemma2/modeling_gemma2.py
``eager_attention_forward``: ``w = w / softcap; w = tanh(w); w = w * softcap`` after the scaling, before the
mask): ``c * tanh(f * x)`` with ``x`` the scores. Since tanh is odd, that is ``cap * tanh(scale' * x / cap)``
with ``cap = |c|`` and ``scale' = f * c`` exactly, whatever Inductor folded into ``f`` (the division by the
cap, the attention's own scale or both): :func:`softcap_of`.

3D attention (openai/whisper's and fairseq's multi-head attention on ``(B*H, L, D)`` tensors: ``bmm(q, k^T)``,
softmax, ``bmm(p, v)``, the scores never viewed 4D): taken as a batch ``B' = B*H`` of one head, q, k, v viewed
``(B', 1, L, D)``, a 3D mask ``(B'|1, Lq|1, Lkv)`` viewed ``(B'|1, 1, Lq|1, Lkv)``, and the op's output viewed
back to ``(B', Lq, Dv)``: :func:`flat_views`. It reads K and V once per flattened row, as the eager bmm does
(there are no kv heads left to share).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch.fx import Node

from ..contract import Miss
from ..fx import CONVERT, insert_call, is_call, known_equal, shape
from .heads import strip_clones
from .masks import MaskSource
from .softmax import strip_scale

aten = torch.ops.aten


@dataclasses.dataclass
class QK:
    """The scores ``softcap(scale * q @ k^T)`` read off the graph.

    Attributes:
        q, k: (B, H, Lq, D) / (B, H, Lkv, D) nodes, or the (B*H, Lq, D) / (B*H, Lkv, D) ones when ``flat``;
        scale: multiplies q.k (float); cap: the soft cap (0.0: none); bmm: the scores' bmm / baddbmm node;
        flat: the attention is (B*H)-flattened 3D (:func:`flat_views`).
    """

    q: Any
    k: Any
    scale: float
    bmm: Node
    cap: float = 0.0
    flat: bool = False


def softcap_of(n: Any, c: float) -> tuple[Any, float, float] | str | None:
    """``(x, cap, f * c)`` when ``c * n`` is ``c * tanh(f * x)`` (``n`` the tanh, behind one cast; module
    docstring: the op's ``cap * tanh(scale' * x / cap)`` with ``cap = |c|``, ``scale' = f * c``); a reason when
    ``n`` is a tanh the op cannot mean (a tensor factor); None when ``n`` is no tanh."""
    t = n.args[0] if is_call(n, CONVERT) and is_call(n.args[0], aten.tanh.default) else n
    if not is_call(t, aten.tanh.default):
        return None
    x, f = strip_scale(t.args[0])
    if c == 0 or is_call(x, aten.mul.Tensor, aten.div.Tensor) and len(x.args) == 2 and isinstance(x.args[1], Node):
        return ("the scores are soft-capped by a tensor (c * tanh(s / c) with c not a compile-time number: "
                "Gemma2's attn_logit_softcapping is a float): the op's softcap is a float")
    return x, abs(float(c)), float(f * c)


def flat_views(bmm2: Node, qk: QK, mask: MaskSource, sink: Any) -> tuple[Node, Node, Node, MaskSource]:
    """q, k, v viewed ``(B', 1, L, D)`` and the mask viewed to match, for 3D attention ``bmm2 = bmm(p, v)``
    (module docstring); the views are inserted before ``bmm2`` (dead code when the candidate is not taken,
    which the manager removes).

    Raises:
        Miss: sinks with 3D attention, or q/k/v/output shapes that are not one flattened batch.
    """
    if sink is not None:
        raise Miss("attention with sinks on (B*H)-flattened 3D tensors: the op's sinks are per query head")
    v3 = bmm2.args[1]
    qs, ks, vs, os_ = (shape(x) for x in (qk.q, qk.k, v3, bmm2))
    if not (len(qs) == len(ks) == len(vs) == len(os_) == 3 and known_equal(qs[0], ks[0])
            and known_equal(ks[0], vs[0]) and known_equal(qs[2], ks[2]) and known_equal(ks[1], vs[1])):
        raise Miss(f"3D attention with q {qs}, k {ks}, v {vs}: not one (B*H, L, D) batch (the op takes it as "
                   "B*H rows of one head)")
    q4, k4, v4 = (insert_call(bmm2.graph, bmm2, aten.unsqueeze.default, (x, 1), like=bmm2)
                  for x in (qk.q, qk.k, v3))
    if mask.node is not None and len(shape(mask.node)) == 3:  # (B'|1, Lq|1, Lkv): the head dim goes in at 1
        node = insert_call(bmm2.graph, bmm2, aten.unsqueeze.default, (mask.node, 1), like=bmm2)
        mask = dataclasses.replace(mask, node=node)
    return q4, k4, v4, mask


NOT_4D = ("the attention is a 3D bmm over (B*H, L, D) (P @ V not a view of (B, H, Lq, Dv) / its operands not "
           "flattened 4D tensors) after 4D scores: the op takes (B, H, L, D)")


def check_merged(bmm2: Node, qs: tuple, lkv: Any, dv: Any) -> None:
    """``P @ V`` whose (B*H, Lq, Dv) result is used without its (B, H, Lq, Dv) view: taken when both operands are
    the row-major (B*H) flattenings of (B, H, Lq, Lkv) probabilities and (B, H, Lkv, Dv) values (behind any
    expand), so the bmm's rows are the op's (b, h) in order, at any B. It arises at B = 1, where the head merge's
    transpose moves only size-1 dims and ``views.py`` folds view, transpose and reshape into one reshape of the
    bmm, and in model code that uses the 3D result (an explicit ``torch.bmm`` of flattened heads).

    Raises:
        Miss: the operands are other flattenings (e.g. heads folded into the query rows: (B, H*Lq, Lkv)).
    """
    b, h, lq = qs[0], qs[1], qs[2]
    for x, want in ((bmm2.args[0], (b, h, lq, lkv)), (bmm2.args[1], (b, h, lkv, dv))):
        s3, s4 = shape(x), shape(strip_clones(x.args[0]))
        flat = (b * h, want[2], want[3])
        if not (len(s3) == 3 and len(s4) == 4 and all(known_equal(a, c) for a, c in zip(s4, want, strict=True))
                and all(known_equal(a, c) for a, c in zip(s3, flat, strict=True))):
            raise Miss(f"{NOT_4D}; P @ V's operands are {shape(bmm2.args[0])} @ {shape(bmm2.args[1])}, not "
                       f"(B*H, Lq, Lkv) @ (B*H, Lkv, Dv) flattenings of q's (B, H, Lq) = {(b, h, lq)}")
