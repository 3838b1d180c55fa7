"""Real HF models (tiny configs, random weights, no download) compiled with backend="rocm_fused".

Every norm of every layer must be rewritten (count from the config), logits within tolerance of eager, and
greedy tokens equal to eager's for 8 decode steps. CPU: the reference provider is forced. Qwen2's bf16 prefill
compiles end to end (its only model test); the decodes and the other families run their rewritten graphs eagerly
(``graph_run_eagerly``: the passes and counts are a real compile's; their end-to-end compiles are
test_attention_models' and test_glu_gemm's, the dynamic-length ones test_rope_models').
"""

from __future__ import annotations

import pytest
import torch
from graph_utils import capture, graph_run_eagerly
from tiny_hf import LAYERS, tiny_causal_lm

transformers = pytest.importorskip("transformers")

RMS = "rocm_fused.rms_norm.default"
FUSED = "rocm_fused.fused_add_rms_norm.default"


def _model(name: str):
    return tiny_causal_lm(name, perturb_norms=name == "gemma")


#: (fused add + norm, plain norm) per model: pre-norm decoders fuse every norm but layer 0's input norm;
#: Qwen3 adds a per-head q_norm and k_norm in every layer.
EXPECTED = {
    "llama": (2 * LAYERS, 1),
    "qwen2": (2 * LAYERS, 1),
    "qwen3": (2 * LAYERS, 1 + 2 * LAYERS),
    "gemma": (2 * LAYERS, 1),
}


@pytest.fixture(autouse=True)
def _eager_graphs(request):
    with graph_run_eagerly(enabled=request.node.callspec.params["name"] != "qwen2"):
        yield


def _compiled(model):
    return torch.compile(lambda ids: model(input_ids=ids, use_cache=False).logits, backend="rocm_fused",
                         options={"provider": "reference", "strict": True})


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_norm_rewritten_logits_and_greedy_tokens(name):
    torch.manual_seed(0)
    model = _model(name).eval()
    ids = torch.randint(0, 128, (2, 12))

    # bf16 prefill: counts and logits
    mb = model.to(torch.bfloat16)
    with capture() as seen, torch.no_grad():
        logits = _compiled(mb)(ids)
        eager = mb(input_ids=ids, use_cache=False).logits
    fused = sum(g.after[FUSED] for g in seen)
    plain = sum(g.after[RMS] for g in seen)
    assert (fused, plain) == EXPECTED[name], [str(g.report) for g in seen]
    assert sum(g.after["aten.rsqrt.default"] for g in seen) == 0
    assert not any(g.report.near_misses for g in seen)
    mf = model.float()
    with torch.no_grad():
        ref = mf(input_ids=ids, use_cache=False).logits.double()
    err = lambda a: float((a.double() - ref).abs().max() / ref.abs().max())
    assert err(logits) <= 1.5 * err(eager) + 2 ** -8, (err(logits), err(eager))

    # fp32 greedy decode, 8 steps, growing sequence: the sequence dim is dynamic from the start (one compile; run
    # eagerly for every family: the dynamic-length end-to-end compiles are test_rope_models')
    torch._dynamo.reset()
    step = _compiled(mf)
    seq_ours, seq_eager = ids.clone(), ids
    torch._dynamo.mark_dynamic(seq_ours, 1)
    with torch.no_grad(), graph_run_eagerly():
        for _ in range(8):
            nxt = step(seq_ours)[:, -1].argmax(-1, keepdim=True)
            seq_ours = torch.cat([seq_ours, nxt], 1)
            nxt_e = mf(input_ids=seq_eager, use_cache=False).logits[:, -1].argmax(-1, keepdim=True)
            seq_eager = torch.cat([seq_eager, nxt_e], 1)
    assert torch.equal(seq_ours, seq_eager)
