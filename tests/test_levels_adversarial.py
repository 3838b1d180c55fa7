"""Level 2 / GEMM override / ``inductor_config`` under inputs the first tests did not cover (CPU).

Regression tests for: GEMMs sharing operand buffers (a chunked QKV weight, row slices of one activation,
two biases on one product) were taken for one GEMM, so the second kept no choice and the compile failed;
the ``inductor_choices_class`` factory (there for the cache key) became the default handler of a thread
that compiled a backward lazily, applying the override to every later compile of that thread.
"""

from __future__ import annotations

import threading

import pytest
import torch
import torch.nn.functional as F
from torch._inductor.choices import InductorChoices
from torch._inductor.virtualized import V, _choices

from rocm_inductor.lowerings import gemm_buckets as gb
from rocm_inductor.report import reports


def _run(fn, args, options, backend="rocm_fused"):
    torch._dynamo.reset()
    with torch._inductor.config.patch(force_disable_caches=True), torch.no_grad():
        out = torch.compile(fn, backend=backend, options=options)(*args)
    for o, e in zip(out, fn(*args), strict=True):
        torch.testing.assert_close(o, e, rtol=1e-4, atol=1e-4)


def _chunked_weight(x, w):  # fused QKV-style weight split in forward: same x, views of one w
    wq, wk = w.chunk(2, dim=0)
    return x @ wq.t(), x @ wk.t()


def _row_slices(x, w):  # views of one activation
    return x[:8] @ w, x[8:] @ w


def _two_biases(x, w, b1, b2):  # one product, two biases: addmm(b1, x, w.t()), addmm(b2, x, w.t())
    return F.linear(x, w, b1), F.linear(x, w, b2)


def _two_baddbmm(c1, c2, y, z):
    return torch.baddbmm(c1, y, z), torch.baddbmm(c2, y, z)


_CASES = {
    "chunked_weight": (_chunked_weight, lambda r: (r(16, 64), r(96, 64)), 2),
    "row_slices": (_row_slices, lambda r: (r(16, 64), r(64, 48)), 2),
    "two_biases": (_two_biases, lambda r: (r(16, 64), r(48, 64), r(48), r(48)), 2),
    "two_baddbmm": (_two_baddbmm, lambda r: (r(4, 8, 16), r(4, 8, 16), r(4, 8, 32), r(4, 32, 16)), 2),
}


@pytest.mark.parametrize("case", list(_CASES))
def test_level2_gemms_sharing_operand_buffers_each_keep_aten(case):
    fn, make, n = _CASES[case]
    g = torch.Generator().manual_seed(0)
    args = make(lambda *s: torch.randn(*s, generator=g))
    _run(fn, args, {"level": 2, "strict": True})
    gemms = reports()[-1].gemms
    assert len(gemms) == n and all(r.aten_only and len(r.kept) == 1 for r in gemms), gemms


def test_backward_compiled_in_another_thread_does_not_keep_the_override():
    """A lazily compiled backward in a thread without a handler (the autograd engine's device threads on
    GPU) must not make the override that thread's default for every later compile."""
    torch._dynamo.reset()
    lin = torch.nn.Linear(16, 8)
    with torch._inductor.config.patch(force_disable_caches=True):
        out = torch.compile(lin, backend="rocm_fused", options={"level": 2})(torch.randn(24, 16))
    seen = {}

    def worker():
        try:
            with torch._inductor.config.patch(force_disable_caches=True):
                out.sum().backward()  # the backward graph is compiled here, in this thread
            seen["default"] = _choices._get_handler(False)
        except Exception as e:  # pragma: no cover - reported below
            seen["error"] = e

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert "error" not in seen, seen
    assert lin.weight.grad is not None
    h = seen["default"]
    # at most an inert carrier of the cache key; it must not filter a later compile's GEMMs
    assert not isinstance(h, gb._GemmBucketMixin) or not h._gemm_active, type(h)


def test_factory_handler_carries_the_key_but_does_not_override():
    if not gb.choices_class_in_cache_key():
        pytest.skip("torch without inductor_choices_class in the FX graph cache key")
    from rocm_inductor.options import parse_options

    factory = gb.config_patches(parse_options({"level": 2, "aten_gemm_max_m": 8}))["inductor_choices_class"]
    inert = factory()
    assert inert.uuid() == gb.make_choices(8).uuid() != gb.make_choices(32).uuid()
    from torch._inductor.kernel import mm

    class T:
        uid = "triton::mm"

    gens = {mm.aten_mm.uid: iter([object()]), T.uid: iter([object(), object()])}

    class KI:
        def mnk_symbolic(self):
            return (4, 64, 64)

    kept = inert._finalize_template_configs(gens, KI(), [mm.aten_mm, T()], "mm", None)
    assert len(kept) == 3 and not inert.gemm_records  # every choice, nothing recorded


@pytest.mark.slow
def test_interleaved_compiles_do_not_leak_into_each_other():
    """Levels, aten_gemm_max_m and inductor_config interleaved in one thread, one raising in between."""
    from torch._inductor import config as icfg

    seen = []

    def probe(graph):
        c = V.choices
        seen.append((getattr(c, "aten_gemm_max_m", None) if isinstance(c, gb._GemmBucketMixin) else None,
                     icfg.max_autotune, icfg.coordinate_descent_tuning))

    class Mine(InductorChoices):
        pass

    f = lambda a, b: ((a @ b).relu(),)  # noqa: E731
    args = (torch.randn(16, 32), torch.randn(32, 24))
    plan = [({"level": 2, "aten_gemm_max_m": 8}, (8, True, True)),
            ({"level": 1}, (None, False, False)),
            ({"level": 2, "inductor_config": {"coordinate_descent_tuning": False}}, (32, True, False)),
            ({"level": 0, "inductor_config": {"max_autotune": True}}, (None, True, False)),
            ({"level": 2}, (32, True, True))]
    with V.set_choices_handler(Mine()), icfg.patch(post_grad_custom_post_pass=probe):
        for options, expect in plan:
            seen.clear()
            _run(f, args, {"strict": True, **options})
            assert seen == [expect], (options, seen)
            assert type(V.choices) is Mine and icfg.inductor_choices_class is None
            assert icfg.max_autotune is False
    # a compile that raises inside the override restores the handler too
    with V.set_choices_handler(Mine()), icfg.patch(post_grad_custom_post_pass=_boom):
        with pytest.raises(Exception, match="boom"):
            _run(f, args, {"level": 2})
        assert type(V.choices) is Mine and icfg.inductor_choices_class is None


def _boom(graph):
    raise RuntimeError("boom")


@pytest.mark.slow
def test_fx_graph_cache_separates_inductor_config(tmp_path, monkeypatch):
    """A compile served from Inductor's FX graph cache never reuses an entry made under other patches."""
    from torch._dynamo.utils import counters

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    args = (torch.ones(16, 32), torch.ones(32, 24))

    def misses(options):
        before = counters["inductor"]["fxgraph_cache_miss"]
        torch._dynamo.reset()
        with torch._inductor.config.patch(fx_graph_cache=True), torch.no_grad():
            torch.compile(lambda a, b: (a @ b).relu(), backend="rocm_fused", options=options)(*args)
        return counters["inductor"]["fxgraph_cache_miss"] - before

    cdt_off = {"level": 2, "inductor_config": {"coordinate_descent_tuning": False}}
    assert misses(cdt_off) == 1
    assert misses({"level": 2}) == 1  # not the other's entry
    assert misses(cdt_off) == 0
    assert misses({"level": 0}) == 1
    assert misses({"level": 0, "inductor_config": {"max_autotune": True}}) == 1  # no pass manager at level 0


def test_options_instance_is_validated_like_a_dict():
    from rocm_inductor.backend import resolve
    from rocm_inductor.options import Options, parse_options

    for bad in (Options(level=7), Options(level=2, aten_gemm_max_m=-5),
                Options(inductor_config={"inductor_choices_class": None}), Options(provider="cuda")):
        with pytest.raises(ValueError):
            resolve(None, bad)
    good = parse_options({"level": 2, "providers": {"rms_norm": "triton"},
                          "inductor_config": {"coordinate_descent_tuning": False}})
    assert parse_options(good) == good and hash(parse_options(good)) == hash(good)
    assert parse_options(Options(providers={"rms_norm": "triton"})).providers == (("rms_norm", "triton"),)
