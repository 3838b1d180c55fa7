"""Cached path (``rocm_fused::rope_cached``): prove where cos/sin come from, build the float32 table once,
index it by position.

The proof is by compile-time evaluation, not by a spelling: when every input of the cos/sin chain is known
at compile time (constants, iota/arange/full, get_attr), the chain is evaluated on real tensors, inv_freq
is read off the multiply with the float positions, and the table row of every position is compared with
the cos/sin the model computed (within their rounding). Only a chain that equals the table for *all* of
its positions is replaced, so any spelling of HF's chain (``pos[..., None].float() * inv_freq``, the
``inv_freq_expanded @ position_ids_expanded`` matmul + transpose, cat(freqs, freqs) or its expand/reshape
decomposition, ``* attention_scaling`` folded into the table, the cast to x.dtype) is taken, and nothing
else is. HF's ``inv_freq`` buffer is a graph input of the post-grad graph (Dynamo inlines nn modules and
lifts buffers as inputs), so its value is unknown at compile time: those models take the on-the-fly path,
with the reason in the match note. So does a symbolic (dynamic) sequence length (no static bound on the
positions) and a model that supplies its own table (cos/sin or a GPT-J-style sincos buffer as graph input).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import torch
from torch.fx import Graph, Node

from ...ops.rope import build_cos_sin_cache
from ..fx import CONVERT, RESHAPES, is_call, val
from ..verify import is_sym
from .rotation import Rotation

aten = torch.ops.aten
prims = torch.ops.prims

#: Largest table we build (rows). Positions past it take the on-the-fly path (the table costs 4 * rd bytes
#: per row; 2**17 rows of rd=128 is 64 MiB).
MAX_TABLE_POS = 1 << 17

#: The ops without tensor inputs that :func:`const_eval` runs (constant sources; a seeded random op is not one).
SOURCES = (prims.iota.default, aten.full.default, aten.arange.default, aten.arange.start,
           aten.arange.start_step, aten.scalar_tensor.default, aten.ones.default, aten.zeros.default)


@dataclasses.dataclass
class CachedPlan:
    """What the cached op needs: the int positions node, the table (real tensor) and how positions are viewed."""

    positions: Node
    lead: tuple[int, ...]  # positions are reshaped to this (cos.shape[:-1]) to broadcast like cos did
    table: torch.Tensor  # float32 [max_pos, rotary_dim]
    scaling: float
    note: str


def ancestors(roots: list[Node]) -> set[Node]:
    """``roots`` and every node they are computed from."""
    seen: set[Node] = set()
    stack = list(roots)
    while stack:
        n = stack.pop()
        if n not in seen:
            seen.add(n)
            stack.extend(n.all_input_nodes)
    return seen


def symbolic(a: Any) -> bool:
    """True when any leaf of ``a`` (nested args, a fake value) is a SymInt / SymFloat / SymBool."""
    return any(is_sym(x) for x in torch.utils._pytree.tree_leaves(a))


def const_eval(graph: Graph, roots: list[Node]) -> dict[Node, Any] | str:
    """Real values of ``roots`` (and of every node they come from) when all their inputs are known at compile
    time (constants, :data:`SOURCES`, ``get_attr``), evaluated outside fake mode; else why not (str)."""
    need = ancestors(roots)
    env: dict[Node, Any] = {}
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily(), torch.no_grad():
        for n in graph.nodes:
            if n not in need:
                continue
            if n.op == "placeholder" and symbolic(val(n)):
                return f"depends on the symbolic size {n.name} (dynamic shape): no static bound"
            if n.op == "placeholder":
                return (f"depends on graph input {n.name} (HF's inv_freq buffer and position ids are lifted as "
                        "inputs): its values are not known at compile time")
            if n.op == "get_attr":
                env[n] = functools.reduce(getattr, n.target.split("."), graph.owning_module)
                continue
            if n.op != "call_function" or symbolic((n.args, n.kwargs)) or symbolic(val(n)):
                return f"{n.name} ({n.target}) has a symbolic size or is not a plain op: no static bound"
            tags = getattr(n.target, "tags", ())
            if torch.Tag.nondeterministic_seeded in tags or (not n.all_input_nodes and n.target not in SOURCES):
                return f"{n.name} ({n.target}) is not a constant source"
            args, kwargs = torch.fx.node.map_arg((n.args, n.kwargs), lambda m: env[m])
            env[n] = n.target(*args, **kwargs)
    return env


def descends(n: Node, target: Any, anc: set[Node]) -> bool:
    """True when ``n`` is computed from a call of ``target`` among ``anc``."""
    return any(is_call(m, target) for m in ancestors([n]) if m in anc)


#: Shape-only ops :func:`strip_shape` looks through.
SHAPE_OPS = (aten.unsqueeze.default, aten.expand.default, aten.clone.default, aten.permute.default,
             aten.squeeze.dim, aten.squeeze.default, aten.transpose.int, *RESHAPES)


def strip_shape(n: Any) -> Any:
    """The tensor under shape-only ops (and ``cat([f, f])``: the NeoX duplication of freqs)."""
    while True:
        if is_call(n, *SHAPE_OPS):
            n = n.args[0]
        elif is_call(n, aten.cat.default) and len(n.args[0]) == 2 and n.args[0][0] is n.args[0][1]:
            n = n.args[0][0]
        else:
            return n


def scaling(c: Node, fn: Any, anc: set[Node]) -> float | None:
    """Product of the Python-scalar multiplies between ``fn`` (aten.cos/sin) and ``c`` (None: not a number)."""
    s = 1.0
    for m in ancestors([c]):
        if is_call(m, aten.mul.Tensor) and descends(m, fn, anc):
            sc = [a for a in m.args if not isinstance(a, Node)]
            if sc:
                if not isinstance(sc[0], (int, float)) or isinstance(sc[0], bool):
                    return None
                s *= float(sc[0])
    return s


def cached_plan(graph: Graph, r: Rotation, max_pos: int = MAX_TABLE_POS) -> CachedPlan | str:
    """A :class:`CachedPlan` for rotation ``r`` when its cos/sin provably equal a float32 table by position.

    Returns the reason (str) when not: the model's own table, inputs unknown at compile time, no static
    position bound, positions past :data:`MAX_TABLE_POS`, or cos/sin that differ from the table built from
    the chain's inv_freq (another theta / rotary_dim on one of them, a non-scalar scaling, ...).

    Args:
        graph: the post-grad graph (get_attr values are read off its owning module).
        r: a NeoX rotation with full-width cos/sin nodes.
        max_pos: the table's largest row count (the pass passes the package's :data:`MAX_TABLE_POS`).
    """
    if isinstance(r.cos, tuple) or r.interleaved or r.half_table:
        return f"the model supplies its own {r.style} table"
    cv = val(r.cos)
    anc = ancestors([r.cos, r.sin])
    if not any(is_call(m, aten.cos.default) for m in anc) or not any(is_call(m, aten.sin.default) for m in anc):
        return "cos/sin are not computed in this graph (the model supplies its table)"
    # angles: the positions x inv_freq product under cos (through shape ops only: cat(freqs, freqs) or its
    # expand/reshape form, the transpose of the matmul form); positions: the side that is int -> float
    cos_fn = next(m for m in anc if is_call(m, aten.cos.default) and m in ancestors([r.cos]))
    prod = strip_shape(cos_fn.args[0])
    if not is_call(prod, aten.mul.Tensor, aten.bmm.default, aten.mm.default, aten.matmul.default) \
            or len(prod.args) != 2 or not all(isinstance(a, Node) for a in prod.args):
        return f"the cos argument is {prod.target if isinstance(prod, Node) else prod}, not positions x inv_freq"
    sides = [strip_shape(a) for a in prod.args]
    is_pos = [is_call(a, CONVERT) and val(a.args[0]) is not None and not val(a.args[0]).is_floating_point()
              for a in sides]
    if sum(is_pos) != 1:
        return "cannot tell positions from inv_freq in the angle product"
    pos = sides[is_pos.index(True)].args[0]
    inv_node = sides[is_pos.index(False)]  # under its broadcast: (rd/2,) values
    sc, ss = scaling(r.cos, aten.cos.default, anc), scaling(r.sin, aten.sin.default, anc)
    if sc is None or ss is None or sc != ss or not math.isfinite(sc):
        return f"attention scaling of cos ({sc}) and sin ({ss}) is not one known number"
    for what, roots in (("inv_freq", [inv_node]), ("positions", [pos]), ("cos/sin", [r.cos, r.sin])):
        env = const_eval(graph, roots)  # in this order, so the report names what is unknown
        if isinstance(env, str):
            return f"{what}: {env}"
    env = const_eval(graph, [r.cos, r.sin, pos, inv_node])
    if isinstance(env, str):
        return env
    c, s, p, inv = env[r.cos], env[r.sin], env[pos], env[inv_node]
    rd = r.rotary_dim
    if not inv.is_floating_point() or inv.numel() != rd // 2:
        return f"inv_freq has {inv.numel()} values, rotary_dim {rd} needs {rd // 2}"
    if p.numel() == 0:
        return "no positions (empty sequence)"
    lo, hi = int(p.min()), int(p.max())
    if lo < 0 or hi >= max_pos:
        return f"positions [{lo}, {hi}] are past the table ([0, {max_pos}))"
    lead = tuple(cv.shape[:-1])
    if not all(isinstance(d, int) for d in lead) or p.numel() != math.prod(lead):
        return f"positions {tuple(p.shape)} don't map onto cos {tuple(cv.shape)}"
    table = build_cos_sin_cache(inv.reshape(-1), hi + 1, sc, device="cpu")
    rows = table.double()[p.reshape(lead).long().cpu()]
    h = rd // 2
    want_c = torch.cat([rows[..., :h], rows[..., :h]], -1)
    want_s = torch.cat([rows[..., h:], rows[..., h:]], -1)
    # eager rounds cos/sin to their dtype and (HF) forms the angle in float32: allow both roundings
    for got, want, what in ((c, want_c, "cos"), (s, want_s, "sin")):
        tol = abs(sc) * (2 * torch.finfo(got.dtype).eps + 4 * hi * float(inv.abs().max()) * 2.0**-24) + 1e-12
        err = float((got.double().cpu() - want).abs().max())
        if tuple(got.shape) != tuple(want.shape) or not err <= tol:
            return (f"{what} differs from the table built from inv_freq by {err:.3g} > {tol:.3g} "
                    "(another theta / rotary_dim / scaling)")
    note = (f"cached: float32 table [{hi + 1}, {rd}] from inv_freq (float64 angles)"
            + (f", attention scaling {sc:g} folded in" if sc != 1.0 else ""))
    return CachedPlan(pos, lead, table, sc, note)
