"""HF decoder models for the benchmarks, built from ``transformers`` configs with random weights (no download).

Families (full shapes copied from each checkpoint's ``config.json``; ``tiny`` = 2 layers, small dims, for CPU
smoke tests):

==========  ==========================  ======================================================================
name        shape of                    what it exercises
==========  ==========================  ======================================================================
llama       meta-llama/Llama-3.2-1B     RMSNorm, rotate_half RoPE, GQA 32/8, SiLU MLP, vocab 128256
qwen3       Qwen/Qwen3-0.6B             + per-head q/k RMSNorm, 28 layers, GQA 16/8, head_dim 128, vocab 151936
gemma       google/gemma-2b             Gemma's (1 + w) RMSNorm, MQA 8/1, head_dim 256, GeGLU, vocab 256000
qwen3_next  Qwen/Qwen3-Next-80B-A3B     its full-attention layer in every layer (no Gated DeltaNet), a dense
                                        SiLU MLP of its config's intermediate_size (5120) in place of the MoE: the
                                        ``attn * sigmoid(gate)`` output gate, (1 + w) RMSNorms incl. per-head
                                        q/k, RoPE on a quarter of head_dim 256 (rotary_dim 64), GQA 16/2
==========  ==========================  ======================================================================

``qwen3_next`` is not a checkpoint's layer stack: it is the one HF model whose layers carry the sigmoid output gate
that fits a decode-step benchmark over ``StaticCache``.

Gemma 3 is left out on purpose: its sliding-window layers keep a Python-int length in ``StaticCache``
(transformers 5.2x), so a compiled step at a moving position recompiles every call.

:func:`decode_step` hides the transformers API drift the benchmarks meet: 5.1x takes ``past_key_values=`` and
``cache_position=``; 5.2x takes ``cache=`` and keeps the write position in a device tensor
(``layer.cumulative_length``) that every call advances. The step sets that tensor from ``cache_position``
first, so a step is idempotent at a given position (repeated timing calls never run off the cache) and greedy
decoding just advances ``cache_position``.
"""

from __future__ import annotations

import dataclasses
import inspect

import torch


@dataclasses.dataclass(frozen=True)
class Family:
    """One model family: transformers class names and config kwargs (full checkpoint shape and tiny)."""

    config_cls: str
    model_cls: str
    full: dict
    tiny: dict
    source: str
    #: config keys set per layer from the layer count: key -> fn(num_hidden_layers) -> value
    per_layer: dict = dataclasses.field(default_factory=dict)


_TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, head_dim=16, vocab_size=256, max_position_embeddings=2048)

FAMILIES: dict[str, Family] = {
    "llama": Family(
        "LlamaConfig", "LlamaForCausalLM",
        full=dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                  num_key_value_heads=8, head_dim=64, vocab_size=128256, max_position_embeddings=131072,
                  rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=True),
        tiny=_TINY, source="meta-llama/Llama-3.2-1B"),
    "qwen3": Family(
        "Qwen3Config", "Qwen3ForCausalLM",
        full=dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                  num_key_value_heads=8, head_dim=128, vocab_size=151936, max_position_embeddings=40960,
                  rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True),
        tiny=_TINY, source="Qwen/Qwen3-0.6B"),
    "gemma": Family(
        "GemmaConfig", "GemmaForCausalLM",
        full=dict(hidden_size=2048, intermediate_size=16384, num_hidden_layers=18, num_attention_heads=8,
                  num_key_value_heads=1, head_dim=256, vocab_size=256000, max_position_embeddings=8192,
                  rope_theta=10000.0, rms_norm_eps=1e-6, hidden_activation="gelu_pytorch_tanh",
                  tie_word_embeddings=True),
        tiny={**_TINY, "num_key_value_heads": 1, "hidden_activation": "gelu_pytorch_tanh"},
        source="google/gemma-2b"),
    "qwen3_next": Family(
        "Qwen3NextConfig", "Qwen3NextForCausalLM",
        full=dict(hidden_size=2048, intermediate_size=5120, num_hidden_layers=48, num_attention_heads=16,
                  num_key_value_heads=2, head_dim=256, partial_rotary_factor=0.25, vocab_size=151936,
                  max_position_embeddings=262144, rope_theta=10000000.0, rms_norm_eps=1e-6,
                  tie_word_embeddings=False),
        tiny={**_TINY, "partial_rotary_factor": 0.25},
        source="Qwen/Qwen3-Next-80B-A3B-Instruct",
        per_layer={"layer_types": lambda n: ["full_attention"] * n, "mlp_only_layers": lambda n: list(range(n))}),
}


def build_model(family: str, device: str, dtype: torch.dtype, tiny: bool = False, layers: int | None = None):
    """Random-weight ``<Family>ForCausalLM`` in eval mode with SDPA attention.

    Args:
        family: a key of :data:`FAMILIES`.
        device: ``"cuda"`` or ``"cpu"``; weights are created there directly (no host copy of 1-2.5B params).
        dtype: parameter dtype (bf16 on GPU in the benchmarks).
        tiny: the 2-layer smoke-test shape instead of the checkpoint's.
        layers: override ``num_hidden_layers`` (``None`` keeps the family's).

    Returns:
        ``(model, config)``.

    Raises:
        KeyError: unknown family (the message lists the known ones).
    """
    import transformers

    if family not in FAMILIES:
        raise KeyError(f"unknown model family {family!r}; known: {sorted(FAMILIES)}")
    fam = FAMILIES[family]
    kw = dict(fam.tiny if tiny else fam.full)
    if layers:
        kw["num_hidden_layers"] = layers
    for key, fn in fam.per_layer.items():
        kw[key] = fn(kw["num_hidden_layers"])
    cfg = getattr(transformers, fam.config_cls)(**kw)
    cfg._attn_implementation = "sdpa"
    prev = torch.get_default_dtype()
    torch.manual_seed(0)
    with torch.device(device):
        torch.set_default_dtype(dtype)
        try:
            model = getattr(transformers, fam.model_cls)(cfg).eval()
        finally:
            torch.set_default_dtype(prev)
    return model, cfg


def decode_step(model, cfg, batch: int, seq: int, pos: int, max_cache_len: int, device: str,
                dtype: torch.dtype, seed: int = 0):
    """A gpt-fast-style step over its own ``StaticCache``: ``batch`` sequences of ``seq`` new tokens at ``pos``.

    Returns ``(step, inputs, cache)``: ``step(input_ids (B, S) int64, position_ids (B, S) int64,
    cache_position (S,) int64) -> logits (B, S, V)`` in ``dtype``; ``inputs`` are seeded random token ids at
    positions ``pos .. pos + seq - 1``; the cache is allocated up front (static addresses, so CUDA graphs can
    replay its in-place writes). ``cache.reset()`` zeroes it for a reproducible greedy run. The step passes
    generate's ``attention_mask`` (B, max_cache_len) int64, ones up to the last new position.

    Raises:
        ValueError: ``pos + seq > max_cache_len``.
    """
    from transformers import StaticCache

    if pos + seq > max_cache_len:
        raise ValueError(f"pos {pos} + seq {seq} does not fit max_cache_len {max_cache_len}")
    cache = StaticCache(config=cfg, max_cache_len=max_cache_len)
    if hasattr(cache, "early_initialization"):  # allocate outside the compiled region
        cache.early_initialization(batch, cfg.num_key_value_heads, cfg.head_dim, dtype, torch.device(device))
    params = inspect.signature(model.forward).parameters
    cache_kw = "cache" if "cache" in params else "past_key_values"
    pass_position = "cache_position" in params  # transformers 5.1x
    # transformers 5.2x: the write position lives in a device tensor per layer (static address)
    lengths = [t for t in (getattr(layer, "cumulative_length", None) for layer in getattr(cache, "layers", ()))
               if isinstance(t, torch.Tensor)]

    slots = torch.arange(max_cache_len, device=device)

    def step(input_ids, position_ids, cache_position):
        for t in lengths:
            t.copy_(cache_position[0])
        # generate's padding mask over the static slots: eager HF may skip the causal mask for one query
        # token (SDPA is_causal=False over all slots) where a traced graph keeps it; this keeps both exact
        mask = (slots <= cache_position[-1]).long().expand(input_ids.shape[0], max_cache_len)
        kw = {cache_kw: cache, "attention_mask": mask}
        if pass_position:
            kw["cache_position"] = cache_position
        return model(input_ids=input_ids, position_ids=position_ids, use_cache=True, **kw).logits

    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, cfg.vocab_size, (batch, seq), generator=gen).to(device)
    cache_position = torch.arange(pos, pos + seq, device=device)
    position_ids = cache_position.unsqueeze(0).expand(batch, seq).contiguous()
    return step, (ids, position_ids, cache_position), cache
