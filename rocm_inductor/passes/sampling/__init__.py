"""Top-k / top-p / min-p / temperature sampling chains -> ``rocm_fused::sample`` (one capture-safe kernel).

Covers (post-grad ATen graph, after ``canonicalize``), walking *up* from the random draw:

- the draw: ``multinomial(probs, 1)`` (HF ``generate``) or gpt-fast's exponential race
  ``argmax(probs / exponential_(1), -1[, keepdim])`` (which Inductor has already turned into
  ``-log(inductor_random(...))``: ``mul(where(ge(u, 1 - eps/2), -eps/2, log(u)), -1)``), where ``probs`` is
  ``softmax(s)`` (the decomposed ``exp(s - amax) / sum``, possibly wrapped in float casts); a bare
  ``multinomial(p, 1)`` of other probabilities becomes ``is_probs=True`` with no filters;
- then the filters on ``s``, nearest first, each recognised as a whole: HF min-p (``MinPLogitsWarper``,
  min_tokens_to_keep = 1: ``where(scatter(probs < min_p * amax(probs), -1, topk(probs, 1)[1], False), -inf, s)``,
  probs = softmax(s); min_p a Python float in [0, 1] (the scatter optional) or a float tensor of shape (B, 1) /
  (1, 1) / (1,) / () compared in float32 (``dynamic=True``'s lifted 0-d min_p; the scatter required), only below
  any top-p (HF applies it last; it commutes with top-k, so it may sit above a top-k); HF top-p
  (``TopPLogitsWarper``, min_tokens_to_keep = 1: ascending sort, softmax, cumsum ``<= 1 - p``, last entry kept,
  scatter back, ``where(mask, -inf, s)``) with p a Python float or a per-row float32 tensor (the threshold spelled
  ``1 - top_p``, top_p of shape (B, 1) / (1, 1) / (1,) / ()); top-k (``where(s < topk(s, k)[0][..., -1:], -inf,
  s)``, HF and gpt-fast), top-k and top-p in either order; then temperature ``s / T`` (T a positive Python float
  or 0 (folded as the op's greedy T <= 0: eager's ``softmax(s / 0)`` is NaN), or a tensor of shape (B, 1) /
  (1,) / ()); then at most one ban ``where(mask, -inf, s)`` with any bool mask
  broadcastable per row (HF's min-new-tokens EOS mask, or a min-p mask the op can't apply itself; the mask stays
  an Inductor-computed input, which is exact).

Also (issue 15): the Gumbel-max draw ``argmax(s - log(-log(u)), -1)`` (a draw from softmax(s)); an exponential
noise cast to the probabilities' dtype (gpt-fast in bf16); and, when the probabilities the draw reads are also
used elsewhere (gpt-fast's ``sample`` returns them), the draw alone is rewritten on them (``is_probs``) and the
filters stay in Inductor (the match note says so). A random draw left in the graph is a near-miss.

Parameters come from the graph (k from ``topk``, p = 1 - the ``le`` threshold or the ``top_p`` tensor under
``1 - top_p``, min_p from the ``mul``, T from the ``div``).
Deliberately left alone: greedy ``argmax(logits)`` (nothing random: Inductor's kernel is right); ``multinomial``
with more than one sample; filters we cannot prove equal (top-p with ``min_tokens_to_keep > 1``, a top-p tensor
threshold not spelled ``1 - top_p`` or a per-row top_p not float32 (``dynamic=True``'s 0-d float64 top_p is
taken), min-p with ``min_tokens_to_keep > 1``, with a float min_p outside [0, 1], with a tensor min_p but no
scatter or compared in another dtype than float32, or applied before a top-p / temperature, a temperature after a
filter): the walk stops there (a min-p mask instead becomes the ban, above which only a temperature is absorbed)
and everything above stays in Inductor; each is reported as a near-miss, as is a sort + cumsum left above the
rewritten draw. Per-row top-k (a tensor k, which ``topk`` can't take) is not recognised. The replacement draws its
seed in the graph (``aten.randint``, a fallback that uses torch's device generator, which CUDA/HIP graphs advance
on each replay).

    s ─► [/T] ─► [top-k] ─► [top-p] ─► [min-p] ─► softmax ─► multinomial
  becomes
    s ──────────────────────────────┬─► rocm_fused::sample(s, seed, T, k, p, min_p, ...)
    randint(0, 2^31 - 1, (1,)) ─► seed
"""

from __future__ import annotations

import dataclasses
import math
import operator
from typing import Any

import torch
from torch.fx import Graph, Node

from ..ops.sampling import sample_spec
from ..registry import ops_of
from ..report import Match as MatchRecord
from ..report import NearMiss, describe, location_of
from .canonicalize import insert_call
from .context import PassContext

aten = torch.ops.aten
prims = torch.ops.prims

_CONVERT = prims.convert_element_type.default
_INT_MAX = 2**63 - 1


def _is(n: Any, *targets: Any) -> bool:
    return isinstance(n, Node) and n.op == "call_function" and n.target in targets


def _val(n: Any) -> Any:
    return n.meta.get("val") if isinstance(n, Node) else None


def _ndim(n: Any) -> int:
    v = _val(n)
    return v.ndim if isinstance(v, torch.Tensor) else -1


def _last_dim(n: Node, d: Any) -> bool:
    """``d`` names the last dim of ``n`` (``-1`` or ``ndim - 1``)."""
    nd = _ndim(n)
    if isinstance(d, (list, tuple)):
        if len(d) != 1:
            return False
        d = d[0]
    return isinstance(d, int) and nd > 0 and d in (-1, nd - 1)


def _strip_converts(n: Any) -> Any:
    while _is(n, _CONVERT) and isinstance(n.args[0], Node):
        n = n.args[0]
    return n


def _neg_inf(a: Any) -> bool:
    """``a`` is the constant -inf (a Python float or ``full([], -inf)``)."""
    if isinstance(a, (int, float)):
        return a == -math.inf
    return _is(a, aten.full.default) and a.args[0] in ([], ()) and a.args[1] == -math.inf


def _sign_of(w: Any, t: Any) -> bool:
    """``w`` is Inductor's ``where(t >= 0, 1, -1)`` (the sign of a tensor temperature ``t``)."""
    if not (_is(w, aten.where.self) and _is(w.args[0], aten.ge.Scalar) and w.args[0].args[0] is t
            and w.args[0].args[1] == 0):
        return False
    def num(x: Any) -> float | None:  # a number, a 0-d full, or scalar_tensor(c)
        return float(x.args[0]) if _is(x, aten.scalar_tensor.default) and isinstance(x.args[0], (int, float)) \
            else _number(x)

    one, neg = w.args[1], w.args[2]
    return num(one) == 1.0 and (num(neg) == -1.0 or (_is(neg, aten.neg.default) and neg.args[0] is one))


def _scaled_softmax_branch(w: Node) -> Node | None:
    """Inductor's softmax(x / T) form ``where(finite, (m - amax(m)) / T', x / T - amax(x / T))``.

    A Python-float T: ``m = x * w``, ``T' = T * w`` with ``w = 1`` for T >= 0, else -1. A tensor T (e.g. a
    per-row (B, 1) temperature): ``m = x * w``, ``T' = w * T`` with ``w = where(T >= 0, 1, -1)``. Both branches
    are the same value (Inductor picks the first when every score is finite): return the plain branch
    ``sub(x / T, amax(x / T))``, else None.
    """
    _, a, b = w.args
    if not (_is(a, aten.div.Tensor) and _is(b, aten.sub.Tensor) and _is(b.args[0], aten.div.Tensor)):
        return None
    s = b.args[0]
    if not _is(a.args[0], aten.sub.Tensor):
        return None
    m, t, t2 = a.args[0].args[0], s.args[1], a.args[1]
    if isinstance(t, (int, float)) and isinstance(t2, (int, float)):  # scalar T: w = sign(T) (NaN: -1)
        w = m.args[1] if _is(m, aten.mul.Tensor) else 1
        m0 = m.args[0] if _is(m, aten.mul.Tensor) else m
        same = t2 == t * w or (math.isnan(t) and math.isnan(t2))
        return b if w in (1, -1) and same and m0 is s.args[0] else None
    # tensor T: T' = w * T (either operand order) and m = x * w, w the sign of T
    if not (isinstance(t, Node) and _is(t2, aten.mul.Tensor) and t in t2.args and _is(m, aten.mul.Tensor)):
        return None
    sign = t2.args[0] if t2.args[1] is t else t2.args[1]
    if not _sign_of(sign, t) or sign not in m.args or s.args[0] not in m.args:
        return None
    return b


def _softmax_input(p: Node) -> Node | None:
    """``s`` when ``p`` is softmax(s) over the last dim (decomposed form, float casts allowed), else None."""
    p = _strip_converts(p)
    if not _is(p, aten.div.Tensor):
        return None
    e, z = p.args
    if not (_is(e, aten.exp.default) and _is(z, aten.sum.dim_IntList) and z.args[0] is e
            and _last_dim(e, z.args[1]) and (len(z.args) > 2 and z.args[2])):
        return None
    sub = e.args[0]
    if _is(sub, aten.where.self):
        sub = _scaled_softmax_branch(sub)
    if not _is(sub, aten.sub.Tensor):
        return None
    s, mx = sub.args
    if not (_is(mx, aten.amax.default) and mx.args[0] is s and _last_dim(s, mx.args[1])
            and len(mx.args) > 2 and mx.args[2]):
        return None
    return _strip_converts(s) if _is(s, _CONVERT) else s


@dataclasses.dataclass
class Chain:
    """A recognised sampling chain: what the replacement needs (see module docstring)."""

    anchor: Node
    scores: Node
    keepdim: bool
    is_probs: bool = False
    temperature: float | Node = 1.0
    top_k: int | Node = 0
    top_p: float | Node = 1.0  # a float, or a per-row tensor node (numel 1 or B)
    min_p: float | Node = 0.0  # a float, or a per-row float tensor node (numel 1 or B)
    ban: Node | None = None
    order: list[str] = dataclasses.field(default_factory=list)  # filters, nearest the draw first
    stopped_at: str = ""  # why the upward walk stopped (for near-miss reports)
    refused: str = ""  # why the whole chain must stay in Inductor (e.g. a NaN temperature)
    notes: list[str] = dataclasses.field(default_factory=list)  # partial matches (for near-miss reports)
    verified: str = ""  # the verification's note for the report (issue 15), empty when not verified

    @property
    def top_k_first(self) -> bool:
        """HF order unless top-p was found *upstream* of top-k (i.e. applied first); min-p is always last."""
        return [f for f in self.order if f != "min_p"] != ["top_k", "top_p"]


# -- the draw ------------------------------------------------------------------------------------------
def _exponential_of(q: Node) -> bool:
    """``q`` is Inductor's decomposed ``exponential_(1)``: ``-1 * where(u >= c, c2, log(u))``, u uniform."""
    if _is(q, aten.exponential.default):  # config.fallback_random keeps the ATen op
        return len(q.args) < 2 or q.args[1] == 1.0
    if not (_is(q, aten.mul.Tensor) and q.args[1] == -1.0 and _is(q.args[0], aten.where.self)):
        return False
    cond, _, lg = q.args[0].args
    if not (_is(lg, aten.log.default) and _is(cond, aten.ge.Scalar) and cond.args[0] is lg.args[0]):
        return False
    u = lg.args[0]
    return _is(u, prims.inductor_random.default) and u.args[2] == "rand"


def _draw(n: Node) -> Chain | None:
    """A sampling draw at ``n``: multinomial(p, 1) or argmax(p / exponential)."""
    if _is(n, aten.multinomial.default):
        num = n.args[1] if len(n.args) > 1 else n.kwargs.get("num_samples")
        if num != 1 or n.kwargs.get("generator") is not None or _ndim(n.args[0]) != 2:
            return None
        p = n.args[0]
        s = _softmax_input(p)
        return Chain(n, p, True, is_probs=True) if s is None else Chain(n, s, True)
    if _is(n, aten.argmax.default) and len(n.args) >= 2 and _is(n.args[0], aten.div.Tensor):
        p, q = n.args[0].args
        if not (isinstance(p, Node) and isinstance(q, Node) and _ndim(p) == 2 and _last_dim(p, n.args[1])
                and (_exponential_of(q) or _exponential_of(_strip_converts(q)))):  # bf16 probs: cast noise
            return None
        if tuple(_val(q).shape) != tuple(_val(p).shape):
            return None
        keep = bool(n.args[2]) if len(n.args) > 2 else bool(n.kwargs.get("keepdim", False))
        s = _softmax_input(p)
        return Chain(n, p, keep, is_probs=True) if s is None else Chain(n, s, keep)
    return None


def _uniform(u: Any) -> bool:
    """``u`` is a uniform draw: Inductor's ``inductor_random(..., "rand")`` or ``aten.rand`` / ``rand_like``."""
    if _is(u, prims.inductor_random.default):
        return u.args[2] == "rand"
    return _is(u, aten.rand.default, aten.rand_like.default)


def _gumbel_noise(g: Any) -> bool:
    """``g`` is ``log(-log(u))`` (minus Gumbel noise), u uniform."""
    if not (_is(g, aten.log.default) and _is(g.args[0], aten.neg.default)):
        return False
    inner = g.args[0].args[0]
    return _is(inner, aten.log.default) and _uniform(inner.args[0])


def _gumbel_draw(n: Node) -> Chain | None:
    """Gumbel-max: ``argmax(s - log(-log(u)), -1)`` (equivalently ``s + Gumbel``), a draw from softmax(s)."""
    if not (_is(n, aten.argmax.default) and len(n.args) >= 2 and _last_dim(n.args[0], n.args[1])):
        return None
    a = n.args[0]
    if not (_is(a, aten.sub.Tensor) and len(a.args) == 2 and a.kwargs.get("alpha", 1) == 1):
        return None
    s, g = a.args
    if not (isinstance(s, Node) and _gumbel_noise(g) and _ndim(s) == 2) or tuple(_val(g).shape) != tuple(_val(s).shape):
        return None
    keep = bool(n.args[2]) if len(n.args) > 2 else bool(n.kwargs.get("keepdim", False))
    return Chain(n, s, keep)


def _escaping_probs(n: Node) -> Node | None:
    """The probabilities the draw at ``n`` reads when they are also used elsewhere (gpt-fast returns them)."""
    if _is(n, aten.multinomial.default):
        p = n.args[0]
    elif _is(n, aten.argmax.default) and _is(n.args[0], aten.div.Tensor):
        p = n.args[0].args[0]
    else:
        return None
    return p if isinstance(p, Node) and len(p.users) > 1 else None


# -- filter stages: each returns (upstream scores, params) or None --------------------------------------
def _masked(s: Node) -> tuple[Node, Node] | None:
    """``where(mask, -inf, s0)`` -> (mask, s0)."""
    if _is(s, aten.where.self) and _neg_inf(s.args[1]) and isinstance(s.args[2], Node):
        return s.args[0], s.args[2]
    return None


def _top_k(s: Node) -> tuple[Node, int | Node] | None:
    """HF / gpt-fast top-k: ``where(s0 < topk(s0, k)[0].select(-1, -1).unsqueeze(-1), -inf, s0)``."""
    m = _masked(s)
    if m is None or not _is(m[0], aten.lt.Tensor):
        return None
    s0 = m[1]
    a, piv = m[0].args
    if a is not s0 or not _is(piv, aten.unsqueeze.default) or not _last_dim(piv, piv.args[1]):
        return None
    sel = piv.args[0]
    if not (_is(sel, aten.select.int) and _last_dim(sel.args[0], sel.args[1])):
        return None
    gi = sel.args[0]
    if not (_is(gi, operator.getitem) and gi.args[1] == 0 and _is(gi.args[0], aten.topk.default)):
        return None
    tk = gi.args[0]
    if tk.args[0] is not s0:
        return None
    k, dim, largest = _topk_args(tk)
    k = _static_k(k, s0)
    if not (_last_dim(s0, dim) and largest):
        return None
    if isinstance(k, int) and not isinstance(k, bool) and sel.args[2] in (-1, k - 1):
        return s0, k
    if isinstance(k, Node) and isinstance(_val(k), torch.SymInt) and sel.args[2] == -1:
        return s0, k  # dynamic=True lifts top_k into a SymInt input: passed to the op as a tensor
    return None


def _topk_args(tk: Node) -> tuple[Any, Any, Any]:
    """``(k, dim, largest)`` of an ``aten.topk`` node, positional or keyword (defaults -1, True)."""
    dim = tk.args[2] if len(tk.args) > 2 else tk.kwargs.get("dim", -1)
    largest = tk.args[3] if len(tk.args) > 3 else tk.kwargs.get("largest", True)
    return tk.args[1], dim, largest


def _static_k(k: Any, s0: Node) -> Any:
    """``k`` as an int: HF's ``min(top_k, scores.size(-1))`` is a ``sym_min(k0, V)`` node under a dynamic
    vocabulary; ``k0`` then means the same to the op (``k >= V`` keeps every token, as ``topk(V)`` does)."""
    if isinstance(k, int) or not (isinstance(k, Node) and k.target in (torch.sym_min, min) and len(k.args) == 2):
        return k
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    v = getattr(_val(s0), "shape", (None,))[-1]
    for k0, n in (k.args, k.args[::-1]):
        if isinstance(k0, int) and not isinstance(k0, bool) and isinstance(n, Node):
            try:
                if statically_known_true(_val(n) == v):
                    return k0
            except Exception:  # an unrelated symbol: not HF's clamp
                return k
    return k


def _false_fill(x: Any) -> bool:
    """``x`` is the constant False: ``full([], False)`` or ``copy(slice, full([], False))``."""
    if _is(x, aten.copy.default):
        x = x.args[1]
    return _is(x, aten.full.default) and x.args[1] is False or (_is(x, aten.full.default) and x.args[1] == 0)


def _number(x: Any) -> float | None:
    """The value of a Python number or a 0-d ``aten.full`` constant, else None."""
    if isinstance(x, bool):
        return None
    if isinstance(x, (int, float)):
        return float(x)
    if _is(x, aten.full.default) and list(x.args[0]) == [] and isinstance(x.args[1], (int, float)):
        return float(x.args[1])
    return None


def _one_minus(thr: Any) -> Node | None:
    """``p`` when ``thr`` is ``1 - p``, else None. Graph forms of HF's ``1 - top_p``: ``sub.Tensor(1, p)``
    (a tensor top_p) and ``add.Tensor(1, mul.Tensor(p, -1))`` (``dynamic=True``: Dynamo lifts the float top_p
    into a 0-d float64 input and decomposes the subtraction; ``1 + (-p)`` is the same float64 operation)."""
    if _is(thr, aten.sub.Tensor) and thr.kwargs.get("alpha", 1) == 1 and len(thr.args) == 2:
        one, p = thr.args
        return p if _number(one) == 1.0 and isinstance(p, Node) else None
    if _is(thr, aten.add.Tensor) and thr.kwargs.get("alpha", 1) == 1 and len(thr.args) == 2:
        for one, neg in (thr.args, thr.args[::-1]):
            if _number(one) == 1.0 and _is(neg, aten.mul.Tensor) and len(neg.args) == 2:
                for p, m1 in (neg.args, neg.args[::-1]):
                    if isinstance(p, Node) and _number(m1) == -1.0:
                        return p
    return None


def _top_p(s: Node, b: Any = None) -> tuple[Node, float | Node] | str | None:
    """HF ``TopPLogitsWarper`` (min_tokens_to_keep=1) -> (s0, p); a reason string for a near variant.

    ``p`` is a float (threshold a Python scalar) or, for HF's spelling with a per-row tensor
    (``cumsum <= 1 - top_p``, ``top_p`` float32 of shape (B, 1), (1, 1), (1,) or (), float32 cumulative
    probabilities), the ``top_p`` node itself.
    """
    m = _masked(s)
    if m is None or not _is(m[0], aten.scatter.src):
        return None
    s0 = m[1]
    sc = m[0]
    ms, dim, idx, src = sc.args[:4]
    if src is not ms or not _last_dim(ms, dim) or not _is(idx, operator.getitem) or idx.args[1] != 1:
        return None
    srt = idx.args[0]
    if not _is(srt, aten.sort.default) or srt.args[0] is not s0:
        return None
    sdim = srt.args[1] if len(srt.args) > 1 else srt.kwargs.get("dim", -1)
    desc = srt.args[2] if len(srt.args) > 2 else srt.kwargs.get("descending", False)
    if not _last_dim(s0, sdim) or desc:
        return "top-p with a descending sort (another spelling) is not recognised"
    if not _is(ms, aten.slice_scatter.default):
        return "top-p without HF's 'keep the last min_tokens_to_keep' step is not recognised"
    le = ms.args[0]
    if not _false_fill(ms.args[1]):
        return "top-p whose kept tail is not filled with False is not recognised"
    start = ms.args[3] if len(ms.args) > 3 else ms.kwargs.get("start")
    end = ms.args[4] if len(ms.args) > 4 else ms.kwargs.get("end")
    if start != -1 or (end is not None and end < _INT_MAX) or not _last_dim(le, ms.args[2]):
        n_keep = -start if isinstance(start, int) else start
        return f"top-p with min_tokens_to_keep = {n_keep} (only 1 is rewritten)"
    if _is(le, aten.le.Scalar) and isinstance(le.args[1], (int, float)) and not isinstance(le.args[1], bool):
        p: float | Node = 1.0 - float(le.args[1])
    elif _is(le, aten.le.Tensor):
        p_node = _one_minus(le.args[1])
        if p_node is None:
            return "top-p whose tensor threshold is not spelled `1 - top_p` is not recognised"
        if not _row_param(p_node, s0, b):
            return ("top-p whose per-row top_p is not a float tensor of shape (B, 1), (1, 1), (1,) or () "
                    "is not recognised")
        dts = (_val(p_node).dtype, getattr(_val(le.args[0]), "dtype", None))
        # A 0-d float64 top_p (dynamic=True's lifted float) does not promote the float32 comparison:
        # HF compares against float32(1 - p computed in float64), which the kernels compute the same way.
        zero_d64 = dts == (torch.float64, torch.float32) and _val(p_node).ndim == 0
        if dts != (torch.float32, torch.float32) and not zero_d64:
            # HF rounds 1 - top_p (and compares) in the promoted dtype; the kernels do both in float32.
            return (f"top-p with a {dts[0]} per-row top_p against {dts[1]} cumulative probabilities (only "
                    "float32 rounds 1 - top_p like the kernels) is not recognised")
        p = p_node
    else:
        return None
    cs = le.args[0]
    if not (_is(cs, aten.cumsum.default) and _last_dim(cs.args[0], cs.args[1])):
        return None
    vals = _softmax_input(cs.args[0])
    if not (_is(vals, operator.getitem) and vals.args[0] is srt and vals.args[1] == 0):
        return None
    return s0, p


def _topk1_indices(idx: Any, probs: Node) -> int | None:
    """k when ``idx`` is ``topk(probs, k, -1)[1]`` (largest first), else None."""
    if not (_is(idx, operator.getitem) and idx.args[1] == 1 and _is(idx.args[0], aten.topk.default)):
        return None
    tk = idx.args[0]
    k, dim, largest = _topk_args(tk)
    if tk.args[0] is not probs or not isinstance(k, int) or not _last_dim(probs, dim) or not largest:
        return None
    return k


def _min_p(s: Node, b: Any = None) -> tuple[Node, float | Node] | str | None:
    """HF ``MinPLogitsWarper`` -> (s0, min_p); a reason string for a near variant; None if not min-p at all.

    Graph form (transformers 5.x, after canonicalize): ``probs = softmax(s0)``;
    ``remove = lt(probs, mul(amax(probs, [-1], True), min_p))``; with min_tokens_to_keep = 1
    ``remove = scatter.value(remove, -1, topk(probs, 1)[1], False)`` (optional for a Python float
    0 <= min_p <= 1: the top token is never removed anyway); ``where(remove, -inf, s0)``. The kept set is
    then exactly ``probs >= min_p * max(probs)``, the op's min-p.

    ``min_p`` is a float, or a tensor node: ``dynamic=True``'s lifted float (a 0-d float64 input, which
    canonicalize casts to float32) or a per-row tensor of shape (B, 1), (1, 1), (1,) or (). A tensor's
    value is unknown at compile time, so it is fused only where the op follows eager for *any* value: the
    scatter is present (for min_p > 1 HF keeps the one top token ``topk`` picks; the reference does too,
    Triton keeps every tied maximum: the same token unless the maximum is tied; NaN or min_p <= 0 removes
    nothing in all three) and probabilities and threshold are float32 (the kernels compare in float32).
    """
    m = _masked(s)
    if m is None:
        return None
    mask, s0 = m
    keep_k, scattered = 1, False
    if _is(mask, aten.scatter.value):
        lt, dim, idx, val = mask.args[:4]
        if not (_is(lt, aten.lt.Tensor) and _last_dim(lt, dim) and val in (False, 0)):
            return None
        probs = lt.args[0]
        k = _topk1_indices(idx, probs)
        if k is None:
            return None
        keep_k, scattered = k, True
    elif _is(mask, aten.lt.Tensor):
        lt = mask
    else:
        return None
    probs, thr = lt.args
    if not isinstance(probs, Node) or _softmax_input(probs) is not s0:
        return None
    if not _is(thr, aten.mul.Tensor):
        return None
    a, c = thr.args
    if not _is(_strip_converts(a), aten.amax.default):
        a, c = c, a
    cast = _strip_converts(a) is not a  # a float64 min_p tensor promotes the max (reported below)
    a = _strip_converts(a)
    if not (_is(a, aten.amax.default) and a.args[0] is probs and _last_dim(probs, a.args[1])
            and len(a.args) > 2 and a.args[2]) or (cast and not isinstance(c, Node)):
        return None
    if keep_k != 1:
        return f"min-p with min_tokens_to_keep = {keep_k} (only 1 is fused)"
    if isinstance(c, Node):
        if not _row_param(c, s0, b):
            return ("min-p whose min_p is neither a number nor a float tensor of shape (B, 1), (1, 1), (1,) "
                    "or () is not fused")
        if not scattered:
            return ("min-p with a tensor min_p but without HF's keep-the-top-token scatter is not fused (a "
                    "min_p > 1 would remove every token)")
        dts = (getattr(_val(probs), "dtype", None), getattr(_val(thr), "dtype", None))
        if dts != (torch.float32, torch.float32):
            return (f"min-p with a tensor min_p comparing {dts[0]} probabilities against a {dts[1]} threshold "
                    "(the kernels compare in float32) is not fused")
        return s0, c
    if isinstance(c, bool) or not isinstance(c, (int, float)):
        return "min-p whose min_p is neither a number nor a float tensor is not fused"
    if not 0.0 <= float(c) <= 1.0:
        return f"min-p with min_p = {c} outside HF's [0, 1] is not fused"
    return s0, float(c)


def _temperature(s: Node, b: Any) -> tuple[Node, float | Node] | str | None:
    """``s0 / T`` with T a float > 0 or == 0, or a tensor of shape (B, 1), (1, 1), (1,) or () (per row).

    ``T == 0`` (``s / 0.0``: eager's softmax is NaN and ``multinomial`` raises) is folded as the op's greedy
    temperature (``T <= 0`` -> argmax, ``rocm_fused::sample``'s contract): the scores must never reach the op
    as +-inf / NaN, which it would read as an arbitrary token. A per-row tensor is folded whatever it holds
    (its rows with ``T <= 0`` are greedy, by the same contract). A negative float T stays in the graph (``s /
    T`` is then just other scores, sampled exactly); a NaN T returns a reason string (eager raises there: the
    chain is left to Inductor).
    """
    if not _is(s, aten.div.Tensor) or not isinstance(s.args[0], Node):
        return None
    s0, t = s.args
    if isinstance(t, (int, float)) and not isinstance(t, bool):
        if math.isnan(t):
            return "temperature is NaN (eager's softmax is NaN and multinomial raises)"
        return (s0, float(t)) if t == 0 or (t > 0 and math.isfinite(t)) else None
    return (s0, t) if _row_param(t, s0, b) else None


def _row_param(t: Any, s0: Node, b: Any) -> bool:
    """``t`` is a per-row float tensor for the (B, V) scores ``s0``: shape (B, 1), (1, 1), (1,) or ()."""
    tv = _val(t)
    if not isinstance(tv, torch.Tensor) or not tv.is_floating_point() or _ndim(s0) != 2:
        return False
    shape = tuple(tv.shape)
    return shape in ((), (1,), (1, 1)) or (len(shape) == 2 and _same(shape[1], 1) and _same(shape[0], b))


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:
        return False


def _ban(s: Node, b: Any, v: Any) -> tuple[Node, Node] | None:
    """``where(mask, -inf, s0)`` with a bool mask of shape (V,), (1, V) or (B, V)."""
    m = _masked(s)
    if m is None:
        return None
    mv = _val(m[0])
    if not isinstance(mv, torch.Tensor) or mv.dtype != torch.bool or mv.ndim > 2 or mv.ndim < 1:
        return None
    if not _same(mv.shape[-1], v) or (mv.ndim == 2 and not (_same(mv.shape[0], 1) or _same(mv.shape[0], b))):
        return None
    return m


def recognise(chain: Chain) -> Chain:
    """Walk up from ``chain.scores`` absorbing filters, temperature and a ban (module docstring grammar)."""
    if chain.is_probs:
        return chain
    sv = _val(chain.scores)
    b, v = sv.shape
    s = chain.scores
    pre = False  # after temperature/ban only temperature/ban may follow upstream
    t_seen = False
    while True:
        mp = _min_p(s, b)
        if not pre:
            if mp is not None and not isinstance(mp, str) and not {"min_p", "top_p"} & set(chain.order):
                # HF applies min-p last (after temperature, top-k, top-p); so does the op. Min-p and top-k
                # commute (both keep the tokens at or above a threshold on s; the max survives both), so
                # a min-p above a top-k is absorbed too; one above a top-p or below a temperature is not.
                s, chain.min_p = mp
                chain.order.append("min_p")
                continue
            tk = _top_k(s) if "top_k" not in chain.order else None
            if tk is not None:
                s, chain.top_k = tk
                chain.order.append("top_k")
                continue
            tp = _top_p(s, b) if "top_p" not in chain.order else None
            if isinstance(tp, str):
                chain.stopped_at = tp
                break
            if tp is not None:
                s, chain.top_p = tp
                chain.order.append("top_p")
                continue
        if not t_seen:
            tt = _temperature(s, b)
            if isinstance(tt, str):
                chain.refused = tt
                break
            if tt is not None:
                s, chain.temperature = tt
                t_seen, pre = True, True
                continue
        if chain.ban is None:
            bn = _ban(s, b, v)
            if bn is not None:
                if mp is not None:  # a min-p mask the op can't apply itself: exact as a ban, not fused
                    chain.notes.append(mp if isinstance(mp, str) else
                                       "min-p applied before top-p or temperature (the op applies it after "
                                       "both, like HF) is not fused")
                chain.ban, s = bn
                pre = True
                continue
        break
    chain.scores = s
    return chain


# -- the pass ------------------------------------------------------------------------------------------
def _cudagraphs() -> bool:
    try:
        return bool(torch._inductor.config.triton.cudagraphs)
    except AttributeError:
        return False


def _tensor_or_float(v: float | Node, neutral: float) -> tuple[Node | None, float]:
    """The op's (per-row tensor, float) argument pair for a chain parameter: a tensor node goes in the tensor
    slot with the float at its neutral value (unused by the op), a number in the float slot."""
    return (v, neutral) if isinstance(v, Node) else (None, float(v))


def _replace(graph: Graph, c: Chain, provider: str) -> Node:
    sv = _val(c.scores)
    t_node, t_val = _tensor_or_float(c.temperature, 1.0)
    p_node, p_val = _tensor_or_float(c.top_p, 1.0)
    seed = insert_call(graph, c.anchor, aten.randint.low, (0, 2**31 - 1, [1]),
                       {"dtype": torch.int64, "device": sv.device}, like=c.anchor)
    k_node = None
    if isinstance(c.top_k, Node):  # a SymInt (dynamic=True): the op takes per-row k as an int64 tensor
        k_node = insert_call(graph, c.anchor, aten.scalar_tensor.default, (c.top_k,),
                             {"dtype": torch.int64, "device": sv.device}, like=c.anchor)
    k_val = 0 if k_node is not None else int(c.top_k)
    mp_node, mp_val = _tensor_or_float(c.min_p, 0.0)
    args = (c.scores, seed, t_node, t_val, k_node, k_val, p_node, p_val, mp_node, mp_val, c.ban,
            c.is_probs, c.top_k_first, c.keepdim, provider)
    return insert_call(graph, c.anchor, torch.ops.rocm_fused.sample.default, args, like=c.anchor)


def _upstream_sort(start: Node) -> Node | None:
    """A live ``sort`` + ``cumsum`` (an unrecognised top-p) among the ancestors of ``start``."""
    seen, stack = set(), [start]
    while stack:
        n = stack.pop()
        if not isinstance(n, Node) or n in seen:
            continue
        seen.add(n)
        if _is(n, aten.cumsum.default):
            return n
        stack.extend(a for a in n.all_input_nodes)
    return None


_RANDOM = (prims.inductor_random.default, aten.rand.default, aten.rand_like.default, aten.exponential.default,
           aten.multinomial.default, aten.randn.default, aten.randn_like.default)


def _random_ancestor(n: Node, depth: int = 6) -> Node | None:
    """A random op among the ancestors of ``n`` within ``depth`` steps (a draw's noise), else None."""
    frontier, seen = [n], set()
    for _ in range(depth):
        nxt = []
        for m in frontier:
            for a in m.all_input_nodes:
                if a in seen:
                    continue
                seen.add(a)
                if _is(a, *_RANDOM):
                    return a
                nxt.append(a)
        frontier = nxt
    return None


def _unrecognised_draws(graph: Graph, ctx: PassContext) -> None:
    """Report random draws left in the graph (a multinomial, an argmax over noise): silence is a bug."""
    for n in graph.nodes:
        if _is(n, aten.multinomial.default):
            why = "multinomial with more than one sample, a generator, or probabilities that are not (B, V)"
        elif _is(n, aten.argmax.default) and _random_ancestor(n) is not None:
            why = "an argmax over random noise that is neither the exponential race nor Gumbel-max we know"
        else:
            continue
        ctx.near_miss(n.name, NearMiss("sampling", "sampling draw", f"not rewritten: {why}", location_of(n)),
                      overwrite=False)


def _draw_probs(n: Node) -> Node | None:
    """The probabilities node the draw at ``n`` reads (multinomial's input, the exponential race's numerator)."""
    if _is(n, aten.multinomial.default):
        return n.args[0]
    if _is(n, aten.argmax.default) and _is(n.args[0], aten.div.Tensor):
        return n.args[0].args[0]
    return None


def _verify_chain(n: Node, c: Chain) -> str | None:
    """Verify a recognised chain with filters and constant parameters: the region from the scores to the drawn
    probabilities, evaluated on random logits (passes/discover.py), must equal HF's filtered distribution with
    the parameters read off the graph (``exact_distribution``). Returns the failed check, None when it holds
    (or when there is nothing to verify: no filters, per-row tensors, a ban)."""
    from ..providers.reference_sampling import exact_distribution
    from . import discover

    probs = _draw_probs(n)
    params = (c.temperature, c.top_k, c.top_p, c.min_p)
    if c.is_probs or not c.order or c.ban is not None or probs is None or any(isinstance(v, Node) for v in params):
        return None
    region = discover.extract([c.scores], [probs])
    if isinstance(region, str):
        return None  # the structural recogniser matched a chain with shared intermediates: trust it
    t, k, p, mp = float(c.temperature), int(c.top_k), float(c.top_p), float(c.min_p)

    pdt = _val(probs).dtype

    def dist(scores: torch.Tensor) -> torch.Tensor:
        flat = scores.reshape(-1, scores.shape[-1])
        rows = [exact_distribution(r.double(), t, k, p, mp, c.top_k_first) for r in flat]
        return torch.stack(rows).reshape(scores.shape)

    v = discover.verify(region, "sampling", (t, k, p, mp, c.top_k_first, tuple(c.order)),
                        lambda s64: (dist(s64),), lambda s: (dist(s).to(pdt),))
    if not v.ok:
        return f"verification failed: {v.reason}"
    c.verified = "filtered distribution verified against HF's on random logits" + (" (cached)" if v.cached else "")
    return None


class SamplingPass:
    """The sampling pass (see module docstring)."""

    name = "sampling"
    ops = ops_of(name)

    def __call__(self, graph: Graph, ctx: PassContext) -> None:
        for n in list(graph.nodes):
            if n.op != "call_function" or n.graph is not graph:
                continue
            c = _draw(n) or _gumbel_draw(n)
            if c is None:
                continue
            where = location_of(n)
            escaped = _escaping_probs(n) if not c.is_probs else None
            if escaped is not None:  # the filtered distribution is needed anyway: draw on it, filters stay
                c = Chain(n, escaped, c.keepdim, is_probs=True)
            sv = _val(c.scores)
            if not isinstance(sv, torch.Tensor) or sv.ndim != 2 or not sv.is_floating_point():
                ctx.near_miss(n.name, NearMiss("sampling", "sampling draw", "scores are not a 2D float "
                                               "tensor (batch, vocab)", where))
                continue
            c = recognise(c)
            if c.refused:
                ctx.near_miss(n.name, NearMiss("sampling", "sampling chain", c.refused + "; it stays in "
                                               "Inductor", where))
                continue
            why = _verify_chain(n, c)
            if why is not None:
                ctx.near_miss(n.name, NearMiss("sampling", "sampling chain", why, where))
                continue
            rows = {name for name, val in (("temperature", c.temperature), ("top_k", c.top_k),
                                           ("top_p", c.top_p), ("min_p", c.min_p)) if isinstance(val, Node)}
            has_min_p = "min_p" in rows or c.min_p > 0.0
            spec = sample_spec(_val(c.scores), is_probs=c.is_probs, top_k_first=c.top_k_first,
                               per_row=rows, has_min_p=has_min_p, has_ban=c.ban is not None,
                               greedy=isinstance(c.temperature, float) and c.temperature <= 0.0,
                               cudagraphs=_cudagraphs(),
                               has_top_k="top_k" in rows or c.top_k > 0,
                               has_top_p="top_p" in rows or c.top_p < 1.0)
            choice = ctx.choose("sample", spec)
            if choice.provider is None:
                ctx.near_miss(n.name, NearMiss("sampling", "sampling chain", choice.why_not, where))
                continue
            new = _replace(graph, c, choice.provider)
            n.replace_all_uses_with(new)
            graph.erase_node(n)
            shape, dtype = describe(_val(c.scores))
            filters = "+".join(reversed(c.order)) or ("probs" if c.is_probs else "plain")
            note = ("the filtered distribution escapes (also used or returned): the draw is rewritten on the "
                    "probabilities (is_probs), the filters stay in Inductor") if escaped is not None else c.verified
            ctx.matched(n.name, MatchRecord("sampling", "sample", choice.provider, shape, dtype, where, note))
            graph.eliminate_dead_code()
            left = _upstream_sort(c.scores) if c.stopped_at or not c.order else None
            reasons = ([c.stopped_at] if c.stopped_at else []) + c.notes
            if left is not None and not c.stopped_at:
                reasons.append("a cumsum (top-p-like filter) above the draw was not recognised")
            if reasons:
                ctx.near_miss(f"{n.name}:filters", NearMiss(
                    "sampling", f"filters above the rewritten draw ({filters})",
                    "; ".join(reasons) + "; it stays in Inductor", location_of(left) or where))
        _unrecognised_draws(graph, ctx)
