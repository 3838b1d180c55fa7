"""The near-miss texts of the RMSNorm pass that take more than a line: what a region is instead of an RMSNorm
(LayerNorm, a norm whose eps is no constant), and which check of the pattern failed for an ``rsqrt(mean(x^2) +
eps)`` left in the graph (an intermediate the model or backward also reads, a step outside the table).

Shared by the pattern path (``patterns.py``) and discovery (``discovery.py``), which check the region's input in
one order: LayerNorm, eps, dtype (:func:`input_miss`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.fx import Node

from ..context import kept_output_text, running
from ..fx import is_call, strip_casts, val

aten = torch.ops.aten

LAYERNORM = "LayerNorm (mean subtracted), not RMSNorm: left to Inductor"
EPS_TENSOR = "eps is a tensor, not a compile-time constant: left to Inductor"
#: eps that Dynamo passed as a graph input. It lifts a float attribute to a 0-d float64 input (not a
#: constant) under dynamic=True, and, with automatic dynamic shapes (dynamic=None, the default), on the
#: recompile after the float changed; ``specialize_float=True`` keeps every float a constant (torch 2.13:
#: ``VariableBuilder.wrap_symfloat`` in ``torch/_dynamo/variables/builder.py``; both cases measured on 2.13).
EPS_INPUT = ("eps is a graph input, not a compile-time constant (Dynamo lifts a float attribute to an input "
             "under dynamic=True, or after a recompile with automatic dynamic shapes; "
             "torch._dynamo.config.specialize_float=True keeps it a constant, and so does torch._dynamo.mark_dynamic "
             "on the batch dim instead of dynamic=True while eps does not change): left to Inductor")


def is_mean_subtracted(x: Node) -> bool:
    """True for ``a - mean(a, -1, keepdim)`` (LayerNorm's centring), possibly behind a cast."""
    if x.target is torch.ops.prims.convert_element_type.default and isinstance(x.args[0], Node):
        x = x.args[0]
    if x.target is not aten.sub.Tensor or not isinstance(x.args[1], Node):
        return False
    return strip_casts(x.args[1]).target is aten.mean.dim


def _lifted_float(eps: Any) -> bool:
    """Whether ``eps`` is a float Dynamo passed as a graph input: a symbolic float, or (behind casts) a
    placeholder holding a 0-d float64 tensor, the form Dynamo gives an unspecialised float."""
    if isinstance(eps, torch.SymFloat) or isinstance(val(eps), torch.SymFloat):
        return True
    src = strip_casts(eps)
    v = val(src)
    return (isinstance(src, Node) and src.op == "placeholder" and isinstance(v, torch.Tensor) and v.ndim == 0
            and v.dtype is torch.float64)


def input_miss(x_node: Node, eps: Any) -> str | None:
    """Why the region's input or eps rules the rewrite out (:data:`LAYERNORM`: what was found is a LayerNorm),
    else None.

    Args:
        x_node: the normalised tensor (the pattern's ``x``; discovery: the squared tensor's source).
        eps: the added eps: a number, or a Node / symbolic float when it is no compile-time constant.
    """
    if is_mean_subtracted(x_node):
        return LAYERNORM
    if isinstance(eps, Node) or not isinstance(eps, (int, float)):
        return EPS_INPUT if _lifted_float(eps) else EPS_TENSOR
    x = val(x_node)
    if x is None or not x.is_floating_point():
        return "input is not a floating-point tensor"
    return None


def users_text(node: Node, skip: Node | None) -> str:
    """The other users of ``node`` (all but ``skip``), e.g. ``"the graph output"``, ``"mul_3 (aten.mul.Tensor)"``."""
    names = ["the graph output" if u.op == "output" else f"{u.name} ({u.target})" for u in node.users if u is not skip]
    return ", ".join(names)


def _kept_text() -> str:
    """Why a graph output is kept, in this graph's words (the running pass's context; unknown outside one)."""
    ctx = running()
    return kept_output_text(ctx.is_inference if ctx is not None else None)


def leftover_reason(pw: Node, mean: Node, add: Node, rsqrt: Node) -> str:
    """Which check of the pattern failed for an unrewritten ``rsqrt(mean(x^2) + eps)`` chain, named.

    The pattern needs each intermediate used only by the next step: ``x^2`` by the mean, the mean by the
    ``+ eps``, that by the rsqrt, the rsqrt by ``x * rsqrt`` and that product by the weight step (or the output).
    A graph output among the extra users means the graph keeps it for later: a training graph saving it for
    backward, or, in an inference graph, a value the model returns (Inductor says which: ``is_inference``).
    """
    norm = next((u for u in rsqrt.users if is_call(u, aten.mul.Tensor)), None)
    chain = [(pw, "x^2", mean), (mean, "the variance mean(x^2)", add), (add, "mean(x^2) + eps", rsqrt),
             (rsqrt, "rsqrt(mean(x^2) + eps)", norm)]
    for node, what, nxt in chain:
        if len(node.users) > 1 or nxt is None or nxt not in node.users:
            others = users_text(node, nxt)
            saved = any(u.op == "output" for u in node.users)
            why = f" ({_kept_text()})" if saved else " (the model reads it)"
            return f"{what} ({node.name}) is also used by {others}{why}"
    users = list(norm.users)
    if len(users) > 1 or any(u.op == "output" for u in users):
        return (f"x * rsqrt(...) ({norm.name}) is also used by {users_text(norm, None)}"
                + (f" ({_kept_text()})" if any(u.op == "output" for u in users) else ""))
    step = f"{users[0].name} ({users[0].target})" if users else "nothing"
    return (f"the step after x * rsqrt(...) ({norm.name}) is {step}, not a weight / cast spelling of the "
            "pattern table (passes/rms_norm/patterns.py FORMS)")


def no_chain_reason(rs: Node) -> str:
    """Why no output of the input's shape and dtype follows ``rs``: the check that failed, named."""
    a = rs.args[0]
    mean = a.args[0] if is_call(a, aten.add.Tensor) else None
    if is_call(mean, aten.mean.dim) and isinstance(mean.args[0], Node):
        return leftover_reason(mean.args[0], mean, a, rs)
    return "no output of the input's shape and dtype below the rsqrt (the output is promoted or reshaped)"
