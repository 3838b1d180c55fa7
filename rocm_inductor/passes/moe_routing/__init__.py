"""A mixture-of-experts router's top-k -> ``rocm_fused::moe_routing``.

Covers (post-grad ATen graph, after ``canonicalize``), found from every ``aten.topk`` over the last dim of a
[tokens, experts] tensor whose indices are used (a top-k whose indices only feed a scatter is a group choice
inside a router, or a sampler's mask, and is no candidate):

- ``softmax_topk``: the top-k's input is a softmax (``aten._softmax`` or ``exp(x - amax) / sum``, through casts)
  of the logits: HF Qwen3-MoE (``softmax(logits, dtype=float)``, ``norm_topk_prob`` on or off, weights cast back
  to the model's dtype), Mixtral (``softmax(logits.float())``, renormalised, float32 weights), OLMoE;
- ``topk_softmax``: the top-k of the logits whose values feed a softmax: HF GPT-OSS
  (``softmax(top_values, dim=1, dtype=top_values.dtype)``);
- ``sigmoid_grouped``: the indices gather the weights from ``sigmoid(logits)``, and the top-k ranks the sigmoid
  scores, plus an (E,) correction bias if any, with the experts outside the ``topk_group`` best of ``n_group``
  groups (each scored by the sum of its two best) set to -inf: HF DeepSeek-V3 and GLM4-MoE; without the mask it
  is the ungrouped form (n_group = topk_group = 1);
- then, on the weights, any chain of elementwise ops: renormalisation ``w / (sum(w) [+ eps])``, a Python-number
  routed scaling factor, casts.
The parameters (k, kind, renormalize, bias, groups, scaling, sorted) are read off the region; the region is then
verified against ``moe_routing_ref`` (passes/discover.py), which rejects anything else these readers let through.

Left alone, as near-miss with the reason: a k that is not a compile-time integer (dynamic k); top-k over another
dim than the last or of the smallest; N-D router scores (the op takes [tokens, experts]); probabilities or scores
rounded below float32 before the top-k (the op ranks float32 values, eager would rank rounded ones); an unknown
group scoring (a group's max, DeepSeek-V2; the sum of three); experts masked with another value than -inf (vLLM's
0.0); weights read at two points; a region whose intermediates are used elsewhere (a training graph). A top-k that
is no router (nothing softmax- or sigmoid-shaped around it) is left silently.

    logits ─► softmax ─► topk ─► [/ sum] ─► [* s] ─► [cast]        ==>   rocm_fused::moe_routing(logits, k, ...)
                          └──► ids                                            ─► (weights [cast], ids)
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Iterable
from typing import Any

import torch
from torch.fx import Graph, Node

from ...ops.moe_routing import DTYPES, routing_spec
from ...platform import Choice
from ...registry import ops_of
from ...report import Match as MatchRecord
from ...report import describe, dtype_name, location_of
from .. import discover
from ..context import PassContext
from ..contract import Candidate, Miss, RewritePass, choose_or_miss
from ..fx import CONVERT, insert_call, is_call, ndim, strip_casts, val
from .kind import output, renorm_and_scale, sigmoid_choice, softmax_input, topk_args, weights_chain

aten = torch.ops.aten
WHAT = "MoE router top-k"


@dataclasses.dataclass
class Routing:
    """What ``read`` found: the op's inputs (``logits``, ``bias``), its parameters, and the region's outputs
    (``w_out``: where the weights leave it, or None when unused; ``ids``); ``verdict`` is set by ``gate``."""

    logits: Node
    bias: Node | None
    k: int
    kind: str
    renormalize: bool
    n_group: int
    topk_group: int
    scale: float
    sorted_topk: bool
    w_out: Node | None
    ids: Node
    verdict: discover.Verdict | None = None

    def params(self) -> tuple:
        return (self.k, self.kind, self.renormalize, self.n_group, self.topk_group, self.scale, self.sorted_topk)


def _gathers(ids: Node) -> list[Node]:
    return [u for u in ids.users if is_call(u, aten.gather.default) and u.args[2] is ids and u.args[1] in (1, -1)]


def _softmax_after(values: Node) -> bool:
    """Whether the top-k values feed an exponential (GPT-OSS's softmax over the chosen logits)."""
    try:
        return any(is_call(n, aten.exp.default) for n in weights_chain(values)[1])
    except Miss:
        return False


def _read(tk: Node) -> Routing:
    """The router below the candidate top-k (see module docstring).

    Raises:
        Miss: silent when this top-k is no router; with the reason when it is one the op cannot take.
    """
    x, k, dim, largest, srt = topk_args(tk)
    ids = output(tk, 1)
    if ids is None or not isinstance(x, Node):
        raise Miss("", silent=True)
    values = output(tk, 0)
    probs_of = softmax_input(x)
    gathers = _gathers(ids)
    sig = next((strip_casts(g.args[0]) for g in gathers if is_call(strip_casts(g.args[0]), aten.sigmoid.default)),
               None)
    soft_after = values is not None and _softmax_after(values)
    if probs_of is None and sig is None and not soft_after:
        raise Miss("", silent=True)  # a top-k, but no router around it
    if ndim(x) != 2:
        raise Miss(f"the router scores are {ndim(x)}-D; the op takes [tokens, experts]")
    if dim not in (-1, 1) or not largest:
        raise Miss("the top-k is not of the largest values over the experts (last) dim")
    if not isinstance(k, int):
        raise Miss("k is not a compile-time integer (dynamic k)")
    bias, n_group, topk_group = None, 1, 1
    if sig is not None:
        kind, logits, seed = "sigmoid_grouped", strip_casts(sig.args[0]), gathers[0]
        if val(sig).dtype != torch.float32:
            raise Miss(f"the sigmoid scores are {dtype_name(val(sig))}: the op ranks float32 scores")
        bias, n_group, topk_group = sigmoid_choice(x, sig)
        if values is not None:
            raise Miss("the biased choice scores the top-k returns are used too; the op returns the unbiased ones")
    elif probs_of is not None:
        kind, logits, seed = "softmax_topk", strip_casts(probs_of), values
        if val(x).dtype != torch.float32:
            raise Miss(f"the probabilities are rounded to {dtype_name(val(x))} before the top-k; the op ranks "
                       "float32 probabilities")
    else:
        kind, logits, seed = "topk_softmax", strip_casts(x), values
    lv = val(logits)
    if lv.dtype not in DTYPES or lv.ndim != 2:
        raise Miss(f"router logits of {dtype_name(lv)} {lv.ndim}-D: the op takes [tokens, experts] float16/"
                   "bfloat16/float32")
    w_out, renorm, scale = None, False, 1.0
    if seed is not None:
        w_out, chain = weights_chain(seed)
        renorm, scale = renorm_and_scale(chain)
    e = lv.shape[1]
    if n_group > 1 and isinstance(e, int) and (e % n_group or e // n_group < 2):
        raise Miss(f"{e} experts do not split into {n_group} groups of at least 2")
    if not 1 <= topk_group <= n_group:
        raise Miss(f"topk_group={topk_group} outside [1, n_group={n_group}]")
    return Routing(logits, bias, k, kind, renorm, n_group, topk_group, scale, bool(srt), w_out, ids)


def _refs(p: Routing) -> tuple[Any, Any]:
    """The op's float64 math and its reference in the graph's dtypes, as ``discover.verify`` calls them."""
    from ...providers.reference_moe import moe_routing_ref

    out_dtype = val(p.w_out).dtype if p.w_out is not None else None

    def run(logits, bias=None, cast=None):
        w, ids = moe_routing_ref(logits, p.k, p.kind, p.renormalize, bias, p.n_group, p.topk_group, p.scale,
                                 p.sorted_topk)
        return (ids,) if cast is None else (w.to(cast), ids)

    def math64(logits, bias=None):
        return run(logits, bias, torch.float64 if out_dtype is not None else None)

    def op_ref(logits, bias=None):
        return run(logits, bias, out_dtype)

    return math64, op_ref


class MoeRoutingPass(RewritePass):
    """The router top-k pass (see module docstring)."""

    name = "moe_routing"
    ops = ops_of(name)

    def find(self, graph: Graph, ctx: PassContext) -> Iterable[Candidate]:
        """Every top-k whose indices are used other than by scatters only (``read`` skips what is no router)."""
        out = []
        for tk in graph.find_nodes(op="call_function", target=aten.topk.default):
            ids = output(tk, 1)
            if ids is not None and not all(is_call(u, aten.scatter.value, aten.scatter.src) for u in ids.users):
                out.append(Candidate(tk, WHAT, where=tk))
        return out

    def read(self, graph: Graph, ctx: PassContext, cand: Candidate) -> Routing:
        """The router's parameters (:func:`_read`)."""
        return _read(cand.anchor)

    def gate(self, graph: Graph, ctx: PassContext, cand: Candidate, params: Routing) -> Choice:
        """Extract and verify the region against ``moe_routing_ref``, then choose the provider."""
        p = params
        ins = [p.logits] + ([p.bias] if p.bias is not None else [])
        outs = ([p.w_out] if p.w_out is not None else []) + [p.ids]
        region = discover.extract(ins, outs)
        if isinstance(region, str):
            raise Miss(f"not rewritten: {region}")
        math64, op_ref = _refs(p)
        p.verdict = discover.verify(region, "moe_routing", p.params(), math64, op_ref)
        if not p.verdict.ok:
            raise Miss(f"verification failed: {p.verdict.reason}")
        return choose_or_miss(ctx, "moe_routing", routing_spec(
            val(p.logits), p.k, p.kind, p.renormalize, val(p.bias), p.n_group, p.topk_group, p.scale, p.sorted_topk))

    def emit(self, graph: Graph, ctx: PassContext, cand: Candidate, params: Routing, choice: Choice) -> MatchRecord:
        """Insert the op before the top-k, route the region's outputs to it (the weights through a cast when the
        region ends in another dtype than float32)."""
        p, tk = params, cand.anchor
        op = insert_call(graph, tk, torch.ops.rocm_fused.moe_routing.default,
                         (p.logits, p.k, p.kind, p.renormalize, p.bias, p.n_group, p.topk_group, p.scale,
                          p.sorted_topk, choice.provider), like=tk)
        w = insert_call(graph, tk, operator.getitem, (op, 0), like=tk)
        ids = insert_call(graph, tk, operator.getitem, (op, 1), like=tk)
        if p.w_out is not None:
            dt = val(p.w_out).dtype
            if dt != torch.float32:
                w = insert_call(graph, tk, CONVERT, (w, dt), like=tk)
            p.w_out.replace_all_uses_with(w)
        p.ids.replace_all_uses_with(ids)
        graph.eliminate_dead_code()
        shape, dtype = describe(val(p.logits))
        groups = f", groups {p.topk_group}/{p.n_group}" if p.n_group > 1 else ""
        extra = [f"{p.kind} k={p.k}{groups}" + (", renormalised" if p.renormalize else "")
                 + (f", scale {p.scale:g}" if p.scale != 1.0 else "") + (", bias" if p.bias is not None else ""),
                 "verified" + (" (cached)" if p.verdict and p.verdict.cached else ""),
                 p.verdict.note if p.verdict else "", *choice.reasons]
        return MatchRecord(self.name, "moe_routing", choice.provider, shape, dtype, location_of(tk),
                           "; ".join(t for t in extra if t))
