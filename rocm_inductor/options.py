"""The one options object of the ``rocm_fused`` backend.

``torch.compile(model, backend="rocm_fused", options={...})`` hands us a plain dict; :func:`parse_options`
turns it into a frozen, hashable :class:`Options` (so it can enter Inductor's FX graph cache key) and
rejects unknown keys with the list of valid ones.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from .registry import PASS_NAMES, op_families

#: Environment switches the passes read at compile time; their values enter the FX graph cache key
#: (``passes/manager.py``). ``ROCM_FUSED_ATTN_POSITIONS=0``: the attention pass keeps the causal mask as a mask
#: tensor instead of the op's ``positions=`` (``passes/attention/positions.py``; an A/B switch).
COMPILE_ENV = ("ROCM_FUSED_ATTN_POSITIONS",)

#: Provider names a user may force (see ``rocm_inductor.providers``).
PROVIDER_NAMES = ("reference", "triton", "flashinfer", "amd_flashinfer", "aiter")

#: The Inductor config slot our pass manager takes. Our passes run first among the post-grad passes: before
#: Inductor's own pattern passes fold a residual add into the GEMM's bias (``addmm``) and hide it from the fused
#: add + RMSNorm pattern.
PASS_HOOK = "post_grad_custom_pre_pass"

#: Inductor config names the backend sets itself: ``inductor_config`` may not replace them.
BACKEND_OWNED_CONFIG = (PASS_HOOK, "inductor_choices_class")


#: Kernel features that are off until measured, switched on by name (``options={"features": {name: True}}``), so a
#: benchmark can A/B them in one process (the choice is part of the compile, and of the cache key):
#: - ``norm_gemm_dot``: the RMSNorm fold (``norm_gemm``) at M 2..32 with the dot tile's prologue on a GPU, where
#:   no measured prologue tile says so (``providers/triton/norm_gemm.py``).
FEATURES = ("norm_gemm_dot",)


@dataclasses.dataclass(frozen=True)
class Options:
    """Validated options of one ``rocm_fused`` compile.

    Attributes:
        level: 0 = plain Inductor (no rewrites), 1 = rewrites with Inductor defaults (default),
            2 = rewrites + max-autotune with ATen GEMMs for small-M buckets.
        provider: force one provider for every op (``"reference"`` makes the passes rewrite on CPU).
        providers: per-op provider override, e.g. ``{"fused_add_rms_norm": "triton"}``; wins over
            ``provider``. A pass name (``"rms_norm"``, ``"rope"``, ``"sampling"``, ...) covers every op of
            that pass (``"rms_norm"``: ``rms_norm`` and ``fused_add_rms_norm``); an op named itself wins.
        passes: per-pass enable/disable override, e.g. ``{"sigmoid_gate": True}``; a pass not named
            here follows the platform policy (``rocm_inductor.policy``).
        strict: re-raise errors from our passes instead of warning and compiling the graph untouched.
        aten_gemm_max_m: largest GEMM M (tokens) kept on ATen under level 2; also the decode-bucket limit of
            the gemm_merge pass (0 turns both off).
        cudagraphs: force CUDA graphs on/off (``None`` = what the level or mode implies).
        features: kernel features off until measured, by name (:data:`FEATURES`), e.g.
            ``{"norm_gemm_dot": True}``; stored as sorted ``(name, bool)`` pairs.
        inductor_config: Inductor config patches applied last, over what the level sets, as
            ``torch.compile(backend="inductor", options=...)`` takes them, e.g.
            ``{"coordinate_descent_tuning": False}``; stored as sorted ``(name, value)`` pairs.
    """

    level: int = 1
    provider: str | None = None
    providers: tuple[tuple[str, str], ...] = ()
    passes: tuple[tuple[str, bool], ...] = ()
    strict: bool = False
    aten_gemm_max_m: int = 32
    cudagraphs: bool | None = None
    inductor_config: tuple[tuple[str, Any], ...] = ()
    features: tuple[tuple[str, bool], ...] = ()

    def feature(self, name: str) -> bool:
        """Whether kernel feature ``name`` (:data:`FEATURES`) was switched on."""
        return bool(dict(self.features).get(name, False))

    def provider_for(self, op: str) -> str | None:
        """The provider forced for ``op`` (str) by the options, or ``None`` to let the platform choose.

        Order: ``providers[op]``, then ``providers[<the pass that emits op>]``, then ``provider``.
        """
        per = dict(self.providers)
        if op in per:
            return per[op]
        family = op_families().get(op)
        return per.get(family, self.provider) if family is not None else self.provider

    def pass_enabled(self, name: str) -> bool | None:
        """The user's explicit on/off for pass ``name``, or ``None`` when the policy decides."""
        return dict(self.passes).get(name)

    def key(self) -> str:
        """A stable string of every field, for cache keys."""
        return repr(dataclasses.astuple(self))


_FIELDS = tuple(f.name for f in dataclasses.fields(Options))


def _check_providers_keys(providers: Mapping[str, Any]) -> None:
    fam = op_families()
    valid = sorted(set(fam) | set(fam.values()))
    unknown = sorted(k for k in providers if k not in valid)
    if unknown:
        raise ValueError(f"rocm_fused: providers has unknown op name(s) {unknown}; valid names are {valid} "
                         f"(a pass name covers its ops: {_family_text(fam)})")


def _family_text(fam: dict[str, str]) -> str:
    by: dict[str, list[str]] = {}
    for op, p in fam.items():
        by.setdefault(p, []).append(op)
    return ", ".join(f"{p} -> {'/'.join(ops)}" for p, ops in by.items())


def _check_choice(name: str, value: Any, allowed: tuple) -> None:
    if value not in allowed:
        raise ValueError(f"rocm_fused: option {name}={value!r} is not one of {list(allowed)}")


def _inductor_config(patches: Any) -> tuple[tuple[str, Any], ...]:
    """Validate ``inductor_config``: a mapping of existing Inductor config names to hashable values."""
    if patches is None:
        return ()
    if not isinstance(patches, Mapping):
        raise ValueError(f"rocm_fused: inductor_config must be a dict, got {type(patches).__name__}")
    import torch._inductor.config as inductor_config

    valid = set(inductor_config._config)  # every config name, dotted ("triton.cudagraphs") included
    unknown = sorted(set(patches) - valid)
    if unknown:
        raise ValueError(f"rocm_fused: inductor_config has unknown Inductor config name(s) {unknown}")
    owned = sorted(set(patches) & set(BACKEND_OWNED_CONFIG))
    if owned:
        raise ValueError(f"rocm_fused: inductor_config may not set {owned}: the backend installs its pass "
                         "manager and GEMM override there (a pass set in torch._inductor.config is chained)")
    for name, value in patches.items():
        try:
            hash(value)
        except TypeError:
            raise ValueError(f"rocm_fused: inductor_config[{name!r}] must be hashable, got "
                             f"{type(value).__name__}") from None
    return tuple(sorted(patches.items()))


def parse_options(options: Mapping[str, Any] | Options | None) -> Options:
    """Turn the user's ``options=`` dict into :class:`Options`.

    Args:
        options: ``None``, an :class:`Options` (validated like a mapping), or a mapping whose keys are
            :class:`Options` fields.

    Returns:
        The validated, frozen options.

    Raises:
        ValueError: an unknown key (the message lists the valid ones), an invalid value, an unknown op or
            pass name in ``providers``, or an ``inductor_config`` name Inductor does not have.
        TypeError: ``options`` is neither a mapping nor ``Options``.
    """
    if options is None:
        return Options()
    if isinstance(options, Options):  # built by hand, so validated like a dict (its pairs back to dicts)
        options = {f: getattr(options, f) for f in _FIELDS}
        for name in ("providers", "passes", "inductor_config", "features"):
            options[name] = dict(options[name] or ())
    if not isinstance(options, Mapping):
        raise TypeError(f"rocm_fused: options must be a dict, got {type(options).__name__}")
    unknown = sorted(set(options) - set(_FIELDS))
    if unknown:
        raise ValueError(f"rocm_fused: unknown option(s) {unknown}; valid options are {list(_FIELDS)}")
    kw = dict(options)
    level = kw.get("level", 1)
    if type(level) is not int:  # True == 1 and 2.0 == 2 would pass the membership test
        raise ValueError(f"rocm_fused: option level={level!r} is not one of [0, 1, 2]")
    _check_choice("level", level, (0, 1, 2))
    if kw.get("provider") is not None:
        _check_choice("provider", kw["provider"], PROVIDER_NAMES)
    providers = kw.get("providers") or {}
    if not isinstance(providers, Mapping):
        raise ValueError(f"rocm_fused: providers must be a dict of op name -> provider, got "
                         f"{type(providers).__name__}")
    _check_providers_keys(providers)
    for op, prov in dict(providers).items():
        _check_choice(f"providers[{op!r}]", prov, PROVIDER_NAMES)
    kw["providers"] = tuple(sorted(dict(providers).items()))
    passes = kw.get("passes") or {}
    for name, on in dict(passes).items():
        _check_choice("passes key", name, PASS_NAMES)
        if not isinstance(on, bool):
            raise ValueError(f"rocm_fused: passes[{name!r}] must be True or False, got {on!r}")
    kw["passes"] = tuple(sorted(dict(passes).items()))
    features = kw.get("features") or {}
    if not isinstance(features, Mapping):
        raise ValueError(f"rocm_fused: features must be a dict of name -> bool, got {type(features).__name__}")
    for name, on in dict(features).items():
        _check_choice("features key", name, FEATURES)
        if not isinstance(on, bool):
            raise ValueError(f"rocm_fused: features[{name!r}] must be True or False, got {on!r}")
    kw["features"] = tuple(sorted(dict(features).items()))
    m = kw.get("aten_gemm_max_m", 32)
    if not isinstance(m, int) or isinstance(m, bool) or m < 0:
        raise ValueError(f"rocm_fused: aten_gemm_max_m must be an int >= 0, got {m!r}")
    for flag in ("strict",):
        if not isinstance(kw.get(flag, False), bool):
            raise ValueError(f"rocm_fused: {flag} must be a bool")
    if kw.get("cudagraphs") not in (None, True, False):
        raise ValueError("rocm_fused: cudagraphs must be None, True or False")
    kw["inductor_config"] = _inductor_config(kw.get("inductor_config"))
    return Options(**kw)
