"""RoPE cached path: the pass proves where cos/sin come from and emits ``rocm_fused::rope_cached``.

The table is built once at compile time (float64 angles rounded once to float32) when every input of the
cos/sin chain is known at compile time; otherwise (HF's inv_freq buffer as a graph input, positions past the
table, cos/sin that don't equal the table) the on-the-fly op is used, with the reason in the match note.
"""

from __future__ import annotations

import math

import pytest
import torch
from graph_utils import compile_run, graph_run_eagerly
from rope_spellings import hf_rope, hf_tables

from rocm_inductor.ops.rope import build_cos_sin_cache
from rocm_inductor.passes import rope as rope_pass

CACHED, ROPE = "rocm_fused.rope_cached.default", "rocm_fused.rope.default"


def test_table_is_float64_rounded_once():
    """Every entry equals float32(cos/sin(p * float64(inv_freq[j])) * scaling) exactly."""
    rd, theta, max_pos, scaling = 16, 10000.0, 300, 0.75
    inv = 1.0 / (theta ** (torch.arange(0, rd, 2, dtype=torch.int64).float() / rd))
    t = build_cos_sin_cache(inv, max_pos, scaling)
    assert t.shape == (max_pos, rd) and t.dtype == torch.float32 and t.is_contiguous()
    want = [[math.cos(p * float(f)) * scaling for f in inv] + [math.sin(p * float(f)) * scaling for f in inv]
            for p in range(max_pos)]
    assert torch.equal(t, torch.tensor(want, dtype=torch.float64).to(torch.float32))
    with pytest.raises(ValueError):
        build_cos_sin_cache(inv, 0)


def _hf_module(b, s, rd, dtype, theta=10000.0, scaling=1.0, offset=0, sin_theta=None):
    """HF Llama's rotary chain (inv_freq known at compile time: computed in the graph) + apply_rotary_pos_emb."""
    def fn(q, k):
        c, _ = hf_tables(b, s, rd, dtype, theta, scaling, offset)
        _, sn = hf_tables(b, s, rd, dtype, sin_theta or theta, scaling, offset)
        return hf_rope(q, k, c, sn)
    return fn


def _run(fn, q, k, **kw):
    out, seen = compile_run(fn, q, k, **kw)
    (cap,) = seen
    ms = [m for m in cap.report.matches if m.pass_name == "rope"]
    assert len(ms) == 1, str(cap.report)
    eager = fn(q, k)
    ref = fn(q.double(), k.double())
    for o, e, r in zip(out, eager, ref):
        # the cached table is at least as exact as eager's (float32 angles, cos rounded to the dtype)
        err, err_e = (o.double() - r).abs().max(), (e.double() - r).abs().max()
        assert err <= err_e + torch.finfo(o.dtype).eps * r.abs().max(), (err, err_e)
    return cap, ms[0]


@pytest.mark.parametrize("dtype,scaling", [(torch.bfloat16, 1.0), (torch.float32, 0.5)])
def test_hf_chain_takes_cached_path(dtype, scaling):
    torch.manual_seed(0)
    q = torch.randn(2, 5, 4, 32, dtype=dtype).transpose(1, 2)
    k = torch.randn(2, 5, 2, 32, dtype=dtype).transpose(1, 2)
    cap, m = _run(_hf_module(2, 5, 32, dtype, scaling=scaling), q, k)
    assert cap.after.get(CACHED, 0) == 1 and cap.after.get(ROPE, 0) == 0, str(cap.report)
    assert cap.before.get("aten.cos.default", 0) == 1 and cap.before.get("aten.sin.default", 0) == 1
    assert cap.after.get("aten.cos.default", 0) == 0 and cap.after.get("aten.sin.default", 0) == 0
    assert m.op == "rope_cached" and m.detail.startswith("cached: float32 table [5, 32]")
    assert m.note == "cached table [5, 32]"
    assert ("scaling 0.5 folded" in m.detail) == (scaling != 1.0)


def test_triton_provider_cached():
    """The Triton kernel (TRITON_INTERPRET=1 on CPU) serves the cached op the pass emits."""
    torch.manual_seed(0)
    q = torch.randn(1, 3, 2, 16, dtype=torch.bfloat16).transpose(1, 2)
    cap, m = _run(_hf_module(1, 3, 16, torch.bfloat16), q, q.clone(), options={"provider": "triton"})
    assert cap.after.get(CACHED, 0) == 1 and m.provider == "triton"


def test_symbolic_positions_take_on_the_fly():
    """Dynamic sequence length: the positions have no static bound."""
    def fn(q, k):
        c, sn = hf_tables(1, q.shape[2], 16, torch.float32)
        return hf_rope(q, k, c, sn)

    q, k = torch.randn(1, 2, 6, 16), torch.randn(1, 2, 6, 16)
    torch._dynamo.mark_dynamic(q, 2)
    torch._dynamo.mark_dynamic(k, 2)
    cap, m = _run(fn, q, k, dynamic=None)
    assert cap.after.get(CACHED, 0) == 0 and m.op == "rope"
    assert m.detail.startswith("on-the-fly: positions:") and "symbolic" in m.detail


def test_positions_past_table_take_on_the_fly(monkeypatch):
    monkeypatch.setattr(rope_pass, "MAX_TABLE_POS", 64)
    q = torch.randn(1, 2, 4, 16, dtype=torch.bfloat16)
    cap, m = _run(_hf_module(1, 4, 16, torch.bfloat16, offset=62), q, q.clone())
    assert cap.after.get(CACHED, 0) == 0 and cap.after.get(ROPE, 0) == 1
    assert m.op == "rope" and "on-the-fly: positions [62, 65] are past the table" in m.detail


def test_mismatched_theta_takes_on_the_fly():
    """cos from theta 1e4, sin from theta 5e5: no one table reproduces both."""
    q = torch.randn(1, 2, 6, 16, dtype=torch.float32)
    cap, m = _run(_hf_module(1, 6, 16, torch.float32, sin_theta=5e5), q, q.clone())
    assert cap.after.get(CACHED, 0) == 0 and cap.after.get(ROPE, 0) == 1
    assert "on-the-fly: sin differs from the table" in m.detail


def test_model_tables_take_on_the_fly():
    """cos/sin passed in (the model's own table): on-the-fly, said so in the report."""
    q = torch.randn(1, 2, 3, 16)
    c, sn = hf_tables(1, 3, 16, torch.float32)
    out, seen = compile_run(hf_rope, q, q.clone(), c, sn)
    (m,) = seen[0].report.matches
    assert seen[0].after.get(CACHED, 0) == 0 and m.op == "rope"
    assert "on-the-fly: cos/sin are not computed in this graph" in m.detail


@pytest.mark.slow
def test_hf_llama_inv_freq_is_a_graph_input():
    """Real HF Llama: Dynamo lifts the inv_freq buffer as a graph input, so its values are unknown at compile
    time and every layer takes the on-the-fly path, with that reason in the report. The rewritten graph runs
    eagerly (``graph_run_eagerly``: the pass and counts are a real compile's; Llama compiles end to end in
    test_attention_models)."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32)
    model = transformers.LlamaForCausalLM(cfg).eval()
    ids = torch.randint(1, 64, (1, 5))
    with graph_run_eagerly():
        out, seen = compile_run(lambda i: model(i, use_cache=False).logits, ids,
                                options={"passes": {"rms_norm": False}})
    ms = [m for m in seen[0].report.matches if m.pass_name == "rope"]
    assert len(ms) == 2 and seen[0].after.get(ROPE, 0) == 2 and seen[0].after.get(CACHED, 0) == 0
    assert all(m.detail.startswith("on-the-fly: inv_freq: depends on graph input") for m in ms), ms
    # the table shows the short note; the full text is in JSON (detail) and the DEBUG log (issue 17)
    assert all(m.note == "on-the-fly (no cached table)" for m in ms), ms
    table = str(seen[0].report)
    assert "inv_freq" not in table and "notes shortened" in table
    torch.testing.assert_close(out, model(ids, use_cache=False).logits, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("provider", ["reference", "triton"])
def test_positions_outside_the_table_are_clamped(provider):
    """The public op's contract (issue 17): a position outside [0, max_pos) reads the nearest row, the same in
    every provider; the Triton kernel never reads past the table (it returned 4e19 / non-finite before)."""
    max_pos, rd, h = 8, 16, 2
    inv = 1.0 / (10000.0 ** (torch.arange(0, rd, 2).float() / rd))
    table = build_cos_sin_cache(inv, max_pos)
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, h, 5, rd, generator=g), torch.randn(1, h, 5, rd, generator=g)
    pos = torch.tensor([[[-1, 0, max_pos - 1, max_pos, 10**6]]])
    clamped = pos.clamp(0, max_pos - 1)
    qo, ko = torch.ops.rocm_fused.rope_cached(q, k, pos, table, rd, False, provider)
    qc, kc = torch.ops.rocm_fused.rope_cached(q, k, clamped, table, rd, False, "reference")
    assert torch.isfinite(qo).all() and torch.isfinite(ko).all()
    torch.testing.assert_close((qo, ko), (qc, kc), rtol=1e-6, atol=1e-6)
