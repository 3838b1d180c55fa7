"""What makes ``x * sigmoid(g)`` a sigmoid output gate rather than another op (SiLU, a GLU activation, a router's
broadcast sigmoid), and whether its product feeds a projection (where the extern op costs nothing: the matmul
ends Inductor's fusion anyway). Shared by the pattern path (``patterns.py``) and discovery (``__init__.py``).
"""

from __future__ import annotations

import operator
from typing import Any

import torch
from torch.fx import Node

from ...report import dtype_name
from ..fx import is_call, known_equal, through

aten = torch.ops.aten

#: Ops that only re-view, slice, copy or split a tensor: an operand's "source" is found through them.
VIEW_OPS: frozenset[Any] = frozenset({
    aten.view.default, aten.reshape.default, aten._unsafe_view.default, aten.clone.default,
    aten.permute.default, aten.transpose.int, aten.t.default, aten.slice.Tensor, aten.select.int,
    aten.squeeze.dim, aten.squeeze.dims, aten.unsqueeze.default, aten.alias.default, aten.split.Tensor,
    aten.split_with_sizes.default, aten.chunk.default, aten.narrow.default, operator.getitem,
})
#: Ops through which the gate's output may travel on its way to the projection (shape-only changes).
FORWARD_OPS: frozenset[Any] = frozenset({
    aten.view.default, aten.reshape.default, aten._unsafe_view.default, aten.clone.default,
    aten.alias.default,
})
#: Projections: target -> index of the activation operand (``addmm(bias, input, weight)``).
PROJECTIONS: dict[Any, int] = {aten.mm.default: 0, aten.addmm.default: 1, aten.bmm.default: 0}
if hasattr(aten, "_scaled_mm"):
    PROJECTIONS[aten._scaled_mm.default] = 0

WHAT = "sigmoid gate"
NOT_PROJECTED = ("the product does not feed a projection (mm/addmm/bmm): Inductor fuses it with its "
                 "elementwise neighbours, a separate op would cost a kernel")


def source(node: Any) -> Any:
    """The node ``node`` is a view / slice / split / copy of (itself when it is none of these)."""
    return through(node, VIEW_OPS)


#: Elementwise ops that scale, shift or cast one tensor by a constant: ``sigmoid(1.702 * x)`` (QuickGELU) still
#: reads ``x``. A node of these with exactly one tensor operand is seen through by :func:`root`.
SCALAR_OPS: frozenset[Any] = frozenset({
    aten.mul.Tensor, aten.mul.Scalar, aten.div.Tensor, aten.div.Scalar, aten.add.Tensor, aten.add.Scalar,
    aten.sub.Tensor, aten.sub.Scalar, aten.neg.default, aten._to_copy.default,
    torch.ops.prims.convert_element_type.default,
})


def _pointwise_of_one(node: Node) -> bool:
    """An elementwise op (``torch.Tag.pointwise``: tanh, exp, erf, ...) with exactly one tensor operand."""
    tags = getattr(node.target, "tags", ())
    return torch.Tag.pointwise in tags and len([a for a in node.args if isinstance(a, Node)]) == 1 \
        and not any(isinstance(v, Node) for v in node.kwargs.values())


def root(node: Any) -> Any:
    """The tensor ``node`` is computed from by views, constant scales / shifts / casts and elementwise functions of
    it alone (itself if none).

    ``1.702 * x``, ``x.float() / 2`` and a softcap ``c * tanh(x / c)`` (Inkling2's SwiGLU: ``softcap(g) *
    sigmoid(g)``) have root ``x``; ``a * b`` of two tensors is its own root.
    """
    seen = set()
    while isinstance(node, Node) and node not in seen:
        seen.add(node)
        s = source(node)
        if s is not node:
            node = s
            continue
        if node.op != "call_function" or not (node.target in SCALAR_OPS or _pointwise_of_one(node)):
            break
        tensors = [a for a in node.args if isinstance(a, Node)]
        if len(tensors) != 1:
            break
        node = tensors[0]
    return node


def _projection_input(node: Any) -> Any:
    """When ``node`` (through views) is a projection's output, the source of its activation; else None."""
    s = source(node)
    if is_call(s, *PROJECTIONS):
        return source(s.args[PROJECTIONS[s.target]])
    return None


def not_this_op(x: Node, g: Node) -> str | None:
    """Why ``x * sigmoid(g)`` is SiLU or a GLU activation rather than an output gate (None if it is a gate).

    Args:
        x: the multiplied operand's node; g: the sigmoid's input node.
    """
    sx, sg = source(x), source(g)
    if sx is sg:
        return "SiLU" if x is g else "GLU (both operands slices of one tensor)"
    if root(x) is root(g):  # the gate must come from another tensor than the value
        return "an activation of one tensor (SiLU / QuickGELU: x * sigmoid(a * x))"
    px, pg = _projection_input(x), _projection_input(g)
    if px is not None and px is pg:
        return "GLU MLP (both operands projections of one activation)"
    return None


def feeds_projection(node: Node) -> bool:
    """True when ``node``'s value reaches a projection's activation operand through shape-only ops."""
    todo, seen = [node], set()
    while todo:
        n = todo.pop()
        for u in n.users:
            if u in seen or u.op != "call_function":
                continue
            seen.add(u)
            idx = PROJECTIONS.get(u.target)
            if idx is not None and len(u.args) > idx and u.args[idx] is n:
                return True
            if u.target in FORWARD_OPS and u.args and u.args[0] is n:
                todo.append(u)
    return False


def same_shape(a: torch.Tensor, b: torch.Tensor) -> bool:
    """One rank and sizes equal for every value of the symbols (no broadcast, no guard)."""
    if a.ndim != b.ndim:
        return False
    return all(known_equal(p, q) for p, q in zip(a.shape, b.shape, strict=True))


def read_dtype_reason(x: Node, g: Node) -> str:
    """The near-miss text for a gate whose operands, as the multiply and the sigmoid read them, differ in dtype:
    names the operands actually read (after their casts), not the tensors behind the casts."""
    xv, gv = x.meta.get("val"), g.meta.get("val")
    return (f"x as the multiply reads it ({x.name}) is {dtype_name(xv)}, the gate the sigmoid reads ({g.name}) is "
            f"{dtype_name(gv)}, and neither cast leaves them one dtype: the op takes x and the gate in one of "
            "float16/bfloat16/float32")


def dtype_reason(x: Any, g: Any, out: Any = None) -> str:
    """The near-miss text for dtypes the op does not take (x, gate, and the output when given)."""
    if out is None:
        return (f"dtypes x={dtype_name(x)}, gate={dtype_name(g)}: the op takes one of float16/bfloat16/float32 "
                "for both")
    return (f"dtypes x={dtype_name(x)}, gate={dtype_name(g)}, out={dtype_name(out)}: the op takes one of "
            "float16/bfloat16/float32 for all three")
