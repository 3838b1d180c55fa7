"""What the device measured: the merged GEMM's and the RMSNorm prologue's measured rows, read and filtered.

The rows are decisions of the tuning store (``rocm_inductor/tuning``), read back as rows by
``tuning/tables.py:rows`` (one row per GPU name, K, Ns, dtype and M): the shipped entries of every GPU model
(``tuning/shipped/*.json``, converted from the measured tables by ``scripts/convert_tuned_tables.py``), and this
device's own store entries (measured here at level 2), which come first and replace a shipped row of the same shape.

- merged GEMM rows (op ``merged_gemm``): ``benchmarks/sweeps/sweep_decode_gemm.py`` times
  ``gemm_configs.sweep_configs`` per shape and M and writes the fastest, with ours vs separate cuBLAS GEMMs. The
  launcher runs its config first (:func:`table_config`: the smallest measured M >= m), and ``gemm_merge.check``
  refuses merges it says lose (:func:`measured_loss`) and single GEMMs it does not have faster
  (:func:`measured_single`). ``ROCM_FUSED_GEMM_TABLE`` (``gemm_knobs``) names a table file of rows instead (the
  sweep's output, ``{"entries": [rows]}``).
- RMSNorm prologue rows (op ``rms_norm_gemm``): the tiles of ``benchmarks/ops/bench_norm_gemm_pair.py --tiles``
  (:func:`prologue_config`); ``gemm_knobs.override(norm_table=<file>)`` names a table file instead.

A row read from the store carries its decision's ``winner``, which decides it: the rules that made it (the
shipped rows' in ``tuning/tables.py``, a measured row's in ``tuning/tuner.py``: its margin and tie rule) are applied
once, where the decision is made (:func:`lost`). A table file's raw rows have no winner and are compared here.

Each function answers one question from the rows and the device's name; only :func:`load_table` reads (files once
per path, the store through its own per-file cache) and only :func:`_device_name` asks the driver.
"""

from __future__ import annotations

from typing import Any

import torch

from ...refusal import NOT_MEASURED, Refusal
from ...tuning import device as tuning_device
from ...tuning import tables as tuning_tables
from ...tuning.store import default_store
from .._gemm_limits import single_slower, single_unmeasured
from . import gemm_knobs as knobs
from .gemm_configs import Config, prologue_fits

#: What the refusals name as the source of the rows.
TABLE_NAME = "tuning store: merged_gemm"
_TABLE_CACHE: dict[str, Any] = {}


def load_table(path: str | None = None, op: str = tuning_tables.GEMM_OP) -> list[dict]:
    """Rows of ``op`` (``"merged_gemm"`` or ``"rms_norm_gemm"``): of the table file ``path`` (else
    ``ROCM_FUSED_GEMM_TABLE`` for the GEMM; read once per path; empty when absent or unreadable), else of the
    tuning store (this device's entries, then every GPU model's shipped entries).

    Each GEMM row: ``device`` (``torch.cuda.get_device_name``), ``m``, ``k``, ``ns`` (list), ``dtype`` (e.g.
    ``"bfloat16"``), ``config`` (the :class:`Config` fields), ``ours_us``, ``separate_us`` (cuBLAS, one GEMM
    per weight), both us per call in CUDA graphs with the weights streaming from HBM (``tuning/tables.py``).
    """
    import json

    if path is None and op == tuning_tables.GEMM_OP:
        path = knobs.current().table
    if path is None:
        return _store_rows(op)
    if path not in _TABLE_CACHE:
        try:
            with open(path) as f:
                _TABLE_CACHE[path] = list(json.load(f).get("entries", []))
        except (OSError, ValueError):
            _TABLE_CACHE[path] = []
    return _TABLE_CACHE[path]


def lost(row: dict[str, Any], ours: str, theirs: str, margin: float = 0.0) -> bool:
    """Whether ``row`` says our Triton kernel loses: its decision's winner is not ``"triton"`` (a store row),
    or ``row[ours]`` is not below ``row[theirs] * (1 - margin)`` (us per call) where there is no winner (a table
    file's raw row) or a ``margin`` (a single GEMM's: a store file written before the measured singles needed
    it holds 1-3% winners)."""
    if "winner" in row and row["winner"] != "triton":
        return True
    if "winner" not in row or margin > 0:
        return row[ours] >= row[theirs] * (1 - margin)
    return False


def own_bucket_lost(spec: dict[str, Any], margin: float = 0.0) -> bool | None:
    """For a symbolic-M bucket (``spec["m"]`` None), which has no row (``tuning/tables.py:rows``): whether this
    device's own store decision for it (measured here at level 2) says our kernel loses, as :func:`lost` reads a
    row; None when the store has none (or ``m`` is static)."""
    from ...tuning.store import signature

    if spec.get("m") is not None:
        return None
    try:
        d = default_store().lookup(tuning_device.current(), tuning_tables.GEMM_OP,
                                   signature(tuning_tables.GEMM_OP, spec))
    except (OSError, KeyError, TypeError, ValueError):
        return None
    if d is None or d.source != "store" or "triton" not in d.times_us or "inductor" not in d.times_us:
        return None
    return lost({"winner": d.winner, "ours": d.times_us["triton"], "theirs": d.times_us["inductor"]},
                "ours", "theirs", margin)


def _store_rows(op: str) -> list[dict]:
    store = default_store()
    key = tuning_device.current()
    own = [d for d in store.entries(key, op) if d.source == "store"]
    out = tuning_tables.rows(own, key.name)
    have = {(r["k"], tuple(r["ns"]), r["dtype"], r["m"]) for r in out}
    for dev, decisions in store.shipped_all():
        name = dev.get("name", "")
        rows = tuning_tables.rows([d for d in decisions if d.op == op], name)
        out += [r for r in rows if name != key.name or (r["k"], tuple(r["ns"]), r["dtype"], r["m"]) not in have]
    return out


def _device_name() -> str | None:
    if not torch.cuda.is_available():
        return None
    try:
        return torch.cuda.get_device_name(torch.cuda.current_device())
    except Exception:  # no usable device (driver state): no table applies
        return None


def spec_device(spec: dict[str, Any]) -> str | None:
    """The device whose measured tables decide ``spec``: the current GPU's name, or None for a compile of CPU
    tensors (``spec["device_type"] == "cpu"``), which the GPU's table does not describe even on a GPU host (the
    CPU rules apply: :func:`measured_loss` refuses nothing, :func:`measured_single` reads ``"cpu"`` entries)."""
    return None if spec.get("device_type") == "cpu" else _device_name()


def table_entries(k: int, ns: tuple[int, ...], dtype: torch.dtype, device: str | None = None,
                  path: str | None = None, op: str = tuning_tables.GEMM_OP) -> list[dict]:
    """Rows for this device, K, Ns and dtype, sorted by M, of ``op`` at ``path`` (:func:`load_table`'s
    default: this GEMM's rows; ``norm_gemm`` passes ``op="rms_norm_gemm"``)."""
    device = device or _device_name()
    if device is None:
        return []
    dt = str(dtype).replace("torch.", "")
    return sorted((e for e in load_table(path, op) if e.get("device") == device and e.get("k") == k
                   and tuple(e.get("ns", ())) == tuple(ns) and e.get("dtype") == dt), key=lambda e: e["m"])


def table_config(m: int, k: int, ns: tuple[int, ...], dtype: torch.dtype, device: str | None = None
                 ) -> Config | None:
    """The measured config of the smallest measured M >= ``m`` (its BLOCK_M covers ``m``), else None."""
    for e in table_entries(k, ns, dtype, device):
        if e["m"] >= m:
            cfg = Config(**e["config"])
            return cfg if cfg.block_m >= m else None  # one M block per launch: launch() refuses a smaller one
    return None


def _bucket_entries(entries: list[dict], m: int | None, hi: int, beyond: dict | None) -> list[dict]:
    """The table rows (sorted by M) that decide an M bucket: the smallest measured M >= ``hi`` for a static
    ``m``; every row up to it for a symbolic M (``hi`` its upper bound: taken only if it wins at every M it may
    run). ``beyond``: the row to use when no measured M reaches ``hi`` (None: no rows)."""
    cover = next((e for e in entries if e["m"] >= hi), beyond)
    if cover is None:
        return []
    return [cover] if m is not None else [e for e in entries if e["m"] <= cover["m"]]


def decided_m(spec: dict[str, Any], op: str = tuning_tables.GEMM_OP, device: str | None = None) -> int | None:
    """The measured M whose row decides ``spec`` on this device (static M: the smallest measured M >= m; symbolic
    M: the row covering ``m_upper``), or None when no row covers it (the tuning store's signature of the
    decision: ``rocm_inductor.tuning``)."""
    k, ns = spec.get("k"), spec.get("ns")
    hi = spec.get("m") if spec.get("m") is not None else spec.get("m_upper")
    device = device or spec_device(spec)
    if k is None or not ns or None in ns or hi is None or device is None:
        return None
    rows = table_entries(k, tuple(ns), spec.get("dtype"), device, None, op)
    return next((e["m"] for e in rows if e["m"] >= hi), None)


def measured_loss(spec: dict[str, Any], device: str | None = None) -> str | None:
    """Why the table says not to take this merge on this GPU (None: take it).

    Static M: the entry of the smallest measured M >= m; symbolic M: every entry up to the bucket covering
    ``m_upper`` (a bucket is taken only if ours wins at every M it may run). On a GPU the table has entries
    for, a shape it has none for is refused too ("not measured"), and so is every shape on a GPU the table
    has no entry for (the pass's default is on for CUDA only where it measured faster), unless
    ``ROCM_FUSED_GEMM_UNMEASURED=1`` (then the first call tunes it). CPU / the interpreter refuse nothing. A
    symbolic-M bucket without rows is decided by this device's own store decision (:func:`own_bucket_lost`).
    """
    k, ns, dt = spec.get("k"), spec.get("ns"), spec.get("dtype")
    if k is None or ns is None or None in ns:
        return None
    device = device or spec_device(spec)
    if device is None:  # no GPU, or CPU tensors
        return None
    entries = table_entries(k, tuple(ns), dt, device)
    if not entries:
        own = own_bucket_lost(spec)  # measured here at level 2, read back at level 1
        if own is not None:
            return None if not own else (f"measured slower than separate cuBLAS GEMMs on {device} for "
                                         f"M <= {spec.get('m_upper')} ({TABLE_NAME})")
        if not knobs.current().unmeasured:
            what = "shape" if any(e.get("device") == device for e in load_table()) else "GPU"
            return Refusal(f"{what} not measured: K={k} N={'/'.join(map(str, ns))} on {device} (a level-2 compile "
                           "measures it; or run benchmarks/sweeps/sweep_decode_gemm.py, or set "
                           "ROCM_FUSED_GEMM_UNMEASURED=1)", NOT_MEASURED)
        return None
    m = spec.get("m")
    hi = m if m is not None else spec.get("m_upper")
    if hi is None:
        return None
    for e in _bucket_entries(entries, m, hi, entries[-1]):
        if lost(e, "ours_us", "separate_us"):
            return (f"measured slower than separate cuBLAS GEMMs on {e['device']} at M={e['m']}: "
                    f"{e['ours_us']:.1f} vs {e['separate_us']:.1f} us ({TABLE_NAME})")
    return None


#: A single GEMM is taken only when the table has ours faster than cuBLAS by more than this fraction. A guess
#: above the spread of cuBLAS's own time for one weight set across the table's M rows (H200, 2026-12-01:
#: Llama-3.2-1B q/k/v separate 18.02-18.35 us at M = 1-32, 1.8%): a single GEMM gains nothing but speed, so a
#: tie within timing noise stays with cuBLAS (and Inductor keeps fusing around it).
SINGLE_MIN_GAIN = tuning_tables.SINGLE_MIN_GAIN  # 0.03, shared with the shipped decisions' winners


def measured_single(spec: dict[str, Any], device: str | None = None) -> str | None:
    """Whether to take a single GEMM (``spec["count"] == 1``): None only where the measured table has an
    entry for this K, N, dtype and device covering the M bucket (static M: the smallest measured M >= m;
    symbolic M: every entry up to the one covering ``m_upper``) and ours beat cuBLAS by more than
    :data:`SINGLE_MIN_GAIN` in each. Never "unmeasured" (``ROCM_FUSED_GEMM_UNMEASURED`` does not apply),
    on CPU / the interpreter too, where the device is ``"cpu"`` (a table passed in through
    ``ROCM_FUSED_GEMM_TABLE``, as the sweep's ``--device cpu`` writes it). A symbolic-M bucket without rows
    is decided by this device's own store decision (:func:`own_bucket_lost`).

    Returns:
        None (take it), or a typed refusal (``providers/_gemm_limits.py``): measured slower (numbers
        included) or not measured.
    """
    k, ns, dt = spec.get("k"), spec.get("ns"), spec.get("dtype")
    hi = spec.get("m") if spec.get("m") is not None else spec.get("m_upper")
    if k is None or not ns or None in ns or hi is None:
        return single_unmeasured("symbolic K/N or unbounded M")
    device = device or spec_device(spec) or "cpu"
    entries = table_entries(k, tuple(ns), dt, device)
    look = _bucket_entries(entries, spec.get("m"), hi, None)
    if not look:
        own = own_bucket_lost(spec, SINGLE_MIN_GAIN) if spec.get("device_type") != "cpu" else None
        if own is not None:
            return None if not own else single_slower(f" (by > {SINGLE_MIN_GAIN:.0%}) on {device} for M <= {hi} "
                                                      f"({TABLE_NAME})")
        return single_unmeasured(f"K={k} N={ns[0]} M<={hi} on {device}")
    for e in look:
        if lost(e, "ours_us", "separate_us", SINGLE_MIN_GAIN):
            return single_slower(f" (by > {SINGLE_MIN_GAIN:.0%}) on {e['device']} at M={e['m']}: "
                                 f"{e['ours_us']:.2f} vs cuBLAS {e['separate_us']:.2f} us ({TABLE_NAME})")
    return None



#: Measured prologue tiles (``benchmarks/ops/bench_norm_gemm_pair.py --tiles``). The GEMM's own pick is not the best
#: tile with the prologue: each program normalises whole rows itself, so fewer, wider programs pay less of it.
#: H200, M = 1 (2026-12-01, torch 2.11.0+cu130, triton 3.6.0), one launch vs our norm + the GEMM's own pick:
#: Llama-3.2-1B q/k/v 6.14 vs 6.80 us (BLOCK_N 4, 4 warps; the GEMM's pick BLOCK_N 2 x 8 warps with the
#: prologue: 6.54-6.68), gate/up 18.65 vs 19.00; Qwen3-0.6B q/k/v 4.91 vs 5.81, gate/up 6.05 vs 6.63. Re-measured
#: 2026-12-02 (same GPU and versions, 2-3 runs in one process, warps 2-16, results/norm_gemm_pair_repeat_*.md):
#: Llama q/k/v n4 w4 6.15 median (6.00-6.16), Qwen3 q/k/v now n4 w2 4.78 (4.70-4.82; n16 w8 4.91-5.09),
#: gate/up picks unchanged (within 0.05 us of the best). :attr:`gemm_knobs.Knobs.norm_table` names a table file
#: instead. The rows are the store's ``rms_norm_gemm`` decisions (``tuning/shipped/nvidia_h200.json``).


def prologue_config(m: int, k: int, ns: tuple[int, ...], dtype: torch.dtype, device: str | None) -> Config | None:
    """The measured prologue tile of the smallest measured M >= ``m`` on ``device``, where it beat the two launches.

    The rows (op ``rms_norm_gemm``, read by :func:`load_table`) have the GEMM rows' fields, with
    ``fused_us`` (one launch) and ``pair_us`` (our norm kernel + the GEMM) for the times.

    Args:
        m: rows (tokens); k: the norm's width = the GEMMs' K; ns: the GEMMs' N; dtype: x's torch dtype;
        device: ``torch.cuda.get_device_name`` of the GPU (None: the current one; no GPU, no entry).

    Returns:
        a :class:`gemm_configs.Config` whose BLOCK_M covers ``m`` and which takes the prologue, else None (the
        caller uses the GEMM's own config).
    """
    path = knobs.current().norm_table
    row = next((e for e in table_entries(k, ns, dtype, device, path, tuning_tables.NORM_OP) if e["m"] >= m), None)
    if row is None or lost(row, "fused_us", "pair_us"):
        return None
    cfg = Config(**row["config"])
    return cfg if cfg.block_m >= m and prologue_fits(cfg, k) else None
