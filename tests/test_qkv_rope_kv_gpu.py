"""GPU checks of ``rocm_fused::qkv_rope_kv`` on the Triton provider (skipped without a GPU): Llama-3.2-1B's attention
prologue (K 2048, 32 q heads, 8 kv heads, head_dim 64, add + RMSNorm, HF's full-width NeoX tables) at M = 1 (the
full-K GEMV tile) and M = 8 (the dot tile) in bf16 against the float64 reference, and a replay under CUDA-graph
capture with new inputs and positions.

Run on the device: ``python -m pytest tests/test_qkv_rope_kv_gpu.py``.
"""

from __future__ import annotations

import pytest
import torch
from graph_utils import assert_contract

pytestmark = pytest.mark.gpu

K, HQ, HKV, D, MAX_LEN = 2048, 32, 8, 64, 64


def _case(b, dtype=torch.bfloat16, residual=True, seed=0, pos=7):
    g = torch.Generator(device="cuda").manual_seed(seed)
    r = lambda *s: torch.randn(*s, device="cuda", generator=g).to(dtype)  # noqa: E731
    x = r(b, 1, K)
    res = r(b, 1, K) if residual else None
    gw = (torch.rand(K, device="cuda", generator=g) + 0.5).to(dtype)
    ws = [r(n * D, K) * 0.02 for n in (HQ, HKV, HKV)]
    ang = torch.rand(b, 1, 1, D // 2, device="cuda", generator=g) * 6.3
    cos, sin = (torch.cat([t, t], -1).to(dtype) for t in (ang.cos(), ang.sin()))  # HF's (B, 1, S, D) tables
    kc, vc = r(b, HKV, MAX_LEN, D), r(b, HKV, MAX_LEN, D)
    return [x, res, gw, 1e-5, 0.0, ws, [None] * 3, cos, sin, kc, vc, torch.tensor([pos], device="cuda")]


def _ref(args, dtype):
    from rocm_inductor.providers.reference import qkv_rope_kv_ref

    f = lambda t: None if t is None else t.to(dtype)  # noqa: E731
    x, r, gw, eps, off, ws, bs, cos, sin, kc, vc, pos = args
    a = [f(x), f(r), f(gw), eps, off, [f(w) for w in ws], bs, f(cos), f(sin), f(kc).clone(), f(vc).clone(), pos]
    return qkv_rope_kv_ref(*a, D, False, False), a[9], a[10]


@pytest.mark.parametrize("b", [1, 8])
@pytest.mark.parametrize("residual", [True, False])
def test_llama_decode_shapes_meet_the_contract(b, residual):
    from rocm_inductor.providers.triton import qkv_rope_kv as tq

    args = _case(b, residual=residual)
    (eager, kc_e, vc_e), (ref64, kc64, vc64) = _ref(args, torch.bfloat16), _ref(args, torch.float64)
    kc, vc = args[9].clone(), args[10].clone()
    outs = tq.qkv_rope_kv(*args[:9], kc, vc, args[11], D, False, False)
    cfg = tq.launch_config(args[0].reshape(b, K), args[5], args[6], True)
    assert cfg.split_k == 1 and cfg.block_m >= b
    assert outs[0].shape == (b, HQ, 1, D) and outs[0].is_contiguous()
    assert_contract(outs[0], eager[0], ref64[0])
    rest = torch.arange(MAX_LEN, device="cuda") != 7
    for got, want, want64, orig in ((kc, kc_e, kc64, args[9]), (vc, vc_e, vc64, args[10])):
        assert_contract(got[:, :, 7], want[:, :, 7], want64[:, :, 7])
        assert torch.equal(got[:, :, rest], orig[:, :, rest])  # other slots untouched
    if residual:
        assert torch.equal(outs[1], eager[1])  # the residual sum: one rounding, bitwise


def test_full_tile_at_m1_and_capture_replays_with_new_inputs():
    from rocm_inductor.providers.triton import qkv_rope_kv as tq
    from rocm_inductor.providers.triton.gemm_configs import Config

    cfg = Config(1, 2, K, 1, 8, 1, False, False, True, True)  # the measured q/k/v prologue tile at M = 1
    args = _case(1)
    kc, vc, pos = args[9], args[10], args[11]
    tq.qkv_rope_kv(*args[:9], kc, vc, pos, D, False, False, config=cfg)  # compile outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = tq.qkv_rope_kv(*args[:9], kc, vc, pos, D, False, False, config=cfg)
    for seed, p in ((1, 3), (2, 40)):
        new = _case(1, seed=seed, pos=p)
        for dst, src in zip((args[0], args[1], args[7], args[8], pos), (new[0], new[1], new[7], new[8], new[11])):
            dst.copy_(src)
        before_k, before_v = kc.clone(), vc.clone()
        graph.replay()
        torch.cuda.synchronize()
        (eager, kc_e, vc_e) = _ref([*args[:9], before_k, before_v, pos], torch.bfloat16)
        (ref64, kc64, vc64) = _ref([*args[:9], before_k, before_v, pos], torch.float64)
        assert_contract(outs[0], eager[0], ref64[0])
        assert torch.equal(outs[1], eager[1])
        for got, want, want64 in ((kc, kc_e, kc64), (vc, vc_e, vc64)):
            assert_contract(got[:, :, p], want[:, :, p], want64[:, :, p])
        assert torch.equal(kc[:, :, :p], before_k[:, :, :p]) and torch.equal(vc[:, :, p + 1:], before_v[:, :, p + 1:])
