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

__all__ = ["AttnStack", "ModelArgs", "decode_vs_eager"]


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


def decode_vs_eager(options: dict, steps: int = 3, **inductor_patch) -> tuple[AttnStack, AttnStack]:
    """Two identical 2-layer stacks (GQA 8 q / 2 kv heads, head_dim 8, 16 cache slots, batch 2): both prefilled
    eagerly with 4 tokens, then ``steps`` decode steps of one eagerly and one compiled with ``backend="rocm_fused"``
    and ``options`` (reports cleared, Dynamo reset; Inductor caches off plus ``inductor_patch``), the outputs within
    1e-4 of eager's (relative to their max) at every step. Returns ``(eager, compiled)`` with their caches filled.

    Raises:
        AssertionError: a step's error and its index.
    """
    import rocm_inductor

    torch.manual_seed(0)
    args = ModelArgs(dim=64, n_head=8, n_local_heads=2, head_dim=8)
    eager = AttnStack(args, n_layer=2, max_batch_size=2, max_seq_length=16).eval()
    comp_model = AttnStack(args, n_layer=2, max_batch_size=2, max_seq_length=16).eval()
    comp_model.load_state_dict(eager.state_dict())
    prompt = torch.randn(2, 4, args.dim, generator=torch.Generator().manual_seed(2))
    rocm_inductor.clear_reports()
    torch._dynamo.reset()
    with torch.no_grad(), torch._inductor.config.patch(force_disable_caches=True, **inductor_patch):
        pre = torch.arange(4)
        x_e, x_c = eager(prompt, pre)[:, -1:], comp_model(prompt, pre)[:, -1:]  # prefill eagerly
        comp = torch.compile(comp_model, backend="rocm_fused", options=options, fullgraph=True)
        for i in range(steps):
            p = torch.tensor([4 + i])
            x_e, x_c = eager(x_e, p), comp(x_c, p)
            err = float((x_c - x_e).abs().max() / x_e.abs().max())
            assert err < 1e-4, (i, err)
    return eager, comp_model
