"""M = 1 GEMMs at level 2: kept as GEMMs until our passes have seen them, then decomposed as Inductor would.

Under coordinate-descent tuning (on under max-autotune, so at level 2) Inductor's ``mm`` / ``bmm`` decompositions
(``torch/_inductor/decomposition.py``) turn a GEMM with a static M == 1 (or N == 1) on a GPU into ``mul`` +
``sum`` while AOTAutograd traces, before any post-grad pass: our GEMM passes (``gemm_merge``, ``norm_gemm``) then
find no GEMM in a batch-1 decode step. On the H200 that cost the level-2 Llama-3.2-1B step 1268 us against 995 us
at level 1 (``benchmarks/results/tuning.csv``, run 2026-12-02-2012-tuning: no q/k/v or gate/up merge at B = 1).

So at level 2:

- :func:`decompositions` is Inductor's table with ``mm`` and ``bmm`` run with coordinate descent switched off for
  the call (every other case of theirs unchanged: K == 1 outer products, CPU forms), so the M = 1 GEMMs reach
  the post-grad graph;
- :func:`redecompose` (the pass manager's last step) rewrites every M = 1 / N = 1 ``mm`` / ``bmm`` our passes
  left into Inductor's own decomposition, traced from it (``fwd_only``, Inductor's table with the compile's
  config): what Inductor would have compiled without us (that reduction beat cuBLAS's GEMV on the H200,
  ``lowerings/gemm_buckets.py``).

Without coordinate descent (level 1, or a user's ``coordinate_descent_tuning=False``) neither changes anything.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch.fx import Graph, Node

aten = torch.ops.aten
_GEMMS = (aten.mm.default, aten.bmm.default)


def _without_cdt(fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        from torch._inductor import config

        with config.patch(coordinate_descent_tuning=False):
            return fn(*args, **kwargs)

    return call


def decompositions() -> dict[Any, Callable[..., Any]]:
    """Inductor's decomposition table (``select_decomp_table()``) with ``aten.mm`` / ``aten.bmm`` evaluated with
    ``coordinate_descent_tuning`` off (see module docstring); a table for ``compile_fx(decompositions=...)``."""
    from torch._inductor.decomposition import select_decomp_table

    table = dict(select_decomp_table())
    for op in (aten.mm, aten.bmm):
        for key in (op, op.default):
            if key in table:
                table[key] = _without_cdt(table[key])
    return table


def _static_one(v: Any) -> bool:
    return isinstance(v, int) and v == 1


def _small(n: Node) -> bool:
    """An ``mm`` / ``bmm`` Inductor's coordinate-descent decomposition takes: M == 1 or N == 1, not on CPU."""
    a, b = (x.meta.get("val") if isinstance(x, Node) else None for x in n.args[:2])
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor) or a.device.type in ("cpu", "mps"):
        return False
    return _static_one(a.shape[-2]) or _static_one(b.shape[-1])


def _call(op: Callable[..., Any]) -> Callable[..., Any]:
    def gemm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return op(a, b)

    return gemm


def redecompose(graph: Graph) -> int:
    """Rewrite the M = 1 / N = 1 ``mm`` / ``bmm`` nodes of ``graph`` into Inductor's decomposition, when
    coordinate-descent tuning is on (see module docstring); returns how many were rewritten.

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
        op = torch.mm if n.target is aten.mm.default else torch.bmm
        key = object()  # a stand-in pattern: the match's one output is ``n``
        m = Match(MatchContext([key], {key: n}, graph=graph), None, args=list(n.args))  # type: ignore[arg-type]
        m.nodes = [n]
        m.replace_by_example(_call(op), list(n.args))
        done += 1
    return done
