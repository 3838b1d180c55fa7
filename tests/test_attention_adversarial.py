"""Adversarial inputs for the decode-attention pass found by a fresh-user review (CPU, reference provider)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from graph_utils import assert_contract, compile_run

OP = "rocm_fused.decode_attention.default"


def test_batch_broadcast_kv_inside_the_repeat_expand():
    """A shared-prefix cache (batch 1) broadcast to the batch in the same ``expand`` as the head repeat:
    ``k[:, :, None].expand(B, Hkv, g, L, D).reshape(B, Hq, L, D)`` with ``k`` of batch 1. The repeat must not be
    taken as ``h // g`` over the batch-1 tensor (the op then got k of batch 1 with q of batch 3 and strict
    compiles raised ``ValueError: ... do not agree on batch``); it is a near-miss and matches eager."""

    def fn(q, k, v):
        b, hq = q.shape[:2]
        _, hkv, length, d = k.shape
        g = hq // hkv
        k2 = k[:, :, None].expand(b, hkv, g, length, d).reshape(b, hq, length, d)
        v2 = v[:, :, None].expand(b, hkv, g, length, d).reshape(b, hq, length, d)
        return F.scaled_dot_product_attention(q, k2, v2)

    gen = torch.Generator().manual_seed(0)
    q = torch.randn(3, 8, 1, 16, generator=gen)
    k, v = (torch.randn(1, 2, 24, 16, generator=gen) for _ in range(2))
    out, seen = compile_run(fn, q, k, v)  # strict: a pass error fails the compile
    rep = seen[0].report
    assert rep.error is None
    assert seen[0].after[OP] == 0
    (miss,) = [n for n in rep.near_misses if n.pass_name == "attention"]
    assert "broadcast" in miss.reason, miss.reason
    with torch.no_grad():
        torch.testing.assert_close(out, fn(q, k, v))


def test_math_form_attentions_sharing_one_kv_cache_are_both_rewritten():
    """HF's eager attention (``softmax(q k^T * s + mask) @ v``, kept in the math form because of the mask) run
    twice over one K/V (cross-layer KV sharing, two query sets over one cache). The flattening ``reshape`` of
    the shared K/V (one node after CSE) feeds both attentions' bmm; that is operand preparation, not the
    scores or probabilities, so both attentions are rewritten (they were near-misses "view_1 (attention scores
    / probabilities) is also used by bmm_2 (output_attentions?)")."""

    def eager_attn(q, k, v, m):  # transformers' eager_attention_forward, MHA
        w = torch.matmul(q, k.transpose(2, 3)) * (q.shape[-1] ** -0.5) + m
        w = torch.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
        return torch.matmul(w, v)

    def fn(q1, q2, k, v, m):
        return eager_attn(q1, k, v, m) + eager_attn(q2, k, v, m)

    gen = torch.Generator().manual_seed(0)
    q1, q2 = (torch.randn(2, 8, 2, 16, generator=gen) for _ in range(2))
    k, v = (torch.randn(2, 8, 24, 16, generator=gen) for _ in range(2))
    m = torch.zeros(2, 1, 2, 24)
    m[..., 20:] = torch.finfo(torch.float32).min
    out, seen = compile_run(fn, q1, q2, k, v, m)
    rep = seen[0].report
    assert [n.reason for n in rep.near_misses if n.pass_name == "attention"] == []
    assert seen[0].after[OP] == 2
    with torch.no_grad():
        torch.testing.assert_close(out, fn(q1, q2, k, v, m))


def test_sdpa_dropout_on_cpu_is_a_near_miss():
    """``F.scaled_dot_product_attention(..., dropout_p=0.1)`` (dropout applies whatever the module's mode) reaches
    the CPU post-grad graph as SDPA's math form with a random keep-mask on the probabilities. It is not
    rewritten (the op has no dropout) and, as the pass's docstring promises for dropout, it is reported as a
    near-miss (it was silently skipped: no match, no near-miss)."""

    def fn(q, k, v):
        k, v = (x[:, :, None].expand(2, 2, 4, 24, 16).reshape(2, 8, 24, 16) for x in (k, v))
        return F.scaled_dot_product_attention(q, k, v, dropout_p=0.1)

    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2, 8, 1, 16, generator=gen)
    k, v = (torch.randn(2, 2, 24, 16, generator=gen) for _ in range(2))
    out, seen = compile_run(fn, q, k, v)
    assert seen[0].after[OP] == 0 and out.shape == (2, 8, 1, 16)
    (miss,) = [n for n in seen[0].report.near_misses if n.pass_name == "attention"]
    assert "dropout" in miss.reason, miss.reason


def _attention_misses(seen):
    return [n.reason for n in seen[0].report.near_misses if n.pass_name == "attention"]


def _eager_mqa(q, k, v, m):
    """HF-style eager attention with K/V of one head broadcast over the query heads by ``torch.matmul``."""
    w = torch.matmul(q, k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    if m is not None:
        w = w + m
    w = torch.softmax(w, -1, dtype=torch.float32).to(q.dtype)
    return torch.matmul(w, v)


@pytest.mark.parametrize("masked", [False, True], ids=["no_mask", "additive_mask"])
def test_math_form_mqa_broadcast_by_matmul_is_rewritten(masked):
    """MQA in the math form with K/V of 1 head that ``matmul`` broadcasts (q (B, H, 1, D) @ k (B, 1, L, D)^T),
    no repeat: the bmm operand is ``reshape(clone(expand(k^T)))`` and, without a mask, Inductor's
    ``softmax(x * c)`` pattern rewrites the softmax (scale folded after the row max). Both were neither
    rewritten nor reported; now the op reads the one kv head (GQA 8/1) and the broadcast copy is gone."""
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2, 8, 1, 16, generator=gen)
    k, v = (torch.randn(2, 1, 24, 16, generator=gen) for _ in range(2))
    m = torch.zeros(2, 1, 1, 24).masked_fill(torch.rand(2, 1, 1, 24, generator=gen) > 0.7, float("-inf"))
    fn = lambda q, k, v, m: _eager_mqa(q, k, v, m if masked else None)  # noqa: E731
    out, seen = compile_run(fn, q, k, v, m)
    assert _attention_misses(seen) == []
    assert seen[0].after[OP] == 1 and seen[0].after["aten.bmm.default"] == 0, seen[0].after
    assert seen[0].after["aten.clone.default"] == 0, seen[0].after
    (match,) = [x for x in seen[0].report.matches if x.pass_name == "attention"]
    assert "GQA 8/1=8" in match.note and "math form" in match.note, match.note
    with torch.no_grad():
        torch.testing.assert_close(out, fn(q, k, v, m))


def _masked_fill_attn(q, k, v, m, fill=None, keep_where=False):
    """Eager attention whose mask is applied as ``masked_fill(~m, fill)`` (default ``finfo(dtype).min``, HF
    style) or as ``torch.where(m, scores, fill)`` (GPT-2 style)."""
    w = torch.matmul(q, k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    f = torch.finfo(w.dtype).min if fill is None else fill
    w = torch.where(m, w, torch.full([], f, dtype=w.dtype)) if keep_where else w.masked_fill(~m, f)
    w = torch.softmax(w, -1, dtype=torch.float32).to(q.dtype)
    return torch.matmul(w, v)


def _masked_inputs(dtype):
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2, 8, 1, 16, generator=gen).to(dtype)
    k, v = (torch.randn(2, 8, 24, 16, generator=gen).to(dtype) for _ in range(2))
    m = torch.rand(2, 1, 1, 24, generator=gen) > 0.3
    m[1] = False  # a fully masked row: eager's softmax over finfo.min everywhere is uniform (mean of V)
    return q, k, v, m


@pytest.mark.parametrize("dtype,keep_where", [(torch.float32, False), (torch.bfloat16, False),
                                              (torch.float32, True)], ids=["fp32", "bf16", "fp32_where"])
def test_math_form_masked_fill_finfo_min_is_rewritten_additive(dtype, keep_where):
    """``masked_fill(~m, finfo(dtype).min)`` (and ``where(m, s, finfo.min)``) before the softmax, float32 /
    bfloat16 scores: the fill is at most -2**127, so the op's float32 ``s + where(~m, fill, 0)`` equals eager's
    ``where(~m, fill, s)`` (the fill absorbs any |s| < 2**103): rewritten with that additive mask, and a
    fully masked row stays uniform as in eager (a bool mask would give zeros there). It was silently skipped."""
    q, k, v, m = _masked_inputs(dtype)
    fn = lambda q, k, v, m: _masked_fill_attn(q, k, v, m, keep_where=keep_where)  # noqa: E731
    out, seen = compile_run(fn, q, k, v, m)
    assert _attention_misses(seen) == []
    assert seen[0].after[OP] == 1, seen[0].after
    (match,) = [x for x in seen[0].report.matches if x.pass_name == "attention"]
    assert "mask=additive" in match.note and "finfo.min" in match.note, match.note
    with torch.no_grad():
        eager = fn(q, k, v, m)
        s64 = q.double() @ k.double().transpose(-1, -2) * 0.25  # float64 truth, the same fill value
        s64 = s64.masked_fill(~m, torch.finfo(dtype).min)
        assert_contract(out, eager, torch.softmax(s64, -1) @ v.double())
        torch.testing.assert_close(out[1].float(), v[1].float().mean(1, keepdim=True).expand(8, 1, 16),
                                   atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("dtype,fill", [(torch.float16, None), (torch.float32, -1e4)], ids=["fp16_min", "fp32_1e4"])
def test_math_form_masked_fill_small_finite_fill_is_a_near_miss(dtype, fill):
    """A finite fill that float32 addition does not absorb (float16's finfo.min = -65504, a legacy -1e4): as an
    additive mask a fully masked row would be softmax(s + fill) ~ softmax(s), eager's is uniform; as a bool mask
    it would be zeros. Not rewritten, and reported with that reason (it was silently skipped)."""
    q, k, v, m = _masked_inputs(dtype)
    fn = lambda q, k, v, m: _masked_fill_attn(q, k, v, m, fill=fill)  # noqa: E731
    out, seen = compile_run(fn, q, k, v, m)
    assert seen[0].after[OP] == 0
    (reason,) = _attention_misses(seen)
    assert "fully masked row" in reason and "fill" in reason, reason
    with torch.no_grad():  # Inductor's own code (not rewritten): float16 rounds differently from eager
        torch.testing.assert_close(out, fn(q, k, v, m), atol=1e-3, rtol=1e-2)


def test_math_form_other_exits_are_near_misses():
    """Every math-form candidate (a softmax between two bmms) that is not rewritten is reported: scores scaled by
    a tensor (not a compile-time number) and a softmax spelled ``exp(s) / sum`` (no max subtracted: eager
    overflows where the op would not); a 3D ``torch.bmm`` attention over (B*H, L, D) is rewritten (B*H rows of
    one head, a 2D mask)."""

    def bmm3d(q, k, v, t):
        w = torch.softmax(torch.bmm(q.flatten(0, 1), k.flatten(0, 1).transpose(1, 2)) * 0.25 + t[0, 0], -1)
        return torch.bmm(w, v.flatten(0, 1))

    def tensor_scale(q, k, v, t):
        w = torch.matmul(q, k.transpose(-1, -2)) * t.amax() + t
        return torch.matmul(torch.softmax(w, -1), v)

    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2, 8, 1, 16, generator=gen)
    k, v = (torch.randn(2, 8, 24, 16, generator=gen) for _ in range(2))
    t = torch.zeros(2, 1, 1, 24)
    def exp_sum(q, k, v, t):
        e = torch.exp(torch.matmul(q, k.transpose(-1, -2)) * 0.25 + t)
        return torch.matmul(e / e.sum(-1, keepdim=True), v)

    for fn, word in ((bmm3d, None), (tensor_scale, "scale"), (exp_sum, "spelling")):
        out, seen = compile_run(fn, q, k, v, t)
        if word is None:
            assert seen[0].after[OP] == 1 and not _attention_misses(seen)
            torch.testing.assert_close(out, fn(q, k, v, t), atol=1e-5, rtol=1e-5)
            continue
        assert seen[0].after[OP] == 0
        (reason,) = _attention_misses(seen)
        assert word in reason, reason
        with torch.no_grad():
            torch.testing.assert_close(out, fn(q, k, v, t))
