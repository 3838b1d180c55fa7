"""Pure-torch reference provider: defines what each ``rocm_fused`` op means, runs anywhere.

It is the provider the pass tests and the CPU example force (``options={"provider": "reference"}``) and the
ground truth the other providers are compared with.
"""

from __future__ import annotations

import torch

from ._gemm_limits import single_unmeasured
from .base import Provider


def rms_norm_ref(x: torch.Tensor, weight: torch.Tensor | None, eps: float, offset: float) -> torch.Tensor:
    """RMSNorm (Zhang & Sennrich 2019, arXiv:1910.07467) over the last dim, computed in float32.

    ``y = x / sqrt(mean(x**2, -1) + eps) * (weight + offset)``, rounded once to ``x.dtype``
    (round-to-nearest-even, torch's cast).

    Args:
        x: (..., H) float16/bfloat16/float32, any strides.
        weight: (H,) any float dtype, or ``None`` for a weightless norm.
        eps: added to the mean square (float).
        offset: added to the weight in float32 (1.0 for Gemma's ``1 + w``, else 0.0).

    Returns:
        (..., H) tensor of ``x.dtype``, contiguous.
    """
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    if weight is not None:
        y = y * (weight.float() + offset)
    return y.to(x.dtype).contiguous()


def fused_add_rms_norm_ref(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None, eps: float, offset: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Residual add then RMSNorm, as HF pre-norm decoders do it.

    ``s = x + residual`` rounded to the model dtype (the add happens in the model dtype in eager code),
    ``y = rms_norm_ref(s, weight, eps, offset)``: the norm of the *rounded* sum, which is what the op means
    (``rocm_inductor.ops.rms_norm``). FlashInfer's kernel normalises the unrounded float32 sum: its ``y`` is
    within one ulp of this (its ``s`` is bit-equal), inside the numerics contract (docs/ops.md).

    Args:
        x, residual: (..., H) of one float dtype.
        weight, eps, offset: as in :func:`rms_norm_ref`.

    Returns:
        ``(y, s)``, both (..., H) of ``x.dtype``, contiguous.
    """
    s = (x + residual).contiguous()
    return rms_norm_ref(s, weight, eps, offset), s


def all_reduce_add_rms_norm_ref(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None, eps: float, offset: float,
    group_name: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Tensor-parallel all-reduce (sum) then :func:`fused_add_rms_norm_ref`, as the unfused graph runs it.

    The all-reduce is ``_c10d_functional.all_reduce`` + ``wait_tensor`` (result in ``x.dtype``), so it runs
    on any backend the group has (NCCL/RCCL on GPUs, gloo on CPU). A collective: every rank must call it.

    Args:
        x, residual: (..., H) of one shape and float dtype; weight, eps, offset: as in :func:`rms_norm_ref`.
        group_name: the c10d group's name (as ``_c10d_functional`` ops take it).

    Returns:
        ``(y, s)`` with ``s = all_reduce(x) + residual``, both (..., H) of ``x.dtype``, contiguous.
    """
    fc = torch.ops._c10d_functional
    reduced = fc.wait_tensor(fc.all_reduce(x.contiguous(), "sum", group_name))
    return fused_add_rms_norm_ref(reduced, residual, weight, eps, offset)


def sigmoid_gate_ref(x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """Sigmoid output gate of gated attention (Qwen3-Next, HY-V4): ``x * sigmoid(gate)``.

    Computed in float32 and rounded once to ``x.dtype`` (round-to-nearest-even, torch's cast); eager
    bf16/fp16 code rounds the sigmoid and the product separately.

    Args:
        x, gate: (...) of one shape and one float dtype (float16/bfloat16/float32), any strides.

    Returns:
        (...) tensor of ``x.dtype``, contiguous.
    """
    return (x.float() * torch.sigmoid(gate.float())).to(x.dtype).contiguous()


def _rope_one(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rotary_dim: int, interleaved: bool,
              half_table: bool) -> torch.Tensor:
    """One tensor of :func:`rope_ref` (cos/sin already broadcastable to ``x[..., :rotary_dim]``)."""
    rd = rotary_dim
    if rd % 2 or not 2 <= rd <= x.shape[-1]:
        raise ValueError(f"rotary_dim {rd} must be even and in [2, head_dim={x.shape[-1]}]")
    ct = torch.promote_types(torch.promote_types(x.dtype, cos.dtype), torch.float32)
    xr, c, s = x[..., :rd].to(ct), cos.to(ct), sin.to(ct)
    if half_table:  # one value per pair -> one per element
        c, s = ((t.repeat_interleave(2, -1) if interleaved else torch.cat([t, t], -1)) for t in (c, s))
    if interleaved:
        rot = torch.stack((-xr[..., 1::2], xr[..., ::2]), dim=-1).flatten(-2)
    else:
        rot = torch.cat((-xr[..., rd // 2:], xr[..., : rd // 2]), dim=-1)
    y = (xr * c + rot * s).to(x.dtype)
    if y.shape != xr.shape:
        raise ValueError(f"cos/sin {tuple(cos.shape)} do not broadcast to x[..., :{rd}] {tuple(xr.shape)}")
    return torch.cat([y, x[..., rd:]], dim=-1).contiguous()


def rope_ref(q: torch.Tensor, k: torch.Tensor | None, cos: torch.Tensor, sin: torch.Tensor, rotary_dim: int,
             interleaved: bool, half_table: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Rotary embedding (RoFormer, arXiv:2104.09864) exactly as HF spells it: ``x * cos + rotate(x) * sin``.

    ``rotate`` is NeoX's ``rotate_half`` (``interleaved=False``) or GPT-J's ``rotate_every_two``; only the
    first ``rotary_dim`` features rotate, the rest are copied. Computed in float32 (or wider if an input is
    wider), rounded once to ``x.dtype``.

    Args:
        q, k: (..., D) float tensors, any strides; k may be None.
        cos, sin: broadcastable to (..., rotary_dim), or (..., rotary_dim // 2) when ``half_table``.
        rotary_dim: even, <= D. interleaved / half_table: see ``rocm_inductor.ops.rope``.

    Returns:
        ``(q_out, k_out)`` contiguous (k_out None when k is None).

    Raises:
        ValueError: odd/oversized rotary_dim, or cos/sin that don't broadcast to the rotated part.
    """
    out = [None if x is None else _rope_one(x, cos, sin, rotary_dim, interleaved, half_table) for x in (q, k)]
    return out[0], out[1]


def cos_sin_from_cache(positions: torch.Tensor,
                       cos_sin_cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Gather the half tables of ``positions`` from a NeoX-layout [max_pos, rd] cache: (..., rd/2) each.

    Raises:
        IndexError: a position outside [0, max_pos).
    """
    rows = cos_sin_cache[positions.long()]
    h = cos_sin_cache.shape[-1] // 2
    return rows[..., :h], rows[..., h:]


def rope_cached_ref(q: torch.Tensor, k: torch.Tensor | None, positions: torch.Tensor,
                    cos_sin_cache: torch.Tensor, rotary_dim: int, interleaved: bool):
    """:func:`rope_ref` with the per-pair cos/sin rows of ``cos_sin_cache`` picked by ``positions``.

    Args:
        positions: integer, broadcastable to ``x.shape[:-1]``; cos_sin_cache: float32 (max_pos, rotary_dim).

    Returns / Raises: as :func:`rope_ref`; IndexError for positions outside the table.
    """
    if cos_sin_cache.shape[-1] != rotary_dim:
        raise ValueError(f"cos_sin_cache width {cos_sin_cache.shape[-1]} != rotary_dim {rotary_dim}")
    c, s = cos_sin_from_cache(positions, cos_sin_cache)
    return rope_ref(q, k, c, s, rotary_dim, interleaved, half_table=True)


def _cache_write(cache: torch.Tensor, positions: torch.Tensor, x: torch.Tensor) -> None:
    """``cache[:, :, positions[s]] = x[:, :, s]`` for every in-range position (in place)."""
    pos = positions.long()
    keep = (pos >= 0) & (pos < cache.shape[2])
    if not bool(keep.all()):  # the reference may sync: it is the meaning, not a serving kernel
        pos, x = pos[keep], x[:, :, keep]
    cache[:, :, pos] = x.to(cache.dtype)


def rope_kv_write_ref(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                      k_cache: torch.Tensor, v_cache: torch.Tensor, positions: torch.Tensor, rotary_dim: int,
                      interleaved: bool, half_table: bool) -> torch.Tensor:
    """``rocm_fused::rope_kv_write``: :func:`rope_ref` of q and k, then ``k_cache[:, :, positions] = k_rot`` and
    ``v_cache[:, :, positions] = v`` (HF ``StaticCache.update``'s ``index_copy_(2, cache_position, ...)``, gpt-fast
    ``KVCache.update``'s ``k_cache[:, :, input_pos] = k``); a position outside [0, max_len) writes nothing.

    Args:
        q: (..., D) float; k, v: (B, H_kv, S, D) of q's dtype; cos, sin: as ``rope_ref`` (broadcast per tensor).
        k_cache, v_cache: (B, H_kv, max_len, D) of k's dtype, mutated in place. positions: (S,) integer.
        rotary_dim, interleaved, half_table: as ``rocm_fused::rope``.

    Returns:
        q_rot, contiguous, q's dtype.

    Raises:
        ValueError: as ``rope_ref``.
    """
    q_rot, k_rot = rope_ref(q, k, cos, sin, rotary_dim, interleaved, half_table)
    _cache_write(k_cache, positions, k_rot)
    _cache_write(v_cache, positions, v)
    return q_rot


def merged_gemm_ref(x: torch.Tensor, weights: list[torch.Tensor],
                    biases: list[torch.Tensor | None]) -> list[torch.Tensor]:
    """Several GEMMs of one activation, each exactly as eager computes it alone (``rocm_fused::merged_gemm``).

    ``out[i] = torch.mm(x, w_i.t())`` or ``torch.addmm(b_i, x, w_i.t())``: one separate GEMM per weight, so
    the meaning is that of the unmerged graph (float32 accumulation inside the BLAS for bf16/fp16).

    Args:
        x: (M, K); weights: (N_i, K) each; biases: (N_i,) or None each; one float dtype.

    Returns:
        list of (M, N_i) contiguous tensors of ``x.dtype``.
    """
    return [(torch.mm(x, w.t()) if b is None else torch.addmm(b, x, w.t())).contiguous()
            for w, b in zip(weights, biases, strict=True)]


def rms_norm_gemm_ref(x: torch.Tensor, residual: torch.Tensor | None, norm_weight: torch.Tensor | None, eps: float,
                      offset: float, weights: list[torch.Tensor],
                      biases: list[torch.Tensor | None]) -> list[torch.Tensor]:
    """An RMSNorm (after a residual add when given) and the GEMMs that read it (``rocm_fused::rms_norm_gemm``).

    ``s = x + residual`` (or x), ``y = rms_norm_ref(s, ...)``, ``out[i] = merged_gemm_ref(y as (M, K), ...)``: the
    unfolded graph's two ops, in order.

    Args:
        x, residual: (..., K) of one float dtype (residual may be None); norm_weight: (K,) or None;
        eps, offset: as :func:`rms_norm_ref`; weights, biases: as :func:`merged_gemm_ref`.

    Returns:
        ``[out_0, ..., out_{n-1}]`` ((M, N_i)), then ``s`` when ``residual`` is given.
    """
    if residual is not None:
        y, s = fused_add_rms_norm_ref(x, residual, norm_weight, eps, offset)
    else:
        y, s = rms_norm_ref(x, norm_weight, eps, offset), None
    outs = merged_gemm_ref(y.reshape(-1, y.shape[-1]), weights, biases)
    return outs + ([] if s is None else [s])


def qkv_rope_kv_ref(x: torch.Tensor, residual: torch.Tensor | None, norm_weight: torch.Tensor | None,
                    eps: float | None, offset: float, weights: list[torch.Tensor], biases: list[torch.Tensor | None],
                    cos: torch.Tensor, sin: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                    positions: torch.Tensor, rotary_dim: int, interleaved: bool,
                    half_table: bool) -> list[torch.Tensor]:
    """``rocm_fused::qkv_rope_kv``: :func:`rms_norm_gemm_ref` (``eps`` given) or :func:`merged_gemm_ref` of the q/k/v
    weights, the outputs split into (B, H, S, D) heads (``view(B, S, -1, D).transpose(1, 2)``, S =
    ``positions.shape[0]``, D the caches' head_dim), then :func:`rope_kv_write_ref`: the unfused graph's ops, in order.

    Returns:
        ``[q_rot]`` ((B, H_q, S, D) contiguous), then ``s`` (x's shape) when ``residual`` is given.
    """
    if eps is None:
        outs, s = merged_gemm_ref(x.reshape(-1, x.shape[-1]), weights, biases), None
    else:
        outs = rms_norm_gemm_ref(x, residual, norm_weight, eps, offset, weights, biases)
        outs, s = outs[:3], (outs[3] if residual is not None else None)
    seq, d = positions.shape[0], k_cache.shape[-1]
    q, k, v = (o.view(o.shape[0] // seq, seq, -1, d).transpose(1, 2) for o in outs)
    q_rot = rope_kv_write_ref(q, k, v, cos, sin, k_cache, v_cache, positions, rotary_dim, interleaved, half_table)
    return [q_rot.contiguous()] + ([] if s is None else [s])


def rms_norm_glu_gemm_ref(x: torch.Tensor, residual: torch.Tensor | None, norm_weight: torch.Tensor | None,
                          eps: float, offset: float, w_gate: torch.Tensor, w_up: torch.Tensor,
                          b_gate: torch.Tensor | None, b_up: torch.Tensor | None, activation: str
                          ) -> list[torch.Tensor]:
    """An RMSNorm (after a residual add when given), then ``reference_glu.glu_gemm_ref`` of its output as (M, K)
    (``rocm_fused::rms_norm_glu_gemm``). Returns ``[out]`` ((M, N), x's dtype), then ``s`` when ``residual`` is
    given."""
    from .reference_glu import glu_gemm_ref

    if residual is not None:
        y, s = fused_add_rms_norm_ref(x, residual, norm_weight, eps, offset)
    else:
        y, s = rms_norm_ref(x, norm_weight, eps, offset), None
    out = glu_gemm_ref(y.reshape(-1, y.shape[-1]), w_gate, w_up, b_gate, b_up, activation)
    return [out] + ([] if s is None else [s])


class ReferenceProvider(Provider):
    """Pure-torch implementations of every op (no library, any device, any dtype)."""

    name = "reference"
    library = None
    ops = frozenset({"rms_norm", "fused_add_rms_norm", "sigmoid_gate", "rope", "rope_cached", "sample",
                     "decode_attention", "all_reduce_add_rms_norm", "merged_gemm", "rms_norm_gemm"})
    ops = ops | {"moe_routing", "moe_experts"}  # reference_moe.py, reference_moe_experts.py
    ops = ops | {"glu_gemm", "rms_norm_glu_gemm"}  # reference_glu.py
    ops = ops | {"rope_kv_write", "qkv_rope_kv"}

    def check(self, op, spec):
        """Every op, except a single GEMM (``merged_gemm`` with one weight): that is a speed choice over
        cuBLAS, and the reference (which calls ATen's GEMM) has nothing measured to offer."""
        reason = super().check(op, spec)
        if reason is None and op == "merged_gemm" and spec.get("count") == 1:
            return single_unmeasured("the reference is ATen's own GEMM")
        return reason

    def merged_gemm(self, x, weights, biases):
        """See :func:`merged_gemm_ref`."""
        return merged_gemm_ref(x, weights, biases)

    def rms_norm_gemm(self, x, residual, norm_weight, eps, offset, weights, biases):
        """See :func:`rms_norm_gemm_ref`."""
        return rms_norm_gemm_ref(x, residual, norm_weight, eps, offset, weights, biases)

    def glu_gemm(self, x, w_gate, w_up, b_gate, b_up, activation):
        """See :func:`rocm_inductor.providers.reference_glu.glu_gemm_ref`."""
        from .reference_glu import glu_gemm_ref

        return glu_gemm_ref(x, w_gate, w_up, b_gate, b_up, activation)

    def rms_norm_glu_gemm(self, x, residual, norm_weight, eps, offset, w_gate, w_up, b_gate, b_up, activation):
        """See :func:`rms_norm_glu_gemm_ref`."""
        return rms_norm_glu_gemm_ref(x, residual, norm_weight, eps, offset, w_gate, w_up, b_gate, b_up, activation)

    def rms_norm(self, x, weight, eps, offset):
        """See :func:`rms_norm_ref`."""
        return rms_norm_ref(x, weight, eps, offset)

    def fused_add_rms_norm(self, x, residual, weight, eps, offset):
        """See :func:`fused_add_rms_norm_ref`."""
        return fused_add_rms_norm_ref(x, residual, weight, eps, offset)

    def all_reduce_add_rms_norm(self, x, residual, weight, eps, offset, group_name):
        """See :func:`all_reduce_add_rms_norm_ref`."""
        return all_reduce_add_rms_norm_ref(x, residual, weight, eps, offset, group_name)

    def sigmoid_gate(self, x, gate):
        """See :func:`sigmoid_gate_ref`."""
        return sigmoid_gate_ref(x, gate)

    def rope(self, q, k, cos, sin, rotary_dim, interleaved, half_table):
        """See :func:`rope_ref`."""
        return rope_ref(q, k, cos, sin, rotary_dim, interleaved, half_table)

    def rope_cached(self, q, k, positions, cos_sin_cache, rotary_dim, interleaved):
        """See :func:`rope_cached_ref`."""
        return rope_cached_ref(q, k, positions, cos_sin_cache, rotary_dim, interleaved)

    def rope_kv_write(self, q, k, v, cos, sin, k_cache, v_cache, positions, rotary_dim, interleaved, half_table):
        """See :func:`rope_kv_write_ref`."""
        return rope_kv_write_ref(q, k, v, cos, sin, k_cache, v_cache, positions, rotary_dim, interleaved, half_table)

    def qkv_rope_kv(self, x, residual, norm_weight, eps, offset, weights, biases, cos, sin, k_cache, v_cache, positions,
                    rotary_dim, interleaved, half_table):
        """See :func:`qkv_rope_kv_ref`."""
        return qkv_rope_kv_ref(x, residual, norm_weight, eps, offset, weights, biases, cos, sin, k_cache, v_cache,
                               positions, rotary_dim, interleaved, half_table)

    def sample(self, scores, seed, temperature, temperature_value, top_k, top_k_value, top_p, top_p_value,
               min_p, min_p_value, ban, is_probs, top_k_first):
        """See :func:`rocm_inductor.providers.reference_sampling.sample_ref` (HF's chain, row by row)."""
        from .reference_sampling import sample_ref

        return sample_ref(scores, seed, temperature, temperature_value, top_k, top_k_value, top_p,
                          top_p_value, min_p, min_p_value, ban, is_probs, top_k_first)

    def decode_attention(self, q, k, v, mask, scale, sinks=None, positions=None, window=0, softcap=0.0):
        """See :func:`rocm_inductor.providers.reference_attention.decode_attention_ref`."""
        from .reference_attention import decode_attention_ref

        return decode_attention_ref(q, k, v, mask, scale, sinks, positions, window, softcap)

    def moe_routing(self, router_logits, k, kind, renormalize, correction_bias, n_group, topk_group,
                    routed_scaling_factor, sorted_topk):
        """See :func:`rocm_inductor.providers.reference_moe.moe_routing_ref` (the eager HF routers' ops)."""
        from .reference_moe import moe_routing_ref

        return moe_routing_ref(router_logits, k, kind, renormalize, correction_bias, n_group, topk_group,
                               routed_scaling_factor, sorted_topk)

    def moe_experts(self, x, topk_weights, topk_ids, w_gate_up, w_down, b_gate_up, b_down, activation,
                    interleaved, transposed, alpha, limit):
        """See :func:`rocm_inductor.providers.reference_moe_experts.moe_experts_ref`."""
        from .reference_moe_experts import moe_experts_ref

        return moe_experts_ref(x, topk_weights, topk_ids, w_gate_up, w_down, b_gate_up, b_down, activation,
                               interleaved, transposed, alpha, limit)
