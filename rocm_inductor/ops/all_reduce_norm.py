"""``rocm_fused::all_reduce_add_rms_norm``: tensor-parallel all-reduce (sum) + residual add + RMSNorm.

Meaning (pure-torch reference: ``rocm_inductor.providers.reference.all_reduce_add_rms_norm_ref``):
    r = all_reduce(x, "sum", group)                       (in x.dtype, as ``_c10d_functional.all_reduce``)
    all_reduce_add_rms_norm(x, residual, weight, ...) = fused_add_rms_norm(r, residual, weight, eps, offset)
                                                      = (rms_norm(s), s) with s = (r + residual).to(x.dtype)
i.e. the rounding contract of ``rocm_fused::fused_add_rms_norm`` (``ops/rms_norm.py``) applied to the reduced
tensor. A fused vendor kernel that sums the ranks in float32 and adds the residual before rounding once may
differ from this by one ulp of the dtype in ``s`` (the numerics contract, docs/ops.md, allows it). ``offset`` is 1.0
for Gemma's ``1 + weight``; ``weight=None`` is the weightless norm. Functional (``mutates_args=()``); outputs
are contiguous. Every rank of ``group_name`` must call it (it is a collective).

``group_name`` is the process group's name as ``_c10d_functional`` ops carry it in the graph (a string such
as ``"0"``; torch 2.13's schema says ``Any`` but Dynamo still writes the name there).

Compile-time spec keys read by providers' ``check`` (built by :func:`all_reduce_norm_spec`):
    dtype, weight_dtype (None if weightless), hidden (int or None if symbolic), ndim, offset, fused_add (True),
    tokens (int, or None if symbolic), max_tokens (static value or ShapeEnv upper bound, None if unbounded),
    world_size (int, or None when the group cannot be resolved at compile time), group_name, group_ranks
    (tuple of global ranks, or None), device (``"cuda"``, ``"cpu"``...).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..providers import get_provider
from .rms_norm import norm_spec


@torch.library.custom_op("rocm_fused::all_reduce_add_rms_norm", mutates_args=())
def all_reduce_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None, eps: float, offset: float,
    group_name: str, provider: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """All-reduce (sum) ``x`` over ``group_name``, add ``residual``, RMSNorm (arXiv:1910.07467), in one op.

    Args:
        x: (..., H) float16/bfloat16/float32: this rank's partial sum (a row-parallel projection's output).
        residual: (..., H), same shape and dtype as ``x``.
        weight: (H,) or None. eps: variance epsilon. offset: 0.0, or 1.0 for Gemma's ``(1 + weight)``.
        group_name: the c10d process group's name (``_c10d_functional`` spelling).
        provider: provider name chosen at compile time (``"reference"``, ``"flashinfer"``, ``"aiter"``).

    Returns:
        ``(y, s)``: the normalised ``s`` and the new residual ``s = all_reduce(x) + residual`` (model dtype),
        both (..., H) of ``x.dtype``, contiguous, identical on every rank.

    Raises:
        KeyError: unknown provider. ProviderUnavailable: its library cannot be imported here.
        ValueError: ``x`` and ``residual`` differ in shape.
    """
    if x.shape != residual.shape:
        raise ValueError(f"x {tuple(x.shape)} and residual {tuple(residual.shape)} must have one shape")
    y, s = get_provider(provider).all_reduce_add_rms_norm(x, residual, weight, eps, offset, group_name)
    return y.contiguous(), s.contiguous()


@all_reduce_add_rms_norm.register_fake
def _all_reduce_add_rms_norm_fake(x, residual, weight, eps, offset, group_name, provider):
    def out():
        return torch.empty(x.shape, dtype=x.dtype, device=x.device)

    return out(), out()


def group_info(group_name: Any) -> tuple[int | None, tuple[int, ...] | None]:
    """(world size, global ranks) of the c10d group called ``group_name``; ``(None, None)`` if unknown here."""
    try:
        import torch.distributed as dist
        from torch.distributed.distributed_c10d import _resolve_process_group

        pg = _resolve_process_group(group_name)
        return pg.size(), tuple(dist.get_process_group_ranks(pg))
    except Exception:  # not initialised, destroyed, or a private name that moved
        return None, None


def all_reduce_norm_spec(x: Any, weight: Any, offset: float, group_name: str,
                         max_tokens: int | None) -> dict[str, Any]:
    """Build the compile-time spec of an all-reduce + add + norm match from fake tensors.

    Args:
        x: the (residual-shaped) input's fake tensor; weight: the weight's fake tensor or None.
        offset: 0.0 or 1.0 (Gemma). group_name: the group's name as the graph carries it.
        max_tokens: tokens (product of the leading dims) if static, else their ShapeEnv upper bound, or None.

    Returns:
        dict with the keys listed in the module docstring.
    """
    lead = [d for d in x.shape[:-1]]
    tokens = math.prod(lead) if all(isinstance(d, int) for d in lead) else None
    world, ranks = group_info(group_name)
    return {
        **norm_spec(x, weight, offset, True),
        "tokens": tokens,
        "max_tokens": tokens if tokens is not None else max_tokens,
        "world_size": world,
        "group_name": group_name,
        "group_ranks": ranks,
        "device": x.device.type,
    }
