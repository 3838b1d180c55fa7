"""The attention pass on whole decoders (issue 13): tiny HF Llama, Qwen3, Mistral and Gemma 3 (sliding + global
layers) with a ``StaticCache``, and gpt-fast's own ``Attention``/``KVCache`` (tests/gpt_fast_attention.py).

Random weights from ``transformers`` configs (2 layers, no download), float32 on CPU, reference provider.
Every compiled graph must rewrite every layer's attention; a few greedy decode steps must give eager's
tokens, with logits within 1e-4 of eager's (relative to their max).
"""

from __future__ import annotations

import pytest
import torch
from bench_utils import greedy_equal
from bench_utils import hf_models as bench_hf_models
from gpt_fast_attention import decode_vs_eager

import rocm_inductor

OPTS = {"provider": "reference", "strict": True}
TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, vocab_size=256, max_position_embeddings=256)


def _model(family: str):
    import transformers

    if family == "gemma3":  # layer 0 sliding (window 4), layer 1 global
        cfg = transformers.Gemma3TextConfig(**TINY, sliding_window=4,
                                            layer_types=["sliding_attention", "full_attention"])
        cls = transformers.Gemma3ForCausalLM
    else:  # Mistral as v0.3 ships it (no sliding window; the 4096 default would recompile like Gemma 3)
        extra = {"sliding_window": None} if family == "mistral" else {}
        cfg = getattr(transformers, {"llama": "LlamaConfig", "qwen3": "Qwen3Config",
                                     "mistral": "MistralConfig"}[family])(**TINY, **extra)
        cls = getattr(transformers, {"llama": "LlamaForCausalLM", "qwen3": "Qwen3ForCausalLM",
                                     "mistral": "MistralForCausalLM"}[family])
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return cls(cfg).eval(), cfg


def _check_reports(layers: int) -> int:
    """Every graph compiled rewrote ``layers`` attentions and left no attention near-miss; returns graphs."""
    reps = rocm_inductor.reports()
    assert reps, "nothing compiled"
    for r in reps:
        assert r.error is None, r.error
        assert r.count("decode_attention") == layers, str(r)
        assert not [n for n in r.near_misses if n.pass_name == "attention"], str(r)
    return len(reps)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["llama", "qwen3", "mistral", "gemma3"])
def test_hf_static_cache_decode(family):
    """Greedy decode over a StaticCache: compiled tokens == eager tokens, every layer's SDPA rewritten.

    Gemma 3's sliding layers keep a Python-int length (transformers 5.2x), so its steps recompile once (the
    int becomes dynamic); both graphs must rewrite both layers. It is prefilled (eagerly) past its window.
    """
    hf_models = bench_hf_models()
    model, cfg = _model(family)
    b, max_len, steps = 2, 24, 3
    pos = 5 if family == "gemma3" else 8
    step_e, (ids, _, _), _ = hf_models.decode_step(model, cfg, b, 1, 0, max_len, "cpu", torch.float32)
    step_c, _, _ = hf_models.decode_step(model, cfg, b, 1, 0, max_len, "cpu", torch.float32)
    prompt = torch.randint(0, cfg.vocab_size, (b, pos), generator=torch.Generator().manual_seed(1))
    cp = torch.arange(pos)
    rocm_inductor.clear_reports()
    torch._dynamo.reset()
    with torch.no_grad(), torch._inductor.config.patch(force_disable_caches=True):
        if family == "gemma3":  # fill both caches (identically) past the window, eagerly
            first = step_e(prompt, cp.expand(b, pos), cp)[:, -1:].argmax(-1)
            step_c(prompt, cp.expand(b, pos), cp)
        else:  # the cache slots before pos stay zero: masked in by the padding mask, same in both
            first = ids
        comp = torch.compile(step_c, backend="rocm_fused", options=OPTS, fullgraph=True)
        greedy_equal(step_e, comp, first, pos, b, steps)
    graphs = _check_reports(cfg.num_hidden_layers)
    assert graphs == (2 if family == "gemma3" else 1)
    notes = [m.note for m in rocm_inductor.reports().matches if m.pass_name == "attention"]
    assert all("GQA 4/2=2" in n and "mask=bool" in n for n in notes), notes
    if family == "gemma3":
        assert any("kv_len=4 " in n for n in notes) and any(f"kv_len={max_len} " in n for n in notes), notes


@pytest.mark.slow
def test_gpt_fast_attention():
    """gpt-fast's Attention + KVCache (repeat_interleave, causal_mask[None, None, input_pos]) decoding."""
    decode_vs_eager(OPTS)
    _check_reports(2)
    notes = [m.note for m in rocm_inductor.reports().matches if m.op == "decode_attention"]  # RoPE matches too
    assert notes and all("GQA 8/2=4" in n and "mask=bool 1x1x1x16" in n for n in notes), notes
