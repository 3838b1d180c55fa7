"""Rotary embeddings (RoPE) -> ``rocm_fused::rope``: one op for q and k together.

What is matched is the *kind*, on the canonical post-grad graph: a rotation

    out = x * c + rot(x) * s          rot = rotate_half (NeoX)  : cat(-x[..., h:], x[..., :h], -1)
                                            rotate_every_two (GPT-J): reshape(cat(unsq(-x[..., 1::2], -1),
                                                                                 unsq(x[..., ::2], -1), -1))
    out = flatten(view_as_real(view_as_complex(x.reshape(..., -1, 2)) * freqs_cis))   (complex form)

with ``neg`` or ``* -1``, operands in either order, any unsqueeze dim / layout / dtype of c and s (they are
taken as they reach the multiply and broadcast by the op), any head_dim, static or dynamic sequence length.
Around a rotation the pass folds, repeatedly:
- an upcast: ``x = q.float()`` and the only use of ``out`` is ``.to(q.dtype)`` -> the op reads q and rounds
  once to q's dtype (the same single rounding eager does) (SPELLINGS RoPE 2, 5);
- partial rotary: ``x = q[..., :rd]`` and the only use of ``out`` is ``cat([out, q[..., rd:]], -1)`` -> the
  op rotates the first rd features of q and copies the tail (RoPE 3).
Rotations that share c and s (the same nodes, after canonicalize's CSE) are paired in graph order into one
op for q and k (one launch); an unpaired rotation gets an op with ``k=None``.

Why not ``register_replacement``: the spellings differ in integer literals (half dim, slice dims, unsqueeze
dims, reshape sizes) and in where the broadcast happens, which a traced pattern bakes in; a structural match
over the few ops above covers all of them with one rule and reads rotary_dim and the style from the match.

Deliberately left alone (reported as near-misses): rotations whose output is broadcast larger than x (c/s
with extra dims), tables whose last dim is neither the rotated width nor (complex) half of it, symbolic
head_dim, > 4-D tensors (Triton limit), and anything no provider takes. In a training forward graph the
rewrite is still exact (the backward graph was already derived and reads saved tensors, not our op).
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Any

import torch
from torch._inductor.pattern_matcher import stable_topological_sort
from torch.fx import Graph, Node

from ..ops.rope import rope_spec
from ..report import Match as MatchRecord
from ..report import NearMiss, describe, location_of
from .canonicalize import insert_call
from .manager import PassContext

aten = torch.ops.aten
prims = torch.ops.prims
_CONVERT = prims.convert_element_type.default
_RESHAPES = (aten.reshape.default, aten.view.default, aten._unsafe_view.default)
_BIG = 2**62


@dataclasses.dataclass
class Rotation:
    """One matched rotation. ``inp``/``out``/``rotary_dim`` change as upcast and partial rotary are folded."""

    anchor: Node  # the add (or the view_as_real of the complex form): reported location
    inp: Node  # what the op reads
    out: Node  # the node whose uses the op's output replaces
    cos: Any  # Node, or ("complex", freqs Node) until emitted
    sin: Any
    rotary_dim: int
    interleaved: bool
    half_table: bool
    style: str  # "neox" | "gptj" | "complex" (report)


def _val(n: Any) -> Any:
    return n.meta.get("val") if isinstance(n, Node) else None


def _is(n: Any, *targets: Any) -> bool:
    return isinstance(n, Node) and n.op == "call_function" and n.target in targets


def _eq(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # unbacked symbol
        return False


def _slice(n: Any) -> tuple[Node, int, int, Any, int] | None:
    """``slice.Tensor(x, dim, start, end, step)`` with defaults -> (x, dim >= 0, start, end, step)."""
    if not _is(n, aten.slice.Tensor):
        return None
    x = n.args[0]
    v = _val(x)
    if v is None:
        return None
    args = list(n.args[1:]) + [None] * (4 - len(n.args[1:]))
    dim = n.kwargs.get("dim", args[0] if args[0] is not None else 0)
    start = n.kwargs.get("start", args[1]) or 0
    end = n.kwargs.get("end", args[2])
    step = n.kwargs.get("step", args[3]) or 1
    if not isinstance(dim, int):
        return None
    return x, dim % v.ndim, start, (_BIG if end is None else end), step


def _last(x: Node, dim: Any) -> bool:
    v = _val(x)
    return v is not None and isinstance(dim, int) and dim % v.ndim == v.ndim - 1


def _negated(n: Any) -> Node | None:
    if _is(n, aten.neg.default):
        return n.args[0]
    if _is(n, aten.mul.Tensor) and len(n.args) == 2 and n.args[1] == -1:
        return n.args[0]
    return None


def _full_end(end: Any, size: Any) -> bool:
    return (isinstance(end, int) and end >= _BIG // 2) or _eq(end, size) or (
        isinstance(end, int) and isinstance(size, int) and end >= size)


def _rotate_half_of(r: Node) -> Node | None:
    """x if ``r`` is rotate_half(x) = cat(-x[..., h:], x[..., :h], -1) with 2h = x.shape[-1]."""
    if not _is(r, aten.cat.default) or len(r.args[0]) != 2:
        return None
    dim = r.args[1] if len(r.args) > 1 else 0
    hi = _slice(_negated(r.args[0][0]))
    lo = _slice(r.args[0][1])
    if hi is None or lo is None or hi[0] is not lo[0] or not _last(r, dim):
        return None
    x = hi[0]
    d = _val(x).shape[-1]
    if hi[1] != _val(x).ndim - 1 or lo[1] != hi[1] or hi[4] != 1 or lo[4] != 1:
        return None
    h = hi[2]
    if not (isinstance(d, int) and isinstance(h, int) and 2 * h == d and lo[2] == 0
            and _eq(lo[3], h) and _full_end(hi[3], d)):
        return None
    return x


def _rotate_every_two_of(r: Node) -> Node | None:
    """x if ``r`` is GPT-J's rotate_every_two(x) = stack(-x[..., 1::2], x[..., ::2], -1).flatten(-2)."""
    if not _is(r, *_RESHAPES):
        return None
    c = r.args[0]
    if _is(c, aten.cat.default) and len(c.args[0]) == 2:
        parts = [p.args[0] if _is(p, aten.unsqueeze.default) and _last(p, p.args[1]) else None
                 for p in c.args[0]]
        if None in parts or not _last(c, c.args[1] if len(c.args) > 1 else 0):
            return None
    elif _is(c, aten.stack.default) and len(c.args[0]) == 2:
        dim = c.args[1] if len(c.args) > 1 else 0
        if not _last(c, dim):
            return None
        parts = list(c.args[0])
    else:
        return None
    odd, even = _slice(_negated(parts[0])), _slice(parts[1])
    if odd is None or even is None or odd[0] is not even[0]:
        return None
    x = odd[0]
    xv = _val(x)
    d = xv.shape[-1]
    if odd[1] != xv.ndim - 1 or even[1] != odd[1] or odd[4] != 2 or even[4] != 2:
        return None
    if odd[2] != 1 or even[2] != 0 or not _full_end(odd[3], d) or not _full_end(even[3], d):
        return None
    if not isinstance(d, int) or d % 2 or tuple(_val(r).shape) != tuple(xv.shape):
        return None
    return x


_ROTATIONS = ((_rotate_half_of, False, "neox"), (_rotate_every_two_of, True, "gptj"))


def _match_add(n: Node) -> Rotation | None:
    """x * c + rot(x) * s (operands in any order)."""
    if not _is(n, aten.add.Tensor) or len(n.args) != 2 or n.kwargs.get("alpha", 1) != 1:
        return None
    for m1, m2 in (n.args, n.args[::-1]):
        if not (_is(m1, aten.mul.Tensor) and _is(m2, aten.mul.Tensor)):
            continue
        for x, c in (m1.args, m1.args[::-1]):
            for r, s in (m2.args, m2.args[::-1]):
                if not (isinstance(x, Node) and isinstance(r, Node) and isinstance(c, Node)
                        and isinstance(s, Node)):
                    continue
                for fn, inter, style in _ROTATIONS:
                    if fn(r) is x:
                        d = _val(x).shape[-1]
                        return Rotation(n, x, n, c, s, d, inter, False, style)
    return None


def _match_complex(n: Node) -> Rotation | None:
    """reshape(view_as_real(view_as_complex(reshape(x, [..., -1, 2])) * f), x.shape)."""
    if not _is(n, aten.view_as_real.default) or len(n.users) != 1:
        return None
    out = next(iter(n.users))
    m = n.args[0]
    if not _is(out, *_RESHAPES) or not _is(m, aten.mul.Tensor) or len(m.args) != 2:
        return None
    for a, f in (m.args, m.args[::-1]):
        if not (_is(a, aten.view_as_complex.default) and _is(a.args[0], *_RESHAPES) and isinstance(f, Node)):
            continue
        x = a.args[0].args[0]
        xv, fv = _val(x), _val(f)
        if xv is None or fv is None or fv.dtype != torch.complex64 or xv.dtype != torch.float32:
            continue
        pairs = _val(a.args[0]).shape
        if tuple(_val(out).shape) != tuple(xv.shape) or tuple(pairs[:-2]) != tuple(xv.shape[:-1]):
            continue
        d = xv.shape[-1]
        return Rotation(n, x, out, ("complex", f), None, d, True, True, "complex")
    return None


def _only_user(n: Node) -> Node | None:
    return next(iter(n.users)) if len(n.users) == 1 else None


def _fold_upcast(r: Rotation) -> bool:
    x, u = r.inp, _only_user(r.out)
    if not (_is(x, _CONVERT) and u is not None and _is(u, _CONVERT)):
        return False
    q0 = x.args[0]
    q0v, xv = _val(q0), _val(x)
    if q0v is None or not q0v.is_floating_point() or xv.dtype != torch.float32 or u.args[1] != q0v.dtype:
        return False
    r.inp, r.out = q0, u
    return True


def _fold_partial(r: Rotation) -> bool:
    sl, u = _slice(r.inp), _only_user(r.out)
    if sl is None or u is None or not _is(u, aten.cat.default) or len(u.args[0]) != 2:
        return False
    if u.args[0][0] is not r.out:
        return False
    q1, dim, start, end, step = sl
    d = _val(q1).shape[-1]
    if dim != _val(q1).ndim - 1 or start != 0 or step != 1 or not isinstance(end, int) \
            or not isinstance(d, int) or end >= d or not _last(u, u.args[1] if len(u.args) > 1 else 0):
        return False
    tail = _slice(u.args[0][1])
    if tail is None or tail[0] is not q1 or tail[1] != dim or tail[2] != end or tail[4] != 1 \
            or not _full_end(tail[3], d) or _val(u).dtype != _val(q1).dtype:
        return False
    r.inp, r.out, r.rotary_dim = q1, u, end
    return True


def _table_ok(r: Rotation) -> str | None:
    """Why the match can't become the op (None if it can)."""
    xv, ov = _val(r.inp), _val(r.out)
    if xv is None or ov is None or not xv.is_floating_point():
        return "input is not a floating-point tensor"
    if tuple(ov.shape) != tuple(xv.shape):
        return (f"output {tuple(ov.shape)} is broadcast beyond the input {tuple(xv.shape)} "
                "(cos/sin have extra dims)")
    if not isinstance(r.rotary_dim, int) or not isinstance(xv.shape[-1], int):
        return "head_dim is symbolic"
    if r.cos is not None and isinstance(r.cos, Node):
        width = r.rotary_dim // 2 if r.half_table else r.rotary_dim
        for t in (r.cos, r.sin):
            tv = _val(t)
            if tv is None or not tv.is_floating_point() or tv.ndim > xv.ndim or not _eq(tv.shape[-1], width):
                shape = None if tv is None else tuple(tv.shape)
                return f"cos/sin {shape} are not per-feature tables of width {width}"
    return None


def _key(r: Rotation) -> tuple:
    c = r.cos[1] if isinstance(r.cos, tuple) else r.cos
    xv = _val(r.inp)
    return (id(c), id(r.sin), r.rotary_dim, r.interleaved, r.half_table, xv.shape[-1], xv.dtype)


def _head_axis(r: Rotation) -> int | None:
    """The dim of x the table broadcasts over (size 1 in the table, > 1 in x), when unique."""
    tv = _val(r.cos[1] if isinstance(r.cos, tuple) else r.cos)
    xv = _val(r.inp)
    if tv is None or xv is None:
        return None
    pad = xv.ndim - tv.ndim
    cands = [i for i in range(xv.ndim - 1)
             if (i < pad or _eq(tv.shape[i - pad], 1)) and not _eq(xv.shape[i], 1)]
    return cands[0] if len(cands) == 1 else None


def _depends(inputs: list[Node], outs: list[Node], order: dict[Node, int]) -> bool:
    """True if any of ``inputs`` is computed from any of ``outs`` (forward walk, bounded by position)."""
    limit = max(order[n] for n in inputs)
    targets, seen = set(inputs), set()
    stack = [u for o in outs for u in o.users]
    while stack:
        n = stack.pop()
        if n in targets:
            return True
        if n in seen or order.get(n, limit + 1) > limit:
            continue
        seen.add(n)
        stack.extend(n.users)
    return False


class RoPEPass:
    """The RoPE family pass (see module docstring)."""

    name = "rope"
    ops = ("rope", "rope_cached")

    def __call__(self, graph: Graph, ctx: PassContext) -> None:
        rots: list[Rotation] = []
        for n in list(graph.nodes):
            r = _match_add(n) or _match_complex(n)
            if r is None:
                continue
            while _fold_partial(r) or _fold_upcast(r):
                pass
            why = _table_ok(r)
            if why is not None:
                miss = NearMiss("rope", f"RoPE ({r.style})", why, location_of(r.anchor))
                ctx.near_miss(r.anchor.name, miss)
                continue
            rots.append(r)
        groups: dict[tuple, list[Rotation]] = {}
        for r in rots:
            groups.setdefault(_key(r), []).append(r)
        for members in groups.values():
            while members:
                pair = members[:2]
                members = members[2:]
                if len(pair) == 2 and not self._emit(graph, ctx, pair):
                    members = [pair[1], *members]
                    pair = pair[:1]
                if len(pair) == 1:
                    self._emit(graph, ctx, pair)

    def _emit(self, graph: Graph, ctx: PassContext, pair: list[Rotation]) -> bool:
        """Replace one rotation or a q/k pair by one op; False if a pair can't be placed in one spot."""
        order = {n: i for i, n in enumerate(graph.nodes)}
        r1 = pair[0]
        r2 = pair[1] if len(pair) == 2 else None
        tables = [r1.cos[1]] if isinstance(r1.cos, tuple) else [r1.cos, r1.sin]
        inputs = [r1.inp, *([r2.inp] if r2 else []), *tables]
        last = max(inputs, key=lambda n: order[n])
        first_use = min((order[u] for r in pair for u in r.out.users), default=len(order))
        reorder = order[last] >= first_use
        if reorder and _depends(inputs, [r.out for r in pair], order):
            return False  # one rotation feeds the other's input: they can't share one op
        qv, kv = _val(r1.inp), (_val(r2.inp) if r2 else None)
        spec = rope_spec(qv, kv, _val(tables[0]) if not isinstance(r1.cos, tuple) else torch.empty(0),
                         r1.rotary_dim, r1.interleaved, r1.half_table, cached=False, head_axis=_head_axis(r1))
        choice = ctx.choose("rope", spec)
        where = location_of(r1.anchor)
        if choice.provider is None:
            for r in pair:
                ctx.near_miss(r.anchor.name, NearMiss("rope", f"RoPE ({r.style})", choice.why_not, where))
            return True
        before = last.next
        if isinstance(r1.cos, tuple):  # complex: cos = Re(freqs_cis), sin = Im(freqs_cis), one per pair
            f = r1.cos[1]
            fr = insert_call(graph, before, aten.view_as_real.default, (f,), like=r1.anchor)
            cos = insert_call(graph, before, aten.select.int, (fr, -1, 0), like=r1.anchor)
            sin = insert_call(graph, before, aten.select.int, (fr, -1, 1), like=r1.anchor)
        else:
            cos, sin = r1.cos, r1.sin
        args = (r1.inp, r2.inp if r2 else None, cos, sin, r1.rotary_dim, r1.interleaved, r1.half_table,
                choice.provider)
        op = insert_call(graph, before, torch.ops.rocm_fused.rope.default, args, like=r1.anchor)
        for i, r in enumerate(pair):
            g = insert_call(graph, before, operator.getitem, (op, i), like=r.anchor)
            r.out.replace_all_uses_with(g)
        if reorder:  # users of the earlier rotation now come before the op: move them after it
            stable_topological_sort(graph)
        shape, dtype = describe(qv)
        ctx.matched(r1.anchor.name, MatchRecord("rope", "rope", choice.provider, shape, dtype, where))
        return True
