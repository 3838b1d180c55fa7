"""RoPE as real model code spells it (../shared/corpus/SPELLINGS.md, RoPE 1-5), for the pass tests."""

from __future__ import annotations

import torch


def rotate_half(x):
    """HF ``rotate_half`` (NeoX)."""
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rotate_every_two(x):
    """HF GPT-J ``rotate_every_two``."""
    x1 = x[..., ::2]
    x2 = x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def hf_rope(q, k, cos, sin, unsqueeze_dim=1):
    """Spelling 1: HF Llama ``apply_rotary_pos_emb`` (cos/sin (b, s, d))."""
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def upcast_rope(q, k, cos, sin, unsqueeze_dim=1):
    """Spelling 2: OLMo/Cohere style: compute in float32, cast back."""
    dt = q.dtype
    q, k = q.float(), k.float()
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return (q * cos + rotate_half(q) * sin).to(dt), (k * cos + rotate_half(k) * sin).to(dt)


def partial_rope(q, k, cos, sin, unsqueeze_dim=1):
    """Spelling 3: GPT-NeoX / Phi-3 partial rotary (rotary_dim = cos.shape[-1])."""
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    rd = cos.shape[-1]
    q_rot, q_pass = q[..., :rd], q[..., rd:]
    k_rot, k_pass = k[..., :rd], k[..., rd:]
    q_embed = q_rot * cos + rotate_half(q_rot) * sin
    k_embed = k_rot * cos + rotate_half(k_rot) * sin
    return torch.cat([q_embed, q_pass], dim=-1), torch.cat([k_embed, k_pass], dim=-1)


def gptj_rope(q, k, sin, cos):
    """Spelling 4: HF GPT-J, (b, s, h, d) layout, tables (b, s, d/2) repeat_interleave'd."""
    sin = torch.repeat_interleave(sin[:, :, None, :], 2, 3)
    cos = torch.repeat_interleave(cos[:, :, None, :], 2, 3)
    return q * cos + rotate_every_two(q) * sin, k * cos + rotate_every_two(k) * sin


def complex_rope(q, k, freqs_cis):
    """Spelling 5: Meta Llama ``apply_rotary_emb`` ((b, s, h, d), freqs_cis (s, d/2) complex64)."""
    qc = torch.view_as_complex(q.float().reshape(*q.shape[:-1], -1, 2))
    kc = torch.view_as_complex(k.float().reshape(*k.shape[:-1], -1, 2))
    f = freqs_cis.view(1, qc.shape[1], 1, qc.shape[-1])
    return torch.view_as_real(qc * f).flatten(3).type_as(q), torch.view_as_real(kc * f).flatten(3).type_as(k)


def hf_tables(b, s, rd, dtype, theta=10000.0, scaling=1.0, offset=0):
    """HF ``LlamaRotaryEmbedding.forward``: (cos, sin) of shape (b, s, rd) in ``dtype``."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, rd, 2, dtype=torch.int64).float() / rd))
    pos = torch.arange(offset, offset + s)[None].expand(b, s)
    freqs = (inv_freq[None, :, None].float().expand(b, -1, 1) @ pos[:, None, :].float()).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return (emb.cos() * scaling).to(dtype), (emb.sin() * scaling).to(dtype)
