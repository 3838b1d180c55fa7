"""Tiny HF causal LMs (transformers configs, random weights, no download) for the model tests.

One builder for the families the passes are tested on, so every model test builds the same architectures the
same way; tests pass only what they vary (e.g. ``intermediate_size`` so gate/up differ from q in N).
"""

from __future__ import annotations

from typing import Any

import torch

#: Decoder layers of every tiny model (tests count rewrites per layer).
LAYERS = 2
COMMON = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=LAYERS,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
#: HF class names per family: (config, model).
_CLASSES = {"llama": ("LlamaConfig", "LlamaForCausalLM"), "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
            "qwen3": ("Qwen3Config", "Qwen3ForCausalLM"), "gemma": ("GemmaConfig", "GemmaForCausalLM"),
            "gpt_neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM")}
#: Families with an explicit head_dim of 16 (hidden 64 / 4 heads; their defaults differ).
_HEAD_DIM = ("qwen3", "gemma")


def tiny_causal_lm(name: str, perturb_norms: bool = False, **overrides: Any) -> torch.nn.Module:
    """A 2-layer ``<Family>ForCausalLM`` with hidden 64, 4 heads (2 KV heads: GQA), vocab 128, random weights.

    Args:
        name: ``llama``, ``qwen2``, ``qwen3`` (per-head q/k RMSNorm), ``gemma`` (``(1 + w)`` norms),
            ``gpt_neox`` (partial rotary: ``rotary_pct=0.25`` unless overridden) or ``gptj`` (interleaved
            RoPE, rotary_dim 8 of head_dim 16).
        perturb_norms: draw Gemma's norm weights from N(0, 0.1) (they start at zero, so ``1 + w`` would be 1).
        overrides: config fields replacing :data:`COMMON`'s (e.g. ``intermediate_size=96``).

    Returns:
        the model in train mode (callers ``.eval()``), float32 on CPU, from the current torch RNG state.

    Raises:
        ValueError: an unknown family.
    """
    import transformers as t

    if name == "gptj":
        cfg = dict(vocab_size=128, n_embd=64, n_layer=LAYERS, n_head=4, rotary_dim=8, n_positions=64,
                   bos_token_id=0, eos_token_id=0)
        return t.GPTJForCausalLM(t.GPTJConfig(**{**cfg, **overrides}))
    if name not in _CLASSES:
        raise ValueError(f"unknown tiny model family {name!r}")
    cfg = {**COMMON, **({"head_dim": 16} if name in _HEAD_DIM else {}), **overrides}
    if name == "gpt_neox":
        cfg.pop("num_key_value_heads")
        cfg.setdefault("rotary_pct", 0.25)
    conf_cls, model_cls = (getattr(t, c) for c in _CLASSES[name])
    model = model_cls(conf_cls(**cfg))
    if perturb_norms:
        with torch.no_grad():
            for n, p in model.named_parameters():
                if "norm" in n:
                    p.normal_(0, 0.1)
    return model
