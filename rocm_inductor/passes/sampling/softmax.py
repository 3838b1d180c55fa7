"""Softmax as the post-grad graph spells it: ``exp(s - amax(s)) / sum(exp(s - amax(s)))`` over the last dim,
possibly wrapped in float casts, and Inductor's form of ``softmax(s / T)`` (a ``where`` over two equal
branches, one of them scaled by the sign of T). :func:`softmax_input` returns ``s``; everything else is not a
softmax this pass reads (None).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch.fx import Node

from ..fx import is_call, strip_casts
from .reads import last_dim, number

aten = torch.ops.aten


def _sign_of(w: Any, t: Any) -> bool:
    """``w`` is Inductor's ``where(t >= 0, 1, -1)`` (the sign of a tensor temperature ``t``)."""
    if not (is_call(w, aten.where.self) and is_call(w.args[0], aten.ge.Scalar) and w.args[0].args[0] is t
            and w.args[0].args[1] == 0):
        return False
    def num(x: Any) -> float | None:  # a number, a 0-d full, or scalar_tensor(c)
        return float(x.args[0]) if is_call(x, aten.scalar_tensor.default) and isinstance(x.args[0], (int, float)) \
            else number(x)

    one, neg = w.args[1], w.args[2]
    return num(one) == 1.0 and (num(neg) == -1.0 or (is_call(neg, aten.neg.default) and neg.args[0] is one))


def _scaled_softmax_branch(w: Node) -> Node | None:
    """Inductor's softmax(x / T) form ``where(finite, (m - amax(m)) / T', x / T - amax(x / T))`` (or its
    softmax(x * c) form, ``* (c * w)`` and ``x * c``).

    A Python-float T: ``m = x * w``, ``T' = T * w`` with ``w = 1`` for T >= 0, else -1. A tensor T (e.g. a
    per-row (B, 1) temperature): ``m = x * w``, ``T' = w * T`` with ``w = where(T >= 0, 1, -1)``. Both branches
    are the same value (Inductor picks the first when every score is finite): return the plain branch
    ``sub(x / T, amax(x / T))``, else None.
    """
    _, a, b = w.args
    if is_call(a, aten.mul.Tensor) and is_call(b, aten.sub.Tensor) and is_call(b.args[0], aten.mul.Tensor):
        # softmax(x * c), c a number (gpt-oss): where(finite, (x * w - amax(x * w)) * (c * w), x * c - amax(...))
        s, m, c2 = b.args[0], a.args[0].args[0] if is_call(a.args[0], aten.sub.Tensor) else None, a.args[1]
        x, c = s.args
        # m = x * w; with w = 1 canonicalize has already dropped the ``* 1`` (m is x itself)
        w, m0 = (m.args[1], m.args[0]) if is_call(m, aten.mul.Tensor) else (1, m)
        ok = isinstance(c, float) and w in (1, -1) and m0 is x and isinstance(c2, float) and c2 == c * w
        return b if ok else None
    if not (is_call(a, aten.div.Tensor) and is_call(b, aten.sub.Tensor) and is_call(b.args[0], aten.div.Tensor)):
        return None
    s = b.args[0]
    if not is_call(a.args[0], aten.sub.Tensor):
        return None
    m, t, t2 = a.args[0].args[0], s.args[1], a.args[1]
    if isinstance(t, (int, float)) and isinstance(t2, (int, float)):  # scalar T: w = sign(T) (NaN: -1)
        w = m.args[1] if is_call(m, aten.mul.Tensor) else 1
        m0 = m.args[0] if is_call(m, aten.mul.Tensor) else m
        same = t2 == t * w or (math.isnan(t) and math.isnan(t2))
        return b if w in (1, -1) and same and m0 is s.args[0] else None
    # tensor T: T' = w * T (either operand order) and m = x * w, w the sign of T
    if not (isinstance(t, Node) and is_call(t2, aten.mul.Tensor) and t in t2.args and is_call(m, aten.mul.Tensor)):
        return None
    sign = t2.args[0] if t2.args[1] is t else t2.args[1]
    if not _sign_of(sign, t) or sign not in m.args or s.args[0] not in m.args:
        return None
    return b


def softmax_input(p: Node) -> Node | None:
    """``s`` when ``p`` is softmax(s) over the last dim (decomposed form, float casts allowed), else None."""
    p = strip_casts(p)
    if not is_call(p, aten.div.Tensor):
        return None
    e, z = p.args
    if not (is_call(e, aten.exp.default) and is_call(z, aten.sum.dim_IntList) and z.args[0] is e
            and last_dim(e, z.args[1]) and (len(z.args) > 2 and z.args[2])):
        return None
    sub = e.args[0]
    if is_call(sub, aten.where.self):
        sub = _scaled_softmax_branch(sub)
    if not is_call(sub, aten.sub.Tensor):
        return None
    s, mx = sub.args
    if not (is_call(mx, aten.amax.default) and mx.args[0] is s and last_dim(s, mx.args[1])
            and len(mx.args) > 2 and mx.args[2]):
        return None
    return strip_casts(s)

