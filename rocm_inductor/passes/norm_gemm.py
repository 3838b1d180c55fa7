"""An RMSNorm and the merged GEMMs that read it -> ``rocm_fused::rms_norm_gemm`` (one launch at decode).

Runs after ``rms_norm`` and ``gemm_merge`` (post-grad graph): it folds what those two rewrote, never the raw
eager norm. Covers ``rocm_fused::merged_gemm(x, ...)`` (a merge or a single GEMM the table took) where
``x`` is, through ``view`` / ``reshape`` / ``unsqueeze`` to (M, K), the output ``y`` of ``rocm_fused::rms_norm`` or of
``rocm_fused::fused_add_rms_norm`` (``getitem 0``), and the GEMM's reshape is ``y``'s only reader. The
sum ``s`` of a fused add keeps its readers (the next residual add): the new op returns it. Typical matches per
pre-norm decoder layer (HF Llama / Qwen / Gemma, gpt-fast): input_layernorm -> q/k/v, post_attention_layernorm
-> gate/up; and the final norm -> lm_head where the single GEMM was taken (on CPU; on a GPU where measured).

Left alone, each a near-miss with its reason:
- ``y`` read by anything besides the GEMM (the prologue computes ``y`` in registers and never stores it);
- a reshape that does not keep K as the last dim (not the flattening the projections do);
- an input of the norm or the GEMMs computed after a reader of ``s`` that precedes the GEMM (folding would
  reorder);
- a weight or bias of the GEMMs that is ``y`` itself (or its (M, K) view: ``F.linear(y, y)``) or ``s``;
- what the provider refuses (the Triton provider, on a GPU: a shape or M without a measured prologue tile that beat
  the two launches, ``rms_norm_gemm`` entries of ``tuning/shipped/nvidia_h200.json``: the fold is a speed choice).
At M >= 2 the Triton provider takes a fold on a GPU only with a measured prologue tile, or when
``options={"features": {"norm_gemm_dot": True}}`` asks for the dot tile's prologue (spec key ``dot_prologue``).
Left alone silently: a merged GEMM whose activation is not a norm's output (o_proj, down_proj).

A norm whose own tuning decision is Inductor reaches this pass only "deferred" (``passes/joint.py``): the fold's
decision is then judged against Inductor's norm + the merged GEMM too, and a norm whose fold is not taken gets
Inductor's nodes back (``finish``).

On CUDA by default only where measured faster (``policy.PASS_DEFAULTS``); like ``gemm_merge`` it is not
switched on by a forced global ``provider=``: ``options={"passes": {"norm_gemm": True}}`` or
``options={"providers": {"rms_norm_gemm": ...}}``.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Iterable
from typing import Any

import torch
from torch.fx import Graph, Node

from ..ops.norm_gemm import norm_gemm_spec
from ..platform import Choice
from ..registry import ops_of
from ..report import Match as MatchRecord
from ..report import dtype_name, location_of
from . import joint
from .context import PassContext
from .contract import Candidate, Miss, RewritePass, bucket_spec
from .fx import RESHAPES, insert_call, is_call, val
from .gemm_merge import bucket_text, var_ranges

WHAT = "RMSNorm before merged GEMMs"


#: Views from the norm's output to the GEMM's (M, K) operand: the projections' flattening, and the
#: ``unsqueeze(y, 0)`` of a 1-D activation (``F.linear`` of a (K,) vector).
ROW_VIEWS = RESHAPES | {torch.ops.aten.unsqueeze.default}


def _norm_of(x: Node) -> tuple[Node, Node, list[Node]] | None:
    """(norm node, its normalised output ``y``, the views from ``y`` to ``x``), or None: not a norm's output."""
    chain = []
    cur = x
    while is_call(cur, *ROW_VIEWS):
        chain.append(cur)
        cur = cur.args[0]
    if not isinstance(cur, Node) or cur.op != "call_function":
        return None
    if cur.target is torch.ops.rocm_fused.rms_norm.default:
        return cur, cur, chain
    if (cur.target is operator.getitem and cur.args[1] == 0
            and is_call(cur.args[0], torch.ops.rocm_fused.fused_add_rms_norm.default)):
        return cur.args[0], cur, chain
    return None


@dataclasses.dataclass
class Fold:
    """A norm and the merged GEMM reading it: the norm's (x, residual or None, weight, eps, offset) and sum
    getitems, the GEMM's activation, weights and biases, where the new op goes, the decode bucket, the
    description the notes and near-misses start with (``add + RMSNorm -> 3 GEMMs (N 4096/1024/1024)``)."""

    norm: Node
    y: Node
    chain: list[Node]
    nargs: tuple
    s_get: list[Node]
    x: Node
    weights: list[Node]
    biases: list[Any]
    before: Node
    decision: Any
    what: str


def _read(graph: Graph, ctx: PassContext, gemm: Node) -> Fold:
    """The fold of ``gemm`` into the norm its activation comes from, checked (the module docstring's list).

    Raises:
        Miss: silent when the activation is no norm's output; else the check that failed.
    """
    from ..buckets import decide

    found = _norm_of(gemm.args[0])
    if found is None:
        raise Miss("", silent=True)
    norm, y, chain = found
    fused = norm.target is torch.ops.rocm_fused.fused_add_rms_norm.default
    if fused:
        nx, res, nw, eps, offset = norm.args[:5]
    else:
        (nx, nw, eps, offset), res = norm.args[:4], None
    x, weights, biases = gemm.args[0], list(gemm.args[1]), list(gemm.args[2])
    ns = "/".join(str(val(w).shape[0]) for w in weights)
    what = f"{'add + ' if fused else ''}RMSNorm -> {len(weights)} GEMM{'s' if len(weights) > 1 else ''} (N {ns})"

    def miss(why: str) -> Miss:
        return Miss(f"{what}: {why}")

    path = [gemm, *chain]  # path[i] reads path[i + 1]; y feeds path[-1]
    readers = [u for u in y.users if u is not path[-1]]
    readers += [u for i, c in enumerate(chain) for u in c.users if u is not path[i]]
    if readers:
        raise miss("the normalised activation is also read by " + ", ".join(sorted(u.name for u in readers))
                   + " (the prologue keeps it in registers and never stores it)")
    s_get = [u for u in norm.users if u.target is operator.getitem and u.args[1] == 1] if fused else []
    own = {norm, y, *chain, *s_get}
    if any(n in own for n in [*weights, *biases]):
        # y (or its (M, K) view) / s as a weight or bias: y's only reader is then the GEMM itself, and s is
        # defined before it, so the checks above and below pass; the op would read its own result.
        raise miss("a weight or bias of the GEMMs is the norm's own output (the op would read what it computes)")
    xv, yv = val(x), val(y)
    if xv is None or yv is None or xv.ndim != 2 or str(xv.shape[-1]) != str(yv.shape[-1]):
        raise miss("the GEMM reads the norm's output reshaped to another last dim than K")
    order = {n: i for i, n in enumerate(graph.nodes)}
    # the new op goes before the GEMM, or before an earlier reader of the sum
    before = min([gemm, *(u for g in s_get for u in g.users)], key=order.__getitem__)
    inputs = [n for n in [nx, res, nw, *weights, *biases] if isinstance(n, Node)]
    if any(order[n] >= order[before] for n in inputs):
        raise miss("an input of the GEMMs is computed after the norm's sum is read: folding would reorder")
    d = decide("mm", xv.shape[0], ctx.options.aten_gemm_max_m, var_ranges(xv))
    return Fold(norm, y, chain, (nx, res, nw, eps, offset), s_get, x, weights, biases, before, d, what)


class NormGemmPass(RewritePass):
    """The RMSNorm -> merged GEMM fold (see module docstring)."""

    name = "norm_gemm"
    ops = ops_of(name)
    #: As gemm_merge: not switched on by a forced global ``provider=`` (it would change every CPU test's op counts).
    enabled_by_provider = False

    tuning_op = "rms_norm_gemm"

    def tuning_spec(self, graph: Graph, ctx: PassContext, cand: Candidate, params: Fold,
                    choice: Choice) -> dict[str, Any] | None:
        """The gate's spec with M replaced by the measured M whose row decided it (``gemm_tables.decided_m``)."""
        return bucket_spec(super().tuning_spec(graph, ctx, cand, params, choice), self.tuning_op)

    def prepare(self, graph: Graph, ctx: PassContext) -> None:
        """Drop the per-GEMM reshapes gemm_merge left without readers (they would count as readers of y)."""
        graph.eliminate_dead_code()

    def find(self, graph: Graph, ctx: PassContext) -> Iterable[Candidate]:
        """Every merged GEMM (``read`` skips those whose activation is no norm's output)."""
        return [Candidate(n, WHAT) for n in graph.find_nodes(op="call_function",
                                                             target=torch.ops.rocm_fused.merged_gemm.default)]

    def read(self, graph: Graph, ctx: PassContext, cand: Candidate) -> Fold:
        """The norm, the GEMMs and where the op goes (:func:`_read`)."""
        return _read(graph, ctx, cand.anchor)

    def gate(self, graph: Graph, ctx: PassContext, cand: Candidate, params: Fold) -> Choice:
        """The provider (the Triton one takes only measured shapes: the tuning store's ``rms_norm_gemm`` entries)."""
        nx, res, nw, _, offset = params.nargs
        spec = norm_gemm_spec(val(nx), val(res), val(nw), float(offset), [val(w) for w in params.weights],
                              [val(b) for b in params.biases], params.decision.m_upper)
        spec["dot_prologue"] = ctx.options.feature("norm_gemm_dot")
        choice = ctx.choose("rms_norm_gemm", spec)
        if choice.provider is None:
            raise Miss(f"{params.what}: {choice.why_not}")
        return choice

    def emit(self, graph: Graph, ctx: PassContext, cand: Candidate, params: Fold, choice: Choice) -> MatchRecord:
        """Insert the op, move the GEMM's and the sum's readers to its outputs, drop the GEMM, views and norm."""
        p, gemm, before = params, cand.anchor, params.before
        new = insert_call(graph, before, torch.ops.rocm_fused.rms_norm_gemm.default,
                          (*p.nargs, p.weights, p.biases, choice.provider), like=gemm)
        for u in list(gemm.users):  # the merged GEMM's getitems
            u.replace_all_uses_with(insert_call(graph, before, operator.getitem, (new, u.args[1]), like=u))
            graph.erase_node(u)
        for g in p.s_get:
            g.replace_all_uses_with(insert_call(graph, before, operator.getitem, (new, len(p.weights)), like=g))
            graph.erase_node(g)
        graph.erase_node(gemm)
        for c in p.chain:
            graph.erase_node(c)
        if p.y is not p.norm:
            graph.erase_node(p.y)
        if not p.norm.users:
            graph.erase_node(p.norm)
        d, xv = p.decision, val(p.x)
        ns = "/".join(str(val(w).shape[0]) for w in p.weights)
        return MatchRecord(self.name, "rms_norm_gemm", choice.provider, f"{d.m}x{xv.shape[1]}->{ns}", dtype_name(xv),
                           location_of(gemm), note=f"{p.what} in one op, bucket {bucket_text(d)}"
                           + (f"; {choice.why_not}" if choice.reasons else ""))

    def joint(self, ctx: PassContext, graph: Graph, cand: Candidate, params: Fold, decision: Any) -> Any:
        """The measured fold judged against Inductor's norm too when the norm was deferred to this pass
        (:func:`joint.joint_decision`)."""
        return joint.joint_decision(ctx, params.norm, decision)

    def finish(self, graph: Graph, ctx: PassContext) -> None:
        """Restore Inductor's nodes for every norm deferred to this pass whose fold was not taken
        (:func:`joint.revert_left`); the manager drops what is dead after the last pass."""
        joint.revert_left(graph, ctx)
