"""Cached RoPE through FlashInfer and AMD's fork on CPU stand-ins with the real signatures (vendor_standins).

Fork 0.5.3+amd reads positions as int32 whatever their dtype (int64 rotated tokens by the wrong
positions); fork 0.6.18+amd's ``backend="auto"`` takes AITER's kernel (cos/sin in the query dtype) for
fp16 with >= 2048 tokens. Verified on CPU stand-ins only.
"""

from __future__ import annotations

from typing import Literal

import pytest
import torch
import vendor_standins

from rocm_inductor.ops.rope import build_cos_sin_cache
from rocm_inductor.providers import get_provider
from rocm_inductor.providers.amd_flashinfer import _prefer_native
from rocm_inductor.providers.reference import rope_cached_ref


def _case(tokens: int, dtype=torch.bfloat16):
    g = torch.Generator().manual_seed(0)
    inv = 1.0 / (10000 ** (torch.arange(0, 64, 2, dtype=torch.float64) / 64))
    cache = build_cos_sin_cache(inv, 4096)
    q = torch.randn(tokens, 2, 64, generator=g).to(dtype)
    k = torch.randn(tokens, 1, 64, generator=g).to(dtype)
    pos = torch.randint(0, 4096, (tokens,), generator=g)  # int64, as models make them
    return q, k, pos, cache


@pytest.mark.parametrize(("provider", "lib", "line"), [
    ("flashinfer", "flashinfer", "0.5.3"), ("flashinfer", "flashinfer", "0.6.4"),
    ("amd_flashinfer", "amd_flashinfer", "0.5.3+amd"), ("amd_flashinfer", "amd_flashinfer", "0.6.18+amd")])
def test_rope_cached_matches_reference_on_every_line(provider, lib, line, monkeypatch):
    """int64 model positions reach the kernel as int32 (fork 0.5.3+amd misreads int64: wrong rotations)."""
    calls: list = []
    vendor_standins.install(monkeypatch, getattr(vendor_standins, lib)(line, calls))
    prov = get_provider(provider)
    prov.reset()
    q, k, pos, cache = _case(6)
    got = prov.rope_cached(q, k, pos[:, None], cache, 64, False)
    want = rope_cached_ref(q, k, pos[:, None], cache, 64, False)
    for a, b in zip(got, want):
        assert torch.equal(a, b)
    assert calls[-1][1] == torch.int32
    prov.reset()


def test_fork_0_6_18_rope_is_bound_to_native(monkeypatch):
    """fp16 with 2048 tokens: "auto" would take AITER's fp16-table kernel; we pass backend="native"."""
    calls: list = []
    vendor_standins.install(monkeypatch, vendor_standins.amd_flashinfer("0.6.18+amd", calls))
    prov = get_provider("amd_flashinfer")
    prov.reset()
    q, k, pos, cache = _case(2048, torch.float16)
    got = prov.rope_cached(q, k, pos[:, None], cache, 64, False)
    assert calls[-1][2] == "native"
    want = rope_cached_ref(q, k, pos[:, None], cache, 64, False)
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    prov.reset()


def test_prefer_native_leaves_other_backend_literals_alone():
    """Upstream FlashInfer's RoPE ``backend`` is ``Literal["cuda", "cute-dsl"]``: "native" is not bound."""
    def upstream(positions, query, key, head_size, cos_sin_cache, is_neox=True,
                 backend: Literal["cuda", "cute-dsl"] = "cuda"):
        return backend

    def fork(positions, query, key, head_size, cos_sin_cache, is_neox=True, backend: str = "auto"):
        return backend

    assert _prefer_native(upstream) is upstream
    assert _prefer_native(fork)(0, 0, 0, 0, 0) == "native"


@pytest.mark.parametrize("rd", [64, 32])
def test_aiter_rope_cached_real_signature(rd, monkeypatch):
    """AITER: [s, b, h, d] layout, int64 positions [s, b], rd/2-wide cos/sin; partial rotary copies the tail."""
    calls: list = []
    vendor_standins.install(monkeypatch, vendor_standins.aiter("0.1.5", calls))
    prov = get_provider("aiter")
    prov.reset()
    q, k, pos, cache = _case(5)
    cache = cache[:, :rd // 2].repeat(1, 2) if rd < 64 else cache  # any [max_pos, rd] NeoX table
    for inter in (False, True):
        got = prov.rope_cached(q, k, pos[:, None], cache, rd, inter)
        want = rope_cached_ref(q, k, pos[:, None], cache, rd, inter)
        assert all(torch.equal(a, b) for a, b in zip(got, want))
    assert calls[-1][1] == torch.int64
    prov.reset()
