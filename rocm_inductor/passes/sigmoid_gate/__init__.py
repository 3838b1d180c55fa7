"""Sigmoid output gate ``x * sigmoid(gate)`` -> ``rocm_fused::sigmoid_gate``.

Covers (after ``canonicalize``), in float16/bfloat16/float32, static or dynamic token counts:
- Qwen3-Next / Qwen3.5: q_proj's output viewed (b, s, H, 2D) and chunked into query and gate; after
  attention ``attn.reshape(b, s, H*D) * torch.sigmoid(gate.reshape(b, s, H*D))``, then o_proj;
- HY-V4: ``gate_proj(hidden).view(b, s, H, Dv)`` multiplied into the attention output in (b, s, H, Dv)
  layout, then reshape and o_proj;
- the kind: any ``x * sigmoid(g)`` (either operand order) where ``x`` and ``g`` have one shape and one
  dtype (no broadcast) and the product feeds a projection (``mm``/``addmm``/``bmm`` activation operand,
  through views). Feeding a projection is what makes the extern op free: the matmul ends Inductor's
  fusion anyway, while a product that feeds more elementwise ops is better left fused (reported).
- through casts (discovery, issue 15): ``x * sigmoid(g.float()).to(x.dtype)`` (BailingHybrid's spelling),
  ``(x.float() * sigmoid(g.float())).to(x.dtype)`` (Inkling2), ``(x * sigmoid(g.float())).to(x.dtype)``: found
  from the sigmoid, verified against ``sigmoid_gate_ref`` on random inputs (passes/discover.py), rewritten;
Deliberately left alone (silently: they are not this op):
- SiLU ``x * sigmoid(x)`` (operands from one tensor; ``F.silu`` reaches this graph already decomposed to
  ``x / (1 + exp(-x))`` and never matches);
- GLU-style MLP activations: both operands slices of one tensor (``F.glu``, a fused gate_up projection
  chunked), or both projections of one activation (``sigmoid(gate_proj(h)) * up_proj(h)``);
- a router's / shared expert's sigmoid that broadcasts (``sigmoid(gate(h))`` of shape (T, 1) times (T, H)).
Training graphs keep the sigmoid for backward, so nothing matches there (reported as a near-miss).

   x ──────────────┐
   g ─► sigmoid ─► * ─► view ─► mm        ==>     rocm_fused::sigmoid_gate(x, g) ─► view ─► mm
"""

from __future__ import annotations

import functools
import inspect
import operator
from typing import Any

import torch
from torch._inductor.pattern_matcher import Match, PatternMatcherPass, fwd_only, register_replacement
from torch.fx import Graph, Node
from torch.fx.experimental.symbolic_shapes import statically_known_true

from ..ops.sigmoid_gate import DTYPES, gate_spec
from ..registry import ops_of
from ..report import Match as MatchRecord
from ..report import NearMiss, describe, dtype_name, location_of
from .context import PassContext, current_context

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

#: Pattern table: operand order -> search function (``canonicalize`` keeps the written order of two
#: same-shape operands, so both orders occur in real code).
SEARCHES = {
    "gate_last": lambda x, g: x * torch.sigmoid(g),
    "gate_first": lambda x, g: torch.sigmoid(g) * x,
}


def _replace(x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    choice = current_context().pending
    assert choice is not None and choice.provider is not None
    return torch.ops.rocm_fused.sigmoid_gate(x, g, choice.provider)


def source(node: Any) -> Any:
    """The node ``node`` is a view / slice / split / copy of (itself when it is none of these)."""
    while isinstance(node, Node) and node.op == "call_function" and node.target in VIEW_OPS and node.args:
        node = node.args[0]
    return node


def _projection_input(node: Any) -> Any:
    """When ``node`` (through views) is a projection's output, the source of its activation; else None."""
    s = source(node)
    if isinstance(s, Node) and s.op == "call_function" and s.target in PROJECTIONS:
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


def _same_shape(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.ndim != b.ndim:
        return False
    return all(statically_known_true(p == q) for p, q in zip(a.shape, b.shape, strict=True))


def extra_check(match: Match) -> bool:
    """Validate one ``x * sigmoid(g)`` match, choose the provider, record the outcome."""
    ctx = current_context()
    x_node, g_node = match.kwargs["x"], match.kwargs["g"]
    if not (isinstance(x_node, Node) and isinstance(g_node, Node)):
        return False  # a constant factor: not a gate
    x, g = x_node.meta.get("val"), g_node.meta.get("val")
    mul = match.output_nodes()[0]
    out = mul.meta.get("val")
    if not all(isinstance(v, torch.Tensor) for v in (x, g, out)):
        return False
    if not _same_shape(x, g) or not _same_shape(x, out):
        return False  # broadcast (router / shared-expert sigmoid, per-head scalar gate): not this op
    if not_this_op(x_node, g_node) is not None:
        return False
    sig = next((n for n in match.nodes if n.target is aten.sigmoid.default), mul)
    anchor, where = sig.name, location_of(mul)

    def miss(reason: str) -> bool:
        ctx.near_miss(anchor, NearMiss("sigmoid_gate", "sigmoid gate", reason, where))
        return False

    if x.dtype not in DTYPES or g.dtype != x.dtype or out.dtype != x.dtype:
        return miss(f"dtypes x={dtype_name(x)}, gate={dtype_name(g)}, out={dtype_name(out)}: the op takes one of "
                    "float16/bfloat16/float32 for all three")
    if not feeds_projection(mul):
        return miss("the product does not feed a projection (mm/addmm/bmm): Inductor fuses it with its "
                    "elementwise neighbours, a separate op would cost a kernel")
    choice = ctx.choose("sigmoid_gate", gate_spec(x, g))
    if choice.provider is None:
        return miss(choice.why_not)
    ctx.pending = choice
    shape, dtype = describe(x)
    ctx.matched(anchor, MatchRecord("sigmoid_gate", "sigmoid_gate", choice.provider, shape, dtype, where))
    return True


@functools.lru_cache(maxsize=1)
def patterns() -> PatternMatcherPass:
    """The pattern family (registered once per process). One dtype suffices: the pattern has no casts."""
    pm = PatternMatcherPass(pass_name="rocm_fused_sigmoid_gate")
    extra = {"skip_duplicates": True} if "skip_duplicates" in inspect.signature(
        register_replacement).parameters else {}
    for search in SEARCHES.values():
        args = [torch.empty(2, 8, dtype=torch.bfloat16), torch.empty(2, 8, dtype=torch.bfloat16)]
        register_replacement(search, _replace, args, fwd_only, [pm], extra_check=extra_check, **extra)
    return pm


def _leftovers(graph: Graph, ctx: PassContext) -> None:
    """Report same-shape ``x * sigmoid(g)`` gates left in the graph whose sigmoid is used elsewhere."""
    for sig in graph.find_nodes(op="call_function", target=aten.sigmoid.default):
        if len(sig.users) < 2:
            continue  # single-user sigmoids were seen by the patterns (matched, missed, or not a gate)
        for mul in sig.users:
            if mul.target is not aten.mul.Tensor or len(mul.args) != 2:
                continue
            x = mul.args[1] if mul.args[0] is sig else mul.args[0]
            g = sig.args[0]
            xv, gv = getattr(x, "meta", {}).get("val"), g.meta.get("val") if isinstance(g, Node) else None
            if not (isinstance(xv, torch.Tensor) and isinstance(gv, torch.Tensor) and _same_shape(xv, gv)):
                continue
            if not_this_op(x, g) is None and feeds_projection(mul):
                ctx.near_miss(sig.name, NearMiss(
                    "sigmoid_gate", "sigmoid gate", "not rewritten: the sigmoid is also used elsewhere "
                    "(training graph: backward keeps it)", location_of(mul)), overwrite=False)


_CONVERT = torch.ops.prims.convert_element_type.default


def _strip_casts(n: Any) -> Any:
    while isinstance(n, Node) and n.op == "call_function" and n.target is _CONVERT:
        n = n.args[0]
    return n


def _discover(graph: Graph, ctx: PassContext) -> None:
    """Gates the pattern family missed because of casts (``x * sigmoid(g.float()).to(x.dtype)``,
    ``(x.float() * sigmoid(g.float())).to(x.dtype)``): found from the sigmoid, region verified against
    ``sigmoid_gate_ref`` (passes/discover.py), rewritten; a candidate not rewritten is a near-miss."""
    from ..providers.reference import sigmoid_gate_ref
    from . import discover
    from .canonicalize import insert_call

    for sig in list(graph.find_nodes(op="call_function", target=aten.sigmoid.default)):
        if sig.graph is not graph or len(sig.users) != 1 or not isinstance(sig.args[0], Node):
            continue
        g = _strip_casts(sig.args[0])
        cur, mul, chain = sig, None, []
        while len(cur.users) == 1:
            u = next(iter(cur.users))
            if u.op != "call_function" or u.target not in (_CONVERT, aten.mul.Tensor) or (
                    u.target is aten.mul.Tensor and mul is not None):
                break
            if u.target is aten.mul.Tensor:
                if len(u.args) != 2 or not all(isinstance(a, Node) for a in u.args):
                    break
                mul = u
            chain.append(u)
            cur = u
        if mul is None or (sig.args[0] is g and chain[0] is mul and len(chain) == 1):
            continue  # no multiply, or the plain uncast form (the pattern family saw it)
        xp = mul.args[1] if _strip_casts(mul.args[0]) is sig or mul.args[0] in chain else mul.args[0]
        x = _strip_casts(xp)
        if not isinstance(x, Node) or not isinstance(g, Node):
            continue
        xv, gv = x.meta.get("val"), g.meta.get("val")
        if not (isinstance(xv, torch.Tensor) and isinstance(gv, torch.Tensor)) or not _same_shape(xv, gv):
            continue  # broadcast (router / shared-expert sigmoid): not this op
        if not_this_op(x, g) is not None:
            continue  # SiLU / GLU
        outs = [n for n in chain[chain.index(mul):] if n.meta["val"].dtype == xv.dtype
                and _same_shape(n.meta["val"], xv)]
        where = location_of(mul)

        def miss(reason: str, anchor: Node = sig, where: str = where) -> None:
            ctx.near_miss(anchor.name, NearMiss("sigmoid_gate", "sigmoid gate", reason, where))

        if not outs:
            miss(f"the product's dtype differs from x ({dtype_name(xv)}) with no cast back: the op returns x's dtype")
            continue
        out = outs[-1]
        if xv.dtype not in DTYPES or gv.dtype != xv.dtype:
            miss(f"dtypes x={dtype_name(xv)}, gate={dtype_name(gv)}: the op takes one of float16/bfloat16/float32 "
                 "for both")
            continue
        if not feeds_projection(out):
            miss("the product does not feed a projection (mm/addmm/bmm): Inductor fuses it with its "
                 "elementwise neighbours, a separate op would cost a kernel")
            continue
        region = discover.extract([x, g], [out])
        if isinstance(region, str):
            miss(f"not rewritten: {region}")
            continue
        v = discover.verify(region, "sigmoid_gate", (), lambda a, b: (a * torch.sigmoid(b),),
                            lambda a, b: (sigmoid_gate_ref(a, b),))
        if not v.ok:
            miss(f"verification failed: {v.reason}")
            continue
        choice = ctx.choose("sigmoid_gate", gate_spec(xv, gv))
        if choice.provider is None:
            miss(choice.why_not)
            continue
        new = insert_call(graph, out, torch.ops.rocm_fused.sigmoid_gate.default, (x, g, choice.provider), like=mul)
        out.replace_all_uses_with(new)
        shape, dtype = describe(xv)
        note = "; ".join(t for t in ("found by discovery, verified" + (" (cached)" if v.cached else ""), v.note,
                                     *choice.reasons) if t)
        ctx.matched(sig.name, MatchRecord("sigmoid_gate", "sigmoid_gate", choice.provider, shape, dtype, where,
                                          note))
        graph.eliminate_dead_code()


class SigmoidGatePass:
    """The sigmoid output gate pass (see module docstring)."""

    name = "sigmoid_gate"
    ops = ops_of(name)

    def __call__(self, graph: Graph, ctx: PassContext) -> None:
        patterns().apply(graph)
        graph.eliminate_dead_code()
        _discover(graph, ctx)
        _leftovers(graph, ctx)
