"""Kernel providers: one module per library, the only place that imports it.

A provider implements some of our custom ops (``rocm_fused::*``) with one library's kernels and states the
library's limits as data that :meth:`Provider.check` reads at compile time. No provider knows a pass; the
custom ops call ``get_provider(name).<op>(...)`` with the name the pass baked into the graph.
"""

from __future__ import annotations

from .base import Provider, ProviderUnavailable  # noqa: F401  (re-exported)

_REGISTRY: dict[str, Provider] = {}


def _build_registry() -> dict[str, Provider]:
    from .aiter import AiterProvider
    from .amd_flashinfer import AmdFlashInferProvider
    from .flashinfer import FlashInferProvider
    from .reference import ReferenceProvider
    from .triton import TritonProvider

    provs = [ReferenceProvider(), TritonProvider(), FlashInferProvider(), AmdFlashInferProvider(),
             AiterProvider()]
    return {p.name: p for p in provs}


def all_providers() -> dict[str, Provider]:
    """Every known provider by name (instances are cheap: nothing is imported until used)."""
    if not _REGISTRY:
        _REGISTRY.update(_build_registry())
    return _REGISTRY


def get_provider(name: str) -> Provider:
    """The provider called ``name``.

    Raises:
        KeyError: no provider of that name.
    """
    provs = all_providers()
    if name not in provs:
        raise KeyError(f"unknown provider {name!r}; known: {sorted(provs)}")
    return provs[name]


def reset_providers() -> None:
    """Drop every provider's cached import."""
    for p in all_providers().values():
        p.reset()
