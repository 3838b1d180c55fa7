"""``rocm_fused::rope_kv_write``: the reference, the Triton kernel (TRITON_INTERPRET=1 on CPU, set in conftest) against
it, the op's checks and fake impl, and the kernel's AOT cases (compiled by tests/test_triton_aot.py)."""

from __future__ import annotations

import pytest
import torch

import rocm_inductor  # noqa: F401  (registers the ops)
from rocm_inductor.providers.reference import rope_kv_write_ref, rope_ref
from rocm_inductor.providers.triton import rope_kv as tk

OP = torch.ops.rocm_fused.rope_kv_write.default


def _inputs(dtype, d, rd, half=False, b=2, hq=8, hkv=2, s=1, max_len=16, pos=(5,), seed=0):
    """HF layout: q/k/v transposed views of (b, s, h, d) projections, cos/sin (b, 1, s, width), caches
    (b, hkv, L, d)."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, s, hq, d, generator=g).to(dtype).transpose(1, 2)
    k = torch.randn(b, s, hkv, d, generator=g).to(dtype).transpose(1, 2)
    v = torch.randn(b, s, hkv, d, generator=g).to(dtype).transpose(1, 2)
    w = rd // 2 if half else rd
    cos = torch.randn(b, 1, s, w, generator=g).to(dtype)
    sin = torch.randn(b, 1, s, w, generator=g).to(dtype)
    kc = torch.randn(b, hkv, max_len, d, generator=g).to(dtype)
    vc = torch.randn(b, hkv, max_len, d, generator=g).to(dtype)
    return q, k, v, cos, sin, kc, vc, torch.tensor(pos, dtype=torch.int64)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("d,rd", [(64, 64), (128, 32), (80, 80)])
def test_triton_matches_reference(dtype, interleaved, d, rd):
    q, k, v, cos, sin, kc, vc, pos = _inputs(dtype, d, rd, s=2, pos=(3, 9))
    kc_r, vc_r, kc_t, vc_t = kc.clone(), vc.clone(), kc.clone(), vc.clone()
    qr = rope_kv_write_ref(q, k, v, cos, sin, kc_r, vc_r, pos, rd, interleaved, False)
    qt = tk.rope_kv_write(q, k, v, cos, sin, kc_t, vc_t, pos, rd, interleaved, False)
    assert qt.is_contiguous() and qt.dtype == dtype
    # the rope kernel's contract: within one rounding of the float64 value (tests/test_rope_kernels.py)
    q64, k64 = rope_ref(q.double(), k.double(), cos.double(), sin.double(), rd, interleaved, False)
    for got, r64 in ((qt, q64), (kc_t[:, :, pos], k64)):
        tol = torch.finfo(dtype).eps * r64.abs() + 1e-5
        assert ((got.double() - r64).abs() <= tol).all()
    assert torch.equal(vc_t, vc_r)  # v: a copy, bit for bit
    rest = torch.ones(kc.shape[2], dtype=torch.bool)
    rest[pos] = False
    assert torch.equal(kc_t[:, :, rest], kc[:, :, rest])  # other slots untouched
    if dtype == torch.float32:
        torch.testing.assert_close(qt, qr, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(kc_t, kc_r, rtol=1e-6, atol=1e-6)
    else:  # one rounding each: at most one ulp apart
        torch.testing.assert_close(qt.float(), qr.float(), rtol=2 * torch.finfo(dtype).eps, atol=1e-3)
        torch.testing.assert_close(kc_t.float(), kc_r.float(), rtol=2 * torch.finfo(dtype).eps, atol=1e-3)


def test_half_table_broadcast_cos_and_out_of_range_positions():
    """Half tables (one value per pair) broadcast from (s, w); a position past the cache (or negative) writes
    nothing."""
    q, k, v, _, _, kc, vc, _ = _inputs(torch.float32, 64, 32, half=True, s=3)
    cos, sin = torch.randn(3, 16), torch.randn(3, 16)
    pos = torch.tensor([2, 16, -1])
    kc_r, vc_r, kc_t, vc_t = kc.clone(), vc.clone(), kc.clone(), vc.clone()
    qr = rope_kv_write_ref(q, k, v, cos, sin, kc_r, vc_r, pos, 32, False, True)
    qt = tk.rope_kv_write(q, k, v, cos, sin, kc_t, vc_t, pos, 32, False, True)
    torch.testing.assert_close(qt, qr)
    torch.testing.assert_close(kc_t, kc_r)
    assert torch.equal(vc_t, vc_r)
    changed = (kc_t != kc).any(-1).any(0).any(0)
    assert changed.nonzero().flatten().tolist() == [2]


def test_op_both_providers_and_fake():
    from torch._subclasses.fake_tensor import FakeTensorMode

    q, k, v, cos, sin, kc, vc, pos = _inputs(torch.float32, 64, 64)
    outs = {}
    for prov in ("reference", "triton"):
        kc2, vc2 = kc.clone(), vc.clone()
        outs[prov] = (OP(q, k, v, cos, sin, kc2, vc2, pos, 64, False, False, prov), kc2, vc2)
    for a, b in zip(outs["reference"], outs["triton"]):
        torch.testing.assert_close(a, b)
    with FakeTensorMode() as mode:
        fq = OP(*(mode.from_tensor(t) for t in (q, k, v, cos, sin, kc, vc, pos)), 64, False, False, "reference")
    assert fq.shape == q.shape and fq.dtype == q.dtype
    schema = OP._schema
    written = [a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]
    assert written == ["k_cache", "v_cache"]


@pytest.mark.parametrize("case,match", [
    ("rd_odd", "rotary_dim"), ("k_3d", "4-D"), ("cache_heads", "k_cache"), ("dtype", "one dtype"),
    ("pos_float", "integer"), ("pos_len", r"\(S="), ("q_dim", "head_dim"), ("v_shape", "v "),
])
def test_bad_inputs_raise(case, match):
    q, k, v, cos, sin, kc, vc, pos = _inputs(torch.float32, 64, 64)
    rd = 64
    if case == "rd_odd":
        rd = 63
    elif case == "k_3d":
        k = k[0]
    elif case == "cache_heads":
        kc = torch.zeros(2, 3, 16, 64)
    elif case == "dtype":
        vc = vc.half()
    elif case == "pos_float":
        pos = pos.float()
    elif case == "pos_len":
        pos = torch.tensor([1, 2])
    elif case == "q_dim":
        q = q[..., :32]
    elif case == "v_shape":
        v = v[:, :1]
    for prov in ("reference", "triton"):
        with pytest.raises(ValueError, match=match):
            OP(q, k, v, cos, sin, kc, vc, pos, rd, False, False, prov)


def test_check_refuses():
    from rocm_inductor.ops.rope_kv import rope_kv_spec
    from rocm_inductor.providers import get_provider

    q, k, v, cos, sin, kc, vc, pos = _inputs(torch.float32, 64, 64)
    spec = rope_kv_spec(q, k, v, cos, kc, 64, False, False)
    assert spec["max_len"] == 16 and spec["seq_len"] == 1 and spec["k_heads"] == 2
    assert tk.check(spec) is None
    assert "one dtype" in tk.check({**spec, "cache_dtype": torch.float16})
    assert "rotary_dim" in tk.check({**spec, "rotary_dim": 65})
    assert get_provider("reference").check("rope_kv_write", spec) is None


def test_aot_cases_listed():
    from rocm_inductor.providers.triton import _aot

    names = [c["name"] for m, c in _aot.discover() if m.endswith(".rope_kv")]
    assert names == ["neox_bf16_d128", "neox_fp16_d64", "gptj_partial_bf16_d128"]
