"""GPU checks of the decode-layer folds of issue 31 on the Triton provider (skipped without a GPU):
``rocm_fused::rope_kv_write`` at Llama-3.2-1B's shapes against the reference and replayed under CUDA-graph capture,
and a tiny HF Llama over a ``StaticCache`` decoding with ``rope_kv`` (and ``qkv_rope_kv``) on, against eager.

Run on the device: ``python -m pytest tests/test_decode_layer_gpu.py``.
"""

from __future__ import annotations

import pytest
import torch
from bench_utils import hf_models

import rocm_inductor

pytestmark = pytest.mark.gpu


def _rope_kv_case(b, dtype=torch.bfloat16, hq=32, hkv=8, d=64, max_len=1024, pos=(517,), seed=0):
    """HF layout at decode: q/k/v transposed views of (b, 1, h, d) projections, cos/sin (b, 1, 1, d)."""
    g = torch.Generator(device="cuda").manual_seed(seed)

    def rnd(*shape):
        return torch.randn(*shape, device="cuda", generator=g).to(dtype)

    q, k, v = (rnd(b, 1, h, d).transpose(1, 2) for h in (hq, hkv, hkv))
    cos, sin = rnd(b, 1, 1, d), rnd(b, 1, 1, d)
    kc, vc = rnd(b, hkv, max_len, d), rnd(b, hkv, max_len, d)
    return q, k, v, cos, sin, kc, vc, torch.tensor(pos, device="cuda")


@pytest.mark.parametrize("b", [1, 8])
@pytest.mark.parametrize("interleaved", [False, True])
def test_rope_kv_write_llama_shapes_match_reference(b, interleaved):
    from rocm_inductor.providers.reference import rope_kv_write_ref
    from rocm_inductor.providers.triton import rope_kv as tk

    q, k, v, cos, sin, kc, vc, pos = _rope_kv_case(b)
    kc_r, vc_r = kc.clone(), vc.clone()
    q64, k64 = q.double(), k.double()
    want_q = rope_kv_write_ref(q64, k64, v.double(), cos.double(), sin.double(), kc_r.double(), vc_r.double(), pos,
                               64, interleaved, False)
    ref_q = rope_kv_write_ref(q, k, v, cos, sin, kc_r, vc_r, pos, 64, interleaved, False)
    out_q = tk.rope_kv_write(q, k, v, cos, sin, kc, vc, pos, 64, interleaved, False)
    torch.cuda.synchronize()
    # within one rounding of the float64 rotation, as the reference in bf16 is
    ulp = 2.0 ** -7 * want_q.abs().clamp_min(1e-3)
    assert bool(((out_q.double() - want_q).abs() <= ulp).all())
    assert float((out_q.float() - ref_q.float()).abs().max()) <= float(ulp.max())
    assert torch.equal(vc, vc_r)  # v copied bitwise
    assert torch.allclose(kc.float(), kc_r.float(), rtol=2 ** -7, atol=1e-2)
    other = torch.ones(kc.shape[2], dtype=torch.bool, device="cuda")
    other[pos] = False
    assert torch.equal(kc[:, :, other], kc_r[:, :, other])  # nothing else written


def test_rope_kv_write_replays_under_capture():
    from rocm_inductor.providers.reference import rope_kv_write_ref
    from rocm_inductor.providers.triton import rope_kv as tk

    q, k, v, cos, sin, kc, vc, pos = _rope_kv_case(1)
    tk.rope_kv_write(q, k, v, cos, sin, kc, vc, pos, 64, False, False)  # compile outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = tk.rope_kv_write(q, k, v, cos, sin, kc, vc, pos, 64, False, False)
    for step in (1, 2):
        pos.fill_(517 + step)  # the position is read on the device at replay
        kc_r, vc_r = kc.clone(), vc.clone()
        graph.replay()
        torch.cuda.synchronize()
        want = rope_kv_write_ref(q, k, v, cos, sin, kc_r, vc_r, pos, 64, False, False)
        assert torch.equal(out, want) or float((out.float() - want.float()).abs().max()) < 0.05
        assert torch.equal(vc[:, :, 517 + step], v[:, :, 0])


@pytest.mark.slow
@pytest.mark.parametrize("passes", [{"rope_kv": True}, {"rope_kv": True, "qkv_rope_kv": True}])
def test_hf_llama_decode_with_the_folds(monkeypatch, passes):
    """Tiny HF Llama (float32, CUDA) over a StaticCache: 3 greedy steps equal to eager's, one op per layer."""
    monkeypatch.setenv("ROCM_FUSED_GEMM_UNMEASURED", "1")  # the tiny shapes are in no table
    hm = hf_models()
    model, cfg = hm.build_model("llama", "cuda", torch.float32, tiny=True)
    b, pos0 = 2, 6
    step_e, (tok, _, _), cache_e = hm.decode_step(model, cfg, b, 1, 0, 16, "cuda", torch.float32)
    step_c, _, cache_c = hm.decode_step(model, cfg, b, 1, 0, 16, "cuda", torch.float32)
    opts = {"strict": True, "passes": {"gemm_merge": True, "norm_gemm": True, **passes},
            "providers": {"rms_norm": "triton", "merged_gemm": "triton", "rms_norm_gemm": "triton",
                          "rope_kv_write": "triton", "qkv_rope_kv": "triton"}}
    rocm_inductor.clear_reports()
    torch._dynamo.reset()
    tok_e = tok_c = tok
    with torch.no_grad():
        comp = torch.compile(step_c, backend="rocm_fused", options=opts, fullgraph=True)
        for i in range(3):
            p = torch.tensor([pos0 + i], device="cuda")
            ref = step_e(tok_e, p.expand(b, 1), p)
            out = comp(tok_c, p.expand(b, 1), p)
            err = float((out - ref).abs().max() / ref.abs().max())
            assert err < 1e-3, (i, err)
            tok_e, tok_c = ref.argmax(-1), out.argmax(-1)
            assert torch.equal(tok_e, tok_c), i
    for le, lc in zip(cache_e.layers, cache_c.layers):
        torch.testing.assert_close(lc.keys, le.keys, rtol=1e-3, atol=1e-3)
        torch.testing.assert_close(lc.values, le.values, rtol=1e-3, atol=1e-3)
    rep = rocm_inductor.reports()
    op = "qkv_rope_kv" if passes.get("qkv_rope_kv") else "rope_kv_write"
    assert rep[-1].count(op) == cfg.num_hidden_layers, str(rep)
