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
