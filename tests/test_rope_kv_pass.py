"""The ``rope_kv`` pass (issue 31): q/k RoPE + K/V cache writes -> ``rocm_fused::rope_kv_write``.

Whole decoders (tiny HF Llama and Qwen3 over a ``StaticCache``; random weights, float32 on CPU): one op per layer,
no rope node and no cache ``index_put`` left in the graph Inductor lowers, greedy tokens equal to eager's with
logits within 1e-4 (relative to their max) over a few steps, the caches equal to eager's after them (the op mutates
them in place: Inductor must order it before the attention that reads them); gpt-fast's Attention + KVCache (RoPE in
the (B, S, H, D) layout, transposed after) likewise. Small functions: the near-misses and their reasons, the
fail-safe, and the off-by-default gate.
"""

from __future__ import annotations

import pytest
import torch
from fold_checks import OpCounter, assert_caches_in_place, assert_fail_safe, decode_hf, run_against_eager

import rocm_inductor

OPTS = {"provider": "reference", "passes": {"rope_kv": True}, "strict": True}


@pytest.mark.slow
@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_hf_static_cache_decode(family):
    """One rope_kv_write per layer, nothing of the three kernels left, eager's tokens and caches."""
    cfg, counter = decode_hf(family, OPTS)
    n = cfg.num_hidden_layers
    rep = rocm_inductor.reports()
    assert all(r.error is None for r in rep), [r.error for r in rep]
    assert rep.count("rope_kv_write") == n, str(rep)
    assert rep.count("decode_attention") == n, str(rep)
    assert not [m for m in rep.near_misses if m.pass_name == "rope_kv"], str(rep)
    assert counter.count("rocm_fused.rope_kv_write") == n
    assert counter.count("rocm_fused.rope.", "rocm_fused.rope_cached", "index_put", "index_copy") == 0, counter.graphs
    notes = [m.note for m in rep.matches if m.op == "rope_kv_write"]
    assert all("caches (2, 2, 16, 16)" in s for s in notes), notes


@pytest.mark.slow
def test_hf_llama_rope_pass_off():
    """The rope pass off (its default on CUDA and ROCm): the rotation is found by its discovery, folded per layer."""
    cfg, counter = decode_hf("llama", {**OPTS, "passes": {"rope_kv": True, "rope": False}}, steps=2)
    rep = rocm_inductor.reports()
    assert rep.count("rope_kv_write") == cfg.num_hidden_layers and rep.count("rope") == 0, str(rep)
    assert counter.count("rocm_fused.rope_kv_write") == cfg.num_hidden_layers
    assert counter.count("rocm_fused.rope.", "index_put") == 0, counter.graphs


@pytest.mark.slow
def test_hf_llama_triton_provider_interpreted():
    """The same decode with the Triton kernel (interpreter) as the op's provider."""
    opts = {**OPTS, "providers": {"rope_kv_write": "triton"}}
    _, counter = decode_hf("llama", opts, steps=2)
    assert counter.count("rocm_fused.rope_kv_write") == 2
    assert {m.provider for m in rocm_inductor.reports().matches if m.op == "rope_kv_write"} == {"triton"}


@pytest.mark.slow
def test_gpt_fast_attention_stack():
    """gpt-fast's KVCache.update (``k_cache[:, :, input_pos] = k``, one input_pos shared by every layer) after RoPE
    in the (B, S, H, D) layout (transposed after): q and k rotated in the caches' order, one op per layer."""
    from gpt_fast_attention import decode_vs_eager

    counter = OpCounter()
    eager, comp_model = decode_vs_eager(OPTS, post_grad_custom_post_pass=counter)
    caches = [(le, lc) for le, lc in zip(eager.modules(), comp_model.modules()) if hasattr(le, "k_cache")]
    assert len(caches) == 2
    for le, lc in caches:
        torch.testing.assert_close(lc.k_cache, le.k_cache, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(lc.v_cache, le.v_cache, rtol=1e-5, atol=1e-5)
    rep = rocm_inductor.reports()
    assert all(r.count("rope_kv_write") == 2 for r in rep), str(rep)
    assert not [m for m in rep.near_misses if m.pass_name == "rope_kv"], str(rep)
    assert counter.count("rocm_fused.rope_kv_write") == 2 * len(counter.graphs)
    assert counter.count("rocm_fused.rope.", "index_put") == 0, counter.graphs


# -- small functions: near-misses, fail-safe, gating -------------------------------------------------------------

def _rot(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def _inputs(max_len=8):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 4, 1, 16, generator=g)
    k = torch.randn(1, 2, 1, 16, generator=g)
    v = torch.randn(1, 2, 1, 16, generator=g)
    cos, sin = torch.randn(1, 1, 1, 16, generator=g), torch.randn(1, 1, 1, 16, generator=g)
    kc, vc = torch.zeros(1, 2, max_len, 16), torch.zeros(1, 2, max_len, 16)
    return q, k, v, cos, sin, kc, vc, torch.tensor([3])


def _attend(q, kc, vc):
    kr, vr = kc.repeat_interleave(2, 1), vc.repeat_interleave(2, 1)
    return torch.softmax(q @ kr.transpose(-1, -2) * 0.25, -1) @ vr


def _layer(q, k, v, cos, sin, kc, vc, pos):
    q, k = q * cos + _rot(q) * sin, k * cos + _rot(k) * sin
    kc.index_copy_(2, pos, k)
    vc.index_copy_(2, pos, v)
    return _attend(q, kc, vc)


def _other_positions(q, k, v, cos, sin, kc, vc, pos):
    q, k = q * cos + _rot(q) * sin, k * cos + _rot(k) * sin
    kc[:, :, pos] = k
    vc[:, :, pos + 1] = v
    return _attend(q, kc, vc)


def _out_of_place(q, k, v, cos, sin, kc, vc, pos):
    q, k = q * cos + _rot(q) * sin, k * cos + _rot(k) * sin
    return _attend(q, kc.index_copy(2, pos, k), vc.index_copy(2, pos, v))


def _read_before(q, k, v, cos, sin, kc, vc, pos):
    old = kc.sum()
    return _layer(q, k, v, cos, sin, kc, vc, pos) + old


def _bshd(q, k, v, cos, sin, kc, vc, pos):
    """(B, max_len, H, D) caches written along dim 1."""
    q, k = q * cos + _rot(q) * sin, k * cos + _rot(k) * sin
    kc, vc = kc.transpose(1, 2), vc.transpose(1, 2)  # views of the (B, L, H, D) inputs below
    kc[:, pos] = k.transpose(1, 2)
    vc[:, pos] = v.transpose(1, 2)
    return _attend(q, kc.transpose(1, 2), vc.transpose(1, 2))


def _run(fn, opts=OPTS, bshd=False):
    args = list(_inputs())
    if bshd:
        args[5], args[6] = args[5].transpose(1, 2).contiguous(), args[6].transpose(1, 2).contiguous()
    if bshd:
        def fn_e(*a, f=fn):
            return f(*a[:5], a[5].transpose(1, 2), a[6].transpose(1, 2), a[7])
        fn = fn_e
    return run_against_eager(fn, args, opts, (5, 6))


def test_layer_matches_and_mutates_caches():
    rep = _run(_layer)
    assert rep.count("rope_kv_write") == 1, str(rep)


@pytest.mark.parametrize("fn,reason", [
    (_other_positions, "no V write at the same positions"),
    (_out_of_place, "not copied back into its cache input"),
    (_read_before, "also read or written by"),
])
def test_near_misses(fn, reason):
    rep = _run(fn)
    assert rep.count("rope_kv_write") == 0, str(rep)
    misses = [m.reason for m in rep.near_misses if m.pass_name == "rope_kv"]
    assert misses and all(reason in r for r in misses), misses


def test_other_layout_is_not_taken():
    """(B, max_len, H, D) caches: the writes are not cache[:, :, positions]; nothing is folded."""
    rep = _run(_bshd, bshd=True)
    assert rep.count("rope_kv_write") == 0, str(rep)
    misses = [m.reason for m in rep.near_misses if m.pass_name == "rope_kv"]
    assert misses and "another layout" in misses[0], misses


def test_rope_pass_off_uses_its_discovery():
    """With the rope pass off, rope_kv runs the rope pass's discovery on the rotations written into caches."""
    rep = _run(_layer, {**OPTS, "passes": {"rope_kv": True, "rope": False}})
    assert rep.count("rope_kv_write") == 1 and rep.count("rope") == 0, str(rep)


def test_rope_pass_off_unfolded_rotation_is_given_back():
    """A rotation discovered for a fold that is then not taken stays Inductor's (no rope op left)."""
    counter = OpCounter()
    with torch._inductor.config.patch(post_grad_custom_post_pass=counter):
        rep = _run(_other_positions, {**OPTS, "passes": {"rope_kv": True, "rope": False}})
    assert rep.count("rope_kv_write") == 0 and rep.count("rope") == 0, str(rep)
    assert counter.count("rocm_fused.rope") == 0, counter.graphs  # (the attention pass runs too)
    misses = [m.reason for m in rep.near_misses if m.pass_name == "rope_kv"]
    assert any("no V write at the same positions" in r for r in misses), misses


def test_no_rotation_says_why():
    def plain(q, k, v, cos, sin, kc, vc, pos):
        kc.index_copy_(2, pos, k * 2)
        vc.index_copy_(2, pos, v)
        return _attend(q, kc, vc)

    rep = _run(plain, {**OPTS, "passes": {"rope_kv": True, "rope": False}})
    assert rep.count("rope_kv_write") == 0
    misses = [m.reason for m in rep.near_misses if m.pass_name == "rope_kv"]
    assert misses and "no K write at these positions is a RoPE" in misses[0], misses


def test_off_by_default_and_not_by_global_provider():
    from rocm_inductor.policy import PASS_DEFAULTS, PROVIDER_ORDER

    assert all(PASS_DEFAULTS[k]["rope_kv"] is False for k in ("cuda", "rocm"))
    assert all(PROVIDER_ORDER[k]["rope_kv_write"] == ("triton",) for k in ("cuda", "rocm"))
    rep = _run(_layer, {"provider": "reference", "strict": True})
    assert rep.count("rope_kv_write") == 0
    assert "rope_kv" in rep[0].passes_skipped


def test_fail_safe_restores_the_graph(monkeypatch):
    from rocm_inductor.passes.rope_kv import RoPEKVPass

    assert_fail_safe(monkeypatch, RoPEKVPass, lambda opts: _run(_layer, opts), OPTS, "rope_kv_write")


def test_caches_written_in_place_by_the_op():
    """The code Inductor writes calls the op on the cache inputs themselves (no copy of a cache)."""
    call = assert_caches_in_place(_layer, list(_inputs()), OPTS, "rope_kv_write", (1, 2, 8, 16))
    assert "index_put" not in call, call
