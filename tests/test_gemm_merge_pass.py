"""The gemm_merge pass (``passes/gemm_merge.py``): what it merges, what it leaves, and the numbers after.

Compiled through the real backend on CPU (``graph_utils.compile_run``: reference provider unless a test
forces Triton, which runs under the interpreter). Op counts before/after the pass manager, the report's
matches and near-misses, outputs against eager within the contract.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from graph_utils import compile_run
from test_gemm_merge_kernels import assert_gemm_contract

from rocm_inductor.policy import PASS_DEFAULTS

MM, ADDMM, MERGED = "aten.mm.default", "aten.addmm.default", "rocm_fused.merged_gemm.default"
ON = {"gemm_merge": True}
H = 64
#: q/k/v widths: none a multiple of 16 (the smallest block).
NQ, NK = 40, 20


class QKV(torch.nn.Module):
    """HF-style attention projections of one (b, s, h) hidden state; outputs used separately."""

    def __init__(self, dtype=torch.float32, bias=False, nq=NQ, nk=NK):
        super().__init__()
        self.q_proj = torch.nn.Linear(H, nq, bias=bias, dtype=dtype)
        self.k_proj = torch.nn.Linear(H, nk, bias=bias, dtype=dtype)
        self.v_proj = torch.nn.Linear(H, nk, bias=bias, dtype=dtype)

    def forward(self, x):
        return self.q_proj(x) * 2, torch.tanh(self.k_proj(x)), self.v_proj(x) + 1


def run(fn, *args, options=None, **kw):
    """``compile_run`` with the pass on (a forced global provider alone does not turn it on)."""
    return compile_run(fn, *args, options={"passes": ON, **(options or {})}, **kw)


def _gemms(counter) -> int:
    return counter.get(MM, 0) + counter.get(ADDMM, 0)


def _eager_and_ref(mod, x):
    with torch.no_grad():
        eager = mod(x)
        ref = mod.double()(x.double())
        mod.to(x.dtype)
    return eager, ref


def _check(out, mod, x):
    eager, ref = _eager_and_ref(mod, x)
    for o, e, r in zip(out, eager, ref, strict=True):
        assert_gemm_contract(o, e, r, H)


@pytest.mark.parametrize("dtype,bias,provider", [
    (torch.bfloat16, False, "reference"), (torch.float16, True, "reference"), (torch.float32, False, "reference"),
    (torch.bfloat16, True, "triton"), (torch.float32, False, "triton"),
])
def test_qkv_merged_static_m(dtype, bias, provider):
    torch.manual_seed(0)
    mod = QKV(dtype, bias).eval()
    x = torch.randn(2, 3, H, dtype=dtype)
    out, seen = run(mod, x, options={"provider": provider})
    (c,) = seen
    assert _gemms(c.before) == 3 and _gemms(c.after) == 0 and c.after[MERGED] == 1
    (m,) = c.report.matches
    assert (m.op, m.provider, m.shape) == ("merged_gemm", provider, f"6x{H}->{NQ}/{NK}/{NK}")
    assert m.note.startswith(f"3 GEMMs merged, N {NQ}/{NK}/{NK}, bucket M=6")
    assert ("bias 3/3" in m.note) is bias
    _check(out, mod, x)


@pytest.mark.parametrize("bound,merged", [(32, True), (None, False)])
def test_symbolic_m_uses_the_bucket_bound(bound, merged):
    """A symbolic batch with an upper bound <= 32 is a decode bucket; an unbounded one is not (near-miss)."""
    mod = QKV().eval()
    x = torch.randn(4, 1, H)
    if bound:
        torch._dynamo.mark_dynamic(x, 0, min=2, max=bound)
    else:
        torch._dynamo.mark_dynamic(x, 0)
    out, seen = run(mod, x, dynamic=None)
    c = seen[-1]
    assert c.after.get(MERGED, 0) == int(merged)
    if merged:
        assert "(<= 32)" in c.report.matches[0].note
        _check(out, mod, x)
    else:
        (miss,) = c.report.near_misses
        assert "not a decode bucket" in miss.reason and "no finite upper bound" in miss.reason


def test_large_static_m_is_a_near_miss():
    mod = QKV().eval()
    _, seen = run(mod, torch.randn(2, 40, H))
    (c,) = seen
    assert MERGED not in c.after
    (miss,) = c.report.near_misses
    assert "M=80 > aten_gemm_max_m=32" in miss.reason


def test_off_unless_enabled():
    """Off by default except on CUDA (measured on the H200, gated by the measured table); a forced global
    provider (what every CPU test and the example set) does not turn it on, forcing merged_gemm's provider does."""
    assert PASS_DEFAULTS["cuda"]["gemm_merge"] is True
    assert not PASS_DEFAULTS["rocm"]["gemm_merge"] and not PASS_DEFAULTS["cpu"].get("gemm_merge", False)
    mod, x = QKV().eval(), torch.randn(1, 1, H)
    _, seen = compile_run(mod, x)
    assert MERGED not in seen[0].after and _gemms(seen[0].after) == 3
    assert "providers" in seen[0].report.passes_skipped["gemm_merge"]
    _, seen = compile_run(mod, x, options={"providers": {"merged_gemm": "reference"}})
    assert seen[0].after[MERGED] == 1


class _Casts(torch.nn.Module):
    """One projection reads a float32 copy of the activation (a float32 head in a bf16 model)."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(H, NQ, bias=False, dtype=torch.bfloat16)
        self.b = torch.nn.Linear(H, NK, bias=False, dtype=torch.bfloat16)
        self.c = torch.nn.Linear(H, NK, bias=False, dtype=torch.float32)

    def forward(self, x):
        return self.a(x), self.b(x), self.c(x.float())


def test_different_dtype_is_a_near_miss_and_the_rest_merges():
    mod = _Casts().eval()
    x = torch.randn(1, 2, H, dtype=torch.bfloat16)
    _, seen = run(mod, x)
    (c,) = seen
    assert c.after[MERGED] == 1 and _gemms(c.after) == 1
    assert c.report.matches[0].note.startswith(f"2 GEMMs merged, N {NQ}/{NK}")
    (miss,) = c.report.near_misses
    assert "different dtypes" in miss.reason and "float32" in miss.reason


class _Slices(torch.nn.Module):
    """k/v read the last token only (a slice of the hidden state): not the activation q reads."""

    def __init__(self):
        super().__init__()
        self.q = torch.nn.Linear(H, NQ, bias=False)
        self.k = torch.nn.Linear(H, NK, bias=False)

    def forward(self, x):
        return self.q(x), self.k(x[:, -1:])


def test_other_view_of_the_activation_is_a_near_miss():
    _, seen = run(_Slices().eval(), torch.randn(2, 3, H))
    (c,) = seen
    assert MERGED not in c.after
    assert any("another view or slice" in m.reason for m in c.report.near_misses)


class _KN(torch.nn.Module):
    """Weights kept as (K, N) matrices and applied as ``x @ w`` (some in-house and quantised-layer code)."""

    def __init__(self):
        super().__init__()
        self.w1 = torch.nn.Parameter(torch.randn(H, NQ))
        self.w2 = torch.nn.Parameter(torch.randn(H, NK))

    def forward(self, x):
        return x @ self.w1, x @ self.w2


def test_kn_weights_merge_on_reference_and_are_a_layout_near_miss_on_triton():
    mod = _KN().eval()
    x = torch.randn(3, H)
    out, seen = run(mod, x)
    assert seen[0].after[MERGED] == 1
    _check(out, mod, x)
    _, seen = run(mod, x, options={"provider": "triton"})
    (c,) = seen
    assert MERGED not in c.after
    (miss,) = c.report.near_misses
    assert "not contiguous along K" in miss.reason


class _Five(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ps = torch.nn.ModuleList(torch.nn.Linear(H, 8 + i, bias=False) for i in range(5))

    def forward(self, x):
        return tuple(p(x) for p in self.ps)


def test_five_gemms_split_into_three_and_two():
    mod = _Five().eval()
    x = torch.randn(2, H)
    out, seen = run(mod, x)
    (c,) = seen
    assert c.after[MERGED] == 2 and _gemms(c.after) == 0
    assert sorted(m.note.split(" GEMMs")[0] for m in c.report.matches) == ["2", "3"]
    _check(out, mod, x)


class _Dependent(torch.nn.Module):
    """The second projection's weight is scaled by the first projection's output: no single launch."""

    def __init__(self):
        super().__init__()
        self.w1 = torch.nn.Parameter(torch.randn(NQ, H))
        self.w2 = torch.nn.Parameter(torch.randn(NK, H))

    def forward(self, x):
        y1 = F.linear(x, self.w1)
        return y1, F.linear(x, self.w2 * y1.mean())


def test_dependent_gemms_are_a_near_miss():
    _, seen = run(_Dependent().eval(), torch.randn(2, H))
    (c,) = seen
    assert MERGED not in c.after
    assert any("reorder" in m.reason for m in c.report.near_misses)
