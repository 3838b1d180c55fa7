"""Decode GEMMs that read one activation -> ``rocm_fused::merged_gemm`` (one launch, weights read in place).

Covers (post-grad ATen graph, after ``canonicalize``): ``mm(a, mat2)`` and ``addmm(bias, a, mat2)`` (default
beta/alpha) where
- ``a`` is the same (M, K) activation: one node, or ``view``/``reshape`` of one node to one (M, K) shape
  (HF and gpt-fast flatten the (b, s, h) hidden state to (b*s, h) once per projection);
- ``mat2`` is the transpose (``permute(w, [1, 0])`` / ``t(w)``) of an (N, K) weight (``nn.Linear`` /
  ``F.linear``), or any (K, N) tensor (passed on transposed, as a view);
- M is a decode bucket, decided as the level-2 GEMM override decides "small M"
  (``rocm_inductor.lowerings.gemm_buckets.decide``): a static M <= ``aten_gemm_max_m`` (default 32) or a
  symbolic M whose ShapeEnv upper bound is <= it (``mark_dynamic(x, 0, max=32)``);
- at least two such GEMMs, one dtype for activation, weights and biases.
Each group becomes one op returning every output as before (the ``mm`` nodes' users read ``getitem``s).
Groups of more than ``MAX_WEIGHTS`` (4) GEMMs are split into balanced chunks. Typical matches: q/k/v of HF
Llama/Qwen/Gemma attention (3), gate/up of their MLPs and gpt-fast's ``w1``/``w3`` (2).

Left alone, each reported as a near-miss with its reason:
- GEMMs of one activation with M above the bucket limit or unbounded (prefill);
- a GEMM of the group with another dtype (e.g. a float32 weight in a bf16 model);
- GEMMs that read the same tensor through different views or slices (not one (M, K) activation);
- a GEMM whose input is computed from another member's output (merging would reorder; the others merge);
- what the provider refuses (e.g. a weight not contiguous along K for the Triton kernel);
- a GEMM the op cannot express next to other GEMMs of its activation: ``addmm`` with beta/alpha != 1 or
  with a bias that is not (N,) (a (1,) or (M, N) bias broadcast by addmm);
- GEMMs of one activation of a dtype the op does not take (float64, integers).
A GEMM whose activation, weight or bias is the output of a GEMM merged before it reads that merge's output.
Inputs computed late (a weight cast or built inside each ``Linear.forward``: ``self.weight.to(x.dtype)``,
autocast, a LoRA-merged ``w + a @ b``, placed after the previous projection's output is already used) are
moved before that first use when they read no member's output (``schedule.py``); otherwise: near-miss.
A single GEMM of its activation in a decode bucket (o_proj, down_proj, lm_head, gpt-fast's fused ``wqkv``)
is offered to the providers as a one-weight ``merged_gemm`` (a provider choice, not a merge; also when its
activation feeds a GEMM the op cannot express, e.g. an ``addmm`` with beta != 1, reported above): the Triton
provider takes it only where its measured table has that (M bucket, K, N, dtype, GPU) and ours beat cuBLAS
(``providers/triton/gemm_merge.py: measured_single``); the reference provider never does. Reported as a match
("single GEMM, N ..., bucket M=..."), or as a near-miss with the numbers where the table measured cuBLAS
faster (or with the limit where it measured ours faster but the provider cannot take it: ``x @ w`` of a (K, N)
weight); an unmeasured single stays silent (and with Inductor), on CPU / the interpreter too.
Left alone silently: an unmeasured single GEMM (gpt-fast's already fused ``wqkv`` on every table so far),
``bmm``/``baddbmm`` (attention), scaled/int8 GEMMs, training graphs' GEMMs whose inputs are also saved
(merging them is still exact, but the pass targets inference and does not look at them differently).

On by default on CUDA only (``policy.PASS_DEFAULTS``; measured on the H200, and the Triton provider's
``check`` takes only merges its measured table says beat separate cuBLAS GEMMs: the others are near-misses
with the numbers), off on ROCm and CPU; unlike the other passes it is not switched on by a forced global
``provider=``: enable it with ``options={"passes": {"gemm_merge": True}}`` (or
force ``providers={"merged_gemm": ...}``). Under Inductor freezing the weights arrive as constants (often
already transposed into (K, N) tensors): they merge the same way; freezing's own concatenation of GEMMs of one
input (weights of one shape: gate/up) happens before this pass, which then sees one GEMM there.

The steps (``passes/contract.py``): ``find`` groups the GEMMs (``group.py``: the candidates in report order,
the refusals grouping decides among them), ``read`` schedules a merge (``schedule.py``), ``gate`` chooses the
provider, ``emit`` writes the op.

   x ─► view ─► mm(·, permute(Wq)) ─► q          ==>     x ─► view ─► merged_gemm(·, [Wq, Wk, Wv]) ─► q, k, v
   x ─► view ─► mm(·, permute(Wk)) ─► k
   x ─► view ─► mm(·, permute(Wv)) ─► v
"""

from __future__ import annotations

import operator
from collections.abc import Iterable
from typing import Any

import torch
from torch.fx import Graph, Node

from ...ops.gemm_merge import merged_gemm_spec
from ...platform import Choice
from ...refusal import MEASURED_REFUSED, MEASURED_SLOWER, any_of
from ...registry import ops_of
from ...report import Match as MatchRecord
from ...report import dtype_name, location_of
from ..context import PassContext
from ..contract import Candidate, Miss, RewritePass, bucket_spec
from ..fx import RESHAPES, fake_eval, val  # noqa: F401  (RESHAPES: importable here)
from .group import (  # noqa: F401  (VIEWS, Gemm, dtype_name_of: importable here)
    VIEWS,
    WHAT,
    WHAT_SINGLE,
    Gemm,
    Merge,
    bucket_text,
    candidates,
    dtype_name_of,
    var_ranges,
)
from .schedule import inputs_of, schedule

aten = torch.ops.aten


def _weights_val(gemms: list[Gemm]) -> list:
    """The (N, K) fake weights the op reads (a (K, N) mat2 transposed)."""
    return [(val(g.weight) if g.is_nk else val(g.mat2).t()) for g in gemms]


class GemmMergePass(RewritePass):
    """The decode GEMM merge pass (see module docstring)."""

    name = "gemm_merge"
    ops = ops_of(name)
    #: Not switched on by a forced global ``provider=`` (the CPU tests and example force ``"reference"``):
    #: only the CUDA default, ``passes={"gemm_merge": True}`` or ``providers={"merged_gemm": ...}``.
    enabled_by_provider = False
    tuning_op = "merged_gemm"

    def tuning_spec(self, graph: Graph, ctx: PassContext, cand: Candidate, params: Merge,
                    choice: Choice) -> dict[str, Any] | None:
        """The gate's spec with M replaced by the measured M whose row decided it (``gemm_tables.decided_m``:
        the bucket rule), so the decision names the row it came from."""
        return bucket_spec(super().tuning_spec(graph, ctx, cand, params, choice), self.tuning_op)

    def find(self, graph: Graph, ctx: PassContext) -> Iterable[Candidate]:
        """The GEMMs grouped by activation, in report order (:func:`group.candidates`)."""
        return candidates(graph, ctx)

    def read(self, graph: Graph, ctx: PassContext, cand: Candidate) -> Merge:
        """A refusal grouping decided, or the members that can merge in one place (:func:`schedule.schedule`)."""
        if isinstance(cand.data, Miss):
            raise cand.data
        m = cand.data
        return Merge(schedule(graph, ctx, self.name, cand, m.gemms, m.single), m.decision, m.single)

    def gate(self, graph: Graph, ctx: PassContext, cand: Candidate, params: Merge) -> Choice:
        """The provider's choice (the Triton one takes only merges its measured table says beat cuBLAS). A single
        GEMM's refusal is reported only where the table measured it: cuBLAS won, or ours won but another
        limit refused it; unmeasured projections stay silent."""
        gemms = params.gemms
        x = gemms[0].act
        weights = _weights_val(gemms)
        spec = merged_gemm_spec(val(x), weights, [None if g.bias is None else val(g.bias) for g in gemms],
                                params.decision.m_upper)
        choice = ctx.choose("merged_gemm", spec)
        if choice.provider is not None:
            return choice
        ns = "/".join(str(w.shape[0]) for w in weights)  # symbolic N as its expression, not None
        if not params.single:
            raise Miss(f"{len(gemms)} GEMMs (N {ns}): {choice.why_not}")
        if any_of(choice.reasons, MEASURED_SLOWER, MEASURED_REFUSED):
            raise Miss(f"K={val(x).shape[1]} N {ns}: {choice.why_not}")
        raise Miss("", silent=True)

    def emit(self, graph: Graph, ctx: PassContext, cand: Candidate, params: Merge, choice: Choice) -> MatchRecord:
        """One ``merged_gemm`` after the last of its inputs; each GEMM's readers read its ``getitem``."""
        gemms, decision = params.gemms, params.decision
        first, x = gemms[0], gemms[0].act
        ns = "/".join(str(w.shape[0]) for w in _weights_val(gemms))
        bias, where = sum(g.bias is not None for g in gemms), location_of(first.node)
        order = {n: i for i, n in enumerate(graph.nodes)}
        at = max((n for n in inputs_of(gemms) if isinstance(n, Node)), key=lambda n: order.get(n, -1),
                 default=None)
        # inserting_before(at.next), not inserting_after(at): the latter would put each new node before the last
        with graph.inserting_before(at.next if at is not None else first.node):
            ws = []
            for g in gemms:
                if g.is_nk:
                    ws.append(g.weight)
                else:  # a (K, N) tensor: hand the op its (N, K) view
                    t = graph.call_function(aten.permute.default, (g.mat2, [1, 0]))
                    t.meta["val"] = fake_eval(aten.permute.default, (g.mat2, [1, 0]))
                    ws.append(t)
            merged = graph.call_function(torch.ops.rocm_fused.merged_gemm.default,
                                         (x, ws, [g.bias for g in gemms], choice.provider))
            merged.meta["val"] = [g.node.meta["val"] for g in gemms]
            outs = []
            for i, g in enumerate(gemms):
                get = graph.call_function(operator.getitem, (merged, i))
                get.meta["val"] = g.node.meta["val"]
                outs.append(get)
        for key in ("stack_trace", "nn_module_stack", "source_fn_stack"):
            if key in first.node.meta:
                merged.meta[key] = first.node.meta[key]
        for g, get in zip(gemms, outs, strict=True):
            for key in ("stack_trace", "nn_module_stack"):
                if key in g.node.meta:
                    get.meta[key] = g.node.meta[key]
            g.node.replace_all_uses_with(get)
            graph.erase_node(g.node)
        return MatchRecord(
            self.name, "merged_gemm", choice.provider, f"{decision.m}x{val(x).shape[1]}->{ns}", dtype_name(val(x)),
            where, note=("single GEMM" if params.single else f"{len(gemms)} GEMMs merged") + f", N {ns}, bucket "
                 + bucket_text(decision) + (f", bias {bias}/{len(gemms)}" if bias else "")
                 + (f"; {choice.why_not}" if choice.reasons else ""))

    def finish(self, graph: Graph, ctx: PassContext) -> None:
        """Nothing: each merge erased the GEMMs it replaced."""
