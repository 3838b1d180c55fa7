"""The window a level-2 compile measures (``rocm_inductor/tuning/window.py``): a candidate's region plus the
neighbours Inductor would fuse with it, cut out as stand-alone modules before and after the rewrite."""

from __future__ import annotations

import pickle

import pytest
import torch

from rocm_inductor import explain
from rocm_inductor.passes.rms_norm import RMSNormPass
from rocm_inductor.tuning import measure, window


def _windows(monkeypatch, fn, *args, providers=("reference",)):
    """Compile ``fn`` (reference provider) and cut the window of every RMSNorm candidate at its gate."""
    seen = []
    gate = RMSNormPass.gate

    def spy(self, graph, ctx, cand, params):
        choice = gate(self, graph, ctx, cand, params)
        before = [n.name for n in graph.nodes]
        seen.append(window.cut(graph, self, ctx, cand, params, providers, "rms_norm"))
        assert [n.name for n in graph.nodes] == before  # the graph being compiled is left alone
        return choice

    monkeypatch.setattr(RMSNormPass, "gate", spy)
    monkeypatch.setattr(RMSNormPass, "prepare", lambda self, graph, ctx: None)  # discovery: through the gate
    rep = explain(fn, *args, dry_run=True, options={"provider": "reference", "strict": True})  # stop after passes
    return seen, rep


def _norm(s, w):
    return s / torch.sqrt(s.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def toy(x, r, w, wm):
    h = x * 2.0  # a pointwise producer: fused by Inductor
    s = h + r
    y = _norm(s, w)
    z = torch.sigmoid(y) * y  # pointwise consumers: fused by Inductor
    return z @ wm, s  # the GEMM is no neighbour


def _args():
    torch.manual_seed(0)
    return [torch.randn(4, 64), torch.randn(4, 64), torch.randn(64), torch.randn(64, 32)]


def test_window_holds_the_norm_and_its_fusible_neighbours(monkeypatch):
    (win,), rep = _windows(monkeypatch, toy, *_args())
    assert rep.count("fused_add_rms_norm") == 1
    base = [str(n.target) for n in win.base.graph.nodes if n.op == "call_function"]
    assert "aten.rsqrt.default" in base and "aten.mean.dim" in base and "aten.mm.default" not in base
    assert base.count("aten.sigmoid.default") == 1 and base.count("aten.mul.Tensor") >= 3  # x*2, norm, gate
    assert not any(t.startswith("rocm_fused") for t in base)
    assert len(win.neighbours) == 3  # x * 2, sigmoid, the product
    assert "add" in win.region  # the residual add is the fused op's, not a neighbour
    ours = [str(n.target) for n in win.ours["reference"].graph.nodes if n.op == "call_function"]
    assert ours.count("rocm_fused.fused_add_rms_norm.default") == 1 and "aten.rsqrt.default" not in ours
    assert "aten.sigmoid.default" in ours  # the neighbours stay, for Inductor to fuse around our op
    assert [s.shape for s in win.inputs] == [(4, 64), (4, 64), (64,)]  # x, r, w: the GEMM's weight is not read
    (args,) = measure.make_inputs(win.inputs)
    b, o = win.base(*args), win.ours["reference"](*args)
    assert len(b) == len(o) == 2  # the gated product and the residual sum, in the same order
    for x, y in zip(b, o, strict=True):
        torch.testing.assert_close(x, y)
    assert measure.check_numerics("rms_norm", o, b, None) is None


def test_identical_layers_give_one_key_and_other_shapes_another(monkeypatch):
    """Four residual layers: the middle two (each between two others, whose residual adds are its neighbours)
    cut to the same code, so they are measured once."""

    def layers(x, r, ws, wm):
        s = r
        for w in ws:
            s = x + s
            x = _norm(s, w) @ wm
        return x, s

    torch.manual_seed(0)
    ws = [torch.randn(64) for _ in range(4)]
    wins, _ = _windows(monkeypatch, layers, torch.randn(4, 64), torch.randn(4, 64), ws, torch.randn(64, 64))
    assert len(wins) == 4 and wins[1].region != wins[2].region
    assert wins[1].key() == wins[2].key()
    assert wins[0].key() != wins[1].key()  # the first layer has no rewritten layer before it
    other, _ = _windows(monkeypatch, toy, *_args())
    assert other[0].key() != wins[1].key()


def test_consumers_through_views_are_neighbours(monkeypatch):
    """A per-head norm: the transpose (a view) and the scale after it are reached through the view, as Inductor
    fuses them; the window's inputs are base tensors (the view of the projection's output is inside)."""

    def qk(q, w):
        h = q.view(2, 3, 4, 16)
        y = _norm(h, w).transpose(1, 2)
        return y * 0.5

    torch.manual_seed(0)
    (win,), _ = _windows(monkeypatch, qk, torch.randn(2, 3, 64), torch.randn(16))
    base = [str(n.target) for n in win.base.graph.nodes if n.op == "call_function"]
    assert "aten.permute.default" in base or "aten.transpose.int" in base
    assert len(win.neighbours) == 1 and win.views  # the scale, reached through the transpose
    assert win.inputs[0].shape == (2, 3, 64)  # the view of q is part of the window


def test_window_modules_pickle_and_run_the_same():
    """The worker receives the modules pickled: their code and placeholders survive the round trip."""
    g = torch.fx.Graph()
    a = g.placeholder("in0")
    b = g.call_function(torch.ops.aten.sigmoid.default, (a,))
    g.output((b,))
    gm = torch.fx.GraphModule(torch.nn.Module(), g)
    back = pickle.loads(pickle.dumps(gm))
    x = torch.randn(3)
    torch.testing.assert_close(back(x)[0], torch.sigmoid(x))


def test_input_specs_keep_strides_and_copies_rotate_past_l2():
    spec = window.InputSpec("tensor", (4, 8), (1, 4), "bfloat16", "cpu")
    sets = measure.make_inputs([spec, window.InputSpec("scalar", value=3)], copies=3)
    assert len(sets) == 3 and sets[0][0].stride() == (1, 4) and sets[0][1] == 3
    assert not torch.equal(sets[0][0], sets[1][0])  # distinct copies
    assert spec.nbytes == 32 * 2
    assert measure.copies_for(1 << 20, 50 << 20) == 100  # 2 x L2 read per replay
    assert measure.copies_for(16, 50 << 20) == measure.MAX_COPIES and measure.copies_for(1 << 30, 50 << 20) == 1


@pytest.mark.parametrize("bad, why", [(1.5, "exceeds the baseline"), (None, "")])
def test_numerics_contract(bad, why):
    truth = [torch.randn(16, dtype=torch.float64)]
    base = [truth[0].to(torch.bfloat16)]
    ours = [base[0] * bad] if bad is not None else [base[0].clone()]
    got = measure.check_numerics("rms_norm", ours, base, truth)
    assert (got is None) if not why else why in got
    assert measure.check_numerics("sample", [torch.zeros(2, dtype=torch.int64)], [torch.ones(2, dtype=torch.int64)],
                                  None) is None  # statistical contract: shape and dtype only
    assert "differs" in measure.check_numerics("rms_norm", [torch.zeros(2, dtype=torch.int64)],
                                               [torch.ones(2, dtype=torch.int64)], None)


def test_a_consumer_that_also_reads_the_gemms_output_is_no_neighbour(monkeypatch):
    """The next residual add ``s + norm(s) @ wm`` reads the region's sum and a GEMM fed by the region: Inductor
    cannot fuse it with the norm (it runs after the GEMM), so the window leaves it out; the pointwise consumer
    ``y * 0.5`` reading the norm directly stays in."""

    def layers(x, r, w, wm):
        s = x + r
        y = _norm(s, w)
        return s + (y @ wm), y * 0.5

    torch.manual_seed(0)
    (win,), _ = _windows(monkeypatch, layers, torch.randn(4, 64), torch.randn(4, 64), torch.randn(64),
                         torch.randn(64, 64))
    base = [str(n.target) for n in win.base.graph.nodes if n.op == "call_function"]
    assert len(win.neighbours) == 1 and base.count("aten.add.Tensor") == 2  # the region's add, the eps add
    assert "aten.mm.default" not in base


def test_a_window_holding_a_merged_gemm_has_a_float64_truth():
    """The fold's baseline window holds our norm and ``merged_gemm`` (the unfolded pair): the truth evaluates them in
    float64 on the reference provider, so candidates are judged by the numerics contract, not the 2-ulp fallback."""
    import torch.fx as fx

    from rocm_inductor.tuning import worker

    def pair(x, w, nw):
        y = torch.ops.rocm_fused.rms_norm.default(x, nw, 1e-6, 0.0, "triton")
        return (torch.ops.rocm_fused.merged_gemm.default(y, [w], [None], "triton")[0],)

    gm = fx.symbolic_trace(pair)
    torch.manual_seed(0)
    x, w, nw = torch.randn(4, 64, dtype=torch.bfloat16), torch.randn(32, 64, dtype=torch.bfloat16), torch.rand(64)
    (t,) = worker._truth(gm, [x, w, nw.to(torch.bfloat16)])
    assert t.dtype == torch.float64
    x64 = x.double()
    y64 = x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + 1e-6) * nw.to(torch.bfloat16).double()
    ref = y64 @ w.double().t()
    torch.testing.assert_close(t, ref, rtol=1e-4, atol=1e-5)  # the norm reference computes in float32
    with pytest.raises(ValueError, match="float16/bfloat16/float32"):
        torch.ops.rocm_fused.merged_gemm(x64, [w.double()], [None], "triton")
