"""Discovery: a rotation spelled as two linear combinations ``o1 = x0 * cos - x1 * sin``, ``o2 = x1 * cos + x0 *
sin`` of x's two parts -- halves (``chunk`` / slices: GPT-OSS, vLLM ``forward_native`` NeoX), even/odd features
(vLLM GPT-J) or pairs (``x.reshape(..., d/2, 2)[..., 0 | 1]``: gpt-fast and ChatGLM, whose table stores cos and
sin interleaved) -- reassembled by ``cat`` (halves) or ``stack(...).flatten(-2)``.

The op's cos/sin are read off o1 (half tables); o2, the signs and the tables' roles are left to verification
(``fold.verify``: the region against ``rope_ref`` on random inputs, passes/discover.py).
"""

from __future__ import annotations

import operator
from typing import Any

import torch
from torch.fx import Node

from ..fx import CONVERT, RESHAPES, insert_call, is_call, same, val
from .rotation import Rotation, full_end, is_last, negated, only_user, slice_args

aten = torch.ops.aten


def part(n: Any) -> tuple[Node, str, int, Any] | None:
    """(x, how, index, cast dtype) when ``n`` is one of two parts of x's last dim: ``how`` is ``"half"``
    (``x[..., :h]`` / ``x[..., h:]`` / ``chunk``), ``"stride2"`` (``x[..., ::2]`` / ``x[..., 1::2]``) or ``"pair"``
    (``x.reshape(..., d/2, 2)[..., 0 | 1]``); a float cast around the part is allowed (dtype returned)."""
    cast = None
    if is_call(n, CONVERT):
        n, cast = n.args[0], n.args[1]
    if is_call(n, operator.getitem) and is_call(n.args[0], aten.split.Tensor, aten.split_with_sizes.default) \
            and n.args[1] in (0, 1):
        sp = n.args[0]
        x, size = sp.args[0], sp.args[1]
        dim = sp.args[2] if len(sp.args) > 2 else sp.kwargs.get("dim", 0)
        xv = val(x)
        if xv is None or not is_last(x, dim) or len(val(sp)) != 2:
            return None
        d = xv.shape[-1]
        sizes = list(size) if isinstance(size, (list, tuple)) else [size, size]
        if not (isinstance(d, int) and sizes == [d // 2, d // 2] and d % 2 == 0):
            return None
        return x, "half", n.args[1], cast
    sl = slice_args(n)
    if sl is not None:
        x, dim, start, end, step = sl
        xv = val(x)
        d = xv.shape[-1]
        if dim != xv.ndim - 1 or not isinstance(d, int) or d % 2:
            return None
        if step == 1 and start == 0 and same(end, d // 2):
            return x, "half", 0, cast
        if step == 1 and start == d // 2 and full_end(end, d):
            return x, "half", 1, cast
        if step == 2 and start in (0, 1) and full_end(end, d):
            return x, "stride2", start, cast
        return None
    if is_call(n, aten.select.int) and n.args[2] in (0, 1, -2, -1) and is_last(n.args[0], n.args[1]):
        xr = n.args[0]
        rv = val(xr)
        if not is_call(xr, *RESHAPES) or rv is None or rv.shape[-1] != 2:
            return None
        x = xr.args[0]
        if is_call(x, aten.clone.default):  # reshape of a non-contiguous slice: clone + view
            x = x.args[0]
        xv = val(x)
        if xv is None or rv.ndim != xv.ndim + 1 or tuple(rv.shape[:-2]) != tuple(xv.shape[:-1]) \
                or not same(rv.shape[-2] * 2, xv.shape[-1]):
            return None
        return x, "pair", n.args[2] % 2, cast
    return None


def terms(o: Any) -> list[tuple[int, Node, Node]] | None:
    """``o = ±m1 ± m2`` with each m a product of two nodes -> [(sign, a, b), ...] (None otherwise)."""
    if is_call(o, aten.sub.Tensor) and o.kwargs.get("alpha", 1) == 1 and len(o.args) == 2:
        pairs = [(1, o.args[0]), (-1, o.args[1])]
    elif is_call(o, aten.add.Tensor) and o.kwargs.get("alpha", 1) == 1 and len(o.args) == 2:
        pairs = [(1, o.args[0]), (1, o.args[1])]
    else:
        return None
    out = []
    for sign, m in pairs:
        neg = negated(m)
        if neg is not None:
            sign, m = -sign, neg
        if not (is_call(m, aten.mul.Tensor) and len(m.args) == 2 and all(isinstance(a, Node) for a in m.args)):
            return None
        out.append((sign, m.args[0], m.args[1]))
    return out


def split_term(t: tuple[int, Node, Node]) -> tuple[int, tuple, Node, Node] | None:
    """(sign, part of x, table, the part's node) of one product (the operand that is a part of x is the x side)."""
    sign, a, b = t
    for xs, tab in ((a, b), (b, a)):
        p = part(xs)
        if p is not None and part(tab) is None:
            return sign, p, tab, xs
    return None


def deinterleave(n: Node, x: Node, terms_: list[tuple]) -> Node | None:
    """Pairs in, halves out (transformers 5.24 DeepSeek-V3 ``apply_rotary_pos_emb_interleave``: ``cat([x0 * cos -
    x1 * sin, x1 * cos + x0 * sin], -1)`` of ``x0, x1 = x[..., 0::2], x[..., 1::2]``) is NeoX's rotation of
    ``x' = cat([x[..., 0::2], x[..., 1::2]], -1)``: insert x' and let the products read its halves (exact: the
    same elements); returns x', or None when a part is cast (left as it is)."""
    parts = {t[3] for t in terms_}
    if any(t[1][3] is not None for t in terms_) or len(parts) != 2:
        return None
    graph = n.graph
    even = next(p for p in parts if part(p)[2] == 0)
    odd = next(p for p in parts if part(p)[2] == 1)
    before, last, d = x.next, val(x).ndim - 1, val(x).shape[-1]  # right after x: the parts may come after a product
    eo = [insert_call(graph, before, aten.slice.Tensor, (x, last, i, d, 2), like=n) for i in (0, 1)]
    xp = insert_call(graph, before, aten.cat.default, (eo, -1), like=n)
    h = d // 2
    for p, (a, b) in ((even, (0, h)), (odd, (h, 2 * h))):
        half = insert_call(graph, before, aten.slice.Tensor, (xp, val(x).ndim - 1, a, b), like=n)
        muls = {u for u in p.users if is_call(u, aten.mul.Tensor)}
        p.replace_all_uses_with(half, delete_user_cb=lambda u, muls=muls: u in muls)
    return xp


def match_combo(n: Node) -> Rotation | None:
    """``cat([o1, o2], -1)`` (halves) or ``stack([o1, o2], -1).flatten(-2)`` (even/odd, pairs) where each
    of o1, o2 combines products of x's two parts with tables by add/sub (GPT-OSS, vLLM ``forward_native``,
    gpt-fast, ChatGLM). The op is read off o1 = x0 * cos - x1 * sin; o2 is left to verification."""
    if not is_call(n, aten.cat.default) or len(n.args[0]) != 2 or not is_last(n, n.args[1] if len(n.args) > 1 else 0):
        return None
    o1, o2 = n.args[0]
    stacked = is_call(o1, aten.unsqueeze.default) and is_call(o2, aten.unsqueeze.default)
    out = n
    if stacked:
        if not (is_last(o1, o1.args[1]) and is_last(o2, o2.args[1])) or len(n.users) != 1:
            return None
        o1, o2 = o1.args[0], o2.args[0]
        out = next(iter(n.users))
        if not is_call(out, *RESHAPES):
            return None
    t1, t2 = terms(o1), terms(o2)
    if t1 is None or t2 is None:
        return None
    parts1 = [split_term(t) for t in t1]
    parts2 = [split_term(t) for t in t2]
    if None in parts1 or None in parts2:
        return None
    (x, how, _, cast) = parts1[0][1]
    if any(p[1][0] is not x or p[1][1] != how or p[1][3] != cast for p in parts1 + parts2):
        return None
    if {p[1][2] for p in parts1} != {0, 1} or {p[1][2] for p in parts2} != {0, 1}:
        return None
    if stacked == (how == "half"):
        if stacked or how != "stride2":
            return None  # halves reassembled by stack: a permutation, not this op
        xd = deinterleave(n, x, parts1 + parts2)  # pairs in, halves out: NeoX on the deinterleaved x
        if xd is None:
            return None
        x, how = xd, "half"
    xv, ov = val(x), val(out)
    if xv is None or ov is None or tuple(ov.shape) != tuple(xv.shape):
        return None
    inp = x
    if cast is not None and cast != xv.dtype:  # each part upcast (float32 tables promote the products)
        if ov.dtype != cast or not torch.empty((), dtype=cast).is_floating_point():
            return None
    cos = next(tab for _, p, tab, _n in parts1 if p[2] == 0)
    sin = next(tab for _, p, tab, _n in parts1 if p[2] == 1)
    style = "neox" if how == "half" else "gptj"
    r = Rotation(n, inp, out, cos, sin, xv.shape[-1], how != "half", True, f"{style} ({how} combination)",
                 verify=True)
    if ov.dtype != xv.dtype:  # computed in float32: the cast back must be the only use
        u = only_user(out)
        if u is None or not is_call(u, CONVERT) or u.args[1] != xv.dtype:
            return None
        r.out = u
    return r

