"""The rope pass's discovery for ``rope_kv`` when the rope pass itself does not run (off on CUDA and ROCm by default).

:class:`CacheRoPE` is the rope pass (``passes/rope``: every spelling it recognises, folded and verified the same way)
restricted to the rotation groups one of whose outputs is written into a cache (``index_put(cache, [..., pos], ...)``,
through views), without its tuning step (``rope`` alone is measured slower than Inductor in context on the H200; the
fold is judged as a whole) and without match records of its own: the ``rope`` nodes it writes exist only for
``rope_kv`` to fold. :func:`undo` gives every such node that ``rope_kv`` did not fold back its rotations (their nodes
are still in the graph: the rope pass leaves the replaced rotations dead for the dead-code elimination after the last
pass), so a graph with the rope pass off never keeps a ``rocm_fused::rope`` op.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch._inductor.pattern_matcher import stable_topological_sort
from torch.fx import Graph, Node

from ..context import PassContext
from ..contract import Candidate
from ..fx import is_call
from ..rope import RoPEPass
from .read import VIEWS

aten = torch.ops.aten
ROPE = torch.ops.rocm_fused.rope.default


def _written(out: Node) -> bool:
    """True when ``out`` reaches the value of an ``index_put`` through views (a cache write)."""
    stack, seen = [out], set()
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        for u in n.users:
            if is_call(u, aten.index_put.default) and u.args[2] is n:
                return True
            if is_call(u, *VIEWS) and u.args[0] is n:
                stack.append(u)
    return False


class CacheRoPE(RoPEPass):
    """The rope pass on the rotation groups that feed a cache write (module docstring)."""

    name = "rope_kv"
    tuning_op = None

    def find(self, graph: Graph, ctx: PassContext) -> Iterable[Candidate]:
        """The rope pass's candidates whose group holds a rotation written into a cache (misses of other rotations
        are not this pass's to report)."""
        self.made: dict[Node, list[tuple[int, Node]]] = {}
        out = []
        for c in super().find(graph, ctx):
            r, why, group = c.data
            if why is None and any(_written(m.out) for m in group):
                out.append(c)
        return out

    def _plan(self, graph: Graph, r):
        """Never the cached table: ``rope_kv_write`` takes the model's cos/sin."""
        return "rope_kv_write takes the model's cos/sin"

    def emit(self, graph: Graph, ctx: PassContext, cand: Candidate, params, choice):
        """The rope pass's rewrite (output i replaces rotation i, ``rope.emit._replace``); remembers the rotations
        of the new node; no record."""
        before = set(graph.find_nodes(op="call_function", target=ROPE))
        super().emit(graph, ctx, cand, params, choice)
        for node in set(graph.find_nodes(op="call_function", target=ROPE)) - before:
            self.made[node] = [(i, r.out) for i, r in enumerate(params.rots)]
        return None

    def finish(self, graph: Graph, ctx: PassContext) -> None:
        """Nothing here (:func:`undo` runs after ``rope_kv``'s folds)."""


def undo(graph: Graph, made: dict[Node, list[tuple[int, Node]]]) -> int:
    """Give each ``rope`` node of ``made`` still in the graph its rotations back; returns how many were undone."""
    n = 0
    for node, outs in made.items():
        if getattr(node, "_erased", False) or node.graph is not graph:
            continue
        back = dict(outs)
        for g in list(node.users):
            if g.args[1] in back:
                g.replace_all_uses_with(back[g.args[1]])
            graph.erase_node(g)
        graph.erase_node(node)
        n += 1
    if n:
        stable_topological_sort(graph)  # data order only: the rotations come before their readers again
    return n
