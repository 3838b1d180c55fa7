"""Warm starts: a graph served from Inductor's FX graph cache reports what its cold compile did.

A cache hit skips the post-grad passes, ours included, so without this a warm start (every serving
restart) reports nothing. The report is stored *with* the cached graph: the ``CompiledFxGraph`` that
Inductor pickles into its cache entry carries our graph reports as an attribute (:data:`ATTR`, a list of
``GraphReport.to_dict()``). So the report is keyed exactly like the graph (the FX graph cache key, which
already covers our pass manager's ``uuid()``: sources, options, platform, provider versions), lives in
Inductor's cache dir (or its remote cache, or an AOTAutograd cache bundle) and is removed with it.

Two hooks, both feature-detected (torch 2.11 and 2.13 have both; a torch without one keeps the old
behaviour: no report on a hit):

- ``torch._inductor.compile_fx.fx_codegen_and_compile`` (every real compile, in the process that runs our
  passes): the reports our pass manager made during the call are attached to the returned graph object
  before Inductor saves it (``FxGraphCache._save_graph``, or AOTAutograd's bundled cache entry);
- ``FxGraphCache.cache_hit_post_compile`` (every hit, FX graph cache or AOTAutograd cache): the stored
  reports are appended to :func:`rocm_inductor.reports` marked ``cached=True`` and logged as a compile
  would (``TORCH_LOGS="rocm_fused"``).

Both wrappers pass every argument through and return what the original returns; a failure inside our part
is logged at DEBUG and never breaks a compile or a load. :func:`install` is idempotent and called by the
backend before each compile.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from .. import report as report_mod

log = logging.getLogger("rocm_inductor")

#: Attribute of the cached ``CompiledFxGraph`` holding our reports (``GraphReport.to_dict()`` list).
ATTR = "_rocm_fused_reports"
_MARK = "_rocm_fused_hook"


def _attach_reports(orig: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(orig)
    def fx_codegen_and_compile(*args: Any, **kwargs: Any) -> Any:
        start = len(report_mod.reports())
        out = orig(*args, **kwargs)
        try:
            from ..lowerings.gemm_buckets import attach_records_now

            attach_records_now(start)  # level 2: GEMM decisions join the report before it is saved
            made = report_mod.reports()[start:]
            if made and out is not None:
                setattr(out, ATTR, [r.to_dict() for r in made])
        except Exception as e:  # never break a compile for the report
            log.debug("rocm_fused: could not attach the report to the compiled graph: %s", e)
        return out

    setattr(fx_codegen_and_compile, _MARK, True)
    return fx_codegen_and_compile


def _restore_reports(orig: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(orig)
    def cache_hit_post_compile(graph: Any, *args: Any, **kwargs: Any) -> Any:
        out = orig(graph, *args, **kwargs)
        try:
            loaded = out[0] if isinstance(out, tuple) else out
            stored = getattr(graph, ATTR, None)
            if loaded is not None and stored:
                for d in stored:
                    report_mod.restore_cached_report(d)
        except Exception as e:  # a report we can't read is not a reason to fail the load
            log.debug("rocm_fused: could not restore the report of a cached graph: %s", e)
        return out

    setattr(cache_hit_post_compile, _MARK, True)
    return cache_hit_post_compile


def install() -> bool:
    """Install both hooks (idempotent). Returns True when both are in place."""
    try:
        from torch._inductor import codecache
        from torch._inductor import compile_fx as cfx
    except Exception:  # no Inductor
        return False
    ok = True
    fn = getattr(cfx, "fx_codegen_and_compile", None)
    if callable(fn) and not getattr(fn, _MARK, False):
        cfx.fx_codegen_and_compile = _attach_reports(fn)
    elif not callable(fn):
        ok = False
    cache = getattr(codecache, "FxGraphCache", None)
    hit = getattr(cache, "cache_hit_post_compile", None) if cache is not None else None
    if callable(hit) and not getattr(hit, _MARK, False):
        cache.cache_hit_post_compile = staticmethod(_restore_reports(hit))
    elif not callable(hit):
        ok = False
    return ok
