"""The causal part of a decode mask as query positions: ``rocm_fused::decode_attention(..., positions=, window=)``.

Covers: a boolean mask (after ``masks.mask_source``) that is, or is the ``&`` (``bitwise_and`` / ``logical_and``)
of, a term computed from one integer tensor ``p`` of ``Lq`` values (HF's ``cache_position``: transformers 5's
``causal_mask_function`` over ``iota + cache_position``, optionally with ``sliding_window_overlay``) and
constants only, and evaluating at compile time to ``j <= p[i]`` (and ``j > p[i] - window``) for random
positions ``p`` (the same numeric check the other rewrites use, ``passes/verify.py``'s CPU evaluation). That
term becomes the op's ``positions`` (viewed ``(1, Lq)``: one position per query row, shared by the batch) and
``window``; the other term, if any, stays the op's mask (HF's padding mask from ``attention_mask``). The kernel
then loops only over the slots the positions allow and splits them evenly (``providers/triton/attention``).

Leaves alone (the mask stays as it is, the attention is rewritten anyway): a term reading another tensor (a
parameter or buffer such as gpt-fast's ``causal_mask[None, None, input_pos]``: its values are not known at
compile time), per-batch positions, an ``&`` of more than two terms, an inverted or additive mask, and any term
that does not evaluate to the causal / sliding form; everything with ``ROCM_FUSED_ATTN_POSITIONS=0`` (an A/B
switch, part of the FX graph cache key: ``options.COMPILE_ENV``).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import torch
from torch.fx import Graph, GraphModule, Node

from ..fx import is_call, val
from ..verify import _run
from .masks import MaskSource, strip_expand

aten = torch.ops.aten

_ANDS = (aten.bitwise_and.Tensor, aten.logical_and.default)
#: The A/B switch (``options.COMPILE_ENV``): ``0`` leaves every mask as it is.
ENV = "ROCM_FUSED_ATTN_POSITIONS"
#: Random position draws the causal check evaluates (besides the first and last slot).
DRAWS = 4


@dataclasses.dataclass
class Positions:
    """The positions found: the integer node (``Lq`` values), the window (0: none), the mask left (None: the
    causal term was the whole mask) and how it was found (for the report)."""

    node: Node
    window: int
    rest: MaskSource
    spelling: str


def _terms(n: Any) -> list[Any]:
    """The operands of an ``&`` tree, leaving out constant True ones (HF's ``full((), True) & causal``)."""
    n = strip_expand(n)
    if is_call(n, *_ANDS) and len(n.args) == 2:
        return _terms(n.args[0]) + _terms(n.args[1])
    if is_call(n, aten.full.default) and n.args[1] is True:
        return []
    return [n]


def _leaves(term: Node) -> tuple[list[Node], list[Node]] | None:
    """``(leaves, nodes)``: the tensors ``term`` reads that are neither computed from others nor constants, and
    the call nodes between them and ``term`` in graph order; None when it holds a random op."""
    leaves: list[Node] = []
    nodes: set[Node] = set()
    stack = [term]
    while stack:
        n = stack.pop()
        if n in nodes or n in leaves:
            continue
        if n.op != "call_function":
            leaves.append(n)
            continue
        if torch.Tag.nondeterministic_seeded in getattr(n.target, "tags", ()):
            return None
        nodes.add(n)
        stack.extend(n.all_input_nodes)
    order = [n for n in term.graph.nodes if n in nodes]
    return leaves, order


def _module(leaf: Node, order: list[Node], terms: list[Node]) -> GraphModule:
    sub = Graph()
    env: dict[Node, Node] = {leaf: sub.placeholder("p")}
    for n in order:
        env[n] = sub.node_copy(n, lambda m: env[m])
    sub.output(tuple(env[t] for t in terms))
    return GraphModule(torch.nn.Module(), sub)


def _window(keep_last: torch.Tensor, lkv: int) -> int | None:
    """The window of the term's row at position ``lkv - 1`` (True from ``lkv - w`` on), 0 when all kept, None
    when the row is no suffix."""
    kept = int(keep_last.sum())
    if kept == lkv:
        return 0
    want = torch.arange(lkv) >= lkv - kept
    return kept if kept > 0 and torch.equal(keep_last, want) else None


def _position_leaf(term: Node, lq: int, lkv: int) -> tuple[Node, list[Node]] | None:
    """``(p, nodes)`` when ``term`` is a bool (.., Lq|1, Lkv) tensor computed from one integer tensor ``p`` of
    ``Lq`` static values and constants only, else None."""
    tv = val(term)
    if not isinstance(tv, torch.Tensor) or tv.dtype != torch.bool or not 1 <= tv.ndim <= 4:
        return None
    if tv.shape[-1] != lkv or (tv.ndim > 1 and tv.shape[-2] not in (1, lq)) or any(s != 1 for s in tv.shape[:-2]):
        return None
    found = _leaves(term)
    if found is None or len(found[0]) != 1:
        return None
    pv = val(found[0][0])
    if not isinstance(pv, torch.Tensor) or pv.dtype not in (torch.int32, torch.int64) or pv.numel() != lq:
        return None
    if not all(isinstance(s, int) for s in pv.shape):
        return None
    return found[0][0], found[1]


def _causal(terms: list[Node], leaf: Node, lq: int, lkv: int) -> int | None:
    """The window when the ``&`` of ``terms`` (each a function of ``leaf`` alone) is the causal / sliding mask of
    positions ``leaf`` (module docstring) on every draw, else None."""
    inner: set[Node] = set()
    for t in terms:
        inner.update((_leaves(t) or ((), ()))[1])
    order = [n for n in leaf.graph.nodes if n in inner]
    mod = _module(leaf, order, terms)
    pv = val(leaf)
    gen = torch.Generator().manual_seed(0)
    draws = [torch.full((lq,), lkv - 1), torch.zeros(lq, dtype=torch.long)]
    draws += [torch.randint(0, lkv, (lq,), generator=gen) for _ in range(DRAWS)]
    j = torch.arange(lkv)
    window = None
    for p in draws:
        got = torch.ones(lq, lkv, dtype=torch.bool)
        for out in _run(mod, [p.to(pv.dtype).reshape(pv.shape)], {}):
            got = got & torch.broadcast_to(out.reshape(out.shape[-2:] if out.ndim > 1 else out.shape), (lq, lkv))
        if window is None:
            window = _window(got[0], lkv)
            if window is None:
                return None
        want = j[None, :] <= p[:, None]
        if window:
            want = want & (j[None, :] > p[:, None] - window)
        if not torch.equal(got, want):
            return None
    return int(window or 0)


def causal_positions(ms: MaskSource, lq: Any, lkv: Any) -> Positions | None:
    """The positions behind ``ms`` (module docstring), or None (the mask stays the op's mask).

    Args:
        ms: the attention's mask source; lq, lkv: the query and KV lengths (static ints, else None is returned).
    """
    if os.environ.get(ENV) == "0" or ms.node is None or ms.kind != "bool" or ms.invert or ms.fill is not None:
        return None
    if not isinstance(lq, int) or not isinstance(lkv, int):
        return None
    terms = _terms(ms.node)
    if not terms or not all(isinstance(t, Node) for t in terms):
        return None
    leaves = [_position_leaf(t, lq, lkv) for t in terms]
    pos_leaves = {x[0] for x in leaves if x is not None}
    rest = [t for t, x in zip(terms, leaves, strict=True) if x is None]
    if len(pos_leaves) != 1 or len(rest) > 1:  # one positions tensor; at most one other term kept as the mask
        return None
    (p,) = pos_leaves
    try:
        window = _causal([t for t, x in zip(terms, leaves, strict=True) if x is not None], p, lq, lkv)
    except Exception:  # a term we cannot evaluate is not proven causal: the mask stays
        window = None
    if window is None:
        return None
    what = f"positions from {p.name}" + (f", window {window}" if window else "") + " (causal mask in the op)"
    kind = "bool" if rest else "none"
    return Positions(p, window, MaskSource(rest[0] if rest else None, kind,
                                           ", ".join(x for x in (ms.spelling, what) if x)), what)
