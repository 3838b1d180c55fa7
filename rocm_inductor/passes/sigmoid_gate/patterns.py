"""The plain spelling of the sigmoid gate, ``x * sigmoid(g)`` in either operand order: a two-row pattern family
registered lazily with Inductor's pattern matcher, and its ``extra_check`` (validate, choose the provider,
record the outcome). The cast spellings are found by discovery (``__init__.py``).
"""

from __future__ import annotations

import functools
import inspect

import torch
from torch._inductor.pattern_matcher import Match, PatternMatcherPass, fwd_only, register_replacement
from torch.fx import Node

from ...ops.sigmoid_gate import DTYPES, gate_spec
from ...report import Match as MatchRecord
from ...report import NearMiss, describe, location_of
from ..context import current_context
from ..fx import val
from .kind import NOT_PROJECTED, WHAT, dtype_reason, feeds_projection, not_this_op, same_shape

aten = torch.ops.aten

#: Pattern table: operand order -> search function (``canonicalize`` keeps the written order of two
#: same-shape operands, so both orders occur in real code).
SEARCHES = {
    "gate_last": lambda x, g: x * torch.sigmoid(g),
    "gate_first": lambda x, g: torch.sigmoid(g) * x,
}


def _replace(x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    choice = current_context().pending
    assert choice is not None and choice.provider is not None
    return torch.ops.rocm_fused.sigmoid_gate(x, g, choice.provider)


def extra_check(match: Match) -> bool:
    """Validate one ``x * sigmoid(g)`` match, choose the provider, record the outcome."""
    ctx = current_context()
    x_node, g_node = match.kwargs["x"], match.kwargs["g"]
    if not (isinstance(x_node, Node) and isinstance(g_node, Node)):
        return False  # a constant factor: not a gate
    x, g = val(x_node), val(g_node)
    mul = match.output_nodes()[0]
    out = val(mul)
    if not all(isinstance(v, torch.Tensor) for v in (x, g, out)):
        return False
    if not same_shape(x, g) or not same_shape(x, out):
        return False  # broadcast (router / shared-expert sigmoid, per-head scalar gate): not this op
    if not_this_op(x_node, g_node) is not None:
        return False
    sig = next((n for n in match.nodes if n.target is aten.sigmoid.default), mul)
    anchor, where = sig.name, location_of(mul)

    def miss(reason: str) -> bool:
        ctx.near_miss(anchor, NearMiss("sigmoid_gate", WHAT, reason, where))
        return False

    if x.dtype not in DTYPES or g.dtype != x.dtype or out.dtype != x.dtype:
        return miss(dtype_reason(x, g, out))
    if not feeds_projection(mul):
        return miss(NOT_PROJECTED)
    choice = ctx.choose("sigmoid_gate", gate_spec(x, g))
    if choice.provider is None:
        return miss(choice.why_not)
    ctx.pending = choice
    shape, dtype = describe(x)
    ctx.matched(anchor, MatchRecord("sigmoid_gate", "sigmoid_gate", choice.provider, shape, dtype, where))
    return True


@functools.lru_cache(maxsize=1)
def patterns() -> PatternMatcherPass:
    """The pattern family (registered once per process). One dtype suffices: the pattern has no casts."""
    pm = PatternMatcherPass(pass_name="rocm_fused_sigmoid_gate")
    extra = {"skip_duplicates": True} if "skip_duplicates" in inspect.signature(
        register_replacement).parameters else {}
    for search in SEARCHES.values():
        args = [torch.empty(2, 8, dtype=torch.bfloat16), torch.empty(2, 8, dtype=torch.bfloat16)]
        register_replacement(search, _replace, args, fwd_only, [pm], extra_check=extra_check, **extra)
    return pm
