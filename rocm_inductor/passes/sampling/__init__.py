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

Spellings the structural reads miss (a k-th column expanded or gathered, a finite fill, top-k scattered into
a ``-inf`` row, a descending sort with a shifted mask, vLLM's sorted top-k / top-p, sorted-order draws
``gather(sort_idx, -1, multinomial(q))``): when a ``topk`` / ``sort`` / ``cumsum`` over the vocabulary is
left above the walked chain (or in its ban's mask), the region is named by kind (``kinds.py``: float64 on
random logits against top-k / top-p / min-p and their combinations, parameters from its constants); a region
no kind fits stays in Inductor as a near-miss with the reason. 1-D logits (litgpt, gpt-oss) are taken as one
row (the op's output viewed back to the draw's shape).

The steps (``passes/contract.py``): ``find`` takes every ``multinomial`` and ``argmax``; ``read`` recognises
the draw (``draw.py``) and walks up the chain (``chain.py``: ``filters.py``, ``min_p.py``, ``softmax.py``);
``gate`` verifies it and chooses the provider; ``emit`` rewrites (``emit.py``); ``finish`` reports the random
draws left in the graph.

    s ─► [/T] ─► [top-k] ─► [top-p] ─► [min-p] ─► softmax ─► multinomial
  becomes
    s ──────────────────────────────┬─► rocm_fused::sample(s, seed, T, k, p, min_p, ...)
    randint(0, 2^31 - 1, (1,)) ─► seed
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch.fx import Graph, Node

from ...platform import Choice
from ...registry import ops_of
from ...report import Match
from ..context import PassContext
from ..contract import Candidate, Miss, RewritePass, choose_or_miss
from ..fx import is_call, val
from . import emit as _emit
from . import kinds
from .chain import Chain, recognise
from .draw import draw, draw_probs, escaping_probs, gumbel_draw, unrecognised_draws
from .emit import chain_spec, verify_chain

__all__ = ["Chain", "SamplingPass", "recognise"]

aten = torch.ops.aten

#: The targets a draw ends in (``multinomial``; ``argmax`` of the exponential race and of Gumbel-max).
DRAWS = (aten.multinomial.default, aten.argmax.default)


def read_chain(n: Node) -> Chain:
    """The chain behind the draw ``n``: the draw (:func:`~.draw.draw`, :func:`~.draw.gumbel_draw`), on the
    probabilities themselves when they escape (also used elsewhere: the filters stay in Inductor), walked up
    by :func:`~.chain.recognise`.

    Raises:
        Miss: silent when ``n`` is no draw we know (``finish`` reports the random ones); with the reason when
            the scores are not a 2D float tensor or the chain must stay in Inductor (e.g. a NaN temperature).
    """
    c = draw(n) or gumbel_draw(n)
    if c is None:
        raise Miss("", silent=True)
    escaped = escaping_probs(n) if not c.is_probs else None
    if escaped is not None:  # the filtered distribution is needed anyway: draw on it, filters stay
        c = Chain(n, escaped, c.keepdim, is_probs=True, escaped=True)
    sv = val(c.scores)
    if not isinstance(sv, torch.Tensor) or sv.ndim not in (1, 2) or not sv.is_floating_point():
        raise Miss("scores are not a 1-D (vocab) or 2-D (batch, vocab) float tensor", what="sampling draw")
    c = recognise(c)
    if c.refused:
        raise Miss(c.refused + "; it stays in Inductor")
    return c if c.escaped else by_kind(c)


def by_kind(c: Chain) -> Chain:
    """The chain with its filters named by kind (:func:`~.kinds.name_region`) when a ``topk`` / ``sort`` /
    ``cumsum`` over the vocabulary is left above what the structural walk took (or in its ban's mask); a kind
    the op can't take, or none, is noted on ``c`` (the emitted draw's near-miss says it), and ``c`` is returned
    as it was."""
    n = c.anchor
    sv = val(c.scores)
    v = sv.shape[-1]
    if not kinds.filter_anchors(c.scores, v) and not (c.ban is not None and kinds.filter_anchors(c.ban, v)):
        return c  # nothing left: a ban mask computed from a topk / sort (a filter taken for a ban) is named too
    out, space = draw_probs(n), "probs"
    if out is None:  # Gumbel-max reads logits: argmax(s - log(-log(u)))
        out, space = n.args[0].args[0], "logits"
    named = kinds.name_region(out, space, n, 1 if sv.ndim == 1 else sv.shape[0], v)
    if isinstance(named, str):
        c.notes.append(named)
        return c
    if named is None:
        return c
    sg = kinds.sorted_gather(n)
    params = dict(temperature=named.temperature, top_k=named.top_k, top_p=named.top_p, min_p=named.min_p)
    new = Chain(n, named.s0, True if sg else c.keepdim, order=named.order, named=True,
                gathered=sg[0] if sg else None, **params)
    new.verified = ("filters named by kind (" + "+".join(reversed(named.order)) + ") and verified on random "
                    "logits in float64")
    return recognise(new, pre=True)


class SamplingPass(RewritePass):
    """The sampling pass (see the package docstring)."""

    name = "sampling"
    ops = ops_of(name)

    def find(self, graph: Graph, ctx: PassContext) -> Iterable[Candidate]:
        """Every ``multinomial`` and ``argmax``, in graph order (``read`` skips what is no draw)."""
        return [Candidate(n, "sampling chain") for n in graph.nodes if is_call(n, *DRAWS)]

    def read(self, graph: Graph, ctx: PassContext, cand: Candidate) -> Chain:
        """The chain behind the draw (:func:`read_chain`)."""
        return read_chain(cand.anchor)

    def gate(self, graph: Graph, ctx: PassContext, cand: Candidate, params: Chain) -> Choice:
        """Verify the chain against HF's filtered distribution (:func:`~.emit.verify_chain`), then choose the
        provider for its spec (:func:`~.emit.chain_spec`)."""
        why = verify_chain(cand.anchor, params)
        if why is not None:
            raise Miss(why)
        return choose_or_miss(ctx, "sample", chain_spec(params))

    def emit(self, graph: Graph, ctx: PassContext, cand: Candidate, params: Chain, choice: Choice) -> Match:
        """The rewrite (:func:`~.emit.emit`)."""
        return _emit.emit(graph, ctx, params, choice)

    def finish(self, graph: Graph, ctx: PassContext) -> None:
        """Report the random draws left in the graph (:func:`~.draw.unrecognised_draws`); each rewrite already
        dropped what it left dead."""
        unrecognised_draws(graph, ctx)
