"""``rocm_fused::rope_kv_write``: RoPE of q and k plus the K/V cache writes of a decode step, one op (issue 31).

Meaning (pure-torch reference: ``rocm_inductor.providers.reference.rope_kv_write_ref``):

    q_rot, k_rot = rope(q, k, cos, sin, rotary_dim, interleaved, half_table)     (``rocm_fused::rope``'s math)
    k_cache[:, :, positions] = k_rot          v_cache[:, :, positions] = v       (in place)
    return q_rot

i.e. HF ``apply_rotary_pos_emb`` followed by ``StaticCache.update`` (``index_copy_(2, cache_position, ...)``) or
gpt-fast's ``KVCache.update`` (``k_cache[:, :, input_pos] = k``); in the post-grad graph both are
``index_put(cache, [None, None, positions], value)`` with the result copied back into the cache input. RoPE is
computed in float32 (float64 for float64 input) and rounded once to k's dtype, like ``rocm_fused::rope``.

Layout: k, v (B, H_kv, S, D) (any strides: HF's transposed projections are read in place); k_cache, v_cache
(B, H_kv, max_len, D) of k's dtype (HF StaticCache, gpt-fast KVCache), any strides; positions (S,) integer; q any
(..., D) of k's dtype (its rotation is returned contiguous). A position outside [0, max_len) writes nothing in
every provider (a serving kernel cannot raise without a host sync; eager ``index_put`` would raise on CPU and
fault or assert on a GPU): the pass only rewrites graphs where eager writes in range, so this never differs
from eager on a valid step. Duplicate positions: which write wins is unspecified (as for eager ``index_put``).

Compile-time spec keys read by providers' ``check`` (built by :func:`rope_kv_spec`): ``rocm_fused::rope``'s
(:func:`rocm_inductor.ops.rope.rope_spec`) plus cache_dtype, v_dtype, max_len, seq_len (int or None).
"""

from __future__ import annotations

from typing import Any

import torch

from ..providers import get_provider
from .rope import rope_spec


def check_args(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
               positions: torch.Tensor, rotary_dim: int) -> None:
    """The op's shape/dtype contract (works on real and fake tensors).

    Raises:
        ValueError: k/v/caches not 4-D of one (B, H_kv, *, D), dtypes that differ, positions not an (S,) integer
            tensor, or rotary_dim odd / outside [2, D].
    """
    for name, t in (("k", k), ("v", v), ("k_cache", k_cache), ("v_cache", v_cache)):
        if t.dim() != 4:
            raise ValueError(f"rope_kv_write: {name} must be 4-D (B, H_kv, S or max_len, D), is {tuple(t.shape)}")
    b, h, s, d = k.shape
    if tuple(v.shape) != tuple(k.shape):
        raise ValueError(f"rope_kv_write: v {tuple(v.shape)} != k {tuple(k.shape)}")
    for name, c in (("k_cache", k_cache), ("v_cache", v_cache)):
        if (c.shape[0], c.shape[1], c.shape[3]) != (b, h, d):
            raise ValueError(f"rope_kv_write: {name} {tuple(c.shape)} is not (B={b}, H_kv={h}, max_len, D={d})")
    if tuple(k_cache.shape) != tuple(v_cache.shape):
        raise ValueError(f"rope_kv_write: k_cache {tuple(k_cache.shape)} != v_cache {tuple(v_cache.shape)}")
    if q.dim() < 1 or q.shape[-1] != d:
        raise ValueError(f"rope_kv_write: q {tuple(q.shape)} does not end in head_dim {d}")
    dts = {q.dtype, k.dtype, v.dtype, k_cache.dtype, v_cache.dtype}
    if len(dts) != 1:
        raise ValueError(f"rope_kv_write: q, k, v and the caches must share one dtype, got {sorted(map(str, dts))}")
    if positions.is_floating_point() or positions.is_complex() or positions.dtype == torch.bool:
        raise ValueError(f"rope_kv_write: positions must be an integer tensor, got {positions.dtype}")
    if positions.dim() != 1 or positions.shape[0] != s:
        raise ValueError(f"rope_kv_write: positions {tuple(positions.shape)} is not (S={s},)")
    if rotary_dim % 2 or not 2 <= rotary_dim <= d:
        raise ValueError(f"rope_kv_write: rotary_dim {rotary_dim} must be even and in [2, head_dim={d}]")


@torch.library.custom_op("rocm_fused::rope_kv_write", mutates_args=("k_cache", "v_cache"))
def rope_kv_write(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
    k_cache: torch.Tensor, v_cache: torch.Tensor, positions: torch.Tensor, rotary_dim: int, interleaved: bool,
    half_table: bool, provider: str,
) -> torch.Tensor:
    """RoPE of q and k, rotated k and v written into the caches at ``positions``, by ``provider``.

    Args:
        q: (..., D) float16/bfloat16/float32 (float64 for the reference), any strides.
        k, v: (B, H_kv, S, D) of q's dtype, any strides.
        cos, sin: broadcastable to (..., rotary_dim) of q and of k (``half_table``: (..., rotary_dim // 2)).
        k_cache, v_cache: (B, H_kv, max_len, D) of q's dtype; mutated in place (rows ``positions``).
        positions: (S,) int32/int64; a position outside [0, max_len) writes nothing (module docstring).
        rotary_dim, interleaved, half_table: as ``rocm_fused::rope``. provider: chosen at compile time.

    Returns:
        q_rot: q's shape, contiguous, q's dtype.

    Raises:
        ValueError: :func:`check_args`, or (from the provider) tables that don't broadcast.
        KeyError: unknown provider. ProviderUnavailable: its library cannot be imported here.
    """
    check_args(q, k, v, k_cache, v_cache, positions, rotary_dim)
    out = get_provider(provider).rope_kv_write(q, k, v, cos, sin, k_cache, v_cache, positions, rotary_dim,
                                               interleaved, half_table)
    return out.contiguous()


@rope_kv_write.register_fake
def _rope_kv_write_fake(q, k, v, cos, sin, k_cache, v_cache, positions, rotary_dim, interleaved, half_table,
                        provider):
    check_args(q, k, v, k_cache, v_cache, positions, rotary_dim)
    return torch.empty(q.shape, dtype=q.dtype, device=q.device)


def rope_kv_spec(q: Any, k: Any, v: Any, table: Any, k_cache: Any, rotary_dim: int, interleaved: bool,
                 half_table: bool) -> dict[str, Any]:
    """The compile-time spec of a ``rope_kv_write`` match from fake tensors (``node.meta["val"]``).

    Returns:
        :func:`rocm_inductor.ops.rope.rope_spec`'s keys (head axis 1 of k) plus ``cache_dtype``, ``v_dtype``,
        ``max_len`` and ``seq_len`` (ints, or None when symbolic).
    """
    spec = rope_spec(q, k, table, rotary_dim, interleaved, half_table, cached=False, head_axis=1)
    spec["k_heads"] = k.shape[1] if isinstance(k.shape[1], int) else None
    spec.update(cache_dtype=k_cache.dtype, v_dtype=v.dtype,
                max_len=k_cache.shape[2] if isinstance(k_cache.shape[2], int) else None,
                seq_len=k.shape[2] if isinstance(k.shape[2], int) else None)
    return spec
