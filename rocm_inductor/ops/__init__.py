"""Custom ops of the ``rocm_fused`` namespace (``torch.ops.rocm_fused.*``), one module per op family.

Each op is a ``torch.library.custom_op`` with exact ``mutates_args``, a fake implementation for tracing,
and a trailing ``provider: str`` argument that the pass bakes into the graph at compile time; the op body
calls that provider (``rocm_inductor.providers``). Importing this package registers every op.
"""

# Registers rocm_fused::rms_norm, ::fused_add_rms_norm (rms_norm), ::rope, ::rope_cached (rope),
# ::sample (sampling), ::sigmoid_gate (sigmoid_gate), ::decode_attention (attention),
# ::all_reduce_add_rms_norm (all_reduce_norm), ::merged_gemm (gemm_merge), ::rms_norm_gemm (norm_gemm). One
# statement: ruff's isort (I001) merges them.
from . import all_reduce_norm, attention, gemm_merge, norm_gemm, rms_norm, rope, sampling, sigmoid_gate  # noqa: F401

# Registers rocm_fused::moe_experts (moe_experts); a statement of its own so that families added side by side
# do not rewrite one shared line.
from .moe_experts import moe_experts as _moe_experts  # noqa: F401
