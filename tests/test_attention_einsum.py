"""Attention written with ``torch.einsum`` reaches the math-form matcher (einsum's view chains are canonicalised,
``passes/views.py``); MLA's two-product scores give a near-miss that names them.

Sources of the spellings: einsum attention as in many research codebases (``torch.einsum("bhqd,bhkd->bhqk",
q, k)``, then ``einsum("bhqk,bhkd->bhqd", p, v)``), with GQA through ``repeat_interleave``; DeepSeek-V2/V3's MLA
reference (``modeling_deepseek.py``): scores ``q_nope @ k_nope^T + q_pe @ k_pe^T`` with k_pe shared by heads.
"""

from __future__ import annotations

import torch
from graph_utils import assert_contract, capture, compile_run, op_counts
from test_attention_pass import OP, attention_misses, qkv, ref64
from torch.fx.experimental.proxy_tensor import make_fx

from rocm_inductor.passes.canonicalize import canonicalize


def einsum_attention(q, k, v, mask):
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    s = torch.einsum("bhqd,bhkd->bhqk", q, k) * q.shape[-1] ** -0.5 + mask
    p = torch.softmax(s.float(), dim=-1).to(q.dtype)
    return torch.einsum("bhqk,bhkd->bhqd", p, v)


def mla_scores(q_nope, q_pe, k_nope, k_pe, v, mask):
    s = (torch.einsum("bhqd,bhkd->bhqk", q_nope, k_nope) + torch.einsum("bhqr,bkr->bhqk", q_pe, k_pe)) * 0.1
    p = torch.softmax(s + mask, dim=-1, dtype=torch.float32).to(v.dtype)
    return torch.einsum("bhqk,bhkd->bhqd", p, v)


def _mask(b=2, lkv=24, dtype=torch.float32, seed=3):
    keep = torch.rand(b, 1, 1, lkv, generator=torch.Generator().manual_seed(seed)) > 0.3
    keep[..., 0] = True
    return torch.zeros(b, 1, 1, lkv, dtype=dtype).masked_fill(~keep, torch.finfo(dtype).min)


def test_einsum_attention_is_rewritten():
    q, k, v = qkv()
    mask = _mask()
    with torch.no_grad():
        out, seen = compile_run(einsum_attention, q, k, v, mask)
    (c,) = seen
    assert c.after[OP] == 1 and c.after["aten.bmm.default"] == 0, c.after
    assert_contract(out, einsum_attention(q, k, v, mask), ref64(q, k, v, mask))


def test_einsum_attention_bf16_gqa():
    q, k, v = qkv(hq=8, hkv=2, dtype=torch.bfloat16)
    mask = _mask(dtype=torch.bfloat16)
    with torch.no_grad():
        out, seen = compile_run(einsum_attention, q, k, v, mask)
    assert seen[0].after[OP] == 1
    assert_contract(out, einsum_attention(q, k, v, mask), ref64(q, k, v, mask.float()))


def test_mla_two_product_scores_is_a_near_miss():
    gen = torch.Generator().manual_seed(0)
    b, h, lkv, d, r = 2, 4, 16, 32, 8
    args = (torch.randn(b, h, 1, d, generator=gen), torch.randn(b, h, 1, r, generator=gen),
            torch.randn(b, h, lkv, d, generator=gen), torch.randn(b, lkv, r, generator=gen),
            torch.randn(b, h, lkv, d, generator=gen), torch.zeros(b, 1, 1, lkv))
    with torch.no_grad(), capture() as seen:
        out = torch.compile(mla_scores, backend="rocm_fused", options={"provider": "reference", "strict": True})(
            *args)
    assert seen[0].after[OP] == 0
    (miss,) = attention_misses(seen)
    assert "sum of two products" in miss.reason and "MLA" in miss.reason, miss.reason
    torch.testing.assert_close(out, mla_scores(*args))


def test_canonical_views_collapse_einsum_chains_exactly():
    """The canonicalised graph computes the same values with fewer view nodes and no size-1 permutes."""
    q, k, v = qkv(hq=4, hkv=4)
    mask = _mask()
    gm = make_fx(einsum_attention, decomposition_table=torch._decomp.core_aten_decompositions(),
                 tracing_mode="fake")(q, k, v, mask)
    before = op_counts(gm.graph)
    gm2 = make_fx(einsum_attention, decomposition_table=torch._decomp.core_aten_decompositions(),
                  tracing_mode="fake")(q, k, v, mask)
    canonicalize(gm2.graph)
    gm2.recompile()
    after = op_counts(gm2.graph)
    assert after["aten.unsqueeze.default"] < before["aten.unsqueeze.default"]
    assert after["aten.permute.default"] < before["aten.permute.default"]
    torch.testing.assert_close(gm2(q, k, v, mask), einsum_attention(q, k, v, mask), rtol=0, atol=0)
