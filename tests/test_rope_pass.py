"""RoPE pass on compiled functions: op counts per spelling, numerics contract vs float64, edge inputs."""

from __future__ import annotations

import pytest
import torch
from graph_utils import assert_contract, compile_run
from rope_spellings import complex_rope, gptj_rope, hf_rope, hf_tables, partial_rope, upcast_rope

ROPE = "rocm_fused.rope.default"
DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def _f64(a):
    if isinstance(a, torch.Tensor):
        return a.to(torch.complex128) if a.is_complex() else a.double()
    return a


def _check(fn, *args, n_ops=1, options=None, dynamic=False):
    """Compile ``fn``, assert ``n_ops`` rope ops and no leftover rotate ops, numerics within the contract."""
    out, seen = compile_run(fn, *args, options=options, dynamic=dynamic)
    assert sum(c.after.get(ROPE, 0) for c in seen) == n_ops, [str(c.report) for c in seen]
    assert all(c.after.get("aten.neg.default", 0) == 0 for c in seen)  # rotate_half/every_two gone
    assert sum(c.report.count("rope") for c in seen) == n_ops
    eager = fn(*args)
    ref64 = fn(*[_f64(a) for a in args])
    for o, e, r in zip(out, eager, ref64):
        assert_contract(o, e, r.to(torch.float64))
    return seen


def _qk(b, hq, hk, s, d, dtype, layout="bhsd"):
    if layout == "bhsd":  # HF: projection (b, s, h, d) viewed then transposed
        return (torch.randn(b, s, hq, d, dtype=dtype).transpose(1, 2),
                torch.randn(b, s, hk, d, dtype=dtype).transpose(1, 2))
    return torch.randn(b, s, hq, d, dtype=dtype), torch.randn(b, s, hk, d, dtype=dtype)


CASES = [(sp, torch.bfloat16) for sp in ("hf_dim1", "hf_dim2", "upcast", "partial", "gptj", "complex")] + [
    ("hf_dim1", torch.float16), ("hf_dim1", torch.float32), ("partial", torch.float16), ("gptj", torch.float32)]


@pytest.mark.parametrize("spelling,dtype", CASES)
def test_spellings(spelling, dtype):
    torch.manual_seed(0)
    b, s, d = 2, 5, 32
    layout = "bsdh" if spelling in ("hf_dim2", "gptj", "complex") else "bhsd"
    q, k = _qk(b, 4, 2, s, d, dtype, layout)
    if spelling == "hf_dim1":
        _check(hf_rope, q, k, *hf_tables(b, s, d, dtype))
    elif spelling == "hf_dim2":
        _check(lambda q, k, c, s_: hf_rope(q, k, c, s_, 2), q, k, *hf_tables(b, s, d, dtype))
    elif spelling == "upcast":
        _check(upcast_rope, q, k, *hf_tables(b, s, d, torch.float32))
    elif spelling == "partial":
        _check(partial_rope, q, k, *hf_tables(b, s, d // 4, dtype))
    elif spelling == "gptj":
        c, s_ = hf_tables(b, s, d, dtype)
        _check(gptj_rope, q, k, s_[..., : d // 2], c[..., : d // 2])
    else:
        ang = torch.randn(s, d // 2)
        _check(complex_rope, q, k, torch.polar(torch.ones_like(ang), ang))


@pytest.mark.parametrize("d,partial", [(64, False), (80, False), (96, True), (128, True), (256, False),
                                       (128, False)])
def test_head_dims(d, partial):
    """head_dim 64/80/96/128/256, rotary_dim = head_dim or head_dim / 4 (one compile each)."""
    torch.manual_seed(0)
    q, k = _qk(1, 2, 1, 3, d, torch.bfloat16)
    rd = d // 4 if partial else d
    _check(partial_rope if partial else hf_rope, q, k, *hf_tables(1, 3, rd, torch.bfloat16))


@pytest.mark.parametrize("provider", ["reference", "triton"])
def test_dynamic_seq(provider):
    """Sequence length dynamic (head_dim static): one compile serves lengths 7 and 9."""
    torch.manual_seed(0)
    opts = {"provider": provider, "strict": True}
    compiled = torch.compile(hf_rope, backend="rocm_fused", options=opts, dynamic=None)
    torch._dynamo.reset()
    from graph_utils import capture

    with capture() as seen, torch.no_grad():
        for s in (7, 1, 9):
            q, k = _qk(1, 4, 2, s, 64, torch.bfloat16)
            c, sn = hf_tables(1, s, 64, torch.bfloat16)
            for t, dim in ((q, 2), (k, 2), (c, 1), (sn, 1)):
                torch._dynamo.mark_dynamic(t, dim)
            got = compiled(q, k, c, sn)
            for g, r in zip(got, hf_rope(q.double(), k.double(), c.double(), sn.double())):
                torch.testing.assert_close(g.double(), r, atol=2e-2, rtol=2e-2)
    # One dynamic graph for 7 and 9; Dynamo specialises length 1 (0/1 specialisation) into a second one.
    assert len(seen) == 2 and all(c.after.get(ROPE, 0) == 1 for c in seen)


def test_one_kv_head():
    q = torch.randn(1, 2, 2, 128, dtype=torch.bfloat16)
    k = torch.randn(1, 1, 2, 128, dtype=torch.bfloat16)
    _check(hf_rope, q, k, *hf_tables(1, 2, 128, torch.bfloat16))


def test_rope_on_noncontiguous_slice():
    """DeepSeek-style q[..., nope:] of a (T, H, nope + rope) tensor; one rotation only (k=None op)."""
    nope, rd = 32, 16

    def fn(x, cos, sin):
        qp = x[..., nope:]
        return (qp * cos[:, None] + torch.cat((-qp[..., rd // 2:], qp[..., : rd // 2]), -1) * sin[:, None],)

    x = torch.randn(6, 4, nope + rd, dtype=torch.bfloat16)
    c, s = hf_tables(1, 6, rd, torch.bfloat16)
    _check(fn, x, c[0], s[0])


@pytest.mark.parametrize("s", [1, 0])
def test_short_sequences(s):
    q, k = _qk(1, 4, 2, s, 64, torch.float16)
    c, sn = hf_tables(1, s, 64, torch.float16)
    out, seen = compile_run(hf_rope, q, k, c, sn)
    assert sum(cp.after.get(ROPE, 0) for cp in seen) == 1
    for o, r in zip(out, hf_rope(q, k, c, sn)):
        assert o.shape == r.shape
        torch.testing.assert_close(o.float(), r.float(), atol=1e-2, rtol=1e-2)


def test_not_rope_left_alone():
    """``x * c + rotate_half(y) * s`` with y != x is not a rotation: nothing rewritten."""
    from rope_spellings import rotate_half

    def fn(x, y, c, s):
        return (x * c + rotate_half(y) * s,)

    a = [torch.randn(2, 3, 8) for _ in range(4)]
    out, seen = compile_run(fn, *a)
    assert sum(c.after.get(ROPE, 0) for c in seen) == 0
    torch.testing.assert_close(out[0], fn(*a)[0])


def test_broadcast_beyond_input_is_near_miss():
    """cos with an extra leading dim broadcasts the output beyond q: reported, not rewritten."""
    from rope_spellings import rotate_half

    def fn(x, c, s):
        return (x * c + rotate_half(x) * s,)

    x = torch.randn(3, 8)
    c, s = torch.randn(2, 3, 8), torch.randn(2, 3, 8)
    out, seen = compile_run(fn, x, c, s)
    assert sum(cp.after.get(ROPE, 0) for cp in seen) == 0
    misses = [m for cp in seen for m in cp.report.near_misses if m.pass_name == "rope"]
    assert misses and "broadcast" in misses[0].reason


def test_pair_without_provider_is_one_near_miss_per_rotation():
    """No provider takes the q/k op (AITER forced on a machine without it): nothing rewritten, and each of the
    two rotations is a near-miss at its own line with the provider's refusal."""
    from rope_spellings import rotate_half

    def fn(q, k, c, s):
        qo = q * c + rotate_half(q) * s
        ko = k * c + rotate_half(k) * s
        return qo, ko

    q, k = _qk(1, 4, 2, 3, 32, torch.bfloat16)
    c, s = hf_tables(1, 3, 32, torch.bfloat16)
    out, seen = compile_run(fn, q, k, c[:, None], s[:, None], options={"providers": {"rope": "aiter"}})
    assert sum(cp.after.get(ROPE, 0) for cp in seen) == 0
    misses = [m for cp in seen for m in cp.report.near_misses if m.pass_name == "rope"]
    assert len(misses) == 2 and all(m.what == "RoPE (neox)" and "aiter" in m.reason for m in misses)
    assert len({m.location for m in misses}) == 2  # q's line and k's line
    for o, r in zip(out, fn(q, k, c[:, None], s[:, None])):
        torch.testing.assert_close(o.float(), r.float(), atol=1e-2, rtol=1e-2)  # Inductor rounds bf16 its way
