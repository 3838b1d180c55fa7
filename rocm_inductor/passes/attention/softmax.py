"""The softmax of the math form: ``softmax(f * s, -1)`` in the spellings Inductor's post-grad graph holds, with
or without attention sinks, and the probabilities' near relatives the pass names instead of taking (dropout).

Covers: ``_softmax`` / ``_safe_softmax`` on the last dim; ``exp(s - amax(s)) / sum`` with or without an fp32
up/down-cast; SDPA's safe-softmax ``where(row_empty, 0, p)``; Inductor's scale-folded ``softmax(x * c)`` pattern
(``(y - amax(y)) * c``, and ``where(all_finite, stable, plain)`` on newer torch). Attention sinks (GPT-OSS's
eager attention, transformers models/gpt_oss/modeling_gpt_oss.py: ``c = cat([s, sinks.reshape(1, -1, 1,
1).expand(B, -1, Lq, -1)], -1)``, ``softmax(c - c.max(-1, keepdim=True).values)[..., :-1]``, the shift optional,
casts and clones between the steps): :func:`sink_softmax`. Near-misses, with their reasons: a sink form it
cannot take (more than one column, a column that is not the last, a sink that is not one logit per query head,
a scaled softmax over the sink column, ops between the concatenation and the softmax); dropout on the
probabilities (a random keep-mask).
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Any

import torch
from torch.fx import Node

from ..fx import CONVERT, is_call, known_equal, shape, val
from .heads import CLONES
from .masks import WHERES, scalar_value, strip_expand

aten = torch.ops.aten
prims = torch.ops.prims

SOFTMAX_OPS = tuple(op.default for op in (getattr(aten, "_softmax", None), getattr(aten, "_safe_softmax", None))
                    if op is not None and hasattr(op, "default"))
#: Random sources of a dropout keep-mask in a post-grad graph.
_RANDOM_OPS = tuple(op for op in (getattr(prims, "inductor_random", None), getattr(aten, "rand", None),
                                  getattr(aten, "rand_like", None), getattr(aten, "bernoulli", None))
                    if op is not None)


def strip_scale(n: Any) -> tuple[Any, float]:
    """``n`` without multiplications / divisions by Python numbers, and their product."""
    f = 1.0
    while is_call(n, aten.mul.Tensor, aten.div.Tensor, aten.mul.Scalar, aten.div.Scalar) and len(n.args) == 2 \
            and isinstance(n.args[1], (int, float)) and not isinstance(n.args[1], bool) and n.args[1] != 0:
        f = f * n.args[1] if n.target in (aten.mul.Tensor, aten.mul.Scalar) else f / n.args[1]
        n = n.args[0]
    return n, f


def strip_convert(n: Any) -> Any:
    """``n`` without one ``convert_element_type`` (only one: the softmax's own up/down-cast)."""
    return n.args[0] if is_call(n, CONVERT) else n


def _last_dim(dims: Any, ndim: int) -> bool:
    return isinstance(dims, (list, tuple)) and len(dims) == 1 and dims[0] in (-1, ndim - 1)


def _base(n: Any) -> Any:
    """``n`` without scalings by Python numbers and dtype casts (to compare two spellings of one score tensor)."""
    while True:
        m = strip_convert(strip_scale(n)[0])
        if m is n:
            return n
        n = m


def _shifted(z: Any, nd: int) -> tuple[Any, float] | None:
    """``(x, f)`` when the exponent ``z`` of a softmax numerator is ``f * x - amax(f * x, -1)``, else None.

    Spellings: ``x - amax(x)``; Inductor's ``softmax(inp * c)`` pattern (joint_graph ``mul_softmax_pattern`` /
    ``div_softmax_pattern``), which folds the scale after the row max: ``(y - amax(y)) * c`` with ``y = inp * sign``
    (x = inp's base, f = c * sign), and on newer torch ``where(all_finite, (y - amax(y)) * c, x - amax(x))``
    (both branches the same softmax of ``x``; the plain branch is taken)."""
    if is_call(z, aten.sub.Tensor) and len(z.args) == 2:
        x, mx = z.args
        if is_call(mx, aten.amax.default) and mx.args[0] is x and _last_dim(mx.args[1], nd):
            return x, 1.0
        return None
    if is_call(z, *WHERES) and len(z.args) == 3 and getattr(val(z.args[0]), "dtype", None) == torch.bool:
        stable, plain = _shifted(z.args[1], nd), _shifted(z.args[2], nd)
        if stable is not None and plain is not None and plain[1] == 1.0 and _base(stable[0]) is _base(plain[0]):
            return plain
        return None
    y, c = strip_scale(z)
    if y is not z:
        inner = _shifted(y, nd)
        if inner is not None and inner[1] == 1.0:
            x, sign = strip_scale(inner[0])
            return strip_convert(x), c * sign
    return None


def softmax_input(p: Any) -> tuple[Any, float] | None:
    """``(s, f)`` when ``p = softmax(f * s, -1)`` as Inductor decomposes it (``exp(s - amax) / sum``, the scale
    possibly folded in by Inductor's ``softmax(x * c)`` pattern, see :func:`_shifted`), optionally behind a
    down-cast and SDPA's safe-softmax ``where(row_empty, 0, p)``; None if ``p`` is not one."""
    n = p
    if is_call(n, CONVERT):
        n = n.args[0]
    nd = len(shape(n))
    if is_call(n, *SOFTMAX_OPS) and n.args[1] in (-1, nd - 1):
        x, f = n.args[0], 1.0
    else:
        if is_call(n, *WHERES) and len(n.args) == 3 and scalar_value(n.args[1]) == 0.0 and \
                getattr(val(n.args[0]), "dtype", None) == torch.bool:
            n = n.args[2]  # rows with no finite score -> 0 (SDPA's _safe_softmax); the op does the same
        if not (is_call(n, aten.div.Tensor) and len(n.args) == 2):
            return None
        e, sm = n.args
        if not (is_call(sm, aten.sum.dim_IntList) and sm.args[0] is e and _last_dim(sm.args[1], nd)
                and is_call(e, aten.exp.default)):
            return None
        xf = _shifted(e.args[0], nd)
        if xf is None:
            return None
        x, f = xf
    return strip_convert(x), f  # HF: softmax(..., dtype=torch.float32) of bf16 scores


def reaches(n: Any, targets: Any, depth: int, stop: tuple = ()) -> bool:
    """A node of ``targets`` (a tuple of targets, or a predicate on nodes) is ``n`` or within ``depth`` producers
    of it (not walking through ``stop``)."""
    if not (isinstance(n, Node) and n.op == "call_function"):
        return False
    if (targets(n) if callable(targets) else n.target in targets):
        return True
    if depth == 0 or n.target in stop:
        return False
    return any(reaches(a, targets, depth - 1, stop) for a in n.all_input_nodes)


def normalised_exp(n: Node) -> bool:
    """``n`` is a softmax op, or an ``exp`` that a row sum normalises (a softmax in some spelling)."""
    return n.target in SOFTMAX_OPS or (n.target is aten.exp.default and
                                       any(is_call(u, aten.sum.dim_IntList) for u in n.users))


def _is_random(n: Any, depth: int = 0) -> bool:
    """``n`` is computed (within 3 ops) from a random op: a dropout keep-mask such as ``rand > p``."""
    if not (isinstance(n, Node) and n.op == "call_function"):
        return False
    if getattr(n.target, "overloadpacket", None) in _RANDOM_OPS:
        return True
    return depth < 3 and any(_is_random(a, depth + 1) for a in n.all_input_nodes)


def under_dropout(p: Any) -> Any:
    """The probabilities behind dropout ``p * keep * (1 / (1 - p_drop))`` with a random ``keep`` (SDPA's math
    form with ``dropout_p > 0``), else None."""
    n, random = p, False
    for _ in range(4):
        if not (is_call(n, aten.mul.Tensor, aten.mul.Scalar, aten.div.Tensor, aten.div.Scalar) and len(n.args) == 2):
            break
        a, b = n.args
        if not isinstance(b, Node):
            n = a
            continue
        ra, rb = _is_random(a), _is_random(b)
        if ra == rb:
            break
        random, n = True, (b if ra else a)
    return n if random else None


def _cat_last(n: Node) -> bool:
    """``n`` concatenates along the last dim (the sink column joins the scores)."""
    return n.target is aten.cat.default and len(n.args) > 1 and n.args[1] in (-1, len(shape(n)) - 1)


@dataclasses.dataclass
class SinkForm:
    """Attention with sinks, read off its softmax.

    Attributes:
        scores: the logits the sink column joins ((B, H, Lq, Lkv), behind one cast), the softmax input of the
            attention without sinks; sinks: the tensor the sink column broadcasts (dims (1, Hq, 1, 1),
            right-aligned); dtype: the column's dtype where it joins the scores (the concatenation's).
    """

    scores: Any
    sinks: Node
    dtype: torch.dtype


def _without_casts(n: Any) -> Any:
    """``n`` behind clones and dtype casts."""
    while is_call(n, *CLONES, CONVERT):
        n = n.args[0]
    return n


def _last_dim_slice(p: Any) -> tuple[Any, bool] | None:
    """``(x, drops_last)`` when ``p = x[..., a:b:c]`` (behind clones / casts), ``drops_last`` when it is
    ``x[..., :-1]`` (the end ``-1`` or ``x.shape[-1] - 1``); None when ``p`` is no slice of the last dim."""
    n = _without_casts(p)
    if not is_call(n, aten.slice.Tensor):
        return None
    src, dim, start, end, step = (list(n.args) + [None] * 5)[:5]
    full = shape(src)
    if not full or dim not in (-1, len(full) - 1):
        return None
    last = end == -1 or (end is not None and known_equal(end, full[-1] - 1))
    return src, last and start in (0, None) and step in (1, None)


def _unshifted(x: Any) -> Any:
    """``c`` when ``x = c - max(c, -1, keepdim=True)`` (GPT-OSS's explicit shift: ``max.dim``'s values or
    ``amax``; the softmax is the same without it), else ``x``."""
    if not (is_call(x, aten.sub.Tensor) and len(x.args) == 2):
        return x
    c, mx = x.args
    nd = len(shape(c))
    if is_call(mx, operator.getitem) and mx.args[1] == 0:
        mx = mx.args[0]
        ok = is_call(mx, aten.max.dim) and mx.args[1] in (-1, nd - 1)
    else:
        ok = is_call(mx, aten.amax.default) and _last_dim(mx.args[1], nd)
    return c if ok and mx.args[0] is c else x


def sink_softmax(p: Any) -> SinkForm | str | None:
    """The attention-with-sinks softmax ``p = softmax(cat([s, col], -1))[..., :-1]`` (module docstring), why it
    is one the pass cannot take, or None when ``p`` is no sink softmax.

    Args:
        p: the probabilities operand of ``P @ V`` (its (B, H, Lq, Lkv) tensor).
    """
    sl = _last_dim_slice(p)
    sf = softmax_input(sl[0]) if sl is not None else None
    if sf is None:
        return None
    x, f = sf
    c = strip_convert(_unshifted(x))
    if not sl[1]:
        if reaches(c, _cat_last, 3, stop=(aten.bmm.default,)) and reaches(c, (aten.bmm.default,), 8):
            return ("attention with sinks: the probabilities are sliced other than [..., :-1] after the softmax "
                    "of a concatenation (the op takes the scores first and one sink column last, dropped)")
        return None
    if not (is_call(c, aten.cat.default) and _cat_last(c)):
        if reaches(c, _cat_last, 3, stop=(aten.bmm.default,)) and reaches(c, (aten.bmm.default,), 8):
            return (f"attention with sinks: {getattr(c, 'name', c)} lies between the concatenation of the sink "
                    "column and the softmax (the op takes softmax(cat([s, sinks], -1)), shifted by its row max "
                    "or not)")
        return None
    parts = list(c.args[0])
    if not reaches(parts[0], (aten.bmm.default,), 8):
        return ("attention with sinks: the scores are not the first operand of the concatenation before the "
                "softmax (the op takes cat([s, sinks], -1), the sink column last)")
    if len(parts) != 2:
        return (f"attention with sinks: {len(parts)} tensors are concatenated before the softmax; the op takes "
                "the scores and one sink column")
    col = parts[1]
    cs = shape(col)
    if len(cs) != 4 or not known_equal(cs[-1], 1):
        return (f"attention with sinks: the column concatenated after the scores is {tuple(cs)}, not one wide "
                "(the op takes one sink logit per query head, dropped after the softmax)")
    if f != 1.0:
        return (f"attention with sinks: the softmax scales the sink column too (softmax({f:g} * cat(...))); the op "
                "takes the sink logits unscaled")
    t = strip_expand(_without_casts(col))
    ts = (1,) * (4 - len(shape(t))) + tuple(shape(t))
    if len(ts) != 4 or not all(known_equal(ts[i], 1) for i in (0, 2, 3)) or not known_equal(ts[1], cs[1]):
        return (f"attention with sinks: the sink column broadcasts a {ts} tensor, not one logit per query head "
                f"(1, {cs[1]}, 1, 1): the op's sinks are (Hq,)")
    return SinkForm(strip_convert(parts[0]), t, val(c).dtype)
