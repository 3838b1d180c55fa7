"""``rocm_fused::qkv_rope_kv``: a decode layer's attention prologue in one op (issue 31).

Meaning (pure-torch reference: ``rocm_inductor.providers.reference.qkv_rope_kv_ref``): the composition of the two
ops the ``norm_gemm`` / ``gemm_merge`` and ``rope_kv`` passes write, in order,

    [q2, k2, v2] (+ s) = rms_norm_gemm(x, residual, norm_weight, eps, offset, weights, biases)   (eps not None)
    [q2, k2, v2]       = merged_gemm(x, weights, biases)                                          (eps None)
    q = q2.view(B, S, H_q, D).transpose(1, 2)        (k, v likewise with H_kv: HF's / gpt-fast's head split)
    q_rot = rope_kv_write(q, k, v, cos, sin, k_cache, v_cache, positions, rotary_dim, interleaved, half_table)

and the op returns ``(q_rot, s)``: q_rot (B, H_q, S, D) contiguous, s the residual sum (x's shape) or an empty (0,)
tensor without a residual (a mutating op returns tensors, not a list: Inductor's auto-functionalization takes no
``List[Tensor]`` return). Each
stage rounds where the unfused graph rounds (the projections to the model dtype, then the rotation in float32
rounded once), so the op is the two ops' composition, not a new numerical recipe. S is ``positions.shape[0]``, B is
M / S (M = x.numel() / K: row m of x is token (m // S, m % S), as the projections' ``view(B, S, -1, D)`` reads
it), D is the caches' head_dim, H_q = N_q / D, H_kv = N_k / D = the caches' head count.

Shapes: x (..., K) float16/bfloat16/float32; residual x's shape or None; norm_weight (K,) or None; weights three
(N_i, K) of x's dtype (q, k, v; N_k == N_v); biases three (N_i,) or None; cos/sin broadcastable to (B, H, S,
rotary_dim) of q and of k (``half_table``: rotary_dim // 2); k_cache, v_cache (B, H_kv, max_len, D) of x's dtype,
mutated in place at rows ``positions`` (a position outside [0, max_len) writes nothing, as ``rope_kv_write``).

Compile-time spec keys read by providers' ``check`` (built by :func:`qkv_rope_kv_spec`): the GEMMs' and the norm's
(``rocm_inductor.ops.norm_gemm.norm_gemm_spec``, with ``normed`` saying whether there is a norm), the RoPE's
(``rocm_inductor.ops.rope_kv.rope_kv_spec`` of the head views), and ``heads`` / ``kv_heads`` / ``batch``.
"""

from __future__ import annotations

from typing import Any

import torch

from ..providers import get_provider
from .gemm_merge import merged_gemm_spec
from .norm_gemm import _validate as _validate_norm_gemm
from .rms_norm import norm_spec
from .rope_kv import check_args as _check_rope_kv
from .rope_kv import rope_kv_spec


def head_views(x: Any, weights: list[Any], k_cache: Any, positions: Any) -> tuple[Any, Any, Any]:
    """The (B, H, S, D) views of the three projections, from the shapes alone: what the unfused graph hands
    ``rope_kv_write``. Meta tensors of x's dtype (shape, strides and dtype only): the op's body checks them on
    every call, so they allocate nothing.

    Raises:
        ValueError: three weights are not given, M is not a multiple of S, or an N is not a multiple of D.
    """
    if len(weights) != 3:
        raise ValueError(f"qkv_rope_kv takes three weights (q, k, v), got {len(weights)}")
    s, d = positions.shape[0], k_cache.shape[-1]
    m = x.numel() // x.shape[-1] if x.ndim else 1
    if s == 0 or m % s:
        raise ValueError(f"qkv_rope_kv: {m} rows of x are not a whole batch of S={s} tokens")
    b = m // s
    out = []
    for name, w in zip("qkv", weights, strict=True):
        if w.ndim != 2 or w.shape[0] % d:
            raise ValueError(f"qkv_rope_kv: {name} weight {tuple(w.shape)} is not (heads * {d}, K)")
        out.append(torch.empty((b, s, w.shape[0] // d, d), dtype=x.dtype, device="meta").transpose(1, 2))
    return tuple(out)


def check_args(x, residual, norm_weight, eps, weights, biases, cos, k_cache, v_cache, positions,
               rotary_dim) -> None:
    """The op's shape/dtype contract (works on real and fake tensors).

    Raises:
        ValueError: what ``rms_norm_gemm`` / ``merged_gemm`` and ``rope_kv_write`` refuse on the composed shapes,
            a residual or norm weight without a norm (``eps`` None), or head views that do not chain.
    """
    if eps is None and (residual is not None or norm_weight is not None):
        raise ValueError("qkv_rope_kv: a residual or norm weight needs eps (eps None means no RMSNorm)")
    _validate_norm_gemm(x, residual, norm_weight, weights, biases)
    q, k, v = head_views(x, weights, k_cache, positions)
    _check_rope_kv(q, k, v, k_cache, v_cache, positions, rotary_dim)
    if cos.dtype.is_complex:
        raise ValueError(f"qkv_rope_kv: cos/sin must be real, got {cos.dtype}")


@torch.library.custom_op("rocm_fused::qkv_rope_kv", mutates_args=("k_cache", "v_cache"))
def qkv_rope_kv(
    x: torch.Tensor, residual: torch.Tensor | None, norm_weight: torch.Tensor | None, eps: float | None,
    offset: float, weights: list[torch.Tensor], biases: list[torch.Tensor | None], cos: torch.Tensor,
    sin: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, positions: torch.Tensor, rotary_dim: int,
    interleaved: bool, half_table: bool, provider: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """RMSNorm (optional) + q/k/v GEMMs + q/k RoPE + the K/V cache writes, by ``provider`` (module docstring).

    A provider's ``qkv_rope_kv`` returns ``[q_rot]``, then ``s`` when ``residual`` is given.

    Args:
        x: (..., K) float16/bfloat16/float32: the norm's input (``eps`` given) or the projections' input.
        residual: x's shape and dtype (the add before the norm), or None. norm_weight: (K,) or None.
        eps: the norm's epsilon, or None for no norm. offset: 0.0, or 1.0 for Gemma's ``(1 + weight)``.
        weights: [w_q, w_k, w_v], (N_i, K) of x's dtype. biases: three (N_i,) or None.
        cos, sin: as ``rocm_fused::rope_kv_write``, broadcast against the (B, H, S, D) head views.
        k_cache, v_cache: (B, H_kv, max_len, D) of x's dtype; mutated in place (rows ``positions``).
        positions: (S,) int32/int64. rotary_dim, interleaved, half_table: as ``rocm_fused::rope``.
        provider: chosen at compile time.

    Returns:
        ``(q_rot, s)``: q_rot (B, H_q, S, D) contiguous, x's dtype; s the residual sum (x's shape) when ``residual``
        is given, else an empty (0,) tensor of x's dtype.

    Raises:
        ValueError: :func:`check_args`. KeyError: unknown provider. ProviderUnavailable: its library is missing.
    """
    check_args(x, residual, norm_weight, eps, weights, biases, cos, k_cache, v_cache, positions, rotary_dim)
    outs = get_provider(provider).qkv_rope_kv(x, residual, norm_weight, eps, offset, list(weights), list(biases),
                                              cos, sin, k_cache, v_cache, positions, rotary_dim, interleaved,
                                              half_table)
    s = outs[1].contiguous() if residual is not None else x.new_empty((0,))
    return outs[0].contiguous(), s


@qkv_rope_kv.register_fake
def _qkv_rope_kv_fake(x, residual, norm_weight, eps, offset, weights, biases, cos, sin, k_cache, v_cache,
                      positions, rotary_dim, interleaved, half_table, provider):
    check_args(x, residual, norm_weight, eps, weights, biases, cos, k_cache, v_cache, positions, rotary_dim)
    q = head_views(x, weights, k_cache, positions)[0]
    s = torch.empty(x.shape if residual is not None else (0,), dtype=x.dtype, device=x.device)
    return torch.empty(q.shape, dtype=x.dtype, device=x.device), s


def qkv_rope_kv_spec(x: Any, residual: Any, norm_weight: Any, normed: bool, offset: float, weights: list[Any],
                     biases: list[Any], table: Any, k_cache: Any, positions: Any, rotary_dim: int,
                     interleaved: bool, half_table: bool, m_upper: int | None) -> dict[str, Any]:
    """The compile-time spec of a fold from fake tensors (``node.meta["val"]``): the module docstring's keys.

    Raises:
        ValueError: :func:`head_views` (shapes that do not split into heads).
    """
    spec = merged_gemm_spec(x.reshape(-1, x.shape[-1]), weights, biases, m_upper)
    spec.update(norm_spec(x, norm_weight, offset, residual is not None))
    q, k, v = head_views(x, weights, k_cache, positions)
    spec.update(rope_kv_spec(q, k, v, table, k_cache, rotary_dim, interleaved, half_table))
    spec.update(normed=normed, heads=q.shape[1], kv_heads=k.shape[1], batch=q.shape[0], dtype=x.dtype)
    return spec
