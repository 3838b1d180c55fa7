"""``rocm_fused::rope`` (cos/sin given, "on-the-fly") and ``rocm_fused::rope_cached`` (table by position).

Meaning (pure-torch reference: ``rocm_inductor.providers.reference.rope_ref`` / ``rope_cached_ref``), for
each of ``q`` and ``k`` (``x`` below, shape (..., D)), with ``rd = rotary_dim`` and ``h = rd // 2``:

    pairs (a, b): NeoX (rotate_half, ``interleaved=False``) (j, j+h); GPT-J (``interleaved=True``) (2j, 2j+1)
    out[a] = x[a] * cos[a] - x[b] * sin[a]        out[b] = x[b] * cos[b] + x[a] * sin[b]
    out[rd:] = x[rd:]                             (partial rotary: the tail is copied untouched)

i.e. exactly ``x * cos + rotate(x) * sin`` of HF's ``apply_rotary_pos_emb`` / GPT-J's ``rotate_every_two``
(RoFormer, Su et al. 2021, arXiv:2104.09864), computed in float32 (or wider when an input is wider) and
rounded once to ``x.dtype`` (round-to-nearest-even). Outputs are fresh contiguous tensors; the ops are
functional (``mutates_args=()``).

Tables:
- ``rope``: ``cos``/``sin`` are what the model computed, any float dtype, broadcastable to
  ``x[..., :rd]`` (``half_table=False``: last dim rd, one value per output element) or to
  ``x[..., :h]``-shaped pairs (``half_table=True``: last dim h, one value per pair — the complex
  ``freqs_cis`` form, or a NeoX/GPT-J table proven to repeat per pair). Broadcasting is per tensor, so q
  and k may have different head counts.
- ``rope_cached``: ``cos_sin_cache`` float32 [max_pos, rd] (cos half then sin half, FlashInfer's layout),
  row chosen per token by ``positions`` (int64, broadcastable to ``x.shape[:-1]``). A position outside
  [0, max_pos) is **clamped** to the nearest row (-1 -> row 0, max_pos + 5 -> row max_pos - 1) in every
  provider: a serving step must not sync the host to check positions (a device-side raise is not CUDA/HIP
  graph capture-safe), and no provider may read outside the table (garbage or a fault). Clamping keeps
  padded slots (position -1 or 0) harmless; a real position beyond the table is a caller bug that
  clamping does not hide from a logit check: build the table for the model's ``max_position_embeddings``.

Compile-time spec keys read by providers' ``check`` (built by :func:`rope_spec`):
    dtype, k_dtype (None without k), table_dtype, head_dim (int or None if symbolic), rotary_dim,
    interleaved, half_table, ndim, cached, q_heads, k_heads (ints or None: the head-axis sizes when known).
"""

from __future__ import annotations

from typing import Any

import torch

from ..providers import get_provider


def _out(x: torch.Tensor) -> torch.Tensor:
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


def _no_k(q: torch.Tensor) -> torch.Tensor:
    # custom_op return types cannot be optional: a missing k gives an empty tensor.
    return torch.empty((0,), dtype=q.dtype, device=q.device)


@torch.library.custom_op("rocm_fused::rope", mutates_args=())
def rope(
    q: torch.Tensor, k: torch.Tensor | None, cos: torch.Tensor, sin: torch.Tensor, rotary_dim: int,
    interleaved: bool, half_table: bool, provider: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotary embedding of q and k in one call, cos/sin supplied by the model (see module docstring).

    Args:
        q: (..., D) float16/bfloat16/float32/float64, any strides. k: (..., D) same dtype, or None.
        cos, sin: tables broadcastable to (..., rotary_dim) (or (..., rotary_dim // 2) when
            ``half_table``), any float dtype; broadcast separately against q and k.
        rotary_dim: even, 2 <= rotary_dim <= D. interleaved: GPT-J pairs (True) or NeoX halves (False).
        half_table: cos/sin hold one value per pair. provider: provider name chosen at compile time.

    Returns:
        ``(q_out, k_out)`` contiguous, dtypes of q and k; ``k_out`` is an empty (0,) tensor when k is None.

    Raises:
        KeyError: unknown provider. ProviderUnavailable: its library cannot be imported here.
        ValueError: (from the provider) shapes that don't broadcast, odd rotary_dim.
    """
    qo, ko = get_provider(provider).rope(q, k, cos, sin, rotary_dim, interleaved, half_table)
    return qo.contiguous(), (_no_k(q) if k is None else ko.contiguous())


@rope.register_fake
def _rope_fake(q, k, cos, sin, rotary_dim, interleaved, half_table, provider):
    return _out(q), (_no_k(q) if k is None else _out(k))


@torch.library.custom_op("rocm_fused::rope_cached", mutates_args=())
def rope_cached(
    q: torch.Tensor, k: torch.Tensor | None, positions: torch.Tensor, cos_sin_cache: torch.Tensor,
    rotary_dim: int, interleaved: bool, provider: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotary embedding of q and k with a float32 cos/sin table indexed by position.

    Args:
        q, k: as in :func:`rope`.
        positions: int32/int64, broadcastable to ``q.shape[:-1]`` and ``k.shape[:-1]`` (e.g. (b, 1, s) for
            (b, h, s, d) layouts); values outside [0, max_pos) are clamped to [0, max_pos - 1] (module
            docstring), the same in every provider (Triton in its kernel, the others before the call).
        cos_sin_cache: float32 (max_pos, rotary_dim), contiguous; row p = cat(cos(p * inv_freq),
            sin(p * inv_freq)) (built by :func:`build_cos_sin_cache`).
        rotary_dim, interleaved, provider: as in :func:`rope`.

    Returns:
        ``(q_out, k_out)`` as in :func:`rope`.

    Raises:
        KeyError / ProviderUnavailable / ValueError: as in :func:`rope`; ValueError for a table with no
            rows or non-integer positions.
    """
    if cos_sin_cache.dim() < 1 or cos_sin_cache.shape[0] < 1:
        raise ValueError(f"cos_sin_cache {tuple(cos_sin_cache.shape)} has no rows")
    if positions.is_floating_point() or positions.is_complex() or positions.dtype == torch.bool:
        raise ValueError(f"positions must be an integer tensor, got {positions.dtype}")
    impl = get_provider(provider)
    if not getattr(impl, "clamps_rope_positions", False):  # Triton clamps in its kernel (no extra launch)
        positions = positions.clamp(0, cos_sin_cache.shape[0] - 1)
    qo, ko = impl.rope_cached(q, k, positions, cos_sin_cache, rotary_dim, interleaved)
    return qo.contiguous(), (_no_k(q) if k is None else ko.contiguous())


@rope_cached.register_fake
def _rope_cached_fake(q, k, positions, cos_sin_cache, rotary_dim, interleaved, provider):
    return _out(q), (_no_k(q) if k is None else _out(k))


def build_cos_sin_cache(inv_freq: torch.Tensor, max_pos: int, scaling: float = 1.0,
                        device: torch.device | str | None = None) -> torch.Tensor:
    """The NeoX-layout float32 cos/sin table: angles in float64, rounded once to float32.

    ``angle[p, j] = p * float64(inv_freq[j])``; row p = ``cat(cos(angle) * scaling, sin(angle) * scaling)``
    computed in float64 and rounded once (round-to-nearest-even) to float32 — at least as exact as HF's
    float32 ``pos.float() * inv_freq`` (whose float32 product loses up to 0.5 ulp of the angle, i.e. up to
    ~4e-3 rad at position 2**16).

    Args:
        inv_freq: (rotary_dim // 2,) any float dtype (HF's ``inv_freq`` buffer, float32).
        max_pos: number of rows (positions 0 .. max_pos - 1), >= 1.
        scaling: HF's ``attention_scaling`` (1.0 unless YaRN/LongRoPE).
        device: where the table lives (default: ``inv_freq.device``).

    Returns:
        (max_pos, rotary_dim) float32, contiguous.

    Raises:
        ValueError: max_pos < 1 or inv_freq not 1-D.
    """
    if max_pos < 1 or inv_freq.dim() != 1:
        raise ValueError(f"need max_pos >= 1 and a 1-D inv_freq, got {max_pos}, {tuple(inv_freq.shape)}")
    dev = inv_freq.device if device is None else device
    pos = torch.arange(max_pos, dtype=torch.float64, device="cpu")
    ang = pos[:, None] * inv_freq.detach().to("cpu", torch.float64)[None, :]
    table = torch.cat([ang.cos() * scaling, ang.sin() * scaling], dim=-1)
    return table.to(torch.float32).to(dev).contiguous()


def _static(v: Any) -> int | None:
    return v if isinstance(v, int) else None


def rope_spec(q: Any, k: Any, table: Any, rotary_dim: int, interleaved: bool, half_table: bool,
              cached: bool, head_axis: int | None = None) -> dict[str, Any]:
    """Build the compile-time spec of a RoPE match from fake tensors (``node.meta["val"]``).

    Args:
        q, k: fake tensors (k may be None); table: the cos (or cos_sin_cache) fake tensor.
        rotary_dim, interleaved, half_table, cached: as in the ops. head_axis: the dim of q/k that holds
            heads (the dim the table broadcasts over), if known.

    Returns:
        dict with the keys listed in the module docstring.
    """
    def heads(x: Any) -> int | None:
        return None if x is None or head_axis is None else _static(x.shape[head_axis])

    return {
        "dtype": q.dtype,
        "k_dtype": None if k is None else k.dtype,
        "table_dtype": table.dtype,
        "head_dim": _static(q.shape[-1]),
        "rotary_dim": rotary_dim,
        "interleaved": interleaved,
        "half_table": half_table,
        "ndim": q.ndim,
        "cached": cached,
        "q_heads": heads(q),
        "k_heads": heads(k),
        "tokens": _tokens(q, head_axis),
    }


def _tokens(q: Any, head_axis: int | None) -> int | None:
    """Tokens rotated: q's elements over heads x head_dim (the tuning store's key: RoPE wins at 1 token and loses
    from 32 up on the H200, shipped "rope" entries); None when a size is symbolic or the head axis unknown."""
    if head_axis is None:
        return None
    n, h, d = _static(q.numel()), _static(q.shape[head_axis]), _static(q.shape[-1])
    return n // (h * d) if n is not None and h and d else None
