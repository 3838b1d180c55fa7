"""What turns a matched rotation into the op's region, and whether the op can take it: folding an upcast
(``q.float()`` ... ``.to(q.dtype)``: docs/spellings.md, RoPE 2, 5) and partial rotary (``cat([rot(q[..., :rd]),
q[..., rd:]], -1)``: RoPE 3) into the rotation (the package docstring says what each fold means for the op), the
checks of its shapes and tables, and the verification of a rotation found by discovery.
"""

from __future__ import annotations

import torch
from torch.fx import Node

from ..fx import CONVERT, is_call, same, val
from .rotation import Rotation, full_end, is_last, only_user, slice_args

aten = torch.ops.aten


def fold_upcast(r: Rotation) -> bool:
    """Fold ``q.float()`` (or ``q.double()``, then verified) before and ``.to(q.dtype)`` after the rotation into it
    (the op reads q, rounds once); True when ``r`` changed."""
    x, u = r.inp, only_user(r.out)
    if not (is_call(x, CONVERT) and u is not None and is_call(u, CONVERT)):
        return False
    q0 = x.args[0]
    q0v, xv = val(q0), val(x)
    if q0v is None or not q0v.is_floating_point() or xv.dtype not in (torch.float32, torch.float64) \
            or u.args[1] != q0v.dtype:
        return False
    if xv.dtype == torch.float64:  # the op computes in float32: whether that is within the contract is verified
        r.verify = True
    r.inp, r.out = q0, u
    return True


def fold_partial(r: Rotation) -> bool:
    """Fold partial rotary, ``cat([rot(q[..., :rd]), q[..., rd:]], -1)``, into the rotation (``r.rotary_dim``
    becomes rd); True when ``r`` changed."""
    up = r.inp if is_call(r.inp, CONVERT) else None  # rot(q[..., :rd].float()) with the tail left in q's dtype
    sl, u = slice_args(up.args[0] if up is not None else r.inp), only_user(r.out)
    if sl is None or u is None or not is_call(u, aten.cat.default) or len(u.args[0]) != 2:
        return False
    if u.args[0][0] is not r.out:
        return False
    q1, dim, start, end, step = sl
    if up is not None:  # cat promotes the tail to the rotation's dtype; the one cast back must follow
        back = only_user(u)
        if back is None or not is_call(back, CONVERT) or back.args[1] != val(q1).dtype \
                or val(u).dtype != val(up).dtype or not val(up).is_floating_point():
            return False
    d = val(q1).shape[-1]
    if dim != val(q1).ndim - 1 or start != 0 or step != 1 or not isinstance(end, int) \
            or not isinstance(d, int) or end >= d or not is_last(u, u.args[1] if len(u.args) > 1 else 0):
        return False
    tail = slice_args(u.args[0][1])
    if tail is None or tail[0] is not q1 or tail[1] != dim or tail[2] != end or tail[4] != 1 \
            or not full_end(tail[3], d) or (up is None and val(u).dtype != val(q1).dtype):
        return False
    r.inp, r.out, r.rotary_dim = q1, (u if up is None else only_user(u)), end
    return True


def table_reason(r: Rotation) -> str | None:
    """Why the match can't become the op (None if it can): a non-float input, an output broadcast beyond the
    input, a symbolic head_dim, or cos/sin that are not per-feature tables of the rotated width (half of it
    for a half table)."""
    xv, ov = val(r.inp), val(r.out)
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
            tv = val(t)
            if tv is None or not tv.is_floating_point() or tv.ndim > xv.ndim or not same(tv.shape[-1], width):
                shape = None if tv is None else tuple(tv.shape)
                return f"cos/sin {shape} are not per-feature tables of width {width}"
    return None


def verify(r: Rotation) -> str | None:
    """Verify a discovered rotation against ``rope_ref`` on random inputs (passes/discover.py); the
    failed check (None when it holds). Sets ``r.note``."""
    from ...providers.reference import rope_ref
    from .. import discover

    tables = [r.cos[1]] if isinstance(r.cos, tuple) else [r.cos, r.sin]  # complex: f, cos = Re f, sin = Im f
    region = discover.extract([r.inp, *tables], [r.out])
    if isinstance(region, str):
        return f"not rewritten: {region}"
    args = (r.rotary_dim, r.interleaved, r.half_table)

    def ref(x, *t):
        c, s = (t[0].real, t[0].imag) if len(t) == 1 else t
        return (rope_ref(x, None, c, s, *args)[0],)

    v = discover.verify(region, "rope", args, ref, ref)  # rope_ref computes in float64 on float64 inputs
    if not v.ok:
        from .diagnose import cause

        why = cause(region, r) if "not the same function" in v.reason else ""
        return f"verification failed: {why + '; ' if why else ''}{v.reason}"
    r.note = "found by discovery, verified" + (" (cached)" if v.cached else "") + (f"; {v.note}" if v.note else "")
    return None


def check(r: Rotation) -> str | None:
    """Why the (folded) rotation is not rewritten: :func:`table_reason`, then, for a rotation found by discovery,
    :func:`verify`; None when the op can take it."""
    why = table_reason(r)
    if why is None and r.verify:
        why = verify(r)
    return why
