"""Routed experts of a mixture-of-experts layer at decode -> ``rocm_fused::moe_experts``.

Covers (transformers 5.2x ``integrations/moe.py``, after ``canonicalize``), float16/bfloat16/float32:
- HF ``batched_mm``: ids ``top_k_index.reshape(-1)``, the token states repeated k times, the gathered copies
  ``gate_up_proj[ids]`` / ``down_proj[ids]`` and two ``bmm``s (``nn.Linear`` layout (E, 2I, H), Qwen3-MoE /
  Mixtral / DeepSeek experts, or transposed (E, H, 2I), GPT-OSS), the routing weights multiplied in and the sum
  over the k slots;
- HF ``grouped_mm``: ids sorted, offsets from ``histc`` + ``cumsum``, ``aten._grouped_mm`` (bf16) or
  ``transformers::grouped_mm_fallback`` (other dtypes) over the whole stacks, the inverse permutation, the sum;
- between the GEMMs: SwiGLU ``silu(gate) * up`` with gate/up concatenated, and GPT-OSS's clamped SwiGLU
  (``alpha``, ``limit`` read off the graph) with interleaved halves; per-expert biases (``gate_up_proj_bias``,
  ``down_proj_bias``) when the model has them.
Decode buckets only: T tokens static ``<= options.aten_gemm_max_m`` (32 by default) or a symbol bounded by it.
Left alone, reported as near-misses: prefill (T not a decode bucket: Inductor's GEMMs reuse each expert's
weights across its tokens), a region whose intermediates are used elsewhere (a training graph keeps them for
backward; expert parallelism's sentinel masks), a region that verification rejects (another activation, a
post-expert norm), dtypes the op does not take. HF's ``eager`` loop (``nonzero`` / data-dependent) breaks the
graph and never reaches this pass.

The steps (``passes/contract.py``): ``find`` pairs the expert GEMMs (``match.find_pairs``), ``read`` walks the
region (``match.read_experts``), ``gate`` applies the bucket rule, extracts the region and verifies it
(``check.verify``), ``emit`` replaces the region's output by one op call.

   x, ids, w ─► index W[ids] ─► bmm ─► act ─► index Wd[ids] ─► bmm ─► * w ─► sum(k)   ==>   rocm_fused::moe_experts
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch.fx import Graph

from ...ops.moe_experts import DTYPES, moe_experts_spec, tokens_upper
from ...platform import Choice
from ...registry import ops_of
from ...report import Match as MatchRecord
from ...report import describe, location_of
from .. import discover
from ..context import PassContext
from ..contract import Candidate, Miss, RewritePass, choose_or_miss
from ..fx import insert_call, val
from . import check
from .match import Experts, find_pairs, read_experts

#: Token-count limit when ``options.aten_gemm_max_m`` is 0 (the default decode bucket, ``rocm_inductor/buckets.py``).
DEFAULT_MAX_TOKENS = 32


class MoEExpertsPass(RewritePass):
    """The routed-experts pass (see module docstring)."""

    name = "moe_experts"
    ops = ops_of(name)

    def find(self, graph: Graph, ctx: PassContext) -> Iterable[Candidate]:
        """One candidate per (gate/up, down) expert GEMM pair, anchored at the gate/up GEMM, and one per expert
        GEMM left without a partner (``read`` reports it)."""
        pairs, lone = find_pairs(graph)
        return ([Candidate(up.node, f"MoE experts ({up.form})", (up, down)) for up, down in pairs]
                + [Candidate(g.node, f"MoE expert GEMM ({g.form})", (g, None)) for g in lone])

    def read(self, graph: Graph, ctx: PassContext, cand: Candidate) -> Experts:
        """The region's inputs, output and parameters (``match.read_experts``).

        Raises:
            Miss: an expert GEMM without a partner on the same ids, or a region ``read_experts`` rejects.
        """
        up, down = cand.data
        if down is None:
            raise Miss("an expert GEMM with no second expert GEMM on the same ids reading its output (gate/up "
                       "then down): not the experts block the op computes")
        return read_experts(up, down)

    def gate(self, graph: Graph, ctx: PassContext, cand: Candidate, params: Experts) -> Choice:
        """Dtypes, the decode-bucket rule, extraction and verification, then the provider choice.

        Raises:
            Miss: a dtype the op does not take, T not a decode bucket, a region with an escaping intermediate,
                verification failed, or no provider takes it.
        """
        e = params
        xv = val(e.x)
        wv = val(e.up.weight)
        if xv.dtype not in DTYPES or wv.dtype != xv.dtype or val(e.down.weight).dtype != xv.dtype:
            raise Miss(f"token states {xv.dtype} and expert weights {wv.dtype}: the op takes one of "
                       "float16/bfloat16/float32 for both")
        limit = ctx.options.aten_gemm_max_m or DEFAULT_MAX_TOKENS
        t = xv.shape[0]
        upper = tokens_upper(t)
        if upper is None or upper > limit:
            bound = "no upper bound" if upper is None else f"upper bound {upper}"
            raise Miss(f"T={t} ({bound}) is not a decode bucket (<= {limit} tokens): prefill stays with Inductor "
                       "(the limit is options.aten_gemm_max_m)")
        inputs = [e.x, e.topk_weights, e.topk_ids, e.up.weight, e.down.weight]
        inputs += [b for b in (e.b_gate_up, e.b_down) if b is not None]
        region = discover.extract(inputs, [e.out])
        if isinstance(region, str):
            raise Miss(f"not rewritten: {region}")
        params_key = (e.activation, e.interleaved, e.up.transposed, e.alpha, e.limit)
        elements = check.cost(e, upper)
        if elements > check.MAX_ELEMENTS:
            e.verdict = discover.Verdict(True, note=f"structural match, not evaluated ({elements / 1e6:.0f}M "
                                                    "weight elements > the verification budget)")
        else:
            e.verdict = check.verify(e, region, params_key)
            if not e.verdict.ok:
                raise Miss(f"verification failed: {e.verdict.reason}")
        spec = moe_experts_spec(xv, val(e.topk_ids), wv, val(e.down.weight), e.activation, e.interleaved,
                                e.up.transposed, e.b_gate_up is not None or e.b_down is not None)
        return choose_or_miss(ctx, "moe_experts", spec)

    def emit(self, graph: Graph, ctx: PassContext, cand: Candidate, params: Experts,
             choice: Choice) -> MatchRecord:
        """Replace the region's output by the op; the gathered copies and GEMMs become dead code."""
        e = params
        args = (e.x, e.topk_weights, e.topk_ids, e.up.weight, e.down.weight, e.b_gate_up, e.b_down, e.activation,
                e.interleaved, e.up.transposed, float(e.alpha), float(e.limit), choice.provider)
        new = insert_call(graph, e.out, torch.ops.rocm_fused.moe_experts.default, args, like=e.up.node)
        e.out.replace_all_uses_with(new)
        graph.eliminate_dead_code()
        shape, dtype = describe(val(e.x))
        k, n_exp = val(e.topk_ids).shape[1], val(e.up.weight).shape[0]
        v = e.verdict
        what = (f"{e.up.form}, E={n_exp} k={k} {e.activation}" + (" interleaved" if e.interleaved else "")
                + (" transposed" if e.up.transposed else "") + (" +bias" if e.b_gate_up is not None else ""))
        verified = v.note if v.note.startswith("structural") else "verified" + (" (cached)" if v.cached else "")
        note = "; ".join(s for s in (what, verified, v.note if not v.note.startswith("structural") else "",
                                     *choice.reasons) if s)
        return MatchRecord("moe_experts", "moe_experts", choice.provider, shape, dtype, location_of(e.up.node), note)
