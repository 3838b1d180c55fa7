"""The pass manager: our post-grad custom pre-pass (an Inductor ``CustomGraphPass``).

Order: canonicalize -> each enabled rewrite pass -> dead-code elimination. It owns the fail-safe (a pass
that raises logs a warning and the graph is restored to what Inductor gave us; ``strict=True`` re-raises),
the report of each graph, the before/after graph dumps that depyf picks up, and the cache ``uuid()``: a
hash of every pass/op/provider source file and measured table, the options, the platform and the provider
versions, so that Inductor's FX graph cache stays on and stays correct.
"""

from __future__ import annotations

import hashlib
import logging
import os
import pathlib
import sys
from collections.abc import Callable
from typing import Any

import torch
from torch._inductor.custom_graph_pass import CustomGraphPass
from torch.fx import Graph

try:  # Inductor passes ``is_inference`` to a pass of this class (feature-guarded: not every torch has it)
    from torch._inductor.custom_graph_pass import CustomInferenceAwareGraphPass as _PassBase
except ImportError:  # pragma: no cover - older torch: the graph's kind stays unknown (None)
    _PassBase = CustomGraphPass

from .. import report as report_mod
from ..lowerings import small_m
from ..options import COMPILE_ENV, Options
from ..platform import PlatformDispatch
from ..tuning import device as tuning_device
from ..tuning.store import default_store, shipped_enabled
from .canonicalize import canonicalize
from .context import PassContext, active, current_context  # noqa: F401  (current_context: re-exported)

log = logging.getLogger("rocm_inductor")

_PKG = pathlib.Path(__file__).resolve().parent.parent


def _snapshot(graph: Graph) -> Graph:
    snap = Graph()
    out = snap.graph_copy(graph, {})
    snap.output(out)
    return snap


def _restore(graph: Graph, snap: Graph) -> None:
    for n in reversed(list(graph.nodes)):
        graph.erase_node(n)
    out = graph.graph_copy(snap, {})
    graph.output(out)


def _depyf_active() -> bool:
    """True inside ``depyf.prepare_debug`` (read without importing depyf)."""
    mod = sys.modules.get("depyf.explain.global_variables")
    return bool(mod is not None and getattr(mod, "data", {}).get("is_inside_prepare_debug"))


def _dump(graph: Graph, title: str) -> None:
    """Emit the graph through ``lazy_format_graph_code``: depyf's hook of it writes the dump file
    ``__compiled_fn_<n>.<title with _>.<k>.py``; the ``rocm_fused_graphs`` log artifact gets the text.

    Only done when one of the two is on: ``gm.recompile()`` costs time on large graphs.
    """
    gm = graph.owning_module
    glog = report_mod.graph_logger()
    if gm is None or not (glog is not None or _depyf_active()):
        return
    try:
        from torch._dynamo import utils as dynamo_utils

        gm.recompile()
        text = dynamo_utils.lazy_format_graph_code(title, gm, colored=False)  # depyf writes the file here
        if glog is not None:
            glog.debug("%s", text)
    except Exception as e:  # inspection must never break a compile
        log.debug("rocm_fused: graph dump %r failed: %s", title, e)


def source_files() -> list[pathlib.Path]:
    """Every file of the package whose content can change what our passes emit: its sources and its shipped
    tuning decisions (``*.json``: ``tuning/shipped/nvidia_h200.json`` decides which rewrites are taken), sorted.
    The device's own decisions (the tuning store in Inductor's cache dir) join the key in :meth:`PassManager.uuid`."""
    return sorted([*_PKG.rglob("*.py"), *_PKG.rglob("*.json")])


class PassManager(_PassBase):
    """Runs our passes on each post-grad graph (see module docstring).

    Args:
        options: validated :class:`Options`.
        passes: the rewrite passes to consider (default: every registered pass).
        user_pass: a ``post_grad_custom_pre_pass`` the user had already set in Inductor's config; it runs
            first on every graph (it was there first) and its ``uuid()`` joins ours in the cache key.
    """

    def __init__(self, options: Options, passes: list[Any] | None = None,
                 user_pass: Callable[[Graph], Any] | None = None) -> None:
        from . import all_passes

        self.options = options
        self.passes = list(all_passes() if passes is None else passes)
        self.user_pass = user_pass

    def enabled(self, plat_kind: str) -> tuple[list[Any], dict[str, str]]:
        """The passes that run on platform ``plat_kind`` and, for the others, why not."""
        from ..policy import PASS_DEFAULTS, PROVIDER_ORDER

        run, skipped = [], {}
        ordered = PROVIDER_ORDER.get(plat_kind, {})
        for p in self.passes:
            user = self.options.pass_enabled(p.name)
            # a pass with ``enabled_by_provider = False`` (gemm_merge) is not turned on by the global
            # ``provider=`` (which every CPU test and example forces), only by its own op's provider or by name
            by_global = getattr(p, "enabled_by_provider", True)
            per = dict(self.options.providers)
            forced = any((self.options.provider_for(op) if by_global else per.get(op, per.get(p.name)))
                         for op in p.ops)
            if user is False:
                skipped[p.name] = "disabled by options"
            elif user or forced or PASS_DEFAULTS.get(plat_kind, {}).get(p.name, False):
                run.append(p)
            elif not by_global:
                skipped[p.name] = (f"off on {plat_kind} by default (enable with options={{'passes': "
                                   f"{{'{p.name}': True}}}} or options={{'providers': {{'{p.name}': ...}}}})")
            elif any(ordered.get(op) for op in p.ops):
                skipped[p.name] = (f"off on {plat_kind} by default (enable with options={{'passes': "
                                   f"{{'{p.name}': True}}}} or force a provider)")
            else:  # no default provider here: turning the pass on alone would only give near-misses
                skipped[p.name] = (f"off on {plat_kind} by default and no provider is a default there (enable "
                                   f"with options={{'providers': {{'{p.name}': 'reference'}}}}, the pure-torch "
                                   "reference)")
        return run, skipped

    def trials(self, skipped: dict[str, str]) -> list[str]:
        """The tuned passes that are off by default here but run as candidates: because this compile measures
        (level 2 with a timer, ``tuning.decide.can_measure``: RoPE and the sigmoid gate are measured in context
        and come out on or off per shape), or, at level 1, because this device's store holds decisions of their
        ops (measured here earlier). A pass the user turned off stays off."""
        from ..tuning import decide as tuning_decide

        if self.options.level < 1:
            return []
        measuring = tuning_decide.can_measure(self.options)
        out = []
        for p in self.passes:
            if getattr(p, "tuning_op", None) is None or not skipped.get(p.name, "").startswith("off on"):
                continue
            if measuring or tuning_decide.stored(p):
                out.append(p.name)
        return out

    def __call__(self, graph: Graph, is_inference: bool | None = None) -> None:
        """Run the enabled passes on ``graph``; ``is_inference`` (from Inductor where it says) tells the passes'
        near-miss texts whether a value kept as a graph output is saved for backward or returned."""
        if self.user_pass is not None:
            self.user_pass(graph)  # the user's own pre-pass: not ours to guard, its errors are its own
        plat = PlatformDispatch.platform()
        rep = report_mod.new_graph_report(str(plat))
        run, rep.passes_skipped = self.enabled(plat.kind)
        trial = self.trials(rep.passes_skipped)
        if trial:  # measured like the others; a candidate nothing decides stays off (contract.trial_reason)
            run = [p for p in self.passes if p in run or p.name in trial]
            for name in trial:
                rep.passes_skipped.pop(name, None)
        if self.options.level == 0 or not run:
            if self.options.level == 0:
                rep.passes_skipped = {p.name: "level 0" for p in self.passes}
            else:
                small_m.redecompose(graph)  # level 2 kept the M = 1 GEMMs for passes that do not run
            report_mod.emit(rep)
            return
        ctx = PassContext(self.options, rep, is_inference=is_inference, trial=frozenset(trial),
                          will_run=frozenset(p.name for p in run))
        snap = _snapshot(graph)
        try:
            with active(ctx):
                canonicalize(graph)
                for p in run:
                    _dump(graph, f"rocm_fused before {p.name}")
                    p(graph, ctx)  # a RewritePass runs through contract.run_pass
                    ctx.flush()
                    rep.passes_run.append(p.name)
                    _dump(graph, f"rocm_fused after {p.name}")
                if self.options.level == 2:  # the M = 1 GEMMs no pass took, as Inductor decomposes them
                    small_m.redecompose(graph)
                graph.eliminate_dead_code()
                graph.lint()
        except Exception as e:
            if self.options.strict:
                raise
            _restore(graph, snap)
            rep.error = f"{type(e).__name__}: {e}"
            rep.matches.clear()
            log.warning("rocm_fused: a pass failed, compiling this graph without our rewrites: %s",
                        rep.error, exc_info=log.isEnabledFor(logging.DEBUG))
        report_mod.emit(rep)

    def uuid(self) -> str | None:
        """Hash of sources, options, the compile-time environment switches (``options.COMPILE_ENV``), platform and
        provider versions (Inductor's FX graph cache key);
        ``None`` (no caching, as Inductor does for any pass without one) when a chained user pass has no
        ``uuid()``."""
        h = hashlib.sha256()
        if self.user_pass is not None:
            user = self.user_pass.uuid() if hasattr(self.user_pass, "uuid") else None
            if user is None:
                return None
            h.update(repr(user).encode())
        for path in source_files():
            h.update(str(path.relative_to(_PKG)).encode())
            h.update(path.read_bytes())
        h.update(self.options.key().encode())
        h.update(repr([(k, os.environ.get(k)) for k in COMPILE_ENV]).encode())
        h.update(default_store().fingerprint(tuning_device.current()))
        h.update(b"shipped" if shipped_enabled() else b"no-shipped")  # ROCM_FUSED_TUNING_SHIPPED=0: other decisions
        h.update(str(PlatformDispatch.platform()).encode())
        h.update(repr(sorted(PlatformDispatch.versions().items())).encode())
        h.update(torch.__version__.encode())
        return h.hexdigest()
