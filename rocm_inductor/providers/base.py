"""The provider base class: availability (lazy, import-guarded library), version, compile-time ``check``.

A leaf of the providers package: each provider module subclasses :class:`Provider`; the registry in
``providers/__init__.py`` builds one instance of each.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any


class ProviderUnavailable(RuntimeError):
    """Raised when a provider's library cannot be imported or does not run on this platform."""


class Provider:
    """Base class of a kernel provider.

    Subclasses set ``name``, ``library`` (the import name, or ``None``) and ``ops`` (op names they
    implement), and define one method per op with the op's signature (see ``rocm_inductor.ops``).
    """

    name: str = ""
    library: str | None = None
    ops: frozenset[str] = frozenset()

    def __init__(self) -> None:
        self._module: ModuleType | None = None
        self._error: str | None = None
        self._checked = False

    # -- availability ------------------------------------------------------------------------------------
    def platform_ok(self, platform: Any) -> str | None:
        """Return ``None`` if this provider can run on ``platform`` (a ``Platform``), else the reason."""
        return None

    def _import(self) -> ModuleType | None:
        if self.library is None:
            return None
        return importlib.import_module(self.library)

    def lib(self) -> ModuleType:
        """The imported library module (lazy; cached until :meth:`reset`).

        Raises:
            ProviderUnavailable: the import failed (ImportError, or RuntimeError from an unsupported arch).
        """
        if not self._checked:
            self._checked = True
            try:
                self._module = self._import()
            except Exception as e:  # ImportError, or the fork's RuntimeError on unsupported gfx arch
                self._error = f"import {self.library} failed: {type(e).__name__}: {e}"
        if self._error is not None:
            raise ProviderUnavailable(self._error)
        return self._module  # type: ignore[return-value]

    def available(self, platform: Any) -> str | None:
        """Return ``None`` if usable on ``platform``, else the reason (import error, wrong platform)."""
        reason = self.platform_ok(platform)
        if reason is not None:
            return reason
        try:
            self.lib()
        except ProviderUnavailable as e:
            return str(e)
        return None

    def version(self) -> str:
        """Version string of the library (``"builtin"`` for providers without one)."""
        if self.library is None:
            return "builtin"
        try:
            mod = self.lib()
        except ProviderUnavailable:
            return "unavailable"
        return str(getattr(mod, "__version__", "unknown"))

    def reset(self) -> None:
        """Forget the cached import so the next call imports again (tests patch ``sys.modules``)."""
        self._module, self._error, self._checked = None, None, False

    # -- compile-time limits ----------------------------------------------------------------------------
    def check(self, op: str, spec: dict[str, Any]) -> str | None:
        """Return ``None`` if this provider takes ``op`` with ``spec``, else the reason in plain words.

        ``spec`` holds what the pass read from the match (dtypes, shapes, strides); its keys are listed in
        each op's module in ``rocm_inductor.ops``.
        """
        if op not in self.ops:
            return f"{self.name} has no {op} kernel"
        return None
