"""Single small-M GEMMs of the gemm_merge pass against model code their first tests did not cover.

Each bug found by trying to break the single-GEMM takeover (``passes/gemm_merge.py: _single``,
``providers/triton/gemm_merge.py: measured_single``) has a test here that failed before the fix; the cases
that held and are cheap are kept too. CPU: the Triton provider under the interpreter, a fake measured table
through ``ROCM_FUSED_GEMM_TABLE`` with device ``"cpu"`` (as ``test_gemm_merge_single.py``); tiny shapes
(M <= 33, K = 16), strict compiles (any raise fails). Outputs are checked against eager at float32 rounding
(the GEMM contract of docs/ops.md: float32 accumulation, one rounding).
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
import torch.nn.functional as F
from graph_utils import capture, compile_run, needs_interpreter

from rocm_inductor.ops.gemm_merge import SINGLE_REFUSED, SINGLE_SLOWER
from rocm_inductor.providers.triton import gemm_merge as gm

#: CPU tests: Triton under the interpreter and CPU-device tables (on a GPU host the gpu-marked tests cover it).
pytestmark = needs_interpreter

MM, ADDMM, MERGED = "aten.mm.default", "aten.addmm.default", "rocm_fused.merged_gemm.default"
K, N = 16, 24
OPTS = {"passes": {"gemm_merge": True}, "provider": "triton"}


def _table(tmp_path, monkeypatch, *entries):
    path = tmp_path / f"table{len(list(tmp_path.iterdir()))}.json"  # a new path: load_table caches per path
    path.write_text(json.dumps({"entries": list(entries)}))
    monkeypatch.setenv("ROCM_FUSED_GEMM_TABLE", str(path))


def _entry(k=K, n=N, m=32, ours=1.0, sep=2.0, dtype="float32"):
    """A measured single (K, N) at bucket M on device "cpu": ours wins (1.0 vs 2.0 us) unless ``ours`` says."""
    cfg = dataclasses.asdict(gm.Config(16, 16, 64, 1, 4, 3, True))
    return dict(device="cpu", m=m, k=k, ns=[n], dtype=dtype, config=cfg, ours_us=ours, separate_us=sep)


def _run(fn, *args, **kw):
    out, seen = compile_run(fn, *args, options=OPTS, **kw)
    (c,) = seen
    with torch.no_grad():
        eager = fn(*args)
    out, eager = (out, eager) if isinstance(eager, tuple) else ((out,), (eager,))
    for o, e in zip(out, eager, strict=True):
        assert o.shape == e.shape and o.dtype == e.dtype
        torch.testing.assert_close(o, e, rtol=1e-5, atol=1e-5)  # float32, K = 16: rounding only
    return c


def _singles(c) -> list[str]:
    return [m.note for m in c.report.matches if m.note.startswith("single GEMM")]


def _slower(c) -> list[str]:
    return [n.reason for n in c.report.near_misses if SINGLE_SLOWER in n.reason]


def _w(*shape):
    return torch.randn(*shape)


def test_single_next_to_a_gemm_the_op_cannot_express(tmp_path, monkeypatch):
    """Bug: an o_proj-like ``mm`` whose activation also feeds an ``addmm`` with beta != 1 (refused: the op
    computes beta = alpha = 1) was never offered as a single: not taken where the table measured ours faster,
    and silent where it measured cuBLAS faster (a measured single must never be silent)."""
    torch.manual_seed(0)
    w, w2, b = _w(N, K), _w(8, K), _w(8)

    def fn(x):
        return F.linear(x, w), torch.addmm(b, x, w2.t(), beta=0.5)

    x = torch.randn(4, K)
    _table(tmp_path, monkeypatch, _entry())
    c = _run(fn, x)
    assert c.after[MERGED] == 1 and c.after.get(MM, 0) == 0 and c.after[ADDMM] == 1
    assert _singles(c) == [f"single GEMM, N {N}, bucket M=4"]
    assert any("beta=0.5" in n.reason for n in c.report.near_misses)  # the addmm is still reported
    _table(tmp_path, monkeypatch, _entry(ours=3.0))
    c = _run(fn, x)
    assert c.after[MM] == 1 and not _singles(c) and len(_slower(c)) == 1


def test_tied_lm_head_and_one_weight_read_by_two_singles(tmp_path, monkeypatch):
    """lm_head sharing the embedding weight (the same parameter) is a single; one weight read by two singles
    of different M: each decided by its own bucket (M=4 measured faster; M=9, in the M=32 bucket, measured
    slower: a near-miss)."""
    torch.manual_seed(0)
    emb = torch.nn.Embedding(40, K)
    _table(tmp_path, monkeypatch, _entry(n=40))
    with torch.no_grad():  # the gather outside the graph: CPU Inductor's C++ for it costs ~7 s cold
        h = emb(torch.randint(0, 40, (2, 3)))
    c = _run(lambda h: F.linear(h, emb.weight), h)
    assert c.after[MERGED] == 1 and _singles(c) == ["single GEMM, N 40, bucket M=6"]
    w = _w(N, K)
    _table(tmp_path, monkeypatch, _entry(m=8), _entry(m=32, ours=3.0))
    c = _run(lambda x, y: (F.linear(x, w), F.linear(y, w)), torch.randn(4, K), torch.randn(9, K))
    assert c.after[MERGED] == 1 and c.after[MM] == 1 and len(_singles(c)) == 1 and len(_slower(c)) == 1
    assert "M=32" in _slower(c)[0]


def test_weight_views_and_layouts(tmp_path, monkeypatch):
    """Row/column slices and a strided-row view of a larger weight are read in place (K stride 1); a (K, N)
    parameter (``x @ w``: its (N, K) view has K stride N) is refused by the provider and left as it was, reported
    when measured (ours faster: the layout named), silent when unmeasured."""
    torch.manual_seed(0)
    big, wkn, bs = _w(48, 2 * K), _w(K, N), _w(2 * N)
    _table(tmp_path, monkeypatch, _entry())
    x = torch.randn(4, K)

    def views(x, y, z):  # no pointwise ops in these graphs: CPU Inductor's first C++ compile costs ~6 s cold
        return F.linear(x, big[:N, :K]), F.linear(y, big[:N, K:]), F.linear(z, big[::2, :K], bs[::2])

    c = _run(views, x, torch.randn(2, K), torch.randn(3, K))
    assert c.after[MERGED] == 3 and c.after.get(MM, 0) + c.after.get(ADDMM, 0) == 0
    c = _run(lambda x: x @ wkn, x)
    assert c.after[MM] == 1
    (miss,) = c.report.near_misses  # bug: was silent although the table measured ours faster
    assert SINGLE_REFUSED in miss.reason and "not contiguous along K" in miss.reason
    _table(tmp_path, monkeypatch)
    c = _run(lambda x: x @ wkn, x)
    assert c.after[MM] == 1 and not c.report.near_misses  # unmeasured: silent


def test_measured_slower_single_with_a_kn_weight_is_not_silent(tmp_path, monkeypatch):
    """Bug: ``x @ w`` of a (K, N) parameter where the table measured cuBLAS faster was silent: the provider's
    layout refusal (K stride != 1) came before the measured loss, and the pass reports only the latter."""
    torch.manual_seed(0)
    wkn = _w(K, N)
    _table(tmp_path, monkeypatch, _entry(ours=3.0))
    c = _run(lambda x: x @ wkn, torch.randn(4, K))
    assert c.after[MM] == 1 and len(_slower(c)) == 1 and "3.00 vs cuBLAS 2.00 us" in _slower(c)[0]


def test_chains_and_a_single_next_to_a_merge(tmp_path, monkeypatch):
    """o_proj -> down_proj (a single reads the previous single's output, 3-D activations) and q/k/v merged
    next to an o_proj single and a single reading a merge output (v -> w_v2)."""
    torch.manual_seed(0)
    wo, wd = _w(N, K), _w(8, N)
    wq, wk, wv, wo2, wv2 = _w(16, K), _w(8, K), _w(8, K), _w(K, 16), _w(K, 8)
    _table(tmp_path, monkeypatch, _entry(), _entry(k=N, n=8), _entry(k=16, n=K), _entry(k=8, n=K))
    x = torch.randn(2, 3, K)
    c = _run(lambda x: F.linear(F.linear(x, wo), wd), x)
    assert c.after[MERGED] == 2 and len(_singles(c)) == 2

    def attn(x):
        q, k, v = F.linear(x, wq), F.linear(x, wk), F.linear(x, wv)
        return torch.matmul(q, wo2.t()), F.linear(v, wv2), k

    c = _run(attn, x)
    assert c.after[MERGED] == 3 and c.after.get(MM, 0) == 0 and len(_singles(c)) == 2


def test_bucket_edge_and_symbolic_m(tmp_path, monkeypatch):
    """M = 32 is a bucket, 33 is not (silent); symbolic M bounded by mark_dynamic (also B*S of two bounded
    dims) takes every entry up to its bound: one measured loss at M=8 makes it a near-miss naming M=8;
    unbounded M is left silently."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(K, N).eval()
    _table(tmp_path, monkeypatch, _entry(m=8), _entry(m=64))
    assert _singles(_run(lin, torch.randn(32, K))) and _run(lin, torch.randn(33, K)).after[ADDMM] == 1

    def bounded(*shape, maxes):
        x = torch.randn(*shape)
        for d, mx in enumerate(maxes):
            torch._dynamo.mark_dynamic(x, d, min=1, max=mx) if mx else torch._dynamo.mark_dynamic(x, d)
        return x

    _table(tmp_path, monkeypatch, _entry(m=8), _entry(m=32))
    c = _run(lin, bounded(2, 3, K, maxes=(4, 8)))
    assert c.after[MERGED] == 1 and "(<= 32)" in _singles(c)[0]
    _table(tmp_path, monkeypatch, _entry(m=8, ours=3.0), _entry(m=32))
    c = _run(lin, bounded(5, K, maxes=(32,)))
    assert c.after[ADDMM] == 1 and "at M=8" in _slower(c)[0]
    c = _run(lin, bounded(5, K, maxes=(None,)))
    assert c.after[ADDMM] == 1 and not c.report.near_misses


@pytest.mark.parametrize("mode", ["freezing", "inference_mode"])
def test_freezing_and_inference_mode(tmp_path, monkeypatch, mode):
    """Inductor freezing (weights as constants; CPU weight prepacking off so the graph keeps the ``addmm``
    a GPU graph has) and ``torch.inference_mode``: the single is taken the same way, output as eager."""
    import torch._inductor.config as ic

    torch.manual_seed(0)
    lin = torch.nn.Linear(K, N).eval()
    _table(tmp_path, monkeypatch, _entry())
    x = torch.randn(4, K)
    torch._dynamo.reset()
    with capture() as seen, torch.inference_mode() if mode == "inference_mode" else torch.no_grad(), \
            ic.patch({"freezing": mode == "freezing", "cpp.weight_prepack": False}):
        out = torch.compile(lin, backend="rocm_fused", options={**OPTS, "strict": True})(x)
        eager = lin(x)
    (c,) = seen
    assert c.after[MERGED] == 1 and _singles(c) == [f"single GEMM, N {N}, bucket M=4, bias 1/1"]
    torch.testing.assert_close(out, eager, rtol=1e-5, atol=1e-5)
