"""gemm_merge (``passes/gemm_merge.py``) against graphs its first tests did not cover.

Each bug found by trying to break the pass has a test here (it failed before the fix), plus the cases that
held and are cheap to keep. Compiled through the real backend on CPU with the reference provider
(``graph_utils.compile_run``, strict: any raise fails the test); tiny shapes (M <= 4, K = 16).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from graph_utils import capture, compile_run

MM, ADDMM, MERGED = "aten.mm.default", "aten.addmm.default", "rocm_fused.merged_gemm.default"
H = 16


def run(fn, *args, **kw):
    return compile_run(fn, *args, options={"passes": {"gemm_merge": True}}, **kw)


def _gemms(counter) -> int:
    return counter.get(MM, 0) + counter.get(ADDMM, 0)


def _same(out, fn, *args):
    with torch.no_grad():
        eager = fn(*args)
    for o, e in zip(out, eager, strict=True):
        assert o.shape == e.shape and o.dtype == e.dtype
        torch.testing.assert_close(o, e)  # reference provider: the same ATen GEMMs (fp32: rounding only)


def _w(*shape, dtype=torch.float32):
    return torch.randn(*shape, dtype=dtype)


def test_gemm_output_that_is_the_activation_of_another_group():
    """Bug: h = x @ W0 feeds two GEMMs (a second group) and x has another GEMM. Merging x's group erased h's
    node, and the h group then handed the erased node to merged_gemm ("used before it has been defined")."""
    torch.manual_seed(0)
    w = [_w(H, H) for _ in range(4)]

    def fn(x):
        h, g = F.linear(x, w[0]), F.linear(x, w[1])
        return F.linear(h, w[2]), F.linear(h, w[3]), g

    x = torch.randn(3, H)
    out, seen = run(fn, x)
    (c,) = seen
    assert c.after[MERGED] == 2 and _gemms(c.after) == 0
    _same(out, fn, x)


def test_addmm_with_a_broadcast_bias_is_a_near_miss_not_a_raise():
    """Bug: ``addmm(bias of shape (1,), x, w)`` (a broadcast bias) passed the pass's checks and merged_gemm's
    fake raised "needs (N,)" in a strict compile."""
    torch.manual_seed(0)
    w0, w1, b = _w(8, H), _w(9, H), torch.ones(1)

    def fn(x):
        return torch.addmm(b, x, w0.t()), torch.addmm(b, x, w1.t())

    x = torch.randn(3, H)
    out, seen = run(fn, x)
    (c,) = seen
    assert MERGED not in c.after and _gemms(c.after) == 2
    assert len(c.report.near_misses) == 2
    assert all("bias of shape (1,)" in m.reason for m in c.report.near_misses)
    _same(out, fn, x)


@pytest.mark.parametrize("case,reason", [
    ("bias_2d", "bias of shape (3, 8)"), ("beta", "beta=2.0"), ("alpha", "alpha=0.5")])
def test_addmm_the_op_cannot_express_is_a_near_miss_not_silent(case, reason):
    """Bug (silent skip): two small-M GEMMs of one activation, one an addmm with a (M, N) bias or
    beta/alpha != 1, were neither merged nor reported."""
    torch.manual_seed(0)
    w0, w1 = _w(8, H), _w(9, H)
    bias = torch.ones(3, 8) if case == "bias_2d" else torch.ones(8)
    kw = {"beta": 2.0} if case == "beta" else {"alpha": 0.5} if case == "alpha" else {}

    def fn(x):
        return torch.addmm(bias, x, w0.t(), **kw), x @ w1.t()

    x = torch.randn(3, H)
    out, seen = run(fn, x)
    (c,) = seen
    assert MERGED not in c.after
    (miss,) = c.report.near_misses
    assert reason in miss.reason
    _same(out, fn, x)


def test_unsupported_dtype_group_is_a_near_miss_not_silent():
    """Bug (silent skip): float64 GEMMs of one activation were dropped without a near-miss."""
    torch.manual_seed(0)
    w0, w1 = _w(8, H, dtype=torch.float64), _w(9, H, dtype=torch.float64)

    def fn(x):
        return F.linear(x, w0), F.linear(x, w1)

    _, seen = run(fn, torch.randn(2, H, dtype=torch.float64))
    (miss,) = seen[0].report.near_misses
    assert "float64" in miss.reason and "float16/bfloat16/float32" in miss.reason


@pytest.mark.slow  # a forward and a backward compile: ~6 s on the 2-core CI machine
def test_training_backward_gemms_are_not_near_miss_noise():
    """Bug (report noise): a training backward's ``permute(grad) @ x`` next to ``grad @ w`` was reported as
    "reads ... through another view or slice" for every GEMM; a transposed read is not a projection input.
    The forward merges and the gradients equal eager's."""
    torch.manual_seed(0)
    a, b = torch.nn.Linear(H, 8), torch.nn.Linear(H, 9, bias=False)

    def fn(x):
        return (a(x) * b(x)[:, :8]).sum()

    x = torch.randn(3, H, requires_grad=True)
    torch._dynamo.reset()
    with capture() as seen:
        torch.compile(fn, backend="rocm_fused", options={"provider": "reference", "strict": True,
                                                          "passes": {"gemm_merge": True}})(x).backward()
    got = [t.grad.clone() for t in (a.weight, a.bias, b.weight, x)]
    for t in (a.weight, a.bias, b.weight, x):
        t.grad = None
    fn(x).backward()
    for g, t in zip(got, (a.weight, a.bias, b.weight, x), strict=True):
        torch.testing.assert_close(g, t.grad)
    assert seen[0].after[MERGED] == 1
    assert all(not c.report.near_misses for c in seen)


class _CastWeights(torch.nn.Module):
    """float32 master weights cast to the activation's dtype inside forward, q viewed before k_proj runs."""

    def __init__(self):
        super().__init__()
        self.q, self.k, self.v = (torch.nn.Parameter(torch.randn(n, H)) for n in (32, 16, 16))

    def forward(self, x):
        b, t, _ = x.shape
        q = F.linear(x, self.q.to(x.dtype)).view(b, t, 2, 16).transpose(1, 2)
        k = F.linear(x, self.k.to(x.dtype)).view(b, t, 1, 16).transpose(1, 2)
        v = F.linear(x, self.v.to(x.dtype)).view(b, t, 1, 16).transpose(1, 2)
        return q * 2, k + 1, v.sin()


def test_weights_computed_inside_forward_are_hoisted_and_merged():
    """Bug (false near-miss): a weight cast (or built, LoRA ``w + a @ b``) inside each projection is computed
    after the previous projection's output is used; the pass called that "would reorder" and left q/k/v.
    Those nodes depend on no member's output: the pass now moves them before the first use and merges."""
    torch.manual_seed(0)
    mod = _CastWeights().eval()
    x = torch.randn(2, 1, H, dtype=torch.bfloat16)
    out, seen = run(mod, x)
    (c,) = seen
    assert c.after[MERGED] == 1 and _gemms(c.after) == 0 and not c.report.near_misses
    _same(out, mod, x)
    a, bb = torch.randn(16, 2), torch.randn(2, H)
    w0, w1 = torch.randn(32, H), torch.randn(16, H)

    def lora(x):
        return torch.relu(F.linear(x, w0)), F.linear(x, w1 + a @ bb)

    x = torch.randn(2, H)
    out, seen = run(lora, x)
    assert seen[0].after[MERGED] == 1 and _gemms(seen[0].after) == 1  # a @ bb stays
    _same(out, lora, x)


def test_a_late_weight_that_reads_a_member_output_is_not_hoisted():
    """The hoist stops at a real dependency (the weight reads the first output): near-miss, graph unchanged."""
    torch.manual_seed(0)
    w0, w1 = torch.randn(8, H), torch.randn(9, H)

    def fn(x):
        y = F.linear(x, w0)
        z = torch.relu(y)
        return z, F.linear(x, w1 * z.mean())

    x = torch.randn(2, H)
    out, seen = run(fn, x)
    (c,) = seen
    assert MERGED not in c.after and _gemms(c.after) == 2
    assert any("reorder" in m.reason for m in c.report.near_misses)
    _same(out, fn, x)


# --------------------------------------------------------------------------------------------- held


def _held_cases():
    torch.manual_seed(0)
    w = [_w(8 + i, H) for i in range(3)]
    big = _w(40, 2 * H)
    b0, b2 = torch.randn(8), torch.randn(10)
    return {
        # outputs returned in another order than the GEMMs, one used twice
        "getitem_order": (lambda x: (F.linear(x, w[1]), F.linear(x, w[0]), F.linear(x, w[0]) + 1), 3),
        # mixed bias / no bias in one group
        "mixed_bias": (lambda x: (F.linear(x, w[0], b0), F.linear(x, w[1]), F.linear(x, w[2], b2)), 3),
        # strided weight views (a column-strided slice, a row slice)
        "strided_weights": (lambda x: (F.linear(x, big[:8, ::2]), F.linear(x, big[8:20, :H])), 2),
        # a contiguous (K, N) weight next to an (N, K) one
        "kn_and_nk": (lambda x: (x @ w[0].t().contiguous(), x @ w[1].t()), 2),
        # the activation is also another member's weight (N = M)
        "act_as_weight": (lambda x: (F.linear(x, x), F.linear(x, w[0])), 2),
        # the outputs are mutated in place afterwards
        "inplace_users": (lambda x: (F.linear(x, w[0]).add_(1), F.linear(x, w[1]).mul_(2)), 2),
    }


@pytest.mark.parametrize("case", sorted(_held_cases()))
def test_held(case):
    fn, n = _held_cases()[case]
    x = torch.randn(3, H)
    out, seen = run(fn, x)
    (c,) = seen
    assert c.after[MERGED] == 1 and _gemms(c.after) == 0
    assert c.report.matches[-1].note.startswith(f"{n} GEMMs merged")
    _same(out, fn, x)


def test_weights_as_user_inputs_between_placeholders():
    """Weights passed as graph inputs (placeholders after the activation): the op goes after the last one."""
    torch.manual_seed(0)

    def fn(w1, x, s, w2):
        return F.linear(x, w1), F.linear(x, w2), s.sum()

    args = (_w(8, H), torch.randn(3, H), torch.randn(4), _w(9, H))
    out, seen = run(fn, *args)
    assert seen[0].after[MERGED] == 1
    _same(out, fn, *args)


class _MutatedBuffers(torch.nn.Module):
    """Weights that are buffers updated in place between the projections (functionalized: the later GEMMs
    read the updated values, the copy_ back into the buffers comes last)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("w", torch.randn(8, H))
        self.register_buffer("u", torch.randn(9, H))

    def forward(self, x):
        a = F.linear(x, self.w)
        self.w.mul_(0.5)
        b = F.linear(x, self.w)
        self.u.add_(1)
        return a, b, F.linear(x, self.u)


def test_weights_mutated_between_the_gemms():
    torch.manual_seed(0)
    mod, ref = _MutatedBuffers(), _MutatedBuffers()
    ref.load_state_dict(mod.state_dict())
    x = torch.randn(3, H)
    out, seen = run(mod, x)
    assert seen[0].after[MERGED] == 1 and _gemms(seen[0].after) == 0
    _same(out, ref, x)
    torch.testing.assert_close(mod.w, ref.w)
    torch.testing.assert_close(mod.u, ref.u)


def test_unbounded_symbolic_m_near_miss_says_how_to_bound_it():
    """Report text: an unbounded symbolic M names the fix (a bounded mark_dynamic)."""
    w0, w1 = _w(8, H), _w(9, H)
    _, seen = run(lambda x: (F.linear(x, w0), F.linear(x, w1)), torch.randn(4, H), dynamic=True)
    (miss,) = seen[0].report.near_misses
    assert "no finite upper bound" in miss.reason and "mark_dynamic(x, 0, min=1, max=32)" in miss.reason


def test_a_dependent_member_is_left_and_the_others_merge():
    """Bug (missed merge): v's weight reads q's output; the whole q/k/v group was a near-miss. Now v alone is
    (its reason says so) and q/k merge."""
    torch.manual_seed(0)
    w = [_w(8, H) for _ in range(3)]

    def fn(x):
        q = F.linear(x, w[0])
        return q, F.linear(x, w[1]), F.linear(x, w[2] * q.mean())

    x = torch.randn(2, H)
    out, seen = run(fn, x)
    (c,) = seen
    assert c.after[MERGED] == 1 and _gemms(c.after) == 1
    assert c.report.matches[0].note.startswith("2 GEMMs merged")
    (miss,) = c.report.near_misses
    assert "computed from another GEMM's output" in miss.reason
    _same(out, fn, x)


def test_symbolic_k_and_n_are_named_in_the_report():
    """Report text: under dynamic=True (K, N symbolic too) the match's shape and note said "None"."""
    w0, w1 = _w(8, H), _w(9, H)

    def fn(x):
        torch._check(x.size(0) <= 32)
        return F.linear(x, w0), F.linear(x, w1)

    _, seen = run(fn, torch.randn(4, H), dynamic=True)
    (m,) = seen[0].report.matches
    assert "None" not in m.shape and "None" not in m.note
