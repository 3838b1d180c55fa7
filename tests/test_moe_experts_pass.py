"""The moe_experts pass on HF's experts blocks (transformers ``integrations/moe.py``), the op and its providers.

Blocks: ``Qwen3MoeSparseMoeBlock`` (router + experts, (E, 2I, H) weights, SwiGLU) and ``GptOssMLP`` ((E, H, 2I)
weights, interleaved gate/up, clamped SwiGLU, biases), with the ``batched_mm`` and ``grouped_mm`` experts
implementations, random weights, CPU. Each rewrite must remove every expert GEMM and gathered weight copy and
match eager within the numerics contract; prefill, a foreign activation and a training graph are near-misses.
The Triton kernel runs through the interpreter (tests/conftest.py) against the reference.
"""

from __future__ import annotations

import pytest
import torch
from graph_utils import compile_run, needs_interpreter

import rocm_inductor
from rocm_inductor.providers.reference_moe_experts import moe_experts_ref

transformers = pytest.importorskip("transformers")

EXPERT_GEMMS = ("aten.bmm.default", "aten._grouped_mm.default", "transformers.grouped_mm_fallback.default")


def _qwen3_block(impl: str, dtype: torch.dtype, **kw):
    cfg = transformers.Qwen3MoeConfig(hidden_size=64, moe_intermediate_size=32, num_experts=8, num_experts_per_tok=2,
                                      num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2, **kw)
    cfg._experts_implementation = impl
    torch.manual_seed(0)
    blk = transformers.models.qwen3_moe.modeling_qwen3_moe.Qwen3MoeSparseMoeBlock(cfg).to(dtype).eval()
    with torch.no_grad():
        for p in blk.parameters():
            p.normal_(0, 0.1)
    return blk


def _gpt_oss_block(impl: str, dtype: torch.dtype):
    cfg = transformers.GptOssConfig(hidden_size=64, intermediate_size=48, num_local_experts=8, num_experts_per_tok=2,
                                    num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2, head_dim=16)
    cfg._experts_implementation = impl
    torch.manual_seed(0)
    blk = transformers.models.gpt_oss.modeling_gpt_oss.GptOssMLP(cfg).to(dtype).eval()
    with torch.no_grad():
        for p in blk.parameters():
            p.normal_(0, 0.3)
    return blk


def _first(out):
    return out[0] if isinstance(out, tuple) else out


def _expert_ops(counts) -> dict:
    return {k: v for k, v in counts.items() if k in EXPERT_GEMMS or k == "aten.index.Tensor"}


def _run(blk, tokens: int, dtype: torch.dtype, provider: str = "reference", **options):
    x = torch.randn(1, tokens, 64, generator=torch.Generator().manual_seed(1)).to(dtype)
    rocm_inductor.clear_reports()
    out, seen = compile_run(blk, x, options={"provider": provider, **options})
    with torch.no_grad():
        eager = _first(blk(x))
    assert len(seen) == 1
    return _first(out), eager, seen[0]


def _misses(cap) -> list[str]:
    return [m.reason for m in cap.report.near_misses if m.pass_name == "moe_experts"]


@pytest.mark.slow  # a block compile: ~10 s on 2 shared cores
@pytest.mark.parametrize("impl", ["batched_mm", "grouped_mm"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_qwen3_block_rewritten(impl, dtype):
    """One op replaces both expert GEMMs and the gathered copies; output within eager's error + 1 ulp."""
    out, eager, cap = _run(_qwen3_block(impl, dtype), 3, dtype)
    before = _expert_ops(cap.before)
    assert sum(before.get(k, 0) for k in EXPERT_GEMMS) == 2, before
    assert cap.after["rocm_fused.moe_experts.default"] == 1
    assert not any(cap.after.get(k, 0) for k in EXPERT_GEMMS), cap.after
    if impl == "batched_mm":  # the two gathers gate_up_proj[ids] / down_proj[ids] are gone
        assert before["aten.index.Tensor"] == 2 and cap.after.get("aten.index.Tensor", 0) == 0, cap.after
    match = [m for m in cap.report.matches if m.pass_name == "moe_experts"]
    assert len(match) == 1 and f"{impl}, E=8 k=2 silu" in match[0].note and "verified" in match[0].note
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    assert float((out.float() - eager.float()).abs().max() / eager.float().abs().max()) < tol


@pytest.mark.slow  # a block compile: ~10 s on 2 shared cores
@pytest.mark.parametrize("impl", ["batched_mm", "grouped_mm"])
def test_gpt_oss_block_rewritten(impl):
    """Transposed (E, H, 2I) weights, interleaved halves, clamped SwiGLU with alpha/limit read off the graph,
    both biases. grouped_mm at T * k == E (4 tokens x 2 of 8 experts, as GPT-OSS at B = 8: 8 x 4 of 32): its
    inverse permutation's gather of the (S, H) output is then shaped like a bias, and must not be read as one."""
    out, eager, cap = _run(_gpt_oss_block(impl, torch.float32), 4 if impl == "grouped_mm" else 3, torch.float32)
    assert cap.after["rocm_fused.moe_experts.default"] == 1
    assert not any(cap.after.get(k, 0) for k in EXPERT_GEMMS), cap.after
    note = next(m.note for m in cap.report.matches if m.pass_name == "moe_experts")
    assert "swiglu_clamp interleaved transposed +bias" in note, note
    assert float((out - eager).abs().max() / eager.abs().max()) < 1e-5


@pytest.mark.slow  # a block compile: ~10 s on 2 shared cores
@pytest.mark.parametrize("impl", ["batched_mm", "grouped_mm"])
def test_prefill_is_a_near_miss(impl):
    out, eager, cap = _run(_qwen3_block(impl, torch.float32), 40, torch.float32)
    assert "rocm_fused.moe_experts.default" not in cap.after
    assert any("T=40" in r and "not a decode bucket" in r for r in _misses(cap)), _misses(cap)
    torch.testing.assert_close(out, eager)


@pytest.mark.slow  # a block compile: ~10 s on 2 shared cores
def test_bucket_limit_follows_options():
    _, _, cap = _run(_qwen3_block("batched_mm", torch.float32), 8, torch.float32, aten_gemm_max_m=4)
    assert any("T=8" in r and "<= 4 tokens" in r for r in _misses(cap)), _misses(cap)


@pytest.mark.slow  # a block compile: ~10 s on 2 shared cores
def test_foreign_activation_fails_verification():
    """GELU experts (not an activation of the op): read as SwiGLU, verification rejects it."""
    _, _, cap = _run(_qwen3_block("batched_mm", torch.float32, hidden_act="gelu"), 3, torch.float32)
    assert "rocm_fused.moe_experts.default" not in cap.after
    assert any("verification failed" in r and "not the same function" in r for r in _misses(cap)), _misses(cap)


@pytest.mark.slow  # a block compile: ~10 s on 2 shared cores
def test_training_graph_is_a_near_miss():
    """With grad, the forward keeps the experts' intermediates for backward: reported, never rewritten."""
    blk = _qwen3_block("batched_mm", torch.float32).train()
    x = torch.randn(1, 3, 64, requires_grad=True)
    rocm_inductor.clear_reports()
    torch._dynamo.reset()
    out = torch.compile(blk, backend="rocm_fused", options={"provider": "reference", "strict": True})(x)
    out.sum().backward()
    misses = [m.reason for r in rocm_inductor.reports() for m in r.near_misses if m.pass_name == "moe_experts"]
    assert misses and all("used outside the region" in r for r in misses), misses
    assert not [m for m in rocm_inductor.reports().matches if m.pass_name == "moe_experts"]


@pytest.mark.slow  # a block compile: ~10 s on 2 shared cores
def test_off_on_cpu_by_default():
    _, _, cap = _run(_qwen3_block("batched_mm", torch.float32), 3, torch.float32, provider=None)
    assert "rocm_fused.moe_experts.default" not in cap.after


# --- the op and its providers ------------------------------------------------------------------------------------


def _op_inputs(t, k, e, h, i, dtype, transposed=False, bias=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(t, h, generator=g).to(dtype)
    tw = torch.rand(t, k, generator=g)
    ids = torch.stack([torch.randperm(e, generator=g)[:k] for _ in range(t)])
    w1 = (torch.randn((e, h, 2 * i) if transposed else (e, 2 * i, h), generator=g) / h ** 0.5).to(dtype)
    w2 = (torch.randn((e, i, h) if transposed else (e, h, i), generator=g) / i ** 0.5).to(dtype)
    b1 = torch.randn(e, 2 * i, generator=g).to(dtype) if bias else None
    b2 = torch.randn(e, h, generator=g).to(dtype) if bias else None
    return x, tw, ids, w1, w2, b1, b2


def _hf_batched(x, tw, ids, w1, w2, b1, b2, act, interleaved, transposed, alpha, limit):
    """HF ``batched_mm_experts_forward``'s math in the inputs' dtype (each GEMM rounded): the eager side of the
    numerics contract."""
    from rocm_inductor.providers.reference_moe_experts import activate

    k = ids.shape[1]
    flat = ids.reshape(-1)
    xs = x.repeat_interleave(k, dim=0)
    def gemv(v, w):
        return torch.bmm(v.unsqueeze(1), w[flat]).squeeze(1) if transposed else torch.bmm(w[flat], v[..., None])[..., 0]

    gu = gemv(xs, w1)
    gu = gu + b1[flat] if b1 is not None else gu
    g, u = (gu[:, 0::2], gu[:, 1::2]) if interleaved else gu.chunk(2, dim=-1)
    h = activate(g, u, act, alpha, limit)
    y = gemv(h, w2)
    y = y + b2[flat] if b2 is not None else y
    return (y * tw.reshape(-1, 1).to(y.dtype)).view(x.shape[0], k, -1).sum(1)


def _wide(args):
    return [a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]


@needs_interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("form", ["qwen3", "gpt_oss"])
@pytest.mark.parametrize("t", [1, 5])
def test_triton_matches_reference(dtype, form, t):
    """Odd sizes (H = 40, I = 24: partial tiles), k = 3 of 6 experts; within the contract vs float64."""
    gpt = form == "gpt_oss"
    args = _op_inputs(t, 3, 6, 40, 24, dtype, transposed=gpt, bias=gpt)
    tail = ("swiglu_clamp" if gpt else "silu", gpt, gpt, 1.702, 7.0)
    got = torch.ops.rocm_fused.moe_experts(*args, *tail, "triton")
    ref64 = moe_experts_ref(*_wide(args), *tail)
    assert got.dtype == dtype and got.shape == (t, 40)
    ulp = torch.finfo(dtype).eps
    err = float((got.double() - ref64).abs().max() / ref64.abs().max())
    err_eager = float((_hf_batched(*args, *tail).double() - ref64).abs().max() / ref64.abs().max())
    assert err <= err_eager + ulp, (err, err_eager)


@needs_interpreter
def test_triton_reads_strided_ids_and_weights():
    """topk tensors as non-contiguous views (as topk's outputs sliced), weights as a permuted view."""
    x, tw, ids, w1, w2, _, _ = _op_inputs(4, 2, 5, 32, 16, torch.float32)
    ids_t, tw_t = ids.t().contiguous().t(), tw.t().contiguous().t()
    w1_view = w1.transpose(1, 2).contiguous().transpose(1, 2)
    got = torch.ops.rocm_fused.moe_experts(x, tw_t, ids_t, w1_view, w2, None, None, "silu", False, False, 0.0, 0.0,
                                           "triton")
    want = moe_experts_ref(x, tw, ids, w1, w2, None, None, "silu", False, False, 0.0, 0.0)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_bad_inputs_raise():
    x, tw, ids, w1, w2, _, _ = _op_inputs(2, 2, 4, 16, 8, torch.float32)
    op = torch.ops.rocm_fused.moe_experts
    with pytest.raises(ValueError, match="activation"):
        op(x, tw, ids, w1, w2, None, None, "gelu", False, False, 0.0, 0.0, "reference")
    with pytest.raises(ValueError, match="integer"):
        op(x, tw, ids.float(), w1, w2, None, None, "silu", False, False, 0.0, 0.0, "reference")
    with pytest.raises(ValueError, match="shapes disagree"):
        op(x, tw, ids, w1, w2, None, None, "silu", False, True, 0.0, 0.0, "reference")
    with pytest.raises(ValueError, match="dtype"):
        op(x, tw, ids, w1.double(), w2, None, None, "silu", False, False, 0.0, 0.0, "reference")


def test_triton_check_refuses_prefill():
    from rocm_inductor.providers.triton import moe_experts as K

    spec = dict(dtype=torch.bfloat16, tokens=64, tokens_upper=64, top_k=8, experts=128, hidden=2048, inter=768,
                activation="silu")
    assert "not a decode bucket" in K.check(spec)
    assert K.check({**spec, "tokens": 32, "tokens_upper": 32}) is None


@pytest.mark.slow  # a block compile: ~10 s on 2 shared cores
def test_sentinel_fill_of_routed_ids_is_seen_through():
    """HF's expert-parallel sentinel fill ``where(ids >= E, 0, x)`` (always applied by some transformers
    releases' ``grouped_mm``) is the identity when the ids come from the router's top-k over E experts: the
    region is still taken."""
    blk = _qwen3_block("grouped_mm", torch.float32)
    blk.experts._is_expert_parallel = True
    out, eager, cap = _run(blk, 3, torch.float32)
    assert cap.after["rocm_fused.moe_experts.default"] == 1, _misses(cap)
    assert float((out - eager).abs().max() / eager.abs().max()) < 1e-5
