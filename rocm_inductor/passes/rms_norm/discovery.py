"""Discovery of the RMSNorms the pattern family missed: every ``rsqrt(mean(x^2, -1, keepdim) + eps)`` left is a
candidate (the division, ``1 / sqrt`` and ``pow(-0.5)`` spellings reach this form through ``canonicalize``).

The single-user elementwise chain below the rsqrt gives the output (the longest one of x's shape and dtype
first), its multiplied (H,) operand the weight (``w``, ``w.float()``, ``1 + w.float()`` -> offset), the add the
eps (:func:`read`). The region is extracted and verified against ``rms_norm_ref`` on random inputs
(``passes/discover.py``) before the policy and the provider choice (:func:`gate`), then rewritten
(:func:`emit`), to ``fused_add_rms_norm`` when the input is a residual add whose sum is also used.
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Any

import torch
from torch.fx import Graph, Node

from ...ops.rms_norm import norm_spec
from ...platform import Choice, PlatformDispatch
from ...policy import NORM_MIN_HIDDEN
from ...report import Match as MatchRecord
from ...report import describe, location_of
from .. import discover, joint
from ..context import PassContext
from ..contract import Miss
from ..fx import CONVERT, insert_call, same, strip_casts, val
from .reasons import LAYERNORM, input_miss, no_chain_reason

aten = torch.ops.aten

#: Ops a norm's output chain may pass through after the rsqrt (elementwise, same values up to rounding).
_CHAIN_OPS = (aten.mul.Tensor, CONVERT, aten.div.Tensor)


@dataclasses.dataclass
class Norm:
    """What :func:`read` found below one rsqrt, and the region :func:`gate` verified.

    Attributes:
        x: the normalised tensor; eps: the added eps; chain: (node, weight or None, offset) per node of the
            elementwise chain below the rsqrt with x's shape and dtype (region outputs to try, shortest first);
        out, w, offset, verdict: the verified region's output, weight, weight offset and verdict (set by gate);
        residual: the residual add's operands ``(a, b)`` when ``x`` is one the fused form absorbs (set by gate).
    """

    x: Node
    eps: float
    chain: list[tuple[Node, Node | None, float]]
    out: Node | None = None
    w: Node | None = None
    offset: float = 0.0
    verdict: discover.Verdict | None = None
    residual: tuple[Node, Node] | None = None


def _anchor_parts(rs: Node) -> tuple[Node, Any] | None:
    """(the squared tensor's source x, eps) when ``rs`` is rsqrt(mean(x^2, -1, keepdim) [+ eps])."""
    a = rs.args[0]
    eps: Any = 0.0
    if isinstance(a, Node) and a.target is aten.add.Tensor and len(a.args) == 2:
        a, eps = a.args
    if not (isinstance(a, Node) and a.target is aten.mean.dim and list(a.args[1]) == [-1]
            and len(a.args) > 2 and a.args[2]):
        return None
    p = a.args[0]
    if not (isinstance(p, Node) and p.target is aten.pow.Tensor_Scalar and p.args[1] == 2):
        return None
    return strip_casts(p.args[0]), eps


def _private_square(rs: Node) -> None:
    """Give the norm its own ``x^2`` when the square also feeds something else (PolyNorm's ``norm(x)`` and
    ``norm(x ** 2)``: CSE merged the one square with the other norm's input), so the region extracts: the copy
    is the same value; the shared square stays for its other consumer."""
    a = rs.args[0]
    mean = a.args[0] if a.target is aten.add.Tensor else a
    sq = mean.args[0]
    if len(sq.users) > 1:
        mean.replace_input_with(sq, insert_call(rs.graph, mean, sq.target, sq.args, like=sq))


def normalize_miss(c: Node) -> str | None:
    """The near-miss of an L2 normalisation ``x / clamp_min(||x||_2, eps)`` (``F.normalize(x, dim=-1)``; with
    ``* sqrt(H) * g`` x-transformers' RMSNorm) at its ``clamp_min`` ``c``, None when ``c`` is no such clamp."""
    n = strip_casts(c.args[0])  # half inputs: the norm computed in float32 and cast back before the clamp
    if not isinstance(n, Node) or n.op != "call_function":
        return None
    sq = n.args[0] if (n.target is aten.pow.Tensor_Scalar and n.args[1] == 0.5) or n.target is aten.sqrt.default \
        else None
    if not (isinstance(sq, Node) and sq.target is aten.sum.dim_IntList and list(sq.args[1]) == [-1]
            and isinstance(sq.args[0], Node) and sq.args[0].target is aten.pow.Tensor_Scalar
            and sq.args[0].args[1] == 2):
        return None
    return (f"F.normalize-style x / max(||x||_2, {c.args[1]:g}) (x-transformers' RMSNorm is it * sqrt(H) * g): "
            "the norm is clamped at eps, not eps added under the root as in rms_norm, so no rms_norm eps gives "
            "the same value on rows with ||x||_2 near the clamp (up to sqrt(2) apart there, and a zero row is 0 "
            "here but NaN for rms_norm with eps 0); left to Inductor")


def _weight_root(e: Node, x: Node) -> tuple[Node, float] | None:
    """(weight, offset) for a multiplied operand spelled ``w``, ``w.float()`` or ``1 + w.float()``."""
    n, offset = strip_casts(e), 0.0
    if n.target is aten.add.Tensor and len(n.args) == 2 and isinstance(n.args[1], (int, float)) \
            and isinstance(n.args[0], Node):
        n, offset = strip_casts(n.args[0]), float(n.args[1])
    v = val(n)
    if v is None or n is x or v.ndim != 1:
        return None
    return n, offset


def _chain(rs: Node, x: Node) -> list[tuple[Node, Node | None, float]]:
    """The single-user elementwise chain below ``rs``: (node, weight or None, offset) per node."""
    out, cur, w, off = [], rs, None, 0.0
    while len(cur.users) == 1:
        u = next(iter(cur.users))
        if u.target not in _CHAIN_OPS or u.op != "call_function":
            break
        if u.target is aten.mul.Tensor:
            other = u.args[1] if u.args[0] is cur else u.args[0]
            if not isinstance(other, Node):
                if other != 1:  # ``1 / sqrt`` leaves ``rsqrt * 1``; another scale is not the op's
                    break
            elif strip_casts(other) is not x:
                wr = _weight_root(other, x)
                if wr is None or w is not None:
                    break
                w, off = wr
        elif u.target is aten.div.Tensor:
            break
        out.append((u, w, off))
        cur = u
    return out


def _rms64(x, w, eps, offset):
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return (y if w is None else y * (w + offset),)


def read(rs: Node) -> Norm:
    """x, eps and the output chain of the norm whose rsqrt is ``rs``.

    Raises:
        Miss: not a norm's rsqrt (silent), a LayerNorm, eps no constant, x no float, no output of x's shape.
    """
    parts = _anchor_parts(rs) if rs.users else None
    if parts is None:  # dead (consumed by an earlier rewrite) or no rsqrt of a mean of squares
        raise Miss("", silent=True)
    x, eps = parts
    _private_square(rs)
    why = input_miss(x, eps)
    if why is not None:
        raise Miss(why, what="LayerNorm" if why == LAYERNORM else None, overwrite=False)
    xv = val(x)
    chain = [(n, w, off) for n, w, off in _chain(rs, x)
             if tuple(n.meta["val"].shape) == tuple(xv.shape) and n.meta["val"].dtype == xv.dtype]
    if not chain:
        raise Miss("not rewritten: " + no_chain_reason(rs), overwrite=False)
    return Norm(x, float(eps), chain)


def gate(ctx: PassContext, norm: Norm, graph: Graph) -> Choice:
    """Verify the longest region that checks out, apply the size policy and choose the provider (for the op
    :func:`emit` will write: ``fused_add_rms_norm`` for a residual add in ``graph``, see :func:`_choose`).

    Raises:
        Miss: every region failed (the last failure named), the policy leaves it to Inductor, or no provider.
    """
    from ...providers.reference import rms_norm_ref

    xv, last = val(norm.x), ""
    for out, w, offset in reversed(norm.chain):  # longest region first (it includes the weight)
        wv = val(w)
        if wv is not None and not same(wv.shape[0], xv.shape[-1]):
            last = f"weight shape {tuple(wv.shape)} is not (hidden,) = ({xv.shape[-1]},)"
            continue
        region = discover.extract([norm.x] + ([w] if w is not None else []), [out])
        if isinstance(region, str):
            last = region
            continue
        e, off = norm.eps, offset
        verdict = discover.verify(
            region, "rms_norm", (e, off, w is not None),
            (lambda x_, w_=None, e=e, off=off: _rms64(x_, w_, e, off)),
            (lambda x_, w_=None, e=e, off=off: (rms_norm_ref(x_, w_, e, off),)))
        if not verdict.ok:
            last = f"verification failed: {verdict.reason}"
            continue
        min_h = NORM_MIN_HIDDEN.get(PlatformDispatch.platform().kind, 0)
        h = xv.shape[-1]
        if ctx.options.provider_for("rms_norm") is None and isinstance(h, int) and h < min_h:
            why = (f"not rewritten: normalised size {h} < policy.NORM_MIN_HIDDEN={min_h}: left to Inductor; "
                   "force a provider to rewrite it")
            if not ctx.measuring:
                raise Miss(why, overwrite=False)
            ctx.default_off = why  # measured in context instead; stays off unless a decision says otherwise
        res = _residual_operands(norm.x, w, {n: i for i, n in enumerate(graph.nodes)})
        choice = _choose(ctx, res is not None, xv, wv, off)
        if choice.provider is None:
            raise Miss(f"not rewritten: {choice.why_not}", overwrite=False)
        norm.out, norm.w, norm.offset, norm.verdict, norm.residual = out, w, off, verdict, res
        return choice
    raise Miss(f"not rewritten: {last}", overwrite=False)


def _choose(ctx: PassContext, residual: bool, xv: Any, wv: Any, offset: float) -> Choice:
    """The provider choice keyed by the op :func:`_replace` writes: ``fused_add_rms_norm`` (spec ``fused_add=1``)
    for a ``residual`` add it absorbs when that op has a provider, else ``rms_norm``. The key is what the
    tuning store decides by, so a residual norm is measured in its own window (the add and the sum's users), not
    given the decision of the first plain norm of its shape (an embedding-fed first layer, whose gather Inductor
    fuses: on the H200 that left every add + norm of a Qwen3-0.6B-shaped step at B=32 to Inductor, 0.90x the
    shipped step; benchmarks/results/notes/46-tuning.md)."""
    if residual:
        fused = ctx.choose("fused_add_rms_norm", norm_spec(xv, wv, offset, True))
        if fused.provider is not None:
            return fused
    return ctx.choose("rms_norm", norm_spec(xv, wv, offset, False))


def _residual_operands(x: Node, w: Node | None, order: dict[Node, int]) -> tuple[Node, Node] | None:
    """(a, b) when the norm's input is ``a + b`` of one shape and dtype whose sum is also used elsewhere (the
    residual stream) and the weight is defined before it: the fused residual-add form applies."""
    if x.target is not aten.add.Tensor or len(x.args) != 2 or x.kwargs or len(x.users) < 2:
        return None
    a, b = x.args
    if not (isinstance(a, Node) and isinstance(b, Node)):
        return None
    va, vb, vx = val(a), val(b), val(x)
    if va is None or vb is None or not (va.dtype == vb.dtype == vx.dtype) \
            or tuple(va.shape) != tuple(vx.shape) or tuple(vb.shape) != tuple(vx.shape):
        return None
    if w is not None and order.get(w, len(order)) > order[x]:
        return None
    return a, b


def _replace(graph: Graph, ctx: PassContext, norm: Norm, rs: Node, choice: Choice) -> str:
    """Replace a verified norm region (``x`` .. ``out``) by ``rms_norm``, or by ``fused_add_rms_norm`` when ``x``
    is a residual add whose sum is used elsewhere (both outputs then replace the add and the norm)."""
    x, w, eps, offset, out, res = norm.x, norm.w, norm.eps, norm.offset, norm.out, norm.residual
    if res is not None:
        fused = ctx.choose("fused_add_rms_norm", norm_spec(val(x), val(w), offset, True))
        if fused.provider is not None:
            region = _region(ctx, [res[0], res[1], w], [out, x])
            ctx.pending = fused
            before = x.next
            op = insert_call(graph, before, torch.ops.rocm_fused.fused_add_rms_norm.default,
                             (res[0], res[1], w, eps, offset, fused.provider), like=rs)
            y = insert_call(graph, before, operator.getitem, (op, 0), like=rs)
            s_ = insert_call(graph, before, operator.getitem, (op, 1), like=x)
            _record(ctx, op, [y, s_], region, rs)
            out.replace_all_uses_with(y)
            x.replace_all_uses_with(s_)
            return "fused_add_rms_norm"
    region = _region(ctx, [x, w], [out])
    ctx.pending = choice
    new = insert_call(graph, out, torch.ops.rocm_fused.rms_norm.default, (x, w, eps, offset, choice.provider),
                      like=rs)
    _record(ctx, new, [new], region, rs)
    out.replace_all_uses_with(new)
    return "rms_norm"


def _region(ctx: PassContext, inputs: list[Node | None], originals: list[Node]) -> Any:
    """For a norm deferred to ``norm_gemm`` (``ctx.deferring``), a copy of the original region (``joint.capture``)
    that ``norm_gemm`` restores when the fold is not taken; None when not deferring.

    Raises:
        Miss: the region cannot be restored (it reads a node besides the op's inputs): left to Inductor now.
    """
    if ctx.deferring is None:
        return None
    region = joint.capture([i for i in inputs if i is not None], originals)
    if region is None:
        from ...tuning import decide, device

        raise Miss(decide.slower_reason(ctx.deferring, device.current("cuda")))
    return region


def _record(ctx: PassContext, op: Node, outs: list[Node], region: Any, rs: Node) -> None:
    """Register the provisional ``op`` with its recorded region (``passes/joint.py``); nothing when not deferring."""
    if region is not None:
        ctx.deferred[op] = joint.Deferred(op, outs, region, ctx.deferring, rs.name)


def emit(graph: Graph, ctx: PassContext, rs: Node, norm: Norm, choice: Choice) -> MatchRecord:
    """Rewrite the verified region, drop what it left dead, and return the match (noted as discovered)."""
    op = _replace(graph, ctx, norm, rs, choice)
    shape, dtype = describe(val(norm.x))
    note = "; ".join(s for s in ("found by discovery, verified" + (" (cached)" if norm.verdict.cached else ""),
                                 norm.verdict.note, *ctx.pending.reasons) if s)
    graph.eliminate_dead_code()  # the next candidates' single-user checks must not see this region
    return MatchRecord("rms_norm", op, ctx.pending.provider, shape, dtype, location_of(rs), note)
