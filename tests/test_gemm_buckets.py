"""Compile levels and the level-2 GEMM bucket override (rocm_inductor.lowerings.gemm_buckets).

CPU has no Triton GEMM templates, so the override is shown three ways here: the pure decision function;
the hook fed synthetic template choices; and real compiles where a stand-in handler (already installed,
as a user's ``InductorChoices`` subclass would be) injects synthetic "triton" choices into every GEMM, so
that what the override keeps is visible in the report, while the selection hook records what each GEMM
finally offered to Inductor's selector. The GPU test records what Inductor actually benchmarked.
"""

from __future__ import annotations

import contextlib
import dataclasses

import pytest
import sympy
import torch
from torch._inductor.choices import InductorChoices
from torch._inductor.virtualized import V
from torch.utils._sympy.value_ranges import ValueRanges

from rocm_inductor import backend
from rocm_inductor.backend import resolve
from rocm_inductor.lowerings import gemm_buckets as gb
from rocm_inductor.options import Options, parse_options
from rocm_inductor.report import reports

PASS_HOOK = getattr(backend, "PASS_HOOK", "post_grad_custom_post_pass")

try:
    from torch.utils._sympy.numbers import int_oo
except ImportError:  # older torch
    int_oo = sympy.oo

S0 = sympy.Symbol("s0", integer=True, positive=True)
S1 = sympy.Symbol("s1", integer=True, positive=True)


# ---------------------------------------------------------------- decision function
@pytest.mark.parametrize("op", ["mm", "addmm", "bmm", "baddbmm", "mm-ah"])
@pytest.mark.parametrize("m,aten", [(1, True), (16, True), (32, True), (33, False), (512, False)])
def test_decide_static_m(op, m, aten):
    d = gb.decide(op, m, 32)
    assert d.aten_only is aten and d.m_upper == m and d.m == str(m)
    assert gb.decide(op, sympy.Integer(m), 32).aten_only is aten


def test_decide_symbolic_m_with_bound():
    ranges = {S0: ValueRanges(1, 8)}
    d = gb.decide("mm", 4 * S0, 32, ranges)  # 4 * s0 <= 32
    assert d.aten_only and d.m_upper == 32 and "upper bound 32" in d.reason
    assert gb.decide("mm", S0, 32, {S0: ValueRanges(1, 32)}).aten_only
    d = gb.decide("mm", S0, 32, {S0: ValueRanges(1, 64)})
    assert not d.aten_only and d.m_upper == 64 and "> aten_gemm_max_m=32" in d.reason


def test_decide_symbolic_m_without_bound():
    for ranges in ({S0: ValueRanges(2, int_oo)}, None, {}):
        d = gb.decide("mm", S0, 32, ranges)
        assert not d.aten_only and d.m_upper is None and "no finite upper bound" in d.reason


def test_decide_bmm_batch_dims_do_not_count():
    # [B, M, K]: M is shape[-2]; a large or symbolic batch keeps a small-M bmm on ATen
    assert gb.gemm_m((64, 8, 128)) == 8 and gb.decide("bmm", gb.gemm_m((64, 8, 128)), 32).aten_only
    m = gb.gemm_m((S1, 16, 64))
    assert m == 16 and gb.decide("baddbmm", m, 32, {S1: ValueRanges(2, int_oo)}).aten_only
    assert not gb.decide("bmm", gb.gemm_m((1, 256, 64)), 32).aten_only
    with pytest.raises(ValueError, match=">= 2 dims"):
        gb.gemm_m((16,))


def test_decide_off_switches_and_other_ops():
    assert not gb.decide("mm", 16, 0).aten_only  # aten_gemm_max_m=0 turns the override off
    d = gb.decide("mm", 16, 32, aten_available=False)
    assert not d.aten_only and "max_autotune_gemm_backends" in d.reason
    for op in ("int_mm", "mm_plus_mm", "scaled_mm"):
        assert not gb.decide(op, 16, 32).aten_only


# ---------------------------------------------------------------- the hook, fed synthetic choices
@dataclasses.dataclass
class _Node:
    name: str

    def get_name(self) -> str:
        return self.name


class _Inputs:
    """Stand-in for MMKernelInputs: M, N, K and the operand nodes."""

    def __init__(self, m, names=("x", "w")):
        self.m, self._nodes = m, [_Node(n) for n in names]

    def mnk_symbolic(self):
        return (sympy.Integer(self.m), sympy.Integer(64), sympy.Integer(64))

    def nodes(self):
        return self._nodes

    def mat1mat2(self):
        return self._nodes[-2], self._nodes[-1]


class _Template:
    def __init__(self, uid):
        self.uid = uid


@dataclasses.dataclass
class _KTC:
    """Stand-in KernelTemplateChoice; ``choice`` None = it yields no ChoiceCaller (Inductor drops it)."""

    template: object
    inputs: object = None
    layout: object = None
    choice: object = None


def _feed(handler, m, templates, op="mm", names=("x", "w")):
    gens = {t.uid: iter([_KTC(t) for _ in range(3 if not gb._is_extern(t) else 1)]) for t in templates}
    return handler._finalize_template_configs(gens, _Inputs(m, names), templates, op, None)


def _aten(name):
    from torch._inductor.kernel import mm

    return getattr(mm, name)


@pytest.mark.parametrize("m,expect_all", [(16, False), (256, True)])
def test_hook_keeps_aten_only_for_small_m(m, expect_all):
    h = gb.GemmBucketChoices(32)
    templates = [_aten("aten_mm"), _Template("triton::mm"), _Template("triton::persistent_tma_mm")]
    kept = _feed(h, m, templates)
    names = [gb._name(k.template) for k in kept]
    if expect_all:
        assert len(kept) == 7 and names.count("triton::mm") == 3
    else:
        assert names == [gb._name(_aten("aten_mm"))]
    (rec,) = h.gemm_records.values()
    assert rec.aten_only is not expect_all and rec.m == str(m) and len(rec.offered) == 7
    assert rec.kept == names


def test_hook_addmm_over_several_calls_keeps_one_extern():
    # tuned_addmm asks once for its ATen choices (addmm, bias_addmm) and once for the templates
    h = gb.GemmBucketChoices(32)
    kept1 = _feed(h, 16, [_aten("aten_addmm"), _aten("aten_bias_addmm")], "addmm", ("b", "x", "w"))
    kept2 = _feed(h, 16, [_Template("triton::mm")], "addmm", ("b", "x", "w"))
    assert [gb._name(k.template) for k in kept1] == [gb._name(_aten("aten_addmm"))] and kept2 == []
    (rec,) = h.gemm_records.values()
    assert rec.op == "addmm" and rec.kept == [gb._name(_aten("aten_addmm"))] and len(rec.offered) == 5


def test_hook_keeps_everything_when_aten_is_not_a_backend():
    h = gb.GemmBucketChoices(32)
    with torch._inductor.config.patch(max_autotune=True, max_autotune_gemm_backends="TRITON"):
        kept = _feed(h, 16, [_Template("triton::mm")])
    assert len(kept) == 3  # dropping them all would raise NoValidChoicesError


def test_uuid_depends_on_max_m_and_composes_with_existing_handler():
    class Mine(InductorChoices):
        tag = "mine"

        def uuid(self):
            return "mine-v1"

    a, b = gb.make_choices(32), gb.make_choices(8)
    assert a.uuid() != b.uuid() and isinstance(a, gb.GemmBucketChoices)
    c = gb.make_choices(32, Mine())
    assert isinstance(c, Mine) and c.tag == "mine" and "mine-v1" in c.uuid() and c.uuid() != a.uuid()
    d = gb.make_choices(16, c)  # nested: re-based on Mine, not on the wrapper
    assert isinstance(d, Mine) and d.aten_gemm_max_m == 16 and "mine-v1" in d.uuid()


# ---------------------------------------------------------------- real compiles (CPU)
class _Injecting(InductorChoices):
    """A handler already in place that adds 3 synthetic template choices to every GEMM and records calls.

    The synthetic choices produce no ChoiceCaller (``choice`` is None), so Inductor drops them after the
    hook; whether the override kept them is in the report (``GemmChoice.kept``).
    """

    def __init__(self):
        self.calls = []

    def _finalize_template_configs(self, template_choices, kernel_inputs, templates, op_name,
                                   kwarg_overrides=None):
        fake = _Template("fake_triton::mm")
        template_choices = {**template_choices, fake.uid: iter([_KTC(fake, kernel_inputs) for _ in range(3)])}
        out = super()._finalize_template_configs(template_choices, kernel_inputs, [*templates, fake],
                                                 op_name, kwarg_overrides)
        self.calls.append((op_name, str(kernel_inputs.mnk_symbolic()[0])))
        return out


@contextlib.contextmanager
def _selection_recorder():
    """Patch Inductor's selection hook in mm.py / bmm.py: record per GEMM (name, M, choice names, handler)."""
    from torch._inductor.kernel import bmm, mm

    seen = []
    orig = {mod: mod.autotune_select_algorithm for mod in (mm, bmm)}

    def make(o):
        def rec(name, choices, input_nodes, layout, *a, **kw):
            seen.append(dict(name=name, m=str(layout.size[-2]), choices=[c.name for c in choices],
                             handler=type(V.choices), max_autotune=torch._inductor.config.max_autotune))
            return o(name, choices, input_nodes, layout, *a, **kw)
        return rec

    for mod, o in orig.items():
        mod.autotune_select_algorithm = make(o)
    try:
        yield seen
    finally:
        for mod, o in orig.items():
            mod.autotune_select_algorithm = o


def _gemms(x16, x256, w, b, y, z):
    """mm (M=16), addmm (M=256), bmm (M=8 per batch element)."""
    return x16 @ w, torch.nn.functional.linear(x256, w.t(), b), torch.bmm(y, z)


def _args():
    g = torch.Generator().manual_seed(0)
    r = lambda *s: torch.randn(*s, generator=g)
    return r(16, 64), r(256, 64), r(64, 48), r(48), r(4, 8, 32), r(4, 32, 16)


@contextlib.contextmanager
def _handler(h):
    with V.set_choices_handler(h):
        yield h


def _compile(options, fn=_gemms, args=None, caches_off=True):
    """Compile + run through the backend; the C++ GEMM templates are off (added outside the hook, slow)."""
    args = args or _args()
    options = {"strict": True, **options}
    torch._dynamo.reset()
    patch = {"max_autotune_gemm_backends": "ATEN,TRITON"}
    if caches_off:
        patch["force_disable_caches"] = True
    with torch._inductor.config.patch(patch), torch.no_grad():
        out = torch.compile(fn, backend="rocm_fused", options=options)(*args)
    for o, e in zip(out, fn(*args), strict=True):
        torch.testing.assert_close(o, e, rtol=1e-4, atol=1e-4)
    return out


def _by_op(gemms):
    return {g.op: g for g in gemms}


def test_level2_compile_keeps_aten_for_small_m_only():
    inj = _Injecting()
    with _handler(inj), _selection_recorder() as seen:
        _compile({"level": 2})
        assert V.choices is inj  # restored after the compile
    by = _by_op(reports()[-1].gemms)
    assert set(by) == {"mm", "addmm", "bmm"}
    assert by["mm"].m == "16" and by["mm"].aten_only and by["mm"].kept == ["aten::mm"]
    assert by["bmm"].m == "8" and by["bmm"].aten_only and by["bmm"].kept == ["aten::bmm"]
    assert by["addmm"].m == "256" and not by["addmm"].aten_only
    assert by["addmm"].kept.count("fake_triton::mm") >= 3  # large M keeps the (synthetic) templates
    # what reached Inductor's selector: one ATen choice per small GEMM, so nothing to benchmark
    sel = {s["name"]: s for s in seen}
    assert len(sel["mm"]["choices"]) == 1 and len(sel["bmm"]["choices"]) == 1, sel
    assert all(s["max_autotune"] and issubclass(s["handler"], gb._GemmBucketMixin) for s in seen)
    assert all(issubclass(s["handler"], _Injecting) for s in seen)  # the handler in place was kept


def test_level1_and_level0_have_no_override():
    for level in (1, 0):
        inj = _Injecting()
        with _handler(inj), _selection_recorder() as seen:
            _compile({"level": level})
        assert {c[0] for c in inj.calls} >= {"mm", "addmm", "bmm"}  # the plain handler saw every GEMM
        assert seen and all(s["handler"] is _Injecting and not s["max_autotune"] for s in seen)
        assert all(not r.gemms for r in reports())
    opts0, patches0 = resolve(None, {"level": 0})
    assert PASS_HOOK not in patches0 and "max_autotune" not in patches0
    assert "inductor_choices_class" not in patches0
    opts1, patches1 = resolve(None, {"level": 1})
    assert PASS_HOOK in patches1 and "max_autotune" not in patches1
    assert "inductor_choices_class" not in patches1


def test_mode_mapping():
    o, p = resolve("max-autotune", None)
    assert o.level == 2 and p["max_autotune"] and p["triton.cudagraphs"]
    o, p = resolve("max-autotune-no-cudagraphs", None)
    assert o.level == 2 and p["max_autotune"] and not p.get("triton.cudagraphs", False)
    o, p = resolve("reduce-overhead", None)
    assert o.level == 1 and p["triton.cudagraphs"] and "max_autotune" not in p
    o, p = resolve(None, {"level": 2, "cudagraphs": False})
    assert o.level == 2 and not p.get("triton.cudagraphs", False)
    if gb.choices_class_in_cache_key():  # torch >= 2.12
        assert p["inductor_choices_class"]().uuid() == gb.make_choices(32).uuid()
    with pytest.raises(ValueError, match="unknown mode"):
        resolve("fastest", None)


def test_compiles_with_different_levels_do_not_influence_each_other():
    prior_factory = torch._inductor.config.inductor_choices_class
    inj = _Injecting()
    with _handler(inj):
        _compile({"level": 2})
        a = _by_op(reports()[-1].gemms)
        with _selection_recorder() as seen:
            _compile({"level": 1})
        assert all(s["handler"] is _Injecting for s in seen) and not reports()[-1].gemms
        _compile({"level": 2, "aten_gemm_max_m": 8})
        c = _by_op(reports()[-1].gemms)
    assert a["mm"].aten_only and not c["mm"].aten_only and c["bmm"].aten_only  # M=16 > 8, M=8 <= 8
    assert "fake_triton::mm" in c["mm"].kept
    assert torch._inductor.config.inductor_choices_class is prior_factory
    assert not isinstance(V.choices, gb._GemmBucketMixin)


def _mm_only(x, w):
    return (x @ w,)


def test_fx_graph_cache_key_differs_by_level_and_max_m(tmp_path, monkeypatch):
    from torch._dynamo.utils import counters

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    args = (torch.randn(16, 32), torch.randn(32, 24))

    def misses(options):
        before = counters["inductor"]["fxgraph_cache_miss"]
        with torch._inductor.config.patch(fx_graph_cache=True):
            _compile(options, _mm_only, args, caches_off=False)
        return counters["inductor"]["fxgraph_cache_miss"] - before

    assert misses({"level": 2}) == 1
    assert misses({"level": 2}) == 0  # same options: served from the cache
    assert misses({"level": 2, "aten_gemm_max_m": 8}) == 1  # the override's threshold is in the key
    assert misses({"level": 1}) == 1
    assert misses({"level": 1}) == 0


def test_cache_key_carriers_without_choices_class_key(monkeypatch):
    """torch 2.11 path: no inductor_choices_class in the key; the pass manager / GemmKeyPass carry it."""
    from rocm_inductor.passes.manager import PassManager

    monkeypatch.setattr(gb, "choices_class_in_cache_key", lambda: False)
    o32, o8, o1 = parse_options({"level": 2}), parse_options({"level": 2, "aten_gemm_max_m": 8}), Options()
    assert gb.config_patches(o32) == {}
    assert len({PassManager(o).uuid() for o in (o32, o8, o1)}) == 3
    k32, k8 = gb.fallback_patches(o32), gb.fallback_patches(o8)
    assert k32[PASS_HOOK].uuid() != k8[PASS_HOOK].uuid()
    assert gb.fallback_patches(o1) == {}


def test_options_validation():
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['aten_gem_max_m'\]") as e:
        parse_options({"aten_gem_max_m": 16})
    for key in ("level", "aten_gemm_max_m", "cudagraphs", "provider", "passes"):
        assert key in str(e.value)
    for bad in ({"level": 3}, {"aten_gemm_max_m": -1}, {"aten_gemm_max_m": True},
                {"aten_gemm_max_m": 1.5}, {"cudagraphs": "yes"}):
        with pytest.raises(ValueError):
            parse_options(bad)
    assert parse_options({"level": 2, "aten_gemm_max_m": 0}).aten_gemm_max_m == 0


# ---------------------------------------------------------------- GPU: what was benchmarked
@pytest.mark.gpu
def test_gpu_small_m_gemms_are_not_benchmarked():
    from torch._inductor import select_algorithm

    bench = []  # (name, M, number of choices benchmarked) from Inductor's autotune feedback

    def saver(timings, name, input_nodes, *rest):
        m = input_nodes[-2].get_size()[-2]
        bench.append((name, int(m) if str(m).isdigit() else str(m), len(timings)))

    dev, dt = "cuda", torch.bfloat16
    w = torch.randn(1024, 1024, device=dev, dtype=dt) / 32

    def f(x16, x512):
        return (x16 @ w).relu(), (x512 @ w).relu()

    args = (torch.randn(16, 1024, device=dev, dtype=dt), torch.randn(512, 1024, device=dev, dtype=dt))
    select_algorithm.add_feedback_saver(saver)
    try:
        torch._dynamo.reset()
        with torch._inductor.config.patch(force_disable_caches=True), torch.no_grad():
            out = torch.compile(f, backend="rocm_fused", options={"level": 2, "cudagraphs": False})(*args)
    finally:
        select_algorithm.clear_feedback_savers()
    for o, e in zip(out, f(*args), strict=True):
        torch.testing.assert_close(o, e, rtol=2e-2, atol=2e-2)
    gemms = reports()[-1].gemms
    assert any(g.m == "16" and g.aten_only for g in gemms), gemms
    assert any(g.m == "512" and not g.aten_only and len(g.kept) > 1 for g in gemms), gemms
    assert not [b for b in bench if isinstance(b[1], int) and b[1] <= 32], bench  # small M: nothing tuned
    assert [b for b in bench if b[1] == 512 and b[2] > 1], bench  # prefill M: tuned as before


@pytest.mark.parametrize("max_rows,aten", [(32, True), (None, False)])
def test_level2_symbolic_m_uses_shape_env_bound(max_rows, aten):
    x, w = torch.randn(16, 64), torch.randn(64, 48)
    torch._dynamo.mark_dynamic(x, 0, min=2, max=max_rows) if max_rows else torch._dynamo.mark_dynamic(x, 0)
    _compile({"level": 2}, _mm_only, (x, w))
    (g,) = reports()[-1].gemms
    assert not g.m.isdigit() and g.aten_only is aten, g
    assert g.m_upper == (32 if aten else None)


def test_fallback_key_pass_chains_the_users_pass(monkeypatch):
    """torch 2.11 fallback: GemmKeyPass takes the pass manager's slot; the user's own pre-pass still runs and
    its uuid stays in the key."""
    monkeypatch.setattr(gb, "choices_class_in_cache_key", lambda: False)
    seen = []

    class UserPass:
        def __call__(self, graph):
            seen.append(graph)

        def uuid(self):
            return "user-pass-v1"

    key_pass = gb.fallback_patches(parse_options({"level": 2}), UserPass())[PASS_HOOK]
    key_pass("graph")
    assert seen == ["graph"] and "user-pass-v1" in key_pass.uuid()
    assert key_pass.uuid() != gb.fallback_patches(parse_options({"level": 2}))[PASS_HOOK].uuid()


def test_level2_override_failure_falls_back_to_plain_max_autotune(monkeypatch, caplog):
    """A compile must not fail because of us: an override that raises costs the rewrites and the override of
    that graph (two warnings), and the graph compiles as plain max-autotune; strict re-raises."""
    def boom(self, *a, **k):
        raise RuntimeError("override exploded")

    monkeypatch.setattr(gb._GemmBucketMixin, "_finalize_template_configs", boom)
    with caplog.at_level("WARNING", logger="rocm_inductor"):
        _compile({"level": 2, "strict": False})
    msgs = [r.getMessage() for r in caplog.records]
    assert any("compiling with our rewrites failed" in m and "override exploded" in m for m in msgs), msgs
    assert any("GEMM override failed too" in m for m in msgs), msgs
    with pytest.raises(Exception, match="override exploded"):
        _compile({"level": 2, "strict": True})
