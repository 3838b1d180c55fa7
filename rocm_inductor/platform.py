"""Platform detection and ``PlatformDispatch``: which provider serves each op on this machine.

The platform (cpu / cuda / rocm + gfx arch) is detected once per process; the ordered list of available
providers per op is computed once and cached; each match then takes the first provider whose limits take
it (checked at compile time, so a request never finds out at run time). ``PlatformDispatch.reset_all()``
drops every cached choice, for tests that patch the platform or a library module.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from . import policy
from .providers import all_providers, get_provider, reset_providers
from .refusal import prefixed


@dataclasses.dataclass(frozen=True)
class Platform:
    """What we run on.

    Attributes:
        kind: ``"cpu"``, ``"cuda"`` (NVIDIA) or ``"rocm"`` (AMD HIP).
        arch: ``"gfx942"`` style on ROCm (from ``gcnArchName``, features stripped), ``"sm_90"`` on CUDA,
            ``None`` on CPU.
        device_name: the GPU's marketing name, or ``"cpu"``.
    """

    kind: str
    arch: str | None = None
    device_name: str = "cpu"

    def __str__(self) -> str:
        return f"{self.kind}:{self.arch}" if self.arch else self.kind


def detect_platform() -> Platform:
    """Detect the platform of device 0 (no caching here; ``PlatformDispatch.platform()`` caches)."""
    if not torch.cuda.is_available():
        return Platform("cpu")
    props = torch.cuda.get_device_properties(0)
    if getattr(torch.version, "hip", None):
        arch = str(getattr(props, "gcnArchName", "")).split(":")[0] or None
        return Platform("rocm", arch, props.name)
    return Platform("cuda", f"sm_{props.major}{props.minor}", props.name)


@dataclasses.dataclass(frozen=True)
class Choice:
    """The outcome of choosing a provider for one match.

    Attributes:
        provider: the chosen provider's name, or ``None`` when none takes the match.
        reasons: why each skipped provider was skipped (``"flashinfer: weight is float32, ..."``).
    """

    provider: str | None
    reasons: tuple[str, ...] = ()

    @property
    def why_not(self) -> str:
        """All skip reasons in one line (for near-miss reports)."""
        return "; ".join(self.reasons) or "no provider"


class PlatformDispatch:
    """Per-process provider choice per op (class-level cache; see module docstring)."""

    _platform: Platform | None = None
    _candidates: dict[tuple[str, str | None], tuple[tuple[str, ...], tuple[str, ...]]] = {}

    @classmethod
    def platform(cls) -> Platform:
        """The detected platform (cached)."""
        if cls._platform is None:
            cls._platform = detect_platform()
        return cls._platform

    @classmethod
    def candidates(cls, op: str, forced: str | None = None) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """Available providers for ``op`` in preference order, and reasons for the unavailable ones.

        Args:
            op: op name, e.g. ``"rms_norm"``.
            forced: a provider name forced by the options; then it is the only candidate.

        Returns:
            ``(names, reasons)``; cached per ``(op, forced)``.
        """
        key = (op, forced)
        if key not in cls._candidates:
            plat = cls.platform()
            order = (forced,) if forced else policy.PROVIDER_ORDER.get(plat.kind, {}).get(op, ())
            names, reasons = [], []
            for name in order:
                prov = get_provider(name)
                why = prov.available(plat)
                if why is None and op not in prov.ops:
                    why = f"has no {op} kernel"
                if why is None:
                    names.append(name)
                else:
                    reasons.append(f"{name}: {why}")
            if not order:
                reasons.append(f"no provider for {op} on {plat.kind} by default "
                               f"(choose one with options={{'providers': {{'{op}': ...}}}})")
            cls._candidates[key] = (tuple(names), tuple(reasons))
        return cls._candidates[key]

    @classmethod
    def choose(cls, op: str, spec: dict[str, Any], forced: str | None = None) -> Choice:
        """Pick the first available provider whose compile-time limits take ``spec``.

        Args:
            op: op name.
            spec: what the pass read from the match (keys per op, see ``rocm_inductor.ops``).
            forced: provider forced by the options, if any.

        Returns:
            A :class:`Choice` (``provider=None`` with reasons when nothing takes it).
        """
        names, reasons = cls.candidates(op, forced)
        reasons = list(reasons)
        for name in names:
            why = get_provider(name).check(op, spec)
            if why is None:
                return Choice(name, tuple(reasons))
            reasons.append(prefixed(f"{name}: ", why))  # keeps a Refusal's kind
        return Choice(None, tuple(reasons))

    @classmethod
    def versions(cls) -> dict[str, str]:
        """Library version per provider available on this platform (enters the FX graph cache key)."""
        plat = cls.platform()
        return {n: p.version() for n, p in all_providers().items() if p.available(plat) is None}

    @classmethod
    def reset_all(cls) -> None:
        """Forget the platform, every cached provider list and every provider's cached import."""
        cls._platform = None
        cls._candidates = {}
        reset_providers()
