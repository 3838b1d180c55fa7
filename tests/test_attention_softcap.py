"""The logit soft cap of ``rocm_fused::decode_attention`` (Gemma2 / Gemma3's ``attn_logit_softcapping``:
``cap * tanh(scale * q.k / cap)`` before the mask): the reference against float64 eager Gemma2 math, the Triton
kernel (``TRITON_INTERPRET=1``, tiny shapes) unsplit, split in two launches and in one launch, against the
reference; the op's validation, fake and spec key; the Triton check."""

from __future__ import annotations

import pytest
import torch

from rocm_inductor.providers.reference_attention import decode_attention_ref

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def _tri():
    from rocm_inductor.providers.triton import attention

    return attention


def _inputs(dtype, lkv=40, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = (torch.randn(2, 4, 1, 32, generator=gen) * 4).to(dtype).to(DEV)  # scores up to ~30: the cap bites
    k, v = (torch.randn(2, 2, lkv, 32, generator=gen).to(dtype).to(DEV) for _ in range(2))
    keep = torch.rand(2, 1, 1, lkv, generator=gen) > 0.3
    keep[..., 0] = True
    return q, k, v, keep.to(DEV)


def _gemma2_eager64(q, k, v, keep, scale, cap):
    """transformers models/gemma2/modeling_gemma2.py eager_attention_forward in float64 (repeat_kv, the cap
    after the scaling and before the mask)."""
    g = q.shape[1] // k.shape[1]
    kd, vd = (t.double().repeat_interleave(g, dim=1) for t in (k, v))
    w = (q.double() @ kd.transpose(-1, -2)) * scale
    w = torch.tanh(w / cap) * cap
    return torch.softmax(w.masked_fill(~keep, float("-inf")), -1) @ vd


def test_reference_is_gemma2_math_and_zero_cap_is_none():
    q, k, v, keep = _inputs(torch.float32)
    got = decode_attention_ref(q, k, v, keep, 0.3, softcap=5.0)
    torch.testing.assert_close(got.double(), _gemma2_eager64(q, k, v, keep, 0.3, 5.0), atol=1e-5, rtol=1e-5)
    assert torch.equal(decode_attention_ref(q, k, v, keep, 0.3, softcap=0.0), decode_attention_ref(q, k, v, keep, 0.3))
    assert not torch.allclose(got, decode_attention_ref(q, k, v, keep, 0.3), atol=1e-2)  # the cap matters here


@pytest.mark.parametrize("dtype,splits,one", [(torch.float32, 1, None), (torch.bfloat16, 3, False),
                                              (torch.float32, 3, True)])
def test_kernel_softcap_unsplit_split_and_one_launch(dtype, splits, one, monkeypatch):
    monkeypatch.delenv("ROCM_FUSED_ATTN_ONE_LAUNCH", raising=False)
    A = _tri()
    q, k, v, keep = _inputs(dtype)
    mask = keep if dtype == torch.float32 else torch.zeros(keep.shape, dtype=dtype, device=DEV).masked_fill(
        ~keep, float("-inf"))  # bool and additive masks: the cap comes before either
    got = A.decode_attention(q, k, v, mask, 0.3, num_splits=splits, block_n=16, inline_combine=one, softcap=5.0)
    ref = decode_attention_ref(q, k, v, mask, 0.3, softcap=5.0)
    tol = 2e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(got.float(), ref.float(), atol=tol, rtol=tol)
    if one:
        assert int(A._COUNTERS[str(q.device)].abs().sum()) == 0


def test_op_validation_fake_spec_and_check():
    from rocm_inductor.ops.attention import attention_spec
    from rocm_inductor.providers.triton import TritonProvider

    q, k, v, keep = _inputs(torch.float32, lkv=8)
    op = torch.ops.rocm_fused.decode_attention
    got = op(q, k, v, keep, 0.3, "reference", softcap=5.0)
    assert torch.equal(got, decode_attention_ref(q, k, v, keep, 0.3, softcap=5.0))
    for bad in (-1.0, float("inf")):
        with pytest.raises(ValueError, match="softcap"):
            op(q, k, v, keep, 0.3, "reference", softcap=bad)
    with torch._subclasses.FakeTensorMode() as mode:
        fq, fk, fv = (mode.from_tensor(t) for t in (q, k, v))
        assert op(fq, fk, fv, None, 0.3, "reference", softcap=5.0).shape == q.shape
    spec = attention_spec(q, k, v, None, softcap=5.0)
    assert spec["softcap"] == 5.0 and attention_spec(q, k, v, None)["softcap"] == 0.0
    assert TritonProvider().check("decode_attention", spec) is None
    assert "softcap" in TritonProvider().check("decode_attention", {**spec, "softcap": -1.0})


@pytest.mark.gpu
@pytest.mark.parametrize("b,lkv", [(1, 4096), (8, 4096), (32, 1024)])
def test_gpu_gemma2_shapes(b, lkv):
    """Gemma2-2B's decode attention (8/4 heads, D 256, cap 50, an additive bf16 row mask) at the launcher's own
    config (split or not, one launch or two) against the reference."""
    A = _tri()
    gen = torch.Generator().manual_seed(0)
    q = (torch.randn(b, 8, 1, 256, generator=gen) * 4).to(torch.bfloat16).cuda()
    k, v = (torch.randn(b, 4, lkv, 256, generator=gen).to(torch.bfloat16).cuda() for _ in range(2))
    keep = torch.arange(lkv)[None, None, None, :] <= torch.randint(0, lkv, (b, 1, 1, 1), generator=gen)
    mask = torch.zeros(keep.shape, dtype=torch.bfloat16).masked_fill(~keep, float("-inf")).cuda()
    got = A.decode_attention(q, k, v, mask, 256 ** -0.5, softcap=50.0)
    ref = decode_attention_ref(q, k, v, mask, 256 ** -0.5, softcap=50.0)
    torch.testing.assert_close(got.float(), ref.float(), atol=2e-2, rtol=2e-2)
