"""The attention's mask: the smallest tensor that means the same as what the scores are masked with.

Covers: no mask; a boolean or float additive mask of any rank that broadcasts (viewed 4D by the rewrite), walked
back through an ``expand`` on broadcast dims, through the efficient kernel's alignment
``slice(constant_pad_nd(bias))``, and SDPA's own bool -> additive conversion ``where(m, 0, -inf)`` /
``where(~m, -inf, 0)`` (the bool is recovered: same meaning, a fraction of the bytes); HF's ``where(m, 0,
finfo.min)`` stays additive (exact: a fully masked row then is uniform, not zeros, as in eager). In the math
form, scores filled by ``masked_fill(~m, v)`` / ``where(m, s, v)``: ``v = -inf`` gives the bool mask, a finite
``v <= -2**127`` (float32 / bfloat16 ``finfo.min``) the additive ``where(filled, v, 0)``; other fills are refused
(:func:`fill_mask`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import torch
from torch.fx import Node

from ...report import dtype_name
from ..contract import Miss
from ..fx import is_call, known_equal, shape, val

aten = torch.ops.aten

#: The ``where`` overloads (tensor / scalar branches) a fill or a bool -> additive conversion is spelled with.
WHERES = tuple(getattr(aten.where, o) for o in ("self", "ScalarSelf", "ScalarOther", "Scalar")
               if hasattr(aten.where, o))
_NOTS = (aten.logical_not.default, aten.bitwise_not.default)

#: Mask fill values at most this (float32 / bfloat16 ``finfo.min``) are absorbed by float32 addition: ``s + fill ==
#: fill`` for |s| < 2**103 (half an ulp of 2**127 is 2**103), so ``s + where(filled, fill, 0)`` is ``where(filled,
#: fill, s)`` exactly, and a fully masked row stays uniform as in eager.
_ABSORBING_FILL = -(2.0 ** 127)


@dataclasses.dataclass
class MaskSource:
    """The mask to hand the op: ``node`` (or None), its kind (``"none"`` / ``"bool"`` / ``"additive"``) and how
    it was found (for the report)."""

    node: Node | None
    kind: str
    spelling: str = ""
    invert: bool = False  # the bool mask is the negation of ``node`` (``where(~m, -inf, 0)`` with no ~ node)
    #: ``(value, dtype)`` when the op's mask is the additive ``convert(node, dtype) * value`` (``node`` True where
    #: the scores were filled with ``value``: ``masked_fill(~m, finfo.min)`` / ``where(m, s, finfo.min)``)
    fill: tuple[float, torch.dtype] | None = None


def scalar_value(a: Any) -> float | None:
    """The constant of ``a``: a Python number, or a ``full``/``scalar_tensor``/``zeros`` node of one value."""
    if isinstance(a, (int, float)) and not isinstance(a, bool):
        return float(a)
    if is_call(a, aten.full.default) and isinstance(a.args[1], (int, float)):
        return float(a.args[1])
    if is_call(a, aten.scalar_tensor.default) and isinstance(a.args[0], (int, float)):
        return float(a.args[0])
    if is_call(a, aten.zeros.default, aten.zeros_like.default):
        return 0.0
    return None


def strip_expand(n: Any) -> Any:
    """Walk back through ``expand`` (broadcast only: the input's dims are 1 or equal, right-aligned)."""
    while is_call(n, aten.expand.default):
        src = n.args[0]
        s, o = shape(src), shape(n)
        if not s or len(s) > len(o):
            break
        if not all(known_equal(a, 1) or known_equal(a, b) for a, b in zip(s, o[len(o) - len(s):], strict=True)):
            break
        n = src
    return n


def _strip_pad_slice(n: Any) -> Any:
    """``slice(constant_pad_nd(x, [0, p]), -1, 0, L)`` with L = x's last dim -> x (SDPA's bias alignment)."""
    if not is_call(n, aten.slice.Tensor):
        return n
    args = list(n.args) + [None] * (5 - len(n.args))
    src, dim, start, end, step = args[:5]
    pad = src
    if not is_call(pad, aten.constant_pad_nd.default):
        return n
    x = pad.args[0]
    xs = shape(x)
    padding = list(pad.args[1])
    value = pad.args[2] if len(pad.args) > 2 else 0
    if not xs or dim not in (-1, len(xs) - 1) or start not in (0, None) or (step not in (1, None)):
        return n
    if len(padding) != 2 or padding[0] != 0 or value != 0:
        return n
    if end is not None and not known_equal(end, xs[-1]) and not (isinstance(end, int) and end >= 2**62):
        return n
    return x


def mask_source(node: Any) -> MaskSource:
    """Walk an SDPA mask (or a math-form additive mask) back to the smallest tensor that means the same.

    Args:
        node: the mask operand (bool or float, any rank that broadcasts to (B, H, Lq, Lkv)), or None.
    """
    if node is None:
        return MaskSource(None, "none")
    spelling = []
    n = strip_expand(node)
    p = _strip_pad_slice(n)
    if p is not n:
        spelling.append("alignment pad/slice")
        n = strip_expand(p)
    if is_call(n, *WHERES) and len(n.args) == 3:
        c, a, b = n.args
        av, bv = scalar_value(a), scalar_value(b)
        cv = val(c)
        if isinstance(cv, torch.Tensor) and cv.dtype == torch.bool and av is not None and bv is not None:
            if av == 0.0 and bv == -math.inf:
                spelling.append("bool recovered from where(m, 0, -inf)")
                return MaskSource(strip_expand(c), "bool", ", ".join(spelling))
            if av == -math.inf and bv == 0.0:
                spelling.append("bool recovered from where(~m, -inf, 0)")
                if is_call(c, *_NOTS):
                    return MaskSource(strip_expand(c.args[0]), "bool", ", ".join(spelling))
                return MaskSource(c, "bool", ", ".join(spelling), invert=True)
    v = val(n)
    kind = "bool" if isinstance(v, torch.Tensor) and v.dtype == torch.bool else "additive"
    return MaskSource(n, kind, ", ".join(spelling))


def fill_mask(s: Node, is_scores: Callable[[Any], bool]) -> tuple[Any, MaskSource] | None:
    """``(scores, mask)`` of a ``where`` that fills masked scores: ``masked_fill(~m, v)`` -> ``where(~m, v, s)``,
    ``torch.where(m, s, v)``; None when ``s`` is no such ``where`` (or neither branch passes ``is_scores``).

    ``v = -inf`` gives the bool mask; a finite ``v <= -2**127`` (float32 / bfloat16 ``finfo.min``) the additive
    mask ``where(filled, v, 0)`` (exact, see ``_ABSORBING_FILL``).

    Raises:
        Miss: another fill value (a fully masked row would differ from eager's).
    """
    if not (is_call(s, *WHERES) and len(s.args) == 3 and getattr(val(s.args[0]), "dtype", None) == torch.bool):
        return None
    c, a, b = s.args
    for value, scores, keep in ((b, a, True), (a, b, False)):  # keep: where(c, s, v) keeps c; else fills c
        v = scalar_value(value)
        sv = val(scores)
        if v is None or not isinstance(sv, torch.Tensor) or not is_scores(scores):
            continue
        v = float(torch.tensor(v, dtype=sv.dtype))  # the fill as the scores hold it
        if v == -math.inf:
            if keep:
                return scores, MaskSource(strip_expand(c), "bool", "masked_fill(~m, -inf)")
            inner = c.args[0] if is_call(c, *_NOTS) else None
            return scores, (MaskSource(strip_expand(inner), "bool", "masked_fill(~m, -inf)") if inner is not None
                            else MaskSource(c, "bool", "masked_fill(m, -inf)", invert=True))
        if math.isfinite(v) and v <= _ABSORBING_FILL:
            return scores, MaskSource(strip_expand(c), "additive", f"masked_fill(~m, {v:.6g}) (finfo.min) as the "
                                      f"additive where(~m, {v:.6g}, 0)", invert=keep, fill=(v, sv.dtype))
        raise Miss(f"masked_fill / where with the fill {v:g} ({dtype_name(sv)} scores): not -inf and not a finite "
                   "fill <= -2**127 that float32 addition absorbs, so the op's additive mask would make a fully "
                   "masked row softmax(s + fill) ~ softmax(s) where eager's is uniform, and a bool mask would make "
                   "it zeros; fill with -inf or torch.finfo(torch.float32 / bfloat16).min")
    return None
