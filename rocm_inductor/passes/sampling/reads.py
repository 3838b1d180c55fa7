"""Small reads shared by the sampling chain's stages: a last-dim argument, the constants ``-inf`` and 0-d
numbers, the ``where(mask, -inf, s)`` every filter ends in, a per-row parameter's shape, ``topk``'s arguments.
Pure functions over post-grad ``torch.fx`` nodes (after ``canonicalize``).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch.fx import Node

from ..fx import is_call, ndim, same, val

aten = torch.ops.aten


def last_dim(n: Node, d: Any) -> bool:
    """``d`` names the last dim of ``n`` (``-1`` or ``ndim - 1``, bare or as a one-element list)."""
    nd = ndim(n)
    if isinstance(d, (list, tuple)):
        if len(d) != 1:
            return False
        d = d[0]
    return isinstance(d, int) and nd > 0 and d in (-1, nd - 1)


def neg_inf(a: Any) -> bool:
    """``a`` is the constant -inf (a Python float or ``full([], -inf)``)."""
    if isinstance(a, (int, float)):
        return a == -math.inf
    return is_call(a, aten.full.default) and a.args[0] in ([], ()) and a.args[1] == -math.inf


def number(x: Any) -> float | None:
    """The value of a Python number or a 0-d ``aten.full`` constant, else None (a bool is no number)."""
    if isinstance(x, bool):
        return None
    if isinstance(x, (int, float)):
        return float(x)
    if is_call(x, aten.full.default) and list(x.args[0]) == [] and isinstance(x.args[1], (int, float)):
        return float(x.args[1])
    return None


def masked(s: Node) -> tuple[Node, Node] | None:
    """``where(mask, -inf, s0)`` -> (mask, s0), else None: the last step of every filter and of a ban."""
    if is_call(s, aten.where.self) and neg_inf(s.args[1]) and isinstance(s.args[2], Node):
        return s.args[0], s.args[2]
    return None


def row_param(t: Any, s0: Node, b: Any) -> bool:
    """``t`` is a per-row float tensor for the (B, V) scores ``s0``: shape (B, 1), (1, 1), (1,) or ()."""
    tv = val(t)
    if not isinstance(tv, torch.Tensor) or not tv.is_floating_point() or ndim(s0) != 2:
        return False
    shape = tuple(tv.shape)
    return shape in ((), (1,), (1, 1)) or (len(shape) == 2 and same(shape[1], 1) and same(shape[0], b))


def topk_args(tk: Node) -> tuple[Any, Any, Any]:
    """``(k, dim, largest)`` of an ``aten.topk`` node, positional or keyword (defaults -1, True)."""
    dim = tk.args[2] if len(tk.args) > 2 else tk.kwargs.get("dim", -1)
    largest = tk.args[3] if len(tk.args) > 3 else tk.kwargs.get("largest", True)
    return tk.args[1], dim, largest
