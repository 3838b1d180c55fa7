"""Compile-time verification of a CUDA graph's region on a CPU-only machine (passes/discover.py).

The random inputs are made on the CPU, so a region's own device constants (``full`` / ``scalar_tensor`` /
``arange`` with ``device=cuda``, what masked_fill and HF's top-p produce in a CUDA post-grad graph) must follow
them there; before the fix every sampling chain compiled for CUDA was refused with "Expected all tensors to be
on the same device" (found on the H200, 2026-12-01).
"""

from __future__ import annotations

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from rocm_inductor.passes import discover, verify

CUDA = torch.device("cuda")


def _region_on_cuda():
    def f(x):
        fill = torch.full((), -float("inf"), dtype=x.dtype, device=x.device)
        idx = torch.arange(x.shape[-1], device=x.device)
        return torch.where((idx % 3 == 0), fill, x).softmax(-1)

    gm = make_fx(f, tracing_mode="fake")(torch.randn(2, 9))
    for n in gm.graph.nodes:  # what the same trace gives on a GPU: device=cuda constants
        if "device" in n.kwargs:
            n.kwargs = {**n.kwargs, "device": CUDA}
    ph = next(n for n in gm.graph.nodes if n.op == "placeholder")
    out = next(n for n in gm.graph.nodes if n.op == "output").args[0]
    out = out[0] if isinstance(out, (list, tuple)) else out
    assert any(n.kwargs.get("device") == CUDA for n in gm.graph.nodes)
    return discover.extract([ph], [out])


def test_region_with_cuda_constants_is_evaluated_on_the_cpu():
    region = _region_on_cuda()
    assert not isinstance(region, str), region
    args, subs = discover.random_inputs(region, 0)
    (got,) = verify._run(region.module, args, subs)
    assert got.device.type == "cpu" and got.shape == (2, 9)
    want = torch.where(torch.arange(9) % 3 == 0, -float("inf"), args[0]).softmax(-1)
    torch.testing.assert_close(got, want)


def test_verify_accepts_a_cuda_region_against_its_math():
    region = _region_on_cuda()

    def math(x):
        return (torch.where(torch.arange(x.shape[-1]) % 3 == 0, -float("inf"), x).softmax(-1),)

    v = discover.verify(region, "test_devices", (), math, math)
    assert v.ok, v.reason
