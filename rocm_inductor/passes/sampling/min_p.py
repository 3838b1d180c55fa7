"""HF's ``MinPLogitsWarper`` as the post-grad graph spells it -> ``(s0, min_p)`` (:func:`read_min_p`). Where
it may sit in a chain (below any top-p, above or below a top-k) is the walk's business (``chain.py``).
"""

from __future__ import annotations

import operator
from typing import Any

import torch
from torch.fx import Node

from ..fx import is_call, strip_casts, val
from .reads import last_dim, masked, row_param, topk_args
from .softmax import softmax_input

aten = torch.ops.aten


def _topk1_indices(idx: Any, probs: Node) -> int | None:
    """k when ``idx`` is ``topk(probs, k, -1)[1]`` (largest first), else None."""
    if not (is_call(idx, operator.getitem) and idx.args[1] == 1 and is_call(idx.args[0], aten.topk.default)):
        return None
    tk = idx.args[0]
    k, dim, largest = topk_args(tk)
    if tk.args[0] is not probs or not isinstance(k, int) or not last_dim(probs, dim) or not largest:
        return None
    return k


def read_min_p(s: Node, b: Any = None) -> tuple[Node, float | Node] | str | None:
    """HF ``MinPLogitsWarper`` -> (s0, min_p); a reason string for a near variant; None if not min-p at all.

    Graph form (transformers 5.x, after canonicalize): ``probs = softmax(s0)``;
    ``remove = lt(probs, mul(amax(probs, [-1], True), min_p))``; with min_tokens_to_keep = 1
    ``remove = scatter.value(remove, -1, topk(probs, 1)[1], False)`` (optional for a Python float
    0 <= min_p <= 1: the top token is never removed anyway); ``where(remove, -inf, s0)``. The kept set is
    then exactly ``probs >= min_p * max(probs)``, the op's min-p.

    ``min_p`` is a float, or a tensor node: ``dynamic=True``'s lifted float (a 0-d float64 input, which
    canonicalize casts to float32) or a per-row tensor of shape (B, 1), (1, 1), (1,) or (). A tensor's
    value is unknown at compile time, so it is fused only where the op follows eager for *any* value: the
    scatter is present (for min_p > 1 HF keeps the one top token ``topk`` picks; the reference does too,
    Triton keeps every tied maximum: the same token unless the maximum is tied; NaN or min_p <= 0 removes
    nothing in all three) and probabilities and threshold are float32 (the kernels compare in float32).
    """
    m = masked(s)
    if m is None:
        return None
    mask, s0 = m
    keep_k, scattered = 1, False
    if is_call(mask, aten.scatter.value):
        lt, dim, idx, fill = mask.args[:4]
        if not (is_call(lt, aten.lt.Tensor) and last_dim(lt, dim) and fill in (False, 0)):
            return None
        probs = lt.args[0]
        k = _topk1_indices(idx, probs)
        if k is None:
            return None
        keep_k, scattered = k, True
    elif is_call(mask, aten.lt.Tensor):
        lt = mask
    else:
        return None
    probs, thr = lt.args
    if not isinstance(probs, Node) or softmax_input(probs) is not s0:
        return None
    if not is_call(thr, aten.mul.Tensor):
        return None
    a, c = thr.args
    if not is_call(strip_casts(a), aten.amax.default):
        a, c = c, a
    cast = strip_casts(a) is not a  # a float64 min_p tensor promotes the max (reported below)
    a = strip_casts(a)
    if not (is_call(a, aten.amax.default) and a.args[0] is probs and last_dim(probs, a.args[1])
            and len(a.args) > 2 and a.args[2]) or (cast and not isinstance(c, Node)):
        return None
    if keep_k != 1:
        return f"min-p with min_tokens_to_keep = {keep_k} (only 1 is fused)"
    if isinstance(c, Node):
        if not row_param(c, s0, b):
            return ("min-p whose min_p is neither a number nor a float tensor of shape (B, 1), (1, 1), (1,) "
                    "or () is not fused")
        if not scattered:
            return ("min-p with a tensor min_p but without HF's keep-the-top-token scatter is not fused (a "
                    "min_p > 1 would remove every token)")
        dts = (getattr(val(probs), "dtype", None), getattr(val(thr), "dtype", None))
        if dts != (torch.float32, torch.float32):
            return (f"min-p with a tensor min_p comparing {dts[0]} probabilities against a {dts[1]} threshold "
                    "(the kernels compare in float32) is not fused")
        return s0, c
    if isinstance(c, bool) or not isinstance(c, (int, float)):
        return "min-p whose min_p is neither a number nor a float tensor is not fused"
    if not 0.0 <= float(c) <= 1.0:
        return f"min-p with min_p = {c} outside HF's [0, 1] is not fused"
    return s0, float(c)

