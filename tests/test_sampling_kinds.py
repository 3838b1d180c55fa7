"""Sampling filters named by kind (passes/sampling/kinds.py) on public spellings the structural reads miss
(tests/sampling_spellings.py ``KIND_SPELLINGS``, sources named there): every one rewritten to one
``rocm_fused::sample`` with no ``topk`` / ``sort`` / ``cumsum`` left, with the parameters its source sets, and
its draws following the exact filtered distribution (chi-square, docs/ops.md's sampling contract); vLLM's
min-p before top-p is taken with its min-p mask as the op's ban; a filter of no kind the op has (HF top-p with
min_tokens_to_keep = 2) is a near-miss with its reason. All spellings share one compiled
graph, run eagerly after our passes (no Inductor code generation: the CI budget). Reference provider on CPU."""

from __future__ import annotations

import math

import sampling_spellings as S
import torch
from graph_utils import op_counts
from sampling_checks import chi2_pvalue

from rocm_inductor.passes.manager import PassManager
from rocm_inductor.passes.sampling.kinds import _filters
from rocm_inductor.providers.reference_sampling import exact_distribution
from rocm_inductor.report import last_report

LOGITS = torch.tensor([2.0, 1.5, 1.0, 0.6, 0.2, -0.5, -1.0, -1.5])
ROWS = 400  # draws per 2-D spelling: chi-square bins pooled to >= 5 expected
ONE_D = ("litgpt_sample_1d", "gpt_oss_mul_temperature")
NAMES = sorted(S.KIND_SPELLINGS)
SAMPLE = torch.ops.rocm_fused.sample.default
FILTERS = ("aten.topk.default", "aten.sort.default", "aten.sort.stable", "aten.cumsum.default")


class _Stop(Exception):
    """Raised after our passes: the test runs the rewritten post-grad graph itself (Inductor's C++ code
    generation would cost minutes of the CI budget and is covered by test_spelling_corpus.py)."""


def _rewrite_all():
    """Every KIND_SPELLINGS entry, vLLM's min-p-before-top-p and HF top-p with min_tokens_to_keep = 2, in one
    function of one input each, through Dynamo, AOTAutograd and our passes; returns the rewritten graph's
    outputs run eagerly, its op counts, the sample ops' arguments (graph order) and the report."""
    fns = [S.KIND_SPELLINGS[n][0] for n in NAMES]
    fns += [S.vllm_min_p_top_p(), S.hf_sampler(top_p=0.5, min_tokens_to_keep=2)]
    xs = [LOGITS.expand(1 if n in ONE_D else ROWS, 1, -1).contiguous() for n in NAMES] + \
        [LOGITS.expand(ROWS, 1, -1).contiguous(), LOGITS.expand(ROWS, 1, -1).contiguous() * 1]
    seen = []
    orig = PassManager.__call__

    def wrapped(self, graph, **kw):
        orig(self, graph, **kw)
        seen.append((torch.fx.GraphModule(torch.nn.Module(), graph), last_report()))
        raise _Stop

    torch._dynamo.reset()
    PassManager.__call__ = wrapped
    try:
        with torch._inductor.config.patch(force_disable_caches=True), torch.no_grad():
            torch.compile(lambda *a: tuple(f(x) for f, x in zip(fns, a, strict=True)), backend="rocm_fused",
                          options={"provider": "reference", "strict": True}, dynamic=False)(*xs)
    except Exception as e:  # Dynamo wraps _Stop (strict: no fallback compile)
        assert seen, e
    finally:
        PassManager.__call__ = orig
        torch._dynamo.reset()
    (gm, report), = seen
    with torch.no_grad():
        out = gm(*xs)
    return out, op_counts(gm.graph), [n.args for n in gm.graph.nodes if n.target is SAMPLE], report


def test_kind_spellings_rewritten_fully():
    out, counts, args, report = _rewrite_all()
    near = [f"{m.what}: {m.reason}" for m in report.near_misses if m.pass_name == "sampling"]
    # every draw rewritten; the one filter left (HF top-p keeping 2 tokens: no kind of the op) has its reason
    assert counts["rocm_fused.sample.default"] == len(NAMES) + 2, (counts, near)
    assert counts["aten.topk.default"] == 0 and counts["aten.sort.default"] + counts["aten.sort.stable"] == 1, counts
    assert counts["aten.cumsum.default"] == 1, counts
    assert len(near) == 1 and "min_tokens_to_keep = 2" in near[0] and "no top-k / top-p / min-p kind" in near[0], near
    assert sum("named by kind" in m.note for m in report.matches) >= len(NAMES) - 1, [m.note for m in report.matches]
    # the parameters each source sets, read off the graph (the op's args: T, k, p, min_p); vLLM's min-p before
    # top-p keeps its min-p mask as the op's ban (applied first, exact) with top-p 0.6; min_tokens_to_keep = 2
    # leaves its top-p in Inductor
    got = sorted((round(a[3], 6), a[5], round(a[7], 6), round(a[9], 6)) for a in args)
    # (vLLM v0's min-p, a max.dim mask without topk / sort, is the op's ban: exact, its mask left to Inductor)
    want = sorted([(round(t, 6), k, round(p, 6), round(mp, 6)) for t, k, p, mp, _ in
                   (S.KIND_SPELLINGS[n][1] if n != "vllm_min_p" else (1.0, 0, 1.0, 0.0, True) for n in NAMES)]
                  + [(1.0, 0, 0.6, 0.0), (1.0, 0, 1.0, 0.0)])
    assert got == want, ([g for g in got if g not in want], [w for w in want if w not in got])
    vllm = _filters(LOGITS.double()[None], 1.0, 0, 0.6, 0.3, "vllm")[0]
    assert chi2_pvalue(out[len(NAMES)].reshape(-1).long(), vllm) > 1e-4
    for name, tok in zip(NAMES, out[:len(NAMES)], strict=True):
        t, k, p, mp, kf = S.KIND_SPELLINGS[name][1]
        tok = tok.reshape(-1).long()
        assert bool(((tok >= 0) & (tok < LOGITS.numel())).all()), name
        if name not in ONE_D:  # chi-square of ROWS draws against the exact filtered distribution
            assert chi2_pvalue(tok, exact_distribution(LOGITS, t, k, p, mp, kf)) > 1e-4, name
        else:  # one draw per call: in the kept set
            assert float(exact_distribution(LOGITS, t, k, p, mp, kf)[tok[0]]) > 0, name
    assert math.isfinite(sum(float(x.sum()) for x in out))
