"""Canonical parts of a tensor: every way model code takes the pieces of one dim becomes ``slice`` / ``select``.

RoPE code takes the two rotated halves (or the even/odd features) in many spellings; after Inductor's
decompositions they reach our graph as (measured on torch 2.13, post-grad):

- ``x[..., :h]``, ``x[..., h:]``, ``tensor_split``         -> ``slice`` (already canonical)
- ``x.chunk(2, -1)``, ``torch.split(x, h, -1)``             -> ``getitem(split(x, h, -1), i)``
- ``torch.split(x, [a, b], -1)``                            -> ``getitem(split_with_sizes(x, [a, b], -1), i)``
- ``x.unbind(d)``                                           -> ``getitem(unbind(x, d), i)``
- ``x.view(..., 2, h).unbind(-2)`` (x-transformers)         -> ``getitem(unbind(reshape(x, [.., 2, h]), -2), i)``
- ``x.view(..., h, 2).unbind(-1)`` (EVA / rotary-embedding-torch), ``x.reshape(..., h, 2)[..., i]`` (gpt-fast,
  torchtune, ChatGLM)                                        -> ``select(reshape(x, [.., h, 2]), -1, i)``

This module rewrites them to one form before any pass matches (``canonicalize`` calls :func:`canonical_parts`
on every node):

- ``getitem(split*(x, sizes, d), i)``  -> ``slice(x, d, start_i, end_i)``;
- ``getitem(unbind(x, d), i)``         -> ``select(x, d, i)``;
- ``select(reshape(y, [*lead, m, h]), -2, i)`` with y of shape ``[*lead, m*h]``  -> ``slice(y, -1, i*h, (i+1)*h)``
  (block i of the last dim);
- ``select(reshape(y, [*lead, h, m]), -1, i)`` with y of shape ``[*lead, h*m]``  -> ``slice(y, -1, i, h*m, m)``
  (every m-th feature from i); a ``clone`` under the reshape (a reshape of a non-contiguous slice) is seen
  through.

Each rewrite is exact: the same elements in the same order (a view of the same storage, or of the value the
clone copied), so no pass sees a difference in values, only in spelling. Leading dims must be equal one for one
(``known_equal``: no guard); anything else is left as it was.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
from torch.fx import Graph, Node

from .fx import RESHAPES, insert_call, is_call, known_equal, val

aten = torch.ops.aten
_SPLITS = (aten.split.Tensor, aten.split_with_sizes.default)


def _dim(n: Node, pos: int, default: int = 0) -> Any:
    return n.args[pos] if len(n.args) > pos else n.kwargs.get("dim", default)


def _split_bounds(sp: Node, i: int) -> tuple[int, int, int] | None:
    """(dim, start, end) of piece ``i`` of a split node, None when a size is symbolic or out of range."""
    v = val(sp.args[0])
    d = _dim(sp, 2)
    if not isinstance(v, torch.Tensor) or not isinstance(d, int) or not -v.ndim <= d < v.ndim:
        return None
    d %= v.ndim
    size = v.shape[d]
    sizes = sp.args[1]
    if not isinstance(size, int):
        return None
    if isinstance(sizes, int):
        if sizes <= 0:
            return None
        bounds = [(s, min(s + sizes, size)) for s in range(0, size, sizes)] or [(0, 0)]
    elif isinstance(sizes, (list, tuple)) and all(isinstance(s, int) for s in sizes):
        starts = [sum(sizes[:k]) for k in range(len(sizes))]
        bounds = [(s, s + n) for s, n in zip(starts, sizes)]
    else:
        return None
    if not 0 <= i < len(bounds):
        return None
    return d, *bounds[i]


def _part_of_view(sel: Node) -> tuple[Node, tuple] | None:
    """``select(reshape(y, ...), d, i)`` as a slice of y's last dim: (y, slice args after y), or None."""
    r, d, i = sel.args[0], sel.args[1], sel.args[2]
    if not is_call(r, *RESHAPES) or not isinstance(d, int) or not isinstance(i, int):
        return None
    y = r.args[0]
    if is_call(y, aten.clone.default) and not y.kwargs:  # a reshape of a non-contiguous slice: clone + view
        y = y.args[0]
    rv, yv = val(r), val(y)
    if not (isinstance(rv, torch.Tensor) and isinstance(yv, torch.Tensor)) or rv.ndim != yv.ndim + 1 \
            or rv.ndim < 2:
        return None
    lead = rv.shape[:-2]
    if not all(known_equal(a, b) for a, b in zip(lead, yv.shape[:-1], strict=True)):
        return None
    m_, h_, last = rv.shape[-2], rv.shape[-1], yv.shape[-1]
    if not all(isinstance(s, int) for s in (m_, h_, last)) or m_ * h_ != last:
        return None
    d %= rv.ndim
    if d == rv.ndim - 2 and 0 <= i % m_ < m_:  # block i of the last dim
        i %= m_
        return y, (yv.ndim - 1, i * h_, (i + 1) * h_)
    if d == rv.ndim - 1:  # every h-th feature from i (h_ is the stride)
        i %= h_
        return y, (yv.ndim - 1, i, last, h_)
    return None


def canonical_parts(graph: Graph, n: Node) -> bool:
    """Rewrite ``n`` when it is one of the part spellings of the module docstring; True when changed (``n`` is
    then erased)."""
    if n.op != "call_function":
        return False
    new_target, args = None, None
    if n.target is operator.getitem and isinstance(n.args[1], int):
        src = n.args[0]
        if is_call(src, *_SPLITS):
            b = _split_bounds(src, n.args[1])
            if b is not None:
                new_target, args = aten.slice.Tensor, (src.args[0], *b)
        elif is_call(src, aten.unbind.int):
            v = val(src.args[0])
            d = _dim(src, 1)
            if isinstance(v, torch.Tensor) and isinstance(d, int):
                new_target, args = aten.select.int, (src.args[0], d % v.ndim, n.args[1])
    if new_target is aten.select.int or is_call(n, aten.select.int):
        probe = args if args is not None else n.args
        found = _part_of_view(_Sel(probe))
        if found is not None:
            new_target, args = aten.slice.Tensor, (found[0], *found[1])
    if new_target is None:
        return False
    new = insert_call(graph, n, new_target, args, like=n)
    a, b = val(new).shape, val(n).shape
    if len(a) != len(b) or not all(known_equal(p, q) for p, q in zip(a, b)):  # never (the bounds are the
        graph.erase_node(new)  # piece's): a guard, so a wrong rewrite can't happen silently
        return False
    n.replace_all_uses_with(new)
    graph.erase_node(n)
    return True


class _Sel:
    """A select's arguments as a node-like object (for a select not yet inserted)."""

    def __init__(self, args: tuple):
        self.args = args
