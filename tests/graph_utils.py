"""Test helpers: compile through the real backend, capture op counts before/after our passes, numerics."""

from __future__ import annotations

import contextlib
import dataclasses
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch.fx import Graph

from rocm_inductor.passes.manager import PassManager
from rocm_inductor.report import GraphReport, last_report

#: CPU tensors reach our Triton kernels only through the interpreter, which conftest turns on without a GPU: tests
#: that run them (or read CPU-device measured tables) skip on a GPU host, where the gpu-marked tests cover the kernels.
needs_interpreter = pytest.mark.skipif(torch.cuda.is_available(), reason="Triton on CPU tensors needs "
                                       "TRITON_INTERPRET=1 (set only without a GPU); the gpu tests cover it")


def op_counts(graph: Graph) -> Counter:
    """Counter of call_function targets, e.g. ``{"aten.rsqrt.default": 2, "rocm_fused.rms_norm.default": 1}``."""
    return Counter(str(n.target) for n in graph.nodes if n.op == "call_function")


@dataclasses.dataclass
class Captured:
    """Op counts of one graph before and after our pass manager, and its report."""

    before: Counter
    after: Counter
    report: GraphReport | None


@contextlib.contextmanager
def capture() -> Iterator[list[Captured]]:
    """Record op counts around every PassManager call inside the block (caches off so passes run)."""
    seen: list[Captured] = []
    orig = PassManager.__call__

    def wrapped(self, graph, **kw):  # kw: ``is_inference`` where Inductor passes it
        before = op_counts(graph)
        orig(self, graph, **kw)
        seen.append(Captured(before, op_counts(graph), last_report()))

    PassManager.__call__ = wrapped
    try:
        with torch._inductor.config.patch(force_disable_caches=True):
            yield seen
    finally:
        PassManager.__call__ = orig


def compile_run(fn: Any, *args: Any, options: dict | None = None, dynamic: bool | None = False,
                **compile_kw: Any) -> tuple[Any, list[Captured]]:
    """Compile ``fn`` with ``backend="rocm_fused"`` (reference provider, strict by default) and run it."""
    opts = {"provider": "reference", "strict": True, **(options or {})}
    torch._dynamo.reset()
    with capture() as seen, torch.no_grad():
        out = torch.compile(fn, backend="rocm_fused", options=opts, dynamic=dynamic, **compile_kw)(*args)
    return out, seen


def rel_err(a: torch.Tensor, ref: torch.Tensor) -> float:
    """max |a - ref| / max |ref| (ref in float64)."""
    ref = ref.double()
    return float((a.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30)) if ref.numel() else 0.0


def assert_contract(out: torch.Tensor, eager: torch.Tensor, ref64: torch.Tensor) -> None:
    """The numerics contract (docs/ops.md): error vs float64 no worse than eager's own plus one ulp of the dtype."""
    assert out.dtype == eager.dtype and out.shape == eager.shape
    ulp = torch.finfo(out.dtype).eps
    e_out, e_eager = rel_err(out, ref64), rel_err(eager, ref64)
    assert e_out <= e_eager + ulp, f"rewritten rel err {e_out:.3g} > eager {e_eager:.3g} + ulp {ulp:.3g}"


def _eager_inner(gm: torch.fx.GraphModule, example_inputs: Any, **kw: Any) -> Any:
    """An ``inner_compile`` for ``compile_fx``: the steps Inductor's in-process compile takes up to and including
    its post-grad passes (``view_to_reshape``, fake-tensor propagation, ``_recursive_post_grad_passes``, where our
    PassManager runs as the custom pre-pass), then the rewritten graph as a boxed callable run eagerly instead of
    lowered to code (torch/_inductor/compile_fx.py, ``_InProcessFxCompile.codegen_and_compile``)."""
    from torch._inductor import compile_fx as cfx
    from torch._inductor.virtualized import V

    with torch.utils._python_dispatch._disable_current_modes():
        cfx.view_to_reshape(gm)
        with torch.no_grad():
            fake_mode = cfx.fake_tensor_prop(gm, example_inputs)
        with V.set_fake_mode(fake_mode):
            cfx._recursive_post_grad_passes(gm, is_inference=kw.get("is_inference", False))
    gm.recompile()

    def run(args: list[Any]) -> Any:
        out = gm(*args)
        args.clear()
        return out

    run._boxed_call = True  # type: ignore[attr-defined]
    return run


_INTERNALS = ("compile_fx", "view_to_reshape", "fake_tensor_prop", "_recursive_post_grad_passes")


@contextlib.contextmanager
def graph_run_eagerly(enabled: bool = True) -> Iterator[None]:
    """``backend="rocm_fused"`` compiles inside the block run Dynamo, AOTAutograd and Inductor's post-grad passes
    (ours included) exactly as a real compile does, then execute the rewritten FX graph eagerly (our custom ops
    through their providers: reference, or Triton under the interpreter) instead of lowering it and building C++
    with g++: the pass's op counts and the rewritten graph's numerics, minus Inductor's code generation (most of a
    tiny model's CPU compile time). Where this torch lacks one of the internals used, compiles stay real.

    Every model family keeps an end-to-end compile elsewhere in the suite (the ``backend="rocm_fused"`` path);
    ``enabled=False`` keeps the compiles inside the block real (the case of a parametrised test that is its
    family's end-to-end compile)."""
    from torch._inductor import compile_fx as cfx

    if not enabled or not all(callable(getattr(cfx, name, None)) for name in _INTERNALS):
        yield
        return
    orig = cfx.compile_fx

    def compile_fx(gm: Any, example_inputs: Any, **kw: Any) -> Any:
        kw.setdefault("inner_compile", _eager_inner)  # compile_fx's config-patch recursion passes its own
        return orig(gm, example_inputs, **kw)

    cfx.compile_fx = compile_fx
    try:
        yield
    finally:
        cfx.compile_fx = orig
