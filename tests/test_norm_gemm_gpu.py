"""GPU checks of ``rocm_fused::rms_norm_gemm`` on the Triton provider (skipped without a GPU): decode shapes in one
launch (the full-K GEMV tile's RMSNorm prologue) and in two (dot tiles), under CUDA-graph capture, and a tiny
HF Llama compiled with the fold on.

Run on the device: ``python -m pytest tests/test_norm_gemm_gpu.py``.
"""

from __future__ import annotations

import pytest
import torch
from graph_utils import assert_contract

pytestmark = pytest.mark.gpu


def _case(m, ns, k, dtype=torch.bfloat16, residual=True, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(m, k, device="cuda", dtype=dtype, generator=g)
    r = torch.randn(m, k, device="cuda", dtype=dtype, generator=g) if residual else None
    gw = torch.rand(k, device="cuda", dtype=dtype, generator=g) + 0.5
    ws = [torch.randn(n, k, device="cuda", dtype=dtype, generator=g) * 0.02 for n in ns]
    return x, r, gw, ws


@pytest.mark.parametrize("m", [1, 2, 8])
@pytest.mark.parametrize("residual", [True, False])
@pytest.mark.parametrize("ns,k", [((2048, 512, 512), 2048), ((8192, 8192), 2048), ((3072, 3072), 1024),
                                  ((1000, 24), 896)])
def test_prologue_and_two_launch_paths_meet_the_contract(m, residual, ns, k):
    from rocm_inductor.providers.reference import rms_norm_gemm_ref
    from rocm_inductor.providers.triton import gemm_configs as gc
    from rocm_inductor.providers.triton import norm_gemm as ng

    x, r, gw, ws = _case(m, ns, k, residual=residual)
    nob = [None] * len(ns)
    cfgs = [None]
    if m <= 2:  # the prologue itself, whatever the table picks for this shape
        cfgs.append(gc.Config(m, 2 if k >= 2048 else 4, 1 << (k - 1).bit_length(), 1, 8, 1, False, False, True, True))
    ref64 = rms_norm_gemm_ref(x.double(), None if r is None else r.double(), gw.double(), 1e-5, 0.0,
                              [w.double() for w in ws], nob)
    eager = rms_norm_gemm_ref(x, r, gw, 1e-5, 0.0, ws, nob)
    for cfg in cfgs:
        outs = ng.rms_norm_gemm(x, r, gw, 1e-5, 0.0, ws, nob, config=cfg)
        assert len(outs) == len(ns) + (r is not None)
        for o, e, f in zip(outs[:len(ns)], eager, ref64, strict=False):
            assert_contract(o, e, f)
        if r is not None:
            assert torch.equal(outs[-1], eager[-1])  # the residual sum: one rounding, bitwise


def test_capture_replays_the_prologue_with_new_inputs():
    from rocm_inductor.providers.reference import rms_norm_gemm_ref
    from rocm_inductor.providers.triton import gemm_configs as gc
    from rocm_inductor.providers.triton import norm_gemm as ng

    x, r, gw, ws = _case(1, (2048, 512, 512), 2048)
    cfg = gc.Config(1, 2, 2048, 1, 8, 1, False, False, True, True)
    nob = [None] * 3
    ng.rms_norm_gemm(x, r, gw, 1e-5, 0.0, ws, nob, config=cfg)  # compile outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = ng.rms_norm_gemm(x, r, gw, 1e-5, 0.0, ws, nob, config=cfg)
    for seed in (1, 2):
        x2, r2, _, _ = _case(1, (2048, 512, 512), 2048, seed=seed)
        x.copy_(x2)
        r.copy_(r2)
        graph.replay()
        torch.cuda.synchronize()
        want = ng.rms_norm_gemm(x, r, gw, 1e-5, 0.0, ws, nob, config=cfg)
        for a, b in zip(outs, want, strict=True):
            assert torch.equal(a, b)
        eager = rms_norm_gemm_ref(x, r, gw, 1e-5, 0.0, ws, nob)
        assert torch.equal(outs[-1], eager[-1])


@pytest.mark.slow
def test_tiny_llama_decode_folds_and_matches_eager(monkeypatch):
    monkeypatch.setenv("ROCM_FUSED_GEMM_UNMEASURED", "1")  # the tiny shapes are in no table
    transformers = pytest.importorskip("transformers")  # noqa: F841
    from graph_utils import capture
    from tiny_hf import LAYERS, tiny_causal_lm

    torch.manual_seed(0)
    model = tiny_causal_lm("llama", intermediate_size=96).cuda().to(torch.bfloat16).eval()
    ids = torch.randint(0, 128, (1, 1), device="cuda")
    fn = lambda ids: model(input_ids=ids, use_cache=False).logits  # noqa: E731
    torch._dynamo.reset()
    with capture() as seen, torch.no_grad():
        out = torch.compile(fn, backend="rocm_fused", options={
            "strict": True, "passes": {"gemm_merge": True, "norm_gemm": True},
            # rms_norm forced: on CUDA the pass leaves norms below 512 wide to Inductor (policy.NORM_MIN_HIDDEN)
            "providers": {"rms_norm": "triton", "merged_gemm": "triton", "rms_norm_gemm": "triton"}})(ids)
    with torch.no_grad():
        eager = fn(ids)
    (c,) = seen
    assert c.after.get("rocm_fused.rms_norm_gemm.default", 0) == 2 * LAYERS  # q/k/v and gate/up of each layer
    err = float((out.float() - eager.float()).abs().max() / eager.float().abs().max())
    assert err < 0.05, err
