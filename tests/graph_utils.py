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
