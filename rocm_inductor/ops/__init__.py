"""Custom ops of the ``rocm_fused`` namespace (``torch.ops.rocm_fused.*``), one module per op family.

Each op is a ``torch.library.custom_op`` with exact ``mutates_args``, a fake implementation for tracing,
and a trailing ``provider: str`` argument that the pass bakes into the graph at compile time; the op body
calls that provider (``rocm_inductor.providers``). Importing this package registers every op.
"""

from . import rms_norm  # noqa: F401  (registers rocm_fused::rms_norm, rocm_fused::fused_add_rms_norm)
from . import rope  # noqa: F401  (registers rocm_fused::rope, rocm_fused::rope_cached)
from . import sampling  # noqa: F401  (registers rocm_fused::sample)
from . import sigmoid_gate  # noqa: F401  (registers rocm_fused::sigmoid_gate)
