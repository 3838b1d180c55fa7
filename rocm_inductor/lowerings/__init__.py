"""Inductor lowering overrides (kept apart from the FX passes).

- :func:`gemm_config_patches`: Inductor config patches for level 2 (the GEMM bucket override's cache key).
- :func:`gemm_override`: context manager installing the override around one compile (level 2 only).
- :func:`gemm_fallback_patches`: what keeps the override in the cache key when our rewrites are dropped.

See :mod:`rocm_inductor.lowerings.gemm_buckets`. Imported lazily by the backend.
"""

from __future__ import annotations

from .gemm_buckets import config_patches as gemm_config_patches
from .gemm_buckets import fallback_patches as gemm_fallback_patches
from .gemm_buckets import gemm_override

__all__ = ["gemm_config_patches", "gemm_fallback_patches", "gemm_override"]

