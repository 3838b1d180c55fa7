"""The FX kit every pass shares: reading fake values off nodes, testing targets, walking through casts and
views, comparing possibly symbolic sizes, and inserting new calls with a fake value and the user's stack trace.

One copy of each helper (they were copied per pass file). Pure functions over ``torch.fx`` nodes; no pass, op
or provider is imported here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.fx import Graph, Node
from torch.fx.experimental.symbolic_shapes import statically_known_true

aten = torch.ops.aten
prims = torch.ops.prims

#: ``prims.convert_element_type``: the cast every ``.to(dtype)`` / ``.float()`` / ``type_as`` becomes post-grad.
CONVERT = prims.convert_element_type.default
#: The reshape spellings of the post-grad graph (``view`` / ``reshape`` / ``_unsafe_view``).
RESHAPES = frozenset({aten.view.default, aten.reshape.default, aten._unsafe_view.default})


def val(n: Any) -> Any:
    """The fake tensor (or SymInt / number) a node carries in ``meta["val"]``; ``None`` for a non-node."""
    return n.meta.get("val") if isinstance(n, Node) else None


def val_or_self(a: Any) -> Any:
    """``meta["val"]`` of a node, or the argument itself (a number, a dtype) when it is not a node."""
    return a.meta.get("val") if isinstance(a, Node) else a


def is_call(n: Any, *targets: Any) -> bool:
    """True when ``n`` is a ``call_function`` node of one of ``targets``."""
    return isinstance(n, Node) and n.op == "call_function" and n.target in targets


def shape(n: Any) -> tuple:
    """The node's tensor shape (symbolic sizes as SymInts), ``()`` when it carries no tensor."""
    v = val(n)
    return tuple(v.shape) if isinstance(v, torch.Tensor) else ()


def ndim(n: Any) -> int:
    """The node's tensor rank, -1 when it carries no tensor."""
    v = val(n)
    return v.ndim if isinstance(v, torch.Tensor) else -1


def same(a: Any, b: Any) -> bool:
    """``a == b`` for sizes that may be symbolic; False where the comparison cannot be decided (an unbacked or
    data-dependent symbol raises instead of answering). May add a guard for backed symbols."""
    try:
        return bool(a == b)
    except Exception:
        return False


def known_equal(a: Any, b: Any) -> bool:
    """``a == b`` only when it holds for every value of the symbols (``statically_known_true``: no guard)."""
    return statically_known_true(a == b)


def strip_casts(n: Any) -> Any:
    """The node behind any chain of ``convert_element_type`` casts (``n`` itself when it is no cast)."""
    while isinstance(n, Node) and n.op == "call_function" and n.target is CONVERT and isinstance(n.args[0], Node):
        n = n.args[0]
    return n


def through(node: Any, ops: Iterable[Any]) -> Any:
    """Walk up first arguments while the node is one of ``ops`` (views, reshapes, casts)."""
    ops = frozenset(ops)
    while isinstance(node, Node) and node.op == "call_function" and node.target in ops and node.args:
        node = node.args[0]
    return node


def cudagraphs_on() -> bool:
    """Whether the compile in progress captures CUDA/HIP graphs (Inductor's ``triton.cudagraphs``)."""
    try:
        return bool(torch._inductor.config.triton.cudagraphs)
    except AttributeError:
        return False


def fake_eval(target: Callable, args: tuple, kwargs: dict | None = None) -> Any:
    """Run ``target`` on the fake values of ``args`` (for a new node's ``meta["val"]``); ``None`` when no
    argument carries a fake tensor."""
    vals = torch.fx.node.map_aggregate(args, val_or_self)
    kvals = torch.fx.node.map_aggregate(kwargs or {}, val_or_self)
    fake = next((v.fake_mode for v in torch.utils._pytree.tree_leaves((vals, kvals))
                 if hasattr(v, "fake_mode")), None)
    if fake is None:
        return None
    with fake:
        return target(*vals, **kvals)


def insert_call(graph: Graph, before: Node, target: Callable, args: tuple, kwargs: dict | None = None,
                like: Node | None = None) -> Node:
    """Insert ``target(*args)`` before ``before`` with a fake ``meta["val"]`` and ``like``'s stack trace (so the
    report and Inductor's provenance name the user's line)."""
    with graph.inserting_before(before):
        node = graph.call_function(target, args, kwargs or {})
    node.meta["val"] = fake_eval(target, args, kwargs)
    src = like if like is not None else before
    for key in ("stack_trace", "nn_module_stack", "source_fn_stack"):
        if key in src.meta:
            node.meta[key] = src.meta[key]
    return node
