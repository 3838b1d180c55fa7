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
Discovery (issue 15): the rotation spelled as two linear combinations ``o1 = x0 * cos - x1 * sin``,
``o2 = x1 * cos + x0 * sin`` of x's two parts -- halves (``chunk`` / slices: GPT-OSS, vLLM ``forward_native``
NeoX), even/odd features (vLLM GPT-J) or pairs (``x.reshape(..., d/2, 2)[..., 0 | 1]``: gpt-fast and ChatGLM,
whose table stores cos and sin interleaved) -- reassembled by ``cat`` (halves) or ``stack(...).flatten(-2)``;
and ``x * cos + rot(x) * sin`` where float32 tables promote q and rot(q) separately (transformers 5.24 FlexOlmo,
cast back with ``.to(q.dtype)``). The op's cos/sin are read off o1 (half tables); o2, the signs and the tables'
roles are left to verification: the region is evaluated against ``rope_ref`` on random inputs
(passes/discover.py) and only then rewritten; a near-rotation that fails is a near-miss naming the check.
Rotations that share c and s (the same nodes, after canonicalize's CSE) are paired in graph order into one
op for q and k (one launch); an unpaired rotation gets an op with ``k=None``.

Cached path (``rocm_fused::rope_cached``): when the cos/sin of a NeoX rotation are computed in the graph from
inputs known at compile time, :func:`cached_plan` evaluates the chain, reads inv_freq and the positions off
it, builds the float32 [max_pos, rotary_dim] table once (float64 angles, attention scaling folded in) and
proves that every position's row equals the model's cos/sin; otherwise the on-the-fly op is emitted. Either
way the match note in the report says which path was taken and why (see the section above ``RoPEPass``).

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
import functools
import math
import operator
from typing import Any

import torch
from torch._inductor.pattern_matcher import stable_topological_sort
from torch.fx import Graph, Node

from ...ops.rope import build_cos_sin_cache, rope_spec
from ...registry import ops_of
from ...report import Match as MatchRecord
from ...report import NearMiss, describe, location_of
from ..canonicalize import insert_call
from ..context import PassContext

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
    verify: bool = False  # found by discovery (a spelling outside the fast path): verified before the rewrite
    note: str = ""  # the verification's note for the report


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
                    # float32 tables against half q (HF 5.x FlexOlmo & co): promotion casts q and rot(q)
                    # separately; rot commutes with the (exact) upcast, so this is the rotation of cast(q).
                    if _is(x, _CONVERT) and _is(r, _CONVERT) and r.args[1] == x.args[1] \
                            and fn(r.args[0]) is x.args[0]:
                        d = _val(x).shape[-1]
                        return Rotation(n, x, n, c, s, d, inter, False, style, verify=True)
    return None


# -- discovery: a rotation spelled as two linear combinations of x's halves / even-odd features / pairs --------
def _part(n: Any) -> tuple[Node, str, int, Any] | None:
    """(x, how, index, cast dtype) when ``n`` is one of two parts of x's last dim: ``how`` is ``"half"``
    (``x[..., :h]`` / ``x[..., h:]`` / ``chunk``), ``"stride2"`` (``x[..., ::2]`` / ``x[..., 1::2]``) or ``"pair"``
    (``x.reshape(..., d/2, 2)[..., 0 | 1]``); a float cast around the part is allowed (dtype returned)."""
    cast = None
    if _is(n, _CONVERT):
        n, cast = n.args[0], n.args[1]
    if _is(n, operator.getitem) and _is(n.args[0], aten.split.Tensor, aten.split_with_sizes.default) \
            and n.args[1] in (0, 1):
        sp = n.args[0]
        x, size = sp.args[0], sp.args[1]
        dim = sp.args[2] if len(sp.args) > 2 else sp.kwargs.get("dim", 0)
        xv = _val(x)
        if xv is None or not _last(x, dim) or len(_val(sp)) != 2:
            return None
        d = xv.shape[-1]
        sizes = list(size) if isinstance(size, (list, tuple)) else [size, size]
        if not (isinstance(d, int) and sizes == [d // 2, d // 2] and d % 2 == 0):
            return None
        return x, "half", n.args[1], cast
    sl = _slice(n)
    if sl is not None:
        x, dim, start, end, step = sl
        xv = _val(x)
        d = xv.shape[-1]
        if dim != xv.ndim - 1 or not isinstance(d, int) or d % 2:
            return None
        if step == 1 and start == 0 and _eq(end, d // 2):
            return x, "half", 0, cast
        if step == 1 and start == d // 2 and _full_end(end, d):
            return x, "half", 1, cast
        if step == 2 and start in (0, 1) and _full_end(end, d):
            return x, "stride2", start, cast
        return None
    if _is(n, aten.select.int) and n.args[2] in (0, 1, -2, -1) and _last(n.args[0], n.args[1]):
        xr = n.args[0]
        rv = _val(xr)
        if not _is(xr, *_RESHAPES) or rv is None or rv.shape[-1] != 2:
            return None
        x = xr.args[0]
        if _is(x, aten.clone.default):  # reshape of a non-contiguous slice: clone + view
            x = x.args[0]
        xv = _val(x)
        if xv is None or rv.ndim != xv.ndim + 1 or tuple(rv.shape[:-2]) != tuple(xv.shape[:-1]) \
                or not _eq(rv.shape[-2] * 2, xv.shape[-1]):
            return None
        return x, "pair", n.args[2] % 2, cast
    return None


def _terms(o: Any) -> list[tuple[int, Node, Node]] | None:
    """``o = ±m1 ± m2`` with each m a product of two nodes -> [(sign, a, b), ...] (None otherwise)."""
    if _is(o, aten.sub.Tensor) and o.kwargs.get("alpha", 1) == 1 and len(o.args) == 2:
        pairs = [(1, o.args[0]), (-1, o.args[1])]
    elif _is(o, aten.add.Tensor) and o.kwargs.get("alpha", 1) == 1 and len(o.args) == 2:
        pairs = [(1, o.args[0]), (1, o.args[1])]
    else:
        return None
    out = []
    for sign, m in pairs:
        neg = _negated(m)
        if neg is not None:
            sign, m = -sign, neg
        if not (_is(m, aten.mul.Tensor) and len(m.args) == 2 and all(isinstance(a, Node) for a in m.args)):
            return None
        out.append((sign, m.args[0], m.args[1]))
    return out


def _split_term(t: tuple[int, Node, Node]) -> tuple[int, tuple, Node] | None:
    """(sign, part of x, table) of one product (the operand that is a part of x is the x side)."""
    sign, a, b = t
    for xs, tab in ((a, b), (b, a)):
        p = _part(xs)
        if p is not None and _part(tab) is None:
            return sign, p, tab
    return None


def _match_combo(n: Node) -> Rotation | None:
    """``cat([o1, o2], -1)`` (halves) or ``stack([o1, o2], -1).flatten(-2)`` (even/odd, pairs) where each
    of o1, o2 combines products of x's two parts with tables by add/sub (GPT-OSS, vLLM ``forward_native``,
    gpt-fast, ChatGLM). The op is read off o1 = x0 * cos - x1 * sin; o2 is left to verification."""
    if not _is(n, aten.cat.default) or len(n.args[0]) != 2 or not _last(n, n.args[1] if len(n.args) > 1 else 0):
        return None
    o1, o2 = n.args[0]
    stacked = _is(o1, aten.unsqueeze.default) and _is(o2, aten.unsqueeze.default)
    out = n
    if stacked:
        if not (_last(o1, o1.args[1]) and _last(o2, o2.args[1])) or len(n.users) != 1:
            return None
        o1, o2 = o1.args[0], o2.args[0]
        out = next(iter(n.users))
        if not _is(out, *_RESHAPES):
            return None
    t1, t2 = _terms(o1), _terms(o2)
    if t1 is None or t2 is None:
        return None
    parts1 = [_split_term(t) for t in t1]
    parts2 = [_split_term(t) for t in t2]
    if None in parts1 or None in parts2:
        return None
    (x, how, _, cast) = parts1[0][1]
    if any(p[1][0] is not x or p[1][1] != how or p[1][3] != cast for p in parts1 + parts2):
        return None
    if {p[1][2] for p in parts1} != {0, 1} or {p[1][2] for p in parts2} != {0, 1}:
        return None
    if stacked == (how == "half"):
        return None  # halves reassembled by stack (or pairs by cat): a permutation, not this op
    xv, ov = _val(x), _val(out)
    if xv is None or ov is None or tuple(ov.shape) != tuple(xv.shape):
        return None
    inp = x
    if cast is not None and cast != xv.dtype:  # each part upcast (float32 tables promote the products)
        if ov.dtype != cast or not torch.empty((), dtype=cast).is_floating_point():
            return None
    cos = next(tab for _, p, tab in parts1 if p[2] == 0)
    sin = next(tab for _, p, tab in parts1 if p[2] == 1)
    style = "neox" if how == "half" else "gptj"
    r = Rotation(n, inp, out, cos, sin, xv.shape[-1], how != "half", True, f"{style} ({how} combination)",
                 verify=True)
    if ov.dtype != xv.dtype:  # computed in float32: the cast back must be the only use
        u = _only_user(out)
        if u is None or not _is(u, _CONVERT) or u.args[1] != xv.dtype:
            return None
        r.out = u
    return r


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

def _verify(r: Rotation) -> str | None:
    """Verify a discovered rotation against ``rope_ref`` on random inputs (passes/discover.py); the
    failed check (None when it holds). Sets ``r.note``."""
    from ...providers.reference import rope_ref
    from .. import discover

    region = discover.extract([r.inp, r.cos, r.sin], [r.out])
    if isinstance(region, str):
        return f"not rewritten: {region}"
    args = (r.rotary_dim, r.interleaved, r.half_table)

    def ref(x, c, s):
        return (rope_ref(x, None, c, s, *args)[0],)

    v = discover.verify(region, "rope", args, ref, ref)  # rope_ref computes in float64 on float64 inputs
    if not v.ok:
        return f"verification failed: {v.reason}"
    r.note = "found by discovery, verified" + (" (cached)" if v.cached else "") + (f"; {v.note}" if v.note else "")
    return None


# ---------------------------------------------------------------------------------------------------------
# Cached path: prove where cos/sin come from, build the float32 table once, index it by position.
#
# The proof is by compile-time evaluation, not by a spelling: when every input of the cos/sin chain is known
# at compile time (constants, iota/arange/full, get_attr), the chain is evaluated on real tensors, inv_freq
# is read off the multiply with the float positions, and the table row of every position is compared with
# the cos/sin the model computed (within their rounding). Only a chain that equals the table for *all* of
# its positions is replaced, so any spelling of HF's chain (``pos[..., None].float() * inv_freq``, the
# ``inv_freq_expanded @ position_ids_expanded`` matmul + transpose, cat(freqs, freqs) or its expand/reshape
# decomposition, ``* attention_scaling`` folded into the table, the cast to x.dtype) is taken, and nothing
# else is. HF's ``inv_freq`` buffer is a graph input of the post-grad graph (Dynamo inlines nn modules and
# lifts buffers as inputs), so its value is unknown at compile time: those models take the on-the-fly path,
# with the reason in the match note. So does a symbolic (dynamic) sequence length (no static bound on the
# positions) and a model that supplies its own table (cos/sin or a GPT-J-style sincos buffer as graph input).

#: Largest table we build (rows). Positions past it take the on-the-fly path (the table costs 4 * rd bytes
#: per row; 2**17 rows of rd=128 is 64 MiB).
MAX_TABLE_POS = 1 << 17

_SOURCES = (prims.iota.default, aten.full.default, aten.arange.default, aten.arange.start,
            aten.arange.start_step, aten.scalar_tensor.default, aten.ones.default, aten.zeros.default)


@dataclasses.dataclass
class CachedPlan:
    """What the cached op needs: the int positions node, the table (real tensor) and how positions are viewed."""

    positions: Node
    lead: tuple[int, ...]  # positions are reshaped to this (cos.shape[:-1]) to broadcast like cos did
    table: torch.Tensor  # float32 [max_pos, rotary_dim]
    scaling: float
    note: str


def _ancestors(roots: list[Node]) -> set[Node]:
    seen: set[Node] = set()
    stack = list(roots)
    while stack:
        n = stack.pop()
        if n not in seen:
            seen.add(n)
            stack.extend(n.all_input_nodes)
    return seen


def _symbolic(a: Any) -> bool:
    return any(isinstance(x, (torch.SymInt, torch.SymFloat, torch.SymBool))
               for x in torch.utils._pytree.tree_leaves(a))


def _const_eval(graph: Graph, roots: list[Node]) -> dict[Node, Any] | str:
    """Real values of ``roots`` when all their inputs are known at compile time, else why not."""
    need = _ancestors(roots)
    env: dict[Node, Any] = {}
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily(), torch.no_grad():
        for n in graph.nodes:
            if n not in need:
                continue
            if n.op == "placeholder" and _symbolic(_val(n)):
                return f"depends on the symbolic size {n.name} (dynamic shape): no static bound"
            if n.op == "placeholder":
                return (f"depends on graph input {n.name} (HF's inv_freq buffer and position ids are lifted as "
                        "inputs): its values are not known at compile time")
            if n.op == "get_attr":
                env[n] = functools.reduce(getattr, n.target.split("."), graph.owning_module)
                continue
            if n.op != "call_function" or _symbolic((n.args, n.kwargs)) or _symbolic(_val(n)):
                return f"{n.name} ({n.target}) has a symbolic size or is not a plain op: no static bound"
            tags = getattr(n.target, "tags", ())
            if torch.Tag.nondeterministic_seeded in tags or (not n.all_input_nodes and n.target not in _SOURCES):
                return f"{n.name} ({n.target}) is not a constant source"
            args, kwargs = torch.fx.node.map_arg((n.args, n.kwargs), lambda m: env[m])
            env[n] = n.target(*args, **kwargs)
    return env


def _descends(n: Node, target: Any, anc: set[Node]) -> bool:
    return any(_is(m, target) for m in _ancestors([n]) if m in anc)


_SHAPE_OPS = (aten.unsqueeze.default, aten.expand.default, aten.clone.default, aten.permute.default,
              aten.squeeze.dim, aten.squeeze.default, aten.transpose.int, *_RESHAPES)


def _strip_shape(n: Any) -> Any:
    """The tensor under shape-only ops (and ``cat([f, f])``: the NeoX duplication of freqs)."""
    while True:
        if _is(n, *_SHAPE_OPS):
            n = n.args[0]
        elif _is(n, aten.cat.default) and len(n.args[0]) == 2 and n.args[0][0] is n.args[0][1]:
            n = n.args[0][0]
        else:
            return n


def _scaling(c: Node, fn: Any, anc: set[Node]) -> float | None:
    """Product of the Python-scalar multiplies between ``fn`` (aten.cos/sin) and ``c`` (None: not a number)."""
    s = 1.0
    for m in _ancestors([c]):
        if _is(m, aten.mul.Tensor) and _descends(m, fn, anc):
            sc = [a for a in m.args if not isinstance(a, Node)]
            if sc:
                if not isinstance(sc[0], (int, float)) or isinstance(sc[0], bool):
                    return None
                s *= float(sc[0])
    return s


def cached_plan(graph: Graph, r: Rotation) -> CachedPlan | str:
    """A :class:`CachedPlan` for rotation ``r`` when its cos/sin provably equal a float32 table by position.

    Returns the reason (str) when not: the model's own table, inputs unknown at compile time, no static
    position bound, positions past :data:`MAX_TABLE_POS`, or cos/sin that differ from the table built from
    the chain's inv_freq (another theta / rotary_dim on one of them, a non-scalar scaling, ...).
    """
    if isinstance(r.cos, tuple) or r.interleaved or r.half_table:
        return f"the model supplies its own {r.style} table"
    cv = _val(r.cos)
    anc = _ancestors([r.cos, r.sin])
    if not any(_is(m, aten.cos.default) for m in anc) or not any(_is(m, aten.sin.default) for m in anc):
        return "cos/sin are not computed in this graph (the model supplies its table)"
    # angles: the positions x inv_freq product under cos (through shape ops only: cat(freqs, freqs) or its
    # expand/reshape form, the transpose of the matmul form); positions: the side that is int -> float
    cos_fn = next(m for m in anc if _is(m, aten.cos.default) and m in _ancestors([r.cos]))
    prod = _strip_shape(cos_fn.args[0])
    if not _is(prod, aten.mul.Tensor, aten.bmm.default, aten.mm.default, aten.matmul.default) \
            or len(prod.args) != 2 or not all(isinstance(a, Node) for a in prod.args):
        return f"the cos argument is {prod.target if isinstance(prod, Node) else prod}, not positions x inv_freq"
    sides = [_strip_shape(a) for a in prod.args]
    is_pos = [_is(a, _CONVERT) and _val(a.args[0]) is not None and not _val(a.args[0]).is_floating_point()
              for a in sides]
    if sum(is_pos) != 1:
        return "cannot tell positions from inv_freq in the angle product"
    pos = sides[is_pos.index(True)].args[0]
    inv_node = sides[is_pos.index(False)]  # under its broadcast: (rd/2,) values
    sc, ss = _scaling(r.cos, aten.cos.default, anc), _scaling(r.sin, aten.sin.default, anc)
    if sc is None or ss is None or sc != ss or not math.isfinite(sc):
        return f"attention scaling of cos ({sc}) and sin ({ss}) is not one known number"
    for what, roots in (("inv_freq", [inv_node]), ("positions", [pos]), ("cos/sin", [r.cos, r.sin])):
        env = _const_eval(graph, roots)  # in this order, so the report names what is unknown
        if isinstance(env, str):
            return f"{what}: {env}"
    env = _const_eval(graph, [r.cos, r.sin, pos, inv_node])
    if isinstance(env, str):
        return env
    c, s, p, inv = env[r.cos], env[r.sin], env[pos], env[inv_node]
    rd = r.rotary_dim
    if not inv.is_floating_point() or inv.numel() != rd // 2:
        return f"inv_freq has {inv.numel()} values, rotary_dim {rd} needs {rd // 2}"
    if p.numel() == 0:
        return "no positions (empty sequence)"
    lo, hi = int(p.min()), int(p.max())
    if lo < 0 or hi >= MAX_TABLE_POS:
        return f"positions [{lo}, {hi}] are past the table ([0, {MAX_TABLE_POS}))"
    lead = tuple(cv.shape[:-1])
    if not all(isinstance(d, int) for d in lead) or p.numel() != math.prod(lead):
        return f"positions {tuple(p.shape)} don't map onto cos {tuple(cv.shape)}"
    table = build_cos_sin_cache(inv.reshape(-1), hi + 1, sc, device="cpu")
    rows = table.double()[p.reshape(lead).long().cpu()]
    h = rd // 2
    want_c = torch.cat([rows[..., :h], rows[..., :h]], -1)
    want_s = torch.cat([rows[..., h:], rows[..., h:]], -1)
    # eager rounds cos/sin to their dtype and (HF) forms the angle in float32: allow both roundings
    for got, want, what in ((c, want_c, "cos"), (s, want_s, "sin")):
        tol = abs(sc) * (2 * torch.finfo(got.dtype).eps + 4 * hi * float(inv.abs().max()) * 2.0**-24) + 1e-12
        err = float((got.double().cpu() - want).abs().max())
        if tuple(got.shape) != tuple(want.shape) or not err <= tol:
            return (f"{what} differs from the table built from inv_freq by {err:.3g} > {tol:.3g} "
                    "(another theta / rotary_dim / scaling)")
    note = (f"cached: float32 table [{hi + 1}, {rd}] from inv_freq (float64 angles)"
            + (f", attention scaling {sc:g} folded in" if sc != 1.0 else ""))
    return CachedPlan(pos, lead, table, sc, note)


class RoPEPass:
    """The RoPE family pass (see module docstring)."""

    name = "rope"
    ops = ops_of(name)

    def __call__(self, graph: Graph, ctx: PassContext) -> None:
        self._plans: dict[tuple[int, int], CachedPlan | str] = {}  # per (cos, sin): layers share one table
        self._tables: dict[tuple[int, int], Node] = {}
        rots: list[Rotation] = []
        for n in list(graph.nodes):
            r = _match_add(n) or _match_complex(n) or _match_combo(n)
            if r is None:
                continue
            while _fold_partial(r) or _fold_upcast(r):
                pass
            why = _table_ok(r)
            if why is None and r.verify:
                why = _verify(r)
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
        where = location_of(r1.anchor)
        before = last.next
        if self._emit_cached(graph, ctx, pair, before):
            if reorder:
                stable_topological_sort(graph)
            return True
        spec = rope_spec(qv, kv, _val(tables[0]) if not isinstance(r1.cos, tuple) else torch.empty(0),
                         r1.rotary_dim, r1.interleaved, r1.half_table, cached=False, head_axis=_head_axis(r1))
        choice = ctx.choose("rope", spec)
        if choice.provider is None:
            for r in pair:
                ctx.near_miss(r.anchor.name, NearMiss("rope", f"RoPE ({r.style})", choice.why_not, where))
            return True
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
        extra = [r1.note] if r1.note else []
        detail = "; ".join([f"on-the-fly: {self._plan(graph, r1)}", *extra, *choice.reasons])
        note = "; ".join(["on-the-fly (no cached table)", *extra, *choice.reasons])  # the table's short form
        ctx.matched(r1.anchor.name, MatchRecord("rope", "rope", choice.provider, shape, dtype, where, note,
                                                detail))
        return True

    def _plan(self, graph: Graph, r: Rotation) -> CachedPlan | str:
        key = (id(r.cos), id(r.sin))
        if key not in self._plans:
            try:
                self._plans[key] = cached_plan(graph, r)
            except Exception as e:  # evaluation of an odd chain failed: the on-the-fly path is always exact
                self._plans[key] = f"cos/sin chain could not be evaluated at compile time ({type(e).__name__}: {e})"
        return self._plans[key]

    def _emit_cached(self, graph: Graph, ctx: PassContext, pair: list[Rotation], before: Node) -> bool:
        """Emit ``rope_cached`` for ``pair`` when :func:`cached_plan` proves the table; False otherwise."""
        r1 = pair[0]
        r2 = pair[1] if len(pair) == 2 else None
        plan = self._plan(graph, r1)
        if isinstance(plan, str):
            return False
        qv, kv = _val(r1.inp), (_val(r2.inp) if r2 else None)
        fake_table = qv.fake_mode.from_tensor(plan.table.to(qv.device)) if hasattr(qv, "fake_mode") else None
        if fake_table is None:
            return False
        spec = rope_spec(qv, kv, fake_table, r1.rotary_dim, False, True, cached=True,
                         head_axis=_head_axis(r1))
        choice = ctx.choose("rope_cached", spec)
        if choice.provider is None:  # the on-the-fly op may still have a provider
            self._plans[(id(r1.cos), id(r1.sin))] = f"no provider takes rope_cached ({choice.why_not})"
            return False
        key = (id(r1.cos), id(r1.sin))
        if key not in self._tables:
            gm = graph.owning_module
            i = 0
            while hasattr(gm, f"_rocm_rope_cache_{i}"):
                i += 1
            name = f"_rocm_rope_cache_{i}"
            # Stored flat and viewed back: Inductor hands a constant that reaches an extern op directly to
            # the op's fake impl as a real tensor (which fake mode rejects); a view of it is a plain IR view.
            gm.register_buffer(name, plan.table.to(qv.device).reshape(-1))
            phs = [n for n in graph.nodes if n.op == "placeholder"]
            with (graph.inserting_after(phs[-1]) if phs else graph.inserting_before(next(iter(graph.nodes)))):
                flat = graph.get_attr(name)
            flat.meta["val"] = qv.fake_mode.from_tensor(getattr(gm, name))
            self._tables[key] = insert_call(graph, before, aten.view.default, (flat, list(plan.table.shape)),
                                            like=r1.anchor)
        table = self._tables[key]
        pos = insert_call(graph, before, aten.reshape.default, (plan.positions, list(plan.lead)), like=r1.anchor)
        args = (r1.inp, r2.inp if r2 else None, pos, table, r1.rotary_dim, False, choice.provider)
        op = insert_call(graph, before, torch.ops.rocm_fused.rope_cached.default, args, like=r1.anchor)
        for i, r in enumerate(pair):
            g = insert_call(graph, before, operator.getitem, (op, i), like=r.anchor)
            r.out.replace_all_uses_with(g)
        shape, dtype = describe(qv)
        extra = [r1.note] if r1.note else []
        detail = "; ".join([plan.note, *extra, *choice.reasons])
        short = "; ".join([f"cached table [{plan.table.shape[0]}, {plan.table.shape[1]}]", *extra])  # short form
        ctx.matched(r1.anchor.name, MatchRecord("rope", "rope_cached", choice.provider, shape, dtype,
                                                location_of(r1.anchor), "; ".join([short, *choice.reasons]),
                                                detail))
        return True
