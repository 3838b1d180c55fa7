"""gpt-fast's attention, reproduced for the attention pass tests.

Source: https://github.com/pytorch-labs/gpt-fast ``model.py`` at commit 32971d3129541c5bfb4f715abc33d1c5f408d204
(2024-09-15): ``KVCache``, ``Attention``, ``precompute_freqs_cis`` and ``apply_rotary_emb`` are copied as
written there (BSD-3-Clause, Meta Platforms); only the load-state-dict hook is left out, and ``AttnStack``
below stands in for ``Transformer.forward``'s mask/rope lookup (``causal_mask[None, None, input_pos]``,
``freqs_cis[input_pos]``) around a stack of these attention layers.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
from torch import Tensor
from torch.nn import functional as F


@dataclass
class ModelArgs:
    """The fields of gpt-fast's ``ModelArgs`` that ``Attention`` reads."""

    dim: int = 64
    n_head: int = 8
    n_local_heads: int = 2
    head_dim: int = 8
    block_size: int = 64
    rope_base: float = 10000


class KVCache(nn.Module):
    def __init__(self, max_batch_size, max_seq_length, n_heads, head_dim, dtype=torch.bfloat16):
        super().__init__()
        cache_shape = (max_batch_size, n_heads, max_seq_length, head_dim)
        self.register_buffer('k_cache', torch.zeros(cache_shape, dtype=dtype))
        self.register_buffer('v_cache', torch.zeros(cache_shape, dtype=dtype))

    def update(self, input_pos, k_val, v_val):
        # input_pos: [S], k_val: [B, H, S, D]
        assert input_pos.shape[0] == k_val.shape[2]

        k_out = self.k_cache
        v_out = self.v_cache
        k_out[:, :, input_pos] = k_val
        v_out[:, :, input_pos] = v_val

        return k_out, v_out


class Attention(nn.Module):
    def __init__(self, config: ModelArgs):
        super().__init__()
        assert config.dim % config.n_head == 0

        total_head_dim = (config.n_head + 2 * config.n_local_heads) * config.head_dim
        # key, query, value projections for all heads, but in a batch
        self.wqkv = nn.Linear(config.dim, total_head_dim, bias=False)
        self.wo = nn.Linear(config.dim, config.dim, bias=False)
        self.kv_cache = None

        self.n_head = config.n_head
        self.head_dim = config.head_dim
        self.n_local_heads = config.n_local_heads
        self.dim = config.dim

    def forward(self, x: Tensor, freqs_cis: Tensor, mask: Tensor, input_pos: Tensor | None = None) -> Tensor:
        bsz, seqlen, _ = x.shape

        kv_size = self.n_local_heads * self.head_dim
        q, k, v = self.wqkv(x).split([self.dim, kv_size, kv_size], dim=-1)

        q = q.view(bsz, seqlen, self.n_head, self.head_dim)
        k = k.view(bsz, seqlen, self.n_local_heads, self.head_dim)
        v = v.view(bsz, seqlen, self.n_local_heads, self.head_dim)

        q = apply_rotary_emb(q, freqs_cis)
        k = apply_rotary_emb(k, freqs_cis)

        q, k, v = map(lambda x: x.transpose(1, 2), (q, k, v))

        if self.kv_cache is not None:
            k, v = self.kv_cache.update(input_pos, k, v)

        k = k.repeat_interleave(self.n_head // self.n_local_heads, dim=1)
        v = v.repeat_interleave(self.n_head // self.n_local_heads, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.0)

        y = y.transpose(1, 2).contiguous().view(bsz, seqlen, self.dim)

        y = self.wo(y)
        return y


def precompute_freqs_cis(seq_len: int, n_elem: int, base: int = 10000,
                         dtype: torch.dtype = torch.bfloat16) -> Tensor:
    freqs = 1.0 / (base ** (torch.arange(0, n_elem, 2)[: (n_elem // 2)].float() / n_elem))
    t = torch.arange(seq_len, device=freqs.device)
    freqs = torch.outer(t, freqs)
    freqs_cis = torch.polar(torch.ones_like(freqs), freqs)
    cache = torch.stack([freqs_cis.real, freqs_cis.imag], dim=-1)
    return cache.to(dtype=dtype)


def apply_rotary_emb(x: Tensor, freqs_cis: Tensor) -> Tensor:
    xshaped = x.float().reshape(*x.shape[:-1], -1, 2)
    freqs_cis = freqs_cis.view(1, xshaped.size(1), 1, xshaped.size(3), 2)
    x_out2 = torch.stack(
        [
            xshaped[..., 0] * freqs_cis[..., 0] - xshaped[..., 1] * freqs_cis[..., 1],
            xshaped[..., 1] * freqs_cis[..., 0] + xshaped[..., 0] * freqs_cis[..., 1],
        ],
        -1,
    )

    x_out2 = x_out2.flatten(3)
    return x_out2.type_as(x)


class AttnStack(nn.Module):
    """``n_layer`` gpt-fast ``Attention`` layers with residuals and caches, fed like ``Transformer.forward``.

    Args:
        config: the attention shape; n_layer: layers; max_batch_size / max_seq_length: the KV cache
            (``setup_caches``); dtype: parameters and cache.

    ``forward(x (B, S, dim), input_pos (S,) int64) -> (B, S, dim)``.
    """

    def __init__(self, config: ModelArgs, n_layer: int, max_batch_size: int, max_seq_length: int,
                 dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.layers = nn.ModuleList(Attention(config) for _ in range(n_layer))
        for layer in self.layers:
            layer.kv_cache = KVCache(max_batch_size, max_seq_length, config.n_local_heads, config.head_dim, dtype)
        self.freqs_cis = precompute_freqs_cis(config.block_size, config.dim // config.n_head, config.rope_base,
                                              dtype)
        self.causal_mask = torch.tril(torch.ones(max_seq_length, max_seq_length, dtype=torch.bool))
        self.to(dtype)

    def forward(self, x: Tensor, input_pos: Tensor) -> Tensor:
        mask = self.causal_mask[None, None, input_pos]
        freqs_cis = self.freqs_cis[input_pos]
        for layer in self.layers:
            x = x + layer(x, freqs_cis, mask, input_pos)
        return x
