"""RMSNorm and residual-add + RMSNorm -> ``rocm_fused::rms_norm`` / ``rocm_fused::fused_add_rms_norm``.

Covers (after ``canonicalize``), in any float dtype, any eps, any leading shape (per-head q/k norms too,
though by default those below ``policy.NORM_MIN_HIDDEN`` are left to Inductor, reported as near-misses):
- HF Llama family: up -> pow(2).mean(-1) -> * rsqrt(var + eps) -> down -> weight * x      (``w_after_down``)
- weight multiplied in float32, cast last (OLMo2, GPT-OSS, ``F.rms_norm``/``nn.RMSNorm``)   (``w_before_down``)
- Meta / gpt-fast ``mean(x * x)``, T5's un-cast ``x * rsqrt`` (canonicalized to the above)
- Gemma / Qwen3-Next ``* (1.0 + weight.float())``                                            (``gemma``)
- weightless ``_norm(x.float()).type_as(x)``                                                  (``none``)
- each of these preceded by a residual add whose sum is also used (HF pre-norm, functional, sandwich)
Deliberately left alone: LayerNorm (mean subtracted: reported), norms whose weight is not (H,), whose eps
is a tensor. A weight that promotes the output (fp32 weight times the bf16 normed value) stays a separate
multiply after a weightless norm, exactly as eager rounds it. Scaled residuals (Granite's
``residual + h * m``) keep the scale as a multiply and fuse the add. Training graphs keep intermediates
for backward, so nothing matches there (reported as a near-miss).

Discovery (issue 15) after the pattern family: every ``rsqrt(mean(x^2, -1) + eps)`` left is a candidate (the
division, ``1 / sqrt`` and ``pow(-0.5)`` spellings reach this form through ``canonicalize``); the single-user
elementwise chain below it gives the output (the longest one of x's shape and dtype first), its multiplied
(H,) operand the weight (``w``, ``w.float()``, ``1 + w.float()`` -> offset), the add the eps; the region is
extracted and verified against ``rms_norm_ref`` on random inputs (passes/discover.py) before the rewrite. That
covers norms computed without an upcast (FLA/Mamba references, ImageGPT), ``x / sqrt(...)``, and weightless
norms whose final multiply is in the input dtype (DeepSeek-V4). A candidate not rewritten is a near-miss.

   x ──► up ──► pow2 ─► mean ─► +eps ─► rsqrt ─┐                x ─┐
         └──────────────────────────────────── * ─► down ─► *w     ├─► rocm_fused::rms_norm(x, w, eps)
"""

from __future__ import annotations

import functools
import inspect
import operator
from typing import Any

import torch
from torch._inductor.pattern_matcher import (
    Match,
    PatternMatcherPass,
    fwd_only,
    register_replacement,
    stable_topological_sort,
)
from torch.fx import Graph, Node

from ..ops.rms_norm import norm_spec
from ..platform import PlatformDispatch
from ..policy import NORM_MIN_HIDDEN
from ..registry import ops_of
from ..report import Match as MatchRecord
from ..report import NearMiss, describe, dtype_name, location_of
from .context import PassContext, current_context

aten = torch.ops.aten

#: Weight forms: name -> (takes a weight, offset added to the weight). Registration order is match order:
#: ``gemma`` before ``w_before_down``, whose weight wildcard would otherwise take ``w.float() + 1.0``.
FORMS: dict[str, tuple[bool, float]] = {
    "gemma": (True, 1.0),
    "w_after_down": (True, 0.0),
    "w_before_down": (True, 0.0),
    "none": (False, 0.0),
}

#: (input dtype, weight dtype) pairs the patterns are traced with. Dtypes are wildcards in the first
#: match; these only decide which casts exist in the pattern (fp32 graphs have none).
EXAMPLE_DTYPES = ((torch.bfloat16, torch.bfloat16), (torch.bfloat16, torch.float32),
                  (torch.float32, torch.float32))

_EPS = 1e-6  # placeholder traced into the pattern; scalar_workaround turns it into a wildcard


def _mul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a * b`` with type promotion spelled out, as ``canonicalize`` leaves it."""
    if not isinstance(b, torch.Tensor):  # the weight wildcard re-traced with a number (``norm * 2.0``)
        return a * b
    dt = torch.promote_types(a.dtype, b.dtype)
    return a.to(dt) * b.to(dt)


def _normed(x: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.to(torch.float32)
    return xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)


def _apply_form(form: str, x: torch.Tensor, w: torch.Tensor | None, eps: float) -> torch.Tensor:
    n = _normed(x, eps)
    if form == "none":
        return n.to(x.dtype)
    if form == "w_after_down":
        return _mul(n.to(x.dtype), w)
    if form == "w_before_down":
        return _mul(n, w).to(x.dtype)
    if form == "gemma":
        return (n * (w.to(torch.float32) + 1.0)).to(x.dtype)
    raise ValueError(form)


def _make_pair(form: str, residual: bool):
    """Search and replacement functions for one row of the family table."""
    has_w, offset = FORMS[form]
    op = "fused_add_rms_norm" if residual else "rms_norm"

    def provider() -> str:
        choice = current_context().pending
        assert choice is not None and choice.provider is not None
        return choice.provider

    if residual and has_w:
        def search(x, r, w, eps):
            s = x + r
            return _apply_form(form, s, w, eps), s

        def replace(x, r, w, eps):
            y, s = torch.ops.rocm_fused.fused_add_rms_norm(x, r, w, eps, offset, provider())
            return y, s
    elif residual:
        def search(x, r, eps):
            s = x + r
            return _apply_form(form, s, None, eps), s

        def replace(x, r, eps):
            y, s = torch.ops.rocm_fused.fused_add_rms_norm(x, r, None, eps, offset, provider())
            return y, s
    elif has_w:
        def search(x, w, eps):
            return _apply_form(form, x, w, eps)

        def replace(x, w, eps):
            return torch.ops.rocm_fused.rms_norm(x, w, eps, offset, provider())
    else:
        def search(x, eps):
            return _apply_form(form, x, None, eps)

        def replace(x, eps):
            return torch.ops.rocm_fused.rms_norm(x, None, eps, offset, provider())
    return op, offset, search, replace


def _rsqrt_of(nodes: list[Node]) -> Node | None:
    return next((n for n in nodes if n.target is aten.rsqrt.default), None)


def _eps_of(rsqrt: Node | None) -> Any:
    """The eps operand of ``rsqrt(add(mean, eps))`` (a number, or a Node when eps is a tensor)."""
    add = rsqrt.args[0] if rsqrt is not None else None
    return add.args[1] if isinstance(add, Node) and len(add.args) == 2 else None


def _is_mean_subtracted(x: Node) -> bool:
    """True for ``a - mean(a, -1, keepdim)`` (LayerNorm's centring), possibly behind a cast."""
    if x.target is torch.ops.prims.convert_element_type.default and isinstance(x.args[0], Node):
        x = x.args[0]
    if x.target is not aten.sub.Tensor or not isinstance(x.args[1], Node):
        return False
    m = x.args[1]
    while m.target is torch.ops.prims.convert_element_type.default and isinstance(m.args[0], Node):
        m = m.args[0]
    return m.target is aten.mean.dim


def _is_upcast(n: Any) -> bool:
    """True when ``n`` casts a narrower float tensor up (``prims.convert_element_type(bf16 -> fp32)``)."""
    if not isinstance(n, Node) or n.target is not torch.ops.prims.convert_element_type.default:
        return False
    src, out = getattr(n.args[0], "meta", {}).get("val"), n.meta.get("val")
    return (src is not None and out is not None and src.is_floating_point()
            and torch.finfo(src.dtype).bits < torch.finfo(out.dtype).bits)


def _check(op: str, offset: float, residual: bool):
    """``extra_check`` of one pattern: validate the match, choose the provider, record the outcome."""

    def extra_check(match: Match) -> bool:
        ctx = current_context()
        kw = match.kwargs
        x_node, w_node = kw["x"], kw.get("w")
        if "w" in kw and not isinstance(w_node, Node):
            return False  # a number in the weight's place (``norm * 2.0``) is no weight: not this form
        rsqrt = _rsqrt_of(match.nodes)
        anchor_node = rsqrt or match.output_nodes()[0]
        # torch 2.11 hands extra_check the match of the pattern re-traced with the real eps, where eps is a
        # literal, not a keyword: read it from the graph (rsqrt(add(mean, eps))) then.
        eps = kw["eps"] if "eps" in kw else _eps_of(rsqrt)
        anchor, where = anchor_node.name, location_of(anchor_node)
        what = "residual add + RMSNorm" if residual else "RMSNorm"

        def miss(reason: str) -> bool:
            # An fp32-only pattern also matches the inside of a bf16 norm (x = the upcast): its reason
            # ("input is float32") must not replace the full match's ("weight is float32, input bf16").
            ctx.near_miss(anchor, NearMiss("rms_norm", what, reason, where), overwrite=not _is_upcast(x_node))
            return False

        x = x_node.meta.get("val")
        w = w_node.meta.get("val") if isinstance(w_node, Node) else None
        out = match.output_nodes()[0].meta.get("val")
        if residual:
            r = kw["r"].meta.get("val")
            if r is None or x is None or r.dtype != x.dtype or tuple(r.shape) != tuple(x.shape):
                return False  # not a residual add (broadcast / mixed dtype): the plain-norm pattern decides
        if _is_mean_subtracted(x_node):
            return miss("LayerNorm (mean subtracted), not RMSNorm: left to Inductor")
        if isinstance(eps, Node) or not isinstance(eps, (int, float)):
            return miss("eps is a tensor, not a compile-time constant (dynamic=True turns float attributes "
                        "into graph inputs: mark the batch dim dynamic with torch._dynamo.mark_dynamic "
                        "instead, or set torch._dynamo.config.specialize_float=True): left to Inductor")
        if x is None or not x.is_floating_point():
            return miss("input is not a floating-point tensor")
        if w is not None and (w.ndim != 1 or not _same(w.shape[0], x.shape[-1])):
            return miss(f"weight shape {tuple(w.shape)} is not (hidden,) = ({x.shape[-1]},)")
        if out is None or out.dtype != x.dtype:
            return miss(f"output dtype {dtype_name(out)} differs from input {dtype_name(x)} (weight promotes "
                        "the result); cast the weight to the model dtype to match")
        min_h = NORM_MIN_HIDDEN.get(PlatformDispatch.platform().kind, 0)
        h = x.shape[-1]
        if ctx.options.provider_for(op) is None and isinstance(h, int) and h < min_h:
            return miss(f"normalised size {h} < policy.NORM_MIN_HIDDEN={min_h}: norms this small (per-head q/k "
                        "norms) are left to Inductor, which fuses them with the ops around them (rewriting "
                        "Qwen3's q/k norms measured 0.93x on decode); force a provider to rewrite it")
        spec = norm_spec(x, w, offset, residual)
        choice = ctx.choose(op, spec)
        if choice.provider is None:
            return miss(choice.why_not)
        ctx.pending = choice
        shape, dtype = describe(x)
        ctx.matched(anchor, MatchRecord("rms_norm", op, choice.provider, shape, dtype, where))
        return True

    return extra_check


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:
        return False


@functools.lru_cache(maxsize=1)
def patterns() -> PatternMatcherPass:
    """The generated pattern family (registered once per process; fused forms first so they win)."""
    pm = PatternMatcherPass(pass_name="rocm_fused_rms_norm")
    extra = {"skip_duplicates": True} if "skip_duplicates" in inspect.signature(
        register_replacement).parameters else {}
    for residual in (True, False):
        for form, (has_w, _) in FORMS.items():
            op, offset, search, replace = _make_pair(form, residual)
            for xdt, wdt in EXAMPLE_DTYPES:
                if not has_w and wdt != xdt:
                    continue
                x = torch.empty(2, 8, dtype=xdt)
                args = [x] + ([torch.empty(2, 8, dtype=xdt)] if residual else []) \
                    + ([torch.empty(8, dtype=wdt)] if has_w else []) + [_EPS]
                register_replacement(search, replace, args, fwd_only, [pm],
                                     extra_check=_check(op, offset, residual),
                                     scalar_workaround={"eps": _EPS}, **extra)
    return pm


# ---------------------------------------------------------------------------------------------------------
# Discovery: every rsqrt(mean(x^2) + eps) the patterns left is a candidate; its region is extracted, its
# parameters read off it and the rewrite verified against the op's reference (passes/discover.py).
_CONVERT = torch.ops.prims.convert_element_type.default
#: Ops a norm's output chain may pass through after the rsqrt (elementwise, same values up to rounding).
_CHAIN_OPS = (aten.mul.Tensor, _CONVERT, aten.div.Tensor)


def _strip_casts(n: Any) -> Any:
    while isinstance(n, Node) and n.target is _CONVERT:
        n = n.args[0]
    return n


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
    return _strip_casts(p.args[0]), eps


def _weight_root(e: Node, x: Node) -> tuple[Node, float] | None:
    """(weight, offset) for a multiplied operand spelled ``w``, ``w.float()`` or ``1 + w.float()``."""
    n, offset = _strip_casts(e), 0.0
    if n.target is aten.add.Tensor and len(n.args) == 2 and isinstance(n.args[1], (int, float)) \
            and isinstance(n.args[0], Node):
        n, offset = _strip_casts(n.args[0]), float(n.args[1])
    v = n.meta.get("val") if isinstance(n, Node) else None
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
            elif _strip_casts(other) is not x:
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


def _residual_operands(x: Node, w: Node | None, order: dict[Node, int]) -> tuple[Node, Node] | None:
    """(a, b) when the norm's input is ``a + b`` of one shape and dtype whose sum is also used elsewhere (the
    residual stream) and the weight is defined before it: the fused residual-add form applies."""
    if x.target is not aten.add.Tensor or len(x.args) != 2 or x.kwargs or len(x.users) < 2:
        return None
    a, b = x.args
    if not (isinstance(a, Node) and isinstance(b, Node)):
        return None
    va, vb, vx = a.meta.get("val"), b.meta.get("val"), x.meta.get("val")
    if va is None or vb is None or not (va.dtype == vb.dtype == vx.dtype) \
            or tuple(va.shape) != tuple(vx.shape) or tuple(vb.shape) != tuple(vx.shape):
        return None
    if w is not None and order.get(w, len(order)) > order[x]:
        return None
    return a, b


def _emit_discovered(graph: Graph, ctx: PassContext, x: Node, w: Node | None, eps: float, offset: float,
                     out: Node, rs: Node, choice: Any) -> str:
    """Replace a verified norm region (``x`` .. ``out``) by ``rms_norm``, or by ``fused_add_rms_norm`` when ``x``
    is a residual add whose sum is used elsewhere (both outputs then replace the add and the norm)."""
    from .canonicalize import insert_call

    order = {n: i for i, n in enumerate(graph.nodes)}
    res = _residual_operands(x, w, order)
    if res is not None:
        spec = norm_spec(x.meta["val"], w.meta.get("val") if w is not None else None, offset, True)
        fused = ctx.choose("fused_add_rms_norm", spec)
        if fused.provider is not None:
            ctx.pending = fused
            before = x.next
            op = insert_call(graph, before, torch.ops.rocm_fused.fused_add_rms_norm.default,
                             (res[0], res[1], w, eps, offset, fused.provider), like=rs)
            y = insert_call(graph, before, operator.getitem, (op, 0), like=rs)
            s_ = insert_call(graph, before, operator.getitem, (op, 1), like=x)
            out.replace_all_uses_with(y)
            x.replace_all_uses_with(s_)
            return "fused_add_rms_norm"
    ctx.pending = choice
    new = insert_call(graph, out, torch.ops.rocm_fused.rms_norm.default, (x, w, eps, offset, choice.provider),
                      like=rs)
    out.replace_all_uses_with(new)
    return "rms_norm"


def _discover(graph: Graph, ctx: PassContext) -> None:
    """Find, verify and rewrite the RMSNorms the pattern family missed; report every other candidate."""
    from ..providers.reference import rms_norm_ref
    from . import discover

    for rs in list(graph.find_nodes(op="call_function", target=aten.rsqrt.default)):
        if rs.graph is not graph or not rs.users:
            continue
        parts = _anchor_parts(rs)
        if parts is None:
            continue
        x, eps = parts
        where = location_of(rs)

        def miss(reason: str, anchor: Node = rs, where: str = where) -> None:
            ctx.near_miss(anchor.name, NearMiss("rms_norm", "RMSNorm", reason, where), overwrite=False)

        xv = x.meta.get("val")
        if _is_mean_subtracted(x):
            miss("LayerNorm (mean subtracted), not RMSNorm: left to Inductor")
            continue
        if isinstance(eps, Node) or not isinstance(eps, (int, float)):
            miss("eps is a tensor, not a compile-time constant: left to Inductor")
            continue
        if xv is None or not xv.is_floating_point():
            miss("input is not a floating-point tensor")
            continue
        chain = [(n, w, off) for n, w, off in _chain(rs, x)
                 if tuple(n.meta["val"].shape) == tuple(xv.shape) and n.meta["val"].dtype == xv.dtype]
        if not chain:
            miss("not rewritten: " + _no_chain_reason(rs))
            continue
        last_reason = ""
        for out, w, offset in reversed(chain):  # longest region first (it includes the weight)
            wv = w.meta.get("val") if w is not None else None
            if wv is not None and not _same(wv.shape[0], xv.shape[-1]):
                last_reason = f"weight shape {tuple(wv.shape)} is not (hidden,) = ({xv.shape[-1]},)"
                continue
            region = discover.extract([x] + ([w] if w is not None else []), [out])
            if isinstance(region, str):
                last_reason = region
                continue
            e, off = float(eps), offset
            verdict = discover.verify(
                region, "rms_norm", (e, off, w is not None),
                (lambda x_, w_=None, e=e, off=off: _rms64(x_, w_, e, off)),
                (lambda x_, w_=None, e=e, off=off: (rms_norm_ref(x_, w_, e, off),)))
            if not verdict.ok:
                last_reason = f"verification failed: {verdict.reason}"
                continue
            min_h = NORM_MIN_HIDDEN.get(PlatformDispatch.platform().kind, 0)
            h = xv.shape[-1]
            if ctx.options.provider_for("rms_norm") is None and isinstance(h, int) and h < min_h:
                last_reason = (f"normalised size {h} < policy.NORM_MIN_HIDDEN={min_h}: left to Inductor; force "
                               "a provider to rewrite it")
                break
            choice = ctx.choose("rms_norm", norm_spec(xv, wv, off, False))
            if choice.provider is None:
                last_reason = choice.why_not
                break
            op = _emit_discovered(graph, ctx, x, w, e, off, out, rs, choice)
            shape, dtype = describe(xv)
            note = "; ".join(s for s in ("found by discovery, verified" + (" (cached)" if verdict.cached else ""),
                                         verdict.note, *ctx.pending.reasons) if s)
            ctx.matched(rs.name, MatchRecord("rms_norm", op, ctx.pending.provider, shape, dtype, where, note))
            graph.eliminate_dead_code()
            break
        else:
            miss(f"not rewritten: {last_reason}")
            continue
        if last_reason and rs.graph is graph and rs.users:
            miss(f"not rewritten: {last_reason}")


def _users_text(node: Node, skip: Node | None) -> str:
    """The other users of ``node`` (all but ``skip``), e.g. ``"the graph output"``, ``"mul_3 (aten.mul.Tensor)"``."""
    names = ["the graph output" if u.op == "output" else f"{u.name} ({u.target})" for u in node.users if u is not skip]
    return ", ".join(names)


def _leftover_reason(pw: Node, mean: Node, add: Node, rsqrt: Node) -> str:
    """Which check of the pattern failed for an unrewritten ``rsqrt(mean(x^2) + eps)`` chain, named.

    The pattern needs each intermediate used only by the next step: ``x^2`` by the mean, the mean by the
    ``+ eps``, that by the rsqrt, the rsqrt by ``x * rsqrt`` and that product by the weight step (or the output).
    A graph output among the extra users means the graph keeps it for later: a training graph saving it for
    backward.
    """
    norm = next((u for u in rsqrt.users if u.op == "call_function" and u.target is aten.mul.Tensor), None)
    chain = [(pw, "x^2", mean), (mean, "the variance mean(x^2)", add), (add, "mean(x^2) + eps", rsqrt),
             (rsqrt, "rsqrt(mean(x^2) + eps)", norm)]
    for node, what, nxt in chain:
        if len(node.users) > 1 or nxt is None or nxt not in node.users:
            others = _users_text(node, nxt)
            saved = any(u.op == "output" for u in node.users)
            why = (" (a training graph saves it for backward: compile under torch.no_grad() or "
                   "torch.inference_mode() to rewrite)") if saved else " (the model reads it)"
            return f"{what} ({node.name}) is also used by {others}{why}"
    users = list(norm.users)
    if len(users) > 1 or any(u.op == "output" for u in users):
        return (f"x * rsqrt(...) ({norm.name}) is also used by {_users_text(norm, None)}"
                + (" (a training graph saves it for backward)" if any(u.op == "output" for u in users) else ""))
    step = f"{users[0].name} ({users[0].target})" if users else "nothing"
    return (f"the step after x * rsqrt(...) ({norm.name}) is {step}, not a weight / cast spelling of the "
            "pattern table (passes/rms_norm.py FORMS)")


def _no_chain_reason(rs: Node) -> str:
    """Why no output of the input's shape and dtype follows ``rs``: the check that failed, named."""
    a = rs.args[0]
    mean = a.args[0] if isinstance(a, Node) and a.target is aten.add.Tensor else None
    if isinstance(mean, Node) and mean.target is aten.mean.dim and isinstance(mean.args[0], Node):
        return _leftover_reason(mean.args[0], mean, a, rs)
    return "no output of the input's shape and dtype below the rsqrt (the output is promoted or reshaped)"



class RMSNormPass:
    """The RMSNorm family pass (see module docstring)."""

    name = "rms_norm"
    ops = ops_of(name)

    def __call__(self, graph: Graph, ctx: PassContext) -> None:
        patterns().apply(graph)
        # A multi-output replacement is inserted at the residual add; a weight computed later in the graph
        # (Gemma's 1 + w placed next to its use) must then move up.
        stable_topological_sort(graph)
        graph.eliminate_dead_code()
        _discover(graph, ctx)
