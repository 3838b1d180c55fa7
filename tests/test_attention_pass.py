"""The attention pass (issue 13): SDPA over a head-repeated KV cache -> rocm_fused::decode_attention.

Compiled through the real backend on CPU (reference provider): op counts before/after and numerics against
eager and float64 SDPA over the repeated K/V. The CUDA SDPA variants (efficient/cuDNN/flash/overrideable)
cannot be compiled here: their graphs are built with ``make_fx`` on meta tensors in the spelling
``torch.nn.functional.scaled_dot_product_attention``'s CUDA path produces, the pass runs on them, and the
rewritten graph is run on CPU tensors.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from graph_utils import assert_contract, compile_run
from torch.fx.experimental.proxy_tensor import make_fx

from rocm_inductor.options import parse_options
from rocm_inductor.passes.attention import AttentionPass
from rocm_inductor.passes.manager import PassManager
from rocm_inductor.report import last_report

aten = torch.ops.aten
SDPA_CPU = "aten._scaled_dot_product_flash_attention_for_cpu.default"
OP = "rocm_fused.decode_attention.default"


def repeat_kv(x, n):  # HF transformers integrations/sdpa_attention.py (5.x)
    b, h, s, d = x.shape
    if n == 1:
        return x
    return x[:, :, None, :, :].expand(b, h, n, s, d).reshape(b, h * n, s, d)


def hf(q, k, v, mask=None, scale=None):
    g = q.shape[1] // k.shape[1]
    return F.scaled_dot_product_attention(q, repeat_kv(k, g), repeat_kv(v, g), attn_mask=mask, scale=scale)


def gpt_fast(q, k, v, mask=None, scale=None):
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.0, scale=scale)


def native_gqa(q, k, v, mask=None, scale=None):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=True)


def gather(q, k, v, mask=None, scale=None):
    g = q.shape[1] // k.shape[1]
    idx = torch.arange(q.shape[1]) // g
    return F.scaled_dot_product_attention(q, k.index_select(1, idx), v[:, idx], attn_mask=mask, scale=scale)


def ref64(q, k, v, mask=None, scale=None):
    """float64 SDPA over the repeated K/V (fully masked rows -> 0, as the op defines them)."""
    g = q.shape[1] // k.shape[1]
    kd, vd = (t.double().repeat_interleave(g, dim=1) for t in (k, v))
    s = q.double() @ kd.transpose(-1, -2) * (scale if scale is not None else 1 / math.sqrt(q.shape[-1]))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask.double()
    p = torch.softmax(s, -1).nan_to_num(0.0)
    return p @ vd


def qkv(b=2, hq=8, hkv=2, lq=1, lkv=24, d=16, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(b, h, n, d, generator=gen).to(dtype) for h, n in ((hq, lq), (hkv, lkv), (hkv, lkv))]


def attention_matches(seen):
    return [m for c in seen for m in c.report.matches if m.pass_name == "attention"]


def attention_misses(seen):
    return [n for c in seen for n in c.report.near_misses if n.pass_name == "attention"]


def check_rewritten(fn, q, k, v, mask=None, scale=None, **kw):
    """Compile ``fn``, assert one SDPA became one decode_attention with no repeat copy left, check numerics."""
    out, seen = compile_run(lambda *a: fn(*a, scale=scale), q, k, v, mask, **kw)
    (c,) = seen
    assert c.before[SDPA_CPU] == 1 and c.after[OP] == 1 and c.after[SDPA_CPU] == 0, c.after
    assert c.after["aten.clone.default"] == 0 and c.after["aten.index.Tensor"] == 0, c.after
    eager = fn(q, k, v, mask, scale=scale)
    assert_contract(out, eager, ref64(q, k, v, mask, scale))
    (m,) = attention_matches(seen)
    assert m.provider == "reference" and m.op == "decode_attention"
    return m


@pytest.mark.parametrize("hq,hkv", [(4, 4), (4, 2), (8, 2), (8, 1), (16, 2)])
def test_gqa_ratios_hf_repeat_kv(hq, hkv):
    """MHA, GQA 2/4/8 and MQA in HF's repeat_kv spelling: the repeat is gone, the op reads Hkv heads."""
    q, k, v = qkv(hq=hq, hkv=hkv)
    mask = torch.rand(2, 1, 1, 24, generator=torch.Generator().manual_seed(1)) > 0.3
    m = check_rewritten(hf, q, k, v, mask)
    assert f"GQA {hq}/{hkv}={hq // hkv}" in m.note and "mask=bool" in m.note


@pytest.mark.parametrize("fn", [gpt_fast, native_gqa, gather], ids=["repeat_interleave", "enable_gqa", "gather"])
def test_repeat_spellings(fn):
    """gpt-fast's repeat_interleave(g, dim=1), SDPA's enable_gqa=True and a head gather with arange(Hq) // g."""
    q, k, v = qkv(hq=8, hkv=2)
    m = check_rewritten(fn, q, k, v, None)
    assert "GQA 8/2=4" in m.note and "mask=none" in m.note


@pytest.mark.parametrize("lq", [1, 4, 32])
def test_query_lengths(lq):
    """Decode (1), speculative / chunked (4) and the bucket limit (32) are rewritten; scale given or default."""
    q, k, v = qkv(lq=lq, lkv=40)
    mask = torch.ones(lq, 40, dtype=torch.bool).tril(diagonal=40 - lq)  # causal-from-position, 2D
    m = check_rewritten(hf, q, k, v, mask, scale=0.3 if lq == 4 else None)
    assert f"q_len={lq} kv_len=40" in m.note and "mask=bool 1x1x" in m.note


def test_prefill_is_a_near_miss():
    """33 query tokens (> options.aten_gemm_max_m = 32) stay with Inductor, reported with the reason."""
    q, k, v = qkv(lq=33, lkv=40)
    out, seen = compile_run(hf, q, k, v)
    assert seen[0].after[SDPA_CPU] == 1 and seen[0].after[OP] == 0
    (miss,) = attention_misses(seen)
    assert "query length 33 > 32: prefill stays with Inductor" in miss.reason
    torch.testing.assert_close(out, hf(q, k, v))


def test_query_limit_follows_aten_gemm_max_m():
    """The limit is the level machinery's small-M option: 4 tokens with aten_gemm_max_m=2 is a near-miss."""
    q, k, v = qkv(lq=4)
    _, seen = compile_run(hf, q, k, v, options={"aten_gemm_max_m": 2})
    assert "query length 4 > 2" in attention_misses(seen)[0].reason


@pytest.mark.parametrize("kind", ["additive", "hf_min", "bool_batch_broadcast", "row_removed"])
def test_masks(kind):
    """Additive float masks (kept additive), HF's finfo.min form, a batch-broadcast bool mask, a removed row."""
    q, k, v = qkv(lq=2)
    gen = torch.Generator().manual_seed(2)
    keep = torch.rand(2, 1, 2, 24, generator=gen) > 0.4
    if kind == "additive":
        mask = torch.randn(2, 1, 2, 24, generator=gen).masked_fill(~keep, float("-inf"))
    elif kind == "hf_min":
        mask = torch.zeros(2, 1, 2, 24).masked_fill(~keep, torch.finfo(torch.float32).min)
    elif kind == "bool_batch_broadcast":
        mask = keep[:1]  # (1, 1, 2, 24): broadcast over the batch (a 3D mask sends CPU SDPA to its math form)
    else:
        keep[1, 0, 1] = False  # batch 1, query 1 sees no key
        mask = keep
    m = check_rewritten(hf, q, k, v, mask)
    want = "bool" if mask.dtype == torch.bool else "additive"
    assert f"mask={want}" in m.note


def test_fully_masked_row_is_zero():
    q, k, v = qkv(lq=2)
    mask = torch.ones(2, 1, 2, 24, dtype=torch.bool)
    mask[0, 0, 1] = False
    out, _ = compile_run(hf, q, k, v, mask)
    assert torch.all(out[0, :, 1] == 0)


def test_expanded_mask_is_walked_back():
    """A mask expanded to (B, Hq, Lq, Lkv) reaches the op in its (B, 1, Lq, Lkv) form."""
    q, k, v = qkv()
    small = torch.rand(2, 1, 1, 24, generator=torch.Generator().manual_seed(3)) > 0.3
    m = check_rewritten(lambda q, k, v, mask, scale: hf(q, k, v, mask.expand(2, 8, 1, 24), scale), q, k, v, small)
    assert "mask=bool 2x1x1x24" in m.note


def test_bf16():
    q, k, v = qkv(dtype=torch.bfloat16)
    check_rewritten(gpt_fast, q, k, v, torch.ones(1, 1, 1, 24, dtype=torch.bool))


def test_shared_repeat_stays_for_its_other_consumer():
    """A repeated K that is also returned: the attention is rewritten, K's repeat stays, V's is gone."""
    q, k, v = qkv()

    def fn(q, k, v, mask):
        kr = repeat_kv(k, 4)
        return F.scaled_dot_product_attention(q, kr, repeat_kv(v, 4)), kr * 2

    out, seen = compile_run(fn, q, k, v, None)
    (c,) = seen
    assert c.after[OP] == 1 and c.after["aten.clone.default"] == 1, c.after
    (m,) = attention_matches(seen)
    assert "another consumer" in m.note
    eager = fn(q, k, v, None)
    torch.testing.assert_close(out[0], eager[0])
    torch.testing.assert_close(out[1], eager[1])


@pytest.mark.parametrize("kind", ["tile", "tile_expand", "runtime_index", "causal", "mixed_spellings"])
def test_near_misses(kind):
    """h -> h % Hkv (torch.repeat), an index only known at run time, is_causal=True; K and V repeated in two
    different (both h // g) spellings still match."""
    q, k, v = qkv(lq=2)
    idx = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    if kind == "tile":
        def fn(q, k, v, idx):
            return F.scaled_dot_product_attention(q, k.repeat(1, 4, 1, 1), v.repeat(1, 4, 1, 1))
        want = "h % Hkv"
    elif kind == "tile_expand":  # repeat's order spelled with expand: (B, 1, Hkv, L, D) -> (B, g, Hkv, L, D)
        def fn(q, k, v, idx):
            t = lambda x: x[:, None].expand(2, 4, 2, 24, 16).reshape(2, 8, 24, 16)  # noqa: E731
            return F.scaled_dot_product_attention(q, t(k), t(v))
        want = "h % Hkv"
    elif kind == "runtime_index":
        def fn(q, k, v, idx):
            return F.scaled_dot_product_attention(q, k[:, idx], v[:, idx])
        want = "not known at compile time"
    elif kind == "causal":
        def fn(q, k, v, idx):
            return F.scaled_dot_product_attention(q, repeat_kv(k, 4), repeat_kv(v, 4), is_causal=True)
        want = "is_causal=True"
    else:
        def fn(q, k, v, idx):
            return F.scaled_dot_product_attention(q, repeat_kv(k, 4), v.repeat_interleave(4, 1)[:, :, :, :])
        want = None
    out, seen = compile_run(fn, q, k, v, idx)
    if want is None:  # both spellings recognised: one rewrite
        assert seen[0].after[OP] == 1
    else:
        assert seen[0].after[OP] == 0 and seen[0].after[SDPA_CPU] == 1
        (miss,) = attention_misses(seen)
        assert want in miss.reason, miss.reason
    torch.testing.assert_close(out, fn(q, k, v, idx))


def test_mqa_repeat_is_exact():
    """torch.repeat of a single kv head maps every query head to head 0, as h // g does: rewritten."""
    q, k, v = qkv(hq=4, hkv=1)
    m = check_rewritten(lambda q, k, v, mask, scale: F.scaled_dot_product_attention(
        q, k.repeat(1, 4, 1, 1), v.repeat(1, 4, 1, 1), attn_mask=mask, scale=scale), q, k, v, None)
    assert "repeat (MQA)" in m.note


def test_dynamic_batch():
    """mark_dynamic on the batch dim: the rewrite still happens and matches eager at another batch size."""
    q, k, v = qkv(b=3)
    mask = torch.ones(3, 1, 1, 24, dtype=torch.bool)
    for t in (q, k, v, mask):
        torch._dynamo.mark_dynamic(t, 0)
    out, seen = compile_run(hf, q, k, v, mask, dynamic=None)
    assert seen[0].after[OP] == 1 and attention_matches(seen)
    torch.testing.assert_close(out, hf(q, k, v, mask))


def test_bounded_symbolic_query_length():
    """A symbolic query length with an upper bound <= 32 (mark_dynamic max=16) is rewritten."""
    q, k, v = qkv(lq=4)
    torch._dynamo.mark_dynamic(q, 2, min=2, max=16)
    out, seen = compile_run(hf, q, k, v, None, dynamic=None)
    (m,) = attention_matches(seen)
    assert "q_len=s" in m.note or "q_len=u" in m.note, m.note
    torch.testing.assert_close(out, hf(q, k, v))


# ------------------------------------------------------------------ the math form (bmm, softmax, bmm)


def hf_eager(q, k, v, mask, scale=None, weights=False):
    """HF's eager_attention_forward (transformers 5.x): matmul * scaling + mask, fp32 softmax, matmul."""
    g = q.shape[1] // k.shape[1]
    w = torch.matmul(q, repeat_kv(k, g).transpose(2, 3)) * (scale or q.shape[-1] ** -0.5)
    w = w + mask
    w = F.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
    w = F.dropout(w, p=0.0, training=False)
    out = torch.matmul(w, repeat_kv(v, g))
    return (out, w) if weights else out


def masked_fill_attn(q, k, v, mask, scale=None):
    g = q.shape[1] // k.shape[1]
    s = (q @ repeat_kv(k, g).transpose(-1, -2)) / math.sqrt(q.shape[-1])
    return torch.softmax(s.masked_fill(~mask, float("-inf")), -1) @ repeat_kv(v, g)


def _math_rewritten(fn, q, k, v, mask):
    out, seen = compile_run(fn, q, k, v, mask)
    (c,) = seen
    assert c.before["aten.bmm.default"] == 2 and c.after[OP] == 1, c.after
    assert c.after["aten.bmm.default"] == 0 and c.after["aten.clone.default"] == 0, c.after
    (m,) = attention_matches(seen)
    assert "from the math form" in m.note and "GQA 8/2=4" in m.note, m.note
    return out, m


def test_math_form_hf_eager_bf16():
    """HF's eager attention (bf16, additive mask with finfo.min) is rewritten; the op's one rounding is within
    the contract against eager's several."""
    q, k, v = qkv(dtype=torch.bfloat16)
    keep = torch.rand(2, 1, 1, 24, generator=torch.Generator().manual_seed(5)) > 0.3
    mask = torch.zeros(2, 1, 1, 24, dtype=torch.bfloat16).masked_fill(~keep, torch.finfo(torch.bfloat16).min)
    out, m = _math_rewritten(hf_eager, q, k, v, mask)
    assert "mask=additive" in m.note
    assert_contract(out, hf_eager(q, k, v, mask), ref64(q, k, v, mask.float()))


def test_math_form_masked_fill_and_sdpa_math():
    """``masked_fill(~m, -inf)`` before softmax (bool mask found), and CPU SDPA's own math decomposition (a 3D
    mask sends it there) with its sqrt(scale) on q and k and the safe-softmax where."""
    q, k, v = qkv()
    keep = torch.rand(2, 1, 1, 24, generator=torch.Generator().manual_seed(6)) > 0.3
    out, m = _math_rewritten(masked_fill_attn, q, k, v, keep)
    assert "mask=bool 2x1x1x24" in m.note
    assert_contract(out, masked_fill_attn(q, k, v, keep), ref64(q, k, v, keep))
    sdpa3 = lambda q, k, v, mask: hf(q, k, v, mask[0], scale=0.3)  # noqa: E731
    out, m = _math_rewritten(sdpa3, q, k, v, keep)
    assert "mask=bool 1x1x1x24" in m.note
    assert_contract(out, sdpa3(q, k, v, keep), ref64(q, k, v, keep[:1], 0.3))


def sdpa_math_path(q, k, v, mask, scale=None):
    """SDPA's math fallback as aten/src/ATen/native/transformers/attention.cpp spells it (half inputs upcast,
    sqrt(scale) on q and on k^T, enable_gqa's repeat_interleave(-3), _safe_softmax, cast back)."""
    s = q.shape[-1] ** -0.25
    qa, ka, va = q.float() * s, k.float(), v.float()
    g = q.shape[1] // k.shape[1]
    ka, va = ka.repeat_interleave(g, -3), va.repeat_interleave(g, -3)
    attn = torch.matmul(qa, ka.transpose(-2, -1) * s) + mask
    attn = torch.ops.aten._safe_softmax(attn, -1)
    return torch.matmul(attn, va).to(q.dtype)


def test_math_form_sdpa_math_path_keeps_half_inputs():
    """The op gets the bf16 q/k/v, not float32 copies of the cache (the cast back is the only consumer)."""
    q, k, v = qkv(dtype=torch.bfloat16)
    keep = torch.rand(2, 1, 1, 24, generator=torch.Generator().manual_seed(7)) > 0.3
    mask = torch.zeros(2, 1, 1, 24, dtype=torch.bfloat16).masked_fill(~keep, float("-inf"))
    out, m = _math_rewritten(sdpa_math_path, q, k, v, mask)
    assert m.dtype == "bfloat16", m
    assert_contract(out, sdpa_math_path(q, k, v, mask), ref64(q, k, v, mask.float()))


def test_math_form_weights_returned_is_a_near_miss():
    """output_attentions: the probabilities are returned too, so the decomposed attention stays."""
    q, k, v = qkv()
    mask = torch.zeros(2, 1, 1, 24)
    fn = lambda q, k, v, mask: hf_eager(q, k, v, mask, weights=True)  # noqa: E731
    out, seen = compile_run(fn, q, k, v, mask)
    assert seen[0].after[OP] == 0
    assert "output_attentions" in attention_misses(seen)[0].reason
    torch.testing.assert_close(out[0], fn(q, k, v, mask)[0])


@pytest.mark.parametrize("form", ["heads_in_rows", "v_3d"])
def test_math_form_3d_p_at_v_not_b_h_is_a_near_miss(form):
    """4D scores and softmax, then a 3D ``P @ V`` that is no (B*H) flattening of (B, H, L, D) tensors, its result
    used 3D: the heads folded into the query rows ((B, H*Lq, Lkv) @ (B, Lkv, Dv) of a 1-head V), or V a plain
    (B*H, Lkv, Dv) input that is no view of a 4D tensor. Both stay, with the 3D bmm's reason (the fold at batch 1,
    ``score_forms.check_merged``, takes only the (B*H, Lq, Lkv) @ (B*H, Lkv, Dv) flattenings)."""
    q, k, v = qkv(hkv=1)
    if form == "v_3d":
        v = v.expand(2, 8, 24, 16).reshape(16, 24, 16).clone()

    def fn(q, k, v):
        p = torch.softmax(q @ k.transpose(-1, -2) * 0.25, -1)  # (2, 8, 1, 24)
        if form == "heads_in_rows":
            return torch.bmm(p.reshape(2, 8, 24), v.reshape(2, 24, 16)).reshape(2, -1)
        return torch.bmm(p.reshape(16, 1, 24), v).reshape(2, -1)

    out, seen = compile_run(fn, q, k, v)
    assert all(c.after[OP] == 0 for c in seen)
    (miss,) = attention_misses(seen)
    assert miss.reason.startswith("the attention is a 3D bmm over (B*H, L, D)"), miss.reason
    if form == "heads_in_rows":
        assert "not (B*H, Lq, Lkv) @ (B*H, Lkv, Dv) flattenings" in miss.reason, miss.reason
    torch.testing.assert_close(out, fn(q, k, v))


def test_math_form_v_head_dim_differs():
    """Dv != D (CPU SDPA decomposes it): V sliced after its repeat, so K and V are taken as given."""
    q, k, v = qkv()
    fn = lambda q, k, v, mask: F.scaled_dot_product_attention(q, repeat_kv(k, 4), repeat_kv(v, 4)[..., :8])  # noqa: E731
    out, seen = compile_run(fn, q, k, v, None)
    assert seen[0].after[OP] == 1
    assert "both taken as given" in attention_matches(seen)[0].note
    torch.testing.assert_close(out, fn(q, k, v, None))


class SinkAttention(torch.nn.Module):
    """transformers' GPT-OSS ``eager_attention_forward`` (models/gpt_oss/modeling_gpt_oss.py, 5.x) over a
    StaticCache-like buffer: the new K/V written with ``index_copy_`` at ``cache_position``, the unfilled slots
    masked with ``finfo.min``, one query (decode)."""

    def __init__(self, b=2, hq=8, hkv=2, max_len=24, d=16, dtype=torch.bfloat16):
        super().__init__()
        self.num_key_value_groups, self.scaling = hq // hkv, d**-0.5
        self.sinks = torch.nn.Parameter(torch.randn(hq, generator=torch.Generator().manual_seed(8)).to(dtype))
        self.register_buffer("keys", torch.zeros(b, hkv, max_len, d, dtype=dtype))
        self.register_buffer("values", torch.zeros(b, hkv, max_len, d, dtype=dtype))

    def forward(self, query, key, value, cache_position):
        self.keys.index_copy_(2, cache_position, key)
        self.values.index_copy_(2, cache_position, value)
        slots = torch.arange(self.keys.shape[2], device=query.device)
        attention_mask = torch.zeros(slots.shape, dtype=query.dtype).masked_fill(
            slots > cache_position[-1], torch.finfo(query.dtype).min)[None, None, None, :]
        key_states = repeat_kv(self.keys, self.num_key_value_groups)
        value_states = repeat_kv(self.values, self.num_key_value_groups)
        attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * self.scaling
        attn_weights = attn_weights + attention_mask
        sinks = self.sinks.reshape(1, -1, 1, 1).expand(query.shape[0], -1, query.shape[-2], -1)
        combined_logits = torch.cat([attn_weights, sinks], dim=-1)
        combined_logits = combined_logits - combined_logits.max(dim=-1, keepdim=True).values
        probs = F.softmax(combined_logits, dim=-1, dtype=combined_logits.dtype)
        scores = probs[..., :-1]  # we drop the sink here
        attn_weights = F.dropout(scores, p=0.0, training=self.training).to(value_states.dtype)
        attn_output = torch.matmul(attn_weights, value_states)
        return attn_output.transpose(1, 2).contiguous()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_math_form_attention_with_sinks(dtype):
    """GPT-OSS's attention with sinks (a per-head logit concatenated to the scores before the softmax, its
    column dropped after it) becomes the op with ``sinks`` (tests/test_attention_sinks.py covers the rest); it
    was a near-miss while the op had none."""
    q, k, v = qkv(lq=1, lkv=1, dtype=dtype)
    pos = torch.tensor([5])
    eager, comp = SinkAttention(dtype=dtype).eval(), SinkAttention(dtype=dtype).eval()
    out, seen = compile_run(comp, q, k, v, pos, options={"provider": "reference"})
    assert all(c.report.error is None and c.after[OP] == 1 for c in seen), [c.after for c in seen]
    (match,) = attention_matches(seen)
    assert "with sinks" in match.note and f"sinks {str(dtype).split('.')[-1]}" in match.note, match.note
    assert attention_misses(seen) == []
    with torch.no_grad():
        want = eager(q, k, v, pos)
    tol = 2e-2 if dtype == torch.bfloat16 else 1e-5
    torch.testing.assert_close(out, want, atol=tol, rtol=tol)


# ------------------------------------------------------------------ CUDA SDPA variants, built on meta tensors


def _cuda_graph(fn, *shapes_dtypes):
    meta = [torch.empty(*s, dtype=dt, device="meta") for s, dt in shapes_dtypes]
    return make_fx(fn, tracing_mode="fake")(*meta)


def _run_pass(gm):
    PassManager(parse_options({"provider": "reference", "strict": True}), passes=[AttentionPass()])(gm.graph)
    gm.recompile()
    return last_report()


def _bias_from_bool(q, m, pad):
    """What SDPA's CUDA path does to a bool mask for the efficient kernel: where(~m, -inf, 0), aligned with
    constant_pad_nd + slice when the row stride is not a multiple of 8/16, expanded to (B, H, Lq, Lkv)."""
    bias = torch.where(m.logical_not(), float("-inf"), torch.zeros((), dtype=q.dtype, device=q.device))
    if pad:
        bias = F.pad(bias, (0, pad))[..., : m.shape[-1]]
    return bias.expand(q.shape[0], q.shape[1], q.shape[2], m.shape[-1])


@pytest.mark.parametrize("variant", ["efficient", "cudnn", "overrideable", "flash_gqa", "efficient_additive"])
def test_cuda_sdpa_variants_on_meta_graphs(variant):
    """The pass reads each CUDA SDPA target by schema name, recovers the bool mask through the bias
    conversion / alignment pad+slice / expand, and the rewritten graph computes the reference on CPU."""
    b, hq, hkv, lkv, d = 2, 8, 2, 13, 16

    def fn(q, k, v, m):
        kr, vr = repeat_kv(k, hq // hkv), repeat_kv(v, hq // hkv)
        if variant == "flash_gqa":  # no mask: HF passes enable_gqa=True, flash takes Hkv < Hq
            return aten._scaled_dot_product_flash_attention(q, k, v, scale=0.25)[0]
        if variant == "efficient_additive":
            return aten._scaled_dot_product_efficient_attention(q, kr, vr, m.expand(b, hq, 1, lkv), False)[0]
        bias = _bias_from_bool(q, m, pad=3)
        if variant == "efficient":
            return aten._scaled_dot_product_efficient_attention(q, kr, vr, bias, False)[0]
        if variant == "cudnn":
            return aten._scaled_dot_product_cudnn_attention(q, kr, vr, bias, False)[0]
        return aten._scaled_dot_product_fused_attention_overrideable(q, kr, vr, bias)[0]

    mdt = torch.float32 if variant == "efficient_additive" else torch.bool
    gm = _cuda_graph(fn, ((b, hq, 1, d), torch.float32), ((b, hkv, lkv, d), torch.float32),
                     ((b, hkv, lkv, d), torch.float32), ((b, 1, 1, lkv), mdt))
    rep = _run_pass(gm)
    assert rep.error is None and rep.count("decode_attention") == 1, rep
    targets = [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
    assert not any("scaled_dot_product" in t or "clone" in t or "constant_pad" in t for t in targets), targets
    if variant != "efficient_additive" and variant != "flash_gqa":
        assert "mask=bool 2x1x1x13" in rep.matches[0].note, rep.matches[0].note
    q, k, v = qkv(b, hq, hkv, 1, lkv, d)
    gen = torch.Generator().manual_seed(4)
    keep = torch.rand(b, 1, 1, lkv, generator=gen) > 0.3
    m = keep if mdt == torch.bool else torch.randn(b, 1, 1, lkv, generator=gen).masked_fill(~keep, -math.inf)
    out = gm(q, k, v, m)
    scale = 0.25 if variant == "flash_gqa" else None
    want = ref64(q, k, v, None if variant == "flash_gqa" else m, scale)
    torch.testing.assert_close(out.double(), want, atol=1e-5, rtol=1e-5)


def test_cuda_efficient_logsumexp_used_is_a_near_miss():
    """An SDPA whose logsumexp is used (a training graph) is left alone."""
    def fn(q, k, v):
        out, lse, *_ = aten._scaled_dot_product_efficient_attention(q, k, v, None, True)
        return out, lse

    s = ((1, 4, 1, 16), torch.float16)
    gm = _cuda_graph(fn, s, ((1, 4, 8, 16), torch.float16), ((1, 4, 8, 16), torch.float16))
    rep = _run_pass(gm)
    assert rep.count("decode_attention") == 0 and "logsumexp" in rep.near_misses[0].reason
