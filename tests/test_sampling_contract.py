"""The sampling pass on the pass contract (``passes/contract.py``): one candidate per ``multinomial`` /
``argmax`` in graph order, each ending as a match or a near-miss that the driver files; an argmax without noise
ends silently."""

from __future__ import annotations

import sampling_spellings as sp
import torch
from graph_utils import compile_run

from rocm_inductor.passes.contract import RewritePass
from rocm_inductor.passes.sampling import Chain, SamplingPass, recognise

SAMPLE = "rocm_fused.sample.default"
LOGITS = torch.randn(3, 2, 40, generator=torch.Generator().manual_seed(3))


def test_pass_is_a_rewrite_pass_and_keeps_its_names():
    assert isinstance(SamplingPass(), RewritePass)
    assert SamplingPass.name == "sampling" and SamplingPass.ops == ("sample",)
    assert callable(recognise) and Chain.__module__ == "rocm_inductor.passes.sampling.chain"


def test_draws_in_one_graph_each_end_as_a_match_or_a_near_miss():
    """A greedy argmax (no noise) ends silently; two samplers are rewritten in graph order; the top-p the walk
    stopped at (min_tokens_to_keep = 2) is reported next to its draw's match."""
    plain, stopped = sp.hf_sampler(0.7, 5), sp.hf_sampler(0.9, 5, 0.9, min_tokens_to_keep=2)

    def fn(x):
        return sp.greedy(x), plain(x), stopped(x)

    (g, a, b), seen = compile_run(fn, LOGITS)
    rep = seen[-1].report
    assert seen[-1].after[SAMPLE] == 2 and seen[-1].after["aten.argmax.default"] == 1
    assert [m.op for m in rep.matches] == ["sample", "sample"]
    misses = rep.near_misses
    assert len(misses) == 1 and misses[0].what.startswith("filters above the rewritten draw")
    assert "min_tokens_to_keep = 2" in misses[0].reason
    assert torch.equal(g, LOGITS[:, -1].argmax(-1))
    assert a.shape == b.shape == (3,) and bool(((a >= 0) & (a < 40)).all())
