"""RoPE on a GPU: Triton and FlashInfer providers vs the reference, and the pass end to end (skipped on CPU)."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from rocm_inductor.ops.rope import build_cos_sin_cache
from rocm_inductor.providers.reference import rope_cached_ref, rope_ref

pytestmark = pytest.mark.gpu
HAS_FI = importlib.util.find_spec("flashinfer") is not None


def _inv_freq(d):
    return 1.0 / (10000.0 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))


@pytest.mark.parametrize("d,rd,inter", [(64, 64, False), (128, 128, True), (96, 24, False), (256, 64, True)])
def test_triton_rope_gpu(d, rd, inter):
    torch.manual_seed(0)
    q = torch.randn(2, 33, 8, d, dtype=torch.bfloat16, device="cuda").transpose(1, 2)
    k = torch.randn(2, 33, 2, d, dtype=torch.bfloat16, device="cuda").transpose(1, 2)
    c = torch.randn(2, 1, 33, rd, device="cuda")
    s = torch.randn(2, 1, 33, rd, device="cuda")
    got = torch.ops.rocm_fused.rope(q, k, c, s, rd, inter, False, "triton")
    want = rope_ref(q, k, c, s, rd, inter, False)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, atol=1e-2, rtol=1e-2)  # fp32 math; GPU may contract to FMA


@pytest.mark.parametrize("provider", ["triton"] + (["flashinfer"] if HAS_FI else []))
@pytest.mark.parametrize("d", [64, 128])
def test_cached_providers_gpu(provider, d):
    torch.manual_seed(0)
    cache = build_cos_sin_cache(_inv_freq(d), 4096, device="cuda")
    q = torch.randn(1, 17, 32, d, dtype=torch.bfloat16, device="cuda").transpose(1, 2)
    k = torch.randn(1, 17, 8, d, dtype=torch.bfloat16, device="cuda").transpose(1, 2)
    pos = torch.randint(0, 4096, (1, 1, 17), device="cuda")
    for inter in (False, True):
        got = torch.ops.rocm_fused.rope_cached(q, k, pos, cache, d, inter, provider)
        want = rope_cached_ref(q, k, pos, cache, d, inter)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, atol=1e-2, rtol=1e-2)


def test_pass_on_gpu_triton():
    import rocm_inductor

    def hf(q, k, cos, sin):
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)

        def rh(x):
            return torch.cat((-x[..., x.shape[-1] // 2:], x[..., : x.shape[-1] // 2]), -1)

        return q * cos + rh(q) * sin, k * cos + rh(k) * sin

    q = torch.randn(1, 9, 32, 128, dtype=torch.bfloat16, device="cuda").transpose(1, 2)
    k = torch.randn(1, 9, 8, 128, dtype=torch.bfloat16, device="cuda").transpose(1, 2)
    cos = torch.randn(1, 9, 128, dtype=torch.bfloat16, device="cuda")
    sin = torch.randn(1, 9, 128, dtype=torch.bfloat16, device="cuda")
    torch._dynamo.reset()
    rocm_inductor.clear_reports()
    f = torch.compile(hf, backend="rocm_fused", options={"passes": {"rope": True}, "strict": True})
    with torch.no_grad():
        got = f(q, k, cos, sin)
    rep = rocm_inductor.last_report()
    assert rep is not None and rep.count("rope") == 1 and rep.providers().get("rope") == ["triton"]
    for g, w in zip(got, hf(q.double(), k.double(), cos.double(), sin.double())):
        torch.testing.assert_close(g.double(), w, atol=2e-2, rtol=2e-2)
