"""norm_gemm on real model code: tiny HF Llama / Qwen3 / Gemma (transformers configs, random weights, 2 layers) and
the gpt-fast style decoder, compiled with backend="rocm_fused" on CPU (reference provider).

Per layer the input_layernorm (plain RMSNorm in layer 0, residual add + RMSNorm after it) folds into q/k/v and the
post_attention_layernorm into gate/up: 2 ``rms_norm_gemm`` per layer, no ``merged_gemm`` left. The final norm keeps
its own op (lm_head is an unmeasured single GEMM on CPU: no merged_gemm to fold into). Qwen3's per-head q/k norms
read the projections' outputs, not their input: untouched. gpt-fast's ``wqkv`` is one GEMM (unmeasured single): only
``ffn_norm`` -> ``w1``/``w3`` folds. Logits within tolerance of eager. The rewritten graphs run eagerly
(``graph_run_eagerly``: the passes and counts are a real compile's; every family's end-to-end compile is elsewhere:
test_attention_models, test_glu_gemm, test_rms_norm_models).
"""

from __future__ import annotations

import pytest
import torch
from graph_utils import capture, graph_run_eagerly
from test_gemm_merge_models import GptFast
from tiny_hf import LAYERS, tiny_causal_lm

transformers = pytest.importorskip("transformers")

FOLD, MERGED = "rocm_fused.rms_norm_gemm.default", "rocm_fused.merged_gemm.default"


def _run(fn, *args):
    torch._dynamo.reset()
    with graph_run_eagerly(), capture() as seen, torch.no_grad():
        out = torch.compile(fn, backend="rocm_fused", options={
            "provider": "reference", "strict": True, "passes": {"gemm_merge": True, "norm_gemm": True}})(*args)
    return out, seen


def _rel(out, eager):
    return float((out.float() - eager.float()).abs().max() / eager.float().abs().max())


@pytest.mark.slow
@pytest.mark.parametrize("name", ["llama", "qwen3", "gemma"])
def test_hf_norms_fold_into_the_projections(name):
    torch.manual_seed(0)
    model = tiny_causal_lm(name, intermediate_size=96).eval()
    ids = torch.randint(0, 128, (2, 3))
    fn = lambda ids: model(input_ids=ids, use_cache=False).logits  # noqa: E731
    out, seen = _run(fn, ids)
    (c,) = seen
    assert c.after[FOLD] == 2 * LAYERS and c.after.get(MERGED, 0) == 0
    notes = sorted(m.note.split(" in one op")[0] for m in c.report.matches if m.op == "rms_norm_gemm")
    qkv = ["RMSNorm -> 3 GEMMs (N 64/32/32)"] + ["add + RMSNorm -> 3 GEMMs (N 64/32/32)"] * (LAYERS - 1)
    assert notes == sorted(qkv + ["add + RMSNorm -> 2 GEMMs (N 96/96)"] * LAYERS)
    with torch.no_grad():
        eager = fn(ids)
    assert _rel(out, eager) <= 1e-5


@pytest.mark.slow
def test_gpt_fast_ffn_norm_folds_into_w1_w3():
    torch.manual_seed(0)
    model = GptFast().eval()
    ids = torch.randint(0, 128, (2, 3))
    out, seen = _run(model, ids)
    (c,) = seen
    assert c.after[FOLD] == LAYERS and c.after.get(MERGED, 0) == 0
    assert all(m.note.startswith("RMSNorm -> 2 GEMMs (N 96/96)") or m.note.startswith("add + RMSNorm -> 2 GEMMs")
               for m in c.report.matches if m.op == "rms_norm_gemm")
    with torch.no_grad():
        eager = model(ids)
    assert _rel(out, eager) <= 1e-5
