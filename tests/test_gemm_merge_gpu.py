"""GPU checks of the Triton merged GEMM (skipped without a GPU): real decode shapes, capture safety, a model.

Run on the device: ``bash benchmarks/device.sh tests:tests/test_gemm_merge_gpu.py``.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from graph_utils import assert_contract

pytestmark = pytest.mark.gpu


def _case(m, ns, k, dtype=torch.bfloat16, bias=False, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(m, k, device="cuda", dtype=dtype, generator=g)
    ws = [torch.randn(n, k, device="cuda", dtype=dtype, generator=g) * 0.02 for n in ns]
    bs = [torch.randn(n, device="cuda", dtype=dtype, generator=g) if bias else None for n in ns]
    return x, ws, bs


@pytest.mark.parametrize("m", [1, 8, 32])
@pytest.mark.parametrize("ns,k", [((2048, 512, 512), 2048), ((8192, 8192), 2048), ((2048, 1024, 1024), 1024),
                                  ((896, 128, 128), 896)])
def test_decode_shapes_match_cublas(m, ns, k):
    from rocm_inductor.providers.triton import gemm_merge as gm

    x, ws, bs = _case(m, ns, k, bias=k == 896)
    outs = gm.merged_gemm(x, ws, bs)
    for o, w, b in zip(outs, ws, bs, strict=True):
        eager = F.linear(x, w, b)
        ref = F.linear(x.double(), w.double(), None if b is None else b.double())
        assert_contract(o, eager, ref)


def test_every_candidate_is_correct():
    """Each config the tuner may pick computes the same GEMMs (q/k/v of Llama-3.2-1B at M = 1)."""
    from rocm_inductor.providers.triton import gemm_configs as gc
    from rocm_inductor.providers.triton import gemm_merge as gm

    x, ws, bs = _case(1, (2048, 512, 512), 2048)
    for cfg in gc.candidates(1, (2048, 512, 512), 2048, x.dtype, gc._sms(), gc.warp_size()):
        for o, w in zip(gm.merged_gemm(x, ws, bs, cfg), ws, strict=True):
            torch.testing.assert_close(o.float(), F.linear(x, w).float(), rtol=2e-2, atol=2e-3, msg=str(cfg))


@pytest.mark.parametrize("m", [1, 5, 8])
def test_gemv_tiles_are_correct(m):
    """Every GEMV-tile config the sweep may pick, q/k/v of Llama-3.2-1B with a bias on one weight."""
    from rocm_inductor.providers.triton import gemm_configs as gc
    from rocm_inductor.providers.triton import gemm_merge as gm

    x, ws, bs = _case(m, (2048, 512, 512), 2048)
    bs[1] = torch.randn(512, device="cuda", dtype=x.dtype)
    for cfg in gc.gemv_configs(m, (2048, 512, 512), 2048, gc._sms(), gc.warp_size()):
        for o, w, b in zip(gm.merged_gemm(x, ws, bs, cfg), ws, bs, strict=True):
            torch.testing.assert_close(o.float(), F.linear(x, w, b).float(), rtol=2e-2, atol=2e-3, msg=str(cfg))


@pytest.mark.parametrize("m", [1, 5, 8])
def test_full_k_gemv_and_deep_dot_configs_are_correct(m):
    """Every full-K GEMV config (and, at M = 8, deep-pipeline dot config) the sweep may pick, Qwen3-0.6B
    q/k/v (K = 1024) with a bias on one weight."""
    from rocm_inductor.providers.triton import gemm_configs as gc
    from rocm_inductor.providers.triton import gemm_merge as gm

    x, ws, bs = _case(m, (2048, 1024, 1024), 1024)
    bs[2] = torch.randn(1024, device="cuda", dtype=x.dtype)
    cfgs = gc.gemv_full_configs(m, (2048, 1024, 1024), 1024, gc._sms(), gc.warp_size())
    cfgs += gc.deep_dot_configs(m, (2048, 1024, 1024), 1024, x.dtype, gc._sms(), gc.warp_size())
    assert cfgs
    for cfg in cfgs:
        for o, w, b in zip(gm.merged_gemm(x, ws, bs, cfg), ws, bs, strict=True):
            torch.testing.assert_close(o.float(), F.linear(x, w, b).float(), rtol=2e-2, atol=2e-3, msg=str(cfg))


def test_capture_of_an_untuned_shape_launches_the_default_config():
    from rocm_inductor.providers.triton import gemm_configs as gc
    from rocm_inductor.providers.triton import gemm_merge as gm

    x, ws, bs = _case(3, (640, 96), 1024)
    gm._TUNED.pop(gm._key(x, ws, bs), None)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        expect = [F.linear(x, w) for w in ws]
        # JIT the default config outside the capture (what Inductor's warm-up run does for a compiled graph)
        gm.launch(x, ws, bs, gc.default_config(3, (640, 96), 1024, x.dtype, warp=gc.warp_size()))
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = gm.merged_gemm(x, ws, bs)
    graph.replay()
    torch.cuda.synchronize()
    assert gm._key(x, ws, bs) not in gm._TUNED  # no tuning inside the capture
    for o, e in zip(outs, expect, strict=True):
        torch.testing.assert_close(o.float(), e.float(), rtol=2e-2, atol=2e-3)


def test_tiny_llama_reduce_overhead_merges_and_matches(monkeypatch):
    transformers = pytest.importorskip("transformers")
    monkeypatch.setenv("ROCM_FUSED_GEMM_UNMEASURED", "1")  # tiny shapes are not in the measured table
    import rocm_inductor

    cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).to("cuda", torch.bfloat16).eval()
    ids = torch.randint(0, 256, (4, 1), device="cuda")
    fn = lambda ids: model(input_ids=ids, use_cache=False).logits  # noqa: E731
    torch._dynamo.reset()
    rocm_inductor.clear_reports()
    with torch.no_grad():
        compiled = torch.compile(fn, backend="rocm_fused", options={"cudagraphs": True,
                                                                     "passes": {"gemm_merge": True}})
        for _ in range(3):
            out = compiled(ids).clone()
        eager = fn(ids)
    assert rocm_inductor.reports().count("merged_gemm") == 4
    err = float((out.float() - eager.float()).abs().max() / eager.float().abs().max())
    assert err < 2e-2, err
