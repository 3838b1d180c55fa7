"""The literal fast path of the RMSNorm pass: a pattern family generated from one table (weight form x
residual add x example dtypes), registered lazily with Inductor's pattern matcher, and its ``extra_check``.

Rows (``FORMS``): HF Llama's weight after the down-cast (``w_after_down``), the weight multiplied in float32
and cast last (``w_before_down``: OLMo2, ``F.rms_norm`` / ``nn.RMSNorm``), Gemma's ``1 + w.float()``
(``gemma``), no weight (``none``); each with and without a residual add before it. Spellings outside the table
are found by ``discovery.py``.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

import torch
from torch._inductor.pattern_matcher import Match, PatternMatcherPass, fwd_only, register_replacement
from torch.fx import Node

from ...ops.rms_norm import norm_spec
from ...platform import PlatformDispatch
from ...policy import NORM_MIN_HIDDEN
from ...report import Match as MatchRecord
from ...report import NearMiss, describe, dtype_name, location_of
from ..context import current_context
from ..fx import CONVERT, same, val
from .reasons import LAYERNORM, input_miss

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


def _eps_of(rsqrt: Node | None) -> Any:
    """The eps operand of ``rsqrt(add(mean, eps))`` (a number, or a Node when eps is a tensor)."""
    add = rsqrt.args[0] if rsqrt is not None else None
    return add.args[1] if isinstance(add, Node) and len(add.args) == 2 else None


def _is_upcast(n: Any) -> bool:
    """True when ``n`` casts a narrower float tensor up (``prims.convert_element_type(bf16 -> fp32)``)."""
    if not isinstance(n, Node) or n.target is not CONVERT:
        return False
    src, out = val(n.args[0]), val(n)
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
        rsqrt = next((n for n in match.nodes if n.target is aten.rsqrt.default), None)
        anchor_node = rsqrt or match.output_nodes()[0]
        # torch 2.11 hands extra_check the match of the pattern re-traced with the real eps, where eps is a
        # literal, not a keyword: read it from the graph (rsqrt(add(mean, eps))) then.
        eps = kw["eps"] if "eps" in kw else _eps_of(rsqrt)
        anchor, where = anchor_node.name, location_of(anchor_node)
        what = "residual add + RMSNorm" if residual else "RMSNorm"

        def miss(reason: str) -> bool:
            # An fp32-only pattern also matches the inside of a bf16 norm (x = the upcast): its reason
            # ("input is float32") must not replace the full match's ("weight is float32, input bf16").
            found = "LayerNorm" if reason == LAYERNORM else what
            ctx.near_miss(anchor, NearMiss("rms_norm", found, reason, where), overwrite=not _is_upcast(x_node))
            return False

        x, w, out = val(x_node), val(w_node), val(match.output_nodes()[0])
        if residual:
            r = val(kw["r"])
            if r is None or x is None or r.dtype != x.dtype or tuple(r.shape) != tuple(x.shape):
                return False  # not a residual add (broadcast / mixed dtype): the plain-norm pattern decides
        why = input_miss(x_node, eps)
        if why is not None:
            return miss(why)
        if w is not None and (w.ndim != 1 or not same(w.shape[0], x.shape[-1])):
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
