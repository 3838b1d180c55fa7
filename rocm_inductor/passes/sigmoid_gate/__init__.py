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
- the sigmoid taken before the head view (discovery): ``attn * sigmoid(gate).view(b, s, H, D)``, the op gets the
  gate viewed as the value is;
- through casts (discovery): ``x * sigmoid(g.float()).to(x.dtype)`` (BailingHybrid's spelling),
  ``(x.float() * sigmoid(g.float())).to(x.dtype)`` (Inkling2), ``(x * sigmoid(g.float())).to(x.dtype)``: found
  from the sigmoid, verified against ``sigmoid_gate_ref`` on random inputs (passes/discover.py), rewritten;
Deliberately left alone (silently: they are not this op):
- activations: SiLU ``x * sigmoid(x)``, QuickGELU ``x * sigmoid(1.702 * x)`` (the gate must come from another
  tensor than the value, seen through views and constant scales / casts: ``kind.root``; ``F.silu`` reaches
  this graph already decomposed to ``x / (1 + exp(-x))`` and never matches);
- GLU-style MLP activations: both operands slices of one tensor (``F.glu``, a fused gate_up projection
  chunked), or both projections of one activation (``sigmoid(gate_proj(h)) * up_proj(h)``);
- a router's / shared expert's sigmoid that broadcasts (``sigmoid(gate(h))`` of shape (T, 1) times (T, H)).
Training graphs keep the sigmoid for backward, so nothing matches there (reported as a near-miss).

The steps (``passes/contract.py``): ``prepare`` runs the two-row pattern family (the plain form); ``find`` ..
``emit`` discover the cast forms from each sigmoid; ``finish`` reports the gates whose sigmoid is also used.

   x ──────────────┐
   g ─► sigmoid ─► * ─► view ─► mm        ==>     rocm_fused::sigmoid_gate(x, g) ─► view ─► mm
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import torch
from torch.fx import Graph, Node

from ...ops.sigmoid_gate import DTYPES, gate_spec
from ...platform import Choice
from ...registry import ops_of
from ...report import Match as MatchRecord
from ...report import NearMiss, describe, dtype_name, location_of
from .. import discover
from ..context import PassContext
from ..contract import Candidate, Miss, RewritePass, choose_or_miss
from ..fx import CONVERT, RESHAPES, insert_call, is_call, strip_casts, val
from .kind import (  # noqa: F401  (FORWARD_OPS, PROJECTIONS, VIEW_OPS, source: importable here)
    FORWARD_OPS,
    NOT_PROJECTED,
    PROJECTIONS,
    VIEW_OPS,
    WHAT,
    dtype_reason,
    feeds_projection,
    not_this_op,
    read_dtype_reason,
    same_shape,
    source,
)
from .patterns import SEARCHES, extra_check, patterns  # noqa: F401  (SEARCHES, extra_check: importable here)

aten = torch.ops.aten


def _used_elsewhere(sig: Node, ctx: PassContext) -> str:
    """Who else reads the sigmoid, in words: a graph output is explained by the graph's kind (training or not)."""
    if any(u.op == "output" for u in sig.users):
        return ctx.kept_output_text()
    others = [u.name for u in sig.users if not is_call(u, aten.mul.Tensor)]
    return f"also read by {', '.join(others)}" if others else "by more than one multiply"


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
            xv, gv = val(x), val(g)
            if not (isinstance(xv, torch.Tensor) and isinstance(gv, torch.Tensor) and same_shape(xv, gv)):
                continue
            if not_this_op(x, g) is None and feeds_projection(mul):
                ctx.near_miss(sig.name, NearMiss(
                    "sigmoid_gate", WHAT, "not rewritten: the sigmoid is also used elsewhere "
                    f"({_used_elsewhere(sig, ctx)})", location_of(mul)), overwrite=False)


@dataclasses.dataclass
class Gate:
    """A cast spelling of the gate found from its sigmoid: ``x``, ``g`` (casts stripped), the product ``mul``,
    the region's output ``out`` (the last node of x's shape and dtype), the verdict (set by ``gate``)."""

    x: Node
    g: Node
    mul: Node
    out: Node
    verdict: discover.Verdict | None = None
    #: a reshape between the sigmoid and the multiply (the sigmoid taken before the head view): the op gets
    #: ``g`` reshaped the same way
    g_view: Node | None = None


def _read(cand: Candidate, plain: bool = False) -> Gate:
    """The gate below the candidate's sigmoid: a cast form the pattern family did not see. Sets ``cand.where``
    to the multiply, whose line the near-misses name.

    Raises:
        Miss: silent when it is no gate (no multiply, the plain form, broadcast, SiLU / GLU); with the reason
            when the dtypes or the consumer rule the op out. ``plain``: take the plain form too (the pattern
            family stood aside: ``ctx.fast_path``).
    """
    sig = cand.anchor
    if len(sig.users) != 1 or not isinstance(sig.args[0], Node):
        raise Miss("", silent=True)
    g = strip_casts(sig.args[0])
    cur, mul, chain, g_view = sig, None, [], None
    while len(cur.users) == 1:
        u = next(iter(cur.users))
        if mul is None and g_view is None and is_call(u, *RESHAPES):
            g_view = u  # sigmoid(g) before the head view: ``sigmoid(g).view(b, s, H, D) * attn``
            chain.append(u)
            cur = u
            continue
        if not is_call(u, CONVERT, aten.mul.Tensor) or (u.target is aten.mul.Tensor and mul is not None):
            break
        if u.target is aten.mul.Tensor:
            if len(u.args) != 2 or not all(isinstance(a, Node) for a in u.args):
                break
            mul = u
        chain.append(u)
        cur = u
    if mul is None or (not plain and sig.args[0] is g and chain[0] is mul and len(chain) == 1 and g_view is None):
        raise Miss("", silent=True)  # no multiply, or the plain uncast form (the pattern family saw it)
    cand.where = mul
    xp = mul.args[1] if strip_casts(mul.args[0]) is sig or mul.args[0] in chain else mul.args[0]
    x = strip_casts(xp)
    xv, gv = val(x), val(g)
    shaped = val(g_view) if g_view is not None else gv
    if not (isinstance(xv, torch.Tensor) and isinstance(gv, torch.Tensor)) or not same_shape(xv, shaped):
        raise Miss("", silent=True)  # broadcast (router / shared-expert sigmoid): not this op
    if not_this_op(x, g) is not None:
        raise Miss("", silent=True)  # SiLU / GLU
    if gv.dtype != xv.dtype:  # behind their casts they differ: take the operands as read (KimiLinear: f32 x, g.float())
        pair = next(((a, b) for a in (x, xp) for b in (g, sig.args[0])
                     if val(a).dtype == val(b).dtype and val(a).dtype in DTYPES), None)
        if pair is None:
            raise Miss(read_dtype_reason(xp, sig.args[0]))
        x, g = pair
        xv, gv = val(x), val(g)
    outs = [n for n in chain[chain.index(mul):] if val(n).dtype == xv.dtype and same_shape(val(n), xv)]
    if not outs:
        raise Miss(f"the product's dtype differs from x ({dtype_name(xv)}) with no cast back: the op returns x's "
                   "dtype")
    if xv.dtype not in DTYPES or gv.dtype != xv.dtype:
        raise Miss(dtype_reason(xv, gv))
    if not feeds_projection(outs[-1]):
        back = next(iter(outs[-1].users)) if len(outs[-1].users) == 1 else None
        if back is not None and is_call(back, CONVERT) and feeds_projection(back):
            raise Miss(f"the product reaches the projection only through a cast to {dtype_name(val(back))} while "
                       f"the op returns x's {dtype_name(xv)}: " + NOT_PROJECTED)
        raise Miss(NOT_PROJECTED)
    return Gate(x, g, mul, outs[-1], g_view=g_view)


class SigmoidGatePass(RewritePass):
    """The sigmoid output gate pass (see module docstring)."""

    name = "sigmoid_gate"
    ops = ops_of(name)
    tuning_op = "sigmoid_gate"  # decided in context (rocm_inductor.tuning)
    literal_fast_path = True

    def prepare(self, graph: Graph, ctx: PassContext) -> None:
        """The pattern family (the plain form); its ``extra_check`` records each outcome."""
        patterns().apply(graph)
        graph.eliminate_dead_code()

    def find(self, graph: Graph, ctx: PassContext) -> Iterable[Candidate]:
        """Every sigmoid left (``read`` skips what is no gate)."""
        return [Candidate(sig, WHAT) for sig in graph.find_nodes(op="call_function", target=aten.sigmoid.default)]

    def read(self, graph: Graph, ctx: PassContext, cand: Candidate) -> Gate:
        """The cast form below the sigmoid (:func:`_read`)."""
        return _read(cand, plain=not ctx.fast_path)

    def gate(self, graph: Graph, ctx: PassContext, cand: Candidate, params: Gate) -> Choice:
        """Extract and verify the region against ``sigmoid_gate_ref``, then choose the provider."""
        from ...providers.reference import sigmoid_gate_ref

        region = discover.extract([params.x, params.g], [params.out])
        if isinstance(region, str):
            raise Miss(f"not rewritten: {region}")
        params.verdict = discover.verify(region, "sigmoid_gate", (),
                                         lambda a, b: (a * torch.sigmoid(b).reshape(a.shape),),
                                         lambda a, b: (sigmoid_gate_ref(a, b.reshape(a.shape)),))
        if not params.verdict.ok:
            raise Miss(f"verification failed: {params.verdict.reason}")
        gv = val(params.g_view) if params.g_view is not None else val(params.g)
        return choose_or_miss(ctx, "sigmoid_gate", gate_spec(val(params.x), gv))

    def emit(self, graph: Graph, ctx: PassContext, cand: Candidate, params: Gate, choice: Choice) -> MatchRecord:
        """Replace the region's output by the op; the record notes it was discovered and verified."""
        x, g, out, v = params.x, params.g, params.out, params.verdict
        if params.g_view is not None:  # the gate viewed as the value is, before the op
            g = insert_call(graph, out, params.g_view.target, (g, *params.g_view.args[1:]), like=params.g_view)
        new = insert_call(graph, out, torch.ops.rocm_fused.sigmoid_gate.default, (x, g, choice.provider),
                          like=params.mul)
        out.replace_all_uses_with(new)
        shape, dtype = describe(val(x))
        note = "; ".join(t for t in ("found by discovery, verified" + (" (cached)" if v.cached else ""), v.note,
                                     *choice.reasons) if t)
        graph.eliminate_dead_code()
        return MatchRecord("sigmoid_gate", "sigmoid_gate", choice.provider, shape, dtype, location_of(params.mul),
                           note)

    def finish(self, graph: Graph, ctx: PassContext) -> None:
        """Report the gates whose sigmoid is also used elsewhere (:func:`_leftovers`)."""
        _leftovers(graph, ctx)
