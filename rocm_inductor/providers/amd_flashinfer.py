"""AMD's FlashInfer fork on ROCm (pip ``amd-flashinfer`` from AMD's index; imports as ``flashinfer``).

Limits (KERNELS.md): gfx942 / gfx950 only (import raises RuntimeError elsewhere: imported lazily here and
treated as "unavailable"); norm kernels are 2D only; ``rmsnorm(..., backend="auto"|"native"|"aiter")`` —
we pass ``backend="native"`` where the signature has it, because the AITER backend truncates bf16 stores.
The same API as upstream otherwise. Verified on CPU stand-ins only (no AMD GPU here).
"""

from __future__ import annotations

import inspect
from typing import Any

from .flashinfer import FlashInferProvider

SUPPORTED_ARCHS = ("gfx942", "gfx950")


class AmdFlashInferProvider(FlashInferProvider):
    """RMSNorm / fused_add_rms_norm through AMD's FlashInfer fork (ROCm gfx942/gfx950)."""

    name = "amd_flashinfer"
    label = "amd_flashinfer"

    def platform_ok(self, platform: Any) -> str | None:
        if platform.kind != "rocm":
            return f"{self.name} runs on ROCm only (platform is {platform.kind})"
        if platform.arch not in SUPPORTED_ARCHS:
            return f"{self.name} supports {SUPPORTED_ARCHS} only (arch is {platform.arch})"
        return None

    def _norm_fns(self, offset: float):
        rms, fused = super()._norm_fns(offset)
        return _prefer_native(rms), _prefer_native(fused)


def _prefer_native(fn):
    """Bind ``backend="native"`` when the fork's function takes it (round-to-nearest stores)."""
    try:
        has_backend = "backend" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        has_backend = False
    if not has_backend:
        return fn
    return lambda *a, **kw: fn(*a, backend="native", **kw)
