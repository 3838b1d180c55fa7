"""The pass registry as data: every rewrite pass by name, in run order, with the custom ops it emits.

A leaf module (no package imports), so ``options`` can validate pass and op names without importing the
passes, and the passes read their own names and ops from here (``passes/__init__.py`` checks that every
registered pass object agrees with this table).
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class PassInfo:
    """One rewrite pass: ``name`` (what ``options={"passes": {...}}`` takes) and ``ops`` (the
    ``rocm_fused::*`` op names it may emit; ``options={"providers": {...}}`` takes them too)."""

    name: str
    ops: tuple[str, ...]


#: Every rewrite pass in the order the pass manager runs them (``passes/__init__.py`` says why the order is
#: what it is: a pass that folds other passes' ops runs after them).
PASSES: tuple[PassInfo, ...] = (
    PassInfo("rms_norm", ("rms_norm", "fused_add_rms_norm")),
    PassInfo("rope", ("rope", "rope_cached")),
    # rope_kv right after rope: it folds the rope ops that pass wrote with the K/V cache writes they feed.
    PassInfo("rope_kv", ("rope_kv_write",)),
    PassInfo("sigmoid_gate", ("sigmoid_gate",)),
    PassInfo("moe_routing", ("moe_routing",)),
    PassInfo("sampling", ("sample",)),
    PassInfo("attention", ("decode_attention",)),
    PassInfo("all_reduce_norm", ("all_reduce_add_rms_norm",)),
    # moe_experts before gemm_merge: its region holds the router's top-k outputs, not GEMMs gemm_merge groups.
    PassInfo("moe_experts", ("moe_experts",)),
    PassInfo("gemm_merge", ("merged_gemm",)),
    PassInfo("norm_gemm", ("rms_norm_gemm",)),
    # glu_gemm after both: it moves the gated activation into the epilogue of what they wrote.
    PassInfo("glu_gemm", ("glu_gemm", "rms_norm_glu_gemm")),
    # qkv_rope_kv last: it folds a rope_kv_write into the q/k/v GEMM (merged_gemm / rms_norm_gemm) that feeds it.
    PassInfo("qkv_rope_kv", ("qkv_rope_kv",)),
)

#: Pass names in run order.
PASS_NAMES: tuple[str, ...] = tuple(p.name for p in PASSES)


def ops_of(name: str) -> tuple[str, ...]:
    """The op names pass ``name`` emits.

    Raises:
        KeyError: no pass of that name.
    """
    for p in PASSES:
        if p.name == name:
            return p.ops
    raise KeyError(f"rocm_fused: no pass named {name!r}; passes are {list(PASS_NAMES)}")


def op_families() -> dict[str, str]:
    """Custom op name -> the pass that emits it (``{"fused_add_rms_norm": "rms_norm", ...}``)."""
    return {op: p.name for p in PASSES for op in p.ops}
