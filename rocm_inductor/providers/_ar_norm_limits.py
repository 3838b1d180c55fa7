"""Compile-time limits of the vendor all-reduce + add + RMSNorm kernels (spec keys: ``ops/all_reduce_norm.py``).

Data read from the libraries' sources (2026-08 snapshots, paths below); nothing here is measured on a GPU.
"""

from __future__ import annotations

from typing import Any

from ._norm_limits import check_half_same_dtype_weight

#: FlashInfer ``flashinfer/comm/trtllm_ar.py`` + ``include/flashinfer/comm/trtllm_allreduce_fusion.cuh``
#: (0.5.3, 0.6.18 and main): kernels instantiated for 2, 4, 8 and 16 ranks; ``hidden_dim % VEC_SIZE == 0``
#: with 16-byte accesses (8 fp16/bf16 elements).
FLASHINFER_WORLD_SIZES = (2, 4, 8, 16)
FLASHINFER_HIDDEN_MULTIPLE = 8
#: Tokens the IPC workspace we allocate (once per group, hidden size and dtype) holds. Our choice, not
#: measured: it covers decode buckets and 2048-token prefill chunks; the workspace is
#: tp * max_tokens * hidden * 2 bytes plus 3 lamport buffers of tp^2 * max_tokens * hidden * 2 bytes
#: (~400 MiB per rank at tp 2, hidden 8192). Larger token counts stay with Inductor (reported).
FLASHINFER_MAX_TOKENS = 2048

#: AITER ``aiter/dist/device_communicators/communicator_cuda.py:fused_allreduce_rmsnorm``: the fused
#: custom all-reduce kernel runs when ``n <= 16384 and total_bytes < 8 * 1024 * 8192 and world_size != 6``
#: (``CustomAllreduce._SUPPORTED_WORLD_SIZES = [2, 4, 6, 8]``); otherwise AITER silently falls back to an
#: RCCL all-reduce + ``rmsnorm2d_fwd_with_add``, whose bf16 stores truncate (ROCm/aiter#5151): refused here.
#: Its custom all-reduce also needs the input's byte size to be a multiple of 16.
AITER_WORLD_SIZES = (2, 4, 8)
AITER_MAX_HIDDEN = 16384
AITER_MAX_BYTES = 8 * 1024 * 8192  # exclusive bound, 64 MiB


def check_ar_norm(label: str, spec: dict[str, Any], world_sizes: tuple[int, ...], max_tokens: int | None,
                  max_bytes: int | None, hidden_multiple: int, max_hidden: int | None = None) -> str | None:
    """Reasons a vendor fused all-reduce + add + RMSNorm kernel can't take the match ``spec``, or None.

    Args:
        label: library name for messages. world_sizes: rank counts it has kernels for.
        max_tokens: largest token count it holds (None: no token limit). max_bytes: exclusive bound on the
            input's bytes at the largest token count (None: none). hidden_multiple / max_hidden: hidden-size
            constraints.
    """
    reason = check_half_same_dtype_weight(label, spec)
    if reason is not None:
        return reason
    ws, h = spec.get("world_size"), spec.get("hidden")
    if ws is None:
        return f"the all-reduce's group {spec.get('group_name')!r} is not known in this process at compile time"
    if ws not in world_sizes:
        return f"{label} has no fused all-reduce kernel for {ws} ranks (has {list(world_sizes)})"
    if not isinstance(h, int) or h % hidden_multiple or (max_hidden is not None and h > max_hidden):
        limit = f" <= {max_hidden}" if max_hidden is not None else ""
        return f"hidden size {h} is not a static multiple of {hidden_multiple}{limit}"
    t = spec.get("max_tokens")
    if (max_tokens is not None or max_bytes is not None) and t is None:
        return ("the token count is symbolic with no upper bound: the kernel's buffers are sized at compile time "
                "(bound it: torch._dynamo.mark_dynamic(x, 0, max=N))")
    if max_tokens is not None and t > max_tokens:
        return f"{t} tokens exceed the {max_tokens}-token workspace: this all-reduce stays with Inductor"
    if max_bytes is not None:
        nbytes = t * h * spec["dtype"].itemsize
        if nbytes >= max_bytes:
            return (f"{t} tokens x {h} x {spec['dtype'].itemsize} B = {nbytes} B is over {label}'s fused-kernel "
                    f"limit ({max_bytes} B): it would fall back to an unfused path")
    return None
