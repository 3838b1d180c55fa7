"""AMD's FlashInfer fork on ROCm (pip ``amd-flashinfer`` from AMD's index; imports as ``flashinfer``).

Limits (docs/vendors.md): gfx942 / gfx950 only (import raises RuntimeError elsewhere: imported lazily here and
treated as "unavailable"); norm kernels are 2D only; ``rmsnorm(..., backend="auto"|"native"|"aiter")`` —
we pass ``backend="native"`` where the signature has it, because the AITER backend truncates bf16 stores.
RoPE: the 0.6.18+amd line's ``apply_rope_with_cos_sin_cache(..., backend: str = "auto")`` picks AITER's
kernel for "auto" (fp16 with >= 2048 tokens, when AITER imports: cos/sin converted to the query dtype,
larger error), so RoPE is bound to ``backend="native"`` too; positions go as int32 (the 0.5.3+amd builds
read int32 only: see ``FlashInferProvider.rope_cached``). Checked against ROCm/flashinfer
release/0.5.3+amd.1, +amd.2, amd-integration and a stored 0.6.18+amd ``flashinfer/rope.py``. The same API
as upstream otherwise. Verified on CPU stand-ins only (no AMD GPU here).
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

    def _rope_fn(self):
        return _prefer_native(super()._rope_fn())


def _prefer_native(fn):
    """Bind ``backend="native"`` when the fork's function takes it and ``"native"`` is a value it accepts.

    The fork types it ``backend: str = "auto"``; an annotation that is a ``Literal`` without ``"native"``
    (upstream FlashInfer's RoPE has ``Literal["cuda", "cute-dsl"]``) is left alone.
    """
    try:
        param = inspect.signature(fn).parameters.get("backend")
    except (TypeError, ValueError):
        param = None
    if param is None:
        return fn
    ann = param.annotation if isinstance(param.annotation, str) else repr(param.annotation)
    if "Literal" in ann and "native" not in ann:
        return fn
    return lambda *a, **kw: fn(*a, backend="native", **kw)
