"""gpt-fast's attention layers stacked without the MLP, for the attention pass tests.

``KVCache``, ``Attention``, ``precompute_freqs_cis`` and ``ModelArgs`` are gpt-fast's (``tests/gpt_fast_model.py``,
from https://github.com/pytorch-labs/gpt-fast ``model.py`` at commit 32971d3); ``AttnStack`` below stands in for
``Transformer.forward``'s mask/rope lookup (``causal_mask[None, None, input_pos]``, ``freqs_cis[input_pos]``)
around a stack of those attention layers.
"""

from __future__ import annotations

import torch
import torch.nn as nn
from gpt_fast_model import Attention, KVCache, ModelArgs, precompute_freqs_cis
from torch import Tensor

__all__ = ["AttnStack", "ModelArgs"]


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
