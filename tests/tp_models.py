"""Tiny tensor-parallel decoders for the all-reduce + add + RMSNorm tests (2 ranks, gloo on CPU).

``GptFastTransformer`` + :func:`apply_tp` follow gpt-fast's ``model.py`` / ``tp.py`` (pytorch-labs/gpt-fast):
colwise wqkv / w1 / w3, rowwise wo / w2 (weights ``tensor_split`` by rank), and the all-reduce in forward
hooks, ``funcol.all_reduce(output, "sum", list(range(world_size)))`` (the attention hook all-reduces
``output[0]`` exactly as gpt-fast writes it; with a batch of one the residual add broadcasts it back).
``RowParallelBlock`` is the plain ``torch.distributed.all_reduce(h)`` spelling of an HF-style block.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed import _functional_collectives as funcol


class RMSNorm(nn.Module):
    """gpt-fast's RMSNorm: ``_norm(x.float()).type_as(x) * weight`` with ``mean(x * x)``."""

    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))

    def _norm(self, x):
        return x * torch.rsqrt(torch.mean(x * x, dim=-1, keepdim=True) + self.eps)

    def forward(self, x):
        return self._norm(x.float()).type_as(x) * self.weight


class Attention(nn.Module):
    """gpt-fast's attention without the KV cache and RoPE (enough for the all-reduce placement)."""

    def __init__(self, dim: int, n_head: int):
        super().__init__()
        self.dim, self.n_head, self.head_dim = dim, n_head, dim // n_head
        self.n_local_heads = n_head
        self.wqkv = nn.Linear(dim, 3 * dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)

    def forward(self, x):
        bsz, seqlen, _ = x.shape
        kv_size = self.n_local_heads * self.head_dim
        q, k, v = self.wqkv(x).split([self.dim, kv_size, kv_size], dim=-1)
        q, k, v = (t.view(bsz, seqlen, -1, self.head_dim).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(y.transpose(1, 2).contiguous().view(bsz, seqlen, self.dim))


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, dim: int, n_head: int, hidden: int):
        super().__init__()
        self.attention, self.feed_forward = Attention(dim, n_head), FeedForward(dim, hidden)
        self.attention_norm, self.ffn_norm = RMSNorm(dim), RMSNorm(dim)

    def forward(self, x):
        h = x + self.attention(self.attention_norm(x))
        return h + self.feed_forward(self.ffn_norm(h))


class GptFastTransformer(nn.Module):
    """gpt-fast's Transformer shape: embedding, blocks, final norm, output projection."""

    def __init__(self, vocab: int = 64, dim: int = 32, n_head: int = 4, hidden: int = 64, n_layer: int = 2):
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(Block(dim, n_head, hidden) for _ in range(n_layer))
        self.norm = RMSNorm(dim)
        self.output = nn.Linear(dim, vocab, bias=False)

    def forward(self, idx):
        x = self.tok_embeddings(idx)
        for layer in self.layers:
            x = layer(x)
        return self.output(self.norm(x))


def _shard(linear: nn.Linear, style: str, rank: int, world: int, splits: list[int] | None = None) -> None:
    """gpt-fast's ``_apply_tp_linear``: colwise shards dim 0 (out), rowwise dim 1 (in); q/k/v separately."""
    dim = {"colwise": 0, "rowwise": 1}[style]
    w = linear.weight
    if splits:
        w = torch.cat([torch.tensor_split(p, world, dim=dim)[rank] for p in w.split(splits, dim=dim)], dim=dim)
    else:
        w = torch.tensor_split(w, world, dim=dim)[rank]
    linear.weight = nn.Parameter(w, requires_grad=False)


def apply_tp(model: GptFastTransformer, rank: int, world: int) -> None:
    """gpt-fast's ``apply_tp``: shard the linears, all-reduce the row-parallel outputs in forward hooks."""
    for block in model.layers:
        ffn, attn = block.feed_forward, block.attention
        _shard(ffn.w1, "colwise", rank, world)
        _shard(ffn.w3, "colwise", rank, world)
        _shard(ffn.w2, "rowwise", rank, world)
        ffn.register_forward_hook(lambda _m, _i, output: funcol.all_reduce(output, "sum", list(range(world))))
        kv = attn.n_local_heads * attn.head_dim
        _shard(attn.wqkv, "colwise", rank, world, [attn.dim, kv, kv])
        _shard(attn.wo, "rowwise", rank, world)
        attn.n_head //= world
        attn.dim //= world
        attn.n_local_heads //= world
        # gpt-fast all-reduces output[0] (batch 1: the residual add broadcasts it back)
        attn.register_forward_hook(lambda _m, _i, output: funcol.all_reduce(
            output[0], "sum", list(range(world))))


class RowParallelBlock(nn.Module):
    """HF-style pre-norm residual with ``dist.all_reduce`` on a row-parallel projection's output.

    ``norm`` is one of the RMSNorm family's spellings (``tests/norm_spellings.py``, its ``.norm(x)``);
    returns (normed, residual).
    """

    def __init__(self, norm: nn.Module, dim: int, local_in: int):
        super().__init__()
        self.o_proj = nn.Linear(local_in, dim, bias=False)
        self.post_attention_layernorm = norm

    def forward(self, x, residual):
        h = self.o_proj(x)
        dist.all_reduce(h)
        h = residual + h
        residual = h
        return self.post_attention_layernorm.norm(h), residual


class PlainTP(nn.Module):
    """Several :class:`RowParallelBlock` with different norm spellings, chained through the residual."""

    def __init__(self, norms: list[nn.Module], dim: int, local_in: int):
        super().__init__()
        self.blocks = nn.ModuleList(RowParallelBlock(n, dim, local_in) for n in norms)

    def forward(self, x, residual):
        outs = []
        for b in self.blocks:
            y, residual = b(x, residual)
            outs.append(y)
        return (*outs, residual)
