"""The spelling corpus as census cases (scripts/recognition_census.py): every spelling of every family with tiny
inputs, what it expects (op count; 0 for a negative) and its float64 reference. The spellings and their sources
live in the family modules (rope_spellings.py, gate_spellings.py, norm_spellings.py, sampling_spellings.py and
the attention tests); this module only lists them."""

from __future__ import annotations

import torch


def _rope_cases(Case):
    import rope_spellings as R

    return [Case("rope", name, build, n) for name, (build, n) in R.census_cases().items()]


def _norm_cases(Case):
    from norm_spellings import DISCOVERED, MORE, OFFSET, SPELLINGS, Single, rms_norm_64

    def make(name, cls):
        def build():
            torch.manual_seed(0)
            norm = cls().to(torch.bfloat16)
            x = torch.randn(5, 64, dtype=torch.bfloat16) * 3
            w = getattr(norm, "weight", None)
            eps = getattr(norm, "eps", None) or torch.finfo(torch.bfloat16).eps
            return Single(norm), (x, x), rms_norm_64(x, w, eps, OFFSET.get(name, 0.0))
        return build

    return [Case("norm", n, make(n, c)) for n, c in {**SPELLINGS, **DISCOVERED, **MORE}.items()]


def _gate_cases(Case):
    import gate_spellings as G

    return [Case("gate", name, build, n) for name, (build, n) in G.census_cases().items()]


def _sampling_cases(Case):
    import sampling_spellings as S
    from test_spelling_corpus import LOGITS, SAMPLERS

    def make(fn):
        return lambda: (fn, (LOGITS.expand(8, 1, -1).contiguous(),), None)

    cases = [Case("sampling", n, make(f)) for n, f in SAMPLERS.items()]
    return cases + [Case("sampling", "greedy (negative)", make(S.greedy), 0)]


def _attention_cases(Case):
    import test_attention_pass as A
    from test_attention_einsum import einsum_attention

    def make(fn, dtype, mask_kind):
        def build():
            q, k, v = A.qkv(hq=8, hkv=2, dtype=dtype)
            keep = torch.rand(2, 1, 1, 24, generator=torch.Generator().manual_seed(5)) > 0.3
            keep[..., 0] = True
            if mask_kind == "none":
                mask = None
            elif mask_kind == "bool":
                mask = keep
            else:
                mask = torch.zeros(2, 1, 1, 24, dtype=dtype).masked_fill(~keep, torch.finfo(dtype).min)
            ref = A.ref64(q, k, v, None if mask is None else mask if mask.dtype == torch.bool else mask.float())
            return fn, (q, k, v, mask), ref
        return build

    spell = {
        "hf_repeat_kv_sdpa": (A.hf, torch.float32, "none"), "gpt_fast_repeat_interleave": (A.gpt_fast,
                                                                                           torch.float32, "none"),
        "sdpa_enable_gqa": (A.native_gqa, torch.float32, "none"), "head_gather": (A.gather, torch.float32, "none"),
        "hf_eager_bf16": (A.hf_eager, torch.bfloat16, "additive"),
        "masked_fill": (A.masked_fill_attn, torch.float32, "bool"),
        "sdpa_math_path_bf16": (A.sdpa_math_path, torch.bfloat16, "additive"),
        "einsum": (einsum_attention, torch.float32, "additive"),
    }
    return [Case("attention", n, make(*s)) for n, s in spell.items()]


def all_cases(Case) -> list:
    """Every case of every family, in family order (rope, norm, gate, sampling, attention)."""
    return [*_rope_cases(Case), *_norm_cases(Case), *_gate_cases(Case), *_sampling_cases(Case),
            *_attention_cases(Case)]

