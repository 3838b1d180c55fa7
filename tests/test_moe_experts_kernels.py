"""The Triton experts kernels (``providers/triton/moe_experts*.py``) through the interpreter, per path and config.

Tiny shapes (H = 40, I = 24: partial tiles) against the float64 reference within the numerics contract's
tolerance; the grouped path both expert-major (T * k >= E) and slot-major (T * k < E), an expert chosen by more
slots than one 16-row chunk holds, and every entry of ``CONFIGS`` once.
"""

from __future__ import annotations

import pytest
import torch
from graph_utils import needs_interpreter

from rocm_inductor.providers.reference_moe_experts import moe_experts_ref
from rocm_inductor.providers.triton import moe_experts as K


def _inputs(t, k, e, h, i, dtype, gpt=False, ids=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(t, h, generator=g).to(dtype)
    tw = torch.rand(t, k, generator=g)
    if ids is None:
        ids = torch.stack([torch.randperm(e, generator=g)[:k] for _ in range(t)])
    w1 = (torch.randn((e, h, 2 * i) if gpt else (e, 2 * i, h), generator=g) / h ** 0.5).to(dtype)
    w2 = (torch.randn((e, i, h) if gpt else (e, h, i), generator=g) / i ** 0.5).to(dtype)
    b1 = torch.randn(e, 2 * i, generator=g).to(dtype) if gpt else None
    b2 = torch.randn(e, h, generator=g).to(dtype) if gpt else None
    tail = ("swiglu_clamp" if gpt else "silu", gpt, gpt, 1.702, 7.0)
    return (x, tw, ids, w1, w2, b1, b2), tail


def _err(got, args, tail):
    wide = [a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]
    ref = moe_experts_ref(*wide, *tail)
    return float((got.double() - ref).abs().max() / ref.abs().max())


#: bf16 output: one rounding of the output (2^-8 relative) plus float32 summation order; measured <= 4e-3.
TOL = {torch.bfloat16: 8e-3, torch.float32: 1e-5}


@needs_interpreter
def test_grouped_paths_and_chunks():
    """Slot-major (2 tokens x 2 of 8 experts), expert-major with one expert taking 20 slots (two chunks of 16),
    bf16 and float32, GPT-OSS's layout with biases."""
    cases = [
        (_inputs(2, 2, 8, 40, 24, torch.bfloat16), torch.bfloat16),
        (_inputs(20, 2, 3, 40, 24, torch.float32, ids=torch.tensor([[0, 1]] * 20)), torch.float32),
        (_inputs(3, 2, 4, 40, 24, torch.bfloat16, gpt=True), torch.bfloat16),
    ]
    for (args, tail), dtype in cases:
        got = K.moe_experts(*args, *tail, config=K.default_config(8, dtype))
        assert got.dtype == dtype
        assert _err(got, args, tail) <= TOL[dtype], (args[2].tolist(), _err(got, args, tail))


@pytest.mark.slow  # 14 configs through the interpreter: ~3.5 s idle
@needs_interpreter
def test_every_config():
    """Each config of the sweep table computes the op (one GPT-OSS-layout bf16 case, 3 tokens)."""
    args, tail = _inputs(3, 2, 4, 40, 24, torch.bfloat16, gpt=True, seed=1)
    for cfg in K.CONFIGS:
        assert _err(K.moe_experts(*args, *tail, config=cfg), args, tail) <= TOL[torch.bfloat16], cfg.name()


def test_default_config_paths():
    assert not K.default_config(1).dot
    assert K.default_config(2).dot and K.default_config(32).dot
    assert K.default_config(1, torch.float32).block_k == K.default_config(1).block_k // 2


@pytest.mark.gpu
@pytest.mark.parametrize("t", [1, 8, 32])
@pytest.mark.parametrize("gpt", [False, True])
def test_gpu_model_shapes(t, gpt):
    """Qwen3-MoE (E 128, k 8, H 2048, I 768) and GPT-OSS (E 32, k 4, H 2880, I 2880) shapes on the GPU at the
    default config of T, against the reference on the GPU (float32 math on the same bf16 inputs). The other
    configs are checked by ``bench_moe_experts.py --sweep`` (its err column)."""
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    e, k, h, i = (32, 4, 2880, 2880) if gpt else (128, 8, 2048, 768)
    args, tail = _inputs(t, k, e, h, i, torch.bfloat16, gpt=gpt)
    args = [a.cuda() if isinstance(a, torch.Tensor) else a for a in args]
    got = K.moe_experts(*args, *tail).float()
    ref = moe_experts_ref(*args[:5], *args[5:], *tail).float()
    err = float((got - ref).abs().max() / ref.abs().max())
    assert err <= TOL[torch.bfloat16], err


@pytest.mark.gpu
@pytest.mark.parametrize("t", [1, 8])
def test_gpu_graph_capture(t):
    """Both paths capture in a CUDA graph (no host sync) and the replay recomputes for new ids in place."""
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    args, tail = _inputs(t, 8, 128, 256, 64, torch.bfloat16)
    args = [a.cuda() if isinstance(a, torch.Tensor) else a for a in args]
    K.moe_experts(*args, *tail)  # compile outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = K.moe_experts(*args, *tail)
    new_ids = torch.stack([torch.randperm(128)[:8] for _ in range(t)]).cuda()
    args[2].copy_(new_ids)
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, moe_experts_ref(*args, *tail), rtol=2e-2, atol=2e-2)
