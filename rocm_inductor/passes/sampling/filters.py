"""The filter stages of a sampling chain, each read as a whole from its last node (``where(mask, -inf, s0)``
or ``s0 / T``): HF / gpt-fast top-k, HF ``TopPLogitsWarper`` (min_tokens_to_keep = 1), temperature, and a ban
(any bool mask broadcastable per row). Each returns ``(s0, parameter)`` with ``s0`` the scores above it, a
reason string for a near variant the walk must stop at, or None when the node is not that stage. Min-p is in
``min_p.py``; the spellings each stage takes and leaves alone are listed in the package docstring.
"""

from __future__ import annotations

import math
import operator
from typing import Any

import torch
from torch.fx import Node

from ..fx import is_call, known_equal, same, val
from .reads import last_dim, masked, number, row_param, topk_args
from .softmax import softmax_input

aten = torch.ops.aten

#: ``slice_scatter``'s ``end`` when it runs to the end of the dim (``sys.maxsize`` as the graph spells it).
INT_MAX = 2**63 - 1


def read_top_k(s: Node) -> tuple[Node, int | Node] | None:
    """HF / gpt-fast top-k: ``where(s0 < topk(s0, k)[0].select(-1, -1).unsqueeze(-1), -inf, s0)``."""
    m = masked(s)
    if m is None or not is_call(m[0], aten.lt.Tensor):
        return None
    s0 = m[1]
    a, piv = m[0].args
    if a is not s0 or not is_call(piv, aten.unsqueeze.default) or not last_dim(piv, piv.args[1]):
        return None
    sel = piv.args[0]
    if not (is_call(sel, aten.select.int) and last_dim(sel.args[0], sel.args[1])):
        return None
    gi = sel.args[0]
    if not (is_call(gi, operator.getitem) and gi.args[1] == 0 and is_call(gi.args[0], aten.topk.default)):
        return None
    tk = gi.args[0]
    if tk.args[0] is not s0:
        return None
    k, dim, largest = topk_args(tk)
    k = _static_k(k, s0)
    if not (last_dim(s0, dim) and largest):
        return None
    if isinstance(k, int) and not isinstance(k, bool) and sel.args[2] in (-1, k - 1):
        return s0, k
    if isinstance(k, Node) and isinstance(val(k), torch.SymInt) and sel.args[2] == -1:
        return s0, k  # dynamic=True lifts top_k into a SymInt input: passed to the op as a tensor
    return None



def _static_k(k: Any, s0: Node) -> Any:
    """``k`` as an int: HF's ``min(top_k, scores.size(-1))`` is a ``sym_min(k0, V)`` node under a dynamic
    vocabulary; ``k0`` then means the same to the op (``k >= V`` keeps every token, as ``topk(V)`` does)."""
    if isinstance(k, int) or not (isinstance(k, Node) and k.target in (torch.sym_min, min) and len(k.args) == 2):
        return k
    v = getattr(val(s0), "shape", (None,))[-1]
    for k0, n in (k.args, k.args[::-1]):
        if isinstance(k0, int) and not isinstance(k0, bool) and isinstance(n, Node):
            try:
                if known_equal(val(n), v):
                    return k0
            except Exception:  # an unrelated symbol: not HF's clamp
                return k
    return k


def _false_fill(x: Any) -> bool:
    """``x`` is the constant False: ``full([], False)`` or ``copy(slice, full([], False))``."""
    if is_call(x, aten.copy.default):
        x = x.args[1]
    return is_call(x, aten.full.default) and x.args[1] is False or (is_call(x, aten.full.default) and x.args[1] == 0)



def _one_minus(thr: Any) -> Node | None:
    """``p`` when ``thr`` is ``1 - p``, else None. Graph forms of HF's ``1 - top_p``: ``sub.Tensor(1, p)``
    (a tensor top_p) and ``add.Tensor(1, mul.Tensor(p, -1))`` (``dynamic=True``: Dynamo lifts the float top_p
    into a 0-d float64 input and decomposes the subtraction; ``1 + (-p)`` is the same float64 operation)."""
    if is_call(thr, aten.sub.Tensor) and thr.kwargs.get("alpha", 1) == 1 and len(thr.args) == 2:
        one, p = thr.args
        return p if number(one) == 1.0 and isinstance(p, Node) else None
    if is_call(thr, aten.add.Tensor) and thr.kwargs.get("alpha", 1) == 1 and len(thr.args) == 2:
        for one, neg in (thr.args, thr.args[::-1]):
            if number(one) == 1.0 and is_call(neg, aten.mul.Tensor) and len(neg.args) == 2:
                for p, m1 in (neg.args, neg.args[::-1]):
                    if isinstance(p, Node) and number(m1) == -1.0:
                        return p
    return None


def read_top_p(s: Node, b: Any = None) -> tuple[Node, float | Node] | str | None:
    """HF ``TopPLogitsWarper`` (min_tokens_to_keep=1) -> (s0, p); a reason string for a near variant.

    ``p`` is a float (threshold a Python scalar) or, for HF's spelling with a per-row tensor
    (``cumsum <= 1 - top_p``, ``top_p`` float32 of shape (B, 1), (1, 1), (1,) or (), float32 cumulative
    probabilities), the ``top_p`` node itself.
    """
    m = masked(s)
    if m is None or not is_call(m[0], aten.scatter.src):
        return None
    s0 = m[1]
    sc = m[0]
    ms, dim, idx, src = sc.args[:4]
    if src is not ms or not last_dim(ms, dim) or not is_call(idx, operator.getitem) or idx.args[1] != 1:
        return None
    srt = idx.args[0]
    if not is_call(srt, aten.sort.default) or srt.args[0] is not s0:
        return None
    sdim = srt.args[1] if len(srt.args) > 1 else srt.kwargs.get("dim", -1)
    desc = srt.args[2] if len(srt.args) > 2 else srt.kwargs.get("descending", False)
    if not last_dim(s0, sdim) or desc:
        return "top-p with a descending sort (another spelling) is not recognised"
    if not is_call(ms, aten.slice_scatter.default):
        return "top-p without HF's 'keep the last min_tokens_to_keep' step is not recognised"
    le = ms.args[0]
    if not _false_fill(ms.args[1]):
        return "top-p whose kept tail is not filled with False is not recognised"
    start = ms.args[3] if len(ms.args) > 3 else ms.kwargs.get("start")
    end = ms.args[4] if len(ms.args) > 4 else ms.kwargs.get("end")
    if start != -1 or (end is not None and end < INT_MAX) or not last_dim(le, ms.args[2]):
        n_keep = -start if isinstance(start, int) else start
        return f"top-p with min_tokens_to_keep = {n_keep} (only 1 is rewritten)"
    if is_call(le, aten.le.Scalar) and isinstance(le.args[1], (int, float)) and not isinstance(le.args[1], bool):
        p: float | Node = 1.0 - float(le.args[1])
    elif is_call(le, aten.le.Tensor):
        p_node = _one_minus(le.args[1])
        if p_node is None:
            return "top-p whose tensor threshold is not spelled `1 - top_p` is not recognised"
        if not row_param(p_node, s0, b):
            return ("top-p whose per-row top_p is not a float tensor of shape (B, 1), (1, 1), (1,) or () "
                    "is not recognised")
        dts = (val(p_node).dtype, getattr(val(le.args[0]), "dtype", None))
        # A 0-d float64 top_p (dynamic=True's lifted float) does not promote the float32 comparison:
        # HF compares against float32(1 - p computed in float64), which the kernels compute the same way.
        zero_d64 = dts == (torch.float64, torch.float32) and val(p_node).ndim == 0
        if dts != (torch.float32, torch.float32) and not zero_d64:
            # HF rounds 1 - top_p (and compares) in the promoted dtype; the kernels do both in float32.
            return (f"top-p with a {dts[0]} per-row top_p against {dts[1]} cumulative probabilities (only "
                    "float32 rounds 1 - top_p like the kernels) is not recognised")
        p = p_node
    else:
        return None
    cs = le.args[0]
    if not (is_call(cs, aten.cumsum.default) and last_dim(cs.args[0], cs.args[1])):
        return None
    vals = softmax_input(cs.args[0])
    if not (is_call(vals, operator.getitem) and vals.args[0] is srt and vals.args[1] == 0):
        return None
    return s0, p



def read_temperature(s: Node, b: Any) -> tuple[Node, float | Node] | str | None:
    """``s0 / T`` with T a float > 0 or == 0, or a tensor of shape (B, 1), (1, 1), (1,) or () (per row); or
    ``s0 * c`` with a number c > 0 (T = 1 / c: the op's ``s / T`` differs from eager's product by at most one
    rounding, which moves no probability by more than an ulp).

    ``T == 0`` (``s / 0.0``: eager's softmax is NaN and ``multinomial`` raises) is folded as the op's greedy
    temperature (``T <= 0`` -> argmax, ``rocm_fused::sample``'s contract): the scores must never reach the op
    as +-inf / NaN, which it would read as an arbitrary token. A per-row tensor is folded whatever it holds
    (its rows with ``T <= 0`` are greedy, by the same contract). A negative float T stays in the graph (``s /
    T`` is then just other scores, sampled exactly); a NaN T returns a reason string (eager raises there: the
    chain is left to Inductor).
    """
    if is_call(s, aten.mul.Tensor) and len(s.args) == 2:  # s * (1 / T) (gpt-oss, MLX ports): T = 1 / c
        for s0, c in (s.args, s.args[::-1]):
            c = number(c)
            if isinstance(s0, Node) and c is not None and c > 0 and math.isfinite(1.0 / c):
                return s0, 1.0 / c
        return None
    if not is_call(s, aten.div.Tensor) or not isinstance(s.args[0], Node):
        return None
    s0, t = s.args
    if isinstance(t, (int, float)) and not isinstance(t, bool):
        if math.isnan(t):
            return "temperature is NaN (eager's softmax is NaN and multinomial raises)"
        return (s0, float(t)) if t == 0 or (t > 0 and math.isfinite(t)) else None
    return (s0, t) if row_param(t, s0, b) else None



def read_ban(s: Node, b: Any, v: Any) -> tuple[Node, Node] | None:
    """``where(mask, -inf, s0)`` with a bool mask of shape (V,), (1, V) or (B, V)."""
    m = masked(s)
    if m is None:
        return None
    mv = val(m[0])
    if not isinstance(mv, torch.Tensor) or mv.dtype != torch.bool or mv.ndim > 2 or mv.ndim < 1:
        return None
    if not same(mv.shape[-1], v) or (mv.ndim == 2 and not (same(mv.shape[0], 1) or same(mv.shape[0], b))):
        return None
    return m

