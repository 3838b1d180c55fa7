"""Decode attention over a static KV cache as model code outside the corpus spells it (issue 32).

Each spelling is ``fn(q, k, v, m)`` on a decode step: q ``(B, Hq, 1, D)``; k, v ``(B, Hkv, L, D)`` (or the
cache's own ``(B, L, Hkv, D)`` layout where the source keeps it, see ``LAYOUT``); ``m`` the step's mask in the
form the source builds it (``MASK``). ``EXPECT`` says what the pass must do: ``"full"`` (one
``rocm_fused::decode_attention``, no bmm left, numerics per docs/ops.md) or ``"near-miss"`` with a phrase of the
reason (the op cannot mean it). Sources are paraphrased from the named files (the attention lines only; the
projections, RoPE and cache writes are left out).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

B, HQ, HKV, L, D = 2, 4, 2, 16, 16


def nanogpt(q, k, v, m):
    """karpathy/nanoGPT model.py CausalSelfAttention (the non-flash branch), minGPT alike: ``(q @ k^T) * (1 /
    sqrt(D))``, ``masked_fill(bias == 0, -inf)`` over a 0/1 float buffer, softmax, ``att @ v`` (MHA)."""
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
    att = att.masked_fill(m == 0, float("-inf"))
    att = F.softmax(att, dim=-1)
    return att @ v


def litgpt_sdpa(q, k, v, m):
    """Lightning-AI/litgpt model.py CausalSelfAttention (query groups): K/V ``(B, G, T, D)`` expanded per group
    ``k[:, :, None].expand(...).reshape(B, Hq, T, D)``, ``F.scaled_dot_product_attention(attn_mask=bool mask,
    dropout_p=0.0, scale=1/sqrt(D))`` (gpt-fast model.py does the same with ``repeat_interleave``)."""
    b, g, t, d = k.shape
    n = q.shape[1] // g
    k = k[:, :, None].expand(b, g, n, t, d).reshape(b, g * n, t, d)
    v = v[:, :, None].expand(b, g, n, t, d).reshape(b, g * n, t, d)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=m, dropout_p=0.0, scale=1.0 / math.sqrt(d))


def gpt2_eager(q, k, v, m):
    """transformers 4.x models/gpt2/modeling_gpt2.py GPT2Attention._attn with ``scale_attn_by_inverse_layer_idx``
    (``/ float(layer_idx + 1)``, here layer 1) and ``scale_attn_weights`` off: ``torch.where(causal_mask, w,
    torch.full([], finfo.min))`` over the bool ``bias`` slice, softmax, ``.type(value.dtype)`` (MHA). (With
    ``scale_attn_weights`` on, the 4.x code divides by ``torch.full([], v.size(-1) ** 0.5)``: plain Inductor on
    torch 2.13 fails to compile that, its joint-graph SDPA pattern passing the 0-d tensor as SDPA's float scale,
    before any pass of ours runs.)"""
    w = torch.matmul(q, k.transpose(-1, -2))
    w = w / float(1 + 1)
    w = torch.where(m, w.to(w.dtype), torch.full([], torch.finfo(w.dtype).min, dtype=w.dtype, device=w.device))
    w = F.softmax(w, dim=-1).type(v.dtype)
    return torch.matmul(w, v)


def bigcode_baddbmm(q, k, v, m):
    """transformers models/gpt_bigcode/modeling_gpt_bigcode.py ``_attn`` (and CodeGen / GPT-NeoX's baddbmm):
    ``baddbmm(empty, q.view(B*H, Lq, D), k^T, beta=0, alpha=1/sqrt(D))`` viewed back to 4D, ``where(mask, s,
    finfo.min)``, softmax, ``matmul(p, v)`` (MHA)."""
    b, h, lq, d = q.shape
    lk = k.shape[2]
    qf = q.reshape(b * h, lq, d)
    kf = k.reshape(b * h, lk, d).transpose(1, 2)
    s = torch.empty(b * h, lq, lk, dtype=q.dtype, device=q.device)
    s = torch.baddbmm(s, qf, kf, beta=0, alpha=1.0 / math.sqrt(d)).view(b, h, lq, lk)
    s = torch.where(m, s, torch.full([], torch.finfo(s.dtype).min, dtype=s.dtype, device=s.device))
    p = F.softmax(s, dim=-1).to(v.dtype)
    return torch.matmul(p, v)


def xtransformers_einsum(q, k, v, m):
    """lucidrains/x-transformers x_transformers.py Attend: ``q = q * scale``, ``einsum('b h i d, b h j d -> b h i
    j')``, ``masked_fill(~mask, -finfo.max)``, softmax, ``einsum('b h i j, b h j d -> b h i d')`` (MHA)."""
    q = q * q.shape[-1] ** -0.5
    sim = torch.einsum("bhid,bhjd->bhij", q, k)
    sim = sim.masked_fill(~m, -torch.finfo(sim.dtype).max)
    attn = sim.softmax(dim=-1)
    return torch.einsum("bhij,bhjd->bhid", attn, v)


def mistral_ref_blhd(q, k, v, m):
    """mistralai/mistral-inference one_file_ref.py Attention: the cache in ``(B, L, Hkv, D)``,
    ``repeat_interleave(repeats, dim=2)`` there, ``transpose(1, 2)``, ``matmul(xq, key.transpose(2, 3)) *
    scale``, ``scores += mask`` (additive ``-inf``), ``softmax(scores.float()).type_as(xq)``. k, v come in
    ``(B, L, Hkv, D)``; q in ``(B, 1, Hq, D)``."""
    g = q.shape[2] // k.shape[2]
    k, v = (torch.repeat_interleave(t, repeats=g, dim=2) for t in (k, v))
    xq, key, val = (t.transpose(1, 2) for t in (q, k, v))
    scores = torch.matmul(xq, key.transpose(2, 3)) * (q.shape[-1] ** -0.5)
    scores = scores + m
    scores = F.softmax(scores.float(), dim=-1).type_as(xq)
    return torch.matmul(scores, val)


def meta_llama_blhd(q, k, v, m):
    """meta-llama/llama model.py Attention: ``repeat_kv`` by ``x[:, :, :, None, :].expand(bs, slen, n_kv, n_rep,
    hd).reshape(bs, slen, n_kv * n_rep, hd)`` on the ``(B, L, Hkv, D)`` cache, ``transpose(1, 2)``, ``/
    math.sqrt(hd)``, ``+ mask``, ``softmax(scores.float(), dim=-1).type_as(xq)``. Layout as mistral_ref_blhd."""
    bs, slen, nkv, hd = k.shape
    n = q.shape[2] // nkv
    keys, values = (t[:, :, :, None, :].expand(bs, slen, nkv, n, hd).reshape(bs, slen, nkv * n, hd)
                    for t in (k, v))
    xq, keys, values = (t.transpose(1, 2) for t in (q, keys, values))
    scores = torch.matmul(xq, keys.transpose(2, 3)) / math.sqrt(hd)
    scores = scores + m
    scores = F.softmax(scores.float(), dim=-1).type_as(xq)
    return torch.matmul(scores, values)


def mpt_pretransposed(q, k, v, m):
    """mosaicml llm-foundry attention.py scaled_multihead_dot_product_attention: k rearranged straight to
    ``b h d s`` from the ``(B, L, H, D)`` cache (``rearrange(key, 'b s (h d) -> b h d s')``: one permute
    (0, 2, 3, 1)), ``q.matmul(k) * softmax_scale``, ``masked_fill(~key_padding_mask, finfo.min)``, softmax,
    ``.to(v.dtype).matmul(v)``. k, v come in ``(B, L, H, D)``; q in ``(B, H, 1, D)``."""
    kt = k.permute(0, 2, 3, 1)
    vv = v.permute(0, 2, 1, 3)
    w = q.matmul(kt) * (1 / math.sqrt(q.shape[-1]))
    w = w.masked_fill(~m, torch.finfo(q.dtype).min)
    w = torch.softmax(w, dim=-1)
    return w.to(vv.dtype).matmul(vv)


def falcon_float_mask(q, k, v, m):
    """transformers models/falcon/modeling_falcon.py FalconAttention (eager): ``q @ k^T``, ``/= sqrt(D)``,
    ``F.softmax(scores + mask, dim=-1, dtype=hidden_states.dtype)``, ``@ v``; the mask additive ``-inf``."""
    s = q @ k.transpose(-1, -2)
    s = s / math.sqrt(q.shape[-1])
    p = F.softmax(s + m, dim=-1, dtype=q.dtype)
    return p @ v


def deepseek_v3_mla(q, k, v, m):
    """deepseek-ai/DeepSeek-V3 inference/model.py MLA (attn_impl "absorb"): scores ``(einsum("bshc,btc->bsht",
    q_nope, kv_cache) + einsum("bshr,btr->bsht", q_pe, pe_cache)) * scale``: two products, a near-miss. Here
    q_nope = q, q_pe = q[..., :4], kv_cache = k[:, 0], pe_cache = k[:, 0, :, :4], v = kv_cache (absorbed)."""
    qn, qp = q.transpose(1, 2), q.transpose(1, 2)[..., :4]  # (B, 1, H, D)
    kv, pe = k[:, 0], k[:, 0, :, :4]  # (B, L, D), (B, L, 4)
    s = (torch.einsum("bshc,btc->bsht", qn, kv) + torch.einsum("bshr,btr->bsht", qp, pe)) * 0.25
    s = s + m.reshape(m.shape[0], 1, 1, -1)
    s = s.softmax(dim=-1, dtype=torch.float32).type_as(q)
    return torch.einsum("bsht,btc->bshc", s, kv)


def gemma2_softcap(q, k, v, m):
    """transformers models/gemma2/modeling_gemma2.py eager_attention_forward with attn_logit_softcapping:
    ``w = w / softcap; w = tanh(w); w = w * softcap`` before the mask: the op's ``softcap``."""
    w = torch.matmul(q, k.transpose(2, 3)) * q.shape[-1] ** -0.5
    w = torch.tanh(w / 50.0) * 50.0
    w = w + m
    w = F.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
    return torch.matmul(w, v)


def whisper_3d_bmm(q, k, v, m):
    """openai/whisper-style / fairseq multihead attention on ``(B*H, L, D)`` tensors: ``q.reshape(B*H, Lq, D) *
    scale``, ``torch.bmm(q, k.transpose(1, 2))``, ``+ mask`` (additive), softmax(float).type_as, ``torch.bmm(p,
    v)``, viewed back to ``(B, H, Lq, D)``."""
    b, h, lq, d = q.shape
    lk = k.shape[2]
    qf = q.reshape(b * h, lq, d) * d ** -0.5
    kf, vf = k.reshape(b * h, lk, d), v.reshape(b * h, lk, d)
    s = torch.bmm(qf, kf.transpose(1, 2))
    s = s + m.reshape(b * h, 1, lk)
    p = F.softmax(s.float(), dim=-1).type_as(s)
    return torch.bmm(p, vf).view(b, h, lq, d)


#: name -> (fn, the KV layout ``"bhld"`` | ``"blhd"``, mask kind, GQA heads, expectation, reason phrase).
SPELLINGS = {
    "nanogpt": (nanogpt, "bhld", "float01", HQ, "full", None),
    "litgpt_sdpa": (litgpt_sdpa, "bhld", "bool", HKV, "full", None),
    "gpt2_eager": (gpt2_eager, "bhld", "bool", HQ, "full", None),
    "bigcode_baddbmm": (bigcode_baddbmm, "bhld", "bool", HQ, "full", None),
    "xtransformers_einsum": (xtransformers_einsum, "bhld", "bool", HQ, "full", None),
    "mistral_ref_blhd": (mistral_ref_blhd, "blhd", "additive", HKV, "full", None),
    "meta_llama_blhd": (meta_llama_blhd, "blhd", "additive", HKV, "full", None),
    "mpt_pretransposed": (mpt_pretransposed, "blhd", "bool", HQ, "full", None),
    "falcon_float_mask": (falcon_float_mask, "bhld", "additive", HQ, "full", None),
    "whisper_3d_bmm": (whisper_3d_bmm, "bhld", "additive_bh", HQ, "full", None),
    "deepseek_v3_mla": (deepseek_v3_mla, "bhld", "additive_flat", HQ, "near-miss", "sum of two products"),
    "gemma2_softcap": (gemma2_softcap, "bhld", "additive", HQ, "full", None),
}

#: the score scale where it is not 1/sqrt(D)
SCALE = {"gpt2_eager": 0.5}
#: the logit soft cap where the spelling has one
SOFTCAP = {"gemma2_softcap": 50.0}


def inputs(name: str, dtype: torch.dtype = torch.float32, seed: int = 0) -> tuple:
    """``(q, k, v, m, keep)`` for spelling ``name``: q/k/v in its layout, the mask in its kind, and the bool
    ``keep`` ``(B, 1, 1, L)`` (True = attend) the float64 reference uses."""
    _, layout, mask_kind, hkv, _, _ = SPELLINGS[name]
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, HQ, 1, D, generator=gen).to(dtype)
    k = torch.randn(B, hkv, L, D, generator=gen).to(dtype)
    v = torch.randn(B, hkv, L, D, generator=gen).to(dtype)
    keep = torch.rand(B, 1, 1, L, generator=gen) > 0.3
    keep[..., 0] = True
    if mask_kind == "bool":
        m = keep
    elif mask_kind == "float01":
        m = keep.to(dtype)
    else:
        m = torch.zeros(B, 1, 1, L, dtype=dtype).masked_fill(~keep, float("-inf"))
        if mask_kind == "additive_bh":
            m = m.expand(B, HQ, 1, L).contiguous()
        elif mask_kind == "additive_flat":
            m = m.reshape(B, L)
    if layout == "blhd":
        k, v = k.transpose(1, 2).contiguous(), v.transpose(1, 2).contiguous()
        if name != "mpt_pretransposed":
            q = q.transpose(1, 2).contiguous()
    return q, k, v, m, keep


def reference64(name: str, q, k, v, keep) -> torch.Tensor:
    """float64 decode attention of spelling ``name``'s inputs, in the spelling's output layout."""
    _, layout, _, _, _, _ = SPELLINGS[name]
    if layout == "blhd":
        k, v = k.transpose(1, 2), v.transpose(1, 2)
        if name != "mpt_pretransposed":
            q = q.transpose(1, 2)
    g = q.shape[1] // k.shape[1]
    kd, vd = (t.double().repeat_interleave(g, dim=1) for t in (k, v))
    s = (q.double() @ kd.transpose(-1, -2)) * SCALE.get(name, 1 / math.sqrt(q.shape[-1]))
    if name in SOFTCAP:
        s = torch.tanh(s / SOFTCAP[name]) * SOFTCAP[name]
    p = torch.softmax(s.masked_fill(~keep, float("-inf")), -1)
    return p @ vd
