"""The device key a tuning decision is valid for: GPU model, arch, unit count and library versions.

A decision measured on one device holds only for the same GPU model with the same compute-unit count and the
same torch / Triton / vendor-library versions (a new Triton can change every kernel's speed); any difference is
another key, hence another store file (:meth:`DeviceKey.id`), hence a miss. Tests fake a device with
:func:`override`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import importlib.metadata
import importlib.util
import sys
from collections.abc import Iterator

import torch

#: Vendor libraries whose version is part of the key: (provider name, import name, pip distributions).
#: Read through ``importlib.metadata`` without importing the library (the AMD fork raises on import on an
#: unsupported arch, docs/vendors.md); ``flashinfer`` and ``amd_flashinfer`` share the import name.
_PROVIDER_DISTS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("flashinfer", "flashinfer", ("flashinfer-python", "flashinfer")),
    ("amd_flashinfer", "flashinfer", ("amd-flashinfer",)),
    ("aiter", "aiter", ("aiter", "amd-aiter")),
)


@dataclasses.dataclass(frozen=True)
class DeviceKey:
    """What a decision depends on besides the op and its shapes.

    Attributes:
        name: ``torch.cuda.get_device_name()`` (``"NVIDIA H200"``, ``"AMD Instinct MI300X"``), or ``"cpu"``.
        arch: ``"sm_90"`` (CUDA), ``"gfx942"`` (ROCm, features stripped) or ``"cpu"``.
        units: SM / CU count (``multi_processor_count``); 0 on CPU.
        torch: ``torch.__version__``; triton: ``triton.__version__`` (``"none"`` when not installed).
        providers: ``(provider, version)`` of each importable vendor library, sorted.
    """

    name: str
    arch: str
    units: int
    torch: str
    triton: str
    providers: tuple[tuple[str, str], ...] = ()

    def id(self) -> str:
        """A short stable hash of every field (16 hex digits): the store's file name for this key."""
        text = "|".join([self.name, self.arch, str(self.units), self.torch, self.triton,
                         ",".join(f"{p}={v}" for p, v in self.providers)])
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def describe(self) -> str:
        """One line for reports: ``"NVIDIA H200 (sm_90, 132 units)"``."""
        return f"{self.name} ({self.arch}, {self.units} units)"


_OVERRIDE: list[DeviceKey] = []


def _triton_version() -> str:
    try:
        return importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        return "none"


def _providers() -> tuple[tuple[str, str], ...]:
    out = []
    for prov, mod, dists in _PROVIDER_DISTS:
        try:
            found = importlib.util.find_spec(mod) is not None
        except (ImportError, ValueError):  # a module in sys.modules without __spec__ (a stand-in, a shim)
            found = mod in sys.modules
        if not found:
            continue
        for dist in dists:
            try:
                out.append((prov, importlib.metadata.version(dist)))
                break
            except importlib.metadata.PackageNotFoundError:
                continue
    return tuple(sorted(out))


@functools.lru_cache(maxsize=4)
def _detect(device_type: str) -> DeviceKey:
    versions = dict(torch=str(torch.__version__), triton=_triton_version(), providers=_providers())
    if device_type == "cpu" or not torch.cuda.is_available():
        return DeviceKey("cpu", "cpu", 0, **versions)
    props = torch.cuda.get_device_properties(0)
    if getattr(torch.version, "hip", None):
        arch = str(getattr(props, "gcnArchName", "")).split(":")[0] or "gfx"
    else:
        arch = f"sm_{props.major}{props.minor}"
    return DeviceKey(str(props.name), arch, int(props.multi_processor_count), **versions)


def reset() -> None:
    """Forget the detected keys (a test that patches the versions or the device)."""
    _detect.cache_clear()


def current(device_type: str = "cuda") -> DeviceKey:
    """The key of device 0 of ``device_type`` (the innermost :func:`override` when one is active).

    ``"cuda"`` covers ROCm too (HIP devices are ``torch.cuda`` devices); without a GPU, or for
    ``device_type="cpu"``, the key is ``DeviceKey("cpu", "cpu", 0, ...)``. Detected once per process and device
    type (:func:`reset` forgets it).
    """
    if _OVERRIDE:
        return _OVERRIDE[-1]
    return _detect("cpu" if device_type == "cpu" else "cuda")


@contextlib.contextmanager
def override(key: DeviceKey) -> Iterator[DeviceKey]:
    """Make :func:`current` return ``key`` inside the block (a fake device for tests)."""
    _OVERRIDE.append(key)
    try:
        yield key
    finally:
        _OVERRIDE.pop()
