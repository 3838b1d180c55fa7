"""Inductor lowering overrides (kept apart from the FX passes).

``gemm_config_patches(options)``: Inductor config patches for level 2 (the GEMM bucket override).
"""

from __future__ import annotations

from typing import Any


def gemm_config_patches(options: Any) -> dict[str, Any]:
    """Config patches that install the small-M ATen GEMM override under level 2 (none yet)."""
    return {}
