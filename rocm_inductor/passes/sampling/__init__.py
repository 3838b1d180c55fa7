"""Top-k / top-p / min-p / temperature sampling chains -> ``rocm_fused::sample`` (one capture-safe kernel).

Covers (post-grad ATen graph, after ``canonicalize``), walking *up* from the random draw:

- the draw: ``multinomial(probs, 1)`` (HF ``generate``) or gpt-fast's exponential race
  ``argmax(probs / exponential_(1), -1[, keepdim])`` (which Inductor has already turned into
  ``-log(inductor_random(...))``: ``mul(where(ge(u, 1 - eps/2), -eps/2, log(u)), -1)``), where ``probs`` is
  ``softmax(s)`` (the decomposed ``exp(s - amax) / sum``, possibly wrapped in float casts); a bare
  ``multinomial(p, 1)`` of other probabilities becomes ``is_probs=True`` with no filters;
- then the filters on ``s``, nearest first, each recognised as a whole: HF min-p (``MinPLogitsWarper``,
  min_tokens_to_keep = 1: ``where(scatter(probs < min_p * amax(probs), -1, topk(probs, 1)[1], False), -inf, s)``,
  probs = softmax(s); min_p a Python float in [0, 1] (the scatter optional) or a float tensor of shape (B, 1) /
  (1, 1) / (1,) / () compared in float32 (``dynamic=True``'s lifted 0-d min_p; the scatter required), only below
  any top-p (HF applies it last; it commutes with top-k, so it may sit above a top-k); HF top-p
  (``TopPLogitsWarper``, min_tokens_to_keep = 1: ascending sort, softmax, cumsum ``<= 1 - p``, last entry kept,
  scatter back, ``where(mask, -inf, s)``) with p a Python float or a per-row float32 tensor (the threshold spelled
  ``1 - top_p``, top_p of shape (B, 1) / (1, 1) / (1,) / ()); top-k (``where(s < topk(s, k)[0][..., -1:], -inf,
  s)``, HF and gpt-fast), top-k and top-p in either order; then temperature ``s / T`` (T a positive Python float
  or 0 (folded as the op's greedy T <= 0: eager's ``softmax(s / 0)`` is NaN), or a tensor of shape (B, 1) /
  (1,) / ()); then at most one ban ``where(mask, -inf, s)`` with any bool mask
  broadcastable per row (HF's min-new-tokens EOS mask, or a min-p mask the op can't apply itself; the mask stays
  an Inductor-computed input, which is exact).

Also: the Gumbel-max draw ``argmax(s - log(-log(u)), -1)`` (a draw from softmax(s)); an exponential
noise cast to the probabilities' dtype (gpt-fast in bf16); and, when the probabilities the draw reads are also
used elsewhere (gpt-fast's ``sample`` returns them), the draw alone is rewritten on them (``is_probs``) and the
filters stay in Inductor (the match note says so). A random draw left in the graph is a near-miss.

Parameters come from the graph (k from ``topk``, p = 1 - the ``le`` threshold or the ``top_p`` tensor under
``1 - top_p``, min_p from the ``mul``, T from the ``div``).
Deliberately left alone: greedy ``argmax(logits)`` (nothing random: Inductor's kernel is right); ``multinomial``
with more than one sample; filters we cannot prove equal (top-p with ``min_tokens_to_keep > 1``, a top-p tensor
threshold not spelled ``1 - top_p`` or a per-row top_p not float32 (``dynamic=True``'s 0-d float64 top_p is
taken), min-p with ``min_tokens_to_keep > 1``, with a float min_p outside [0, 1], with a tensor min_p but no
scatter or compared in another dtype than float32, or applied before a top-p / temperature, a temperature after a
filter): the walk stops there (a min-p mask instead becomes the ban, above which only a temperature is absorbed)
and everything above stays in Inductor; each is reported as a near-miss, as is a sort + cumsum left above the
rewritten draw. Per-row top-k (a tensor k, which ``topk`` can't take) is not recognised. The replacement draws its
seed in the graph (``aten.randint``, a fallback that uses torch's device generator, which CUDA/HIP graphs advance
on each replay).

    s ─► [/T] ─► [top-k] ─► [top-p] ─► [min-p] ─► softmax ─► multinomial
  becomes
    s ──────────────────────────────┬─► rocm_fused::sample(s, seed, T, k, p, min_p, ...)
    randint(0, 2^31 - 1, (1,)) ─► seed
"""

from __future__ import annotations

import torch
from torch.fx import Graph, Node

from ...ops.sampling import sample_spec
from ...registry import ops_of
from ...report import Match as MatchRecord
from ...report import NearMiss, describe, location_of
from ..context import PassContext
from ..fx import cudagraphs_on, val
from .chain import Chain, recognise
from .draw import draw, escaping_probs, gumbel_draw, unrecognised_draws
from .emit import replace, upstream_sort, verify_chain

__all__ = ["Chain", "SamplingPass", "recognise"]


class SamplingPass:
    """The sampling pass (see the package docstring)."""

    name = "sampling"
    ops = ops_of(name)

    def __call__(self, graph: Graph, ctx: PassContext) -> None:
        for n in list(graph.nodes):
            if n.op != "call_function" or n.graph is not graph:
                continue
            c = draw(n) or gumbel_draw(n)
            if c is None:
                continue
            where = location_of(n)
            escaped = escaping_probs(n) if not c.is_probs else None
            if escaped is not None:  # the filtered distribution is needed anyway: draw on it, filters stay
                c = Chain(n, escaped, c.keepdim, is_probs=True)
            sv = val(c.scores)
            if not isinstance(sv, torch.Tensor) or sv.ndim != 2 or not sv.is_floating_point():
                ctx.near_miss(n.name, NearMiss("sampling", "sampling draw", "scores are not a 2D float "
                                               "tensor (batch, vocab)", where))
                continue
            c = recognise(c)
            if c.refused:
                ctx.near_miss(n.name, NearMiss("sampling", "sampling chain", c.refused + "; it stays in "
                                               "Inductor", where))
                continue
            why = verify_chain(n, c)
            if why is not None:
                ctx.near_miss(n.name, NearMiss("sampling", "sampling chain", why, where))
                continue
            rows = {name for name, v in (("temperature", c.temperature), ("top_k", c.top_k),
                                           ("top_p", c.top_p), ("min_p", c.min_p)) if isinstance(v, Node)}
            has_min_p = "min_p" in rows or c.min_p > 0.0
            spec = sample_spec(val(c.scores), is_probs=c.is_probs, top_k_first=c.top_k_first,
                               per_row=rows, has_min_p=has_min_p, has_ban=c.ban is not None,
                               greedy=isinstance(c.temperature, float) and c.temperature <= 0.0,
                               cudagraphs=cudagraphs_on(),
                               has_top_k="top_k" in rows or c.top_k > 0,
                               has_top_p="top_p" in rows or c.top_p < 1.0)
            choice = ctx.choose("sample", spec)
            if choice.provider is None:
                ctx.near_miss(n.name, NearMiss("sampling", "sampling chain", choice.why_not, where))
                continue
            new = replace(graph, c, choice.provider)
            n.replace_all_uses_with(new)
            graph.erase_node(n)
            shape, dtype = describe(val(c.scores))
            filters = "+".join(reversed(c.order)) or ("probs" if c.is_probs else "plain")
            note = ("the filtered distribution escapes (also used or returned): the draw is rewritten on the "
                    "probabilities (is_probs), the filters stay in Inductor") if escaped is not None else c.verified
            ctx.matched(n.name, MatchRecord("sampling", "sample", choice.provider, shape, dtype, where, note))
            graph.eliminate_dead_code()
            left = upstream_sort(c.scores) if c.stopped_at or not c.order else None
            reasons = ([c.stopped_at] if c.stopped_at else []) + c.notes
            if left is not None and not c.stopped_at:
                reasons.append("a cumsum (top-p-like filter) above the draw was not recognised")
            if reasons:
                ctx.near_miss(f"{n.name}:filters", NearMiss(
                    "sampling", f"filters above the rewritten draw ({filters})",
                    "; ".join(reasons) + "; it stays in Inductor", location_of(left) or where))
        unrecognised_draws(graph, ctx)
