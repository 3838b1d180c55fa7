"""The random draws the pass starts from, and the report of those it leaves: ``multinomial(p, 1)``, the
exponential race ``argmax(p / exponential_(1), -1)`` (as Inductor decomposes ``exponential_``) and Gumbel-max
``argmax(s - log(-log(u)), -1)``. Each draw read becomes a :class:`~.chain.Chain` whose scores are the
softmax's input (or the probabilities themselves, ``is_probs``, when they are no softmax we read).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.fx import Graph, Node

from ...report import NearMiss, location_of
from ..context import PassContext
from ..fx import is_call, ndim, strip_casts, val
from .chain import Chain
from .reads import last_dim
from .softmax import softmax_input

aten = torch.ops.aten
prims = torch.ops.prims


def _exponential_of(q: Node) -> bool:
    """``q`` is Inductor's decomposed ``exponential_(1)``: ``-1 * where(u >= c, c2, log(u))``, u uniform."""
    if is_call(q, aten.exponential.default):  # config.fallback_random keeps the ATen op
        return len(q.args) < 2 or q.args[1] == 1.0
    if not (is_call(q, aten.mul.Tensor) and q.args[1] == -1.0 and is_call(q.args[0], aten.where.self)):
        return False
    cond, _, lg = q.args[0].args
    if not (is_call(lg, aten.log.default) and is_call(cond, aten.ge.Scalar) and cond.args[0] is lg.args[0]):
        return False
    u = lg.args[0]
    return is_call(u, prims.inductor_random.default) and u.args[2] == "rand"


def draw(n: Node) -> Chain | None:
    """A sampling draw at ``n``: multinomial(p, 1) or argmax(p / exponential), p of shape (B, V) or (V,)."""
    if is_call(n, aten.multinomial.default):
        num = n.args[1] if len(n.args) > 1 else n.kwargs.get("num_samples")
        if num != 1 or n.kwargs.get("generator") is not None or ndim(n.args[0]) not in (1, 2):
            return None
        p = n.args[0]
        s = softmax_input(p)
        return Chain(n, p, True, is_probs=True) if s is None else Chain(n, s, True)
    if is_call(n, aten.argmax.default) and len(n.args) >= 2 and is_call(n.args[0], aten.div.Tensor):
        p, q = n.args[0].args
        if not (isinstance(p, Node) and isinstance(q, Node) and ndim(p) in (1, 2) and last_dim(p, n.args[1])
                and (_exponential_of(q) or _exponential_of(strip_casts(q)))):  # bf16 probs: cast noise
            return None
        if tuple(val(q).shape) != tuple(val(p).shape):
            return None
        keep = bool(n.args[2]) if len(n.args) > 2 else bool(n.kwargs.get("keepdim", False))
        s = softmax_input(p)
        return Chain(n, p, keep, is_probs=True) if s is None else Chain(n, s, keep)
    return None


def _uniform(u: Any) -> bool:
    """``u`` is a uniform draw: Inductor's ``inductor_random(..., "rand")`` or ``aten.rand`` / ``rand_like``."""
    if is_call(u, prims.inductor_random.default):
        return u.args[2] == "rand"
    return is_call(u, aten.rand.default, aten.rand_like.default)


def _gumbel_noise(g: Any) -> bool:
    """``g`` is ``log(-log(u))`` (minus Gumbel noise), u uniform."""
    if not (is_call(g, aten.log.default) and is_call(g.args[0], aten.neg.default)):
        return False
    inner = g.args[0].args[0]
    return is_call(inner, aten.log.default) and _uniform(inner.args[0])


def gumbel_draw(n: Node) -> Chain | None:
    """Gumbel-max: ``argmax(s - log(-log(u)), -1)`` (equivalently ``s + Gumbel``), a draw from softmax(s)."""
    if not (is_call(n, aten.argmax.default) and len(n.args) >= 2 and last_dim(n.args[0], n.args[1])):
        return None
    a = n.args[0]
    if not (is_call(a, aten.sub.Tensor) and len(a.args) == 2 and a.kwargs.get("alpha", 1) == 1):
        return None
    s, g = a.args
    if not (isinstance(s, Node) and _gumbel_noise(g) and ndim(s) in (1, 2)) or \
            tuple(val(g).shape) != tuple(val(s).shape):
        return None
    keep = bool(n.args[2]) if len(n.args) > 2 else bool(n.kwargs.get("keepdim", False))
    return Chain(n, s, keep)


def draw_probs(n: Node) -> Node | None:
    """The probabilities node the draw at ``n`` reads (multinomial's input, the exponential race's numerator)."""
    if is_call(n, aten.multinomial.default):
        return n.args[0]
    if is_call(n, aten.argmax.default) and is_call(n.args[0], aten.div.Tensor):
        return n.args[0].args[0]
    return None


def escaping_probs(n: Node) -> Node | None:
    """The probabilities the draw at ``n`` reads when they are also used elsewhere (gpt-fast returns them)."""
    p = draw_probs(n)
    return p if isinstance(p, Node) and len(p.users) > 1 else None


_RANDOM = (prims.inductor_random.default, aten.rand.default, aten.rand_like.default, aten.exponential.default,
           aten.multinomial.default, aten.randn.default, aten.randn_like.default)


def _random_ancestor(n: Node, depth: int = 6) -> Node | None:
    """A random op among the ancestors of ``n`` within ``depth`` steps (a draw's noise), else None."""
    frontier, seen = [n], set()
    for _ in range(depth):
        nxt = []
        for m in frontier:
            for a in m.all_input_nodes:
                if a in seen:
                    continue
                seen.add(a)
                if is_call(a, *_RANDOM):
                    return a
                nxt.append(a)
        frontier = nxt
    return None


def unrecognised_draws(graph: Graph, ctx: PassContext) -> None:
    """Report random draws left in the graph (a multinomial, an argmax over noise): silence is a bug."""
    for n in graph.nodes:
        if is_call(n, aten.multinomial.default):
            why = "multinomial with more than one sample, a generator, or probabilities that are not (B, V) or (V,)"
        elif is_call(n, aten.argmax.default) and _random_ancestor(n) is not None:
            why = "an argmax over random noise that is neither the exponential race nor Gumbel-max we know"
        else:
            continue
        ctx.near_miss(n.name, NearMiss("sampling", "sampling draw", f"not rewritten: {why}", location_of(n)),
                      overwrite=False)
