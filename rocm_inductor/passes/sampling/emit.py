"""What a recognised chain turns into: its verification against HF's filtered distribution, the op's spec,
and the graph edit to ``rocm_fused::sample`` with a seed drawn in the graph (``aten.randint``, a fallback that
uses torch's device generator, which CUDA/HIP graphs advance on each replay) and its report record.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.fx import Graph, Node

from ...ops.sampling import sample_spec
from ...platform import Choice
from ...report import Match, NearMiss, describe, location_of
from ..context import PassContext
from ..fx import cudagraphs_on, insert_call, val
from .chain import Chain
from .draw import draw_probs

aten = torch.ops.aten


def _tensor_or_float(v: float | Node, neutral: float) -> tuple[Node | None, float]:
    """The op's (per-row tensor, float) argument pair for a chain parameter: a tensor node goes in the tensor
    slot with the float at its neutral value (unused by the op), a number in the float slot."""
    return (v, neutral) if isinstance(v, Node) else (None, float(v))


def replace(graph: Graph, c: Chain, provider: str) -> Node:
    """Insert ``rocm_fused::sample`` for chain ``c`` before its draw, with a seed drawn in the graph
    (``randint(0, 2**31 - 1, (1,))``, int64 on the scores' device) and a SymInt top-k as an int64 0-d tensor.

    Returns the op's node (int64 token ids of shape (B, 1) with ``keepdim``, else (B,); for 1-D scores the
    draw's own shape, (1,) or (), through a view); the caller moves the draw's users (or those of the gather
    of a sorted-order draw) onto it. ``provider`` is baked into the call.
    """
    sv = val(c.scores)
    scores = c.scores
    if sv.ndim == 1:  # 1-D logits (litgpt, gpt-oss): one row for the op, the draw's own shape back below
        scores = insert_call(graph, c.anchor, aten.unsqueeze.default, (c.scores, 0), like=c.anchor)
    t_node, t_val = _tensor_or_float(c.temperature, 1.0)
    p_node, p_val = _tensor_or_float(c.top_p, 1.0)
    seed = insert_call(graph, c.anchor, aten.randint.low, (0, 2**31 - 1, [1]),
                       {"dtype": torch.int64, "device": sv.device}, like=c.anchor)
    k_node = None
    if isinstance(c.top_k, Node):  # a SymInt (dynamic=True): the op takes per-row k as an int64 tensor
        k_node = insert_call(graph, c.anchor, aten.scalar_tensor.default, (c.top_k,),
                             {"dtype": torch.int64, "device": sv.device}, like=c.anchor)
    k_val = 0 if k_node is not None else int(c.top_k)
    mp_node, mp_val = _tensor_or_float(c.min_p, 0.0)
    args = (scores, seed, t_node, t_val, k_node, k_val, p_node, p_val, mp_node, mp_val, c.ban,
            c.is_probs, c.top_k_first, c.keepdim or sv.ndim == 1, provider)
    new = insert_call(graph, c.anchor, torch.ops.rocm_fused.sample.default, args, like=c.anchor)
    want = list(val(c.gathered or c.anchor).shape)
    if list(val(new).shape) != want:  # 1-D logits: multinomial gives (1,), argmax () or (1,)
        new = insert_call(graph, c.anchor, aten.view.default, (new, want), like=c.anchor)
    return new


def upstream_filter(start: Node) -> Node | None:
    """A live ``topk`` / ``sort`` / ``cumsum`` over the vocabulary (a filter nobody named) among the nearest
    ancestors of ``start`` (:func:`~.kinds.filter_anchors`), else None."""
    from .kinds import filter_anchors

    left = filter_anchors(start, val(start).shape[-1])
    return left[0] if left else None


def verify_chain(n: Node, c: Chain) -> str | None:
    """Verify a recognised chain with filters and constant parameters: the region from the scores to the drawn
    probabilities, evaluated on random logits (passes/discover.py), must equal HF's filtered distribution with
    the parameters read off the graph (``exact_distribution``). Returns the failed check, None when it holds
    (or when there is nothing to verify: no filters, per-row tensors, a ban)."""
    from ...providers.reference_sampling import exact_distribution
    from .. import discover

    probs = draw_probs(n)
    params = (c.temperature, c.top_k, c.top_p, c.min_p)
    if (c.named or c.is_probs or not c.order or c.ban is not None or probs is None
            or any(isinstance(v, Node) for v in params)):
        return None
    region = discover.extract([c.scores], [probs])
    if isinstance(region, str):
        return None  # the structural recogniser matched a chain with shared intermediates: trust it
    t, k, p, mp = float(c.temperature), int(c.top_k), float(c.top_p), float(c.min_p)

    pdt = val(probs).dtype

    def dist(scores: torch.Tensor) -> torch.Tensor:
        flat = scores.reshape(-1, scores.shape[-1])
        rows = [exact_distribution(r.double(), t, k, p, mp, c.top_k_first) for r in flat]
        return torch.stack(rows).reshape(scores.shape)

    v = discover.verify(region, "sampling", (t, k, p, mp, c.top_k_first, tuple(c.order)),
                        lambda s64: (dist(s64),), lambda s: (dist(s).to(pdt),))
    if not v.ok:
        return f"verification failed: {v.reason}"
    c.verified = "filtered distribution verified against HF's on random logits" + (" (cached)" if v.cached else "")
    return None


def chain_spec(c: Chain) -> dict[str, Any]:
    """The compile-time spec of chain ``c`` for the provider choice (``ops.sampling.sample_spec``: which
    parameters are per-row tensors, which filters are on, greedy, CUDA graph capture)."""
    rows = {name for name, v in (("temperature", c.temperature), ("top_k", c.top_k),
                                 ("top_p", c.top_p), ("min_p", c.min_p)) if isinstance(v, Node)}
    has_min_p = "min_p" in rows or c.min_p > 0.0
    return sample_spec(val(c.scores), is_probs=c.is_probs, top_k_first=c.top_k_first,
                       per_row=rows, has_min_p=has_min_p, has_ban=c.ban is not None,
                       greedy=isinstance(c.temperature, float) and c.temperature <= 0.0,
                       cudagraphs=cudagraphs_on(),
                       has_top_k="top_k" in rows or c.top_k > 0,
                       has_top_p="top_p" in rows or c.top_p < 1.0)


def emit(graph: Graph, ctx: PassContext, c: Chain, choice: Choice) -> Match:
    """Replace the draw ``c.anchor`` by ``rocm_fused::sample`` (:func:`replace`), drop what it left dead, and
    report the filters above the draw the chain did not take (a walk stopped at a near variant, a min-p mask
    kept as a ban, an unrecognised sort + cumsum) as a near-miss at ``"<draw>:filters"``.

    Returns:
        the match record (its note: the verification, or that the filtered distribution escapes).
    """
    n = c.anchor
    where = location_of(n)
    new = replace(graph, c, choice.provider)
    if c.gathered is not None:  # a sorted-order draw: the gather back to token ids goes with it
        c.gathered.replace_all_uses_with(new)
        graph.erase_node(c.gathered)
    n.replace_all_uses_with(new)
    graph.erase_node(n)
    shape, dtype = describe(val(c.scores))
    filters = "+".join(reversed(c.order)) or ("probs" if c.is_probs else "plain")
    note = ("the filtered distribution escapes (also used or returned): the draw is rewritten on the "
            "probabilities (is_probs), the filters stay in Inductor") if c.escaped else c.verified
    record = Match("sampling", "sample", choice.provider, shape, dtype, where, note)
    graph.eliminate_dead_code()
    left = upstream_filter(c.scores) or (upstream_filter(c.ban) if c.ban is not None else None)
    reasons = ([c.stopped_at] if c.stopped_at else []) + c.notes
    # an escaping distribution keeps its filters in Inductor by design (the match note says so): not a miss
    if left is not None and not reasons and not c.escaped:
        reasons.append(f"a {left.target.__name__.split('.')[0]} over the vocabulary above the draw (a filter) was "
                       "not recognised")
    if reasons:
        ctx.near_miss(f"{n.name}:filters", NearMiss(
            "sampling", f"filters above the rewritten draw ({filters})",
            "; ".join(reasons) + "; it stays in Inductor", location_of(left) or where))
    return record
