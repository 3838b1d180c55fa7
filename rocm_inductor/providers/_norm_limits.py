"""Shared compile-time checks for the norm ops (spec keys documented in ``rocm_inductor.ops.rms_norm``)."""

from __future__ import annotations

from typing import Any

import torch

from ..report import dtype_name

HALF_DTYPES = (torch.float16, torch.bfloat16)


def check_half_same_dtype_weight(lib: str, spec: dict[str, Any]) -> str | None:
    """Reasons a FlashInfer-style norm kernel (fp16/bf16, weight reinterpreted as the input dtype) can't run.

    FlashInfer's norm kernels read the weight as the input dtype without checking it, so an fp32 weight
    with bf16 input gives garbage (docs/vendors.md): such a match must be refused here.
    """
    dt, wdt = spec["dtype"], spec.get("weight_dtype")
    if dt not in HALF_DTYPES:
        return f"{lib} norm kernels take float16/bfloat16 only, input is {dtype_name(dt)}"
    if wdt is None:
        return f"{lib} norm kernels need a weight (weightless norm)"
    if wdt != dt:
        return f"weight is {dtype_name(wdt)}, input {dtype_name(dt)}; {lib} needs equal dtypes"
    return None
