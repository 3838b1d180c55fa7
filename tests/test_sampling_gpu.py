"""Sampling on the GPU (run by the lead on the H200): chi-square per provider, reduce-overhead capture/replay."""

from __future__ import annotations

import pytest
import sampling_spellings as sp
import torch
from scipy.stats import chisquare

from rocm_inductor import PlatformDispatch
from rocm_inductor.providers.reference_sampling import exact_distribution

pytestmark = pytest.mark.gpu


def _providers():
    out = ["triton"]
    plat = PlatformDispatch.platform()
    for name in ("flashinfer", "amd_flashinfer"):
        from rocm_inductor.providers import get_provider

        if get_provider(name).available(plat) is None:
            out.append(name)
    return out


@pytest.mark.parametrize("t,k,p", [(0.7, 50, 0.9), (1.0, 0, 0.8), (1.3, 5, 1.0)])
def test_chi_square_on_device(t, k, p):
    v = 1000
    logits = torch.randn(v, generator=torch.Generator().manual_seed(3)) * 2
    exact = exact_distribution(logits, t, k, p)
    x = logits.cuda().expand(50_000, v).contiguous()
    for prov in _providers():
        tok = torch.ops.rocm_fused.sample(x, torch.tensor([11], device="cuda"), None, t, None, k, None, p, None,
                                          0.0, None, False, True, False, prov).cpu()
        counts = torch.bincount(tok, minlength=v).double()
        support = exact > 0
        assert counts[~support].sum() == 0, prov
        # pool expected counts < 5 into one bin for the test's validity
        e = exact[support] * counts.sum()
        o = counts[support]
        small = e < 5
        if small.any():
            e = torch.cat([e[~small], e[small].sum()[None]])
            o = torch.cat([o[~small], o[small].sum()[None]])
        assert chisquare(o.numpy(), e.numpy()).pvalue > 1e-4, prov


def test_reduce_overhead_replays_draw_fresh_tokens():
    """Model-free capture/replay: each replay draws new tokens; the same manual_seed gives the same ones."""
    torch._dynamo.reset()
    # reduce-overhead's pieces as options (the pass is named explicitly so the test holds whatever the policy)
    fn = torch.compile(sp.hf_sampler(0.8, 50, 0.9), backend="rocm_fused", fullgraph=True,
                       options={"cudagraphs": True, "passes": {"sampling": True}})
    logits = torch.zeros(8, 1, 32000, device="cuda")
    with torch.no_grad():
        for _ in range(3):  # warm up + record
            fn(logits)
        torch.manual_seed(0)
        a = [fn(logits).clone() for _ in range(6)]
        torch.manual_seed(0)
        b = [fn(logits).clone() for _ in range(6)]
    assert len({tuple(t.tolist()) for t in a}) == 6, "replays repeated their tokens"
    assert all(torch.equal(x, y) for x, y in zip(a, b)), "same seed, different tokens"
    from rocm_inductor.report import reports

    assert reports().count("sample") >= 1


def test_dynamic_batch_hf_chain_compiles_on_device():
    """The chain that crashed Inductor's SplitScan codegen on the H200 (torch 2.11, dynamic batch)."""
    torch._dynamo.reset()
    fn = torch.compile(sp.hf_sampler(0.7, 50, 0.9), backend="rocm_fused", dynamic=True,
                       options={"passes": {"sampling": True}})
    with torch.no_grad():
        for b in (1, 16, 64):
            out = fn(torch.randn(b, 1, 151936, device="cuda"))
            assert out.shape == (b,) and int(out.max()) < 151936


def test_split_rows_large_vocab_chi_square_on_device():
    """V = 151936: each row is split over several programs (triton provider); 20k draws in 10 launches of
    2000 rows (fresh seeds) follow the exact top-k/top-p distribution; top_k = 1 is the argmax."""
    v = 151936
    logits = torch.randn(v, generator=torch.Generator().manual_seed(5)) * 2
    logits[:8] += 6.0  # a small support for the filters to cut
    exact = exact_distribution(logits, 0.9, 6, 0.95)
    x = logits.cuda().expand(2000, v).contiguous()
    tok = torch.cat([torch.ops.rocm_fused.sample(x, torch.tensor([100 + i], device="cuda"), None, 0.9, None, 6,
                                                 None, 0.95, None, 0.0, None, False, True, False, "triton").cpu()
                     for i in range(10)])
    counts = torch.bincount(tok, minlength=v).double()
    support = exact > 0
    assert counts[~support].sum() == 0
    assert chisquare(counts[support].numpy(), (exact[support] * counts.sum()).numpy()).pvalue > 1e-4
    top1 = torch.ops.rocm_fused.sample(x[:4], torch.tensor([1], device="cuda"), None, 1.0, None, 1, None, 1.0,
                                       None, 0.0, None, False, True, False, "triton")
    assert (top1.cpu() == int(logits.argmax())).all()


def test_default_policy_dynamic_chain_uses_triton_on_device():
    """Default CUDA policy (sampling on, Triton first) on the HF chain with dynamic=True: Dynamo lifts the
    float temperature into a 0-d CPU input, which the Triton sampler must move to the GPU (this crashed
    once on the H200); tokens stay in range for B = 1, 16, 64 and the report names the Triton provider."""
    from rocm_inductor.report import clear_reports, reports

    torch._dynamo.reset()
    clear_reports()
    fn = torch.compile(sp.hf_sampler(0.7, 50, 0.9), backend="rocm_fused", dynamic=True)
    with torch.no_grad():
        for b in (1, 16, 64):
            out = fn(torch.randn(b, 1, 151936, device="cuda"))
            assert out.shape == (b,) and 0 <= int(out.min()) and int(out.max()) < 151936
    assert reports().count("sample") >= 1
    assert {m.provider for m in reports().matches if m.op == "sample"} == {"triton"}


def test_dynamic_min_p_chain_fused_on_device():
    """dynamic=True lifts HF's min_p into a 0-d CPU float input: the default CUDA policy fuses the whole chain
    (T, top-k, top-p, min-p) into one Triton ``sample`` that reads min_p on the GPU; the draws of a
    50,000-row batch follow HF's exact distribution, and a new min_p value runs without a recompile."""
    from rocm_inductor.report import clear_reports, reports

    v, t, k, p = 1000, 0.9, 50, 0.9
    logits = torch.randn(v, generator=torch.Generator().manual_seed(5)) * 2
    holder = type("Warper", (), {})()

    def fn(x):
        return sp.hf_sampler(t, k, p, min_p=holder.min_p)(x)

    torch._dynamo.reset()
    clear_reports()
    cf = torch.compile(fn, backend="rocm_fused", dynamic=True)
    with torch.no_grad():
        for mp in (0.2, 0.05):
            holder.min_p = mp
            tok = cf(logits.cuda().expand(50_000, 1, v).contiguous()).cpu()
            exact = exact_distribution(logits, t, k, p, min_p=mp)
            counts = torch.bincount(tok, minlength=v).double()
            support = exact > 0
            assert counts[~support].sum() == 0, mp
            e, o = exact[support] * counts.sum(), counts[support]
            small = e < 5
            if small.any():
                e, o = torch.cat([e[~small], e[small].sum()[None]]), torch.cat([o[~small], o[small].sum()[None]])
            assert chisquare(o.numpy(), e.numpy()).pvalue > 1e-4, mp
    assert len(reports()) == 1  # the second min_p reused the graph
    assert {m.provider for m in reports().matches if m.op == "sample"} == {"triton"}
    assert not [n for n in reports().near_misses if n.pass_name == "sampling"], reports().near_misses


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_topk_path_draws_the_general_paths_tokens_on_device(dtype, sampler_knobs):
    """B = 64, V = 128256 (bf16: many exact ties), per-row T (row 0 greedy) / top-p / min-p and a ban mask:
    the two-launch top-k path keeps the general path's set and draws its tokens (same per-column noise), also
    through the whole-row fallback (group_cap lowered), and is a graph-capturable sequence of launches."""
    from rocm_inductor.providers.triton import sampling as S

    b, v = 64, 128256
    g = torch.Generator(device="cuda").manual_seed(4)
    x = (torch.randn(b, v, device="cuda", generator=g) * 3).to(dtype)
    x[3] = 0.0                                            # one value everywhere: ties beyond any cap
    kw = dict(t_rows=torch.linspace(0.0, 1.5, b, device="cuda"), p_rows=torch.linspace(0.5, 1.0, b, device="cuda"),
              mp_rows=torch.full((b,), 0.02, device="cuda"), ban=torch.arange(v, device="cuda") % 11 == 0)

    def run(seed=7):
        return S.sample(x, torch.tensor([seed], device="cuda"), kw["t_rows"], 1.0, None, 50, kw["p_rows"], 1.0,
                        kw["mp_rows"], 0.0, kw["ban"], False, True)

    fast = run()
    sampler_knobs(fast_topk=False)
    general = run()
    sampler_knobs(fast_topk=True)
    assert torch.equal(fast, general)
    cap = S.knobs.current().group_cap
    sampler_knobs(group_cap=8)
    assert torch.equal(run(), general)
    sampler_knobs(group_cap=cap)
    assert not torch.equal(run(8), fast)
    graph = torch.cuda.CUDAGraph()
    seed = torch.tensor([7], device="cuda")
    with torch.cuda.graph(graph):
        out = S.sample(x, seed, kw["t_rows"], 1.0, None, 50, kw["p_rows"], 1.0, kw["mp_rows"], 0.0, kw["ban"],
                       False, True)
    graph.replay()
    assert torch.equal(out, fast)
    assert int(out[0]) == int(torch.argmax(x[0].float().masked_fill(kw["ban"], -float("inf"))))


def test_topk_path_wide_ties_on_device():
    """A row of one value with k = 50 keeps every token (HF keeps ties at the k-th value): draws spread over V."""
    v = 151936
    x = torch.zeros(2000, v, device="cuda")
    tok = torch.ops.rocm_fused.sample(x, torch.tensor([3], device="cuda"), None, 0.7, None, 50, None, 0.9, None,
                                      0.0, None, False, True, False, "triton")
    assert int(tok.max()) < v and tok.unique().numel() > 1900
