"""The moe_experts pass on whole decoders: a tiny HF Qwen3-MoE (2 layers, 8 experts, top-2) decoding over a
``StaticCache`` with the ``batched_mm`` and ``grouped_mm`` experts implementations, under ``rocm_fused`` with the
reference and the Triton provider (interpreter on CPU).

Every compiled graph must rewrite every layer's experts (and leave no expert GEMM); a few greedy decode steps
must give eager's tokens, with logits within 1e-4 of eager's (relative to their max). Random weights from a
``transformers`` config (no download), float32 on CPU. The reference case compiles end to end (the suite's
Qwen3-MoE end-to-end compile); the Triton cases run their rewritten graphs eagerly (``graph_run_eagerly``: the
passes and counts are a real compile's, the kernels run under the interpreter either way).
"""

from __future__ import annotations

import pytest
import torch
from bench_utils import greedy_equal
from bench_utils import hf_models as bench_hf_models
from graph_utils import capture, graph_run_eagerly, needs_interpreter

import rocm_inductor

transformers = pytest.importorskip("transformers")

LAYERS = 2
TINY = dict(hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_experts=8, num_experts_per_tok=2,
            num_hidden_layers=LAYERS, num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=256,
            max_position_embeddings=256)
EXPERT_GEMMS = ("aten.bmm.default", "aten._grouped_mm.default", "transformers.grouped_mm_fallback.default")


def _model(impl: str):
    cfg = transformers.Qwen3MoeConfig(**TINY)
    cfg._attn_implementation = "sdpa"
    cfg._experts_implementation = impl
    torch.manual_seed(0)
    model = transformers.Qwen3MoeForCausalLM(cfg).eval()
    with torch.no_grad():  # HF initialises the router at zero: every expert would tie
        for name, p in model.named_parameters():
            if "mlp" in name:
                p.normal_(0, 0.2)
    return model, cfg


@pytest.mark.slow
# both forms through Triton, the reference on HF's default form only (the suite's time: each is a model compile)
@pytest.mark.parametrize("impl,provider", [("grouped_mm", "reference"),
                                           pytest.param("grouped_mm", "triton", marks=needs_interpreter),
                                           pytest.param("batched_mm", "triton", marks=needs_interpreter)])
def test_qwen3_moe_static_cache_decode(impl, provider):
    hf_models = bench_hf_models()
    model, cfg = _model(impl)
    b, max_len, steps, pos = 2, 24, 3, 8
    step_e, (ids, _, _), _ = hf_models.decode_step(model, cfg, b, 1, 0, max_len, "cpu", torch.float32)
    step_c, _, _ = hf_models.decode_step(model, cfg, b, 1, 0, max_len, "cpu", torch.float32)
    rocm_inductor.clear_reports()
    torch._dynamo.reset()
    opts = {"provider": "reference", "providers": {"moe_experts": provider}, "strict": True}
    with torch.no_grad(), capture() as seen, graph_run_eagerly(enabled=provider == "reference"):
        comp = torch.compile(step_c, backend="rocm_fused", options=opts, fullgraph=True)
        greedy_equal(step_e, comp, ids, pos, b, steps)
    assert len(seen) == 1, "the decode step recompiled"
    cap = seen[0]
    assert sum(cap.before.get(k, 0) for k in EXPERT_GEMMS) == 2 * LAYERS, cap.before
    assert cap.after["rocm_fused.moe_experts.default"] == LAYERS
    assert not any(cap.after.get(k, 0) for k in EXPERT_GEMMS), cap.after
    rep = cap.report
    assert rep.error is None, rep.error
    matches = [m for m in rep.matches if m.pass_name == "moe_experts"]
    assert len(matches) == LAYERS and all(m.provider == provider for m in matches), str(rep)
    assert not [m for m in rep.near_misses if m.pass_name == "moe_experts"], str(rep)
