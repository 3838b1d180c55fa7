"""RoPE as real model code spells it (docs/spellings.md, RoPE 1-5), for the pass tests."""

from __future__ import annotations

import torch


def rotate_half(x):
    """HF ``rotate_half`` (NeoX)."""
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rotate_every_two(x):
    """HF GPT-J ``rotate_every_two``."""
    x1 = x[..., ::2]
    x2 = x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def hf_rope(q, k, cos, sin, unsqueeze_dim=1):
    """Spelling 1: HF Llama ``apply_rotary_pos_emb`` (cos/sin (b, s, d))."""
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def upcast_rope(q, k, cos, sin, unsqueeze_dim=1):
    """Spelling 2: OLMo/Cohere style: compute in float32, cast back."""
    dt = q.dtype
    q, k = q.float(), k.float()
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return (q * cos + rotate_half(q) * sin).to(dt), (k * cos + rotate_half(k) * sin).to(dt)


def partial_rope(q, k, cos, sin, unsqueeze_dim=1):
    """Spelling 3: GPT-NeoX / Phi-3 partial rotary (rotary_dim = cos.shape[-1])."""
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    rd = cos.shape[-1]
    q_rot, q_pass = q[..., :rd], q[..., rd:]
    k_rot, k_pass = k[..., :rd], k[..., rd:]
    q_embed = q_rot * cos + rotate_half(q_rot) * sin
    k_embed = k_rot * cos + rotate_half(k_rot) * sin
    return torch.cat([q_embed, q_pass], dim=-1), torch.cat([k_embed, k_pass], dim=-1)


def gptj_rope(q, k, sin, cos):
    """Spelling 4: HF GPT-J, (b, s, h, d) layout, tables (b, s, d/2) repeat_interleave'd."""
    sin = torch.repeat_interleave(sin[:, :, None, :], 2, 3)
    cos = torch.repeat_interleave(cos[:, :, None, :], 2, 3)
    return q * cos + rotate_every_two(q) * sin, k * cos + rotate_every_two(k) * sin


def complex_rope(q, k, freqs_cis):
    """Spelling 5: Meta Llama ``apply_rotary_emb`` ((b, s, h, d), freqs_cis (s, d/2) complex64)."""
    qc = torch.view_as_complex(q.float().reshape(*q.shape[:-1], -1, 2))
    kc = torch.view_as_complex(k.float().reshape(*k.shape[:-1], -1, 2))
    f = freqs_cis.view(1, qc.shape[1], 1, qc.shape[-1])
    return torch.view_as_real(qc * f).flatten(3).type_as(q), torch.view_as_real(kc * f).flatten(3).type_as(k)


def hf_tables(b, s, rd, dtype, theta=10000.0, scaling=1.0, offset=0):
    """HF ``LlamaRotaryEmbedding.forward``: (cos, sin) of shape (b, s, rd) in ``dtype``."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, rd, 2, dtype=torch.int64).float() / rd))
    pos = torch.arange(offset, offset + s)[None].expand(b, s)
    freqs = (inv_freq[None, :, None].float().expand(b, -1, 1) @ pos[:, None, :].float()).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return (emb.cos() * scaling).to(dtype), (emb.sin() * scaling).to(dtype)


# -- spellings outside the fast path, found by discovery + verification (issue 15) -------------------------
# Each takes (q, k, cos, sin) with q, k (b, h, s, d) and cos/sin as the function says; each names its source.
def gpt_oss_rope(q, k, cos, sin):
    """transformers GPT-OSS ``_apply_rotary_emb``: chunk into halves, cat of two linear combinations.
    cos/sin (b, s, d/2), unsqueezed at dim 1."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)

    def one(x):
        first_half, second_half = torch.chunk(x, 2, dim=-1)
        first_ = first_half * cos - second_half * sin
        second_ = second_half * cos + first_half * sin
        return torch.cat((first_, second_), dim=-1)

    return one(q), one(k)


def _vllm_apply_rotary_emb_torch(x, cos, sin, is_neox_style):
    """vLLM ``rotary_embedding/common.py`` ``_apply_rotary_emb_torch`` (forward_native's core)."""
    cos = cos.unsqueeze(-2).to(x.dtype)
    sin = sin.unsqueeze(-2).to(x.dtype)
    if is_neox_style:
        x1, x2 = torch.chunk(x, 2, dim=-1)
    else:
        x1 = x[..., ::2]
        x2 = x[..., 1::2]
    o1 = x1 * cos - x2 * sin
    o2 = x2 * cos + x1 * sin
    if is_neox_style:
        return torch.cat((o1, o2), dim=-1)
    return torch.stack((o1, o2), dim=-1).flatten(-2)


def vllm_forward_native(is_neox_style, rotary_dim=None):
    """vLLM ``RotaryEmbedding.forward_native``: cos_sin_cache.index_select(positions), chunk into cos | sin,
    query viewed (tokens, heads, head_size), rotary part rotated, pass part concatenated back.
    Takes (positions (T,), query (T, Hq*D), key (T, Hk*D), cos_sin_cache (max_pos, rd)), head_size D."""

    def fn(positions, query, key, cos_sin_cache, head_size=16):
        rd = rotary_dim or head_size
        cos_sin = cos_sin_cache.index_select(0, positions)
        cos, sin = cos_sin.chunk(2, dim=-1)
        out = []
        for x in (query, key):
            shape = x.shape
            x = x.view(positions.shape[0], -1, head_size)
            x_rot = x[..., :rd]
            x_pass = x[..., rd:]
            x_rot = _vllm_apply_rotary_emb_torch(x_rot, cos, sin, is_neox_style)
            out.append(torch.cat((x_rot, x_pass), dim=-1).reshape(shape))
        return tuple(out)

    return fn


def gpt_fast_rope(q, k, freqs_cis):
    """gpt-fast ``model.py`` ``apply_rotary_emb``: pairs of x, a table storing cos and sin interleaved
    ((s, d/2, 2), ``torch.stack([freqs_cis.real, freqs_cis.imag], -1)``); q, k (b, s, h, d)."""

    def one(x):
        xshaped = x.float().reshape(*x.shape[:-1], -1, 2)
        f = freqs_cis.view(1, xshaped.size(1), 1, xshaped.size(3), 2)
        x_out2 = torch.stack(
            [
                xshaped[..., 0] * f[..., 0] - xshaped[..., 1] * f[..., 1],
                xshaped[..., 1] * f[..., 0] + xshaped[..., 0] * f[..., 1],
            ],
            -1,
        )
        return x_out2.flatten(3).type_as(x)

    return one(q), one(k)


def chatglm_rope(q, k, rope_cache):
    """THUDM ChatGLM2/3 ``apply_rotary_pos_emb``: x (sq, b, np, hn), partial rotary (rot_dim = 2 * the cache's
    second-last dim), cache (sq, b, rot_dim / 2, 2) storing cos and sin interleaved."""

    def one(x):
        sq, np_ = x.size(0), x.size(2)
        rot_dim = rope_cache.shape[-2] * 2
        x, x_pass = x[..., :rot_dim], x[..., rot_dim:]
        rc = rope_cache[:sq]
        xshaped = x.reshape(sq, -1, np_, rot_dim // 2, 2)
        rc = rc.view(sq, -1, 1, xshaped.size(3), 2)
        x_out2 = torch.stack(
            [
                xshaped[..., 0] * rc[..., 0] - xshaped[..., 1] * rc[..., 1],
                xshaped[..., 1] * rc[..., 0] + xshaped[..., 0] * rc[..., 1],
            ],
            -1,
        )
        x_out2 = x_out2.flatten(3)
        return torch.cat((x_out2, x_pass), dim=-1)

    return one(q), one(k)


def flex_olmo_rope(q, k, cos, sin):
    """transformers 5.24 FlexOlmo ``apply_rotary_pos_emb``: float32 cos/sin (its rotary embedding does not
    cast them) against bf16 q/k, result cast back with ``.to(q_type)``; cos/sin (b, s, d)."""
    q_type, k_type = q.dtype, k.dtype
    cos = cos.unsqueeze(1)
    sin = sin.unsqueeze(1)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed.to(q_type), k_embed.to(k_type)


def near_rope(q, k, cos, sin):
    """Negative: GPT-OSS's form with one sign flipped (second = x2 * cos - x1 * sin): not a rotation."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)

    def one(x):
        a, b = torch.chunk(x, 2, dim=-1)
        return torch.cat((a * cos - b * sin, b * cos - a * sin), dim=-1)

    return one(q), one(k)


def rope64(x, cos, sin, interleaved=False, rotary_dim=None):
    """Float64 ground truth: x * cos + rotate(x) * sin on the first rotary_dim features (cos/sin full width)."""
    x = x.double()
    rd = rotary_dim or x.shape[-1]
    xr, c, s = x[..., :rd], cos.double(), sin.double()
    rot = (torch.stack((-xr[..., 1::2], xr[..., ::2]), -1).flatten(-2) if interleaved
           else torch.cat((-xr[..., rd // 2:], xr[..., :rd // 2]), -1))
    return torch.cat([xr * c + rot * s, x[..., rd:]], -1)


# -- the census (scripts/recognition_census.py): every spelling above with tiny inputs ---------------------
def _census_inputs(layout="bhsd", dtype=torch.bfloat16, b=2, hq=4, hk=2, s=3, d=16):
    torch.manual_seed(0)
    if layout == "bhsd":
        return torch.randn(b, hq, s, d, dtype=dtype), torch.randn(b, hk, s, d, dtype=dtype)
    return torch.randn(b, s, hq, d, dtype=dtype), torch.randn(b, s, hk, d, dtype=dtype)


def _angles(s, d, theta=10000.0):
    return torch.outer(torch.arange(s).float(), 1.0 / theta ** (torch.arange(0, d, 2).float() / d))


def census_cases():
    """name -> (build, expected rope ops); ``build()`` -> (fn, args, None: the float64 reference is the spelling
    run on float64 copies). A negative expects 0 ops."""
    b, s, d = 2, 3, 16
    dt = torch.bfloat16

    def hf_dim1():
        q, k = _census_inputs()
        return hf_rope, (q, k, *hf_tables(b, s, d, dt)), None

    def hf_dim2():
        q, k = _census_inputs("bshd")
        return (lambda q, k, c, s_: hf_rope(q, k, c, s_, 2)), (q, k, *hf_tables(b, s, d, dt)), None

    def upcast():
        q, k = _census_inputs()
        return upcast_rope, (q, k, *hf_tables(b, s, d, torch.float32)), None

    def partial():
        q, k = _census_inputs()
        return partial_rope, (q, k, *hf_tables(b, s, d // 4, dt)), None

    def gptj():
        q, k = _census_inputs("bshd")
        c, s_ = hf_tables(b, s, d, dt)
        return gptj_rope, (q, k, s_[..., : d // 2], c[..., : d // 2]), None

    def meta_complex():
        q, k = _census_inputs("bshd")
        ang = _angles(s, d)
        return complex_rope, (q, k, torch.polar(torch.ones_like(ang), ang)), None

    def half_tables():
        q, k = _census_inputs()
        c, s_ = hf_tables(b, s, d, dt)
        return None, (q, k, c[..., : d // 2].contiguous(), s_[..., : d // 2].contiguous()), None

    def gpt_oss():
        fn_, args, _ = half_tables()
        return gpt_oss_rope, args, None

    def flex_olmo():
        q, k = _census_inputs()
        return flex_olmo_rope, (q, k, *hf_tables(b, s, d, torch.float32)), None

    def gpt_fast():
        q, k = _census_inputs("bshd")
        ang = _angles(s, d)
        return gpt_fast_rope, (q, k, torch.stack([ang.cos(), ang.sin()], -1).to(dt)), None

    def chatglm():
        q, k = _census_inputs()
        xs, kx = q.permute(2, 0, 1, 3).contiguous(), k.permute(2, 0, 1, 3).contiguous()
        ang = _angles(s, d)[:, :4]
        rc = torch.stack([ang.cos(), ang.sin()], -1)[:, None].expand(s, b, 4, 2).to(dt)
        return chatglm_rope, (xs, kx, rc), None

    def vllm(neox, rd):
        def build():
            torch.manual_seed(0)
            pos = torch.tensor([0, 3, 5, 7, 2])
            ang = torch.outer(torch.arange(16).float(), 1.0 / 10000 ** (torch.arange(0, rd, 2).float() / rd))
            cache = torch.cat([ang.cos(), ang.sin()], -1)
            qv, kv = torch.randn(5, 4 * d, dtype=dt), torch.randn(5, 2 * d, dtype=dt)
            return vllm_forward_native(neox, rotary_dim=rd if rd != d else None), (pos, qv, kv, cache), None
        return build

    def near():
        fn_, args, _ = half_tables()
        return near_rope, args, None

    return {
        "hf_llama_unsqueeze1": (hf_dim1, 1), "hf_unsqueeze2_bshd": (hf_dim2, 1), "olmo_upcast": (upcast, 1),
        "gpt_neox_partial": (partial, 1), "gptj_rotate_every_two": (gptj, 1), "meta_llama_complex": (meta_complex, 1),
        "gpt_oss_chunk": (gpt_oss, 1), "flex_olmo_f32_tables": (flex_olmo, 1), "gpt_fast_pairs": (gpt_fast, 1),
        "chatglm_partial_pairs": (chatglm, 1), "vllm_native_neox_partial": (vllm(True, 8), 1),
        "vllm_native_gptj": (vllm(False, d), 1), "near_rope_sign (negative)": (near, 0),
    }
