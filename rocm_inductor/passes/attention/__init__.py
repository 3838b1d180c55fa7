"""Decode attention over a (static) KV cache -> ``rocm_fused::decode_attention``.

A direct walk over the post-grad graph (``find_nodes`` on the SDPA targets and on ``bmm``, no pattern
matcher: one node per attention, and its K/V/mask producers are read backwards from it). Rooms:
``sdpa.py`` (the SDPA node's arguments), ``math_form.py`` + ``softmax.py`` (``bmm, softmax, bmm``),
``heads.py`` (K/V behind a head repeat), ``masks.py`` (the mask behind conversions and fills), ``emit.py``
(the checks every candidate goes through, the provider, the rewrite).

Covers, in float16/bfloat16/float32, static or dynamic batch / KV length:
- the SDPA node of every platform, its arguments read by schema name; only the attention output may be used
  (index 0), dropout 0;
- the math form ``reshape(bmm(softmax(s), v))`` with ``s = c * reshape(bmm(a * q, b * k^T)) (+ mask |
  masked_fill(~m, -inf | v) | where(m, s, -inf | v))``, softmax as Inductor decomposes it (``exp(s - amax) /
  sum``, with or without an fp32 up/down-cast, SDPA's safe-softmax ``where``, and Inductor's scale-folded
  ``softmax(x * c)`` pattern): HF's eager attention, K/V of 1 head broadcast over q's heads by ``matmul`` (MQA,
  the op reads the one kv head), CPU SDPA's own decomposition (Dv != D, a 3D mask), SDPA's math fallback
  (half q/k/v up-cast to float32 and the result cast back: the op gets the half tensors, no float32 copy of
  the cache); scale = a * b * c. Every node from the scores on
  must feed only this attention (the q/k/v/mask preparation may be shared, e.g. two attentions over one cache);
- attention with sinks (GPT-OSS's eager attention: ``c = cat([s, sinks.reshape(1, -1, 1, 1).expand(...)], -1)``,
  ``softmax(c - c.max(-1, keepdim=True))[..., :-1]``, the shift optional, sinks in the model's dtype or float32,
  full or sliding-window layers, whose window arrives as the mask): the op's ``sinks`` (``softmax.sink_softmax``);
- soft-capped scores ``c * tanh(s / c)`` (Gemma2 / Gemma3): the op's ``softcap``; (B*H)-flattened 3D attention
  (whisper / fairseq ``bmm`` over (B*H, L, D)): B*H rows of one head, the output viewed back (``score_forms.py``);
- K and V behind a head repeat of a smaller tensor, mapping query head ``h`` to kv head ``h // g``:
  HF ``repeat_kv`` and gpt-fast / int-repeat ``repeat_interleave(g, dim=1)`` (both reach this graph as
  ``unsqueeze(x, 2) -> expand -> clone -> reshape``), a head gather ``x[:, idx]`` / ``index_select(x, 1, idx)``
  whose index evaluates at compile time to ``arange(Hq) // g`` (``torch.arange(Hq) // g``, a tensor-repeats
  ``repeat_interleave``: iota/div, cumsum/searchsorted), ``repeat(1, g, 1, 1)`` when ``Hkv == 1`` (MQA: every
  mapping is ``h -> 0``), no repeat (MHA), or native GQA (K/V given with ``Hkv < Hq``). K and V recognised
  with different head counts (V sliced after its repeat) are both taken as given (correct, no GQA saving);
- query length a decode bucket: static ``<= options.aten_gemm_max_m`` (32 by default, the level machinery's
  small-M limit, ``lowerings/gemm_buckets.py``) or symbolic with a ShapeEnv upper bound within it;
- mask: none; boolean or float additive, any rank that broadcasts (viewed 4D), walked back through an
  ``expand`` on broadcast dims, through the efficient kernel's alignment ``slice(constant_pad_nd(bias))``,
  and SDPA's own bool -> additive conversion ``where(m, 0, -inf)`` / ``where(~m, -inf, 0)`` (the bool is
  recovered: same meaning, a fraction of the bytes); HF's ``where(m, 0, finfo.min)`` stays additive (exact:
  a fully masked row then is uniform, not zeros, as in eager); in the math form, scores filled with a finite
  ``v <= -2**127`` (float32 / bfloat16 ``finfo.min``) get the additive mask ``where(filled, v, 0)``, exact
  because float32 ``s + v == v`` for |s| < 2**103 (so a fully masked row stays uniform as in eager);
- scale: SDPA's ``scale`` or ``1/sqrt(D)`` when None.
A repeat whose output has another consumer stays for that consumer; the attention is rewritten anyway (it no
longer reads the repeated copy, the Inductor-fused copy for the other consumer remains; the note says so).

Near-misses (reported, left to Inductor): query length above the limit (prefill), ``is_causal=True`` (SDPA's
causal mask is top-left aligned, not a decode over a cache, unless Lq == Lkv == 1), dropout, outputs other than
the attention used (logsumexp: a training graph; the math form's probabilities: ``output_attentions``), a head
repeat with another mapping (``repeat`` / ``tile``: ``h -> h % Hkv``; an index not known at compile time or
not ``arange(Hq) // g``), non-4D or batch-broadcast q/k/v, dtypes the op does not take, a mask that does not
broadcast, a math-form fill the op cannot mean exactly (a finite fill above -2**127, e.g. float16's finfo.min
-65504 or -1e4: its fully masked rows are uniform in eager, not reproducible by an additive or bool mask),
a sink form the op cannot take (the sink column not last or more than one, a sink that is not one logit per
query head, a scaled softmax over the sink column, ops between the concatenation and the softmax), every other
math-form attention not taken (a softmax over bmm scores feeding a bmm: MLA's two products summed, a tensor
scale or soft cap, an unrecognised mask or softmax spelling; none is skipped silently), a symbolic head_dim
without a scale, and whatever the chosen provider's ``check`` refuses (head_dim, layout).
Numerics: the op computes scores, softmax and P @ V in float32 and rounds once; a row
the mask removes entirely (``-inf`` or bool) returns zeros (SDPA's behaviour; HF's eager softmax over a
``-inf`` fill would give NaN there), and with sinks zeros whatever the fill (GPT-OSS's eager result).

   k ─► unsqueeze ─► expand ─► clone ─► reshape ─┐
   v ─► unsqueeze ─► expand ─► clone ─► reshape ─┤               q, k, v, mask ─► rocm_fused::decode_attention
   q ────────────────────────────────────────────┼─► SDPA[0]  ==>
   m ─► where(m, 0, -inf) ─► (pad, slice, expand)┘
"""

from __future__ import annotations

from typing import Any

import torch
from torch.fx import Graph

from ...platform import Choice
from ...registry import ops_of
from ...report import Match
from ..context import PassContext
from ..contract import Candidate, Miss, RewritePass
from . import emit as _emit
from .emit import Attention
from .math_form import math_candidate
from .sdpa import SDPA_TARGETS, sdpa_candidate

__all__ = ["AttentionPass"]


def _math(bmm: Any) -> Attention:
    """The math-form :class:`Attention` ending in ``bmm``; a silent :class:`Miss` when ``bmm`` is no attention."""
    att = math_candidate(bmm)
    if att is None:
        raise Miss("not an attention", silent=True)
    return att


class AttentionPass(RewritePass):
    """The decode-attention pass (see module docstring).

    Candidates: every SDPA node (:data:`~.sdpa.SDPA_TARGETS`), then every ``bmm`` (the math form's ``P @ V``;
    a ``bmm`` that is no attention ends silently). ``read`` builds the :class:`~.emit.Attention`, ``gate`` runs
    the common checks and picks the provider, ``emit`` rewrites.
    """

    name = "attention"
    ops = ops_of(name)
    tuning_op = "decode_attention"  # decisions per shape incl. batch (rocm_inductor.tuning)

    def find(self, graph: Graph, ctx: PassContext) -> list[Candidate]:
        cands = [Candidate(sdpa, "attention (SDPA)", sdpa_candidate) for target in SDPA_TARGETS
                 for sdpa in graph.find_nodes(op="call_function", target=target)]
        bmm = torch.ops.aten.bmm.default
        return cands + [Candidate(n, "attention (bmm, softmax, bmm)", _math)
                        for n in graph.find_nodes(op="call_function", target=bmm)]

    def read(self, graph: Graph, ctx: PassContext, cand: Candidate) -> Attention:
        return cand.data(cand.anchor)

    def gate(self, graph: Graph, ctx: PassContext, cand: Candidate, params: Attention) -> Choice:
        return _emit.gate(ctx, params)

    def emit(self, graph: Graph, ctx: PassContext, cand: Candidate, params: Attention, choice: Choice) -> Match:
        return _emit.emit(graph, params, choice)
