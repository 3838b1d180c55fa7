"""Canonical view chains: a reshape reached through ``unsqueeze`` / ``squeeze`` / ``permute`` / reshape nodes
becomes ``reshape(x)`` or ``reshape(permute(x, p))`` of the chain's source.

``torch.einsum`` decomposes into bmm operands and results behind chains such as
``reshape(permute(permute(unsqueeze(q, 4), ..), ..), [B*H, Lq, D])`` whose permutes only move size-1 dims (or
one real transpose between them). The passes' matchers read ``reshape(x4)`` / ``reshape(permute(k, [0, 1, 3,
2]))``, the forms HF's ``matmul`` gives; after this rewrite an einsum attention is one of them.

Exact: reshape reads elements in row-major order, so a chain of views ending in a reshape equals one reshape of
the chain's source once the order of the non-size-1 dims is known (``permute`` of size-1 dims moves no element).
Only chains that hold a ``permute`` and get shorter are rewritten (``reshape(permute(view(x)))`` of a head split
stays as it is for the other passes).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.fx import Graph, Node

from .fx import RESHAPES, insert_call, is_call, known_equal, shape

aten = torch.ops.aten
_SQUEEZES = (aten.squeeze.dim, aten.squeeze.dims)
_CHAIN = (*RESHAPES, aten.unsqueeze.default, *_SQUEEZES, aten.permute.default)


def _one(d: Any) -> bool:
    return isinstance(d, int) and d == 1


def _dims(n: Node) -> list:
    """Per dim of ``n``: None for a size known to be 1, else the dim's index in ``n`` (the source order)."""
    return [None if _one(d) else i for i, d in enumerate(shape(n))]


def _step(node: Node, state: list) -> list | None:
    """The source-dim list after ``node`` (an unsqueeze / squeeze / permute of a tensor with ``state``), None
    when a squeezed dim is not known to be 1."""
    if node.target is aten.unsqueeze.default:
        d = node.args[1] % (len(state) + 1)
        return state[:d] + [None] + state[d:]
    if node.target in _SQUEEZES:
        dims = node.args[1] if isinstance(node.args[1], (list, tuple)) else [node.args[1]]
        drop = {d % len(state) for d in dims}
        if any(state[d] is not None for d in drop):
            return None
        return [s for i, s in enumerate(state) if i not in drop]
    return [state[p % len(state)] for p in node.args[1]]


def _chain(r: Node) -> tuple[Node, list[Node]]:
    """The longest view chain ending at reshape ``r``: (source, chain ops in order)."""
    ops, n = [], r.args[0]
    while isinstance(n, Node) and n.op == "call_function" and n.target in _CHAIN:
        ops.append(n)
        n = n.args[0]
    return n, ops[::-1]


def _order(src: Node, ops: list[Node]) -> tuple[Node, list, int] | None:
    """``(source, order, ops used)``: the order of the source's non-size-1 dims after the chain. A reshape that
    splits or merges dims starts the chain anew (its output is the new source); None if a squeeze is not
    tracked."""
    state, used = _dims(src), len(ops)
    for i, op in enumerate(ops):
        if op.target in RESHAPES:
            kept_in = [shape(src)[s] for s in state if s is not None]
            kept_out = [d for d in shape(op) if not _one(d)]
            if len(kept_in) == len(kept_out) and all(known_equal(a, b) for a, b in zip(kept_in, kept_out)):
                it = iter([s for s in state if s is not None])
                state = [None if _one(d) else next(it) for d in shape(op)]
            else:
                src, state, used = op, _dims(op), len(ops) - i - 1
        else:
            state = _step(op, state)
            if state is None:
                return None
    return src, [s for s in state if s is not None], used


def canonical_views(graph: Graph, r: Node) -> bool:
    """Rewrite reshape ``r`` at the end of an einsum-style view chain (module docstring); True if changed."""
    if r.op != "call_function" or r.target not in RESHAPES:
        return False
    src, ops = _chain(r)
    if not any(op.target is aten.permute.default for op in ops):
        return False
    found = _order(src, ops)
    if found is None:
        return False
    src, order, used = found
    x = src
    if (is_call(src, *RESHAPES) and order == sorted(order)
            and len(shape(src)) > len(shape(r)) > len(shape(src.args[0]))):
        # reshape(reshape(y)) == reshape(y); only through einsum's temporary higher-rank view back up from a
        # bmm (3D -> 5D -> 4D). A head repeat's reshape (5D -> 4D) and HF's P @ V view before the head merge
        # (3D -> 4D -> 3D) stay: the attention pass reads them
        x, used = src.args[0], used + 1
    need_permute = order != sorted(order)
    if used <= int(need_permute):  # not shorter than what is there
        return False
    if need_permute:
        singles = [i for i in range(len(shape(src))) if i not in order]
        x = insert_call(graph, r, aten.permute.default, (src, [*order, *singles]), like=r)
    new = insert_call(graph, r, r.target, (x, r.args[1]), like=r)
    r.replace_all_uses_with(new)
    graph.erase_node(r)
    return True
