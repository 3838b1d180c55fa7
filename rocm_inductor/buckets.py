"""Decode buckets: is a GEMM's M (or a query length) small, as a static value or a bounded symbol?

A leaf module (no package imports) shared by the level-2 GEMM override (``lowerings/gemm_buckets.py``) and the
passes that act only on decode buckets (``gemm_merge``, ``norm_gemm``, ``attention``, ``all_reduce_norm``). The
rule: M is small when its static value, or its ShapeEnv upper bound (``torch._dynamo.mark_dynamic(x, 0,
max=32)``), is ``<= aten_gemm_max_m``; a symbolic M without a finite bound is not small.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import sympy
import torch

#: Inductor op names (``op_name`` of ``get_template_configs``) the override applies to. ``"mm-ah"``
#: (autoheuristic's extra mm choices) counts as ``"mm"``.
GEMM_OPS = ("mm", "addmm", "bmm", "baddbmm")

@dataclasses.dataclass(frozen=True)
class Decision:
    """What the override does with one GEMM.

    Attributes:
        aten_only: keep only the ATen choice (True) or every choice (False).
        m: M as Inductor sees it (``"16"``, ``"s0"``, ``"4*s0"``).
        m_upper: M's static value or its ShapeEnv upper bound; ``None`` = no finite bound.
        reason: plain-words why, for the report.
    """

    aten_only: bool
    m: str
    m_upper: int | None
    reason: str


def _op_family(op_name: str) -> str:
    return op_name.split("-", 1)[0]


def gemm_m(mat1_shape: tuple[Any, ...] | list[Any]) -> Any:
    """M of a GEMM from its first operand's shape: ``shape[-2]`` of ``[M, K]`` or ``[*batch, M, K]``.

    Raises:
        ValueError: fewer than two dimensions.
    """
    if len(mat1_shape) < 2:
        raise ValueError(f"rocm_fused: a GEMM operand needs >= 2 dims, got shape {tuple(mat1_shape)}")
    return mat1_shape[-2]


def m_upper_bound(m: Any, var_ranges: Mapping[Any, Any] | None = None) -> int | None:
    """Upper bound of M: its value when static, else the bound of the expression over ``var_ranges``.

    Args:
        m: an int, a SymInt, or a sympy expression of shape symbols.
        var_ranges: symbol -> ``ValueRanges`` (``ShapeEnv.var_to_range``); ``None`` = nothing known.

    Returns:
        The largest value M can take, or ``None`` when there is no finite bound.
    """
    if isinstance(m, torch.SymInt):
        m = m.node.expr
    if isinstance(m, int):
        return m
    expr = sympy.sympify(m)
    if expr.is_Integer:
        return int(expr)
    if var_ranges is None:
        return None
    from torch.utils._sympy.value_ranges import bound_sympy

    try:
        upper = bound_sympy(expr, dict(var_ranges)).upper
    except Exception:  # an expression bound_sympy cannot bound: treat as unbounded
        return None
    infinities = {sympy.oo}
    try:
        from torch.utils._sympy.numbers import int_oo

        infinities.add(int_oo)  # int_oo.is_finite is True: compare explicitly
    except ImportError:
        pass
    if upper in infinities or not getattr(upper, "is_number", False) or not upper.is_finite:
        return None
    return int(sympy.floor(upper))


def decide(op_name: str, m: Any, max_m: int, var_ranges: Mapping[Any, Any] | None = None,
           aten_available: bool = True) -> Decision:
    """The override's decision for one GEMM (pure: no Inductor state).

    Args:
        op_name: Inductor's op name (``"mm"``, ``"addmm"``, ``"bmm"``, ``"baddbmm"``, ``"mm-ah"``, ...).
        m: M (rows of one matrix product; bmm batch dims excluded), int or sympy expression.
        max_m: ``aten_gemm_max_m``; 0 turns the override off.
        var_ranges: symbol ranges for a symbolic M (``ShapeEnv.var_to_range``).
        aten_available: whether ATen is an allowed GEMM backend.

    Returns:
        A :class:`Decision`.
    """
    m_str = str(m.node.expr if isinstance(m, torch.SymInt) else m)
    if _op_family(op_name) not in GEMM_OPS:
        return Decision(False, m_str, None, f"{op_name} is not overridden")
    upper = m_upper_bound(m, var_ranges)
    static = upper is not None and m_str == str(upper)
    if max_m <= 0:
        return Decision(False, m_str, upper, "override off (aten_gemm_max_m=0)")
    if upper is None:
        return Decision(False, m_str, None, f"M={m_str} has no finite upper bound: tuned")
    if upper > max_m:
        what = f"M={m_str}" if static else f"M={m_str} (upper bound {upper})"
        return Decision(False, m_str, upper, f"{what} > aten_gemm_max_m={max_m}: tuned")
    if not aten_available:
        return Decision(False, m_str, upper, "ATen is not in max_autotune_gemm_backends: kept every choice")
    what = f"M={m_str}" if static else f"M={m_str} (upper bound {upper})"
    return Decision(True, m_str, upper, f"{what} <= aten_gemm_max_m={max_m}: ATen only")
