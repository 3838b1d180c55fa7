"""The moe_routing pass on whole mixture-of-experts decoders: tiny HF Qwen3-MoE (softmax top-k, renormalised),
GPT-OSS (top-k then softmax) and GLM4-MoE (DeepSeek-V3's router: sigmoid + correction bias, grouped top-k, routed
scaling) decoding over a ``StaticCache`` with the reference and the Triton provider.

Random weights from ``transformers`` configs (2 layers, hidden 64, no download), float32 on CPU, experts through
transformers' ``batched_mm`` implementation (the default loops over experts with data-dependent shapes). Every
layer's router must become one ``rocm_fused::moe_routing``; logits within 1e-4 of eager's (relative to their
max) and greedy tokens equal to eager's for a few decode steps. GLM4-MoE (found only here) compiles end to end;
Qwen3-MoE and GPT-OSS run their rewritten graphs eagerly (``graph_run_eagerly``: the passes and counts are a real
compile's; their end-to-end compiles: test_moe_experts_models, test_attention_sinks).
"""

from __future__ import annotations

import pytest
import torch
from bench_utils import greedy_equal
from bench_utils import hf_models as bench_hf_models
from graph_utils import graph_run_eagerly, needs_interpreter

import rocm_inductor

transformers = pytest.importorskip("transformers")

LAYERS = 2
COMMON = dict(hidden_size=64, num_hidden_layers=LAYERS, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
              vocab_size=256, max_position_embeddings=256, experts_implementation="batched_mm")
#: family -> (config class, model class, config fields, the router kind the match note names)
FAMILIES = {
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM",
                  dict(intermediate_size=128, moe_intermediate_size=32, num_experts=8, num_experts_per_tok=2,
                       norm_topk_prob=True), "softmax_topk k=2, renormalised"),
    "gpt_oss": ("GptOssConfig", "GptOssForCausalLM",
                dict(intermediate_size=32, num_local_experts=8, num_experts_per_tok=2, sliding_window=128),
                "topk_softmax k=2"),
    "glm4_moe": ("Glm4MoeConfig", "Glm4MoeForCausalLM",
                 dict(intermediate_size=128, moe_intermediate_size=32, n_routed_experts=16, n_group=4, topk_group=2,
                      num_experts_per_tok=3, n_shared_experts=1, first_k_dense_replace=0, routed_scaling_factor=2.5,
                      norm_topk_prob=True, partial_rotary_factor=0.5),
                 "sigmoid_grouped k=3, groups 2/4, renormalised, scale 2.5, bias"),
}


def _model(family: str):
    conf_cls, model_cls, fields, _ = FAMILIES[family]
    cfg = getattr(transformers, conf_cls)(**COMMON, **fields)
    cfg._attn_implementation = "eager" if family == "gpt_oss" else "sdpa"  # GPT-OSS's sinks: eager attention
    torch.manual_seed(0)
    model = getattr(transformers, model_cls)(cfg).eval()
    with torch.no_grad():  # biases and routers start at zero in some inits: make every router's choice real
        for name, p in model.named_parameters():
            if "router" in name or name.endswith("gate.weight") or "sinks" in name:
                p.normal_(0, 0.5)
        for name, b in model.named_buffers():
            if "e_score_correction_bias" in name:
                b.normal_(0, 0.1)
    return model, cfg


def _run(family: str, provider: str) -> None:
    hf_models = bench_hf_models()
    model, cfg = _model(family)
    b, max_len, steps, pos = 2, 16, 3, 8
    step_e, (ids, _, _), _ = hf_models.decode_step(model, cfg, b, 1, 0, max_len, "cpu", torch.float32)
    step_c, _, _ = hf_models.decode_step(model, cfg, b, 1, 0, max_len, "cpu", torch.float32)
    rocm_inductor.clear_reports()
    torch._dynamo.reset()
    opts = {"provider": provider, "strict": True}
    with torch.no_grad(), torch._inductor.config.patch(force_disable_caches=True), \
            graph_run_eagerly(enabled=family == "glm4_moe"):
        comp = torch.compile(step_c, backend="rocm_fused", options=opts, fullgraph=True)
        greedy_equal(step_e, comp, ids, pos, b, steps)
    reps = rocm_inductor.reports()
    assert 1 <= len(reps) <= 2, str(reps)  # GPT-OSS's sliding layer may recompile once (its length is an int)
    for r in reps:
        assert r.error is None, r.error
        assert r.count("moe_routing") == LAYERS, str(r)
        assert not [n for n in r.near_misses if n.pass_name == "moe_routing"], str(r)
    notes = [m.note for m in reps.matches if m.pass_name == "moe_routing"]
    assert all(n.startswith(FAMILIES[family][3]) for n in notes), notes
    assert {m.provider for m in reps.matches if m.pass_name == "moe_routing"} == {provider}


@pytest.mark.slow
def test_moe_decode_reference():
    """The reference provider on one family (every family runs through Triton below; the suite's time)."""
    _run("qwen3_moe", "reference")


@pytest.mark.slow
@needs_interpreter
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_moe_decode_triton(family):
    _run(family, "triton")
