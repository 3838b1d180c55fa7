"""Adversarial inputs for the decode-attention pass found by a fresh-user review (CPU, reference provider)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from graph_utils import compile_run

OP = "rocm_fused.decode_attention.default"


def test_batch_broadcast_kv_inside_the_repeat_expand():
    """A shared-prefix cache (batch 1) broadcast to the batch in the same ``expand`` as the head repeat:
    ``k[:, :, None].expand(B, Hkv, g, L, D).reshape(B, Hq, L, D)`` with ``k`` of batch 1. The repeat must not be
    taken as ``h // g`` over the batch-1 tensor (the op then got k of batch 1 with q of batch 3 and strict
    compiles raised ``ValueError: ... do not agree on batch``); it is a near-miss and matches eager."""

    def fn(q, k, v):
        b, hq = q.shape[:2]
        _, hkv, length, d = k.shape
        g = hq // hkv
        k2 = k[:, :, None].expand(b, hkv, g, length, d).reshape(b, hq, length, d)
        v2 = v[:, :, None].expand(b, hkv, g, length, d).reshape(b, hq, length, d)
        return F.scaled_dot_product_attention(q, k2, v2)

    gen = torch.Generator().manual_seed(0)
    q = torch.randn(3, 8, 1, 16, generator=gen)
    k, v = (torch.randn(1, 2, 24, 16, generator=gen) for _ in range(2))
    out, seen = compile_run(fn, q, k, v)  # strict: a pass error fails the compile
    rep = seen[0].report
    assert rep.error is None
    assert seen[0].after[OP] == 0
    (miss,) = [n for n in rep.near_misses if n.pass_name == "attention"]
    assert "broadcast" in miss.reason, miss.reason
    with torch.no_grad():
        torch.testing.assert_close(out, fn(q, k, v))


def test_math_form_attentions_sharing_one_kv_cache_are_both_rewritten():
    """HF's eager attention (``softmax(q k^T * s + mask) @ v``, kept in the math form because of the mask) run
    twice over one K/V (cross-layer KV sharing, two query sets over one cache). The flattening ``reshape`` of
    the shared K/V (one node after CSE) feeds both attentions' bmm; that is operand preparation, not the
    scores or probabilities, so both attentions are rewritten (they were near-misses "view_1 (attention scores
    / probabilities) is also used by bmm_2 (output_attentions?)")."""

    def eager_attn(q, k, v, m):  # transformers' eager_attention_forward, MHA
        w = torch.matmul(q, k.transpose(2, 3)) * (q.shape[-1] ** -0.5) + m
        w = torch.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
        return torch.matmul(w, v)

    def fn(q1, q2, k, v, m):
        return eager_attn(q1, k, v, m) + eager_attn(q2, k, v, m)

    gen = torch.Generator().manual_seed(0)
    q1, q2 = (torch.randn(2, 8, 2, 16, generator=gen) for _ in range(2))
    k, v = (torch.randn(2, 8, 24, 16, generator=gen) for _ in range(2))
    m = torch.zeros(2, 1, 2, 24)
    m[..., 20:] = torch.finfo(torch.float32).min
    out, seen = compile_run(fn, q1, q2, k, v, m)
    rep = seen[0].report
    assert [n.reason for n in rep.near_misses if n.pass_name == "attention"] == []
    assert seen[0].after[OP] == 2
    with torch.no_grad():
        torch.testing.assert_close(out, fn(q1, q2, k, v, m))


def test_sdpa_dropout_on_cpu_is_a_near_miss():
    """``F.scaled_dot_product_attention(..., dropout_p=0.1)`` (dropout applies whatever the module's mode) reaches
    the CPU post-grad graph as SDPA's math form with a random keep-mask on the probabilities. It is not
    rewritten (the op has no dropout) and, as the pass's docstring promises for dropout, it is reported as a
    near-miss (it was silently skipped: no match, no near-miss)."""

    def fn(q, k, v):
        k, v = (x[:, :, None].expand(2, 2, 4, 24, 16).reshape(2, 8, 24, 16) for x in (k, v))
        return F.scaled_dot_product_attention(q, k, v, dropout_p=0.1)

    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2, 8, 1, 16, generator=gen)
    k, v = (torch.randn(2, 2, 24, 16, generator=gen) for _ in range(2))
    out, seen = compile_run(fn, q, k, v)
    assert seen[0].after[OP] == 0 and out.shape == (2, 8, 1, 16)
    (miss,) = [n for n in seen[0].report.near_misses if n.pass_name == "attention"]
    assert "dropout" in miss.reason, miss.reason
