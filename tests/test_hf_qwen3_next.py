"""The ``qwen3_next`` benchmark family (``benchmarks/hf_models.py``): HF Qwen3-Next's full-attention layer in every
layer, the decode step the tuning benchmark runs to decide the ``attn * sigmoid(gate)`` output gate in context.

Tiny shape (2 layers, float32, CPU, reference providers): every layer's gate, partial RoPE (rotary_dim = head_dim / 4),
decode attention and (1 + w) RMSNorms (incl. the per-head q/k norms) rewritten, no near-miss for them, and greedy
decode over its ``StaticCache`` gives eager's tokens with logits within 1e-4 of eager's (relative to their max).
"""

from __future__ import annotations

import pytest
import torch
from bench_utils import greedy_equal, hf_models

import rocm_inductor

PASSES = ("rms_norm", "rope", "sigmoid_gate", "attention")
OPTS = {"providers": {p: "reference" for p in PASSES}, "strict": True}


@pytest.mark.slow
def test_qwen3_next_family_decodes_with_every_layer_rewritten():
    """Counts per graph: gate, RoPE, decode attention once per layer; q and k norms plus two residual norms per
    layer and the final norm; tokens equal to eager's over three steps."""
    hm = hf_models()
    model, cfg = hm.build_model("qwen3_next", "cpu", torch.float32, tiny=True)
    n = cfg.num_hidden_layers
    assert cfg.layer_types == ["full_attention"] * n and cfg.mlp_only_layers == list(range(n))
    b, pos, max_len = 2, 8, 24
    step_e, (tok, _, _), _ = hm.decode_step(model, cfg, b, 1, 0, max_len, "cpu", torch.float32)
    step_c, _, _ = hm.decode_step(model, cfg, b, 1, 0, max_len, "cpu", torch.float32)
    rocm_inductor.clear_reports()
    torch._dynamo.reset()
    with torch.no_grad(), torch._inductor.config.patch(force_disable_caches=True):
        comp = torch.compile(step_c, backend="rocm_fused", options=OPTS, fullgraph=True)
        greedy_equal(step_e, comp, tok, pos, b, 3)
    (rep,) = rocm_inductor.reports()
    assert rep.error is None, rep.error
    assert rep.count("sigmoid_gate") == n and rep.count("rope") == n and rep.count("decode_attention") == n, str(rep)
    assert rep.count("rms_norm") + rep.count("fused_add_rms_norm") == 4 * n + 1, str(rep)
    assert not [m for m in rep.near_misses if m.pass_name in PASSES], str(rep)
    rope_shapes = {m.shape for m in rep.matches if m.op == "rope"}
    assert rope_shapes == {str((b, cfg.num_attention_heads, 1, cfg.head_dim))}, rope_shapes
