"""Canonicalize a post-grad ATen graph so that one pattern covers many spellings.

Rewrites, each exact (same values, same rounding) except where noted:
- ``add/sub/mul/div.Scalar`` -> ``.Tensor`` (the pattern matcher traces Python scalars as ``.Tensor``);
- implicit type promotion made explicit: ``mul(bf16, f32)`` -> ``mul(convert(bf16, f32), f32)``
  (T5's ``x * rsqrt(var)`` with un-cast x; F.rms_norm's fp32 weight multiply);
- ``x * 1`` / ``x / 1`` -> ``x`` where the dtype and shape stay (the node is left dead);
- ``mul(x, x)`` -> ``pow(x, 2)`` (gpt-fast's ``mean(x * x)``);
- ``div(a, sqrt(b))`` -> ``mul(a, rsqrt(b))``, ``reciprocal(sqrt(b))`` / ``pow(b, -0.5)`` -> ``rsqrt(b)``
  (not bit-exact in fp32: rsqrt and 1/sqrt differ by <= 1 ulp of float32);
- ``div(sum(p, [-1], keepdim), H)`` with H the reduced size -> ``mean(p, [-1], keepdim)``;
- reduction dims spelled positive (``[1]`` of a 2D tensor) -> negative (``[-1]``);
- common-subexpression elimination of pure nodes (HF RMSNorm upcasts the same input twice);
- operands of commutative ``add``/``mul`` ordered: higher rank first, then fewer broadcast (size-1) dims,
  then computed values before graph inputs (weights, buffers), scalars last; so ``w * x`` and ``x * w`` are one
  pattern (a 1-D ``x`` too), and ``rsqrt(...)`` comes after ``x``;
- the parts of a dim (``chunk`` / ``split`` / ``unbind`` / ``view(.., 2, h).unbind`` / ``reshape(.., h, 2)[..., i]``)
  -> ``slice`` / ``select`` of the tensor itself (``splits.py``);
- einsum's view chains (``unsqueeze`` / ``permute`` of size-1 dims / reshape) ending in a reshape -> one
  ``reshape`` or ``reshape(permute(x))`` of the chain's source (``views.py``).
Search functions of our patterns are written in this canonical order.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import torch
from torch._inductor.fx_passes.post_grad import remove_noop_ops
from torch.fx import Graph, Node

from .fx import fake_eval, insert_call, same, val_or_self  # noqa: F401  (fake_eval, insert_call: re-exported)
from .splits import canonical_parts
from .views import canonical_views

aten = torch.ops.aten
prims = torch.ops.prims

_SCALAR_TO_TENSOR = {
    aten.add.Scalar: aten.add.Tensor,
    aten.sub.Scalar: aten.sub.Tensor,
    aten.mul.Scalar: aten.mul.Tensor,
    aten.div.Scalar: aten.div.Tensor,
}
_BINARY = (aten.add.Tensor, aten.sub.Tensor, aten.mul.Tensor, aten.div.Tensor)
_COMMUTATIVE = (aten.add.Tensor, aten.mul.Tensor)

#: Ops without side effects whose duplicates can be merged. Random and in-place ops are never here.
PURE_OPS: set[Any] = {
    prims.convert_element_type.default, aten.pow.Tensor_Scalar, aten.mean.dim, aten.sum.dim_IntList,
    aten.rsqrt.default, aten.sqrt.default, aten.reciprocal.default, aten.neg.default, aten.add.Tensor,
    aten.sub.Tensor, aten.mul.Tensor, aten.div.Tensor, aten.view.default, aten.reshape.default,
    aten.unsqueeze.default, aten.squeeze.dim, aten.slice.Tensor, aten.select.int, aten.expand.default,
    aten.permute.default, aten.cat.default, aten.cos.default, aten.sin.default, aten.sigmoid.default,
    aten.clone.default, operator.getitem,
}


def _is_float_tensor(a: Any) -> bool:
    v = val_or_self(a)
    return isinstance(v, torch.Tensor) and v.is_floating_point()


def _operand_key(a: Any) -> tuple[int, int, int, int]:
    v = val_or_self(a)
    if not isinstance(v, torch.Tensor):
        return (1, 0, 0, 0)
    ones = sum(1 for s in v.shape if isinstance(s, int) and s == 1)
    # last tiebreak: a graph input (a weight, a buffer) after a computed value of the same rank and broadcast
    # dims, so HF's ``weight * y`` of a 1-D y is the pattern's ``y * weight`` too (at rank >= 2 the rank decides)
    return (0, -v.ndim, ones, int(isinstance(a, Node) and a.op in ("placeholder", "get_attr")))


def _scalar_to_tensor(graph: Graph, n: Node) -> bool:
    if n.target in _SCALAR_TO_TENSOR:
        n.target = _SCALAR_TO_TENSOR[n.target]
        return True
    return False


def _explicit_promotion(graph: Graph, n: Node) -> bool:
    if n.target not in _BINARY or len(n.args) != 2 or n.kwargs:
        return False
    a, b = n.args
    if not (_is_float_tensor(a) and _is_float_tensor(b)):
        return False
    out = val_or_self(n)
    if out is None:
        return False
    changed = False
    new_args = list(n.args)
    for i, arg in enumerate(n.args):
        if val_or_self(arg).dtype != out.dtype:
            new_args[i] = insert_call(graph, n, prims.convert_element_type.default, (arg, out.dtype), like=n)
            changed = True
    n.args = tuple(new_args)
    return changed


def _unit_scale(graph: Graph, n: Node) -> bool:
    # x * 1 / x / 1 -> x when the value keeps x's dtype and shape (x-transformers' RoPE ``* scale`` with scale 1.0)
    if n.target not in (aten.mul.Tensor, aten.div.Tensor) or len(n.args) != 2 or n.kwargs:
        return False
    x, one = n.args
    if n.target is aten.mul.Tensor and not isinstance(one, (int, float)):
        x, one = one, x
    if isinstance(one, bool) or not isinstance(one, (int, float)) or one != 1 or not isinstance(x, Node):
        return False
    xv, nv = val_or_self(x), val_or_self(n)
    if not (isinstance(xv, torch.Tensor) and isinstance(nv, torch.Tensor)) or xv.dtype != nv.dtype \
            or len(xv.shape) != len(nv.shape) or not all(same(a, b) for a, b in zip(xv.shape, nv.shape)):
        return False
    n.replace_all_uses_with(x)
    return True


def _square(graph: Graph, n: Node) -> bool:
    if n.target is aten.mul.Tensor and len(n.args) == 2 and n.args[0] is n.args[1]:
        n.target, n.args = aten.pow.Tensor_Scalar, (n.args[0], 2)
        return True
    return False


def _rsqrt(graph: Graph, n: Node) -> bool:
    # reciprocal(sqrt(b)) / pow(b, -0.5) -> rsqrt(b)
    if n.target is aten.reciprocal.default and isinstance(n.args[0], Node) \
            and n.args[0].target is aten.sqrt.default:
        n.target, n.args = aten.rsqrt.default, (n.args[0].args[0],)
        return True
    if n.target is aten.pow.Tensor_Scalar and n.args[1] == -0.5:
        n.target, n.args = aten.rsqrt.default, (n.args[0],)
        return True
    # div(a, sqrt(b)) -> mul(a, rsqrt(b))
    if n.target is aten.div.Tensor and isinstance(n.args[1], Node) and n.args[1].target is aten.sqrt.default:
        r = insert_call(graph, n, aten.rsqrt.default, (n.args[1].args[0],), like=n.args[1])
        n.target, n.args = aten.mul.Tensor, (n.args[0], r)
        return True
    return False


def _mean(graph: Graph, n: Node) -> bool:
    # div(sum(p, [d], keepdim), size(d)) -> mean(p, [d], keepdim)
    if n.target is not aten.div.Tensor or not isinstance(n.args[0], Node):
        return False
    s = n.args[0]
    if s.target is not aten.sum.dim_IntList or len(s.args) < 2 or len(s.args[1]) != 1 or s.kwargs:
        return False
    src = val_or_self(s.args[0])
    if src is None or not same(n.args[1], src.shape[s.args[1][0]]) or len(s.users) != 1:
        return False
    keep = s.args[2] if len(s.args) > 2 else False
    n.target, n.args = aten.mean.dim, (s.args[0], list(s.args[1]), keep)
    return True


def _negative_dims(graph: Graph, n: Node) -> bool:
    if n.target not in (aten.mean.dim, aten.sum.dim_IntList) or len(n.args) < 2:
        return False
    v = val_or_self(n.args[0])
    dims = n.args[1]
    if v is None or not isinstance(dims, (list, tuple)) or not dims:
        return False
    new = [d - v.ndim if isinstance(d, int) and d >= 0 else d for d in dims]
    if new != list(dims):
        n.args = (n.args[0], new, *n.args[2:])
        return True
    return False


def _commute(graph: Graph, n: Node) -> bool:
    if n.target not in _COMMUTATIVE or len(n.args) != 2 or n.kwargs:
        return False
    a, b = n.args
    if _operand_key(b) < _operand_key(a):
        n.args = (b, a)
        return True
    return False


#: Local rewrites, applied to every node in order.
REWRITES: tuple[Callable[[Graph, Node], bool], ...] = (
    _scalar_to_tensor, _explicit_promotion, _unit_scale, _square, _rsqrt, _mean, _negative_dims, _commute,
    canonical_parts, canonical_views,  # last: each may erase the node (the other then sees no match)
)


def cse(graph: Graph) -> int:
    """Merge duplicate pure nodes (same target, args, kwargs); return how many were removed."""
    seen: dict[Any, Node] = {}
    removed = 0
    for n in list(graph.nodes):
        if n.op != "call_function" or n.target not in PURE_OPS:
            continue
        try:
            key = (n.target, _hashable(n.args), _hashable(n.kwargs))
            hash(key)
        except TypeError:
            continue
        if key in seen:
            n.replace_all_uses_with(seen[key])
            graph.erase_node(n)
            removed += 1
        else:
            seen[key] = n
    return removed


def _hashable(x: Any) -> Any:
    if isinstance(x, (list, tuple)):
        return (type(x).__name__, tuple(_hashable(i) for i in x))
    if isinstance(x, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in x.items()))
    if isinstance(x, (torch.SymInt, torch.SymFloat)):
        return ("sym", str(x))
    return x


def canonicalize(graph: Graph) -> int:
    """Apply every rewrite in :data:`REWRITES` to every node, then CSE and dead-code elimination.

    Args:
        graph: a functional post-grad ATen graph whose nodes carry ``meta["val"]`` fake tensors.

    Returns:
        The number of changes made.
    """
    # We run as Inductor's post-grad *pre* pass, before its own no-op removal (x.float() of a float32 x).
    remove_noop_ops(graph)
    changes = 0
    for n in list(graph.nodes):
        if n.op != "call_function":
            continue
        for rewrite in REWRITES:
            changes += bool(rewrite(graph, n))
    changes += cse(graph)
    graph.eliminate_dead_code()
    return changes
