"""Tiny HF models (random weights, no download) compiled with backend="rocm_fused", reference provider.

Each has 2 layers; every layer's RoPE must become one ``rocm_fused::rope`` (q and k together), the logits
stay within tolerance of eager, and greedy decoding (full recompute, dynamic length: one compile) gives the
same 8 tokens as eager. GPT-NeoX and GPT-J compile end to end (their only model tests); Llama, Qwen3 and Gemma run
their rewritten graphs eagerly (``graph_run_eagerly``; their end-to-end compiles: test_attention_models,
test_glu_gemm).
"""

from __future__ import annotations

import pytest
import torch
from graph_utils import capture, graph_run_eagerly
from tiny_hf import LAYERS, tiny_causal_lm

transformers = pytest.importorskip("transformers")


@pytest.fixture(autouse=True)
def _eager_graphs(request):
    with graph_run_eagerly(enabled=request.node.callspec.params["name"] not in ("gpt_neox", "gptj")):
        yield


def _model(name):
    return tiny_causal_lm(name, **({"num_key_value_heads": 1} if name == "gemma" else {}))


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
