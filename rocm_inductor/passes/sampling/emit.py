"""What a recognised chain turns into: its verification against HF's filtered distribution, and the graph
edit to ``rocm_fused::sample`` with a seed drawn in the graph (``aten.randint``, a fallback that uses torch's
device generator, which CUDA/HIP graphs advance on each replay).
"""

from __future__ import annotations

import torch
from torch.fx import Graph, Node

from ..fx import insert_call, is_call, val
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

    Returns the op's node (int64 token ids of shape (B, 1) with ``keepdim``, else (B,)); the caller moves the
    draw's users onto it. ``provider`` is baked into the call.
    """
    sv = val(c.scores)
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
    args = (c.scores, seed, t_node, t_val, k_node, k_val, p_node, p_val, mp_node, mp_val, c.ban,
            c.is_probs, c.top_k_first, c.keepdim, provider)
    return insert_call(graph, c.anchor, torch.ops.rocm_fused.sample.default, args, like=c.anchor)


def upstream_sort(start: Node) -> Node | None:
    """A live ``sort`` + ``cumsum`` (an unrecognised top-p) among the ancestors of ``start``."""
    seen, stack = set(), [start]
    while stack:
        n = stack.pop()
        if not isinstance(n, Node) or n in seen:
            continue
        seen.add(n)
        if is_call(n, aten.cumsum.default):
            return n
        stack.extend(a for a in n.all_input_nodes)
    return None


def verify_chain(n: Node, c: Chain) -> str | None:
    """Verify a recognised chain with filters and constant parameters: the region from the scores to the drawn
    probabilities, evaluated on random logits (passes/discover.py), must equal HF's filtered distribution with
    the parameters read off the graph (``exact_distribution``). Returns the failed check, None when it holds
    (or when there is nothing to verify: no filters, per-row tensors, a ban)."""
    from ...providers.reference_sampling import exact_distribution
    from .. import discover

    probs = draw_probs(n)
    params = (c.temperature, c.top_k, c.top_p, c.min_p)
    if c.is_probs or not c.order or c.ban is not None or probs is None or any(isinstance(v, Node) for v in params):
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
