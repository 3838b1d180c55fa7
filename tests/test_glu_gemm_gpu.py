"""GPU checks of ``rocm_fused::glu_gemm`` / ``rms_norm_glu_gemm`` and of the RMSNorm fold's dot-tile prologue at
M 2..32 on the Triton provider (skipped without a GPU): decode shapes (Llama-3.2-1B gate/up K 2048 -> 8192, Qwen3-0.6B
K 1024 -> 3072, q/k/v for the fold) against the contract, under CUDA-graph capture, and a tiny HF Llama compiled with
gemm_merge + norm_gemm + glu_gemm and ``features.norm_gemm_dot`` on.

Run on the device: ``python -m pytest tests/test_glu_gemm_gpu.py``.
"""

from __future__ import annotations

import pytest
import torch
from graph_utils import assert_contract

pytestmark = pytest.mark.gpu


def _case(m, n, k, dtype=torch.bfloat16, seed=0, bias=False):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(m, k, device="cuda", dtype=dtype, generator=g)
    wg, wu = (torch.randn(n, k, device="cuda", dtype=dtype, generator=g) * 0.02 for _ in range(2))
    bg, bu = ((torch.randn(n, device="cuda", dtype=dtype, generator=g) if bias else None) for _ in range(2))
    return x, wg, wu, bg, bu


def _eager(x, wg, wu, bg, bu, act):
    from rocm_inductor.providers.reference_glu import activate

    g = x @ wg.t() + (0 if bg is None else bg)
    u = x @ wu.t() + (0 if bu is None else bu)
    return activate(g, act) * u


@pytest.mark.parametrize("m", [1, 2, 8, 32])
@pytest.mark.parametrize("n,k", [(8192, 2048), (3072, 1024), (4864, 896)])
@pytest.mark.parametrize("act", ["silu", "gelu_tanh"])
def test_glu_and_its_norm_form_meet_the_contract(m, n, k, act):
    from rocm_inductor.providers.reference import rms_norm_glu_gemm_ref
    from rocm_inductor.providers.reference_glu import glu_gemm_ref
    from rocm_inductor.providers.triton import glu_gemm as tg

    x, wg, wu, bg, bu = _case(m, n, k, bias=k == 896)
    d = lambda t: None if t is None else t.double()  # noqa: E731
    out = tg.glu_gemm(x, wg, wu, bg, bu, act)
    assert_contract(out, _eager(x, wg, wu, bg, bu, act), glu_gemm_ref(d(x), d(wg), d(wu), d(bg), d(bu), act))
    r = torch.randn_like(x)
    gw = torch.rand(k, device="cuda", dtype=x.dtype) + 0.5
    outs = tg.rms_norm_glu_gemm(x, r, gw, 1e-5, 0.0, wg, wu, bg, bu, act)
    want = rms_norm_glu_gemm_ref(x, r, gw, 1e-5, 0.0, wg, wu, bg, bu, act)
    want64 = rms_norm_glu_gemm_ref(d(x), d(r), d(gw), 1e-5, 0.0, d(wg), d(wu), d(bg), d(bu), act)
    assert torch.equal(outs[1], want[1])
    assert_contract(outs[0], want[0], want64[0])


@pytest.mark.parametrize("m", [4, 8, 16, 32])
@pytest.mark.parametrize("ns,k", [((2048, 512, 512), 2048), ((8192, 8192), 2048), ((2048, 1024, 1024), 1024)])
def test_norm_fold_dot_prologue_meets_the_contract(m, ns, k):
    """The dot tile's prologue in one launch (the GEMM's pick without its K split, or the fold's own dot tile)."""
    from rocm_inductor.providers.reference import rms_norm_gemm_ref
    from rocm_inductor.providers.triton import norm_gemm as ng

    x, *_ = _case(m, 8, k)
    g = torch.Generator(device="cuda").manual_seed(1)
    ws = [torch.randn(n, k, device="cuda", dtype=x.dtype, generator=g) * 0.02 for n in ns]
    r, gw, nob = torch.randn_like(x), torch.rand(k, device="cuda", dtype=x.dtype) + 0.5, [None] * len(ns)
    cfg = ng.fold_config(ng.pick_config(x, ws, nob), m, k, x.dtype)
    assert ng.one_launch(cfg, m, k, x.dtype), cfg
    outs = ng.rms_norm_gemm(x, r, gw, 1e-5, 0.0, ws, nob)
    eager = rms_norm_gemm_ref(x, r, gw, 1e-5, 0.0, ws, nob)
    ref64 = rms_norm_gemm_ref(x.double(), r.double(), gw.double(), 1e-5, 0.0, [w.double() for w in ws], nob)
    assert torch.equal(outs[-1], eager[-1])
    for o, e, f in zip(outs[:-1], eager, ref64, strict=False):
        assert_contract(o, e, f)


def test_capture_replays_with_new_inputs():
    from rocm_inductor.providers.triton import glu_gemm as tg

    x, wg, wu, bg, bu = _case(1, 8192, 2048)
    r, gw = torch.randn_like(x), torch.rand(2048, device="cuda", dtype=x.dtype) + 0.5
    tg.rms_norm_glu_gemm(x, r, gw, 1e-5, 0.0, wg, wu, bg, bu, "silu")  # compile outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = tg.rms_norm_glu_gemm(x, r, gw, 1e-5, 0.0, wg, wu, bg, bu, "silu")
    for seed in (1, 2):
        x2, *_ = _case(1, 8192, 2048, seed=seed)
        x.copy_(x2)
        graph.replay()
        torch.cuda.synchronize()
        want = tg.rms_norm_glu_gemm(x, r, gw, 1e-5, 0.0, wg, wu, bg, bu, "silu")
        for a, b in zip(outs, want, strict=True):
            assert torch.equal(a, b)


@pytest.mark.slow
@pytest.mark.parametrize("batch", [1, 8])
def test_tiny_llama_decode_with_glu_matches_eager(monkeypatch, batch):
    monkeypatch.setenv("ROCM_FUSED_GEMM_UNMEASURED", "1")  # the tiny shapes are in no table
    pytest.importorskip("transformers")
    from graph_utils import capture
    from tiny_hf import LAYERS, tiny_causal_lm

    torch.manual_seed(0)
    model = tiny_causal_lm("llama", intermediate_size=96).cuda().to(torch.bfloat16).eval()
    ids = torch.randint(0, 128, (batch, 1), device="cuda")
    fn = lambda ids: model(input_ids=ids, use_cache=False).logits  # noqa: E731
    torch._dynamo.reset()
    with capture() as seen, torch.no_grad():
        out = torch.compile(fn, backend="rocm_fused", options={
            "strict": True, "passes": {"gemm_merge": True, "norm_gemm": True, "glu_gemm": True},
            "features": {"norm_gemm_dot": True},
            "providers": {"rms_norm": "triton", "merged_gemm": "triton", "rms_norm_gemm": "triton",
                          "glu_gemm": "triton"}})(ids)
    with torch.no_grad():
        eager = fn(ids)
    (c,) = seen
    assert c.after.get("rocm_fused.rms_norm_glu_gemm.default", 0) == LAYERS  # gate/up + SwiGLU of each layer
    assert c.after.get("rocm_fused.rms_norm_gemm.default", 0) == LAYERS  # q/k/v
    err = float((out.float() - eager.float()).abs().max() / eager.float().abs().max())
    assert err < 0.05, err
