"""gpt-fast's ``decode_one_token`` (its model.py and generate.py, condensed in gpt_fast_model.py) compiled on a
tiny random-weight model: every RMSNorm, both RoPEs and the sampling draw rewritten (issue 15); tokens drawn from
the returned distribution, which stays Inductor's and equals eager's."""

from __future__ import annotations

import gpt_fast_model as G
import pytest
import torch
from graph_utils import compile_run

B = 512  # identical rows: one call draws 512 tokens of one distribution


@pytest.mark.slow
def test_decode_one_token_rewritten_and_distribution():
    torch.manual_seed(0)
    cfg = G.ModelArgs()
    model = G.Transformer(cfg).to(torch.bfloat16)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3)
    model.setup_caches(B, 64)
    x = torch.full((B, 1), 7, dtype=torch.int64)
    pos = torch.tensor([5])

    def step(x, pos):
        return G.decode_one_token(model, x, pos, temperature=0.8, top_k=10)

    (tok, probs), seen = compile_run(step, x, pos)
    (g,) = seen
    assert g.after["rocm_fused.rms_norm.default"] + g.after["rocm_fused.fused_add_rms_norm.default"] \
        == 2 * cfg.n_layer + 1
    assert g.after["aten.rsqrt.default"] == 0
    assert g.after["rocm_fused.rope.default"] == cfg.n_layer  # q and k of a layer in one op
    assert g.after["rocm_fused.sample.default"] == 1
    assert not g.report.near_misses, g.report.near_misses
    sample = next(m for m in g.report.matches if m.op == "sample")
    assert "escapes" in sample.note
    for c in model.layers:  # the compiled call wrote position 5 of the caches: start eager from the same state
        c.attention.kv_cache.k_cache.zero_()
        c.attention.kv_cache.v_cache.zero_()
    with torch.no_grad():
        etok, eprobs = step(x, pos)
    assert tok.shape == etok.shape == (B, 1) and tok.dtype == etok.dtype == torch.int32
    torch.testing.assert_close(probs.float(), eprobs.float(), atol=2e-2, rtol=0)  # rounding of bf16 GEMMs
    p = eprobs[0].double()
    assert bool((p[tok.reshape(-1).long()] > 0).all())  # only top-k tokens are drawn
    f = torch.bincount(tok.reshape(-1).long(), minlength=p.numel()).double() / B
    assert float((f - p).abs().max()) < 0.1  # 512 draws: a frequency's std <= 0.022; 0.1 is 4.5 sigma
