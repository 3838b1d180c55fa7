"""M = 1 GEMMs at level 2: kept as GEMMs until our passes have seen them, then decomposed as Inductor would.

Under coordinate-descent tuning (on under max-autotune, so at level 2) Inductor's ``mm`` / ``bmm`` decompositions
(``torch/_inductor/decomposition.py``) turn a GEMM with a static M == 1 (or N == 1) on a GPU into ``mul`` +
``sum`` while AOTAutograd traces, before any post-grad pass: our GEMM passes (``gemm_merge``, ``norm_gemm``) then
find no GEMM in a batch-1 decode step. On the H200 that cost the level-2 Llama-3.2-1B step 1268 us against 995 us
at level 1 (``benchmarks/results/tuning.csv``, run 2026-12-02-2012-tuning: no q/k/v or gate/up merge at B = 1).

So at level 2:

- :func:`gemms_kept` (around the compile) runs Inductor's ``mm`` and ``bmm`` decompositions with coordinate
  descent switched off for the call (every other case of theirs unchanged: K == 1 outer products, CPU forms), so
  the M = 1 GEMMs reach the post-grad graph;
- :func:`redecompose` (the pass manager's last step) rewrites every M = 1 / N = 1 ``mm`` / ``bmm`` our passes
  left into Inductor's own decomposition, traced from it (``fwd_only``, coordinate descent on): what Inductor
  would have compiled without us (that reduction beat cuBLAS's GEMV on the H200,
  ``lowerings/gemm_buckets.py``). Outer products (K == 1) stay GEMMs: HF's RoPE table ``inv_freq @
  position_ids`` is one, (B, 64, 1) x (B, 1, 1), computed once and read by every layer. Decomposed into a
  size-1 reduction, Inductor fused it into each layer's q/k-norm + RoPE kernel: on the H200 (torch 2.11) the
  8-layer Qwen3-0.6B step at B = 32 spent 136 us in those 16 kernels against 31 us with the bmm left to cuBLAS
  (one 1.2 us GEMV; run 2026-12-03-1744-tuning). Newer Inductor turns the outer product into a plain ``mul``
  before any post-grad pass, without coordinate descent; then there is nothing left here to keep.

Without coordinate descent (level 1, or a user's ``coordinate_descent_tuning=False``) neither changes anything.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.fx import Graph, Node

aten = torch.ops.aten
_GEMMS = (aten.mm.default, aten.bmm.default)


class _WithoutCDT:
    """A decomposition run with ``coordinate_descent_tuning`` off (a class, not a closure: it pickles by
    reference like the function it wraps)."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from torch._inductor import config

        with config.patch(coordinate_descent_tuning=False):
            return self.fn(*args, **kwargs)


def _tables() -> list[dict[Any, Callable[..., Any]]]:
    from torch._inductor import decomposition

    tables = [decomposition.decompositions]
    current = decomposition.select_decomp_table()
    if current is not tables[0]:
        tables.append(current)
    return tables


@contextlib.contextmanager
def gemms_kept() -> Iterator[None]:
    """Inside the block, Inductor's ``mm`` / ``bmm`` decompositions run with coordinate descent off (see module
    docstring); restored afterwards. Patched in Inductor's table itself, so ``compile_fx`` keeps its own
    (picklable) decomposition function and its FX graph cache."""
    saved = []
    for table in _tables():
        for key in (aten.mm.default, aten.bmm.default):
            fn = table.get(key)
            if fn is not None and not isinstance(fn, _WithoutCDT):
                saved.append((table, key, fn))
                table[key] = _WithoutCDT(fn)
    try:
        yield
    finally:
        for table, key, fn in saved:
            table[key] = fn


def _original(key: Any) -> Callable[..., Any] | None:
    from torch._inductor import decomposition

    fn = decomposition.decompositions.get(key)
    return fn.fn if isinstance(fn, _WithoutCDT) else fn


def _static_one(v: Any) -> bool:
    return isinstance(v, int) and v == 1


def _small(n: Node) -> bool:
    """An ``mm`` / ``bmm`` Inductor's coordinate-descent decomposition takes: M == 1 or N == 1, not on CPU; an
    outer product (K == 1) excepted (module docstring)."""
    a, b = (x.meta.get("val") if isinstance(x, Node) else None for x in n.args[:2])
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor) or a.device.type in ("cpu", "mps"):
        return False
    if _static_one(a.shape[-1]):
        return False
    return _static_one(a.shape[-2]) or _static_one(b.shape[-1])


def _call(op: Callable[..., Any]) -> Callable[..., Any]:
    def gemm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        from torch._inductor import config

        with config.patch(coordinate_descent_tuning=True):  # Inductor's own decomposition, its M = 1 branch
            return op(a, b)

    return gemm


def redecompose(graph: Graph) -> int:
    """Rewrite the M = 1 / N = 1 ``mm`` / ``bmm`` nodes of ``graph`` (outer products, K == 1, excepted) into
    Inductor's decomposition, when coordinate-descent tuning is on (see module docstring); returns how many were
    rewritten.

    Raises:
        Whatever tracing the decomposition raises (the pass manager's fail-safe catches it).
    """
    from torch._inductor import config
    from torch._inductor.pattern_matcher import Match, MatchContext

    if not config.coordinate_descent_tuning:
        return 0
    done = 0
    for n in [n for n in graph.nodes if n.op == "call_function" and n.target in _GEMMS]:
        if n.kwargs or len(n.args) != 2 or not _small(n):
            continue
        op = _original(n.target)
        if op is None:
            continue
        key = object()  # a stand-in pattern: the match's one output is ``n``
        m = Match(MatchContext([key], {key: n}, graph=graph), None, args=list(n.args))  # type: ignore[arg-type]
        m.nodes = [n]
        m.replace_by_example(_call(op), list(n.args))
        done += 1
    return done
