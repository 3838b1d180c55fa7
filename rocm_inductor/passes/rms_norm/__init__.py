"""RMSNorm and residual-add + RMSNorm -> ``rocm_fused::rms_norm`` / ``rocm_fused::fused_add_rms_norm``.

Covers (after ``canonicalize``), in any float dtype, any eps, any leading shape (per-head q/k norms too,
though by default those below ``policy.NORM_MIN_HIDDEN`` are left to Inductor, reported as near-misses):
- HF Llama family: up -> pow(2).mean(-1) -> * rsqrt(var + eps) -> down -> weight * x      (``w_after_down``)
- weight multiplied in float32, cast last (OLMo2, GPT-OSS, ``F.rms_norm``/``nn.RMSNorm``)   (``w_before_down``)
- Meta / gpt-fast ``mean(x * x)``, T5's un-cast ``x * rsqrt`` (canonicalized to the above)
- Gemma / Qwen3-Next ``* (1.0 + weight.float())``                                            (``gemma``)
- weightless ``_norm(x.float()).type_as(x)``                                                  (``none``)
- each of these preceded by a residual add whose sum is also used (HF pre-norm, functional, sandwich)
Deliberately left alone: LayerNorm (mean subtracted: reported as "LayerNorm"), norms whose weight is not (H,),
whose eps is a tensor or a graph input (a float Dynamo did not specialise). A weight that promotes the output
(fp32 weight times the bf16 normed value) stays a separate multiply after a weightless norm, exactly as eager
rounds it. Scaled residuals (Granite's ``residual + h * m``) keep the scale as a multiply and fuse the add.
Training graphs keep intermediates for backward, so nothing matches there (reported as a near-miss).

The steps (``passes/contract.py``): ``prepare`` runs the pattern family (``patterns.py``, the table above);
``find`` .. ``emit`` run discovery (``discovery.py``) on every ``rsqrt(mean(x^2, -1) + eps)`` the patterns
left, which covers norms computed without an upcast (FLA/Mamba references, ImageGPT), ``x / sqrt(...)``, and
weightless norms whose final multiply is in the input dtype (DeepSeek-V4), and norms whose ``x^2`` CSE shared
with another consumer (PolyNorm's ``norm(x)`` next to ``norm(x ** 2)``: the norm gets its own square). A
candidate not rewritten is a near-miss (``reasons.py`` names the failed check); so is every L2 normalisation
``x / clamp_min(||x||_2, eps)`` (``F.normalize``; x-transformers' RMSNorm multiplies it by ``sqrt(H) * g``):
clamping the norm at eps is not rms_norm's eps under the root, so no rms_norm gives its value near the clamp.

   x ──► up ──► pow2 ─► mean ─► +eps ─► rsqrt ─┐                x ─┐
         └──────────────────────────────────── * ─► down ─► *w     ├─► rocm_fused::rms_norm(x, w, eps)
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch._inductor.pattern_matcher import stable_topological_sort
from torch.fx import Graph

from ...platform import Choice
from ...registry import ops_of
from ...report import Match as MatchRecord
from .. import joint
from ..context import PassContext
from ..contract import Candidate, Miss, RewritePass
from . import discovery
from .discovery import Norm
from .patterns import EXAMPLE_DTYPES, FORMS, patterns  # noqa: F401  (the pattern table, importable here)

aten = torch.ops.aten


class RMSNormPass(RewritePass):
    """The RMSNorm family pass (see module docstring)."""

    name = "rms_norm"
    ops = ops_of(name)
    tuning_op = "rms_norm"  # decisions per shape incl. rows (rocm_inductor.tuning)
    literal_fast_path = True

    def prepare(self, graph: Graph, ctx: PassContext) -> None:
        """The pattern family; its ``extra_check`` records each match and near-miss."""
        patterns().apply(graph)
        # A multi-output replacement is inserted at the residual add; a weight computed later in the graph
        # (Gemma's 1 + w placed next to its use) must then move up.
        stable_topological_sort(graph)
        graph.eliminate_dead_code()

    def find(self, graph: Graph, ctx: PassContext) -> Iterable[Candidate]:
        """Every rsqrt left: the patterns rewrote theirs (read skips a dead one)."""
        norms = [Candidate(rs, "RMSNorm") for rs in graph.find_nodes(op="call_function", target=aten.rsqrt.default)]
        return norms + [Candidate(c, "RMSNorm (F.normalize)", "normalize") for c in
                        graph.find_nodes(op="call_function", target=aten.clamp_min.default)]

    def read(self, graph: Graph, ctx: PassContext, cand: Candidate) -> Norm:
        """x, eps and the output chain below the rsqrt (:func:`discovery.read`); an L2 normalisation's clamp is
        a near-miss (:func:`discovery.normalize_miss`), any other clamp ends silently."""
        if cand.data == "normalize":
            why = discovery.normalize_miss(cand.anchor)
            raise Miss(why or "", silent=why is None)
        return discovery.read(cand.anchor)

    def gate(self, graph: Graph, ctx: PassContext, cand: Candidate, params: Norm) -> Choice:
        """Verification, the size policy, the provider (:func:`discovery.gate`)."""
        return discovery.gate(ctx, params, graph)

    def defer(self, graph: Graph, ctx: PassContext, cand: Candidate, params: Norm, decision: object) -> bool:
        """A norm left to Inductor by its own decision whose output only feeds GEMMs is rewritten provisionally
        when ``gemm_merge`` and ``norm_gemm`` run: the fold decides it jointly (``passes/joint.py``)."""
        return joint.wanted(ctx, decision, params.out)

    def emit(self, graph: Graph, ctx: PassContext, cand: Candidate, params: Norm, choice: Choice) -> MatchRecord:
        """The rewrite (:func:`discovery.emit`)."""
        return discovery.emit(graph, ctx, cand.anchor, params, choice)

    def finish(self, graph: Graph, ctx: PassContext) -> None:
        """Nothing: each rewrite already dropped the region it left dead."""
