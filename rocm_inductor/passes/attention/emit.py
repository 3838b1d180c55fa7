"""The checks every attention candidate goes through (SDPA or math form), the op's spec and provider, and the
graph edit to ``rocm_fused::decode_attention`` with its report record.

Checks, in the order their reasons are reported: fake q/k/v of rank 4; query length a decode bucket (static
``<= options.aten_gemm_max_m``, 32 by default, or symbolic with a ShapeEnv upper bound within it); one dtype of
float16/bfloat16/float32; one batch; a static query head count; K/V head sources (``heads.py``) on q's batch;
a compile-time scale (``1/sqrt(D)`` when None, which needs a static head_dim); a bool or float mask that
broadcasts to (B, Hq, Lq, Lkv) dim by dim; sinks (GPT-OSS) of one logit per query head, float32 or q's dtype
where they join the scores. SDPA's math path (half q/k/v up-cast to float32, the result cast
back) hands the op the half tensors: it computes in float32 and rounds once, as that path does.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
from torch.fx import Graph, Node

from ...buckets import m_upper_bound
from ...ops.attention import DTYPES, attention_spec
from ...platform import Choice
from ...report import Match, describe, dtype_name, location_of
from ..context import PassContext
from ..contract import Miss, choose_or_miss
from ..fx import CONVERT, cudagraphs_on, fake_eval, insert_call, is_call, known_equal, shape, val
from .heads import HeadSource, head_source
from .masks import MaskSource
from .positions import Positions, causal_positions

aten = torch.ops.aten

#: Query length limit when ``options.aten_gemm_max_m`` is 0 (the GEMM override off): the level machinery's
#: default decode bucket (``Options.aten_gemm_max_m = 32``).
DEFAULT_MAX_Q = 32


@dataclasses.dataclass
class Plan:
    """What :func:`check` resolved for the rewrite: the op's q (possibly the half tensor behind an up-cast),
    K/V sources, mask fake values, scale, and whether the output's down-casts take the op's output."""

    q: Node
    k: HeadSource
    v: HeadSource
    mask: Any  # the mask's fake value as the op gets it (before the 4D view), or None
    mask4: Any  # ... viewed 4D, or None
    scale: float
    narrow: bool
    q_len: Any  # the query / KV lengths as the attention sees them (ints or SymInts), for the report
    kv_len: Any
    sinks: Any = None  # the op's (Hq,) sinks fake value (the dtype they join the scores in), or None


@dataclasses.dataclass
class Attention:
    """One attention found in the graph, before the common checks.

    Attributes:
        node: the node whose users get the op's output (the SDPA node for the tuple-returning targets, else
            the 4D attention output); tuple_out: ``node`` returns a tuple whose ``[0]`` is the attention;
        q, k, v: the 4D (B, H, L, D) inputs as the attention sees them (K/V possibly repeated);
        mask: where the mask comes from; scale: the score scale (None: ``1/sqrt(D)``); source: for the report;
        sinks: the attention's sinks (``softmax.SinkForm``: the per-head tensor and its dtype) or None;
        plan: set by the gate (:func:`check`) for the rewrite; positions: the causal term of the mask as query
            positions (``positions.py``), set by the gate, or None; softcap: the logit soft cap (0.0: none);
        flat: a (B*H)-flattened 3D attention (``score_forms.py``): q/k/v are its (B', 1, L, D) views and ``node``
            the 3D ``P @ V``, whose users get the op's output viewed back to 3D;
        merged: a 4D attention whose ``node`` is its 3D ``P @ V`` (B*H, Lq, Dv), used without the (B, H, Lq, Dv)
            view (``score_forms.check_merged``, e.g. at B = 1): its users get the op's output flattened back to 3D.
    """

    node: Node
    tuple_out: bool
    q: Any
    k: Any
    v: Any
    mask: MaskSource
    scale: Any
    source: str
    plan: Plan | None = None
    sinks: Any = None
    positions: Positions | None = None
    softcap: float = 0.0
    flat: bool = False
    merged: bool = False


def q_len_limit(ctx: PassContext) -> int:
    """Largest query length rewritten: ``options.aten_gemm_max_m`` (default 32), or 32 when that is 0."""
    return ctx.options.aten_gemm_max_m or DEFAULT_MAX_Q


def _upper(s: Any) -> int | None:
    if isinstance(s, int):
        return s
    try:
        var_ranges = s.node.shape_env.var_to_range
    except AttributeError:
        var_ranges = None
    return m_upper_bound(s, var_ranges)


def _upcast_source(n: Any) -> Any:
    """``x`` when ``n = convert_element_type(x, float32)`` with ``x`` float16/bfloat16, else None."""
    if not is_call(n, CONVERT) or n.args[1] != torch.float32:
        return None
    src = val(n.args[0])
    return n.args[0] if isinstance(src, torch.Tensor) and src.dtype in (torch.float16, torch.bfloat16) else None


def _narrow_inputs(att: Attention, q: Any, k: Any, v: Any) -> tuple[Any, Any, Any] | None:
    """The half-precision q, k, v behind float32 up-casts (SDPA's math path), when the attention output is only
    cast back to that dtype; else None."""
    if att.tuple_out:
        return None
    srcs = [_upcast_source(x) for x in (q, k, v)]
    if any(x is None for x in srcs):
        return None
    dt = {val(x).dtype for x in srcs}
    users = list(att.node.users)
    if len(dt) != 1 or not users or not all(is_call(u, CONVERT) and u.args[1] in dt for u in users):
        return None
    return srcs[0], srcs[1], srcs[2]


def _heads(att: Attention, q: torch.Tensor) -> tuple[HeadSource, HeadSource]:
    """K's and V's head sources for ``q``'s static head count (both as given when their head counts differ)."""
    hq = q.shape[1]
    if not isinstance(hq, int):
        raise Miss(f"query head count {hq} is symbolic")
    ks, vs = head_source(att.k, hq), head_source(att.v, hq)
    for name, s in (("K", ks), ("V", vs)):
        if isinstance(s, str):
            raise Miss(f"{name}: {s}")
    for name, s in (("K", ks), ("V", vs)):  # the un-repeated tensor must still agree with q on the batch
        if not known_equal(shape(s.node)[0], q.shape[0]):
            raise Miss(f"{name}: {s.spelling} source has batch {shape(s.node)[0]}, q has {q.shape[0]}")
    if shape(ks.node)[1] != shape(vs.node)[1]:  # e.g. V sliced after its repeat: take both as given (MHA)
        why = f"K {ks.spelling} x{ks.groups}, V {vs.spelling} x{vs.groups}: both taken as given"
        ks, vs = HeadSource(att.k, 1, why), HeadSource(att.v, 1, why)
    return ks, vs


def _mask_vals(ms: MaskSource, full: tuple) -> tuple[Any, Any]:
    """The mask's fake value as the op gets it, and viewed 4D; ``(None, None)`` without a mask."""
    if ms.node is None:
        return None, None
    mval = val(ms.node)
    if ms.fill is not None:  # the additive mask the rewrite builds: node's shape, the fill's dtype
        mval = fake_eval(CONVERT, (ms.node, ms.fill[1]))
    if not isinstance(mval, torch.Tensor):
        raise Miss("the mask carries no fake tensor")
    if mval.dtype != torch.bool and not mval.dtype.is_floating_point:
        raise Miss(f"mask dtype {dtype_name(mval)}: the op takes bool or float masks")
    ms_shape = tuple(mval.shape)
    if len(ms_shape) > 4 or not all(known_equal(m, 1) or known_equal(m, f) for m, f in
                                    zip(ms_shape, full[4 - len(ms_shape):], strict=True)):
        raise Miss(f"mask shape {ms_shape} does not broadcast to (B, Hq, Lq, Lkv) = {full} dim by dim")
    return mval, (mval.reshape((1,) * (4 - mval.ndim) + ms_shape) if mval.ndim < 4 else mval)


def check(ctx: PassContext, att: Attention) -> Plan:
    """Verify ``att`` against the op (see module docstring for the checks and their order).

    Raises:
        Miss: the first check that fails, in plain words.
    """
    q, k, v = val(att.q), val(att.k), val(att.v)
    if not all(isinstance(t, torch.Tensor) for t in (q, k, v)):
        raise Miss("q/k/v carry no fake tensors")
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise Miss(f"q/k/v are {q.ndim}D/{k.ndim}D/{v.ndim}D, the op takes (B, H, L, D)")
    lq, limit = q.shape[2], q_len_limit(ctx)
    up = _upper(lq)
    if up is None or up > limit:
        what = f"query length {lq}" + ("" if isinstance(lq, int) else f" (upper bound {up})")
        raise Miss(f"{what} > {limit}: prefill stays with Inductor (the limit is options.aten_gemm_max_m)")
    if q.dtype not in DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        raise Miss(f"dtypes q={dtype_name(q)}, k={dtype_name(k)}, v={dtype_name(v)}: the op takes one of "
                   "float16/bfloat16/float32 for all three")
    if not (known_equal(q.shape[0], k.shape[0]) and known_equal(k.shape[0], v.shape[0])):
        raise Miss(f"batch dims differ (q {q.shape[0]}, k {k.shape[0]}, v {v.shape[0]}): SDPA broadcasts them, "
                   "the op does not")
    ks, vs = _heads(att, q)
    scale = att.scale
    if scale is None:
        d = q.shape[-1]
        if not isinstance(d, int):
            raise Miss(f"head_dim {d} is symbolic and no scale is given")
        scale = 1.0 / math.sqrt(d)
    if not isinstance(scale, (int, float)):
        raise Miss(f"scale {scale!r} is not a compile-time number")
    mval, mval4 = _mask_vals(att.mask, (q.shape[0], q.shape[1], lq, k.shape[2]))
    sinks = None
    if att.sinks is not None:
        if att.sinks.dtype not in (torch.float32, q.dtype):
            raise Miss(f"sinks join the scores in {dtype_name(att.sinks.dtype)}: the op takes float32 or q's dtype "
                       f"({dtype_name(q)}) sinks")
        sinks = torch.empty_like(val(att.sinks.sinks), dtype=att.sinks.dtype).reshape(q.shape[1])
    # SDPA's math path upcasts half q/k/v to float32 and casts the result back: hand the op the half tensors
    # (it computes in float32 and rounds once, as that path does) when every use of the output is that cast
    q_node = att.q
    narrow = _narrow_inputs(att, q_node, ks.node, vs.node)
    if narrow is not None:
        q_node, ks.node, vs.node = narrow
    return Plan(q_node, ks, vs, mval, mval4, float(scale), narrow is not None, lq, k.shape[2], sinks)


def gate(ctx: PassContext, att: Attention) -> Choice:
    """:func:`check`, then the provider for the op's spec; the plan is kept on ``att`` for :func:`emit`.

    Raises:
        Miss: a check failed, or no provider takes the spec (each provider's refusal).
    """
    q, k = val(att.q), val(att.k)
    if isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor) and q.ndim == 4 and k.ndim == 4:
        att.positions = causal_positions(att.mask, q.shape[2], k.shape[2])
        if att.positions is not None:
            att.mask = att.positions.rest  # the causal term is the op's positions; the rest stays its mask
    plan = att.plan = check(ctx, att)
    pos = att.positions
    spec = attention_spec(val(plan.q), val(plan.k.node), val(plan.v.node), plan.mask4, cudagraphs=cudagraphs_on(),
                          sinks=plan.sinks, positions=None if pos is None else val(pos.node),
                          window=0 if pos is None else pos.window, softcap=att.softcap)
    return choose_or_miss(ctx, "decode_attention", spec)


def _mask_arg(graph: Graph, at: Node, ms: MaskSource, plan: Plan) -> Node | None:
    """The op's mask operand, inserted before ``at``: the negation / fill conversion the source asks for, viewed
    4D with leading size-1 dims (SDPA's right-aligned broadcast)."""
    if ms.node is None:
        return None
    arg = ms.node
    if ms.invert:
        arg = insert_call(graph, at, aten.logical_not.default, (arg,), like=at)
    if ms.fill is not None:  # convert(filled, dtype) * fill: fill where filled, -0.0 elsewhere (s + -0.0 = s)
        arg = insert_call(graph, at, CONVERT, (arg, ms.fill[1]), like=at)
        arg = insert_call(graph, at, aten.mul.Tensor, (arg, ms.fill[0]), like=at)
    for _ in range(4 - plan.mask.ndim):
        arg = insert_call(graph, at, aten.unsqueeze.default, (arg, 0), like=at)
    return arg


def _sinks_arg(graph: Graph, at: Node, att: Attention) -> tuple:
    """``(sinks,)``: the op's (Hq,) sinks operand inserted before ``at`` (the per-head tensor viewed (Hq,), cast
    to the dtype it joins the scores in), or ``()`` without sinks (the op's call as it is without them)."""
    if att.sinks is None:
        return ()
    arg = insert_call(graph, at, aten.reshape.default, (att.sinks.sinks, [att.plan.sinks.shape[0]]), like=at)
    if val(arg).dtype != att.sinks.dtype:
        arg = insert_call(graph, at, CONVERT, (arg, att.sinks.dtype), like=at)
    return (arg,)


def emit(graph: Graph, att: Attention, choice: Choice) -> Match:
    """Replace ``att`` by ``rocm_fused::decode_attention`` (the plan of :func:`gate`); returns the report record."""
    plan, ms, at = att.plan, att.mask, att.node
    ks, vs = plan.k, plan.v
    args = ((plan.q, ks.node, vs.node, _mask_arg(graph, at, ms, plan), plan.scale, choice.provider)
            + _sinks_arg(graph, at, att))
    if att.positions is not None:  # (Lq,) -> (1, Lq): one position per query row, shared by the batch
        p = insert_call(graph, at, aten.reshape.default, (att.positions.node, [1, plan.q_len]), like=at)
        args = args + ((None,) if len(args) == 6 else ()) + (p, att.positions.window)
    kw = {"softcap": att.softcap} if att.softcap else None  # the op's call as it was without a softcap
    new = insert_call(graph, at, torch.ops.rocm_fused.decode_attention.default, args, kw, like=at)
    if att.flat:  # (B', 1, Lq, Dv) -> the 3D bmm's (B', Lq, Dv)
        new = insert_call(graph, at, aten.squeeze.dim, (new, 1), like=at)
    elif att.merged:  # (B, H, Lq, Dv) -> the bmm's (B*H, Lq, Dv)
        new = insert_call(graph, at, aten.reshape.default, (new, [-1, *shape(at)[1:]]), like=at)
    if att.tuple_out or plan.narrow:  # getitem [0] / the down-cast users take the op's output
        for u in list(at.users):
            u.replace_all_uses_with(new)
            graph.erase_node(u)
    else:
        at.replace_all_uses_with(new)
    graph.erase_node(at)
    q = val(plan.q)
    hq, hkv = q.shape[1], shape(ks.node)[1]
    mask_desc = ms.kind if ms.node is None else f"{ms.kind} {'x'.join(map(str, plan.mask4.shape))}"
    notes = [f"q_len={plan.q_len} kv_len={plan.kv_len} GQA {hq}/{hkv}={hq // hkv} ({ks.spelling}) "
             f"mask={mask_desc}" + (f" ({ms.spelling})" if ms.spelling else "") + f" from {att.source}"]
    if plan.sinks is not None:
        notes.append(f"sinks {dtype_name(plan.sinks)}")
    if att.softcap:
        notes.append(f"softcap {att.softcap:g} (the op's, in float32)")
    if ks.shared or vs.shared:
        notes.append("the repeated K/V has another consumer: that repeat stays for it")
    notes += list(choice.reasons)
    shape_, dtype = describe(q)
    return Match("attention", "decode_attention", choice.provider, shape_, dtype, location_of(at), "; ".join(notes))
