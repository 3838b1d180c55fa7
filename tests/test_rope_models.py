"""Tiny HF models (random weights, no download) compiled with backend="rocm_fused", reference provider.

Each has 2 layers; every layer's RoPE must become one ``rocm_fused::rope`` (q and k together), the logits
stay within tolerance of eager, and greedy decoding (full recompute, dynamic length: one compile) gives the
same 8 tokens as eager.
"""

from __future__ import annotations

import pytest
import torch
from graph_utils import capture

transformers = pytest.importorskip("transformers")

LAYERS = 2
_COMMON = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=LAYERS,
               num_attention_heads=4, max_position_embeddings=64)


def _model(name):
    T = transformers
    if name == "llama":
        return T.LlamaForCausalLM(T.LlamaConfig(num_key_value_heads=2, **_COMMON))
    if name == "qwen3":
        return T.Qwen3ForCausalLM(T.Qwen3Config(num_key_value_heads=2, head_dim=16, **_COMMON))
    if name == "gemma":
        return T.GemmaForCausalLM(T.GemmaConfig(num_key_value_heads=1, head_dim=16, **_COMMON))
    if name == "gpt_neox":  # partial rotary: rotary_dim = 0.25 * 16 = 4
        return T.GPTNeoXForCausalLM(T.GPTNeoXConfig(rotary_pct=0.25, **_COMMON))
    if name == "gptj":  # interleaved, partial (rotary_dim 8 of head_dim 16)
        return T.GPTJForCausalLM(T.GPTJConfig(vocab_size=128, n_embd=64, n_layer=LAYERS, n_head=4, rotary_dim=8,
                                              n_positions=64, bos_token_id=0, eos_token_id=0))
    raise ValueError(name)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["llama", "qwen3", "gemma", "gpt_neox", "gptj"])
def test_model_rope_rewritten(name):
    torch.manual_seed(0)
    model = _model(name).eval()
    fn = lambda ids: model(ids, use_cache=False).logits  # noqa: E731
    # Only the RoPE pass: keeps the compile small and the test about RoPE.
    opts = {"provider": "reference", "strict": True, "passes": {"rms_norm": False}}
    compiled = torch.compile(fn, backend="rocm_fused", options=opts, dynamic=None)
    torch._dynamo.reset()
    ids = torch.randint(1, 128, (1, 6))
    with capture() as seen, torch.no_grad():
        torch._dynamo.mark_dynamic(ids, 1)
        out = compiled(ids)
        eager = fn(ids)
        torch.testing.assert_close(out, eager, atol=1e-4, rtol=1e-4)
        got, want = ids, ids
        for _ in range(8):  # greedy, full recompute (the length is dynamic: no recompiles)
            got = torch.cat([got, compiled(got)[:, -1:].argmax(-1)], 1)
            want = torch.cat([want, fn(want)[:, -1:].argmax(-1)], 1)
    assert torch.equal(got, want)
    assert len(seen) == 1, "recompiled"
    assert seen[0].after.get("rocm_fused.rope.default", 0) == LAYERS, str(seen[0].report)
    assert seen[0].report.count("rope") == LAYERS
    assert not [m for m in seen[0].report.near_misses if m.pass_name == "rope"]
