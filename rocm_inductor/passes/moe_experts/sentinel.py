"""HF's expert-parallel sentinel fill seen through: ``where(ids >= E, 0, x)`` is the identity when the ids come
from the router's top-k over the E experts (no id can be a sentinel). Some transformers releases apply it in
``grouped_mm`` always (seen on transformers 5.17), 5.24 only under expert parallelism.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
from torch.fx import Node

from ..fx import CONVERT, RESHAPES, is_call, known_equal, shape

aten = torch.ops.aten
#: Ops the ids travel through from the top-k to the fill's condition.
_IDS_UP = frozenset({*RESHAPES, CONVERT, aten.sort.default, aten.clone.default, aten.unsqueeze.default})


def _routed_ids(n: Any, experts: Any) -> bool:
    """``n`` is expert ids from a top-k over ``experts`` scores (``topk``, or the ``moe_routing`` op that replaced
    it; through views, sorts, casts): every id < E."""
    for _ in range(8):
        if is_call(n, aten.topk.default, torch.ops.rocm_fused.moe_routing.default):
            s = shape(n.args[0])
            return bool(s) and known_equal(s[-1], experts)
        if not (isinstance(n, Node) and n.op == "call_function" and n.args):
            return False
        if n.target not in _IDS_UP and n.target is not operator.getitem:
            return False
        n = n.args[0]
    return False


def sentinel_fill(n: Node, experts: Any) -> Node | None:
    """The value behind ``where(ids >= E, 0, x)`` (HF's expert-parallel sentinel fill) when the ids come from
    a top-k over the E experts, so no id is a sentinel and the fill is the identity; else None."""
    if not (is_call(n, aten.where.self) and len(n.args) == 3):
        return None
    cond, a, b = n.args
    while is_call(cond, aten.unsqueeze.default, *RESHAPES):
        cond = cond.args[0]
    if not (is_call(cond, aten.ge.Scalar) and isinstance(cond.args[1], int) and known_equal(cond.args[1], experts)
            and _routed_ids(cond.args[0], experts)):
        return None
    def _zero(v: Any) -> bool:
        v = v.args[1] if is_call(v, aten.full.default) else v
        return isinstance(v, (int, float)) and v == 0

    x = b if _zero(a) else a if _zero(b) else None
    return x if isinstance(x, Node) else None
