"""Custom ops of the ``rocm_fused`` namespace (``torch.ops.rocm_fused.*``), one module per op family.

Each op is a ``torch.library.custom_op`` with exact ``mutates_args``, a fake implementation for tracing,
and a trailing ``provider: str`` argument that the pass bakes into the graph at compile time; the op body
calls that provider (``rocm_inductor.providers``). Importing this package registers every op.
"""

# Registers rocm_fused::rms_norm, ::fused_add_rms_norm (rms_norm), ::rope, ::rope_cached (rope),
# ::sample (sampling), ::sigmoid_gate (sigmoid_gate), ::decode_attention (attention),
# ::all_reduce_add_rms_norm (all_reduce_norm), ::merged_gemm (gemm_merge), ::rms_norm_gemm (norm_gemm),
# ::glu_gemm, ::rms_norm_glu_gemm (glu_gemm),
# ::moe_routing (moe_routing), ::moe_experts (moe_experts), ::rope_kv_write (rope_kv),
# ::qkv_rope_kv (qkv_rope_kv). One statement (ruff's isort, I001, merges them), one name per line.
from . import (  # noqa: F401
    all_reduce_norm,
    attention,
    gemm_merge,
    glu_gemm,
    moe_experts,
    moe_routing,
    norm_gemm,
    qkv_rope_kv,
    rms_norm,
    rope,
    rope_kv,
    sampling,
    sigmoid_gate,
)
