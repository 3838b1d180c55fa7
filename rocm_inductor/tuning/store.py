"""The decision store: per device key, op and shape/dtype signature, the winner and the measured times.

On disk, one JSON file per :meth:`~rocm_inductor.tuning.device.DeviceKey.id` under the store's root (default:
``<Inductor cache dir>/rocm_fused/tuning``, so copying an Inductor cache dir to another machine carries it)::

    {"format": 1, "device": {DeviceKey fields}, "entries": {"<op>|<signature>": {Decision fields}}}

Shipped entries (``rocm_inductor/tuning/shipped/*.json``, the measurements this repository made) have the same
entry format as a list, under a ``device`` that names only the GPU model (``name``, ``arch``): they apply to any
versions of that GPU model, after this device's own entries.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import threading
from pathlib import Path
from typing import Any

import torch

from .device import DeviceKey

#: The store file format; a file of another format is ignored (read as empty).
FORMAT = 1

#: The packaged shipped entries, one file per GPU model.
SHIPPED_DIR = Path(__file__).parent / "shipped"

#: Environment variable naming another store root (benchmarks measure "from an empty store" with it).
ROOT_ENV = "ROCM_FUSED_TUNING_DIR"
#: Environment variable: ``"0"`` ignores the shipped entries (a store that starts truly empty: what a GPU model
#: without shipped entries sees; ``benchmarks/e2e/tuning.py``'s ``tuned_from_empty``).
SHIPPED_ENV = "ROCM_FUSED_TUNING_SHIPPED"


def shipped_enabled() -> bool:
    """False when :data:`SHIPPED_ENV` is ``"0"`` (the shipped entries are then ignored everywhere)."""
    return os.environ.get(SHIPPED_ENV, "1").strip() != "0"


@dataclasses.dataclass(frozen=True)
class Decision:
    """One decision for one (op, signature) on one device.

    Attributes:
        op: an op name of ``rocm_inductor/registry.py`` (``"rms_norm"``, ``"merged_gemm"``, ``"rope"``, ...).
        signature: :func:`signature` of the op's spec.
        winner: ``"inductor"`` (leave the region to Inductor) or a provider name (``"triton"``, ...).
        config: the winner's kernel config (e.g. the GEMM tile's fields), or None.
        times_us: candidate label -> median us per call (``"inductor"``, ``"triton"``, ``"triton:BM16..."``).
        source: ``"measured"`` (now), ``"store"`` (measured on this device earlier), ``"shipped:<gpu name>"``
            or ``"default"`` (not measured on this device).
        evidence: for shipped / default: the results file and row (``"benchmarks/results/runs/x.csv, run <id>"``).
    """

    op: str
    signature: str
    winner: str
    config: dict | None
    times_us: dict
    source: str
    evidence: str = ""

    def to_json(self) -> dict[str, Any]:
        """The entry as stored (every field)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Decision:
        """An entry read back (unknown keys ignored).

        Raises:
            KeyError / TypeError: a required field is missing or malformed.
        """
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    def times_line(self) -> str:
        """The times in one line, fastest first: ``"triton 5.4us, inductor 18.0us"`` (empty without times)."""
        items = sorted(self.times_us.items(), key=lambda kv: kv[1])
        return ", ".join(f"{k} {v:.1f}us" for k, v in items)


def _text(v: Any) -> str:
    if isinstance(v, torch.dtype):
        return str(v).replace("torch.", "")
    if isinstance(v, (tuple, list)):
        return "/".join(_text(x) for x in v)
    if v is None:
        return "?"
    if isinstance(v, bool):
        return str(int(v))
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


#: Spec keys that enter the signature, per op (others: every key whose value is a number, string, bool, dtype or
#: a tuple of them). The GEMM ops keep the shipped tables' key fields, so a level-2 measurement and a shipped row
#: of the same shape have the same signature.
SIGNATURE_KEYS: dict[str, tuple[str, ...]] = {
    "merged_gemm": ("dtype", "k", "ns", "m", "m_upper"),
    "rms_norm_gemm": ("dtype", "k", "ns", "m", "m_upper"),
}


def signature(op: str, spec: dict[str, Any]) -> str:
    """A stable text of the spec's shape and dtype fields: ``"dtype=bfloat16,k=2048,m=1,ns=2048/512/512"``.

    Args:
        op: the op name (selects :data:`SIGNATURE_KEYS`); spec: the op's compile-time spec (``ops/*.py``
            ``*_spec``): ints, None for symbolic sizes (written ``?``), torch dtypes, tuples of them.

    Returns:
        ``key=value`` pairs sorted by key, joined by ``,``; tuples joined by ``/``. For an op of
        :data:`SIGNATURE_KEYS`, keys whose value is None are left out, and ``m_upper`` when ``m`` is static.
    """
    keys = SIGNATURE_KEYS.get(op)
    parts = []
    for k in sorted(keys if keys is not None else spec):
        v = spec.get(k)
        if keys is not None and (v is None or (k == "m_upper" and spec.get("m") is not None)):
            continue
        if v is not None and not isinstance(v, (int, float, str, bool, torch.dtype, tuple, list)):
            continue
        parts.append(f"{k}={_text(v)}")
    return ",".join(parts)


def parse_signature(sig: str) -> dict[str, str]:
    """The ``key=value`` pairs of a :func:`signature` (values as text)."""
    return dict(p.split("=", 1) for p in sig.split(",") if "=" in p)


def default_root() -> Path:
    """``$ROCM_FUSED_TUNING_DIR``, else ``<torch._inductor cache_dir()>/rocm_fused/tuning``."""
    env = os.environ.get(ROOT_ENV)
    if env:
        return Path(env)
    try:
        from torch._inductor.runtime.cache_dir_utils import cache_dir
    except ImportError:  # older layout
        from torch._inductor.utils import cache_dir  # type: ignore[no-redef]
    return Path(cache_dir()) / "rocm_fused" / "tuning"


def _key_json(key: DeviceKey) -> dict[str, Any]:
    d = dataclasses.asdict(key)
    d["providers"] = [list(p) for p in key.providers]
    return d


class DecisionStore:
    """The decisions of every device key under one root directory (see module docstring).

    Reads are cached per file (by its modification time); :meth:`record` rewrites the key's file atomically,
    so concurrent compiles never read half a file (the last writer's entries win for a given op and signature).
    """

    def __init__(self, root: Path | None = None, shipped: Path | None | str = "packaged") -> None:
        """Args: root: the store directory (None: :func:`default_root`); shipped: the directory of shipped
        entries (default: :data:`SHIPPED_DIR`; None: none)."""
        self.root = Path(root) if root is not None else default_root()
        shipped = SHIPPED_DIR if shipped == "packaged" else shipped
        self.shipped_dir = Path(shipped) if shipped is not None else None
        self._cache: dict[str, tuple[int, dict[str, Any]]] = {}
        self._lock = threading.Lock()

    # -- files --------------------------------------------------------------------------------------------
    def path(self, key: DeviceKey) -> Path:
        """The file of ``key``'s decisions."""
        return self.root / f"{key.id()}.json"

    def _read(self, path: Path) -> dict[str, Any]:
        try:
            mtime = path.stat().st_mtime_ns
        except OSError:
            return {}
        hit = self._cache.get(str(path))
        if hit is not None and hit[0] == mtime:
            return hit[1]
        try:
            with open(path) as f:
                data = json.load(f)
        except (OSError, ValueError):
            data = {}
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            data = {}
        self._cache[str(path)] = (mtime, data)
        return data

    def _own(self, key: DeviceKey) -> dict[str, Decision]:
        out = {}
        for k, e in (self._read(self.path(key)).get("entries") or {}).items():
            try:
                out[k] = Decision.from_json(e)
            except (KeyError, TypeError):
                continue
        return out

    def shipped_all(self) -> list[tuple[dict[str, Any], list[Decision]]]:
        """Every shipped file's ``device`` (``{"name", "arch"}``) and decisions, in file-name order."""
        if self.shipped_dir is None or not self.shipped_dir.is_dir() or not shipped_enabled():
            return []
        out = []
        for path in sorted(self.shipped_dir.glob("*.json")):
            data = self._read(path)
            decisions = []
            for e in data.get("entries") or []:
                try:
                    decisions.append(Decision.from_json(e))
                except (KeyError, TypeError):
                    continue
            out.append((dict(data.get("device") or {}), decisions))
        return out

    def shipped(self, key: DeviceKey) -> list[Decision]:
        """Shipped entries whose device matches ``key``: the same name (and arch, where the file names one)."""
        return [d for dev, ds in self.shipped_all()
                if dev.get("name") == key.name and dev.get("arch", key.arch) == key.arch for d in ds]

    def fingerprint(self, key: DeviceKey) -> bytes:
        """The bytes of ``key``'s file (empty when it has none): what a compile's cache key must cover, since
        the entries decide what the passes emit."""
        try:
            return self.path(key).read_bytes()
        except OSError:
            return b""

    # -- the interface -------------------------------------------------------------------------------------
    def lookup(self, key: DeviceKey, op: str, signature: str) -> Decision | None:
        """The decision for (op, signature) on ``key``: this device's entry (``source="store"``), else a shipped
        entry for its GPU model (``source="shipped:<name>"``), else None."""
        own = self._own(key).get(f"{op}|{signature}")
        if own is not None:
            return dataclasses.replace(own, source="store")
        for d in self.shipped(key):
            if d.op == op and d.signature == signature:
                return d
        return None

    def entries(self, key: DeviceKey, op: str) -> list[Decision]:
        """Every decision for ``op`` on ``key``: this device's (``source="store"``) first, then the shipped ones
        whose signature it does not have (for readers that pick among shapes, e.g. the GEMM's M buckets)."""
        own = [dataclasses.replace(d, source="store") for d in self._own(key).values() if d.op == op]
        have = {d.signature for d in own}
        return own + [d for d in self.shipped(key) if d.op == op and d.signature not in have]

    def has_own(self, key: DeviceKey, ops: tuple[str, ...] | list[str]) -> bool:
        """Whether ``key``'s own file holds an entry of one of ``ops``."""
        return any(d.op in ops for d in self._own(key).values())

    def record(self, key: DeviceKey, decision: Decision) -> None:
        """Add or replace ``decision`` in ``key``'s file, written atomically (a temporary file in the same
        directory, then ``os.replace``).

        Raises:
            OSError: the root cannot be created or written.
        """
        with self._lock:
            self.root.mkdir(parents=True, exist_ok=True)
            path = self.path(key)
            data = self._read(path)
            entries = dict(data.get("entries") or {})
            entries[f"{decision.op}|{decision.signature}"] = decision.to_json()
            out = {"format": FORMAT, "device": _key_json(key), "entries": entries}
            fd, tmp = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=self.root)
            try:
                with os.fdopen(fd, "w") as f:
                    json.dump(out, f, indent=1, sort_keys=True)
                os.replace(tmp, path)
            except BaseException:
                with _suppress():
                    os.unlink(tmp)
                raise
            self._cache.pop(str(path), None)


def _suppress():
    import contextlib

    return contextlib.suppress(OSError)


_DEFAULT: dict[str, DecisionStore] = {}


def default_store() -> DecisionStore:
    """The store at :func:`default_root` (one instance per root, so its read cache is shared)."""
    root = str(default_root())
    if root not in _DEFAULT:
        _DEFAULT[root] = DecisionStore(Path(root))
    return _DEFAULT[root]
