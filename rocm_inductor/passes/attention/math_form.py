"""The math-form candidate: ``reshape(bmm(softmax(s), v))`` with ``s = c * reshape(bmm(a * q, b * k^T)) (+ mask |
masked_fill(~m, -inf | v) | where(m, s, -inf | v))``; scale = a * b * c (softmax spellings: ``softmax.py``).

Covers HF's eager attention, K/V of 1 head broadcast over q's heads by ``matmul`` (MQA, the op reads the one kv
head), scores by ``baddbmm(input, q, k^T, beta=0, alpha=c)`` with k transposed after its (B*H) flattening
(GPT-BigCode / CodeGen ``_attn``), k permuted straight from a (B, L, H, D) cache to (B, H, D, L) (MPT),
CPU SDPA's own decomposition (Dv != D, a 3D mask), SDPA's math fallback (half q/k/v up-cast to float32
and the result cast back), GPT-OSS's attention with sinks (``softmax(cat([s, sinks], -1))[..., :-1]``,
``softmax.sink_softmax``: the op's ``sinks``), Gemma2's soft-capped scores ``c * tanh(s / c)`` (the op's
``softcap``), (B*H)-flattened 3D attention (whisper / fairseq: B*H rows of one head) and 4D attention whose
``P @ V`` is used (B*H, Lq, Dv) without its (B, H, Lq, Dv) view (batch 1: ``views.py`` folds the head merge's
view / transpose / reshape into one reshape of the bmm), all three in ``score_forms.py``. Every node from the
scores on must feed only this attention (the q/k/v/mask/sink preparation may be shared, e.g. two attentions
over one cache).
Near-misses, each with its reason (a softmax over bmm scores feeding a bmm is never skipped silently): MLA's
two products summed, baddbmm with a bias (beta != 0: ALiBi), a tensor scale or soft cap, an unrecognised mask
or softmax spelling, dropout on the probabilities, a sink form the op cannot take (or sinks on 3D tensors), a
fill the op cannot mean exactly, scores or probabilities used elsewhere (``output_attentions``), a 3D ``P @ V``
after 4D scores whose operands are no (B*H) flattenings of (B, H, L, D) tensors.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch.fx import Node

from ..contract import Miss
from ..fx import RESHAPES, insert_call, is_call, known_equal, shape
from .emit import Attention
from .heads import strip_clones
from .masks import WHERES, MaskSource, fill_mask, mask_source
from .score_forms import NOT_4D, QK, check_merged, flat_views, softcap_of
from .softmax import normalised_exp, reaches, sink_softmax, softmax_input, strip_scale, under_dropout

aten = torch.ops.aten
_BMM = (aten.bmm.default,)
#: The scores' product: ``bmm``, or ``baddbmm(input, a, b, beta=0, alpha=c)`` (= c * a @ b: with beta 0 torch
#: ignores ``input``, its NaN/inf included; GPT-BigCode / CodeGen / GPT-NeoX's ``_attn``).
_SCORE_BMM = (aten.bmm.default, aten.baddbmm.default)


def _unflatten(n: Any) -> Any:
    """The 4D tensor behind a bmm operand ``reshape(clone(expand(x4)), [B*H, X, Y])`` (expand, clone optional; the
    expand may broadcast x4's size-1 batch / head dims, as ``matmul`` does for MQA's 1-head K/V), or None."""
    if not is_call(n, *RESHAPES):
        return None
    x = strip_clones(n.args[0])  # matmul's broadcast of a 1-head K/V: reshape(clone(expand(k^T)))
    if is_call(x, aten.expand.default) and len(shape(x.args[0])) == len(shape(x)):
        x = x.args[0]
    return x if len(shape(x)) == 4 else None


def _view(src: Node, perm: list[int], at: Node) -> Node:
    """``permute(src, perm)``: an existing such node, else one inserted before ``at`` (a view; dead code when the
    candidate is not taken, which the manager removes)."""
    for u in src.users:
        if is_call(u, aten.permute.default) and list(u.args[1]) == perm:
            return u
    return insert_call(at.graph, at, aten.permute.default, (src, perm), like=src)


def _k_of(kt: Any, at: Node) -> Any:
    """``k`` (B, H, L, D) of the scores' 4D ``k^T``: ``kt = k.transpose(-1, -2)``, or a permute of a (B, L, H, D)
    cache straight to (B, H, D, L) (MPT's ``rearrange('b s (h d) -> b h d s')``: permute (0, 2, 3, 1)), whose
    (B, H, L, D) permute becomes ``k`` (:func:`_view`). None when neither."""
    if is_call(kt, aten.permute.default) and list(kt.args[1]) == [0, 1, 3, 2]:
        return kt.args[0]
    if is_call(kt, aten.transpose.int) and sorted(d % 4 for d in kt.args[1:3]) == [2, 3]:
        return kt.args[0]
    if is_call(kt, aten.permute.default) and len(kt.args[1]) == 4 and kt.args[1][0] == 0 and \
            sorted(kt.args[1]) == [0, 1, 2, 3]:
        perm = list(kt.args[1])
        perm[2], perm[3] = perm[3], perm[2]
        return _view(kt.args[0], perm, at)
    return None


def _k_operand(n: Any, at: Node) -> tuple[Any, float] | str:
    """``(k, b)`` of the scores' second bmm operand ``n``: ``reshape(b * k^T)`` of a 4D ``k^T`` (:func:`_k_of`),
    or ``(b * reshape(k, [B*H, L, D])).transpose(1, 2)`` (the transpose after the flattening: GPT-BigCode,
    fairseq); else why not."""
    k4 = _unflatten(n)
    if k4 is not None:
        kt, b = strip_scale(k4)
        k = _k_of(kt, at)
        if k is None:
            return (f"the scores' second bmm operand is {getattr(kt, 'target', kt)} {getattr(kt, 'args', ())[1:]}, "
                    "not k.transpose(-1, -2) of a 4D K")
        return k, b
    if (is_call(n, aten.permute.default) and list(n.args[1]) == [0, 2, 1]) or \
            (is_call(n, aten.transpose.int) and sorted(d % 3 for d in n.args[1:3]) == [1, 2]):
        k3, b = strip_scale(n.args[0])
        if is_call(k3, *RESHAPES):
            k = strip_clones(k3.args[0])
            s4, s3 = shape(k), shape(k3)
            if len(s4) == 4 and len(s3) == 3 and known_equal(s3[0], s4[0] * s4[1]) and \
                    known_equal(s3[1], s4[2]) and known_equal(s3[2], s4[3]):
                return k, b
    return "the operands of the scores' bmm are not (B*H)-flattened 4D q and k^T"


def _qk_or_why(n: Any, outer: float = 1.0) -> QK | str:
    """The :class:`~.score_forms.QK` of scores ``n = c * reshape(bmm(reshape(a * q), reshape(b * k^T)))``
    (times ``outer``, a softmax's folded scale), soft-capped or not, or of 3D scores ``c * bmm(a * q3, b *
    k3^T)`` (``score_forms``); else why not."""
    n, c = strip_scale(n)
    c *= outer
    capped = softcap_of(n, c)
    if isinstance(capped, str):
        return capped
    if capped is not None:
        x, cap, f = capped
        qk = _qk_or_why(x)
        if isinstance(qk, str) or qk.cap:
            return qk if isinstance(qk, str) else "the scores are soft-capped twice: the op takes one softcap"
        return dataclasses.replace(qk, scale=qk.scale * f, cap=cap)
    if is_call(n, aten.mul.Tensor, aten.div.Tensor) and len(n.args) == 2 and not isinstance(n.args[1], (int, float)):
        return (f"the scores are scaled by {getattr(n.args[1], 'name', n.args[1])}, not a compile-time number "
                "(the op's scale is a float)")
    if is_call(n, aten.add.Tensor) and all(is_call(a, *RESHAPES, *_SCORE_BMM) and reaches(a, _SCORE_BMM, 2)
                                           for a in n.args):
        return ("the scores are a sum of two products (MLA's q_nope @ k_nope^T + q_pe @ k_pe^T, decoupled RoPE): "
                "the op takes one q @ k^T")
    flat = is_call(n, *_SCORE_BMM) and len(shape(n)) == 3
    if not flat and not (is_call(n, *RESHAPES) and len(shape(n)) == 4 and is_call(n.args[0], *_SCORE_BMM)):
        what = n.target if isinstance(n, Node) else n
        return (f"the softmax input is {what}, not c * (q @ k^T) viewed (B, H, Lq, Lkv), with a mask (if any) "
                "added or masked_fill(~m, -inf | finfo.min) after the scaling")
    bm, alpha = (n if flat else n.args[0]), 1.0
    operands = bm.args
    if bm.target is aten.baddbmm.default:
        beta, alpha = bm.kwargs.get("beta", 1), bm.kwargs.get("alpha", 1)
        if len(bm.args) > 3 or not isinstance(alpha, (int, float)) or beta != 0:
            return (f"the scores are baddbmm(input, q, k^T, beta={bm.kwargs.get('beta', 1)}): a bias added to the "
                    "scores through baddbmm's input (ALiBi?) besides the mask; the op takes beta=0 only")
        operands = bm.args[1:3]
    if flat:  # (B*H, Lq, Lkv) scores never viewed 4D (whisper / fairseq): B*H rows of one head
        kt = operands[1]
        if not ((is_call(kt, aten.permute.default) and list(kt.args[1]) == [0, 2, 1]) or
                (is_call(kt, aten.transpose.int) and sorted(d % 3 for d in kt.args[1:3]) == [1, 2])):
            return "the scores are a 3D bmm whose second operand is not k.transpose(1, 2) of a (B*H, Lkv, D) K"
        (q, a), (k, b) = strip_scale(operands[0]), strip_scale(kt.args[0])
        return QK(q, k, a * b * c * alpha, bm, flat=True)
    q4, kb = _unflatten(operands[0]), _k_operand(operands[1], bm)
    if q4 is None:
        return "the operands of the scores' bmm are not (B*H)-flattened 4D q and k^T"
    if isinstance(kb, str):
        return kb
    q, a = strip_scale(q4)
    k, b = kb
    return QK(q, k, a * b * c * alpha, bm)


def _is_qk(n: Any) -> bool:
    """``n`` is scores ``c * (q @ k^T)`` (see :func:`_qk_or_why`)."""
    return not isinstance(_qk_or_why(n), str)


def _not_softmax(p_raw: Any, p: Any) -> None:
    """``P @ V``'s left operand is no softmax we take: :class:`Miss` when it still is attention-like (dropout,
    another softmax spelling over bmm scores), else None (not attention)."""
    inner = under_dropout(p)
    if inner is not None and softmax_input(inner) is not None:
        raise Miss("dropout on the attention probabilities (a random keep-mask in the graph, SDPA's math "
                   "form with dropout_p > 0): the op has no dropout")
    if reaches(p_raw, normalised_exp, 6, stop=_BMM) and reaches(p_raw, _SCORE_BMM, 12):
        raise Miss("the bmm's left operand is an exp / softmax of bmm scores in a spelling the pass does not "
                   "recognise as softmax(s, -1) (exp(s - amax(s)) / sum, its scale-folded or safe forms)")


def _scores_and_mask(s: Node, factor: float) -> tuple[MaskSource, QK]:
    """The mask and :class:`~.score_forms.QK` (its scale times ``factor``) behind the softmax input ``s``
    (softmax(factor * s)).

    Raises:
        Miss: the scores are not ``c * q @ k^T`` or the mask spelling is not taken.
    """
    mask = MaskSource(None, "none")
    scores = s
    # softmax(factor * s) with factor != 1 (Inductor's scale-folded softmax): a mask inside s would be scaled
    # too, so only s = c * q @ k^T is taken there
    if factor != 1.0:
        filled = None
    elif is_call(s, aten.add.Tensor) and len(s.args) == 2 and all(isinstance(x, Node) for x in s.args):
        filled = None
        for i in (0, 1):
            if _is_qk(s.args[i]):
                scores, mask = s.args[i], mask_source(s.args[1 - i])
                break
    else:
        filled = fill_mask(s, _is_qk)
    if filled is not None:
        scores, mask = filled
    qk = _qk_or_why(scores, factor)
    if isinstance(qk, str):
        if scores is s and is_call(s, aten.add.Tensor, *WHERES):  # report the operand that holds the bmm
            sides = [x for x in s.args if isinstance(x, Node) and reaches(x, _SCORE_BMM, 8)]
            if len(sides) == 1:
                qk = _qk_or_why(sides[0])
        raise Miss(qk if isinstance(qk, str) else "the scores' mask spelling is not an additive / bool mask or "
                   "masked_fill(~m, -inf | finfo.min)")
    return mask, qk


def _check_private(bmm2: Node, out: Node, stop: set, bmm1: Node) -> None:
    """Every node computed from the scores (``bmm(q, k^T)`` onwards) up to ``bmm2`` feeds only this attention
    (else probabilities or scores are returned, e.g. ``output_attentions``, and the rewrite would compute them
    twice); the operand preparation (q/k/v flattening views, mask conversions) may also feed another attention
    over the same K/V.

    Raises:
        Miss: a score / probability node has a user outside the attention.
    """
    inside, todo = set(), [bmm2]
    while todo:
        n = todo.pop()
        if n in inside or n in stop or not isinstance(n, Node) or n.op != "call_function":
            continue
        inside.add(n)
        todo.extend(a for a in n.all_input_nodes)
    on_scores: set[Node] = set()
    for n in bmm2.graph.nodes:  # topological order
        if n in inside and (n is bmm1 or any(a in on_scores for a in n.all_input_nodes)):
            on_scores.add(n)
    for n in inside:
        if not n.all_input_nodes or n not in on_scores or n is out:
            continue  # constants (full / scalar_tensor) and operand preparation may be shared; out: 3D P @ V
        extra = [u for u in n.users if u not in inside and u is not out]
        if extra:
            raise Miss(f"{n.name} (attention scores / probabilities) is also used by {extra[0].name} "
                       "(output_attentions?): rewriting would compute the attention twice")


def math_candidate(bmm2: Node) -> Attention | None:
    """The :class:`~.emit.Attention` of a decomposed attention ending in ``bmm2`` (``softmax(q k^T * s + m) @ v``),
    None when ``bmm2`` is not one.

    Raises:
        Miss: it is one that cannot be rewritten (any softmax over the output of a bmm feeding ``bmm2``: none of
            them is skipped silently).
    """
    p_raw = bmm2.args[0]
    p4, v4 = (_unflatten(x) for x in bmm2.args)
    p = p4 if p4 is not None else p_raw
    sf, sink = softmax_input(p), None
    if sf is None:
        sink = sink_softmax(p)
        if isinstance(sink, str):
            raise Miss(sink)
        if sink is None:
            _not_softmax(p_raw, p)
            return None
        sf = (sink.scores, 1.0)
    s, factor = sf
    if not reaches(s, _SCORE_BMM, 8):
        return None  # a softmax over something other than q @ k^T (e.g. routing weights): not attention
    # from here on the graph holds softmax(bmm(...)) @ v: every refusal is a near-miss with its reason
    mask, qk = _scores_and_mask(s, factor)  # the scores' reasons first (MLA's two products)
    q, k, scale = qk.q, qk.k, qk.scale
    users = list(bmm2.users)
    merged = False  # P @ V's 4D view folded away: the op's output is flattened back to the bmm's (B*H, Lq, Dv)
    if qk.flat:
        out = bmm2
        q, k, v4, mask = flat_views(bmm2, qk, mask, sink)
    elif p4 is None or v4 is None:
        raise Miss(NOT_4D)
    else:
        merged = not (len(users) == 1 and is_call(users[0], *RESHAPES) and len(shape(users[0])) == 4)
        out = bmm2 if merged else users[0]
        qs, ks_, vs_, ss, os_ = (shape(x) for x in (q, k, v4, s, out))
        if not (len(qs) == len(ks_) == len(vs_) == 4 and len(ss) == 4 and (merged or len(os_) == 4)):
            raise Miss(f"q/k/v/scores/output ranks {len(qs)}/{len(ks_)}/{len(vs_)}/{len(ss)}/{len(os_)}, not 4D")
        if merged:
            check_merged(bmm2, qs, ks_[2], vs_[3])
        want_s, want_o = (qs[0], qs[1], qs[2], ks_[2]), (qs[0], qs[1], qs[2], vs_[3])
        if not (all(known_equal(a, b) for a, b in zip(ss, want_s, strict=True))
                and (merged or all(known_equal(a, b) for a, b in zip(os_, want_o, strict=True)))
                and known_equal(vs_[2], ks_[2])):
            raise Miss(f"scores {ss} / output {os_} are not (B, H, Lq, Lkv) / (B, H, Lq, Dv) of q {qs}, k {ks_}, "
                       f"v {vs_}: the (B*H) flattening is not undone in (B, H, L, D) order (q broadcast over K/V's "
                       "heads?)")
    stop = {qk.q, qk.k, bmm2.args[1] if qk.flat else v4} | ({mask.node} if mask.node is not None else set()) | \
        ({sink.sinks} if sink else set())
    _check_private(bmm2, out, stop, qk.bmm)
    source = "the math form (bmm, softmax, bmm)" + (" with sinks" if sink else "") + \
        (", (B*H)-flattened 3D" if qk.flat else "") + (", P @ V used (B*H, Lq, Dv)" if merged else "") + \
        (f", soft-capped {qk.cap:g}" if qk.cap else "")
    return Attention(out, False, q, k, v4, mask, scale, source, sinks=sink, softcap=qk.cap, flat=qk.flat,
                     merged=merged)
