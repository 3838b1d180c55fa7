"""Discovery of the complex form outside the fast path: x taken as complex numbers some other way than
``view_as_complex(x.reshape(..., -1, 2))`` followed by one reshape back (``rotation.match_complex``).

Covered (anchored at the ``view_as_real`` of ``z * f``, f any complex tensor: the table, possibly built in the
graph by ``torch.polar`` / ``torch.complex(cos, sin)``):

- ``z = view_as_complex(stack([x0, x1], -1))`` with (x0, x1) the halves of x (``chunk`` / slices: a complex RoPE
  *without* interleave, GTPlayT's ``rotary_emb``) or its even/odd features (interleaved);
- ``z = torch.complex(x0, x1)``, the same parts;
- ``z = view_as_complex(reshape(x, [..., d/2, 2]))`` whose result is put back by more than one reshape
  (a cast in between, a transpose back to the model's layout).

The output is the first node below ``view_as_real`` (through layout ops and casts only) with x's shape; which
layout it reassembles (halves or pairs), the signs and the table's role are left to verification against
``rope_ref`` with cos = Re(f), sin = Im(f) (``fold.verify``): a reassembly that is no RoPE is a near-miss.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
from torch.fx import Node

from ..fx import CONVERT, RESHAPES, is_call, val
from .combo import part
from .rotation import Rotation

aten = torch.ops.aten
#: Ops that only move, cast or re-view elements: the way from ``view_as_real`` to the rotation's output.
LAYOUT = frozenset({*RESHAPES, CONVERT, aten.permute.default, aten.transpose.int, aten.clone.default,
                    aten.cat.default, aten.slice.Tensor, aten.select.int, aten.unsqueeze.default,
                    aten.squeeze.dim, aten.squeeze.dims, aten.expand.default, operator.getitem,
                    aten.split.Tensor, aten.stack.default, aten.flatten.using_ints})
#: How far below ``view_as_real`` the output is looked for (the longest reassembly seen: 6 nodes).
MAX_WALK = 16


def _stacked(n: Any) -> list[Any] | None:
    """[a, b] when ``n`` is ``stack([a, b], -1)`` (or its decomposition ``cat([a[..., None], b[..., None]], -1)``)."""
    if is_call(n, aten.stack.default) and len(n.args[0]) == 2:
        d = n.args[1] if len(n.args) > 1 else 0
        return list(n.args[0]) if d in (-1, val(n).ndim - 1) else None
    if is_call(n, aten.cat.default) and len(n.args[0]) == 2:
        d = n.args[1] if len(n.args) > 1 else 0
        ps = n.args[0]
        if d in (-1, val(n).ndim - 1) and all(is_call(p, aten.unsqueeze.default) and p.args[1] in (-1, val(p).ndim - 1)
                                               for p in ps):
            return [p.args[0] for p in ps]
    return None


def complex_source(z: Any) -> tuple[Node, bool] | None:
    """(x, interleaved) when ``z`` makes complex numbers of x's two parts (real part first), else None."""
    if is_call(z, aten.view_as_complex.default):
        inner = z.args[0]
        if is_call(inner, aten.clone.default):
            inner = inner.args[0]
        pair = _stacked(inner)
        if pair is None and is_call(inner, *RESHAPES):
            x, iv = inner.args[0], val(inner)
            xv = val(x)
            if xv is not None and iv.ndim == xv.ndim + 1 and iv.shape[-1] == 2:
                return x, True
            return None
    elif is_call(z, aten.complex.default):
        pair = list(z.args[:2])
    else:
        return None
    if pair is None:
        return None
    p0, p1 = part(pair[0]), part(pair[1])
    if p0 is None or p1 is None or p0[0] is not p1[0] or p0[1] != p1[1] or (p0[2], p1[2]) != (0, 1) \
            or p0[3] != p1[3] or p0[1] == "pair":
        return None
    return p0[0], p0[1] == "stride2"


def _output(vr: Node, x: Node) -> Node | None:
    """The first node below ``vr`` (layout ops only) with x's shape and a float dtype."""
    xv = val(x)
    todo, seen = [vr], set()
    while todo and len(seen) < MAX_WALK:
        n = todo.pop(0)
        for u in n.users:
            if u in seen or not is_call(u, *LAYOUT):
                continue
            seen.add(u)
            uv = val(u)
            if isinstance(uv, torch.Tensor) and uv.is_floating_point() and tuple(uv.shape) == tuple(xv.shape):
                while len(u.users) == 1 and is_call(next(iter(u.users)), CONVERT):
                    u = next(iter(u.users))  # the cast back is part of the rotation (folded below)
                return u
            todo.append(u)
    return None


def match_complex_form(n: Node) -> Rotation | None:
    """A complex-form rotation anchored at ``view_as_real(z * f)`` (module docstring), to be verified."""
    if not is_call(n, aten.view_as_real.default):
        return None
    m = n.args[0]
    if not is_call(m, aten.mul.Tensor) or len(m.args) != 2 or len(m.users) != 1:
        return None
    for z, f in (m.args, m.args[::-1]):
        fv = val(f)
        if not isinstance(f, Node) or fv is None or not fv.dtype.is_complex:
            continue
        src = complex_source(z)
        if src is None:
            continue
        x, inter = src
        xv = val(x)
        if xv is None or not xv.is_floating_point() or not isinstance(xv.shape[-1], int):
            continue
        out = _output(n, x)
        if out is None:
            continue
        r = Rotation(n, x, out, ("complex", f), None, xv.shape[-1], inter, True,
                     f"complex ({'pairs' if inter else 'halves'}, discovered)", verify=True)
        ov = val(out)
        if ov.dtype != xv.dtype and is_call(x, CONVERT) and val(x.args[0]).dtype == ov.dtype:
            r.inp = x.args[0]  # x.float() ... .type_as(x) with the cast inside the reassembly: the op reads q
        return r
    return None
