"""What a router's top-k region is made of, read off the graph: the softmax before or after the top-k, the
sigmoid scores a DeepSeek-V3 router gathers its weights from, its correction bias and expert groups, and the
chain of elementwise ops that turns the chosen values into the weights (renormalisation, scaling, casts).

Pure functions over FX nodes; they read the structure only as far as needed to name the op's parameters, and
raise :class:`~rocm_inductor.passes.contract.Miss` with the reason where the region is not this op. The region as
a whole is then verified against the reference (``__init__.py``), so these readers need not prove anything.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
from torch.fx import Node

from ..contract import Miss
from ..fx import CONVERT, RESHAPES, is_call, ndim, shape, strip_casts, through, val

aten = torch.ops.aten

#: Ops the weights may pass through after the top-k and still be part of the region (the renormalisation, the
#: routed scaling factor, GPT-OSS's softmax, casts to the model's dtype).
WEIGHT_OPS = frozenset({
    aten.div.Tensor, aten.mul.Tensor, aten.add.Tensor, aten.sub.Tensor, aten.exp.default, aten.amax.default,
    aten.sum.dim_IntList, aten.reciprocal.default, aten.neg.default, aten.clone.default, CONVERT,
})
_VIEWS = RESHAPES | {aten.expand.default, aten.clone.default, aten.unsqueeze.default}


def topk_args(tk: Node) -> tuple[Any, Any, Any, Any, Any]:
    """``(input, k, dim, largest, sorted)`` of an ``aten.topk`` node, positional or keyword (defaults -1, True,
    True)."""
    names = ("self", "k", "dim", "largest", "sorted")
    vals = list(tk.args) + [tk.kwargs.get(n) for n in names[len(tk.args):]]
    x, k, dim, largest, srt = vals
    return x, k, -1 if dim is None else dim, True if largest is None else largest, True if srt is None else srt


def output(tk: Node, i: int) -> Node | None:
    """The ``getitem(tk, i)`` node with users (values 0, indices 1), or None."""
    for u in tk.users:
        if is_call(u, operator.getitem) and u.args[1] == i and u.users:
            return u
    return None


def _last(dims: Any, rank: int) -> bool:
    if isinstance(dims, int):
        dims = [dims]
    return isinstance(dims, (list, tuple)) and len(dims) == 1 and dims[0] in (-1, rank - 1)


def softmax_input(n: Any) -> Node | None:
    """``x`` when ``n`` (casts stripped) is a softmax of ``x`` over its last dim: ``aten._softmax`` or its
    decomposition ``exp(x - amax(x)) / sum(exp(...))`` (the max subtraction optional); else None."""
    n = strip_casts(n)
    if is_call(n, aten._softmax.default):
        return n.args[0] if _last(n.args[1], ndim(n)) else None
    if not (is_call(n, aten.div.Tensor) and is_call(n.args[0], aten.exp.default) and is_call(n.args[1],
                                                                                         aten.sum.dim_IntList)):
        return None
    e, s = n.args
    if s.args[0] is not e or not _last(s.args[1], ndim(e)):
        return None
    inner = e.args[0]
    if is_call(inner, aten.sub.Tensor) and is_call(inner.args[1], aten.amax.default) and \
            inner.args[1].args[0] is inner.args[0] and _last(inner.args[1].args[1], ndim(inner)):
        return inner.args[0]
    return inner


def weights_chain(seed: Node) -> tuple[Node, list[Node]]:
    """Where the weights leave the region: walk forward from ``seed`` (the top-k values, or the gather of the
    scores) through :data:`WEIGHT_OPS` whose tensor inputs are all in the chain.

    Returns:
        ``(out, chain)``: the one node whose value is used outside the chain, and the chain (seed first).

    Raises:
        Miss: the weights are read at two points of the chain (the op would have to keep both).
    """
    chain, inset = [seed], {seed}
    changed = True
    while changed:
        changed = False
        for n in list(chain):
            for u in n.users:
                if u in inset or not is_call(u, *WEIGHT_OPS) or not all(m in inset for m in u.all_input_nodes):
                    continue
                if u.target is CONVERT and not val(u).dtype.is_floating_point:
                    continue
                chain.append(u)
                inset.add(u)
                changed = True
    outs = [n for n in chain if any(u not in inset for u in n.users)]
    if len(outs) != 1:
        raise Miss(f"the router's weights are read at {len(outs)} points ({', '.join(o.name for o in outs)}): the "
                   "op would have to keep each")
    return outs[0], chain


def renorm_and_scale(chain: list[Node]) -> tuple[bool, float]:
    """``(renormalize, routed_scaling_factor)`` read off the weights' chain: a last-dim ``sum`` that is not a
    softmax's sum of exponentials renormalises; Python-number multipliers (and divisors) are the scaling."""
    renorm, scale = False, 1.0
    for n in chain:
        if n.target is aten.sum.dim_IntList and not is_call(n.args[0], aten.exp.default):
            renorm = True
        if n.target in (aten.mul.Tensor, aten.div.Tensor):
            num = [a for a in n.args if isinstance(a, (int, float)) and not isinstance(a, bool)]
            if num:
                scale = scale * num[0] if n.target is aten.mul.Tensor else scale / num[0]
    return renorm, float(scale)


def _fill_value(n: Any) -> float | None:
    """The value of a scalar constant (``full([], v)`` / ``scalar_tensor(v)`` / a Python number), else None."""
    if isinstance(n, (int, float)):
        return float(n)
    if is_call(n, aten.full.default) and len(n.args) >= 2 and not list(n.args[0]):
        return float(n.args[1])
    if is_call(n, aten.scalar_tensor.default):
        return float(n.args[0])
    return None


def _ancestors_topk(start: Node, stop: set[Node]) -> list[Node]:
    seen, todo, found = set(), [start], []
    while todo:
        n = todo.pop()
        if n in seen or n in stop or n.op != "call_function":
            continue
        seen.add(n)
        if n.target is aten.topk.default:
            found.append(n)
        todo.extend(n.all_input_nodes)
    return found


def sigmoid_choice(x: Node, scores: Node) -> tuple[Node | None, int, int]:
    """DeepSeek-V3's choice tensor below ``x`` (the final top-k's input): ``(bias, n_group, topk_group)``.

    ``x`` is ``where(~mask, -inf, c)`` (grouped) or ``c`` itself, with ``c = scores + bias`` or ``scores``
    (``scores`` the sigmoid, casts stripped). The groups are read from the top-k over group scores the mask comes
    from: ``n_group`` its input's last dim, ``topk_group`` its k; the group score must be the sum of each group's
    two best.

    Raises:
        Miss: another fill than -inf, a mask not made by a group top-k, an unknown group score, a bias that is
            not an (E,) tensor, symbolic groups.
    """
    mask = None
    if is_call(x, aten.where.self):
        cond, a, b = x.args
        fa, fb = _fill_value(a), _fill_value(b)
        fill, c = (fa, b) if fa is not None else (fb, a)
        if fill is None:
            raise Miss("the experts' choice scores are masked by a tensor, not a constant")
        if fill != float("-inf"):
            raise Miss(f"the experts outside the chosen groups are filled with {fill:g}, not -inf as in HF "
                       "DeepSeek-V3 (a negative biased score would lose to them)")
        mask = cond
    else:
        c = x
    c = strip_casts(c)
    bias = None
    if is_call(c, aten.add.Tensor):
        a, b = c.args
        if strip_casts(a) is scores:
            bias = b
        elif strip_casts(b) is scores:
            bias = a
        else:
            raise Miss("the choice scores are not the sigmoid scores plus a bias")
        if not isinstance(bias, Node) or ndim(bias) != 1:
            raise Miss("the correction bias is not an (experts,) tensor")
    elif c is not scores:
        raise Miss(f"the choice scores are neither the sigmoid scores nor scores + bias ({c.target})")
    if mask is None:
        return bias, 1, 1
    stop = {c, scores} | ({bias} if isinstance(bias, Node) else set())
    groups = [t for t in _ancestors_topk(mask, stop) if output(t, 1) is not None]
    if len(groups) != 1:
        raise Miss("the expert mask does not come from one top-k over group scores")
    gsrc, topk_group = topk_args(groups[0])[:2]
    n_group = shape(gsrc)[-1] if ndim(gsrc) == 2 else None
    if not isinstance(n_group, int) or not isinstance(topk_group, int):
        raise Miss("the expert groups or the number of kept groups are not compile-time integers")
    g = strip_casts(gsrc)
    if is_call(g, aten.amax.default):
        raise Miss("each group is scored by its best expert (DeepSeek-V2's group-limited greedy); the op scores "
                   "the sum of its two best (DeepSeek-V3)")
    two = g.args[0] if is_call(g, aten.sum.dim_IntList) else None
    inner = two.args[0] if is_call(two, operator.getitem) and two.args[1] == 0 else None
    if not is_call(inner, aten.topk.default):
        raise Miss(f"unknown group scoring ({getattr(g, 'target', g)}): the op scores each group by the sum of "
                   "its two best experts (DeepSeek-V3)")
    src, k2 = topk_args(inner)[:2]
    if k2 != 2:
        raise Miss(f"each group is scored by the sum of its {k2} best experts; the op sums the two best")
    if through(src, _VIEWS) is not c:
        raise Miss("the group scores are not computed from the choice scores")
    return bias, n_group, topk_group
