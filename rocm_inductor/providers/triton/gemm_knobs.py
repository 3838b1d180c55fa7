"""The switches of the merged GEMM and its RMSNorm-prologue form, read in one place (:func:`current`).

The launcher (``gemm_merge``), the measured tables (``gemm_tables``) and ``norm_gemm`` read every switch through
:func:`current`; code that wants other values for a while (tests, benchmarks) uses :func:`override`. The
environment variables, where set, win over both (read at each :func:`current` call, as before they became data):

- ``ROCM_FUSED_GEMM_PDL=0/1``: :attr:`Knobs.pdl` off / on;
- ``ROCM_FUSED_GEMM_TUNE=0``: :attr:`Knobs.tune` off (``1``: on);
- ``ROCM_FUSED_GEMM_UNMEASURED=1``: :attr:`Knobs.unmeasured` on (``0``: off);
- ``ROCM_FUSED_GEMM_TABLE=<path>`` (non-empty): :attr:`Knobs.table`.

Other values of a variable leave the knob as it is.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
from collections.abc import Iterator


@dataclasses.dataclass(frozen=True)
class Knobs:
    """The merged GEMM's switches (defaults: what the package ships with).

    Attributes:
        pdl: programmatic dependent launch (Hopper+): launch the main kernel with ``launch_pdl=True`` and its
            ``PDL`` form (``gdc_launch_dependents()`` first; the full-K GEMV tile issues its weight loads, then
            ``gdc_wait()``, then reads x), so its start and weight stream overlap the preceding kernel's tail.
            False: never; True or None: wherever ``gemm_merge.pdl_available``. Off: measured slower where it
            matters (H200, torch 2.11.0+cu130, triton 3.6.0, 2026-12-01, ``benchmarks/ops/bench_pdl_gemm.py``,
            Llama-3.2-1B q/k/v at M = 1, us per call in CUDA graphs, weights rotated; the capture keeps PDL: 4
            programmatic edges in a 4-pair graph): back to back 5.27 -> 5.00 us, but after a producer kernel (what
            the decode step has) an ATen elementwise + GEMM pair 6.34 -> 6.78 us and an Inductor add + RMSNorm +
            GEMM pair 6.75 -> 6.97 us; the Llama-3.2-1B B = 1 decode step (only gemm_merge on, 65 of our
            launches) 1198.1 -> 1241.2 us. Outputs bitwise equal (benchmarks/RESULTS.md, "Programmatic dependent
            launch for the decode GEMV"). With Inductor's own PDL codegen too (``triton.enable_pdl``,
            ``benchmarks/ops/bench_ipdl_pair.py``, same H200 and versions): the (add + RMSNorm, q/k/v) pair
            6.73 -> 5.86 us, but the B = 1 step 1189.1 -> 1197.3 us: still off (benchmarks/RESULTS.md, same
            section).
        tune: time the candidate configs at the first call of an unmeasured shape on a GPU outside capture
            (``gemm_merge.pick_config``); off: the default config.
        unmeasured: take merges (and RMSNorm folds) of shapes or GPUs the measured tables have no entry for
            (the first call then tunes them); off: refused as "not measured".
        table: the merged GEMM's measured table file (None: the tuning store's ``merged_gemm`` entries).
        norm_table: the RMSNorm prologue's measured table file (None: the tuning store's ``rms_norm_gemm`` entries).
    """

    pdl: bool | None = False
    tune: bool = True
    unmeasured: bool = False
    table: str | None = None
    norm_table: str | None = None


_SET = Knobs()  # what override() set (the defaults outside any override)


def _flag(value: str | None, knob: bool | None) -> bool | None:
    """``"1"`` -> True, ``"0"`` -> False, anything else (unset included) -> ``knob``."""
    return {"1": True, "0": False}.get(value, knob) if value is not None else knob


@functools.lru_cache(maxsize=64)
def _resolve(base: Knobs, pdl: str | None, tune: str | None, unmeasured: str | None, table: str | None) -> Knobs:
    return Knobs(pdl=_flag(pdl, base.pdl), tune=_flag(tune, base.tune), unmeasured=_flag(unmeasured, base.unmeasured),
                 table=table or base.table, norm_table=base.norm_table)


def current() -> Knobs:
    """The switches in force: the innermost :func:`override`'s values (else the defaults), with the environment
    variables of the module docstring applied over them. Cheap (a cached lookup): the launcher calls it per launch."""
    env = os.environ
    return _resolve(_SET, env.get("ROCM_FUSED_GEMM_PDL"), env.get("ROCM_FUSED_GEMM_TUNE"),
                    env.get("ROCM_FUSED_GEMM_UNMEASURED"), env.get("ROCM_FUSED_GEMM_TABLE"))


@contextlib.contextmanager
def override(**changes) -> Iterator[Knobs]:
    """Run the ``with`` block with these :class:`Knobs` fields changed (process-wide, as the switches are; nested
    overrides stack), e.g. ``with override(pdl=True): ...``. Yields the knobs set (before the environment).

    Raises:
        TypeError: a name that is not a :class:`Knobs` field.
    """
    global _SET
    saved = _SET
    _SET = dataclasses.replace(saved, **changes)
    try:
        yield _SET
    finally:
        _SET = saved
