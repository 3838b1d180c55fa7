"""Adversarial tests for three changes: norm_gemm's walk through ``unsqueeze`` (``ROW_VIEWS``), the merged GEMM
spec's ``device_type`` (``providers/triton/gemm_merge.spec_device``) and ``table_config``'s BLOCK_M >= M rule.

Pass tests compile through the real backend on CPU (``graph_utils.compile_run``, reference provider, strict) with
gemm_merge and norm_gemm on, compare every output with eager and count ops: a 1-D (K,) activation (``F.linear`` of
a vector: ``unsqueeze(y, 0)``) in float32/bfloat16/float16, with a fused residual add whose sum is returned, with
biases, with Gemma's ``1 + w``, with symbolic shapes; unsqueezes at other dims of 1-D/2-D/3-D norm outputs, and
view chains whose links have other readers (near-misses with their reason, never a silent skip or a broken
graph). Spec tests call ``measured_loss`` / ``measured_single`` / ``check`` / ``table_config`` directly.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
import torch.nn.functional as F
from test_norm_gemm_adversarial import FUSED, MERGED, NG, NORM, _misses, _same, _weights, bounded_m_run, run

from rocm_inductor.ops.gemm_merge import SINGLE_UNMEASURED, merged_gemm_spec
from rocm_inductor.ops.norm_gemm import norm_gemm_spec
from rocm_inductor.providers.triton import gemm_merge as gm
from rocm_inductor.providers.triton import gemm_tables as gt
from rocm_inductor.providers.triton import norm_gemm as ng

H = 16
EPS = 1e-6


def _norm(x, g=None, offset=0.0):
    """``F.rms_norm`` (the ``y * w`` spelling the rms_norm pass absorbs for a 1-D input too); ``offset=1.0``:
    Gemma's ``(1 + w)`` in float32."""
    if offset:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS) * (offset + g.float())).to(x.dtype)
    return F.rms_norm(x, (x.shape[-1],), g, EPS)


def _folded(fn, *args, n_folds=1, tol=None, **kw):
    """Compile: ``n_folds`` folds, no merged GEMM or norm left, no near-miss; outputs as eager's. Returns c."""
    out, seen = run(fn, *args, **kw)
    (c,) = seen
    assert c.after[NG] == n_folds, dict(c.after)
    assert MERGED not in c.after and NORM not in c.after and FUSED not in c.after, dict(c.after)
    assert not _misses(c)
    _same(out, fn, *args, tol=tol)
    return c


def _near_miss(fn, *args, reason, merged=1):
    """Compile: no fold, ``merged`` merged GEMMs left, one norm_gemm near-miss per GEMM containing ``reason``."""
    out, seen = run(fn, *args)
    (c,) = seen
    assert NG not in c.after and c.after[MERGED] == merged, dict(c.after)
    whys = _misses(c)
    assert len(whys) == merged and all(reason in w for w in whys), whys
    _same(out, fn, *args)
    return c


def _x(*shape, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen).to(dtype), torch.randn(*shape, generator=gen).to(dtype)


# ------------------------------------------------------------------------------------------- 1-D activations


_TOL = {torch.float32: None, torch.bfloat16: {"rtol": 1.6e-2, "atol": 1e-2},
        torch.float16: {"rtol": 1e-3, "atol": 1e-3}}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_1d_activation_folds_in_each_dtype(dtype):
    """``F.linear`` of a (K,) normalised vector folds in fp32/bf16/fp16; outputs stay (N,) of the input dtype."""
    w, g = _weights(dtype)

    def fn(x):
        y = _norm(x, g)
        return F.linear(y, w[0]), F.linear(y, w[1]), F.linear(y, w[2])

    x, _ = _x(H, dtype=dtype)
    c = _folded(fn, x, tol=_TOL[dtype])
    (m,) = [m for m in c.report.matches if m.pass_name == "norm_gemm"]
    assert m.note.startswith("RMSNorm -> 3 GEMMs") and m.shape.startswith("1x16->")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_1d_fused_add_returns_the_sum_with_its_1d_shape(dtype):
    """A 1-D residual add + RMSNorm whose sum is returned and read again: folded, ``s`` stays (K,)."""
    w, g = _weights(dtype)

    def fn(x, r):
        s = x + r
        y = _norm(s, g)
        return F.linear(y, w[0]), F.linear(y, w[1]), s, s * 2

    x, r = _x(H, dtype=dtype)
    c = _folded(fn, x, r, tol=_TOL[dtype])
    (m,) = [m for m in c.report.matches if m.pass_name == "norm_gemm"]
    assert m.note.startswith("add + RMSNorm -> 2 GEMMs")


def _k32(seed=3):
    gen = torch.Generator().manual_seed(seed)
    w = [torch.randn(n, 32, generator=gen) * 0.3 for n in (24, 20, 40)]
    return w, torch.rand(32, generator=gen) + 0.5, [torch.linspace(-1, 1, n) for n in (24, 20, 40)]


def test_1d_activation_with_biases_on_every_projection_folds():
    """1-D input, a bias on each of three projections (Qwen2's q/k/v): folded, the biases added. (K = 32,
    N >= 20: at K, N <= 16 Inductor decomposes an M = 1 ``addmm`` into a multiply and a sum, no GEMM.)"""
    w, g, b = _k32()

    def fn(x, r):
        s = x + r
        y = _norm(s, g)
        return F.linear(y, w[0], b[0]), F.linear(y, w[1], b[1]), F.linear(y, w[2], b[2]), s

    _folded(fn, *_x(32))


def test_1d_activation_with_biases_on_some_projections_is_a_near_miss():
    """1-D input, biases on two of three projections: the biased ``F.linear`` reads ``view(y, [1, K])``, the
    unbiased one ``unsqueeze(y, 0)``; gemm_merge merges the biased two and reports the third, norm_gemm then
    reports the unsqueeze as another reader of y. Not folded, never silent, outputs as eager's."""
    w, g, b = _k32()

    def fn(x, r):
        s = x + r
        y = _norm(s, g)
        return F.linear(y, w[0], b[0]), F.linear(y, w[1]), F.linear(y, w[2], b[2]), s

    c = _near_miss(fn, *_x(32), reason="the normalised activation is also read by unsqueeze")
    assert any(m.pass_name == "gemm_merge" and "another view or slice" in m.reason for m in c.report.near_misses)


def test_1d_gemma_offset_norm_folds():
    """Gemma's ``(1 + w)`` norm of a 1-D bf16 input (with the residual sum returned): folded."""
    w, g = _weights(torch.bfloat16)

    def fn(x, r):
        s = x + r
        y = _norm(s, g, offset=1.0)
        return F.linear(y, w[0]), F.linear(y, w[1]), s

    x, r = _x(H, dtype=torch.bfloat16)
    _folded(fn, x, r, tol=_TOL[torch.bfloat16])


def test_1d_single_projection_is_left_alone_silently_on_cpu():
    """One projection of a 1-D vector (an lm_head): gemm_merge keeps the aten GEMM on CPU without a table, so
    there is nothing to fold and nothing to report from norm_gemm; outputs as eager's."""
    w, g = _weights()

    def fn(x):
        return (F.linear(_norm(x, g), w[0]),)

    out, seen = run(fn, _x(H)[0])
    (c,) = seen
    assert NG not in c.after and MERGED not in c.after and not _misses(c)
    _same(out, fn, _x(H)[0])


def test_1d_dynamic_compile_folds():
    """``dynamic=True`` on 1-D inputs (K specialises against the weights, M = 1): still one fold, as eager."""
    w, g = _weights()

    def fn(x, r):
        s = x + r
        y = _norm(s, g)
        return F.linear(y, w[0]), F.linear(y, w[1]), s

    _folded(fn, *_x(H), dynamic=True)


def test_1d_hf_llama_weight_times_y_folds():
    """HF Llama's ``weight * y`` spelling on a 1-D input folds: canonicalize orders a computed operand before a
    graph input of the same rank, so the rms_norm pass takes the weight (it used to match only the weightless
    part, leaving the multiply for the GEMMs to read)."""
    w, g = _weights()

    def fn(x):
        xf = x.float()
        y = g * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS)).to(x.dtype)
        return F.linear(y, w[0]), F.linear(y, w[1])

    _folded(fn, _x(H)[0])


# --------------------------------------------------------------------------------- unsqueezes at other dims


def test_unsqueeze_last_dim_of_a_1d_output_is_left_alone():
    """``y.unsqueeze(-1)`` (K, 1) times (1, N) weights: a K = 1 product Inductor decomposes into a multiply, no
    GEMM; nothing folded, nothing to report, the graph runs as eager."""
    w, g = _weights()

    def fn(x):
        y = _norm(x, g).unsqueeze(-1)
        return F.linear(y, w[0][:, :1]), F.linear(y, w[1][:, :1])

    x = _x(H)[0]
    out, seen = run(fn, x)
    (c,) = seen
    assert NG not in c.after and not _misses(c)
    _same(out, fn, x)


@pytest.mark.parametrize("dim", [0, 1, -2])
def test_unsqueeze_of_a_2d_output_then_linear_folds(dim):
    """2-D y (M, K) unsqueezed at 0 / 1 / -2 then ``F.linear`` (which flattens back to (M, K)): folded, the
    outputs keep eager's 3-D shapes."""
    w, g = _weights()

    def fn(x, r):
        s = x + r
        y = _norm(s, g).unsqueeze(dim)
        return F.linear(y, w[0]), F.linear(y, w[1]), s

    _folded(fn, *_x(3, H))


def test_unsqueeze_last_of_a_2d_output_viewed_back_folds():
    """(M, K) -> unsqueeze(-1) (M, K, 1) -> view (M, K) -> the GEMMs: a row-preserving chain, folded."""
    w, g = _weights()

    def fn(x):
        y = _norm(x, g).unsqueeze(-1).view(3, H)
        return F.linear(y, w[0]), F.linear(y, w[1])

    _folded(fn, _x(3, H)[0])


def test_unsqueeze_of_a_3d_output_viewed_to_rows_folds():
    """(B, S, K) -> unsqueeze(2) -> reshape (B * S, K) -> the GEMMs: folded."""
    w, g = _weights()

    def fn(x, r):
        s = x + r
        y = _norm(s, g).unsqueeze(2).reshape(-1, H)
        return F.linear(y, w[0]), F.linear(y, w[1]), s

    _folded(fn, *_x(2, 3, H))


def test_1d_view_through_another_k_and_back_folds():
    """(K,) -> view (2, K/2) -> view (1, K): every link keeps the flat order and the final last dim is K."""
    w, g = _weights()

    def fn(x):
        y = _norm(x, g).view(2, H // 2).view(1, H)
        return F.linear(y, w[0]), F.linear(y, w[1])

    _folded(fn, _x(H)[0])


def test_1d_viewed_to_another_last_dim_is_a_near_miss():
    """(K,) -> view (2, K/2) as the GEMMs' activation: near-miss with the last-dim reason."""
    w, g = _weights()

    def fn(x):
        y = _norm(x, g).view(2, H // 2)
        return F.linear(y, w[0][:, : H // 2]), F.linear(y, w[1][:, : H // 2])

    _near_miss(fn, _x(H)[0], reason="reshaped to another last dim than K")


@pytest.mark.parametrize("dim", [0, 1])
def test_unsqueeze_bounded_symbolic_m_folds(dim):
    """M symbolic in [1, 32] (``mark_dynamic``) with y.unsqueeze(dim) before the GEMMs: one graph, folded, serves
    several M as eager."""
    w, g = _weights()

    def fn(x, r):
        s = x + r
        y = _norm(s, g).unsqueeze(dim)
        return F.linear(y, w[0]), F.linear(y, w[1]), s

    c, outs = bounded_m_run(fn, _x(4, H), _x(7, H, seed=1), _x(2, H, seed=2))
    assert c.after[NG] == 1 and MERGED not in c.after, dict(c.after)
    (m,) = [m for m in c.report.matches if m.pass_name == "norm_gemm"]
    assert "(<= 32)" in m.note
    for out, a in outs:
        _same(out, fn, *a)


def test_unbounded_dynamic_m_is_a_gemm_merge_near_miss():
    """``dynamic=True`` with an unbounded M and y.unsqueeze(0): gemm_merge reports no decode bucket, so there is no
    merged GEMM to fold; the norm stays, outputs as eager's."""
    w, g = _weights()

    def fn(x, r):
        s = x + r
        y = _norm(s, g).unsqueeze(0)
        return F.linear(y, w[0]), F.linear(y, w[1]), s

    x, r = _x(4, H)
    out, seen = run(fn, x, r, dynamic=True)
    (c,) = seen
    assert NG not in c.after and MERGED not in c.after and c.after[FUSED] == 1
    assert any(m.pass_name == "gemm_merge" and "no finite upper bound" in m.reason for m in c.report.near_misses)
    _same(out, fn, x, r)


# ------------------------------------------------------------------------------ chains with another reader


def _chain_reader_cases():
    w, g = _weights()

    def unsqueezed_returned(x):  # (K,) -> unsqueeze -> view (1, K) -> GEMMs; the (1, K) unsqueeze is returned
        u = _norm(x, g).unsqueeze(0)
        y = u.view(1, H)
        return F.linear(y, w[0]), F.linear(y, w[1]), u

    def unsqueezed_added(x):  # the unsqueeze also feeds an add
        u = _norm(x, g).unsqueeze(0)
        y = u.view(1, H)
        return F.linear(y, w[0]), F.linear(y, w[1]), u + 1

    def unsqueezed_2d_sliced(x):  # (M, K) -> unsqueeze(1) -> view (M, K); the unsqueeze also sliced
        u = _norm(x, g).unsqueeze(1)
        y = u.view(-1, H)
        return F.linear(y, w[0]), F.linear(y, w[1]), u[:, :, :4] * 3

    def one_d_returned(x):  # the 1-D y itself returned besides the GEMMs' unsqueeze
        y = _norm(x, g)
        return F.linear(y, w[0]), F.linear(y, w[1]), y

    return {"unsqueezed_returned": (unsqueezed_returned, (H,)), "unsqueezed_added": (unsqueezed_added, (H,)),
            "unsqueezed_2d_sliced": (unsqueezed_2d_sliced, (3, H)), "one_d_returned": (one_d_returned, (H,))}


@pytest.mark.parametrize("case", sorted(_chain_reader_cases()))
def test_a_chain_link_with_another_reader_is_a_near_miss(case):
    """A view between the norm's output and the GEMMs that is also read elsewhere: no fold, a near-miss saying
    the activation is also read, the graph runs as eager (the chain is not erased under its other reader)."""
    fn, shape = _chain_reader_cases()[case]
    _near_miss(fn, _x(*shape)[0], reason="the normalised activation is also read by")


def test_1d_five_gemms_in_two_groups_of_one_unsqueeze_are_near_misses():
    """Five projections of one 1-D y: gemm_merge splits them 3 + 2, both merged GEMMs read the one
    ``unsqueeze(y, 0)``, so neither folds; each reports the other merged GEMM as another reader of the chain."""
    w5 = _weights(ns=(4, 4, 4, 4, 4), seed=1)[0]
    g = _weights()[1]

    def fn(x):
        y = _norm(x, g)
        return tuple(F.linear(y, q) for q in w5)

    _near_miss(fn, _x(H)[0], reason="the normalised activation is also read by merged_gemm", merged=2)


def test_1d_gemms_reading_y_directly_and_through_an_explicit_unsqueeze():
    """``F.linear(y, w0)`` and ``F.linear(y.unsqueeze(0), w1)`` of one 1-D y: the two ``unsqueeze(y, 0)`` are one
    node after CSE, so both GEMMs merge and fold; outputs keep eager's (N0,) and (1, N1) shapes."""
    w, g = _weights()

    def fn(x):
        y = _norm(x, g)
        return F.linear(y, w[0]), F.linear(y.unsqueeze(0), w[1])

    _folded(fn, _x(H)[0])


# ----------------------------------------------------------------------------------- spec device_type (2)


def _specs():
    x, w = torch.randn(6, H), torch.randn(8, H)
    merge = merged_gemm_spec(x, [w, w], [None, None], 6)
    single = merged_gemm_spec(x, [w], [None], 6)
    fold = norm_gemm_spec(x, None, torch.ones(H), 0.0, [w, w], [None, None], 6)
    old = lambda s: {k: v for k, v in s.items() if k != "device_type"}  # noqa: E731
    return merge, single, fold, old


def test_spec_device_of_old_and_new_specs():
    """``spec_device``: None for a CPU spec, the host's GPU for a cuda spec and for an old spec without
    ``device_type``; None for every spec on a host without a GPU."""
    merge, _, fold, old = _specs()
    assert merge["device_type"] == "cpu" and fold["device_type"] == "cpu"
    mp = pytest.MonkeyPatch()
    try:
        mp.setattr(gt, "_device_name", lambda: "NVIDIA H200")
        assert gt.spec_device(merge) is None
        assert gt.spec_device(old(merge)) == "NVIDIA H200"
        assert gt.spec_device({**merge, "device_type": "cuda"}) == "NVIDIA H200"
        mp.setattr(gt, "_device_name", lambda: None)
        assert gt.spec_device(old(merge)) is None and gt.spec_device({**merge, "device_type": "cuda"}) is None
    finally:
        mp.undo()


def _entry(m, ours, sep, ns=(8, 8), device="NVIDIA H200", block_m=16):
    cfg = dataclasses.asdict(gm.Config(block_m, 16, 64, 1, 4, 3, True))
    return dict(device=device, m=m, k=H, ns=list(ns), dtype="float32", config=cfg, ours_us=ours,
                separate_us=sep)


def _table(tmp_path, monkeypatch, entries, name="t.json"):
    path = tmp_path / name
    path.write_text(json.dumps({"entries": entries}))
    monkeypatch.setenv("ROCM_FUSED_GEMM_TABLE", str(path))


def test_old_specs_keep_the_gpu_host_behaviour(tmp_path, monkeypatch):
    """A hand-built spec without ``device_type`` (an old caller) on a GPU host is decided by the GPU's table as
    before: unmeasured -> "not measured" / single unmeasured, a slower entry -> refused; never the CPU rules."""
    merge, single, _, old = _specs()
    monkeypatch.setattr(gt, "_device_name", lambda: "NVIDIA H200")
    monkeypatch.delenv("ROCM_FUSED_GEMM_UNMEASURED", raising=False)
    _table(tmp_path, monkeypatch, [_entry(8, 2.0, 5.0, ns=(8, 9))])
    assert "not measured" in gm.measured_loss(old(merge))
    assert gm.measured_single(old(single)).startswith(SINGLE_UNMEASURED)
    _table(tmp_path, monkeypatch, [_entry(8, 9.0, 5.0)], name="slow.json")
    assert "slower than separate cuBLAS" in gm.measured_loss(old(merge))
    _table(tmp_path, monkeypatch, [_entry(8, 2.0, 5.0)], name="fast.json")
    assert gm.measured_loss(old(merge)) is None
    monkeypatch.setattr(gm, "_interpreting", lambda: False)
    assert gm.check(old(merge)) is None or not gm.check(old(merge)).startswith("CPU tensors")


def test_cuda_spec_on_a_host_without_a_gpu_is_unaffected(tmp_path, monkeypatch):
    """``_device_name()`` None (no GPU): a cuda spec, an old spec and a CPU spec are decided alike (no table
    device: measured_loss refuses nothing, measured_single reads the "cpu" entries); ``check`` never gives the
    CPU-tensor reason for a cuda or old spec."""
    merge, single, fold, old = _specs()
    monkeypatch.setattr(gt, "_device_name", lambda: None)
    monkeypatch.delenv("ROCM_FUSED_GEMM_UNMEASURED", raising=False)
    _table(tmp_path, monkeypatch, [_entry(8, 2.0, 5.0, ns=(8,), device="cpu")])
    cuda = lambda s: {**s, "device_type": "cuda"}  # noqa: E731
    for s in (merge, old(merge), cuda(merge)):
        assert gm.measured_loss(s) is None
    for s in (single, old(single), cuda(single)):
        assert gm.measured_single(s) is None
    monkeypatch.setattr(gm, "_interpreting", lambda: False)
    for s in (old(merge), cuda(merge)):
        why = gm.check(s)
        assert why is None or not why.startswith("CPU tensors")
    for s in (old(fold), cuda(fold)):
        why = ng.check(s)
        assert why is None or not why.startswith("CPU tensors")
    assert gm.check(merge).startswith("CPU tensors") and ng.check(fold).startswith("CPU tensors")


def test_explicit_device_argument_still_wins(tmp_path, monkeypatch):
    """``measured_loss(spec, device)`` / ``measured_single(spec, device)`` with a device named by the caller read
    that device's entries, whatever the spec's ``device_type``."""
    merge, single, _, _ = _specs()
    monkeypatch.setattr(gt, "_device_name", lambda: None)
    monkeypatch.delenv("ROCM_FUSED_GEMM_UNMEASURED", raising=False)
    _table(tmp_path, monkeypatch, [_entry(8, 9.0, 5.0), _entry(8, 9.0, 5.0, ns=(8,))])
    assert "slower than separate cuBLAS" in gm.measured_loss(merge, "NVIDIA H200")
    assert gm.measured_single(single, "NVIDIA H200") is not None


# --------------------------------------------------------------------------------- table_config BLOCK_M (3)


@pytest.mark.parametrize("dot", [True, False])
def test_table_config_never_returns_a_block_m_below_m(tmp_path, monkeypatch, dot):
    """For every M up to the entry's, ``table_config`` returns a config with BLOCK_M >= M or None, dot tile or
    GEMV tile alike; past the last entry's M, None."""
    cfg = dataclasses.asdict(gm.Config(8, 16, 64, 1, 4, 3, dot))
    e = dict(device="cpu", m=32, k=H, ns=[8, 8], dtype="float32", config=cfg, ours_us=1.0, separate_us=2.0)
    _table(tmp_path, monkeypatch, [e])
    for m in range(1, 40):
        c = gm.table_config(m, H, (8, 8), torch.float32, "cpu")
        if m <= 8:
            assert c is not None and c.block_m >= m
        else:
            assert c is None, (m, c)
