"""Attention sinks in ``rocm_fused::decode_attention`` (GPT-OSS): the op, its reference and Triton kernel against
transformers' GPT-OSS ``eager_attention_forward`` (models/gpt_oss/modeling_gpt_oss.py, the code itself, run
on a stand-in module), the pass on GPT-OSS-style attention, and a tiny HF GPT-OSS model decoding over a
``StaticCache`` (sliding and full layers).

CPU, Triton under ``TRITON_INTERPRET=1`` (tiny shapes). Eager's masks are HF's additive ``finfo.min`` masks
(masking_utils' eager mask) or ``-inf``; a sliding window is a mask (what GPT-OSS's sliding layers receive).
"""

from __future__ import annotations

import types

import pytest
import torch
import torch.nn.functional as F
from graph_utils import assert_contract, compile_run, graph_run_eagerly

from rocm_inductor.providers.reference_attention import decode_attention_ref

gpt_oss = pytest.importorskip("transformers.models.gpt_oss.modeling_gpt_oss")

OP = "rocm_fused.decode_attention.default"
PROVIDERS = ["reference", "triton"]


def make(b, hq, hkv, lq, lkv, d, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(b, h, n, d, generator=gen).to(dtype) for h, n in ((hq, lq), (hkv, lkv), (hkv, lkv)))
    sinks = (torch.randn(hq, generator=gen) * 2).to(dtype)
    return q, k, v, sinks


def keep_mask(pos, lq, lkv, window=None):
    """(B, 1, Lq, Lkv) bool: query i of row b at position pos[b] + i sees slots <= it (and > it - window)."""
    qpos = torch.as_tensor(pos)[:, None] + torch.arange(lq)[None, :]
    slots = torch.arange(lkv)[None, None, :]
    keep = slots <= qpos[:, :, None]
    if window is not None:
        keep &= slots > qpos[:, :, None] - window
    return keep[:, None]


def additive(keep, dtype):
    """HF's eager mask: 0 where kept, ``finfo(dtype).min`` elsewhere."""
    return torch.zeros(keep.shape, dtype=dtype).masked_fill(~keep, torch.finfo(dtype).min)


def eager(q, k, v, mask, scale, sinks, cast=None):
    """transformers' GPT-OSS eager attention (the library's own function), back in (B, Hq, Lq, Dv) layout.

    ``mask``: additive, in q's dtype (eager adds it to the scores). ``cast``: compute in this dtype instead."""
    module = types.SimpleNamespace(sinks=sinks if cast is None else sinks.to(cast), training=False,
                                   num_key_value_groups=q.shape[1] // k.shape[1])
    if cast is not None:
        q, k, v, mask = (None if t is None else t.to(cast) for t in (q, k, v, mask))
    out, _ = gpt_oss.eager_attention_forward(module, q, k, v, mask, scale)
    return out.transpose(1, 2)


def op(q, k, v, mask, scale, provider, sinks=None):
    if sinks is None:
        return torch.ops.rocm_fused.decode_attention(q, k, v, mask, scale, provider)
    return torch.ops.rocm_fused.decode_attention(q, k, v, mask, scale, provider, sinks=sinks)


@pytest.fixture
def splits(request):
    """Force the Triton kernel's split count (``None``: its own choice, one split on CPU)."""
    from rocm_inductor.providers.triton import attention

    old = attention.FORCE_SPLITS
    attention.FORCE_SPLITS = request.param
    yield request.param
    attention.FORCE_SPLITS = old


# ------------------------------------------------------------------------------------------------- the op


@pytest.mark.parametrize("splits", [None, 3], indirect=True)
@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("window", [None, 5])
@pytest.mark.parametrize("hq,hkv,lq", [(8, 2, 1), (4, 4, 1), (8, 1, 3)])
def test_op_matches_gpt_oss_eager(provider, window, hq, hkv, lq, splits):
    """float32: the op with sinks (a causal or sliding-window mask, GQA / MHA / MQA, one or three query positions,
    one or three KV splits) equals GPT-OSS's eager attention; float64 eager is the truth."""
    q, k, v, sinks = make(2, hq, hkv, lq, 40, 16, torch.float32)
    keep = keep_mask([17, 36], lq, 40, window)
    scale = 16 ** -0.5
    out = op(q, k, v, additive(keep, torch.float32), scale, provider, sinks)
    want = eager(q, k, v, additive(keep, torch.float32), scale, sinks)
    torch.testing.assert_close(out, want, atol=2e-5, rtol=2e-5)
    # the bool mask (True = attend) means the same
    torch.testing.assert_close(op(q, k, v, keep, scale, provider, sinks), want, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("sink_dtype", [torch.bfloat16, torch.float32])
def test_op_bf16_within_the_contract(provider, sink_dtype):
    """bfloat16 q/k/v, sinks in the model's dtype or float32: no further from float64 GPT-OSS eager than bf16
    eager itself (plus one ulp), the docs/ops.md contract."""
    q, k, v, sinks = make(3, 8, 2, 1, 64, 32, torch.bfloat16, seed=3)
    sinks = sinks.to(sink_dtype)
    keep = keep_mask([10, 40, 63], 1, 64, window=16)
    scale = 32 ** -0.5
    mask = additive(keep, torch.bfloat16)
    out = op(q, k, v, mask, scale, provider, sinks)
    assert out.dtype == torch.bfloat16
    e = eager(q, k, v, mask, scale, sinks.to(torch.bfloat16))
    ref64 = eager(q, k, v, additive(keep, torch.float64), scale, sinks, cast=torch.float64)
    assert_contract(out, e, ref64)


@pytest.mark.parametrize("splits", [None, 2], indirect=True)
@pytest.mark.parametrize("provider", PROVIDERS)
def test_sinks_none_is_the_op_without_sinks(provider, splits):
    """``sinks=None`` is the op as it was (same call path, bit for bit), and a sink of ``-inf`` adds nothing:
    the same bits as no sinks."""
    q, k, v, sinks = make(2, 8, 2, 1, 48, 16, torch.bfloat16, seed=5)
    keep = keep_mask([20, 47], 1, 48)
    base = op(q, k, v, keep, 0.25, provider)
    assert torch.equal(op(q, k, v, keep, 0.25, provider, None), base)
    none = torch.full_like(sinks, float("-inf"))
    assert torch.equal(op(q, k, v, keep, 0.25, provider, none), base)
    assert torch.equal(base, decode_attention_ref(q, k, v, keep, 0.25)) or provider == "triton"
    assert not torch.equal(op(q, k, v, keep, 0.25, provider, sinks), base)


@pytest.mark.parametrize("splits", [None, 2], indirect=True)
@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("fill", ["finfo.min", "-inf", "bool"])
def test_fully_masked_rows_with_sinks_are_zero_as_in_eager(provider, fill, splits):
    """Graph padding: a batch row whose every key is masked. GPT-OSS eager gives zeros there (the sink is the
    whole denominator; ``finfo.min`` or ``-inf`` alike); so does the op. The other rows are untouched."""
    q, k, v, sinks = make(3, 8, 2, 1, 32, 16, torch.float32, seed=7)
    keep = keep_mask([12, 31, 0], 1, 32)
    keep[1] = False  # row 1: padding
    if fill == "bool":
        mask = keep
    else:
        mask = additive(keep, torch.float32) if fill == "finfo.min" else \
            torch.zeros(keep.shape).masked_fill(~keep, float("-inf"))
    e = eager(q, k, v, additive(keep, torch.float32) if fill == "bool" else mask, 0.25, sinks)
    assert torch.equal(e[1], torch.zeros_like(e[1]))
    out = op(q, k, v, mask, 0.25, provider, sinks)
    assert torch.equal(out[1], torch.zeros_like(out[1]))
    torch.testing.assert_close(out, e, atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_fully_masked_rows_without_sinks_match_eager(provider):
    """Without sinks the op gives what each eager spelling gives on a padding row: HF's eager attention with its
    ``finfo.min`` mask averages the row uniformly (softmax of equal scores), SDPA with a bool mask gives zeros
    (``_safe_softmax``, torch >= 2.5). Eager's math softmax over ``-inf`` everywhere is NaN; the op (and SDPA)
    give zeros there, the contract's documented choice (docs/ops.md)."""
    q, k, v, _ = make(2, 4, 2, 1, 24, 16, torch.float32, seed=9)
    keep = keep_mask([10, 23], 1, 24)
    keep[0] = False
    mask = additive(keep, torch.float32)
    g = 2
    s = q @ k.repeat_interleave(g, 1).transpose(-1, -2) * 0.25 + mask
    hf_eager = torch.softmax(s, -1) @ v.repeat_interleave(g, 1)
    torch.testing.assert_close(op(q, k, v, mask, 0.25, provider), hf_eager, atol=2e-5, rtol=2e-5)
    sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, scale=0.25, enable_gqa=True)
    assert torch.equal(sdpa[0], torch.zeros_like(sdpa[0]))
    torch.testing.assert_close(op(q, k, v, keep, 0.25, provider), sdpa, atol=2e-5, rtol=2e-5)
    nan_row = torch.softmax(s.masked_fill(~keep, float("-inf")), -1)[0]
    assert torch.isnan(nan_row).all()
    assert torch.equal(op(q, k, v, keep, 0.25, provider)[0], torch.zeros(4, 1, 16))


@pytest.mark.parametrize("provider", PROVIDERS)
def test_empty_batch_and_fake(provider):
    """B = 0 gives an empty output with sinks too; the fake implementation agrees on shapes."""
    q, k, v, sinks = make(0, 4, 2, 1, 8, 16, torch.float32)
    assert op(q, k, v, None, 0.25, provider, sinks).shape == (0, 4, 1, 16)
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        fq, fk, fv, fs = (mode.from_tensor(t) for t in make(2, 4, 2, 1, 8, 16, torch.bfloat16))
        assert op(fq, fk, fv, None, 0.25, provider, fs).shape == (2, 4, 1, 16)


def test_bad_sinks_raise():
    q, k, v, sinks = make(1, 4, 2, 1, 8, 16, torch.bfloat16)
    with pytest.raises(ValueError, match=r"sinks must be \(4,\)"):
        op(q, k, v, None, 0.25, "reference", sinks[:2])
    with pytest.raises(ValueError, match="float32 or q's dtype"):
        op(q, k, v, None, 0.25, "reference", sinks.half())


def test_spec_and_triton_check():
    from rocm_inductor.ops.attention import attention_spec
    from rocm_inductor.providers.triton import attention

    q, k, v, sinks = make(1, 4, 2, 1, 8, 16, torch.bfloat16)
    assert attention_spec(q, k, v, None)["sinks_dtype"] is None
    spec = attention_spec(q, k, v, None, sinks=sinks)
    assert spec["sinks_dtype"] == torch.bfloat16 and attention.check(spec) is None
    assert "sinks dtype" in attention.check({**spec, "sinks_dtype": torch.int64})


def test_reference_sink_math():
    """The reference's sink is exactly a softmax column that is dropped (float64 by hand; the reference computes
    in float32)."""
    q, k, v, sinks = make(1, 2, 1, 1, 5, 4, torch.float64, seed=11)
    out = decode_attention_ref(q, k, v, None, 0.5, sinks)
    s = (q @ k.transpose(-1, -2)).squeeze(2) * 0.5  # (1, 2, 5)
    p = torch.softmax(torch.cat([s, sinks.view(1, 2, 1)], -1), -1)[..., :-1]
    torch.testing.assert_close(out.squeeze(2), p @ v.squeeze(1), atol=1e-6, rtol=1e-6)


# ------------------------------------------------------------------------------------------------- the pass


def _matches(seen):
    return [m for c in seen for m in c.report.matches if m.pass_name == "attention"]


def _misses(seen):
    return [n for c in seen for n in c.report.near_misses if n.pass_name == "attention"]


class GptOssStyle(torch.nn.Module):
    """One GPT-OSS attention over a static cache: the new K/V written at ``cache_position``, HF's additive
    ``finfo.min`` mask (causal over the filled slots, ``window``: GPT-OSS's sliding layers), transformers'
    own GPT-OSS ``eager_attention_forward``. ``form`` spells the sinks otherwise, for the near-misses."""

    def __init__(self, b=2, hq=8, hkv=2, max_len=24, d=16, dtype=torch.float32, window=None, sink_dtype=None,
                 form="gpt_oss"):
        super().__init__()
        self.num_key_value_groups, self.scaling, self.window, self.form = hq // hkv, d ** -0.5, window, form
        gen = torch.Generator().manual_seed(8)
        shape = (b, hq) if form == "per_batch" else (hq,)
        self.sinks = torch.nn.Parameter(torch.randn(shape, generator=gen).to(sink_dtype or dtype))
        self.register_buffer("keys", torch.randn(b, hkv, max_len, d, generator=gen).to(dtype))
        self.register_buffer("values", torch.randn(b, hkv, max_len, d, generator=gen).to(dtype))

    def forward(self, query, key, value, cache_position):
        self.keys.index_copy_(2, cache_position, key)
        self.values.index_copy_(2, cache_position, value)
        slots = torch.arange(self.keys.shape[2])
        masked = slots > cache_position[-1]
        if self.window is not None:
            masked = masked | (slots <= cache_position[-1] - self.window)
        mask = torch.zeros(slots.shape, dtype=query.dtype).masked_fill(masked, torch.finfo(query.dtype).min)
        mask = mask[None, None, None, :]
        if self.form == "gpt_oss":
            out, _ = gpt_oss.eager_attention_forward(self, query, self.keys, self.values, mask, self.scaling)
            return out
        k, v = (x.repeat_interleave(self.num_key_value_groups, 1) for x in (self.keys, self.values))
        s = torch.matmul(query, k.transpose(2, 3)) * self.scaling + mask
        b, h, lq = query.shape[0], query.shape[1], query.shape[2]
        if self.form == "per_batch":  # one sink per (batch row, head): not the op's per-head sinks
            col = self.sinks.reshape(b, h, 1, 1).expand(-1, -1, lq, -1)
            p = torch.softmax(torch.cat([s, col], -1), -1)[..., :-1]
        elif self.form == "sink_first":  # the sink column before the scores, dropped with [..., 1:]
            col = self.sinks.reshape(1, -1, 1, 1).expand(b, -1, lq, -1)
            p = torch.softmax(torch.cat([col, s], -1), -1)[..., 1:]
        else:  # "two_columns": the sink twice, both dropped
            col = self.sinks.reshape(1, -1, 1, 1).expand(b, -1, lq, -1)
            p = torch.softmax(torch.cat([s, col, col], -1), -1)[..., :-2]
        return torch.matmul(p.to(v.dtype), v).transpose(1, 2)


def _qkv_step(dtype, b=2, hq=8, hkv=2, d=16, lq=1):
    gen = torch.Generator().manual_seed(4)
    q = torch.randn(b, hq, lq, d, generator=gen).to(dtype)
    k, v = (torch.randn(b, hkv, lq, d, generator=gen).to(dtype) for _ in range(2))
    return q, k, v


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("dtype,sink_dtype,window", [
    (torch.float32, None, None), (torch.float32, None, 4), (torch.bfloat16, None, 4),
    (torch.bfloat16, torch.float32, None)])
def test_pass_rewrites_gpt_oss_attention(provider, dtype, sink_dtype, window):
    """GPT-OSS's eager attention (transformers' own function) over a static cache, full or sliding-window mask,
    sinks in the model's dtype or float32: one decode_attention with sinks, the concatenation and softmax
    gone, numerics as eager's (float32) or within the contract (bfloat16)."""
    q, k, v = _qkv_step(dtype)
    pos = torch.tensor([13])
    kw = dict(dtype=dtype, window=window, sink_dtype=sink_dtype)
    e_mod, c_mod = GptOssStyle(**kw).eval(), GptOssStyle(**kw).eval()
    out, seen = compile_run(c_mod, q, k, v, pos, options={"provider": provider})
    (c,) = seen
    assert c.before[OP] == 0 and c.after[OP] == 1 and c.after["aten.cat.default"] == 0, c.after
    (m,) = _matches(seen)
    assert m.provider == provider and "with sinks" in m.note and "GQA 8/2=4" in m.note, m.note
    assert f"sinks {str(sink_dtype or dtype).split('.')[-1]}" in m.note, m.note
    assert _misses(seen) == []
    with torch.no_grad():
        want = e_mod(q, k, v, pos)
    if dtype == torch.float32:
        torch.testing.assert_close(out, want, atol=2e-5, rtol=2e-5)
    else:
        m64 = GptOssStyle(**{**kw, "dtype": torch.float64, "sink_dtype": torch.float64}).eval()
        m64.sinks.data = e_mod.sinks.data.double()
        with torch.no_grad():
            ref64 = m64(q.double(), k.double(), v.double(), pos)
        assert_contract(out, want, ref64)


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("window", [None, 4])
def test_pass_rewrites_gpt_oss_attention_at_batch_1(provider, window):
    """Batch 1 with GPT-OSS's head merge ``attn_output.reshape(*input_shape, -1)`` after the attention: the
    transpose of (1, H, 1, D) moves only size-1 dims, so ``views.py`` folds the P @ V view, transpose and reshape
    into one reshape of the 3D bmm (no (B, H, Lq, Dv) view left). Still one decode_attention with sinks, its
    output flattened back to the bmm's (H, 1, D); numerics as eager's."""
    q, k, v = _qkv_step(torch.float32, b=1)
    pos = torch.tensor([13])
    e_mod, c_mod = GptOssStyle(b=1, window=window).eval(), GptOssStyle(b=1, window=window).eval()
    merge = lambda mod: lambda *a: mod(*a).reshape(1, 1, -1)  # noqa: E731  (GptOssAttention's head merge)
    out, seen = compile_run(merge(c_mod), q, k, v, pos, options={"provider": provider})
    (c,) = seen
    assert c.after[OP] == 1 and c.after["aten.bmm.default"] == 0 and c.after["aten.cat.default"] == 0, c.after
    (m,) = _matches(seen)
    assert "with sinks" in m.note and "P @ V used (B*H, Lq, Dv)" in m.note and "GQA 8/2=4" in m.note, m.note
    assert _misses(seen) == []
    with torch.no_grad():
        torch.testing.assert_close(out, merge(e_mod)(q, k, v, pos), atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("form,reason", [
    ("per_batch", "not one logit per query head"),
    ("sink_first", "sliced other than [..., :-1]"),
    ("two_columns", "sliced other than [..., :-1]")])
def test_sink_forms_the_op_cannot_take_are_near_misses(form, reason):
    """Sink spellings the op cannot mean are left to Inductor with a reason that names the sinks."""
    q, k, v = _qkv_step(torch.float32)
    pos = torch.tensor([9])
    e_mod, c_mod = GptOssStyle(form=form).eval(), GptOssStyle(form=form).eval()
    out, seen = compile_run(c_mod, q, k, v, pos)
    assert all(c.after[OP] == 0 for c in seen)
    (miss,) = _misses(seen)
    assert miss.reason.startswith("attention with sinks") and reason in miss.reason, miss.reason
    with torch.no_grad():
        torch.testing.assert_close(out, e_mod(q, k, v, pos))


def test_pass_without_sinks_emits_the_op_as_before():
    """An attention without sinks gets the op's call without a sinks operand (the graph as before sinks)."""
    from test_attention_pass import hf_eager

    q, k, v = _qkv_step(torch.float32)
    k, v = (torch.randn(2, 2, 24, 16) for _ in range(2))
    mask = torch.zeros(2, 1, 1, 24)
    import rocm_inductor.passes.attention.emit as emit

    calls = []
    orig = emit.insert_call

    def spy(graph, before, target, args, kwargs=None, like=None):
        if target is torch.ops.rocm_fused.decode_attention.default:
            calls.append((len(args), kwargs))
        return orig(graph, before, target, args, kwargs, like)

    emit.insert_call = spy
    try:
        out, seen = compile_run(hf_eager, q, k, v, mask)
    finally:
        emit.insert_call = orig
    assert seen[0].after[OP] == 1 and calls == [(6, None)], calls
    torch.testing.assert_close(out, hf_eager(q, k, v, mask))


# ------------------------------------------------------------------------------------------------- a model


def _tiny_gpt_oss():
    """A tiny HF GPT-OSS (random weights, no download): layer 0 sliding (window 4), layer 1 full, 4 experts top-2,
    eager attention (GPT-OSS has no SDPA path); sinks drawn from N(0, 1) (they start at zero)."""
    import transformers

    cfg = transformers.GptOssConfig(hidden_size=64, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                    num_key_value_heads=2, head_dim=16, vocab_size=256, max_position_embeddings=256,
                                    num_local_experts=4, num_experts_per_tok=2, sliding_window=4,
                                    layer_types=["sliding_attention", "full_attention"])
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    model = transformers.GptOssForCausalLM(cfg).eval()
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.sinks.normal_()
    return model, cfg


def _decode_tiny_gpt_oss(provider, b):
    """Greedy decode of :func:`_tiny_gpt_oss` at batch ``b`` (the model test below); returns the reports' notes
    of decode_attention."""
    from bench_utils import greedy_equal
    from bench_utils import hf_models as bench_hf_models

    import rocm_inductor

    hf_models = bench_hf_models()
    model, cfg = _tiny_gpt_oss()
    max_len, steps, pos = 16, 3, 6
    step_e, _, _ = hf_models.decode_step(model, cfg, b, 1, 0, max_len, "cpu", torch.float32)
    step_c, _, _ = hf_models.decode_step(model, cfg, b, 1, 0, max_len, "cpu", torch.float32)
    prompt = torch.randint(0, cfg.vocab_size, (b, pos), generator=torch.Generator().manual_seed(1))
    cp = torch.arange(pos)
    rocm_inductor.clear_reports()
    torch._dynamo.reset()
    opts = {"provider": provider, "strict": True}
    with torch.no_grad(), torch._inductor.config.patch(force_disable_caches=True), \
            graph_run_eagerly(enabled=provider != "reference"):
        first = step_e(prompt, cp.expand(b, pos), cp)[:, -1:].argmax(-1)
        step_c(prompt, cp.expand(b, pos), cp)
        comp = torch.compile(step_c, backend="rocm_fused", options=opts, fullgraph=True)
        greedy_equal(step_e, comp, first, pos, b, steps)
    reps = rocm_inductor.reports()
    assert reps
    for r in reps:
        assert r.error is None, r.error
        assert r.count("decode_attention") == cfg.num_hidden_layers, str(r)
        assert not [n for n in r.near_misses if n.pass_name == "attention"], str(r)
    notes = [m.note for m in reps.matches if m.op == "decode_attention"]
    assert all("with sinks" in n and m_p == provider for n, m_p in
               zip(notes, [m.provider for m in reps.matches if m.op == "decode_attention"])), notes
    assert any("kv_len=4 " in n for n in notes) and any(f"kv_len={max_len} " in n for n in notes), notes
    return notes


@pytest.mark.slow
@pytest.mark.parametrize("provider", PROVIDERS)
def test_tiny_gpt_oss_static_cache_decode(provider):
    """Greedy decode of a tiny GPT-OSS over a StaticCache (benchmarks/hf_models.py's step), prefilled eagerly past
    the sliding window: every layer's attention (sliding and full) becomes decode_attention with sinks, logits
    within 1e-4 of eager's (relative to their max), greedy tokens equal to eager's. The reference case is the
    suite's end-to-end GPT-OSS compile; the Triton case runs its rewritten graphs eagerly (``graph_run_eagerly``:
    the passes and counts are a real compile's, the kernel runs under the interpreter either way)."""
    _decode_tiny_gpt_oss(provider, 2)


@pytest.mark.slow
def test_tiny_gpt_oss_static_cache_decode_batch_1():
    """The same decode at batch 1 (reference provider): the head merge after P @ V folds into one reshape of the 3D
    bmm there (``score_forms.check_merged``), which was a near-miss ("the attention is a 3D bmm over (B*H, L, D)")
    on both layers; now both are decode_attention with sinks, logits and greedy tokens as eager's."""
    notes = _decode_tiny_gpt_oss("reference", 1)
    assert notes and all("P @ V used (B*H, Lq, Dv)" in n for n in notes), notes
