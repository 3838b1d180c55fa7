"""qkv_rope_kv (``passes/qkv_rope_kv.py``, ``rocm_fused::qkv_rope_kv``) against model code its first tests did not
cover.

Each case compiles a small attention prologue (a q/k/v projection, its head split, a RoPE and the K/V cache writes,
then an attention that reads the caches) through the real backend on CPU with the reference provider, strict: the
output and both caches must equal eager's, and the report must say whether the fold happened (and, where it must
not, a near-miss with its reason). Two families: separate q/k/v projections (``gemm_merge`` / ``norm_gemm`` write a
``merged_gemm`` / ``rms_norm_gemm``) and one fused ``wqkv`` projection split after (ATen ``mm`` / ``addmm``, or a
one-weight ``rms_norm_gemm`` behind a norm). The last tests pin two bugs found here and fixed: an ``addmm`` whose
``alpha`` / ``beta`` the fold dropped (wrong outputs and caches), and an ``addmm`` bias of another shape than ``(N,)``
(the pass raised instead of missing); both are near-misses now, with gemm_merge's reason (``Gemm.why_not``).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import rocm_inductor

PASSES = {"rope_kv": True, "gemm_merge": True, "norm_gemm": True, "qkv_rope_kv": True}
OPTS = {"provider": "reference", "passes": PASSES, "strict": True}
D = 16  # head_dim
K = 64  # hidden


def _rot(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def _rms(s, g, offset=0.0):
    y = s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + 1e-6)
    return y if g is None else y * (offset + g)


def _rope(t, cos, sin, rd=D, interleaved=False):
    """HF's rotate-half RoPE (``interleaved``: GPT-J's pairs) of the first ``rd`` dims of ``t`` (partial rotary)."""
    tr, tp = t[..., :rd], t[..., rd:]
    if interleaved:
        c, s = cos[..., : rd // 2].repeat_interleave(2, -1), sin[..., : rd // 2].repeat_interleave(2, -1)
        out = tr * c + torch.stack((-tr[..., 1::2], tr[..., ::2]), -1).flatten(-2) * s
    else:
        out = tr * cos[..., :rd] + _rot(tr) * sin[..., :rd]
    return torch.cat((out, tp), -1) if rd < t.shape[-1] else out


def _attend(q, kc, vc):
    rep = q.shape[1] // kc.shape[1]
    kr, vr = kc.repeat_interleave(rep, 1), vc.repeat_interleave(rep, 1)
    return torch.softmax(q @ kr.transpose(-1, -2) * 0.25, -1) @ vr


def _tables(b, s, g, dtype):
    return [torch.randn(b, 1, s, D, generator=g).to(dtype) for _ in range(2)]


def _caches(b, hkv, dtype, max_len=8):
    return [torch.zeros(b, hkv, max_len, D, dtype=dtype) for _ in range(2)]


def _run(fn, args, caches, opts=OPTS, rtol=1e-5, atol=1e-5):
    """Eager vs compiled (clones of ``args``): the output and the caches at ``caches`` (indices) close; the
    reports."""
    ea = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    ca = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    rocm_inductor.clear_reports()
    torch._dynamo.reset()
    with torch.no_grad(), torch._inductor.config.patch(force_disable_caches=True):
        ref = fn(*ea)
        out = torch.compile(fn, backend="rocm_fused", options=opts, fullgraph=True)(*ca)
    torch.testing.assert_close(out, ref, rtol=rtol, atol=atol)
    for i in caches:
        torch.testing.assert_close(ca[i], ea[i], rtol=rtol, atol=atol)
    return rocm_inductor.reports(), out, [ca[i] for i in caches]


def _misses(rep):
    return [m.reason for m in rep.near_misses if m.pass_name == "qkv_rope_kv"]


def _folded(rep):
    assert all(r.error is None for r in rep), [r.error for r in rep]
    assert rep.count("qkv_rope_kv") == 1 and rep.count("rope_kv_write") == 1, str(rep)
    assert not _misses(rep), str(rep)


def _not_folded(rep, reason):
    assert all(r.error is None for r in rep), [r.error for r in rep]
    assert rep.count("qkv_rope_kv") == 0 and rep.count("rope_kv_write") == 1, str(rep)
    misses = _misses(rep)
    assert len(misses) == 1 and reason in misses[0], misses


# -- separate q/k/v projections (merged_gemm / rms_norm_gemm) ----------------------------------------------------

def _sep_inputs(b=2, s=1, hq=4, hkv=2, bias="", dtype=torch.float32):
    """x, residual, norm weight, w_q, w_k, w_v, b_q, b_k, b_v (``bias``: the letters that have one), cos, sin,
    k_cache, v_cache, positions."""
    g = torch.Generator().manual_seed(0)
    x, res = (torch.randn(b, s, K, generator=g).to(dtype) for _ in range(2))
    gw = (torch.rand(K, generator=g) + 0.5).to(dtype)
    ns = {"q": hq * D, "k": hkv * D, "v": hkv * D}
    ws = [(torch.randn(ns[n], K, generator=g) / 8).to(dtype) for n in "qkv"]
    bs = [torch.randn(ns[n], generator=g).to(dtype) if n in bias else None for n in "qkv"]
    return [x, res, gw, *ws, *bs, *_tables(b, s, g, dtype), *_caches(b, hkv, dtype), torch.arange(3, 3 + s)]


SEP_CACHES = [11, 12]


def _sep_layer(order="qkv", split="view", rd=D, interleaved=False, offset=0.0, q_heads=None, contiguous=False,
               sum_before=False, leak=None):
    """A decoder layer's attention with separate q/k/v projections of one normed input, built by the spelling
    knobs: projection ``order``, the head ``split`` (``view(B, S, -1, D)`` / ``reshape(B, -1, H, D)`` / ``unflatten``
    / ``permute``), partial / interleaved RoPE, Gemma's ``(offset + w)``, only heads ``q_heads`` of q attended,
    ``.contiguous()`` heads, the residual sum read by the cos table (before the write), a projection read again."""

    def layer(x, res, gw, wq, wk, wv, bq, bk, bv, cos, sin, kc, vc, pos):
        b, s_, _ = x.shape
        s = x + res
        y = _rms(s, gw, offset)
        w = {"q": (wq, bq), "k": (wk, bk), "v": (wv, bv)}
        proj = {n: F.linear(y, *w[n]) for n in order}

        def heads(t):
            if split == "view":
                t = t.view(b, s_, -1, D).transpose(1, 2)
            elif split == "reshape":
                t = t.reshape(b, -1, t.shape[-1] // D, D).transpose(1, 2)
            elif split == "unflatten":
                t = t.unflatten(-1, (-1, D)).transpose(1, 2)
            else:
                t = t.view(b, s_, -1, D).permute(0, 2, 1, 3)
            return t.contiguous() if contiguous else t

        q, k, v = (heads(proj[n]) for n in "qkv")
        if q_heads is not None:
            q = q[:, q_heads]
        if sum_before:
            cos = cos * torch.sigmoid(s.mean())
        q, k = _rope(q, cos, sin, rd, interleaved), _rope(k, cos, sin, rd, interleaved)
        kc.index_copy_(2, pos, k)
        vc.index_copy_(2, pos, v)
        o = _attend(q, kc, vc).transpose(1, 2).reshape(b, s_, -1)
        out = F.pad(o, (0, K - o.shape[-1])) + s
        return out + proj[leak].sum(-1, keepdim=True) if leak else out

    return layer


@pytest.mark.parametrize("layer, inputs", [
    pytest.param(_sep_layer(order="vkq"), {"b": 3, "s": 2, "bias": "qkv"}, id="v_k_q_order_qwen2_bias_B3_S2"),
    pytest.param(_sep_layer(order="kqv"), {"bias": "qv"}, id="k_first_whisper_bias_q_v_only"),
    pytest.param(_sep_layer(split="reshape"), {"b": 3, "s": 2}, id="reshape_B_minus1_H_D_B3_S2"),
    pytest.param(_sep_layer(split="unflatten"), {"b": 1, "s": 2, "hq": 4, "hkv": 1}, id="unflatten_mqa_B1_S2"),
    pytest.param(_sep_layer(split="permute", rd=8), {"s": 2}, id="permute_partial_rotary_S2"),
    pytest.param(_sep_layer(rd=8, interleaved=True), {"hq": 2, "hkv": 2}, id="gptj_interleaved_partial_mha"),
    pytest.param(_sep_layer(offset=1.0), {"s": 2}, id="gemma_offset_norm_S2"),
    pytest.param(_sep_layer(q_heads=slice(1, 3)), {"s": 2}, id="q_heads_subset_weight_rows_sliced"),
    pytest.param(_sep_layer(contiguous=True), {"b": 3}, id="contiguous_at_S1_is_a_no_op"),
])
def test_separate_projections_fold(layer, inputs):
    """Spellings of one fold: every one taken, outputs and caches equal to eager's."""
    rep, _, _ = _run(layer, _sep_inputs(**inputs), SEP_CACHES)
    _folded(rep)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_fold_is_bitwise_the_unfolded_ops(dtype):
    """On the reference provider the op is the two ops' composition: outputs and caches equal, bit for bit, to the
    same compile with qkv_rope_kv off (eager differs by the RoPE's single rounding: loose tolerance)."""
    layer, args = _sep_layer(), _sep_inputs(s=2, bias="qkv", dtype=dtype)
    rep, out, caches = _run(layer, args, SEP_CACHES, rtol=5e-2, atol=5e-2)
    _folded(rep)
    off = {**OPTS, "passes": {**PASSES, "qkv_rope_kv": False}}
    rep_off, out_off, caches_off = _run(layer, args, SEP_CACHES, opts=off, rtol=5e-2, atol=5e-2)
    assert rep_off.count("qkv_rope_kv") == 0 and rep_off.count("rope_kv_write") == 1, str(rep_off)
    assert torch.equal(out, out_off) and all(torch.equal(a, b) for a, b in zip(caches, caches_off))


@pytest.mark.parametrize("layer, inputs, reason", [
    pytest.param(_sep_layer(contiguous=True), {"s": 2}, "q is not a view or slice of a q/k/v GEMM output",
                 id="contiguous_heads_S2"),
    pytest.param(_sep_layer(sum_before=True), {}, "the residual sum is read before the RoPE + cache write",
                 id="residual_sum_read_before_the_write"),
    pytest.param(_sep_layer(leak="v"), {"s": 2}, "the v projection is also read by", id="v_projection_read_again"),
    pytest.param(_sep_layer(leak="q"), {}, "the q projection is also read by", id="q_projection_used_twice"),
])
def test_separate_projections_near_miss(layer, inputs, reason):
    rep, _, _ = _run(layer, _sep_inputs(**inputs), SEP_CACHES)
    _not_folded(rep, reason)


def test_parallel_attention_and_mlp_share_the_gemm_is_a_near_miss():
    """GPT-J / Phi-2's parallel block: the MLP's up projection reads the same norm, so gemm_merge merges four
    weights; the fourth output is read by the MLP (the op never stores it)."""

    def layer(x, res, gw, wq, wk, wv, bq, bk, bv, cos, sin, kc, vc, pos):
        b, s_, _ = x.shape
        s = x + res
        y = _rms(s, gw)
        q, k, v = (t.view(b, s_, -1, D).transpose(1, 2) for t in (y @ wq.t(), y @ wk.t(), y @ wv.t()))
        mlp = torch.relu(y @ (wq * 0.5).t())
        q, k = _rope(q, cos, sin), _rope(k, cos, sin)
        kc.index_copy_(2, pos, k)
        vc.index_copy_(2, pos, v)
        return _attend(q, kc, vc).transpose(1, 2).reshape(b, s_, -1) + s + mlp

    rep, _, _ = _run(layer, _sep_inputs(s=2), SEP_CACHES)
    _not_folded(rep, "the GEMM's outputs are also read by")


# -- one fused wqkv projection, split after (ATen mm / addmm) -----------------------------------------------------

def _fused_inputs(b=2, s=1, hq=4, hkv=2, pad=0, bias=True, dtype=torch.float32):
    """x, w_qkv ((hq + 2 hkv) * D + pad, K), its bias, cos, sin, k_cache, v_cache, positions."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(b, s, K, generator=g).to(dtype)
    n = (hq + 2 * hkv) * D + pad
    w = (torch.randn(n, K, generator=g) / 8).to(dtype)
    bb = torch.randn(n, generator=g).to(dtype) if bias else None
    return [x, w, bb, *_tables(b, s, g, dtype), *_caches(b, hkv, dtype), torch.arange(3, 3 + s)]


FUSED_CACHES = [5, 6]


def _fused_layer(spelling="split", order="qkv", hq=4, hkv=2, weight=None, index_put=False, seq_first=False,
                 gate=False, addmm=None):
    """gpt-fast / Phi-3 style: ``F.linear(x, w_qkv, b)`` (or ``addmm(b, x, w.T, beta=, alpha=)``: ``addmm``) split
    into q/k/v by ``split`` / slicing / ``chunk`` in ``order``; ``weight``: a function computing the weight;
    ``index_put``: gpt-fast's ``cache[:, :, pos] = k``; ``seq_first``: x is (S, B, K); ``gate``: the last chunk of
    the projection (beyond q/k/v) gates the output."""

    def layer(x, w, bb, cos, sin, kc, vc, pos):
        b, s_, _ = x.shape
        if weight is not None:
            w = weight(w)
        if addmm is not None:
            qkv = torch.addmm(bb, x.reshape(-1, K), w.t(), beta=addmm[0], alpha=addmm[1]).view(b, s_, -1)
        else:
            qkv = F.linear(x, w, bb)
        sizes = {"q": hq * D, "k": hkv * D, "v": hkv * D}
        widths = [sizes[n] for n in order]
        rest = qkv.shape[-1] - sum(widths)
        if spelling == "split":
            parts = qkv.split(widths + ([rest] if rest else []), dim=-1)
        elif spelling == "chunk":
            parts = qkv.chunk(3, dim=-1)
        else:
            offs = [sum(widths[:i]) for i in range(4)]
            parts = [qkv[..., offs[i]:offs[i + 1]] for i in range(3)] + [qkv[..., offs[3]:]]
        p = dict(zip(order, parts))
        if seq_first:
            q, k, v = (p[n].view(b, s_, -1, D).permute(1, 2, 0, 3) for n in "qkv")
        else:
            q, k, v = (p[n].view(b, s_, -1, D).transpose(1, 2) for n in "qkv")
        q, k = _rope(q, cos, sin), _rope(k, cos, sin)
        if index_put:
            kc[:, :, pos] = k
            vc[:, :, pos] = v
        else:
            kc.index_copy_(2, pos, k)
            vc.index_copy_(2, pos, v)
        o = _attend(q, kc, vc).transpose(1, 2)
        o = o.reshape(o.shape[0], o.shape[1], -1)
        return o * torch.sigmoid(parts[-1]) if gate else o

    return layer


def _falcon_mqa(x, w, bb, cos, sin, kc, vc, pos):
    """Falcon-7B's multi-query split: ``qkv.view(B, S, H + 2, D)``, q the first H heads, k and v one head each."""
    b, s_, _ = x.shape
    qkv = F.linear(x, w, bb).view(b, s_, -1, D)
    q, k, v = (t.transpose(1, 2) for t in (qkv[:, :, :-2], qkv[:, :, -2:-1], qkv[:, :, -1:]))
    q, k = _rope(q, cos, sin), _rope(k, cos, sin)
    kc.index_copy_(2, pos, k)
    vc.index_copy_(2, pos, v)
    return _attend(q, kc, vc)


@pytest.mark.parametrize("layer, inputs", [
    pytest.param(_fused_layer(), {}, id="split_with_bias"),
    pytest.param(_fused_layer("slice", order="vkq"), {"s": 2}, id="slices_v_k_q_order_S2"),
    pytest.param(_fused_layer("chunk", hq=2, hkv=2), {"b": 3, "hq": 2, "hkv": 2}, id="chunk3_mha_B3"),
    pytest.param(_fused_layer(), {"pad": 16}, id="padded_wqkv_rows_unused"),
    pytest.param(_fused_layer(weight=lambda w: w * 0.5 + 0.01), {"s": 2, "bias": False}, id="computed_weight_S2"),
    pytest.param(_falcon_mqa, {"hq": 4, "hkv": 1}, id="falcon_mqa_head_slices"),
])
def test_fused_wqkv_folds(layer, inputs):
    rep, _, _ = _run(layer, _fused_inputs(**inputs), FUSED_CACHES)
    _folded(rep)


def test_fused_wqkv_int32_positions_index_put():
    """gpt-fast's ``cache[:, :, pos] = k`` with int32 positions (index_copy_ takes int64 only)."""
    args = _fused_inputs(s=2)
    args[7] = args[7].int()
    rep, _, _ = _run(_fused_layer(index_put=True), args, FUSED_CACHES)
    _folded(rep)


def test_norm_then_fused_wqkv_phi3():
    """Phi-3: add + RMSNorm, one fused qkv_proj, slices; the residual sum read after the write by the output. The
    reference leaves a single GEMM to ATen (gemm_merge: nothing measured), so norm_gemm has no merged_gemm to fold
    and the op takes the ``mm`` of the norm's output."""

    def layer(x, res, gw, w, cos, sin, kc, vc, pos):
        b, s_, _ = x.shape
        s = x + res
        qkv = F.linear(_rms(s, gw), w)
        q, k, v = (t.view(b, s_, -1, D).transpose(1, 2) for t in (qkv[..., :64], qkv[..., 64:96], qkv[..., 96:]))
        q, k = _rope(q, cos, sin), _rope(k, cos, sin)
        kc.index_copy_(2, pos, k)
        vc.index_copy_(2, pos, v)
        return _attend(q, kc, vc).transpose(1, 2).reshape(b, s_, -1) + s

    x, w, _, cos, sin, kc, vc, pos = _fused_inputs(s=2)
    g = torch.Generator().manual_seed(2)
    args = [x, torch.randn(x.shape, generator=g), torch.rand(K, generator=g) + 0.5, w, cos, sin, kc, vc, pos]
    rep, _, _ = _run(layer, args, [6, 7])
    _folded(rep)
    assert rep.count("fused_add_rms_norm") == 1, str(rep)


def _neox(x, w, bb, cos, sin, kc, vc, pos):
    """GPT-NeoX's per-head interleaved layout: ``qkv.view(B, S, H, 3 * D)``, q / k / v each D of a head's 3 D."""
    b, s_, _ = x.shape
    qkv = F.linear(x, w, bb).view(b, s_, 2, 3 * D)
    q, k, v = (t.permute(0, 2, 1, 3) for t in (qkv[..., :D], qkv[..., D:2 * D], qkv[..., 2 * D:]))
    q, k = _rope(q, cos, sin), _rope(k, cos, sin)
    kc.index_copy_(2, pos, k)
    vc.index_copy_(2, pos, v)
    return _attend(q, kc, vc)


@pytest.mark.parametrize("layer, inputs, reason", [
    pytest.param(_fused_layer(seq_first=True), {"s": 2}, "is not the (B*S, H*D) projection split into",
                 id="seq_first_S2_B2"),
    pytest.param(_neox, {"hq": 2, "hkv": 2}, "is not the (B*S, H*D) projection split into", id="neox_per_head_qkv"),
    pytest.param(_fused_layer(gate=True), {"pad": 64}, "the q projection is also read by",
                 id="extra_gate_chunk_read_elsewhere"),
])
def test_fused_wqkv_near_miss(layer, inputs, reason):
    rep, _, _ = _run(layer, _fused_inputs(**inputs), FUSED_CACHES)
    _not_folded(rep, reason)


# -- bugs found here, fixed ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("beta_alpha", [(1.0, 0.5), (0.0, 1.0)], ids=["alpha_half", "beta_zero"])
def test_addmm_alpha_beta_is_not_folded(beta_alpha):
    """``torch.addmm(b, x, w.T, beta=, alpha=)``: the op computes ``x @ w.T + b`` only (it folded and dropped them)."""
    rep, _, _ = _run(_fused_layer(addmm=beta_alpha), _fused_inputs(s=2), FUSED_CACHES)
    _not_folded(rep, "merged_gemm computes x @ w.T + bias (beta = alpha = 1)")


def _addmm_bias(kind):
    def layer(x, w, bb, cos, sin, kc, vc, pos):
        b, s_, _ = x.shape
        x2 = x.reshape(-1, K)
        bias = bb.view(1, -1) if kind == "row" else bb[0]
        q, k, v = torch.addmm(bias, x2, w.t()).view(b, s_, -1).split([64, 32, 32], -1)
        q, k, v = (t.view(b, s_, -1, D).transpose(1, 2) for t in (q, k, v))
        q, k = _rope(q, cos, sin), _rope(k, cos, sin)
        kc.index_copy_(2, pos, k)
        vc.index_copy_(2, pos, v)
        return _attend(q, kc, vc)

    return layer


@pytest.mark.parametrize("kind", ["row", "scalar"])
def test_addmm_broadcast_bias_is_a_near_miss(kind):
    """A (1, N) or 0-d addmm bias (it raised in emit / gate, failing a strict compile)."""
    rep, _, _ = _run(_addmm_bias(kind), _fused_inputs(), FUSED_CACHES)
    _not_folded(rep, "merged_gemm takes a bias of shape (N,)")


@pytest.mark.parametrize("kind", ["row", "scalar"])
def test_addmm_broadcast_bias_non_strict_still_compiles(kind):
    """strict=False: a near-miss, no error, the other rewrites kept, eager's numbers."""
    rep, _, _ = _run(_addmm_bias(kind), _fused_inputs(), FUSED_CACHES, opts={**OPTS, "strict": False})
    assert rep.count("qkv_rope_kv") == 0 and all(r.error is None for r in rep), [r.error for r in rep]
    assert rep.count("rope_kv_write") == 1, str(rep)
