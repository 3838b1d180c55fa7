"""The attention pass on a GPU (skipped on CPU): the real CUDA/ROCm SDPA graph forms are rewritten.

On CPU the CUDA variants are only unit-tested on hand-built meta graphs (test_attention_pass.py); here the
post-grad graph comes from torch's own CUDA dispatch (efficient attention with the bool -> bias conversion and
alignment (pad + slice when the row stride is not a multiple of 8) for a masked decode, flash with enable_gqa
and no mask, the fp32 paths, HF repeat_kv), so these tests say whether those guesses hold. Reference provider
forced (the Triton kernel is tested apart); assertion messages carry the graph report (what matched, from
which SDPA target, or the near-miss reason).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from graph_utils import compile_run

pytestmark = pytest.mark.gpu
OP = "rocm_fused.decode_attention.default"


def repeat_kv(x, n):  # HF transformers integrations/sdpa_attention.py (5.x)
    b, h, s, d = x.shape
    return x[:, :, None, :, :].expand(b, h, n, s, d).reshape(b, h * n, s, d)


def hf(q, k, v, mask):
    g = q.shape[1] // k.shape[1]
    return F.scaled_dot_product_attention(q, repeat_kv(k, g), repeat_kv(v, g), attn_mask=mask)


def gqa(q, k, v, mask):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)


def gpt_fast(q, k, v, mask):
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.0)


def _ref(q, k, v, mask):
    g = q.shape[1] // k.shape[1]
    kd, vd = (t.double().repeat_interleave(g, dim=1) for t in (k, v))
    s = q.double() @ kd.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else s + mask.double()
    return (torch.softmax(s, -1).nan_to_num(0.0) @ vd)


CASES = [pytest.param(fn, m, id=f"{fn.__name__}-{m}")
         for fn in (hf, gpt_fast, gqa) for m in ("bool", "additive", "none")]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("fn,mask_kind", CASES)
def test_cuda_sdpa_forms_rewritten(fn, mask_kind, dtype, request):
    """lkv=1001: the bias row stride is not a multiple of 8, so SDPA pads and slices it for the efficient kernel
    (``preprocess_mask``); the masked keys start at 513 (decode at position 512)."""
    if fn is gqa and (mask_kind != "none" or dtype == torch.float32):
        request.applymarker(pytest.mark.xfail(strict=False, reason=(
            "CUDA SDPA may send enable_gqa with a mask or in fp32 to its math path (decomposed; matched only if "
            "its graph has the expected form); HF passes enable_gqa only without a mask")))
    _check_form(fn, mask_kind, dtype, lkv=1001)


def test_cuda_sdpa_aligned_bias():
    _check_form(hf, "bool", torch.bfloat16, lkv=1024)


def _check_form(fn, mask_kind, dtype, lkv):
    torch.manual_seed(0)
    b, hq, hkv, d = 2, 32, 8, 64
    q = torch.randn(b, hq, 1, d, device="cuda", dtype=dtype)
    k = torch.randn(b, hkv, lkv, d, device="cuda", dtype=dtype)
    v = torch.randn(b, hkv, lkv, d, device="cuda", dtype=dtype)
    keep = torch.arange(lkv, device="cuda") <= 512
    keep = keep.view(1, 1, 1, lkv).expand(b, 1, 1, lkv).clone()
    mask = {"bool": keep, "additive": torch.zeros(b, 1, 1, lkv, device="cuda", dtype=dtype).masked_fill(
        ~keep, float("-inf")), "none": None}[mask_kind]
    out, seen = compile_run(fn, q, k, v, mask)
    report = "\n".join(str(c.report) for c in seen)
    assert sum(c.after[OP] for c in seen) == 1, f"{dict(seen[0].before)}\n{report}"
    assert not any("scaled_dot_product" in t for c in seen for t in c.after), report
    tol = {torch.float32: 1e-4, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[dtype]
    torch.testing.assert_close(out.double(), _ref(q, k, v, mask), atol=tol, rtol=tol)


def test_hf_llama_static_cache_gpu():
    """Tiny HF Llama (bf16, CUDA) decoding over a StaticCache: both layers' attention rewritten."""
    import sys

    from bench_utils import BENCH

    sys.path.insert(0, str(BENCH))
    import hf_models

    model, cfg = hf_models.build_model("llama", "cuda", torch.bfloat16, tiny=True)
    step, inputs, _ = hf_models.decode_step(model, cfg, 2, 1, 40, 64, "cuda", torch.bfloat16)
    with torch.no_grad():
        ref = step(*inputs).float()
    out, seen = compile_run(step, *inputs, fullgraph=True)
    report = "\n".join(str(c.report) for c in seen)
    assert sum(c.report.count("decode_attention") for c in seen) == cfg.num_hidden_layers, report
    err = float((out.float() - ref).abs().max() / ref.abs().max())
    assert err < 2e-2, (err, report)


def _gpt_oss64(q, k, v, mask, sinks, scale):
    """float64 GPT-OSS eager attention with sinks (transformers models/gpt_oss/modeling_gpt_oss.py)."""
    g = q.shape[1] // k.shape[1]
    kd, vd = (t.double().repeat_interleave(g, dim=1) for t in (k, v))
    s = q.double() @ kd.transpose(-1, -2) * scale + mask.double()
    col = sinks.double().view(1, -1, 1, 1).expand(q.shape[0], -1, q.shape[2], 1)
    return torch.softmax(torch.cat([s, col], -1), -1)[..., :-1] @ vd


@pytest.mark.parametrize("b,lkv", [(1, 4096), (32, 128)], ids=["split-full-layer", "unsplit-window"])
def test_triton_sinks_gpt_oss_shapes(b, lkv):
    """GPT-OSS-20B's attention shape (64 q / 8 kv heads, D 64, bf16, HF's additive finfo.min mask) with sinks on
    the Triton kernel: a full layer at B = 1 (split-KV: the sink in the combine) and a 128-slot sliding-window
    layer at B = 32 (unsplit: the sink in the store); row 0 fully masked (graph padding) gives zeros."""
    torch.manual_seed(0)
    hq, hkv, d = 64, 8, 64
    q = torch.randn(b, hq, 1, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(b, hkv, lkv, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(b, hkv, lkv, d, device="cuda", dtype=torch.bfloat16)
    sinks = torch.randn(hq, device="cuda", dtype=torch.bfloat16) * 2
    keep = (torch.arange(lkv, device="cuda") <= lkv * 3 // 4).view(1, 1, 1, lkv).expand(b, 1, 1, lkv).clone()
    keep[0] = False
    mask = torch.zeros(keep.shape, device="cuda", dtype=torch.bfloat16).masked_fill(~keep, torch.finfo(
        torch.bfloat16).min)
    out = torch.ops.rocm_fused.decode_attention(q, k, v, mask, d ** -0.5, "triton", sinks=sinks)
    assert torch.equal(out[0], torch.zeros_like(out[0]))
    torch.testing.assert_close(out.double(), _gpt_oss64(q, k, v, mask, sinks, d ** -0.5), atol=1.6e-2, rtol=1.6e-2)
    base = torch.ops.rocm_fused.decode_attention(q, k, v, mask, d ** -0.5, "triton")
    none = torch.full_like(sinks, float("-inf"))
    assert torch.equal(torch.ops.rocm_fused.decode_attention(q, k, v, mask, d ** -0.5, "triton", sinks=none), base)


def test_gpt_oss_attention_with_sinks_rewritten_gpu():
    """GPT-OSS's eager attention (transformers' own function) with sinks, bf16 on the GPU: one decode_attention
    with sinks from the Triton provider, within bf16 tolerance of float64."""
    gpt_oss = pytest.importorskip("transformers.models.gpt_oss.modeling_gpt_oss")
    torch.manual_seed(0)
    b, hq, hkv, lkv, d = 4, 16, 2, 256, 64
    module = torch.nn.Module()
    module.num_key_value_groups, module.training = hq // hkv, False
    module.sinks = torch.nn.Parameter(torch.randn(hq, device="cuda", dtype=torch.bfloat16))
    q = torch.randn(b, hq, 1, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(b, hkv, lkv, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(b, hkv, lkv, d, device="cuda", dtype=torch.bfloat16)
    keep = (torch.arange(lkv, device="cuda") <= 200).view(1, 1, 1, lkv)
    mask = torch.zeros(keep.shape, device="cuda", dtype=torch.bfloat16).masked_fill(~keep, torch.finfo(
        torch.bfloat16).min)

    def fn(q, k, v, mask):
        return gpt_oss.eager_attention_forward(module, q, k, v, mask, d ** -0.5)[0]

    out, seen = compile_run(fn, q, k, v, mask, options={"provider": "triton"})
    report = "\n".join(str(c.report) for c in seen)
    assert sum(c.after[OP] for c in seen) == 1, report
    assert any("with sinks" in m.note for c in seen for m in c.report.matches), report
    want = _gpt_oss64(q, k, v, mask, module.sinks.detach(), d ** -0.5).transpose(1, 2)
    torch.testing.assert_close(out.double(), want, atol=1.6e-2, rtol=1.6e-2)
