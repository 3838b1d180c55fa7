"""Where a merge can go: one op replaces several GEMMs, so every input of every member must be computed
before the first use of any member's output. Inputs computed late (a weight cast or built inside each
``Linear.forward``) move earlier when that is exact (:func:`_hoist`); a member whose input depends on another
member's output cannot merge, and the others go on without it (:func:`schedule`).
"""

from __future__ import annotations

import torch
from torch.fx import Graph, Node

from ..context import PassContext
from ..contract import Candidate, Miss, record_miss
from .group import Gemm

LATE = "an input of this GEMM is computed from another GEMM's output: merging would reorder the graph"
STUCK = ("an input of one GEMM is computed, after another GEMM's output is used, by an op that cannot move "
         "earlier (side effects or random numbers): merging would reorder the graph")


def _reads(g: Gemm, outputs: set, floor: int, order: dict) -> bool:
    """Whether ``g``'s activation, weight or bias is computed from one of ``outputs`` (nodes at >= floor)."""
    stack = [n for n in (g.act, g.weight, g.bias) if isinstance(n, Node)]
    seen: set[Node] = set()
    while stack:
        n = stack.pop()
        if n in outputs:
            return True
        if n in seen or order.get(n, -1) < floor:
            continue
        seen.add(n)
        stack.extend(n.all_input_nodes)
    return False


def _hoist(inputs: list, gemms: list[Gemm], hi: int, order: dict) -> bool:
    """Move the computation of the group's late inputs before the first use of any member's output.

    A weight cast or built inside each ``Linear.forward`` (``F.linear(x, self.weight.to(x.dtype))``, autocast,
    a LoRA-merged ``w + a @ b``) is computed after the previous projection's output is already used (HF views
    q before k_proj runs). Those nodes (every ancestor of an input placed at or after position ``hi``) move,
    in their order, just before the node at ``hi``, if none of them is a member GEMM, reads a member's output
    (a real dependency), has side effects or draws random numbers. Returns whether it moved them; ``order``
    is refreshed when it did.
    """
    first_use = next(n for n, i in order.items() if i == hi)
    members = {g.node for g in gemms}
    outputs_read = {u for g in gemms for u in g.node.users}
    late: set[Node] = set()
    stack = [n for n in inputs if isinstance(n, Node) and order.get(n, -1) >= hi]
    while stack:
        n = stack.pop()
        if n in late:
            continue
        if (n in members or n in outputs_read or n.op != "call_function" or n.is_impure()
                or torch.Tag.nondeterministic_seeded in getattr(n.target, "tags", ())):
            return False
        late.add(n)
        stack.extend(a for a in n.all_input_nodes if order.get(a, -1) >= hi)
    for n in sorted(late, key=order.__getitem__):
        first_use.prepend(n)
    order.clear()
    order.update((n, i) for i, n in enumerate(first_use.graph.nodes))
    return True


def inputs_of(gemms: list[Gemm]) -> list:
    """The op's inputs: the shared activation, then every weight, then every bias there is."""
    return [gemms[0].act] + [g.weight for g in gemms] + [g.bias for g in gemms if g.bias is not None]


def schedule(graph: Graph, ctx: PassContext, pass_name: str, cand: Candidate, gemms: list[Gemm],
             single: bool) -> list[Gemm]:
    """The members that can merge, late inputs hoisted; ``cand.anchor`` becomes the first of them.

    Each GEMM is read again from its (still live) node: an earlier merge may have replaced its activation,
    weight or bias (the output of a GEMM merged before, now a getitem) and erased the node it read. A member
    that reads another's output is reported (:data:`LATE`) and the rest are scheduled again.

    Raises:
        Miss: :data:`STUCK` when no member is late but an input still cannot move; silent when fewer than two
            members are left (or for a single GEMM, which cannot be out of order).
    """
    order = {n: i for i, n in enumerate(graph.nodes)}
    while True:
        gemms = [Gemm(g.node) for g in gemms]
        cand.anchor = gemms[0].node
        inputs = inputs_of(gemms)
        users = [u for g in gemms for u in g.node.users]
        lo = max((order.get(n, -1) for n in inputs if isinstance(n, Node)), default=-1)
        hi = min((order.get(u, 1 << 60) for u in users), default=1 << 60)
        if lo < hi or (not single and _hoist(inputs, gemms, hi, order)):
            return gemms
        if single:  # cannot happen for one mm node (its inputs precede it, its users follow it)
            raise Miss("", silent=True)
        outs = {g.node for g in gemms}
        floor = min(order[g.node] for g in gemms)
        late = [g for g in gemms if _reads(g, outs, floor, order)]
        if not late:
            raise Miss(STUCK)
        record_miss(ctx, pass_name, cand, Miss(LATE, anchors=[g.node for g in late]))
        gemms = [g for g in gemms if g not in late]
        if len(gemms) < 2:  # the GEMMs that do not depend on the others still merge, two or more of them
            raise Miss("", silent=True)
