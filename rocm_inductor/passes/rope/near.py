"""Near-RoPEs: ``x * c ± r * s`` where r reassembles x's two parts, each possibly negated, in either order, but
is not rotate_half / rotate_every_two (``cat((x2, -x1))``, ``cat((-x1, x2))``, ...). They are taken as candidates
so that verification fails on them with the cause in words (``diagnose.py``) instead of nothing being said; a
form that turns out to be a rotation after all (``x * c - cat((x2, -x1)) * s``) passes verification and is
rewritten.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.fx import Node

from ..fx import CONVERT, RESHAPES, is_call, val
from .combo import part
from .rotation import Rotation, is_last, negated

aten = torch.ops.aten


def _signed_part(n: Any) -> tuple[Node, str, int] | None:
    """(x, "half" | "stride2", index) of ``±`` a part of x's last dim (a cast around the part allowed)."""
    p = part(negated(n) or n)
    return None if p is None or p[1] == "pair" else p[:3]


def near_rotation_of(r: Node) -> tuple[Node, bool] | None:
    """(x, interleaved) when ``r`` reassembles x's two parts, each possibly negated, in either order --
    ``cat([±x_a, ±x_b], -1)`` of halves or ``stack([±x_a, ±x_b], -1).flatten(-2)`` of even/odd features --
    without being rotate_half / rotate_every_two: a near-RoPE, left to verification (which names the cause)."""
    stacked = is_call(r, *RESHAPES)
    c = r.args[0] if stacked else r
    if not is_call(c, aten.cat.default) or len(c.args[0]) != 2 or not is_last(c, c.args[1] if len(c.args) > 1 else 0):
        return None
    ps = list(c.args[0])
    if stacked:
        if not all(is_call(p, aten.unsqueeze.default) and is_last(p, p.args[1]) for p in ps):
            return None
        ps = [p.args[0] for p in ps]
    parts = [_signed_part(p) for p in ps]
    if None in parts or parts[0][0] is not parts[1][0] or {p[2] for p in parts} != {0, 1}:
        return None
    how = parts[0][1]
    if how != parts[1][1] or stacked != (how == "stride2"):
        return None
    x = parts[0][0]
    if tuple(val(r).shape) != tuple(val(x).shape):
        return None
    return x, how == "stride2"


def match_near_add(n: Node) -> Rotation | None:
    """``x * c ± r * s`` with r a reassembly of x's signed parts that is not the rotation (:func:`near_rotation_of`),
    x possibly cast as r is: verified, so a near-RoPE becomes a near-miss that says what it computes."""
    if not is_call(n, aten.add.Tensor, aten.sub.Tensor) or len(n.args) != 2 or n.kwargs.get("alpha", 1) != 1:
        return None
    for m1, m2 in (n.args, n.args[::-1]) if n.target is aten.add.Tensor else (n.args,):
        if not (is_call(m1, aten.mul.Tensor) and is_call(m2, aten.mul.Tensor)):
            continue
        for x, c in (m1.args, m1.args[::-1]):
            for r, s in (m2.args, m2.args[::-1]):
                if not all(isinstance(a, Node) for a in (x, c, r, s)):
                    continue
                rr = r.args[0] if is_call(r, CONVERT) and is_call(x, CONVERT) else r
                xx = x.args[0] if rr is not r else x
                found = near_rotation_of(rr)
                if found is not None and found[0] is xx:
                    return Rotation(n, x, n, c, s, val(x).shape[-1], found[1], False, "near-RoPE", verify=True)
    return None
