"""Pairing and emission: rotations that share cos and sin become one op for q and k (one launch), placed
after the last of its inputs; the on-the-fly op (``rocm_fused::rope``) or the cached one
(``rocm_fused::rope_cached``, its table a buffer of the graph module), and the match record of each.
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Any

import torch
from torch.fx import Graph, Node

from ...report import Match as MatchRecord
from ...report import describe, location_of
from ..fx import insert_call, same, val
from .cached import CachedPlan
from .rotation import Rotation

aten = torch.ops.aten


def group_key(r: Rotation) -> tuple:
    """What rotations of one op share: the same cos/sin nodes (after canonicalize's CSE), rotary_dim, style,
    head_dim and dtype."""
    c = r.cos[1] if isinstance(r.cos, tuple) else r.cos
    xv = val(r.inp)
    return (id(c), id(r.sin), r.rotary_dim, r.interleaved, r.half_table, xv.shape[-1], xv.dtype)


def head_axis(r: Rotation) -> int | None:
    """The dim of x the table broadcasts over (size 1 in the table, > 1 in x), when unique."""
    tv = val(r.cos[1] if isinstance(r.cos, tuple) else r.cos)
    xv = val(r.inp)
    if tv is None or xv is None:
        return None
    pad = xv.ndim - tv.ndim
    cands = [i for i in range(xv.ndim - 1)
             if (i < pad or same(tv.shape[i - pad], 1)) and not same(xv.shape[i], 1)]
    return cands[0] if len(cands) == 1 else None


def depends(inputs: list[Node], outs: list[Node], order: dict[Node, int]) -> bool:
    """True if any of ``inputs`` is computed from any of ``outs`` (forward walk, bounded by position)."""
    limit = max(order[n] for n in inputs)
    targets, seen = set(inputs), set()
    stack = [u for o in outs for u in o.users]
    while stack:
        n = stack.pop()
        if n in targets:
            return True
        if n in seen or order.get(n, limit + 1) > limit:
            continue
        seen.add(n)
        stack.extend(n.users)
    return False


@dataclasses.dataclass
class Pair:
    """One op's rotations (q, and k when paired) and where the op goes.

    Attributes:
        rots: one or two rotations sharing :func:`group_key`.
        before: the node the op is inserted before (the one after the last of its inputs).
        reorder: users of a rotation come before that spot: the graph is re-sorted after the rewrite.
        plan: the cached plan, when ``gate`` chose ``rope_cached``.
    """

    rots: list[Rotation]
    before: Node
    reorder: bool
    plan: CachedPlan | None = None


def place(graph: Graph, rots: list[Rotation]) -> Pair | None:
    """Where one op for ``rots`` goes; None when one rotation feeds the other's input (they can't share one op)."""
    order = {n: i for i, n in enumerate(graph.nodes)}
    r1 = rots[0]
    r2 = rots[1] if len(rots) == 2 else None
    tables = [r1.cos[1]] if isinstance(r1.cos, tuple) else [r1.cos, r1.sin]
    inputs = [r1.inp, *([r2.inp] if r2 else []), *tables]
    last = max(inputs, key=lambda n: order[n])
    first_use = min((order[u] for r in rots for u in r.out.users), default=len(order))
    reorder = order[last] >= first_use
    if reorder and depends(inputs, [r.out for r in rots], order):
        return None
    return Pair(rots, last.next, reorder)


def _replace(graph: Graph, pair: Pair, op: Node) -> None:
    """Each rotation's output becomes its item of the op's outputs."""
    for i, r in enumerate(pair.rots):
        g = insert_call(graph, pair.before, operator.getitem, (op, i), like=r.anchor)
        r.out.replace_all_uses_with(g)


def emit_rope(graph: Graph, pair: Pair, provider: str, reasons: list[str], why_not_cached: Any) -> MatchRecord:
    """Replace the pair by ``rocm_fused::rope`` (cos/sin as the model computed them; the complex form's are
    ``view_as_real(freqs_cis)[..., 0 | 1]``). ``why_not_cached``: the cached plan's reason, for the detail."""
    r1 = pair.rots[0]
    r2 = pair.rots[1] if len(pair.rots) == 2 else None
    before = pair.before
    if isinstance(r1.cos, tuple):  # complex: cos = Re(freqs_cis), sin = Im(freqs_cis), one per pair
        f = r1.cos[1]
        fr = insert_call(graph, before, aten.view_as_real.default, (f,), like=r1.anchor)
        cos = insert_call(graph, before, aten.select.int, (fr, -1, 0), like=r1.anchor)
        sin = insert_call(graph, before, aten.select.int, (fr, -1, 1), like=r1.anchor)
    else:
        cos, sin = r1.cos, r1.sin
    args = (r1.inp, r2.inp if r2 else None, cos, sin, r1.rotary_dim, r1.interleaved, r1.half_table, provider)
    op = insert_call(graph, before, torch.ops.rocm_fused.rope.default, args, like=r1.anchor)
    _replace(graph, pair, op)
    shape, dtype = describe(val(r1.inp))
    extra = [r1.note] if r1.note else []
    detail = "; ".join([f"on-the-fly: {why_not_cached}", *extra, *reasons])
    note = "; ".join(["on-the-fly (no cached table)", *extra, *reasons])  # the table's short form
    return MatchRecord("rope", "rope", provider, shape, dtype, location_of(r1.anchor), note, detail)


def table_node(graph: Graph, pair: Pair, tables: dict[tuple[int, int], Node]) -> Node:
    """The cached table of ``pair`` as a [max_pos, rotary_dim] view of a flat buffer registered on the graph
    module (one per cos/sin: layers share it; ``tables`` memoizes by ``(id(cos), id(sin))``)."""
    r1, plan = pair.rots[0], pair.plan
    key = (id(r1.cos), id(r1.sin))
    if key not in tables:
        qv = val(r1.inp)
        gm = graph.owning_module
        i = 0
        while hasattr(gm, f"_rocm_rope_cache_{i}"):
            i += 1
        name = f"_rocm_rope_cache_{i}"
        # Stored flat and viewed back: Inductor hands a constant that reaches an extern op directly to
        # the op's fake impl as a real tensor (which fake mode rejects); a view of it is a plain IR view.
        gm.register_buffer(name, plan.table.to(qv.device).reshape(-1))
        phs = [n for n in graph.nodes if n.op == "placeholder"]
        with (graph.inserting_after(phs[-1]) if phs else graph.inserting_before(next(iter(graph.nodes)))):
            flat = graph.get_attr(name)
        flat.meta["val"] = qv.fake_mode.from_tensor(getattr(gm, name))
        tables[key] = insert_call(graph, pair.before, aten.view.default, (flat, list(plan.table.shape)),
                                  like=r1.anchor)
    return tables[key]


def emit_cached(graph: Graph, pair: Pair, provider: str, reasons: list[str],
                tables: dict[tuple[int, int], Node]) -> MatchRecord:
    """Replace the pair by ``rocm_fused::rope_cached`` indexing the plan's table by the positions (reshaped to
    cos's leading shape); ``tables``: the graph's tables so far (:func:`table_node`)."""
    r1, plan = pair.rots[0], pair.plan
    r2 = pair.rots[1] if len(pair.rots) == 2 else None
    before = pair.before
    table = table_node(graph, pair, tables)
    pos = insert_call(graph, before, aten.reshape.default, (plan.positions, list(plan.lead)), like=r1.anchor)
    args = (r1.inp, r2.inp if r2 else None, pos, table, r1.rotary_dim, False, provider)
    op = insert_call(graph, before, torch.ops.rocm_fused.rope_cached.default, args, like=r1.anchor)
    _replace(graph, pair, op)
    shape, dtype = describe(val(r1.inp))
    extra = [r1.note] if r1.note else []
    detail = "; ".join([plan.note, *extra, *reasons])
    short = "; ".join([f"cached table [{plan.table.shape[0]}, {plan.table.shape[1]}]", *extra])  # short form
    return MatchRecord("rope", "rope_cached", provider, shape, dtype, location_of(r1.anchor),
                       "; ".join([short, *reasons]), detail)
