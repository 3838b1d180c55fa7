"""A merged gate/up GEMM read only by its gated activation -> ``rocm_fused::glu_gemm`` (``rms_norm_glu_gemm`` where
the RMSNorm was folded): the activation moves into the GEMM's epilogue, one output, no separate kernel.

Runs after ``gemm_merge`` and ``norm_gemm`` (post-grad graph) and folds what they wrote: a
``rocm_fused::merged_gemm`` or ``rocm_fused::rms_norm_gemm`` with two weights of one N whose outputs ``g`` and ``u``
meet, through elementwise ops, views and casts only, in a region that computes ``act(g) * u`` (or ``act(u) * g``):
``silu`` (HF LlamaMLP / Qwen3 ``act_fn(gate_proj(x)) * up_proj(x)``, gpt-fast ``F.silu(w1(x)) * w3(x)``), Gemma's
``gelu(g, approximate="tanh")``, or the exact GELU. The activation is read off the region by verifying it against
each candidate activation (``passes/discover.py``: float64 kind check and the numerics contract), never from its
spelling: Inductor's decomposition ``g / (1 + exp(-g))``, ``g * sigmoid(g)``, casts around it, either operand order.
The region's output is the product, or the product's reshape to the GEMM's (M, N) (the down projection's operand).

Left alone, each a near-miss with its reason (when the region has an activation-like op: exp, sigmoid, tanh, erf,
silu, gelu, relu):
- an output read by anything besides the activation region, or an intermediate of it used outside (the op never
  writes g, u or act(g));
- a region that is not act(g) * u for the three activations (ReGLU ``relu(g) * u``, a scaled product, ...);
- a product of another shape than the GEMM's rows (M, N) that no view of the outputs gives;
- what the provider refuses (M above the decode buckets, a symbolic N, a weight not contiguous along K).
Left alone silently: merges of other than two weights, two weights of different N (k/v), outputs that never meet
in such a region (q/k of a 2-weight merge).

Off on every platform until measured (``policy.PASS_DEFAULTS``); not switched on by a forced global ``provider=``:
``options={"passes": {"glu_gemm": True}}`` (with ``gemm_merge``, which is on by default on CUDA only).
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from typing import Any

import torch
from torch.fx import Graph, Node

from ..ops.glu_gemm import glu_gemm_spec, rms_norm_glu_gemm_spec
from ..platform import Choice
from ..providers.reference_glu import ACTIVATIONS, activate
from ..registry import ops_of
from ..report import Match as MatchRecord
from ..report import dtype_name, location_of
from . import discover
from .context import PassContext
from .contract import Candidate, Miss, RewritePass
from .fx import RESHAPES, insert_call, is_call, val
from .gemm_merge import bucket_text, var_ranges

aten = torch.ops.aten
WHAT = "gate/up GEMMs and their gated activation"
#: Ops one of which every gated activation's region holds (SwiGLU's exp or sigmoid, GELU-tanh's tanh, GELU's erf,
#: and relu, so that ReGLU is reported rather than skipped).
ACT_ANCHORS = frozenset({aten.exp.default, aten.sigmoid.default, aten.tanh.default, aten.erf.default,
                         aten.silu.default, aten.gelu.default, aten.relu.default})
#: How far (nodes along users) from the GEMM's outputs the product is looked for: SwiGLU's decomposition is 7
#: nodes from g (view, cast, neg, exp, add, div, cast), GELU-tanh's 11.
MAX_DEPTH = 16


def _forward(start: Node) -> dict[Node, int]:
    """Nodes reachable from ``start`` along users within :data:`MAX_DEPTH` steps, with their distance."""
    seen, frontier = {start: 0}, [start]
    for d in range(1, MAX_DEPTH + 1):
        frontier = [u for n in frontier for u in n.users if u not in seen]
        for u in frontier:
            seen.setdefault(u, d)
    return seen


def _outputs(gemm: Node) -> tuple[Node, Node] | None:
    """The getitems 0 and 1 of a two-weight ``merged_gemm`` / ``rms_norm_gemm``, or None."""
    gets = {u.args[1]: u for u in gemm.users if u.target is operator.getitem}
    return (gets[0], gets[1]) if 0 in gets and 1 in gets else None


def _region(gemm: Node, what: str) -> tuple[Any, Node, Node, Node, Any]:
    """(region, g0, g1, output node, the reshape args of the op's output or None) of the gated product.

    Raises:
        Miss: silent when the outputs do not meet in an activation region; else the check that failed.
    """
    outs = _outputs(gemm)
    if outs is None:
        raise Miss("", silent=True)
    g0, g1 = outs
    a, b = _forward(g0), _forward(g1)
    both = [n for n in gemm.graph.nodes if n in a and n in b]
    if not both:
        raise Miss("", silent=True)
    meet = both[0]
    if not any(is_call(n, *ACT_ANCHORS) for n in a if a[n] <= a[meet]) and not any(
            is_call(n, *ACT_ANCHORS) for n in b if b[n] <= b[meet]):
        raise Miss("", silent=True)
    rows = val(g0)
    out = meet
    if len(meet.users) == 1 and is_call(next(iter(meet.users)), *RESHAPES):  # the down projection's (M, N) operand
        nxt = next(iter(meet.users))
        if tuple(map(str, val(nxt).shape)) == tuple(map(str, rows.shape)):
            out = nxt
    view_args = None
    mv = val(out)
    if not isinstance(mv, torch.Tensor):
        raise Miss(f"{what}: the gated product is not a tensor")
    if tuple(map(str, mv.shape)) != tuple(map(str, rows.shape)):
        views = [u for g in (g0, g1) for u in g.users if is_call(u, *RESHAPES)
                 and tuple(map(str, val(u).shape)) == tuple(map(str, mv.shape))]
        if not views:
            raise Miss(f"{what}: the gated product has shape {tuple(mv.shape)}, which no view of the GEMM's "
                       f"(M, N) = {tuple(rows.shape)} outputs gives")
        view_args = views[0].args[1]
    if mv.dtype != rows.dtype:
        raise Miss(f"{what}: the gated product is {dtype_name(mv)}, the GEMMs' outputs {dtype_name(rows)} (the op "
                   "returns the GEMMs' dtype)")
    region = discover.extract([g0, g1], [out])
    if isinstance(region, str):
        raise Miss(f"{what}: {region}")
    inside = set(region.nodes)
    others = sorted(u.name for g in (g0, g1) for u in g.users if u not in inside)
    if others:
        raise Miss(f"{what}: a GEMM output is also read by {', '.join(others)} (the op never writes g or u)")
    return region, g0, g1, out, view_args


def _verify(region: Any, shape: tuple) -> tuple[str, int] | str:
    """(activation, index of the gate output) the region computes, or the first activation's failed check."""
    dims = [d if isinstance(d, int) else -1 for d in shape]
    if dims.count(-1) > 1:
        return "the gated product has more than one symbolic dim"
    first = None
    for act in ACTIVATIONS:
        for gate in (0, 1):
            def math64(*t, act=act, gate=gate):
                return [(activate(t[gate], act) * t[1 - gate]).reshape(dims)]

            def op_ref(*t, act=act, gate=gate):
                return [(activate(t[gate].float(), act) * t[1 - gate].float()).to(t[0].dtype).reshape(dims)]

            v = discover.verify(region, "glu_gemm", (act, gate), math64, op_ref)
            if v.ok:
                return act, gate
            first = first or v.reason
    return f"not act(gate) * up for {' / '.join(ACTIVATIONS)} (silu: {first})"


class GluGemmPass(RewritePass):
    """The gated-activation epilogue fold (see module docstring)."""

    name = "glu_gemm"
    ops = ops_of(name)
    #: As gemm_merge: only its own name or its ops' providers turn it on.
    enabled_by_provider = False

    def find(self, graph: Graph, ctx: PassContext) -> Iterable[Candidate]:
        """Every two-weight merged GEMM and RMSNorm fold (``read`` skips those without a gated product)."""
        targets = (torch.ops.rocm_fused.merged_gemm.default, torch.ops.rocm_fused.rms_norm_gemm.default)
        return [Candidate(n, WHAT) for n in graph.nodes if is_call(n, *targets)
                and len(n.args[1 if n.target is targets[0] else 5]) == 2]

    def read(self, graph: Graph, ctx: PassContext, cand: Candidate) -> dict[str, Any]:
        """The gated product's region, its activation and which output is the gate."""
        from ..buckets import decide

        gemm = cand.anchor
        fold = gemm.target is torch.ops.rocm_fused.rms_norm_gemm.default
        weights, biases = (gemm.args[5], gemm.args[6]) if fold else (gemm.args[1], gemm.args[2])
        n0, n1 = (str(val(w).shape[0]) for w in weights)
        if n0 != n1:
            raise Miss("", silent=True)
        what = f"{'RMSNorm + ' if fold else ''}gate/up GEMMs (N {n0}/{n1})"
        region, g0, g1, out, view_args = _region(gemm, what)
        found = _verify(region, tuple(val(region.outputs[0]).shape))
        if isinstance(found, str):
            raise Miss(f"{what}: {found}")
        act, gate = found
        rows = val(g0)
        return {"fold": fold, "act": act, "gate": gate, "out": out, "view_args": view_args, "what": what,
                "region": region, "gets": (g0, g1), "weights": (weights[gate], weights[1 - gate]),
                "biases": (biases[gate], biases[1 - gate]),
                "decision": decide("mm", rows.shape[0], ctx.options.aten_gemm_max_m, var_ranges(rows))}

    def gate(self, graph: Graph, ctx: PassContext, cand: Candidate, params: dict[str, Any]) -> Choice:
        """The provider for ``glu_gemm`` / ``rms_norm_glu_gemm``."""
        p, gemm = params, cand.anchor
        (wg, wu), (bg, bu) = [val(w) for w in p["weights"]], [val(b) for b in p["biases"]]
        m_upper = p["decision"].m_upper
        if p["fold"]:
            nx, res, nw, _, offset = gemm.args[:5]
            op = "rms_norm_glu_gemm"
            spec = rms_norm_glu_gemm_spec(val(nx), val(res), val(nw), float(offset), wg, wu, bg, bu, p["act"], m_upper)
        else:
            op = "glu_gemm"
            spec = glu_gemm_spec(val(gemm.args[0]), wg, wu, bg, bu, p["act"], m_upper)
        choice = ctx.choose(op, spec)
        if choice.provider is None:
            raise Miss(f"{p['what']}: {choice.why_not}")
        return choice

    def emit(self, graph: Graph, ctx: PassContext, cand: Candidate, params: dict[str, Any],
             choice: Choice) -> MatchRecord:
        """Insert the op where the GEMM was, move the product's readers (and the fold's sum's) to it, drop the
        region, its getitems and the GEMM."""
        p, gemm = params, cand.anchor
        wg, wu = p["weights"]
        bg, bu = p["biases"]
        if p["fold"]:
            op = torch.ops.rocm_fused.rms_norm_glu_gemm.default
            new = insert_call(graph, gemm, op, (*gemm.args[:5], wg, wu, bg, bu, p["act"], choice.provider), like=gemm)
            res = insert_call(graph, gemm, operator.getitem, (new, 0), like=gemm)
            for u in [u for u in gemm.users if u.target is operator.getitem and u.args[1] == 2]:  # the sum s
                u.replace_all_uses_with(insert_call(graph, gemm, operator.getitem, (new, 1), like=u))
                graph.erase_node(u)
        else:
            op = torch.ops.rocm_fused.glu_gemm.default
            res = new = insert_call(graph, gemm, op, (gemm.args[0], wg, wu, bg, bu, p["act"], choice.provider),
                                    like=gemm)
        out = p["out"]
        if p["view_args"] is not None:
            with graph.inserting_after(out):
                shaped = graph.call_function(aten.reshape.default, (res, p["view_args"]))
            shaped.meta["val"] = val(out)
            res = shaped
        out.replace_all_uses_with(res)
        for n in reversed(p["region"].nodes):
            if not n.users:
                graph.erase_node(n)
        for g in p["gets"]:
            if not g.users:
                graph.erase_node(g)
        if not gemm.users:
            graph.erase_node(gemm)
        d, rows = p["decision"], val(p["gets"][0])
        n = rows.shape[1]
        return MatchRecord(self.name, op.__name__.split(".")[0], choice.provider, f"{d.m}x{val(wg).shape[1]}->{n}",
                           dtype_name(rows), location_of(gemm),
                           note=f"{p['act']}(gate) * up in the epilogue of {p['what']}, bucket {bucket_text(d)}"
                           + (f"; {choice.why_not}" if choice.reasons else ""))
