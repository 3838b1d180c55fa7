"""How providers refuse a single small-M GEMM (``merged_gemm`` with one weight), as typed refusals.

A single GEMM is a speed decision over cuBLAS/hipBLASLt, not a merge: a provider takes it only where its own
measurements say it wins, and refuses it otherwise with one of these (``rocm_inductor.refusal`` kinds), which
the ``gemm_merge`` pass branches on: measured slower or refused for another limit is reported, unmeasured is not.
"""

from __future__ import annotations

from ..refusal import MEASURED_REFUSED, MEASURED_SLOWER, NOT_MEASURED, Refusal

#: Most GEMMs one ``merged_gemm`` call takes (q/k/v is 3, gate/up 2; the pass splits larger groups into balanced
#: chunks); the Triton kernel has this many weight pointer slots.
MAX_WEIGHTS = 4

#: Reason prefix of a provider refusing a single GEMM that it measured and cuBLAS won (reported).
SINGLE_SLOWER = "single GEMM measured no faster than cuBLAS"
#: Reason prefix of a provider refusing a single GEMM it has no measurement for (not reported).
SINGLE_UNMEASURED = "single GEMM not measured"
#: Reason prefix of a provider refusing a single GEMM it measured faster, for another limit (e.g. the weight's
#: layout; reported, with that limit).
SINGLE_REFUSED = "single GEMM measured faster than cuBLAS, but refused"


def single_slower(detail: str) -> Refusal:
    """``"single GEMM measured no faster than cuBLAS <detail>"`` (kind ``measured_slower``)."""
    return Refusal(f"{SINGLE_SLOWER}{detail}", MEASURED_SLOWER)


def single_unmeasured(detail: str) -> Refusal:
    """``"single GEMM not measured: <detail>"`` (kind ``not_measured``)."""
    return Refusal(f"{SINGLE_UNMEASURED}: {detail}", NOT_MEASURED)


def single_refused(why: str) -> Refusal:
    """``"single GEMM measured faster than cuBLAS, but refused: <why>"`` (kind ``measured_refused``)."""
    return Refusal(f"{SINGLE_REFUSED}: {why}", MEASURED_REFUSED)
