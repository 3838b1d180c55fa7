"""``explain()``: compile a model with ``backend="rocm_fused"`` and return what our passes did to it.

The result is a :class:`~rocm_inductor.report.Report` (a list of per-graph
:class:`~rocm_inductor.report.GraphReport`): each match (pass, op, provider, dtype, shape, ``file.py:line``
of the user's code), each near-miss with its reason in plain words, the passes that were off and why, and
(level 2) the GEMM choices. ``str(report)`` is a table; ``report.to_json()`` / ``Report.from_json`` for tools.
The same reports go to the ``rocm_fused`` log (``TORCH_LOGS="+rocm_fused"``) and ``rocm_inductor.reports()``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

from . import report as report_mod
from .report import Report


class _DryRunDone(Exception):
    """Raised after our passes ran, to stop Inductor before lowering/codegen (``dry_run=True``)."""


def _dry_run_backend(mode: str | None, options: Any) -> Callable[..., Any]:
    """A Dynamo backend that runs AOTAutograd + Inductor's post-grad passes (ours included), then stops.

    The graph then runs eagerly: nothing is code-generated, so it is fast, but the level-2 GEMM choices
    (made while lowering) are not reported.
    """
    from torch._inductor.compile_fx import compile_fx

    from .backend import resolve
    from .passes.manager import PassManager

    def rocm_fused(gm: torch.fx.GraphModule, example_inputs: Any) -> Callable[..., Any]:
        opts, patches = resolve(mode, options)
        for key, val in list(patches.items()):
            if isinstance(val, PassManager):
                patches[key] = _StopAfter(val)
        try:
            compile_fx(gm, example_inputs, config_patches=patches)
        except Exception as e:  # Inductor may wrap our exception; look through the chain
            if not _caused_by_stop(e):
                raise
        return gm.forward

    return rocm_fused


class _StopAfter:
    """Wraps a PassManager: run it, then raise :class:`_DryRunDone` (same uuid, so config stays valid)."""

    def __init__(self, pm: Any) -> None:
        self.pm = pm

    def __call__(self, graph: torch.fx.Graph) -> None:
        self.pm(graph)
        raise _DryRunDone()

    def uuid(self) -> Any:
        return self.pm.uuid()


def _caused_by_stop(e: BaseException | None) -> bool:
    seen = 0
    while e is not None and seen < 20:
        if isinstance(e, _DryRunDone):
            return True
        e, seen = e.__cause__ or e.__context__, seen + 1
    return False


def _real_backend(mode: str | None, options: Any) -> Callable[..., Any]:
    """The ``rocm_fused`` backend as a fresh callable (a new backend object makes Dynamo compile again
    even when the same function was compiled before, so every ``explain`` call sees its own compile)."""
    from . import backend

    def rocm_fused(gm: torch.fx.GraphModule, example_inputs: Any) -> Callable[..., Any]:
        # named like the backend: Dynamo's errors say "backend='rocm_fused' raised"
        return backend.rocm_fused(gm, example_inputs, mode=mode, options=options)

    return rocm_fused


@contextlib.contextmanager
def _collect() -> Iterator[Report]:
    """Collect the graph reports created inside the block (only those: not earlier compiles')."""
    out = Report()
    start = len(report_mod.reports())
    try:
        yield out
    finally:
        out.extend(report_mod.reports()[start:])


def explain(model_or_fn: Callable[..., Any], *example_inputs: Any, dry_run: bool = False, grad: bool = False,
            **compile_kwargs: Any) -> Report:
    """Compile ``model_or_fn`` with the ``rocm_fused`` backend, run it once, and return what our passes did.

    Args:
        model_or_fn: an ``nn.Module`` or a function of tensors.
        *example_inputs: positional arguments for one call (any shapes/dtypes/devices the model takes).
        dry_run: stop Inductor right after our passes and run the graph eagerly (fast; no kernels are
            generated, so level-2 GEMM choices are not reported). Default: a real compile, exactly what
            ``torch.compile(backend="rocm_fused")`` does, fail-safe included.
        grad: run with autograd on. Default off (``torch.no_grad()``): the rewrites are for inference; a
            training graph keeps the norm's intermediates for backward and is reported as near-misses.
        **compile_kwargs: ``torch.compile`` keywords: ``options={...}`` (see ``rocm_inductor.Options``),
            ``mode=``, ``dynamic=``, ``fullgraph=``. ``backend`` must be absent or ``"rocm_fused"``.

    Returns:
        A :class:`~rocm_inductor.report.Report` with one :class:`~rocm_inductor.report.GraphReport` per
        graph compiled by this call (several when Dynamo breaks the graph; empty when nothing was
        compiled, e.g. Dynamo's recompile limit was hit). Inductor's FX graph and AOTAutograd caches are
        bypassed for this call (a cache hit would skip our passes and leave nothing to report); kernel
        caches are kept.

    Raises:
        ValueError: another ``backend`` was given, both ``mode`` and ``options`` (``torch.compile`` refuses them
            together), or invalid options/mode (from the backend).
        Whatever the model raises when it runs.
    """
    backend = compile_kwargs.pop("backend", "rocm_fused")
    if backend != "rocm_fused":
        raise ValueError(f"rocm_fused.explain: backend must be 'rocm_fused', got {backend!r}")
    mode = compile_kwargs.pop("mode", None)
    options = compile_kwargs.pop("options", None)
    if mode is not None and options is not None:  # as torch.compile, so what explain takes compiles too
        raise ValueError("rocm_fused.explain: pass mode or options, not both (torch.compile refuses both); "
                         "modes map onto options' levels (README, Options)")
    from .backend import resolve

    resolve(mode, options)  # bad options/mode raise ValueError here, not wrapped by Dynamo at the first call
    make = _dry_run_backend if dry_run else _real_backend
    compiled = torch.compile(model_or_fn, backend=make(mode, options), **compile_kwargs)
    grad_ctx = contextlib.nullcontext() if grad else torch.no_grad()
    with _collect() as rep, grad_ctx, _no_graph_caches():
        compiled(*example_inputs)
    return rep


@contextlib.contextmanager
def _no_graph_caches() -> Iterator[None]:
    """Turn off the caches that would skip our passes (FX graph, AOTAutograd); keep the kernel caches
    (``force_disable_caches`` would also recompile every C++/Triton kernel in a fresh directory)."""
    import torch._functorch.config as aot_config
    import torch._inductor.config as ind_config

    with contextlib.ExitStack() as stack:
        for cfg, names in ((ind_config, ("fx_graph_cache", "fx_graph_remote_cache")),
                           (aot_config, ("enable_autograd_cache", "enable_remote_autograd_cache"))):
            present = {n: False for n in names if hasattr(cfg, n)}
            if present:
                stack.enter_context(cfg.patch(present))
        yield
