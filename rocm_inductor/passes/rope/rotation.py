"""The rotation spellings of the fast path: ``x * c + rot(x) * s`` with ``rot`` NeoX's rotate_half or GPT-J's
rotate_every_two, and the complex form ``view_as_real(view_as_complex(x) * freqs_cis)``; the slice reading
they share with discovery (``combo.py``) and folding (``fold.py``).

Each ``match_*`` takes one node and returns a :class:`Rotation` anchored there, or None when the node is no
rotation of that spelling (nothing is reported: most nodes are not rotations).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch.fx import Node

from ..fx import CONVERT, RESHAPES, is_call, same, val

aten = torch.ops.aten
#: The end a slice without one gets (``x[..., h:]``): larger than any size.
BIG = 2**62


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

    @property
    def what(self) -> str:
        """The report's name of the candidate, e.g. ``"RoPE (neox)"``."""
        return f"RoPE ({self.style})"


def slice_args(n: Any) -> tuple[Node, int, int, Any, int] | None:
    """``slice.Tensor(x, dim, start, end, step)`` with defaults -> (x, dim >= 0, start, end, step); None when
    ``n`` is no slice, x carries no fake value or dim is not a number. A missing end is :data:`BIG`."""
    if not is_call(n, aten.slice.Tensor):
        return None
    x = n.args[0]
    v = val(x)
    if v is None:
        return None
    args = list(n.args[1:]) + [None] * (4 - len(n.args[1:]))
    dim = n.kwargs.get("dim", args[0] if args[0] is not None else 0)
    start = n.kwargs.get("start", args[1]) or 0
    end = n.kwargs.get("end", args[2])
    step = n.kwargs.get("step", args[3]) or 1
    if not isinstance(dim, int):
        return None
    return x, dim % v.ndim, start, (BIG if end is None else end), step


def is_last(x: Node, dim: Any) -> bool:
    """True when ``dim`` (an int, possibly negative) is the last dim of ``x``'s tensor."""
    v = val(x)
    return v is not None and isinstance(dim, int) and dim % v.ndim == v.ndim - 1


def negated(n: Any) -> Node | None:
    """y when ``n`` is ``-y`` (``neg`` or ``y * -1``), else None."""
    if is_call(n, aten.neg.default):
        return n.args[0]
    if is_call(n, aten.mul.Tensor) and len(n.args) == 2 and n.args[1] == -1:
        return n.args[0]
    return None


def full_end(end: Any, size: Any) -> bool:
    """True when a slice's ``end`` reaches the end of a dim of ``size`` (missing, equal, or past it)."""
    return (isinstance(end, int) and end >= BIG // 2) or same(end, size) or (
        isinstance(end, int) and isinstance(size, int) and end >= size)


def only_user(n: Node) -> Node | None:
    """The single user of ``n``, None when it has none or several."""
    return next(iter(n.users)) if len(n.users) == 1 else None


def rotate_half_of(r: Node) -> Node | None:
    """x if ``r`` is rotate_half(x) = cat(-x[..., h:], x[..., :h], -1) with 2h = x.shape[-1]."""
    if not is_call(r, aten.cat.default) or len(r.args[0]) != 2:
        return None
    dim = r.args[1] if len(r.args) > 1 else 0
    hi = slice_args(negated(r.args[0][0]))
    lo = slice_args(r.args[0][1])
    if hi is None or lo is None or hi[0] is not lo[0] or not is_last(r, dim):
        return None
    x = hi[0]
    d = val(x).shape[-1]
    if hi[1] != val(x).ndim - 1 or lo[1] != hi[1] or hi[4] != 1 or lo[4] != 1:
        return None
    h = hi[2]
    if not (isinstance(d, int) and isinstance(h, int) and 2 * h == d and lo[2] == 0
            and same(lo[3], h) and full_end(hi[3], d)):
        return None
    return x


def rotate_every_two_of(r: Node) -> Node | None:
    """x if ``r`` is GPT-J's rotate_every_two(x) = stack(-x[..., 1::2], x[..., ::2], -1).flatten(-2)."""
    if not is_call(r, *RESHAPES):
        return None
    c = r.args[0]
    if is_call(c, aten.cat.default) and len(c.args[0]) == 2:
        parts = [p.args[0] if is_call(p, aten.unsqueeze.default) and is_last(p, p.args[1]) else None
                 for p in c.args[0]]
        if None in parts or not is_last(c, c.args[1] if len(c.args) > 1 else 0):
            return None
    elif is_call(c, aten.stack.default) and len(c.args[0]) == 2:
        dim = c.args[1] if len(c.args) > 1 else 0
        if not is_last(c, dim):
            return None
        parts = list(c.args[0])
    else:
        return None
    odd, even = slice_args(negated(parts[0])), slice_args(parts[1])
    if odd is None or even is None or odd[0] is not even[0]:
        return None
    x = odd[0]
    xv = val(x)
    d = xv.shape[-1]
    if odd[1] != xv.ndim - 1 or even[1] != odd[1] or odd[4] != 2 or even[4] != 2:
        return None
    if odd[2] != 1 or even[2] != 0 or not full_end(odd[3], d) or not full_end(even[3], d):
        return None
    if not isinstance(d, int) or d % 2 or tuple(val(r).shape) != tuple(xv.shape):
        return None
    return x


_ROTATIONS = ((rotate_half_of, False, "neox"), (rotate_every_two_of, True, "gptj"))


def match_add(n: Node) -> Rotation | None:
    """x * c + rot(x) * s (operands in any order), rot = rotate_half (NeoX) or rotate_every_two (GPT-J)
    (docs/spellings.md, RoPE 1, 4). c and s are taken as they reach the multiply (any layout, dtype, broadcast)."""
    if not is_call(n, aten.add.Tensor) or len(n.args) != 2 or n.kwargs.get("alpha", 1) != 1:
        return None
    for m1, m2 in (n.args, n.args[::-1]):
        if not (is_call(m1, aten.mul.Tensor) and is_call(m2, aten.mul.Tensor)):
            continue
        for x, c in (m1.args, m1.args[::-1]):
            for r, s in (m2.args, m2.args[::-1]):
                if not (isinstance(x, Node) and isinstance(r, Node) and isinstance(c, Node)
                        and isinstance(s, Node)):
                    continue
                for fn, inter, style in _ROTATIONS:
                    if fn(r) is x:
                        d = val(x).shape[-1]
                        return Rotation(n, x, n, c, s, d, inter, False, style)
                    # float32 tables against half q (HF 5.x FlexOlmo & co): promotion casts q and rot(q)
                    # separately; rot commutes with the (exact) upcast, so this is the rotation of cast(q).
                    if is_call(x, CONVERT) and is_call(r, CONVERT) and r.args[1] == x.args[1] \
                            and fn(r.args[0]) is x.args[0]:
                        d = val(x).shape[-1]
                        return Rotation(n, x, n, c, s, d, inter, False, style, verify=True)
    return None


def match_complex(n: Node) -> Rotation | None:
    """reshape(view_as_real(view_as_complex(reshape(x, [..., -1, 2])) * f), x.shape) with x float32 and f
    complex64 (docs/spellings.md, RoPE 5); anchored at the view_as_real."""
    if not is_call(n, aten.view_as_real.default) or len(n.users) != 1:
        return None
    out = next(iter(n.users))
    m = n.args[0]
    if not is_call(out, *RESHAPES) or not is_call(m, aten.mul.Tensor) or len(m.args) != 2:
        return None
    for a, f in (m.args, m.args[::-1]):
        if not (is_call(a, aten.view_as_complex.default) and is_call(a.args[0], *RESHAPES) and isinstance(f, Node)):
            continue
        x = a.args[0].args[0]
        xv, fv = val(x), val(f)
        if xv is None or fv is None or fv.dtype != torch.complex64 or xv.dtype != torch.float32:
            continue
        pairs = val(a.args[0]).shape
        if tuple(val(out).shape) != tuple(xv.shape) or tuple(pairs[:-2]) != tuple(xv.shape[:-1]):
            continue
        d = xv.shape[-1]
        return Rotation(n, x, out, ("complex", f), None, d, True, True, "complex")
    return None
