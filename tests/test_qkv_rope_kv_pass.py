"""The ``qkv_rope_kv`` pass (issue 31): a q/k/v GEMM (``merged_gemm`` / ``rms_norm_gemm``) and the
``rope_kv_write`` it feeds -> ``rocm_fused::qkv_rope_kv``, one op per layer.

Whole decoders (tiny HF Llama over a ``StaticCache``, with the reference and the interpreted Triton provider;
gpt-fast's attention with its fused ``wqkv``; random weights, float32 on CPU): one op per layer, no ``rope_kv_write``
and no q/k/v GEMM left in the graph Inductor lowers, greedy tokens equal to eager's with logits within 1e-4
(relative to their max), the caches equal to eager's. HF Qwen3 (per-head q/k RMSNorm between the projections and
the RoPE) is a near-miss with its reason. Small functions: the norm-less form (``merged_gemm``), a
projection read elsewhere, the off-by-default gate and the fail-safe.
"""

from __future__ import annotations

import pytest
import torch
from fold_checks import OpCounter, assert_caches_in_place, assert_fail_safe, decode_hf, run_against_eager

import rocm_inductor

PASSES = {"rope_kv": True, "gemm_merge": True, "norm_gemm": True, "qkv_rope_kv": True}
OPTS = {"provider": "reference", "passes": PASSES, "strict": True}


@pytest.mark.slow
@pytest.mark.parametrize("norm_gemm", [True, False])
def test_hf_llama_decode(norm_gemm):
    """One op per layer (with the norm folded in, or from the merged GEMM alone), eager's tokens and caches."""
    cfg, counter = decode_hf("llama", {**OPTS, "passes": {**PASSES, "norm_gemm": norm_gemm}})
    n = cfg.num_hidden_layers
    rep = rocm_inductor.reports()
    assert all(r.error is None for r in rep), [r.error for r in rep]
    assert rep.count("qkv_rope_kv") == n, str(rep)
    assert not [m for m in rep.near_misses if m.pass_name == "qkv_rope_kv"], str(rep)
    assert counter.count("rocm_fused.qkv_rope_kv") == n
    assert counter.count("rocm_fused.rope_kv_write", "rocm_fused.rope.", "index_put") == 0, counter.graphs
    # what is left of the GEMMs: gate/up per layer (+ lm_head where taken); no q/k/v GEMM
    gemms = counter.count("rocm_fused.merged_gemm", "rocm_fused.rms_norm_gemm")
    assert gemms <= n + 1, counter.graphs
    notes = [m.note for m in rep.matches if m.op == "qkv_rope_kv"]
    assert all(("RMSNorm + " in s) == norm_gemm and "caches (2, 2, 16, 16)" in s for s in notes), notes


@pytest.mark.slow
def test_hf_llama_triton_provider_interpreted():
    """The same decode with the Triton kernel (interpreter) as the op's provider: one launch per layer."""
    cfg, counter = decode_hf("llama", {**OPTS, "providers": {"qkv_rope_kv": "triton"}}, steps=2)
    assert counter.count("rocm_fused.qkv_rope_kv") == cfg.num_hidden_layers
    assert {m.provider for m in rocm_inductor.reports().matches if m.op == "qkv_rope_kv"} == {"triton"}


@pytest.mark.slow
def test_hf_qwen3_qk_norm_is_a_near_miss():
    """Qwen3's per-head q/k RMSNorm sits between the projections and the RoPE: rope_kv_write stays, and says why."""
    cfg, counter = decode_hf("qwen3", OPTS, steps=2)
    rep = rocm_inductor.reports()
    assert rep.count("qkv_rope_kv") == 0 and rep.count("rope_kv_write") == cfg.num_hidden_layers, str(rep)
    misses = [m.reason for m in rep.near_misses if m.pass_name == "qkv_rope_kv"]
    assert len(misses) == cfg.num_hidden_layers and all("per-head q/k RMSNorm" in r for r in misses), misses


@pytest.mark.slow
def test_gpt_fast_attention_stack():
    """gpt-fast's fused ``wqkv`` (one ``mm``, split after; RoPE in (B, S, H, D), transposed after): the op reads row
    slices of ``wqkv`` as q/k/v weights, one op per layer, caches equal to eager's."""
    from gpt_fast_attention import decode_vs_eager

    counter = OpCounter()
    eager, comp_model = decode_vs_eager(OPTS, post_grad_custom_post_pass=counter)
    caches = [(le, lc) for le, lc in zip(eager.modules(), comp_model.modules()) if hasattr(le, "k_cache")]
    assert len(caches) == 2
    for le, lc in caches:
        torch.testing.assert_close(lc.k_cache, le.k_cache, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(lc.v_cache, le.v_cache, rtol=1e-5, atol=1e-5)
    rep = rocm_inductor.reports()
    assert all(r.count("qkv_rope_kv") == 2 for r in rep), str(rep)
    assert counter.count("rocm_fused.qkv_rope_kv") == 2 * len(counter.graphs)
    assert counter.count("rocm_fused.rope_kv_write", "index_put") == 0, counter.graphs
    assert counter.count("aten.mm") == 2 * len(counter.graphs), counter.graphs  # wo only: wqkv is in the op


# -- small functions ------------------------------------------------------------------------------------------

def _rot(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def _inputs(b=2, max_len=8):
    g = torch.Generator().manual_seed(0)
    x, res = torch.randn(b, 1, 64, generator=g), torch.randn(b, 1, 64, generator=g)
    gw = torch.rand(64, generator=g) + 0.5
    wq, wk, wv = (torch.randn(n, 64, generator=g) / 8 for n in (64, 32, 32))
    cos, sin = torch.randn(b, 1, 1, 16, generator=g), torch.randn(b, 1, 1, 16, generator=g)
    kc, vc = torch.zeros(b, 2, max_len, 16), torch.zeros(b, 2, max_len, 16)
    return x, res, gw, wq, wk, wv, cos, sin, kc, vc, torch.tensor([3])


def _attend(q, kc, vc):
    kr, vr = kc.repeat_interleave(2, 1), vc.repeat_interleave(2, 1)
    return torch.softmax(q @ kr.transpose(-1, -2) * 0.25, -1) @ vr


def _heads(t, b):
    return t.view(b, 1, -1, 16).transpose(1, 2)


def _layer(x, res, gw, wq, wk, wv, cos, sin, kc, vc, pos, norm=True, leak=False):
    b = x.shape[0]
    s = x + res
    y = s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + 1e-6) * gw if norm else x
    qp = y @ wq.t()
    q, k, v = _heads(qp, b), _heads(y @ wk.t(), b), _heads(y @ wv.t(), b)
    q, k = q * cos + _rot(q) * sin, k * cos + _rot(k) * sin
    kc.index_copy_(2, pos, k)
    vc.index_copy_(2, pos, v)
    out = _attend(q, kc, vc).transpose(1, 2).reshape(b, 1, 64) + s
    return out + qp if leak else out


def _run(fn, opts=OPTS):
    return run_against_eager(fn, list(_inputs()), opts, (8, 9))


def test_layer_with_norm_matches():
    rep = _run(_layer)
    assert rep.count("qkv_rope_kv") == 1 and rep.count("rope_kv_write") == 1, str(rep)  # the write, then its fold
    assert "RMSNorm + q/k/v GEMM" in [m for m in rep.matches if m.op == "qkv_rope_kv"][0].note


def test_layer_without_norm_matches():
    def plain(*a):
        return _layer(*a, norm=False)

    rep = _run(plain)
    assert rep.count("qkv_rope_kv") == 1, str(rep)
    assert "RMSNorm" not in [m for m in rep.matches if m.op == "qkv_rope_kv"][0].note


def test_projection_read_elsewhere_is_a_near_miss():
    def leak(*a):
        return _layer(*a, leak=True)

    rep = _run(leak)
    assert rep.count("qkv_rope_kv") == 0 and rep.count("rope_kv_write") == 1, str(rep)
    misses = [m.reason for m in rep.near_misses if m.pass_name == "qkv_rope_kv"]
    assert misses and "the q projection is also read by" in misses[0], misses


def test_off_by_default_and_not_by_global_provider():
    from rocm_inductor.policy import PASS_DEFAULTS, PROVIDER_ORDER

    assert all(PASS_DEFAULTS[k]["qkv_rope_kv"] is False for k in ("cuda", "rocm"))
    assert all(PROVIDER_ORDER[k]["qkv_rope_kv"] == ("triton",) for k in ("cuda", "rocm"))
    rep = _run(_layer, {"provider": "reference", "strict": True,
                        "passes": {k: v for k, v in PASSES.items() if k != "qkv_rope_kv"}})
    assert rep.count("qkv_rope_kv") == 0 and rep.count("rope_kv_write") == 1
    assert "qkv_rope_kv" in rep[0].passes_skipped


def test_fail_safe_restores_the_graph(monkeypatch):
    from rocm_inductor.passes.qkv_rope_kv import QkvRoPEKVPass

    assert_fail_safe(monkeypatch, QkvRoPEKVPass, lambda opts: _run(_layer, opts), OPTS, "qkv_rope_kv")


def test_caches_written_in_place_by_the_op():
    """The code Inductor writes calls the op on the cache inputs themselves (no copy of a cache)."""
    call = assert_caches_in_place(_layer, list(_inputs()), OPTS, "qkv_rope_kv", (2, 2, 8, 16))
    assert "rope_kv_write" not in call, call
