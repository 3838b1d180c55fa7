"""norm_gemm (``passes/norm_gemm.py``, ``rocm_fused::rms_norm_gemm``) against graphs and inputs its first tests did
not cover.

Each bug found by trying to break the fold has a test here (it failed before the fix), plus the cases that held and
are cheap to keep. Pass tests compile through the real backend on CPU with the reference provider
(``graph_utils.compile_run``, strict: any raise fails the test), tiny shapes (M <= 6, K = 16); op tests call the
op and the Triton launcher (under the interpreter on CPU) directly.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from graph_utils import assert_contract, compile_run
from test_norm_gemm import _full_k, _inputs

NG, MERGED = "rocm_fused.rms_norm_gemm.default", "rocm_fused.merged_gemm.default"
NORM, FUSED = "rocm_fused.rms_norm.default", "rocm_fused.fused_add_rms_norm.default"
H = 16
ON = {"passes": {"gemm_merge": True, "norm_gemm": True}}
OFF = {"passes": {"gemm_merge": True, "norm_gemm": False}}


def run(fn, *args, options=ON, **kw):
    return compile_run(fn, *args, options=options, **kw)


def _rms(x, g=None, eps=1e-6, offset=0.0):
    """HF LlamaRMSNorm (``offset=1.0``: GemmaRMSNorm's ``1 + w`` in float32)."""
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    if offset:
        return (y * (offset + g.float())).to(x.dtype)
    y = y.to(x.dtype)
    return y if g is None else g * y


def _weights(dtype=torch.float32, ns=(8, 9, 10), seed=0):
    gen = torch.Generator().manual_seed(seed)
    ws = [(torch.randn(n, H, generator=gen) * 0.3).to(dtype) for n in ns]
    return ws, (torch.rand(H, generator=gen) + 0.5).to(dtype)


def _same(out, fn, *args, tol=None):
    """Every output has eager's shape and dtype and is close to it (``tol``: ``assert_close``'s rtol/atol)."""
    with torch.no_grad():
        eager = fn(*args)
    for o, e in zip(out, eager, strict=True):
        assert o.shape == e.shape and o.dtype == e.dtype
        torch.testing.assert_close(o, e, **(tol or {}))


def _misses(c):
    return [m.reason for m in c.report.near_misses if m.pass_name == "norm_gemm"]


def _xr(*shape, dtype=torch.float32):
    return torch.randn(*shape).to(dtype), torch.randn(*shape).to(dtype)


# ------------------------------------------------------------------------------------------------------ bugs


def _left_alone(fn, x, r, reason, options=None, fused=None):
    """Compile ``fn`` with the fold on: one merged GEMM stays, no fold, exactly one near-miss whose reason has
    ``reason``, outputs as eager's. ``fused``: the number of fused_add_rms_norm left too (unchecked when None)."""
    out, seen = run(fn, x, r, options=options or ON)
    (c,) = seen
    assert NG not in c.after and c.after[MERGED] == 1
    if fused is not None:
        assert c.after[FUSED] == fused
    (why,) = _misses(c)
    assert reason in why
    _same(out, fn, x, r)


def _own_output_cases():
    w, g = _weights()

    def y_weight_2d(x, r):  # y (3, K) is its own GEMM's activation and weight: F.linear(y, y)
        y = _rms(x + r, g)
        return F.linear(y, y), F.linear(y, w[0])

    def y_weight_3d(x, r):  # the same through the (M, K) view of a (1, 3, K) norm output
        y = _rms(x.view(1, 3, H) + r.view(1, 3, H), g).view(3, H)
        return F.linear(y, y), F.linear(y, w[0])

    def s_weight(x, r):  # the residual sum s (3, K) is a weight of the GEMMs that read rms_norm(s)
        s = x + r
        return F.linear(_rms(s, g), s), F.linear(_rms(s, g), w[0]), s

    return {"y_weight_2d": y_weight_2d, "y_weight_3d": y_weight_3d, "s_weight": s_weight}


@pytest.mark.parametrize("case", sorted(_own_output_cases()))
def test_a_weight_that_is_the_norms_own_output_is_a_near_miss_not_a_broken_graph(case):
    """Bug: a GEMM weight that is the norm's output ``y`` (or its (M, K) view, or the sum ``s``) passed every
    check (``y``'s only reader *is* the GEMM; ``s`` is defined before the GEMM), so the fold built an op reading
    its own result: "Tried to erase Node getitem but it still had 1 users" (y), "used before it has been defined"
    (s) in a strict compile. Now a near-miss; the unfolded graph runs and matches eager."""
    _left_alone(_own_output_cases()[case], *_xr(3, H), "is the norm's own output")


# ---------------------------------------------------------------------------------------- near-misses that held


def _read_elsewhere_cases():
    w, g = _weights()
    w5 = _weights(ns=(4, 4, 4, 4, 4), seed=1)[0]

    def returned(x, r):
        y = _rms(x + r, g)
        return F.linear(y, w[0]), F.linear(y, w[1]), y

    def added(x, r):
        s = x + r
        y = _rms(s, g)
        return F.linear(y, w[0]), F.linear(y, w[1]), s + y

    def sliced(x, r):
        y = _rms(x + r, g)
        return F.linear(y, w[0]), F.linear(y, w[1]), y[..., :4]

    def two_groups(x, r):  # five GEMMs of y: gemm_merge splits them into 3 + 2, two ops read y
        y = _rms(x + r, g)
        return tuple(F.linear(y, q) for q in w5)

    def other_view(x, r):  # q/k read y as (3, K), a third projection reads it as (6, K / 2)
        y = _rms(x + r, g)
        return F.linear(y, w[0]), F.linear(y, w[1]), F.linear(y.reshape(6, H // 2), w[2][:, : H // 2])

    return {"returned": (returned, "output", 1), "added": (added, "add", 1), "sliced": (sliced, "slice", 1),
            "two_groups": (two_groups, "merged_gemm", 2), "other_view": (other_view, "view", 1)}


@pytest.mark.parametrize("case", sorted(_read_elsewhere_cases()))
def test_normalised_activation_read_elsewhere_is_a_near_miss(case):
    fn, reader, groups = _read_elsewhere_cases()[case]
    x, r = _xr(1, 3, H)
    out, seen = run(fn, x, r)
    (c,) = seen
    assert NG not in c.after and c.after[MERGED] == groups and c.after[FUSED] == 1
    whys = _misses(c)
    assert len(whys) == groups
    assert all("the normalised activation is also read by " + reader in why for why in whys), whys
    _same(out, fn, x, r)


def test_reshape_to_another_last_dim_is_a_near_miss():
    """The norm's (1, 3, 16) output flattened to (6, 8) before the GEMMs: K is not the norm's hidden size."""
    w, g = _weights()

    def fn(x, r):
        y = _rms(x + r, g).reshape(6, 8)
        return F.linear(y, w[0][:, :8]), F.linear(y, w[1][:, :8])

    _left_alone(fn, *_xr(1, 3, H), "reshaped to another last dim than K")


def test_a_weight_computed_from_a_reader_of_the_sum_would_reorder():
    """``s`` read (sin) before the GEMMs, and a GEMM weight computed from that reader: the op returns ``s``, so
    it cannot come before the weight; near-miss with the reorder reason."""
    w, g = _weights()

    def fn(x, r):
        s = x + r
        t = s.sin()
        return F.linear(_rms(s, g), w[0]), F.linear(_rms(s, g), w[1] * t.mean()), t

    _left_alone(fn, *_xr(3, H), "folding would reorder")


def test_a_bias_sliced_from_the_sum_is_a_near_miss():
    w, g = _weights()

    def fn(x, r):
        s = x + r
        y = _rms(s, g)
        return F.linear(y, w[2][:3], s[0, :3]), F.linear(y, w[0])

    x, r = _xr(3, H)
    out, seen = run(fn, x, r)
    (c,) = seen
    assert NG not in c.after and c.after[MERGED] == 1
    assert len(_misses(c)) == 1
    _same(out, fn, x, r)


def test_what_the_provider_refuses_is_a_near_miss_with_its_reason():
    """(K, N) weights (``x @ w``): merged by the reference as transposed views, which the Triton kernel refuses
    (K stride not 1); forcing ``rms_norm_gemm`` to Triton leaves the norm and the merged GEMM, with the reason."""
    w, g = _weights()

    def fn(x, r):
        y = _rms(x + r, g)
        return y @ w[0].t().contiguous(), y @ w[1].t().contiguous()

    _left_alone(fn, *_xr(3, H), "triton: a weight is not contiguous along K",
                options={**ON, "providers": {"rms_norm_gemm": "triton"}}, fused=1)


def test_norms_the_pass_does_not_see_are_left_silently():
    """A norm over dim 0 (not an RMSNorm of the rms_norm pass): the merged GEMM stays, no near-miss from norm_gemm.
    (A 1-D norm output folds: test_norm_gemm_views_adversarial.py.)"""
    w, _ = _weights()

    def dim0(x, r):
        y = x * torch.rsqrt(x.pow(2).mean(0, keepdim=True) + 1e-6)
        return F.linear(y, w[0]), F.linear(y, w[1])

    for fn in (dim0,):
        x, r = _xr(3, H)
        out, seen = run(fn, x, r)
        (c,) = seen
        assert NG not in c.after and c.after[MERGED] == 1 and not _misses(c)
        _same(out, fn, x, r)


def test_a_residual_broadcast_over_rows_folds_the_plain_norm():
    """``x + r[0]`` (a (K,) residual broadcast over M rows) is no fused add (s has x's shape, r does not): the
    add stays, the plain RMSNorm of its result folds."""
    w, g = _weights()

    def fn(x, r):
        s = x + r[0]
        y = _rms(s, g)
        return F.linear(y, w[0]), F.linear(y, w[1]), s

    x, r = _xr(3, H)
    out, seen = run(fn, x, r)
    (c,) = seen
    assert c.after[NG] == 1 and c.after["aten.add.Tensor"] == 1 and FUSED not in c.after
    (m,) = [m for m in c.report.matches if m.pass_name == "norm_gemm"]
    assert m.note.startswith("RMSNorm -> 2 GEMMs")
    _same(out, fn, x, r)


def test_an_in_place_residual_update_folds_and_writes_the_buffer():
    """vLLM's ``residual += x`` before the norm (functionalized: the sum, then a copy_ into the input): the fold
    returns s, the copy_ still writes it; outputs and the mutated residual equal eager's."""
    w, g = _weights()

    def fn(x, r):
        r.add_(x)
        y = _rms(r, g)
        return F.linear(y, w[0]), F.linear(y, w[1])

    x, r = _xr(3, H)
    r_eager = r.clone()
    out, seen = run(fn, x, r)
    (c,) = seen
    assert c.after[NG] == 1 and c.after["aten.copy_.default"] == 1 and FUSED not in c.after
    with torch.no_grad():
        eager = fn(x, r_eager)
    for o, e in zip(out, eager, strict=True):
        torch.testing.assert_close(o, e)
    assert torch.equal(r, r_eager)


# ----------------------------------------------------------------------------------------------- folds that held


def _fold_cases(dtype):
    """name -> (fn, x shape, fused add?, number of GEMMs); weights of ``dtype``."""
    w, g = _weights(dtype)
    b = torch.linspace(-1, 1, 10).to(dtype)

    def biased(x, r):  # M = 6, a bias on one of three weights, s returned (the next residual)
        s = x + r
        y = _rms(s, g)
        return F.linear(y, w[0]), F.linear(y, w[1]), F.linear(y, w[2], b), s

    def gemma(x, r):  # (1 + w) in float32, M = 1
        s = x + r
        y = _rms(s, g, offset=1.0)
        return F.linear(y, w[0]), F.linear(y, w[1]), s

    def weightless(x, r):  # no residual, no norm weight, M = 3
        y = _rms(x)
        return F.linear(y, w[0]), F.linear(y, w[2], b)

    def kn(x, r):  # (K, N) weights: x @ w
        y = _rms(x + r, g)
        return y @ w[0].t().contiguous(), y @ w[1].t().contiguous()

    def s_read_first(x, r):  # s read by an op placed before the GEMMs
        s = x + r
        t = s.sin()
        y = _rms(s, g)
        return F.linear(y, w[0]), F.linear(y, w[1]), t

    return {"biased": (biased, (2, 3, H), True, 3), "gemma": (gemma, (1, 1, H), True, 2),
            "weightless": (weightless, (3, H), False, 2), "kn": (kn, (3, H), True, 2),
            "s_read_first": (s_read_first, (3, H), True, 2)}


@pytest.mark.parametrize("case,dtype", [
    ("biased", torch.float16), ("biased", torch.bfloat16), ("biased", torch.float32), ("gemma", torch.bfloat16),
    ("weightless", torch.float16), ("kn", torch.float32), ("s_read_first", torch.bfloat16)])
def test_fold(case, dtype):
    """Folded into one op; bitwise the unfolded graph's result (the reference runs the same two ops), and within
    the numerics contract (docs/ops.md) of eager against float64."""
    fn, shape, fused, n = _fold_cases(dtype)[case]
    torch.manual_seed(0)
    x, r = _xr(*shape, dtype=dtype)
    out, seen = run(fn, x, r)
    (c,) = seen
    assert c.after[NG] == 1 and MERGED not in c.after and NORM not in c.after and FUSED not in c.after
    assert not _misses(c)
    (m,) = [m for m in c.report.matches if m.pass_name == "norm_gemm"]
    assert m.note.startswith(("add + " if fused else "") + f"RMSNorm -> {n} GEMMs")
    unfolded, seen_off = run(fn, x, r, options=OFF)
    assert NG not in seen_off[0].after
    for a, u in zip(out, unfolded, strict=True):
        assert torch.equal(a, u)
    with torch.no_grad():
        eager = fn(x, r)
        ref64 = _fold_cases(torch.float64)[case][0](x.double(), r.double())
    for o, e, f in zip(out, eager, ref64, strict=True):
        assert_contract(o, e, f)


def bounded_m_run(fn, first, *more):
    """Compile ``fn`` once (reference provider, strict, the fold on) with dim 0 of every tensor of ``first`` marked
    dynamic in [1, 32], call it on ``first`` then on each of ``more``; returns the one graph's capture and
    ``[(outputs, inputs)]`` per call."""
    from graph_utils import capture

    for t in first:
        torch._dynamo.mark_dynamic(t, 0, min=1, max=32)
    torch._dynamo.reset()
    with capture() as seen, torch.no_grad():
        compiled = torch.compile(fn, backend="rocm_fused", options={"provider": "reference", "strict": True, **ON})
        outs = [(compiled(*a), a) for a in (first, *more)]
    (c,) = seen  # one graph for every M
    return c, outs


def test_symbolic_bounded_m_folds_and_serves_other_m():
    w, g = _weights()

    def fn(x, r):
        s = x + r
        y = _rms(s, g)
        return F.linear(y, w[0]), F.linear(y, w[1]), s

    c, outs = bounded_m_run(fn, _xr(4, H), _xr(7, H), _xr(2, H))
    assert c.after[NG] == 1 and MERGED not in c.after
    (m,) = [m for m in c.report.matches if m.pass_name == "norm_gemm"]
    assert "(<= 32)" in m.note
    for out, a in outs:
        _same(out, fn, *a)


def test_two_norms_and_a_norm_of_folded_outputs():
    """Two norms, each with its own GEMM group (both fold), and a second layer whose norm reads the sum of the
    first fold's outputs (a fold of a fold's getitems)."""
    w, g = _weights(ns=(16, 16, 8))

    def fn(x, r):
        a = _rms(x, g)
        b = _rms(r, g)
        h0, h1 = F.linear(a, w[0]), F.linear(a, w[1])
        y = _rms(h0 + h1, g)
        return F.linear(y, w[2]), F.linear(y, w[0]), F.linear(b, w[1]), F.linear(b, w[2])

    x, r = _xr(3, H)
    out, seen = run(fn, x, r)
    (c,) = seen
    assert c.after[NG] == 3 and MERGED not in c.after and not _misses(c)
    _same(out, fn, x, r)


def test_two_layers_the_first_folds_sum_is_the_second_residual():
    """A pre-norm decoder's two layers: the first fold's ``s`` is the residual of the second fused add, whose
    input is the product of the first fold's outputs; both fold, the second ``s`` is returned."""
    w, g = _weights(ns=(16, 16, 16, 16))

    def fn(x, r):
        s1 = x + r
        y1 = _rms(s1, g)
        s2 = F.linear(y1, w[0]) * F.linear(y1, w[1]) + s1
        y2 = _rms(s2, g)
        return F.linear(y2, w[2]), F.linear(y2, w[3]), s2

    x, r = _xr(3, H)
    out, seen = run(fn, x, r)
    (c,) = seen
    assert c.after[NG] == 2 and MERGED not in c.after and FUSED not in c.after and not _misses(c)
    _same(out, fn, x, r)


def test_triton_providers_through_the_pass():
    """The Triton provider (interpreter): on CPU its default config is a dot tile, so the norm kernel then the
    merged GEMM (two launches) serve the folded op; matches the reference-provider fold within the contract."""
    w, g = _weights(torch.bfloat16)

    def fn(x, r):
        s = x + r
        y = _rms(s, g)
        return F.linear(y, w[0]), F.linear(y, w[1]), s

    x, r = _xr(1, 2, H, dtype=torch.bfloat16)
    opts = {"passes": {"gemm_merge": True, "norm_gemm": True},
            "providers": {"merged_gemm": "triton", "rms_norm_gemm": "triton", "rms_norm": "triton",
                          "fused_add_rms_norm": "triton"}}
    out, seen = run(fn, x, r, options=opts)
    (c,) = seen
    assert c.after[NG] == 1
    (m,) = [m for m in c.report.matches if m.pass_name == "norm_gemm"]
    assert m.provider == "triton"
    with torch.no_grad():
        eager = fn(x, r)
        wd, gd = [q.double() for q in w], g.double()
        s64 = x.double() + r.double()
        y64 = _rms(s64, gd)
        ref = [F.linear(y64, wd[0]), F.linear(y64, wd[1])]
    for o, e, f in zip(out[:2], eager[:2], ref, strict=True):
        assert_contract(o, e, f)
    assert torch.equal(out[2], eager[2])


# ------------------------------------------------------------------------------------------------------ the op


def _op_args(m=3, k=H, dtype=torch.bfloat16, ns=(8, 5, 3), res=True, gw=True, bias=False, seed=0):
    return _inputs(m, k, ns, dtype, res, gw, bias, seed, scale=0.3)


def _bad_inputs():
    x, r, g, ws, bs = _op_args()
    return {
        "residual_shape": ((x, r[:2], g, ws, bs), "residual"),
        "residual_dtype": ((x, r.float(), g, ws, bs), "residual"),
        "norm_weight_shape": ((x, r, g[:8], ws, bs), "norm weight shape"),
        "no_weights": ((x, r, g, [], []), "1-4 weights"),
        "five_weights": ((x, r, g, ws + ws[:2], bs + bs[:2]), "1-4 weights"),
        "weight_k": ((x, r, g, [ws[0][:, :8]], [None]), "K="),
        "float64": ((x.double(), r.double(), g, [w.double() for w in ws], bs), "float16/bfloat16/float32"),
    }


@pytest.mark.parametrize("case", sorted(_bad_inputs()))
def test_op_rejects_inputs_that_do_not_chain(case):
    (x, r, g, ws, bs), text = _bad_inputs()[case]
    with pytest.raises(ValueError, match=text):
        torch.ops.rocm_fused.rms_norm_gemm(x, r, g, 1e-6, 0.0, ws, bs, "reference")
    from rocm_inductor.providers.triton import norm_gemm as ng

    with pytest.raises(ValueError):
        ng.rms_norm_gemm(x, r, g, 1e-6, 0.0, ws, bs)


@pytest.mark.parametrize("m", [0, 2])
def test_op_empty_rows_and_empty_m(m):
    """M = 0: empty outputs (and s) from the reference, the one-launch and the two-launch Triton paths."""
    from rocm_inductor.providers.triton import norm_gemm as ng

    x, r, g, ws, bs = _op_args(m=m)
    ref = torch.ops.rocm_fused.rms_norm_gemm(x, r, g, 1e-6, 0.0, ws, bs, "reference")
    for cfg in (_full_k(max(m, 1), H), None):
        outs = ng.rms_norm_gemm(x, r, g, 1e-6, 0.0, ws, bs, config=cfg)
        assert [tuple(o.shape) for o in outs] == [tuple(o.shape) for o in ref] == [(m, 8), (m, 5), (m, 3), (m, H)]
        assert torch.equal(outs[-1], ref[-1])


@pytest.mark.parametrize("dtype,m,k,res,gw,offset,bias", [
    (torch.bfloat16, 1, 16, True, True, 0.0, False),
    (torch.float16, 3, 12, True, True, 1.0, True),   # K not a power of two (masked K), Gemma offset, M = 3
    (torch.float32, 2, 16, False, False, 0.0, True),  # weightless, no residual
    (torch.bfloat16, 6, 24, False, True, 1.0, False),  # M = 6 in a BLOCK_M 8 tile
    (torch.float32, 3, 20, True, True, 1.0, True),
])
def test_triton_one_launch_meets_the_contract(dtype, m, k, res, gw, offset, bias, monkeypatch):
    """The RMSNorm prologue (one launch, checked by spying ``launch``'s ``norm``) vs the reference: s bitwise,
    the outputs within the numerics contract (docs/ops.md) against float64."""
    from rocm_inductor.providers.reference import rms_norm_gemm_ref
    from rocm_inductor.providers.triton import gemm_merge as gm
    from rocm_inductor.providers.triton import norm_gemm as ng

    norms, orig = [], gm.launch
    monkeypatch.setattr(gm, "launch", lambda *a, **kw: norms.append(kw.get("norm") is not None) or orig(*a, **kw))
    x, r, g, ws, bs = _op_args(m, k, dtype, res=res, gw=gw, bias=bias)
    outs = ng.rms_norm_gemm(x, r, g, 1e-6, offset, ws, bs, config=_full_k(m, k))
    assert norms == [True]
    up = lambda t: None if t is None else t.double()  # noqa: E731
    ref64 = rms_norm_gemm_ref(up(x), up(r), up(g), 1e-6, offset, [up(w) for w in ws], [up(b) for b in bs])
    eager = rms_norm_gemm_ref(x, r, g, 1e-6, offset, ws, bs)
    assert len(outs) == len(eager) == len(ws) + res
    for o, e, f in zip(outs[: len(ws)], eager, ref64, strict=False):
        assert_contract(o, e, f)
    if res:
        assert torch.equal(outs[-1], eager[-1])


def test_triton_one_launch_reads_strided_inputs():
    """x and the residual column slices of wider rows (row stride 2K), a strided float32 norm weight for bf16
    activations, a (K, N)-transposed weight view, (2, 2, K) inputs: one launch, s bitwise, contract."""
    from rocm_inductor.providers.reference import rms_norm_gemm_ref
    from rocm_inductor.providers.triton import norm_gemm as ng

    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2, 2, 2 * H, generator=gen).bfloat16()[..., :H]
    r = torch.randn(2, 2, 2 * H, generator=gen).bfloat16()[..., H:]
    g = (torch.rand(2 * H, generator=gen) + 0.5)[::2]
    ws = [torch.randn(8, H, generator=gen).bfloat16(), torch.randn(2 * H, 5, generator=gen).bfloat16()[:H].t()]
    outs = ng.rms_norm_gemm(x, r, g, 1e-6, 0.0, ws, [None, None], config=_full_k(4, H))
    eager = rms_norm_gemm_ref(x, r, g, 1e-6, 0.0, ws, [None, None])
    ref64 = rms_norm_gemm_ref(x.double(), r.double(), g.double(), 1e-6, 0.0, [w.double() for w in ws], [None, None])
    for o, e, f in zip(outs[:2], eager, ref64, strict=False):
        assert_contract(o, e, f)
    assert outs[-1].shape == x.shape and torch.equal(outs[-1], eager[-1])


def test_a_config_whose_block_m_does_not_cover_m_raises():
    """Bug: a config with BLOCK_M < M (M = 3, the full-K tile of BLOCK_M 1) sent ``rms_norm_gemm`` to its
    two-launch path with that config, and ``gemm_merge.launch`` (its grid has no M dimension) computed row 0
    only: rows 1-2 came back as ``torch.empty``'s garbage (1e29), silently. Now ValueError, as for a K split the
    full-K tile cannot cover; the pickers never choose such a config (they check BLOCK_M >= M)."""
    from rocm_inductor.providers.triton import gemm_merge as gm
    from rocm_inductor.providers.triton import norm_gemm as ng

    x, r, g, ws, bs = _op_args(m=3)
    small = _full_k(1, H)
    with pytest.raises(ValueError, match="BLOCK_M"):
        ng.rms_norm_gemm(x, r, g, 1e-6, 0.0, ws, bs, config=small)
    with pytest.raises(ValueError, match="BLOCK_M"):
        gm.merged_gemm(x, ws, bs, config=small)


@pytest.mark.parametrize("dtype,gdt,res,offset", [
    (torch.bfloat16, torch.float64, True, 1.0), (torch.float16, torch.float32, True, 0.0),
    (torch.float32, torch.bfloat16, False, 1.0), (torch.bfloat16, None, False, 0.0)])
def test_triton_prologue_normalises_to_the_norm_kernels_bits(dtype, gdt, res, offset):
    """The one-launch path's claim: its GEMM reads the activation the RMSNorm kernel would have written. With an
    identity weight (each output one product y * 1, float32-accumulated, rounded once to the dtype) the output
    *is* the prologue's y: bitwise the Triton RMSNorm kernel's (and s bitwise its sum); K = 12 (masked K), M = 3,
    a second weight of 4 rows and a norm weight of another dtype."""
    from rocm_inductor.providers.triton import norm_gemm as ng
    from rocm_inductor.providers.triton import rms_norm as rms

    k = 12
    x, r, g, ws, bs = _op_args(3, k, dtype, ns=(4,), res=res, gw=gdt is not None)
    g = None if g is None else (torch.rand(k) + 0.5).to(gdt)
    eye = torch.eye(k, dtype=dtype)
    outs = ng.rms_norm_gemm(x, r, g, 1e-6, offset, [eye, ws[0]], [None, None], config=_full_k(3, k))
    if res:
        y, s = rms.fused_add_rms_norm(x, r, g, 1e-6, offset)
        assert torch.equal(outs[-1], s)
    else:
        y = rms.rms_norm(x, g, 1e-6, offset)
    assert torch.equal(outs[0], y)
