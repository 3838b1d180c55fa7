"""Rewrite passes over the post-grad graph; the manager (``manager.py``) runs them in this order.

A pass follows the contract in ``contract.py`` (find -> read parameters -> gate/verify -> emit, each candidate
ending as a match or a near-miss that the manager records). Names and ops come from ``rocm_inductor.registry``.
"""

from __future__ import annotations

import functools

from ..registry import PASSES


@functools.lru_cache(maxsize=1)
def _passes() -> tuple:
    from .all_reduce_norm import AllReduceNormPass
    from .attention import AttentionPass
    from .gemm_merge import GemmMergePass
    from .glu_gemm import GluGemmPass
    from .moe_experts import MoEExpertsPass
    from .moe_routing import MoeRoutingPass
    from .norm_gemm import NormGemmPass
    from .qkv_rope_kv import QkvRoPEKVPass
    from .rms_norm import RMSNormPass
    from .rope import RoPEPass
    from .rope_kv import RoPEKVPass
    from .sampling import SamplingPass
    from .sigmoid_gate import SigmoidGatePass

    # all_reduce_norm after rms_norm: it extends the norms that pass rewrote with the all-reduce before them.
    # gemm_merge next to last: it groups the projections the other rewrites leave in place; norm_gemm last: it
    # folds the norms rms_norm rewrote into the GEMMs gemm_merge rewrote; glu_gemm after it: it moves the gated
    # activation into the epilogue of the gate/up GEMMs those two wrote.
    # rope_kv right after rope: it folds the rope ops that pass wrote with the K/V cache writes they feed.
    # qkv_rope_kv last: it folds a rope_kv_write into the q/k/v GEMM (merged or with the norm) that feeds it.
    out = (RMSNormPass(), RoPEPass(), RoPEKVPass(), SigmoidGatePass(), MoeRoutingPass(), SamplingPass(),
           AttentionPass(), AllReduceNormPass(), MoEExpertsPass(), GemmMergePass(), NormGemmPass(), GluGemmPass(),
           QkvRoPEKVPass())
    if [(p.name, tuple(p.ops)) for p in out] != [(i.name, i.ops) for i in PASSES]:
        raise RuntimeError("rocm_fused: the pass objects disagree with rocm_inductor.registry.PASSES")
    return out


def all_passes() -> tuple:
    """Every rewrite pass in run order (instances are created once, patterns registered lazily)."""
    return _passes()
