"""RoPE ops, Triton kernel (TRITON_INTERPRET=1 on CPU, set in conftest) and the cos/sin cache builder."""

from __future__ import annotations

import pytest
import torch

from rocm_inductor.ops.rope import build_cos_sin_cache
from rocm_inductor.providers.reference import rope_cached_ref, rope_ref
from rocm_inductor.providers.triton import rope as tr


def _inv_freq(rd, theta=10000.0):
    return 1.0 / (theta ** (torch.arange(0, rd, 2, dtype=torch.int64).float() / rd))


def _ref64(x, cos, sin, rd, inter, half):
    """Reference in float64, rounded once to x's dtype (what a single-rounding kernel must give)."""
    out, _ = rope_ref(x.double(), None, cos.double(), sin.double(), rd, inter, half)
    return out


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("d,rd", [(64, 64), (80, 80), (96, 24), (128, 32)])
def test_triton_matches_reference(dtype, interleaved, d, rd):
    torch.manual_seed(0)
    q = torch.randn(2, 8, 3, d, dtype=dtype).transpose(1, 2)  # (2, 3, 8, d) strided
    k = torch.randn(2, 2, 3, d, dtype=dtype).transpose(1, 2)
    c, s = torch.randn(2, 3, 1, rd, dtype=dtype), torch.randn(2, 3, 1, rd, dtype=dtype)
    got = tr.rope(q, k, c, s, rd, interleaved, False)
    for g, x in zip(got, (q, k)):
        r64 = _ref64(x, c, s, rd, interleaved, False)
        assert g.is_contiguous() and g.dtype == dtype
        # one rounding of the float32 result: within half an ulp (+ float32 noise) of the float64 value
        tol = torch.finfo(dtype).eps * r64.abs() + 1e-5
        assert ((g.double() - r64).abs() <= tol).all()
        assert torch.equal(g[..., rd:], x[..., rd:])  # partial rotary: tail untouched


@pytest.mark.parametrize("interleaved", [False, True])
def test_triton_half_table_and_cached(interleaved):
    torch.manual_seed(0)
    rd, d = 32, 64
    q = torch.randn(5, 4, d, dtype=torch.bfloat16)  # flattened tokens (T, H, D)
    k = torch.randn(5, 1, d, dtype=torch.bfloat16)
    cache = build_cos_sin_cache(_inv_freq(rd), 16)
    pos = torch.tensor([0, 3, 15, 7, 1])[:, None]
    got = tr.rope_cached(q, k, pos, cache, rd, interleaved)
    want = rope_cached_ref(q, k, pos, cache, rd, interleaved)
    for g, w in zip(got, want):
        torch.testing.assert_close(g.float(), w.float(), atol=1e-2, rtol=1e-2)
    c, s = cache[pos[:, 0], : rd // 2][:, None], cache[pos[:, 0], rd // 2:][:, None]
    qo, ko = tr.rope(q, None, c, s, rd, interleaved, True)
    assert ko is None
    torch.testing.assert_close(qo.float(), want[0].float(), atol=1e-2, rtol=1e-2)


def test_triton_noncontiguous_slice_and_empty():
    x = torch.randn(6, 4, 48, dtype=torch.float16)
    qp = x[..., 32:]  # rope part of an MLA head, strided
    c, s = torch.randn(6, 1, 16), torch.randn(6, 1, 16)
    got, _ = tr.rope(qp, None, c, s, 16, False, False)
    want, _ = rope_ref(qp, None, c, s, 16, False, False)
    torch.testing.assert_close(got.float(), want.float(), atol=2e-3, rtol=2e-3)
    e = torch.empty(1, 4, 0, 64)
    qo, ko = tr.rope(e, e, torch.empty(1, 1, 0, 64), torch.empty(1, 1, 0, 64), 64, False, False)
    assert qo.shape == e.shape and ko.shape == e.shape


def test_bf16_rounds_to_nearest():
    """A value just above a bf16 midpoint must round up (the interpreter alone would truncate)."""
    x = torch.tensor([[1.0, 0.0]], dtype=torch.bfloat16)
    c = torch.tensor([[1.0 + 2**-8 + 2**-12, 1.0]], dtype=torch.float32)  # above the 1 + 2^-8 midpoint
    s = torch.zeros(1, 2)
    got, _ = tr.rope(x, None, c, s, 2, False, False)
    assert got[0, 0].item() == 1.0 + 2**-7


def test_check_refuses():
    base = {"dtype": torch.bfloat16, "k_dtype": torch.bfloat16, "table_dtype": torch.bfloat16,
            "head_dim": 64, "rotary_dim": 64, "ndim": 4, "cached": False}
    assert tr.check(base) is None
    assert "even" in tr.check({**base, "rotary_dim": 63})
    assert "even" in tr.check({**base, "rotary_dim": 128})
    assert "one dtype" in tr.check({**base, "k_dtype": torch.float16})
    assert "symbolic" in tr.check({**base, "head_dim": None})
    assert "4-D" in tr.check({**base, "ndim": 5})
    assert "float32" in tr.check({**base, "cached": True})
    with pytest.raises(ValueError):
        tr.rope(torch.randn(2, 8), None, torch.randn(3, 8), torch.randn(3, 8), 8, False, False)


def test_reference_errors():
    with pytest.raises(ValueError):
        rope_ref(torch.randn(2, 8), None, torch.randn(2, 7), torch.randn(2, 7), 7, False, False)


def test_cache_is_float64_rounded_once():
    rd, n = 64, 4096
    inv = _inv_freq(rd, 500000.0)
    cache = build_cos_sin_cache(inv, n, scaling=1.0)
    ang = torch.arange(n, dtype=torch.float64)[:, None] * inv.double()[None]
    want = torch.cat([ang.cos(), ang.sin()], -1).float()
    assert cache.dtype == torch.float32 and cache.shape == (n, rd) and cache.is_contiguous()
    assert torch.equal(cache, want)
    # HF's float32 angles drift at large positions; the float64 table does not
    hf = torch.arange(n).float()[:, None] * inv[None]
    assert (torch.cat([hf.cos(), hf.sin()], -1).double() - ang.cos().repeat(1, 2)).abs().max() > 0


def test_ops_registered_and_fake():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q, k = torch.empty(2, 4, 3, 64, dtype=torch.bfloat16), torch.empty(2, 1, 3, 64, dtype=torch.bfloat16)
        c = torch.empty(2, 1, 3, 64, dtype=torch.bfloat16)
        qo, ko = torch.ops.rocm_fused.rope(q, k, c, c, 64, False, False, "reference")
        assert qo.shape == q.shape and ko.shape == k.shape and qo.is_contiguous()
        qo, ko = torch.ops.rocm_fused.rope_cached(q, None, torch.empty(2, 1, 3, dtype=torch.int64),
                                                  torch.empty(16, 64), 64, True, "reference")
        assert ko.shape == (0,)
    assert torch.ops.rocm_fused.rope.default._schema.arguments  # registered


def test_vendor_checks_and_stand_in(monkeypatch):
    """FlashInfer provider: limits as data, and its token-major plumbing against a CPU stand-in kernel."""
    import sys
    import types

    from rocm_inductor.providers import get_provider

    fi = get_provider("flashinfer")
    spec = {"dtype": torch.bfloat16, "k_dtype": torch.bfloat16, "table_dtype": torch.float32, "head_dim": 128,
            "rotary_dim": 128, "ndim": 4, "cached": True}
    assert fi.check("rope_cached", spec) is None
    assert "on-the-fly" in fi.check("rope", {**spec, "cached": False})
    assert "head_dim" in fi.check("rope_cached", {**spec, "head_dim": 96})
    assert "float16/bfloat16" in fi.check("rope_cached", {**spec, "dtype": torch.float32})
    assert "no k" in fi.check("rope_cached", {**spec, "k_dtype": None})
    assert "head_dim" in get_provider("aiter").check("rope_cached", {**spec, "head_dim": 80})

    def apply(positions, query, key, head_size, cos_sin_cache, is_neox=True):
        assert query.dim() == 3 and query.is_contiguous() and positions.dtype in (torch.int32, torch.int64)
        return rope_cached_ref(query, key, positions[:, None], cos_sin_cache, cos_sin_cache.shape[-1],
                               not is_neox)

    stand_in = types.ModuleType("flashinfer")
    stand_in.rope = types.SimpleNamespace(apply_rope_with_cos_sin_cache=apply)
    monkeypatch.setitem(sys.modules, "flashinfer", stand_in)
    fi.reset()
    cache = build_cos_sin_cache(_inv_freq(64), 32)
    q = torch.randn(2, 5, 4, 64, dtype=torch.bfloat16).transpose(1, 2)  # (b, h, s, d) view
    k = torch.randn(2, 5, 1, 64, dtype=torch.bfloat16).transpose(1, 2)
    pos = torch.randint(0, 32, (2, 5))[:, None, :]  # (b, 1, s)
    for inter in (False, True):
        got = fi.rope_cached(q, k, pos, cache, 64, inter)
        want = rope_cached_ref(q, k, pos, cache, 64, inter)
        for g, w in zip(got, want):
            assert g.shape == w.shape
            torch.testing.assert_close(g, w)
    fi.reset()
