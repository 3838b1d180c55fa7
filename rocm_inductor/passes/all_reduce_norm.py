"""Tensor-parallel all-reduce + residual add + RMSNorm -> ``rocm_fused::all_reduce_add_rms_norm``.

In a tensor-parallel decoder each row-parallel projection (attention's o_proj, the MLP's down_proj) ends in
an all-reduce (sum) across the ranks, then the residual add and the next RMSNorm. Under torch.compile that
reaches the post-grad graph as ``_c10d_functional.all_reduce(t, "sum", group_name)`` -> ``wait_tensor`` ->
add -> RMSNorm, from either spelling:
- gpt-fast's ``tp.py``: ``funcol.all_reduce(output, "sum", list(range(world_size)))`` in a forward hook
  (the rank list is resolved to the group's name while tracing);
- ``torch.distributed.all_reduce(h)`` on the projection's output (Dynamo turns the in-place collective
  into the functional one).
This pass runs after the ``rms_norm`` pass (``passes/__init__.py`` order) and so inherits its spellings,
weight forms and Gemma offset: it rewrites
- ``fused_add_rms_norm(wait(all_reduce(t)), residual, ...)`` (the reduced tensor as either operand), and
- ``rms_norm(add(wait(all_reduce(t)), residual), ...)`` (the add left apart, e.g. no provider took the
  fused op), whose sum may also be used as the next residual.
Between ``wait_tensor`` and the add only reshapes / views and a broadcast over leading size-1 dims may sit
(gpt-fast's attention hook all-reduces ``output[0]``, which the add broadcasts back over a batch of one).
Deliberately left alone, each reported as a near-miss with its reason: a reduce op other than sum; a
reduced tensor that is also used elsewhere (the fused op does not return it); one that feeds anything but
a residual add (Granite's scaled ``residual + h * m``); an add whose sum is not normalised; any match no
provider takes (token counts beyond a vendor workspace, world sizes it has no kernel for). If the ``rms_norm``
pass did not run, the norms are still ATen ops and nothing here matches (reported).

The steps (``passes/contract.py``): ``find`` takes every rewritten norm an all-reduce feeds, ``read`` its
operands, ``gate`` the provider, ``emit`` the new op; ``finish`` explains each all-reduce left.

   t ─► all_reduce ─► wait ─► + ─► rocm_fused::fused_add_rms_norm ─► (y, s)
                       residual ┘                      ==>   rocm_fused::all_reduce_add_rms_norm(t, residual, ...)
"""

from __future__ import annotations

import dataclasses
import math
import operator
from collections.abc import Iterable
from typing import Any

import torch
from torch._inductor.pattern_matcher import stable_topological_sort
from torch.fx import Graph, Node

from ..ops.all_reduce_norm import all_reduce_norm_spec
from ..platform import Choice
from ..registry import ops_of
from ..report import Match as MatchRecord
from ..report import NearMiss, describe, dtype_name, location_of
from .context import PassContext
from .contract import Candidate, Miss, RewritePass, choose_or_miss
from .fx import insert_call, is_call, val

aten = torch.ops.aten
_fc = torch.ops._c10d_functional
OP = "all_reduce_add_rms_norm"
WHAT = "all-reduce + residual add + RMSNorm"

#: Shape-only ops allowed between ``wait_tensor`` and the residual add (row-major: they commute with an
#: elementwise all-reduce).
VIEW_OPS = frozenset({aten.view.default, aten.reshape.default, aten._unsafe_view.default, aten.alias.default})


def _targets() -> tuple[Any, Any, Any, Any]:
    return (_fc.all_reduce.default, _fc.wait_tensor.default, torch.ops.rocm_fused.fused_add_rms_norm.default,
            torch.ops.rocm_fused.rms_norm.default)


def _group_name(g: Any) -> str | None:
    """The group's name as a string (torch 2.13's schema takes ``Any``: a ProcessGroup object has one)."""
    if isinstance(g, str):
        return g
    name = getattr(g, "group_name", None)
    return name if isinstance(name, str) else None


def _reduced_chain(n: Any) -> tuple[Node, list[Node]] | None:
    """If ``n`` is ``wait_tensor(all_reduce(t))`` behind views: (the all_reduce node, [wait, views...])."""
    all_reduce, wait = _targets()[:2]
    chain: list[Node] = []
    while is_call(n, *VIEW_OPS):
        chain.append(n)
        n = n.args[0]
    if isinstance(n, Node) and n.target is wait and isinstance(n.args[0], Node) \
            and n.args[0].target is all_reduce:
        return n.args[0], [n, *reversed(chain)]
    return None


def _max_tokens(v: Any) -> int | None:
    """Product of the leading dims of fake tensor ``v``: its value, or its ShapeEnv upper bound."""
    lead = list(v.shape[:-1])
    if all(isinstance(d, int) for d in lead):
        return math.prod(lead)
    from ..buckets import m_upper_bound

    prod = math.prod(lead)
    env = next((d.node.shape_env for d in lead if isinstance(d, torch.SymInt)), None)
    return m_upper_bound(prod, getattr(env, "var_to_range", None))


@dataclasses.dataclass
class Reduced:
    """One norm an all-reduce feeds: the norm (``is_fused``: a ``fused_add_rms_norm``), its separate add (rms_norm
    of an add) or None, the all-reduce and the wait/views after it, the residual, the norm's weight / eps /
    offset, the group's name, the op's first argument (None: reshape ``ar``'s input to the residual's shape)."""

    norm: Node
    is_fused: bool
    add: Node | None
    ar: Node
    chain: list[Node]
    residual: Node
    w: Any
    eps: Any
    offset: Any
    group: str
    x_arg: Any


def _operands(norm: Node) -> tuple[Node | None, Any, Any, Any, Any, Any] | None:
    """(add or None, a, b, w, eps, offset) of a ``fused_add_rms_norm`` / ``rms_norm``-of-an-add node."""
    if norm.target is _targets()[2]:
        a, b, w, eps, offset = norm.args[:5]
        return None, a, b, w, eps, offset
    add = norm.args[0]
    if not (is_call(add, aten.add.Tensor) and len(add.args) == 2 and not add.kwargs
            and all(isinstance(o, Node) for o in add.args)):
        return None
    return (add, *add.args, *norm.args[1:4])


def _found(ops: tuple | None) -> tuple[tuple[Node, list[Node]], Any] | None:
    """((all_reduce, chain), residual) when one operand of the add is the all-reduced tensor."""
    if ops is None:
        return None
    a, b = ops[1:3]
    return next(((c, r) for c, r in ((_reduced_chain(a), b), (_reduced_chain(b), a)) if c is not None), None)


def _read(norm: Node) -> Reduced:
    """The all-reduce, the residual and the norm's parameters, checked (the module docstring's list).

    Raises:
        Miss: the reduce op, the group, another user of the reduced tensor, dtypes or shapes rule it out
            (silent: the norm's operands no longer hold an all-reduce, or a value is missing).
    """
    ops = _operands(norm)
    found = _found(ops)
    if found is None:
        raise Miss("", silent=True)
    add, _, _, w, eps, offset = ops
    (ar, chain), residual = found
    reduce_op, group = ar.args[1], _group_name(ar.args[2])
    if str(reduce_op).lower() != "sum":
        raise Miss(f"the all-reduce's op is {reduce_op!r}, not 'sum': not a tensor-parallel partial sum")
    if group is None:
        raise Miss(f"the all-reduce's group {ar.args[2]!r} is not a group name")
    for n in (ar, *chain):
        if len(n.users) != 1:
            others = ", ".join(sorted(str(u.target) for u in n.users))
            raise Miss(f"the all-reduced tensor is also used elsewhere ({others}); the fused op does not "
                       "return it: left to Inductor")
    t_val, r_val, red_val = val(ar.args[0]), val(residual), val(chain[-1])
    out_val = val(add) if add is not None else r_val
    if t_val is None or r_val is None or red_val is None or out_val is None:
        raise Miss("", silent=True)
    if red_val.dtype != r_val.dtype or out_val.dtype != r_val.dtype:
        raise Miss(f"the residual add mixes dtypes ({dtype_name(red_val)} + {dtype_name(r_val)}): not a "
                   "residual add in the model dtype")
    if tuple(out_val.shape) != tuple(r_val.shape):
        raise Miss(f"the residual {tuple(r_val.shape)} is broadcast to {tuple(out_val.shape)}: not a "
                   "residual add")
    x_arg: Any = ar.args[0]
    if tuple(t_val.shape) != tuple(r_val.shape):
        same = t_val.numel() == r_val.numel() and t_val.shape[-1] == r_val.shape[-1]
        if not (same and all(isinstance(d, int) for d in r_val.shape)):
            raise Miss(f"the all-reduced tensor {tuple(t_val.shape)} is not a row-major view of the "
                       f"residual {tuple(r_val.shape)} (or the shapes are symbolic)")
        x_arg = None  # reshaped by emit
    return Reduced(norm, norm.target is _targets()[2], add, ar, chain, residual, w, eps, offset, group, x_arg)


class AllReduceNormPass(RewritePass):
    """The tensor-parallel all-reduce + add + RMSNorm pass (see module docstring)."""

    name = "all_reduce_norm"
    ops = ops_of(name)

    def find(self, graph: Graph, ctx: PassContext) -> Iterable[Candidate]:
        """Each ``fused_add_rms_norm`` / ``rms_norm``-of-an-add an all-reduce feeds, anchored at the all-reduce
        (near-misses name the norm's line)."""
        out = []
        for node in graph.nodes:
            found = _found(_operands(node)) if is_call(node, *_targets()[2:]) else None
            if found is not None:
                out.append(Candidate(found[0][0], WHAT, data=node, where=node))
        return out

    def read(self, graph: Graph, ctx: PassContext, cand: Candidate) -> Reduced:
        """The norm's operands as they are now (an earlier rewrite may have replaced its residual)."""
        return _read(cand.data)

    def gate(self, graph: Graph, ctx: PassContext, cand: Candidate, params: Reduced) -> Choice:
        """The provider for this token count, dtype and group (``ops/all_reduce_norm.py`` spec)."""
        r_val = val(params.residual)
        spec = all_reduce_norm_spec(r_val, val(params.w), float(params.offset), params.group, _max_tokens(r_val))
        return choose_or_miss(ctx, OP, spec)

    def emit(self, graph: Graph, ctx: PassContext, cand: Candidate, params: Reduced,
             choice: Choice) -> MatchRecord:
        """Insert the op before the norm, move the norm's (and the add's) readers to its outputs, drop the
        all-reduce, the wait and the views."""
        p, norm = params, params.norm
        r_val = val(p.residual)
        x_arg = p.x_arg
        if x_arg is None:
            shape = [int(d) for d in r_val.shape]
            x_arg = insert_call(graph, norm, aten.reshape.default, (p.ar.args[0], shape), like=norm)
        args = (x_arg, p.residual, p.w, p.eps, p.offset, p.group, choice.provider)
        new = insert_call(graph, norm, torch.ops.rocm_fused.all_reduce_add_rms_norm.default, args, like=norm)
        y = insert_call(graph, norm, operator.getitem, (new, 0), like=norm)
        s = insert_call(graph, norm, operator.getitem, (new, 1), like=norm)
        if p.is_fused:
            for u in list(norm.users):  # getitem(norm, i) -> getitem(new, i)
                u.replace_all_uses_with(y if u.args[1] == 0 else s)
                graph.erase_node(u)
            norm.replace_all_uses_with(new)
        else:
            norm.replace_all_uses_with(y)
        graph.erase_node(norm)
        if p.add is not None:
            p.add.replace_all_uses_with(s)
            graph.erase_node(p.add)
        for n in reversed([p.ar, *p.chain]):
            graph.erase_node(n)
        for n in (y, s):
            if not n.users:
                graph.erase_node(n)
        shape_s, dtype_s = describe(r_val)
        return MatchRecord(self.name, OP, choice.provider, shape_s, dtype_s, location_of(norm))

    def finish(self, graph: Graph, ctx: PassContext) -> None:
        """Order the graph again where a rewrite happened (a consumer of the new residual may sit between the
        add and the norm: it moves down), then explain every all-reduce left."""
        if graph.find_nodes(op="call_function", target=torch.ops.rocm_fused.all_reduce_add_rms_norm.default):
            stable_topological_sort(graph)
        for ar in graph.find_nodes(op="call_function", target=_targets()[0]):
            self._explain(ctx, ar, "rms_norm" in ctx.report.passes_run)

    # -- what was left --------------------------------------------------------------------------------------
    def _explain(self, ctx: PassContext, ar: Node, rms_ran: bool) -> None:
        """Near-miss for an all-reduce nothing rewrote (the candidates read already have one)."""
        what, where = WHAT, location_of(ar)
        if str(ar.args[1]).lower() != "sum":
            reason = f"the all-reduce's op is {ar.args[1]!r}, not 'sum': not a tensor-parallel partial sum"
        elif not rms_ran:
            reason = ("the rms_norm pass did not run on this graph, so no RMSNorm was rewritten for this pass to "
                      "extend; enable both: options={'passes': {'rms_norm': True, 'all_reduce_norm': True}}")
        else:
            n = ar
            while len(n.users) == 1 and (n is ar or n.target is _targets()[1] or n.target in VIEW_OPS):
                n = next(iter(n.users))
            if n is ar:
                reason = "the all-reduce's result is not waited on exactly once (wait_tensor): nothing to fuse"
            elif n.target is _targets()[1] or n.target in VIEW_OPS:  # a wait/view with several users
                users = ", ".join(sorted(str(u.target) for u in n.users))
                reason = f"the all-reduced tensor has several users ({users}): the fused op does not return it"
            elif n.target is aten.add.Tensor:
                reason = ("its residual add is not followed by an RMSNorm the rms_norm pass rewrote (see that "
                          "pass's near-misses): nothing to fuse")
            else:
                reason = f"the all-reduced tensor feeds {n.target}, not a residual add followed by an RMSNorm"
        ctx.near_miss(ar.name, NearMiss(self.name, what, reason, where), overwrite=False)
