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

    def more():
        """Builders of the issue-32 spellings (module section above), each (fn, args)."""
        ang = _angles(s, d)
        ang2 = torch.cat([ang, ang], -1)  # NeoX-layout full-width angles
        angi = ang.repeat_interleave(2, -1)  # interleaved full-width angles
        qh, kh = _census_inputs()
        qs, ks = _census_inputs("bshd")
        c, sn = hf_tables(b, s, d, dt)
        half = (qh, kh, c[..., : d // 2].contiguous(), sn[..., : d // 2].contiguous())
        polar = torch.polar(torch.ones_like(ang), ang)
        inv = 1.0 / (10000.0 ** (torch.arange(0, d, 2).float() / d))
        mc = torch.stack([hf_tables(b, s, d, dt, offset=o)[0] for o in (0, 1, 2)])
        ms = torch.stack([hf_tables(b, s, d, dt, offset=o)[1] for o in (0, 1, 2)])
        return {
            "x_transformers_unbind_partial": (lambda q, k, f: (x_transformers_rope(q, f), x_transformers_rope(k, f)),
                                              (qh, kh, ang2[:, :8].contiguous() * 1.0)),
            "rotary_embedding_torch_unbind": (rotary_embedding_torch, (qh, kh, ang)),
            "eva_vit_unbind": (eva_vit_rope, (qh, kh, angi.cos().to(dt), angi.sin().to(dt))),
            "timm_rot_stack_reshape": (timm_rot_rope, (qh, kh, angi.sin().to(dt), angi.cos().to(dt))),
            "timm_rot_cat_tensor_split_chunk": (timm_rot_cat_half, (qh, kh, torch.cat([ang2.sin(), ang2.cos()],
                                                                                       -1).to(dt))),
            "torchtune_pairs": (torchtune_rope, (qs, ks, torch.stack([ang.cos(), ang.sin()], -1))),
            "deepseek_v3_complex_view": (deepseek_v3_complex, (qs, ks, polar)),
            "llama4_polar_in_graph": (llama4_polar, (qs, ks, inv, torch.arange(s)[None].expand(b, s))),
            "complex_halves_no_interleave": (complex_halves_rope, (qs, ks, polar)),
            "falcon_rw_3d_positive_cat_dim": (falcon_rw_rope, (qh.reshape(b * 4, s, d), kh.reshape(b * 2, s, d),
                                                               ang2.cos()[None].to(dt),
                                                               ang2.sin()[None].to(dt))),
            "codegen_partial_split": (codegen_rope, (qs, ks, torch.cat([ang[:, :4].sin(), ang[:, :4].cos()], -1)
                                                     [None].expand(b, s, 8).to(dt))),
            "glm_partial_interleaved": (glm_rope, (qh, kh, c[..., :8], sn[..., :8])),
            "cohere_interleaved_upcast": (cohere_rope, (qh, kh, angi.cos()[None].expand(b, s, d),
                                                        angi.sin()[None].expand(b, s, d))),
            "qwen2_vl_mrope": (qwen2_vl_mrope, (qh, kh, mc, ms)),
            "deepseek_v2_pairs_to_halves": (deepseek_v2_rope, (qh, kh, c, sn)),
            "phi_remote_chunk_f32": (phi_remote_rope, (qs, ks, ang[:, :4].cos().to(dt), ang[:, :4].sin().to(dt))),
            "flash_attn_torch_chunk": (flash_attn_torch_rope, (qs, ks, ang[:, :4].cos().to(dt),
                                                               ang[:, :4].sin().to(dt))),
            "deepseek_v3_hf_pairs_in_halves_out": (deepseek_v3_hf_interleave, (qh, kh, c, sn)),
            "near_rope_wrong_sign (negative)": (near_rope_wrong_sign, (qh, kh, c, sn)),
            "near_rope_wrong_halves (negative)": (near_rope_wrong_halves, (qh, kh, c, sn)),
            "near_rope_swapped_outputs (negative)": (near_rope_swapped_outputs, half),
        }

    extra = {}
    for name, (fn, args) in more().items():
        extra[name] = ((lambda fn=fn, args=args: (fn, args, None)), 0 if "negative" in name else 1)

    return {**extra,
        "hf_llama_unsqueeze1": (hf_dim1, 1), "hf_unsqueeze2_bshd": (hf_dim2, 1), "olmo_upcast": (upcast, 1),
        "gpt_neox_partial": (partial, 1), "gptj_rotate_every_two": (gptj, 1), "meta_llama_complex": (meta_complex, 1),
        "gpt_oss_chunk": (gpt_oss, 1), "flex_olmo_f32_tables": (flex_olmo, 1), "gpt_fast_pairs": (gpt_fast, 1),
        "chatglm_partial_pairs": (chatglm, 1), "vllm_native_neox_partial": (vllm(True, 8), 1),
        "vllm_native_gptj": (vllm(False, d), 1), "near_rope_sign (negative)": (near, 0),
    }


# -- issue 32: more public spellings (each names its source); the split spellings reach the pass as slices
# (passes/splits.py). einops' ``rearrange`` / ``repeat`` are written as the views they are.
def x_transformers_rope(t, freqs, scale=1.0):
    """lucidrains x-transformers ``x_transformers.py``: ``rotate_half`` = ``rearrange(x, '... (j d) -> ... j d',
    j=2).unbind(-2)``, ``cat((-x2, x1))``; ``apply_rotary_pos_emb``: partial, ``t * freqs.cos() * scale +
    rotate_half(t) * freqs.sin() * scale``, ``cat((t, t_unrotated)).type(orig_dtype)``; freqs (s, rd) float32."""
    def rotate_half(x):
        x1, x2 = x.view(*x.shape[:-1], 2, -1).unbind(dim=-2)
        return torch.cat((-x2, x1), dim=-1)

    rot_dim, orig_dtype = freqs.shape[-1], t.dtype
    t, t_unrotated = t[..., :rot_dim], t[..., rot_dim:]
    t = (t * freqs.cos() * scale) + (rotate_half(t) * freqs.sin() * scale)
    return torch.cat((t, t_unrotated), dim=-1).type(orig_dtype)


def _rearrange_pairs_rotate(x):
    """lucidrains rotary-embedding-torch / EVA-02 ``rotate_half``: ``rearrange(x, '... (d r) -> ... d r', r=2)``,
    ``unbind(-1)``, ``stack((-x2, x1), -1)``, ``rearrange(x, '... d r -> ... (d r)')``."""
    x1, x2 = x.view(*x.shape[:-1], -1, 2).unbind(dim=-1)
    return torch.stack((-x2, x1), dim=-1).view(*x.shape)


def rotary_embedding_torch(q, k, freqs):
    """lucidrains rotary-embedding-torch ``apply_rotary_emb`` (start_index 0, scale 1): freqs (s, d/2) repeated
    ``'... n -> ... (n r)', r=2`` (interleaved), ``t * freqs.cos() + rotate_half(t) * freqs.sin()``, the result
    ``.type(dtype)``."""
    freqs = freqs.repeat_interleave(2, dim=-1)

    def one(t):
        dtype = t.dtype
        return ((t * freqs.cos()) + (_rearrange_pairs_rotate(t) * freqs.sin())).type(dtype)

    return one(q), one(k)


def eva_vit_rope(q, k, freqs_cos, freqs_sin):
    """EVA-02 ``VisionRotaryEmbeddingFast.forward`` (also mmpretrain's EVA): ``t * self.freqs_cos +
    rotate_half(t) * self.freqs_sin``, buffers (N, D) interleaved, t (B, H, N, D)."""
    return (q * freqs_cos + _rearrange_pairs_rotate(q) * freqs_sin,
            k * freqs_cos + _rearrange_pairs_rotate(k) * freqs_sin)


def timm_rot_rope(q, k, sin_emb, cos_emb):
    """timm ``layers/pos_embed_sincos.py``: ``rot(x) = stack([-x[..., 1::2], x[..., ::2]], -1).reshape(x.shape)``,
    ``apply_rot_embed(x, sin_emb, cos_emb) = x * cos_emb + rot(x) * sin_emb``."""
    def rot(x):
        return torch.stack([-x[..., 1::2], x[..., ::2]], -1).reshape(x.shape)

    return q * cos_emb + rot(q) * sin_emb, k * cos_emb + rot(k) * sin_emb


def timm_rot_cat_half(q, k, emb):
    """timm ``apply_rot_embed_cat(x, emb, half=True)``: ``sin_emb, cos_emb = emb.tensor_split(2, -1)``,
    ``x * cos_emb + rope_rotate_half(x) * sin_emb`` with ``rope_rotate_half`` = ``x.chunk(2, -1)``, cat(-x2, x1)."""
    sin_emb, cos_emb = emb.tensor_split(2, -1)

    def rope_rotate_half(x):
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat([-x2, x1], dim=-1)

    return q * cos_emb + rope_rotate_half(q) * sin_emb, k * cos_emb + rope_rotate_half(k) * sin_emb


def torchtune_rope(q, k, rope_cache):
    """torchtune ``modules/position_embeddings.py`` ``RotaryPositionalEmbeddings.forward``: x (b, s, h, d),
    ``xshaped = x.float().reshape(*x.shape[:-1], -1, 2)``, cache (s, d/2, 2) viewed (-1, s, 1, d/2, 2),
    ``stack([x0 * c0 - x1 * c1, x1 * c0 + x0 * c1], -1).flatten(3).type_as(x)``."""
    def one(x):
        xshaped = x.float().reshape(*x.shape[:-1], -1, 2)
        rc = rope_cache.view(-1, xshaped.size(1), 1, xshaped.size(3), 2)
        x_out = torch.stack([xshaped[..., 0] * rc[..., 0] - xshaped[..., 1] * rc[..., 1],
                             xshaped[..., 1] * rc[..., 0] + xshaped[..., 0] * rc[..., 1]], -1)
        return x_out.flatten(3).type_as(x)

    return one(q), one(k)


def deepseek_v3_complex(q, k, freqs_cis):
    """DeepSeek-V3 ``inference/model.py`` ``apply_rotary_emb``: ``view_as_complex(x.float().view(*x.shape[:-1], -1,
    2))``, freqs_cis viewed (1, s, 1, d/2), ``view_as_real(x * freqs_cis).flatten(3).to(dtype)``."""
    def one(x):
        dtype = x.dtype
        xc = torch.view_as_complex(x.float().view(*x.shape[:-1], -1, 2))
        f = freqs_cis.view(1, xc.size(1), 1, xc.size(-1))
        return torch.view_as_real(xc * f).flatten(3).to(dtype)

    return one(q), one(k)


def llama4_polar(q, k, inv_freq, position_ids):
    """transformers Llama4 ``Llama4TextRotaryEmbedding.forward`` + ``apply_rotary_emb``: freqs_cis =
    ``torch.polar(ones_like(freqs), freqs)`` computed in the graph from inv_freq and the positions;
    ``view_as_real(view_as_complex(xq.float().reshape(..., -1, 2)) * freqs_cis[:, :, None, :]).flatten(3)
    .type_as(xq)``; q, k (b, s, h, d)."""
    inv = inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
    freqs = (inv @ position_ids[:, None, :].float()).transpose(1, 2)
    freqs_cis = torch.polar(torch.ones_like(freqs), freqs)

    def one(x):
        xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
        return torch.view_as_real(xc * freqs_cis[:, :, None, :]).flatten(3).type_as(x)

    return one(q), one(k)


def complex_halves_rope(q, k, freqs_cis):
    """GTPlayT/Large-Language-Models ``llm/misc.py`` ``rotary_emb``: complex RoPE *without* interleave, the
    halves of x as real and imaginary parts: ``view_as_complex(stack(chunk(x.transpose(1, 2).float(), 2, -1),
    -1))``, ``view_as_real(x_ * freqs_cis).type_as(x)``, put back by ``cat(chunk(x_out, 2, -1), -2)``, reshape,
    transpose; x (b, s, h, d), freqs_cis (s, d/2)."""
    def one(x):
        x_ = torch.view_as_complex(torch.stack(torch.chunk(x.transpose(1, 2).float(), 2, dim=-1), dim=-1))
        x_out = torch.view_as_real(x_ * freqs_cis).type_as(x)
        x_out = torch.cat(torch.chunk(x_out, 2, dim=-1), dim=-2)
        return x_out.reshape(x_out.shape[0], x_out.shape[1], x_out.shape[2], -1).transpose(1, 2)

    return one(q), one(k)


def falcon_rw_rope(q, k, cos, sin):
    """tiiuae falcon-7b ``modelling_RW.py``: q, k (batch * heads, s, d); ``rotate_half`` with
    ``torch.cat((-x2, x1), dim=x1.ndim - 1)`` (a positive cat dim); ``(q * cos) + (rotate_half(q) * sin)`` with
    cos/sin (1, s, d)."""
    def rotate_half_rw(x):
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
        return torch.cat((-x2, x1), dim=x1.ndim - 1)

    return (q * cos) + (rotate_half_rw(q) * sin), (k * cos) + (rotate_half_rw(k) * sin)


def codegen_rope(q, k, sincos, rotary_dim=8):
    """transformers CodeGen ``CodeGenAttention.forward``: (b, s, h, d), partial rotary with explicit 4-D slices
    ``key[:, :, :, :rotary_dim]``, ``rotate_every_two`` = ``stack((-x[:, :, :, 1::2], x[:, :, :, ::2]),
    -1).flatten(-2)``, sin/cos ``repeat_interleave(t[:, :, None, :], 2, 3)`` from ``torch.split(sincos, half,
    -1)``, ``cat([k_rot, k_pass], dim=-1)``."""
    sin, cos = torch.split(sincos, sincos.shape[-1] // 2, dim=-1)
    sin = torch.repeat_interleave(sin[:, :, None, :], 2, 3)
    cos = torch.repeat_interleave(cos[:, :, None, :], 2, 3)

    def rotate_every_two_4d(x):
        return torch.stack((-x[:, :, :, 1::2], x[:, :, :, ::2]), dim=-1).flatten(-2)

    def one(x):
        x_rot, x_pass = x[:, :, :, :rotary_dim], x[:, :, :, rotary_dim:]
        x_rot = (x_rot * cos) + (rotate_every_two_4d(x_rot) * sin)
        return torch.cat([x_rot, x_pass], dim=-1)

    return one(q), one(k)


def glm_rope(q, k, cos, sin):
    """transformers GLM ``modeling_glm.py`` ``apply_rotary_pos_emb``: cos/sin (b, s, rd) with their first halves
    ``repeat_interleave(2, dim=-1)``, ``rotate_half`` = ``stack((-x[..., 1::2], x[..., 0::2]), -1).flatten(-2)``,
    partial rotary ``cat([q_embed, q_pass], dim=-1)``."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    cos = cos[..., : cos.shape[-1] // 2].repeat_interleave(2, dim=-1)
    sin = sin[..., : sin.shape[-1] // 2].repeat_interleave(2, dim=-1)
    rd = cos.shape[-1]

    def rotate_half_glm(x):
        return torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)

    def one(x):
        x_rot, x_pass = x[..., :rd], x[..., rd:]
        return torch.cat([(x_rot * cos) + (rotate_half_glm(x_rot) * sin), x_pass], dim=-1)

    return one(q), one(k)


def cohere_rope(q, k, cos, sin):
    """transformers Cohere ``apply_rotary_pos_emb``: ``q = q.float()``, cos/sin from ``repeat_interleave(freqs, 2,
    dim=-1)`` (interleaved, float32), ``rotate_half`` = ``stack([-x2, x1], -1).flatten(-2)`` of ``x[..., ::2]`` /
    ``x[..., 1::2]``, ``.to(dtype=dtype)``."""
    dtype = q.dtype
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)

    def rotate_half_cohere(x):
        x1, x2 = x[..., ::2], x[..., 1::2]
        return torch.stack([-x2, x1], dim=-1).flatten(-2)

    def one(x):
        x = x.float()
        return ((x * cos) + (rotate_half_cohere(x) * sin)).to(dtype=dtype)

    return one(q), one(k)


def qwen2_vl_mrope(q, k, cos, sin, mrope_section=(2, 3, 3)):
    """transformers Qwen2-VL ``apply_multimodal_rotary_pos_emb``: cos/sin (3, b, s, d) (temporal, height, width
    rows), ``cat([m[i % 3] for i, m in enumerate(cos.split(mrope_section * 2, -1))], -1).unsqueeze(1)``, then
    HF's rotate_half rotation."""
    sec = list(mrope_section) * 2
    cos = torch.cat([m[i % 3] for i, m in enumerate(cos.split(sec, dim=-1))], dim=-1).unsqueeze(1)
    sin = torch.cat([m[i % 3] for i, m in enumerate(sin.split(sec, dim=-1))], dim=-1).unsqueeze(1)
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


def deepseek_v2_rope(q, k, cos, sin):
    """DeepSeek-V2 ``modeling_deepseek.py`` ``apply_rotary_pos_emb``: pairs regrouped into halves first,
    ``q.view(b, h, s, d // 2, 2).transpose(4, 3).reshape(b, h, s, d)``, then HF's rotate_half rotation with
    cos/sin (b, s, d) unsqueezed at 1."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)

    def one(x):
        b, h, s, d = x.shape
        x = x.view(b, h, s, d // 2, 2).transpose(4, 3).reshape(b, h, s, d)
        return (x * cos) + (rotate_half(x) * sin)

    return one(q), one(k)


def phi_remote_rope(q, k, cos, sin, rotary_dim=8):
    """microsoft phi-1.5 remote ``modeling_phi.py`` ``_apply_rotary_emb`` (flash-attn's torch path): x (b, s, h, d),
    ``x_rot.chunk(2, dim=-1)``, parts and tables cast to float32, ``cat([x1 * c - x2 * s, x1 * s + x2 * c],
    -1).to(x.dtype)``, ``cat([x_rot, x_pass], -1)``; cos/sin (s, rd/2)."""
    def one(x):
        x_rot, x_pass = x[:, :, :, :rotary_dim], x[:, :, :, rotary_dim:]
        x1, x2 = x_rot.chunk(2, dim=-1)
        c, s = cos[:, None, :], sin[:, None, :]
        x1, x2, c, s = [t.to(dtype=torch.float32) for t in [x1, x2, c, s]]
        x_rot = torch.cat([x1 * c - x2 * s, x1 * s + x2 * c], dim=-1).to(x.dtype)
        return torch.cat([x_rot, x_pass], dim=-1)

    return one(q), one(k)


def flash_attn_torch_rope(q, k, cos, sin):
    """Dao-AILab flash-attention ``flash_attn/layers/rotary.py`` ``apply_rotary_emb_torch`` (non-interleaved):
    cos/sin (s, rd/2) repeated ``'... d -> ... 1 (2 d)'``, ``rotate_half`` = ``x.chunk(2, -1)``, cat(-x2, x1),
    ``cat([x[..., :ro_dim] * cos + rotate_half(x[..., :ro_dim]) * sin, x[..., ro_dim:]], -1)``; x (b, s, h, d)."""
    ro_dim = cos.shape[-1] * 2
    c, s = torch.cat([cos, cos], -1)[:, None, :], torch.cat([sin, sin], -1)[:, None, :]

    def rh(x):
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)

    def one(x):
        return torch.cat([x[..., :ro_dim] * c + rh(x[..., :ro_dim]) * s, x[..., ro_dim:]], dim=-1)

    return one(q), one(k)


def deepseek_v3_hf_interleave(q, k, cos, sin):
    """transformers 5.24 DeepSeek-V3 ``apply_rotary_pos_emb_interleave``: pairs in, halves out -- ``q1, q2 =
    q[..., 0::2], q[..., 1::2]``, ``cat([q1 * cos - q2 * sin, q2 * cos + q1 * sin], -1)`` with the first halves of
    cos/sin (b, s, d) unsqueezed at 1 (the rewrite feeds NeoX's op ``cat([q1, q2], -1)``)."""
    cos = cos[..., : cos.shape[-1] // 2].unsqueeze(1)
    sin = sin[..., : sin.shape[-1] // 2].unsqueeze(1)

    def one(x):
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)

    return one(q), one(k)


# -- near-RoPEs (negatives): rewritten by nobody, reported with the cause -------------------------------------
def near_rope_wrong_sign(q, k, cos, sin):
    """Negative: ``rotate_half`` with the minus on the other half, ``cat((x2, -x1))``: a rotation by -θ (the bug of
    ports that swap the halves' roles)."""
    def rh(x):
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((x2, -x1), dim=-1)

    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * cos + rh(q) * sin, k * cos + rh(k) * sin


def near_rope_wrong_halves(q, k, cos, sin):
    """Negative: ``rotate_half`` returning ``cat((-x1, x2))`` (the halves not exchanged): not a rotation."""
    def rh(x):
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x1, x2), dim=-1)

    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * cos + rh(q) * sin, k * cos + rh(k) * sin


def near_rope_swapped_outputs(q, k, cos, sin):
    """Negative: GPT-OSS's two linear combinations concatenated in the wrong order, ``cat((second, first))``."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)

    def one(x):
        a, b = torch.chunk(x, 2, dim=-1)
        return torch.cat((b * cos + a * sin, a * cos - b * sin), dim=-1)

    return one(q), one(k)
