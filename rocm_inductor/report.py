"""The match report: what each compiled graph's passes rewrote, with which provider, and what they did not.

Every graph the pass manager sees gets one :class:`GraphReport`; the process keeps them in order
(:func:`reports`, :func:`last_report`, :func:`clear_reports`). After each graph one summary line goes to
the ``rocm_fused`` log (INFO; ``TORCH_LOGS="+rocm_fused"`` shows per-match DEBUG lines too).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import typing
from collections import Counter
from typing import Any

import torch

log = logging.getLogger("rocm_inductor")


#: Artifact carrying each pass's before/after graph code (off by default; depyf writes the same to files).
GRAPHS_ARTIFACT = "rocm_fused_graphs"


def _register_log() -> None:
    """Make ``TORCH_LOGS="rocm_fused"`` / ``"+rocm_fused"`` control our logger like Inductor's.

    ``import torch`` validates TORCH_LOGS before this package can register a name; the top-level module
    ``rocm_fused`` (``rocm_fused.py``) makes the name valid then (torch registers it as the module's log).
    Here the alias is pointed at our ``rocm_inductor`` logger as well and TORCH_LOGS is re-read. The
    graph-code artifact is only enabled explicitly: ``TORCH_LOGS="rocm_fused_graphs"`` (valid at import
    through the placeholder module ``rocm_fused_graphs.py``, whose log registration is replaced here by the
    artifact) or ``torch._logging.set_logs(rocm_fused_graphs=True)`` (see :func:`_extend_set_logs`).
    """
    try:
        from torch._logging import _internal as tl

        qnames = list(tl.log_registry.log_alias_to_log_qnames.get("rocm_fused", []))
        changed = False
        if tl.log_registry.log_alias_to_log_qnames.pop(GRAPHS_ARTIFACT, None) is not None:
            changed = True  # torch took the placeholder module for a log: the name is our artifact
        if "rocm_inductor" not in qnames:
            tl.register_log("rocm_fused", [*qnames, "rocm_inductor"])
            changed = True
        if not tl.log_registry.is_artifact(GRAPHS_ARTIFACT):
            tl.register_artifact(GRAPHS_ARTIFACT, "rocm_fused: post-grad graph before/after each pass",
                                 off_by_default=True)
            changed = True
        if changed:
            cache_clear = getattr(tl._parse_log_settings, "cache_clear", None)
            if cache_clear is not None:  # lru_cached: it would return the state parsed at torch import
                cache_clear()
            tl._init_logs()  # re-read TORCH_LOGS now that the names exist
    except Exception:  # private API moved: logging still works through the std logging module
        pass


def graph_logger() -> logging.Logger | None:
    """The ``rocm_fused_graphs`` artifact logger when that artifact is enabled, else None."""
    try:
        from torch._logging import _internal as tl

        if not tl.log_state.is_artifact_enabled(GRAPHS_ARTIFACT):
            return None
        return tl.getArtifactLogger("rocm_inductor", GRAPHS_ARTIFACT)
    except Exception:  # private API moved
        return None


def _extend_set_logs() -> None:
    """Let ``torch._logging.set_logs`` take ``rocm_fused=<level>`` and ``rocm_fused_graphs=<bool>``.

    ``set_logs`` has one keyword per built-in name (an unknown keyword is a ``TypeError``, torch 2.11 and 2.13);
    names registered later are only reachable as ``set_logs(modules={"rocm_fused_graphs": True})``. The
    wrapper moves our two keywords into ``modules`` and calls the original with everything else unchanged. It
    is not installed where ``set_logs`` already takes them.
    """
    try:
        import inspect

        import torch._logging as tlog

        orig = tlog.set_logs
        params = inspect.signature(orig).parameters
        if getattr(orig, "_rocm_fused", False) or "modules" not in params or GRAPHS_ARTIFACT in params:
            return
    except Exception:  # private layout moved: set_logs(modules={...}) still works
        return

    import functools

    @functools.wraps(orig)
    def set_logs(*args: Any, rocm_fused: int | None = None, rocm_fused_graphs: bool | None = None,
                 modules: dict[str, Any] | None = None, **kwargs: Any) -> None:
        ours = {k: v for k, v in (("rocm_fused", rocm_fused), (GRAPHS_ARTIFACT, rocm_fused_graphs)) if v is not None}
        return orig(*args, modules={**(modules or {}), **ours} or None, **kwargs)

    set_logs._rocm_fused = True  # type: ignore[attr-defined]
    tlog.set_logs = set_logs


_register_log()
_extend_set_logs()


@dataclasses.dataclass
class Match:
    """One rewrite.

    Attributes:
        pass_name: the pass (``"rms_norm"``); op: the custom op (``"fused_add_rms_norm"``);
        provider: the provider baked in; shape/dtype: of the op's main input; location: ``file.py:line``
        of the user's code when the node's stack trace has it; note: why better-ranked providers were
        skipped (``"flashinfer: weight is float32, ..."``), empty when the first choice took it, or a short
        remark (RoPE: ``"on-the-fly"`` / ``"cached table [5, 32]"``); detail: the full text of a note
        shortened for the table (JSON and the DEBUG log carry it; empty when ``note`` says it all);
        provenance: where a tuned pass's decision came from (``rocm_inductor.tuning``): ``"measured now on
        ..."``, ``"store (measured on this device earlier): ..."``, ``"shipped:<gpu> (<results file, row>)"``
        or ``"default (not measured on this device: ...)"``; empty for a pass that is not tuned.
    """

    pass_name: str
    op: str
    provider: str
    shape: str = ""
    dtype: str = ""
    location: str = ""
    note: str = ""
    detail: str = ""
    provenance: str = ""


@dataclasses.dataclass
class NearMiss:
    """A candidate a pass saw but did not rewrite.

    Attributes:
        pass_name: the pass; what: what was found (``"RMSNorm"``); reason: which check failed, in plain
        words (what would make it match); location: ``file.py:line`` when known.
    """

    pass_name: str
    what: str
    reason: str
    location: str = ""


@dataclasses.dataclass
class GemmChoice:
    """What the level-2 GEMM bucket override (``rocm_inductor.lowerings.gemm_buckets``) did with one GEMM.

    Attributes:
        op: ``"mm"``, ``"addmm"``, ``"bmm"`` or ``"baddbmm"``; m: M as Inductor sees it (``"16"``, ``"s0"``);
        m_upper: its static value or ShapeEnv upper bound (None = unbounded); aten_only: only ATen kept;
        reason: why; offered / kept: names of the choices offered to the hook and kept by it.
    """

    op: str
    m: str
    m_upper: int | None
    aten_only: bool
    reason: str
    offered: list[str] = dataclasses.field(default_factory=list)
    kept: list[str] = dataclasses.field(default_factory=list)

    def line(self) -> str:
        """One line: ``gemm mm M=16 -> ATen only [aten::mm] (dropped 12): <reason>``."""
        what = "ATen only" if self.aten_only else "all choices"
        return (f"gemm {self.op} M={self.m} -> {what} [{', '.join(self.kept)}] "
                f"(dropped {len(self.offered) - len(self.kept)}): {self.reason}")


def gemm_lines(gemms: list[GemmChoice]) -> list[str]:
    """:meth:`GemmChoice.line` of each distinct decision, first-seen order, ``"15 x "`` before repeated ones."""
    counts = Counter(g.line() for g in gemms)
    return [line if n == 1 else f"{n} x {line}" for line, n in counts.items()]


def decision_lines(matches: list[Match]) -> list[str]:
    """One line per distinct tuned decision of ``matches`` (first-seen order, ``"3 x "`` before repeated ones):
    ``decision merged_gemm 1x2048->2048/512/512 [triton]: shipped:NVIDIA H200 (...): triton 5.4us, ...``."""
    counts = Counter(f"decision {m.op} {m.shape} [{m.provider}]: {m.provenance}" for m in matches if m.provenance)
    return [line if n == 1 else f"{n} x {line}" for line, n in counts.items()]


@dataclasses.dataclass
class GraphReport:
    """What our passes did to one post-grad graph.

    Attributes:
        graph_id: sequence number in this process; platform: ``"cuda:sm_90"`` etc.;
        matches / near_misses: lists of :class:`Match` / :class:`NearMiss`;
        passes_run / passes_skipped: pass names (skipped ones with the reason);
        error: the exception text when a pass failed and the graph was left untouched;
        gemms: :class:`GemmChoice` per GEMM the level-2 override saw (filled after lowering);
        cached: the graph came from Inductor's FX graph cache: our passes did not run in this process, and
        this is the report of the compile that made the cache entry (``rocm_inductor._compat.fx_cache``).
    """

    graph_id: int
    platform: str = ""
    matches: list[Match] = dataclasses.field(default_factory=list)
    near_misses: list[NearMiss] = dataclasses.field(default_factory=list)
    passes_run: list[str] = dataclasses.field(default_factory=list)
    passes_skipped: dict[str, str] = dataclasses.field(default_factory=dict)
    error: str | None = None
    gemms: list[GemmChoice] = dataclasses.field(default_factory=list)
    cached: bool = False

    def count(self, op: str | None = None, pass_name: str | None = None) -> int:
        """Number of matches, optionally only of ``op`` and/or ``pass_name``."""
        return sum(1 for m in self.matches
                   if (op is None or m.op == op) and (pass_name is None or m.pass_name == pass_name))

    def providers(self) -> dict[str, list[str]]:
        """Provider names used per op, e.g. ``{"rms_norm": ["flashinfer"]}``."""
        out: dict[str, set[str]] = {}
        for m in self.matches:
            out.setdefault(m.op, set()).add(m.provider)
        return {k: sorted(v) for k, v in out.items()}

    def summary(self) -> str:
        """One line: counts per op and provider, near-miss count, error if any."""
        c = Counter((m.op, m.provider) for m in self.matches)
        parts = [f"{op}[{prov}]x{n}" for (op, prov), n in sorted(c.items())] or ["no rewrites"]
        s = f"rocm_fused graph {self.graph_id} ({self.platform}): " + ", ".join(parts)
        if self.near_misses:
            s += f"; {len(self.near_misses)} near-miss(es)"
        if self.gemms:
            aten = sum(g.aten_only for g in self.gemms)
            s += f"; {len(self.gemms)} GEMM(s): {aten} ATen only, {len(self.gemms) - aten} tuned"
        if self.error:
            s += f"; passes failed, graph left untouched: {self.error}"
        if self.cached:
            s += " [cached: FX graph cache hit, the cold compile's report]"
        return s

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GraphReport:
        """Inverse of :meth:`to_dict` (keys this version does not know are ignored).

        Raises:
            TypeError: a required field (``graph_id``) is missing.
        """
        return _from_dict(cls, d)

    def __str__(self) -> str:
        rows = [("match", m.pass_name, m.op, m.provider, m.dtype, m.shape, m.location, m.note)
                for m in self.matches]
        rows += [("miss", n.pass_name, n.what, "-", "", "", n.location, n.reason) for n in self.near_misses]
        rows += [("off", name, "", "", "", "", "", why) for name, why in self.passes_skipped.items()]
        lines = [self.summary()]
        if rows:
            head = ("", "pass", "op / found", "provider", "dtype", "shape", "where", "reason / note")
            lines += ["  " + line for line in _table([head, *rows])]
        if any(m.detail for m in self.matches):
            lines.append("  (notes shortened: full text in report.to_json() and the DEBUG log, "
                         "TORCH_LOGS=\"+rocm_fused\")")
        lines += [f"  {line}" for line in decision_lines(self.matches)]
        lines += [f"  {line}" for line in gemm_lines(self.gemms)]
        return "\n".join(lines)


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    """Left-aligned columns, two spaces apart; empty columns dropped; the last column is not padded."""
    keep = [i for i in range(len(rows[0])) if any(r[i] for r in rows[1:])]
    rows = [tuple(r[i] for i in keep) for r in rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(keep))]
    out = []
    for r in rows:
        cells = [c.ljust(w) for c, w in zip(r[:-1], widths[:-1], strict=True)] + [r[-1]]
        out.append("  ".join(cells).rstrip())
    return out


def _from_dict(cls: type, d: dict[str, Any]) -> Any:
    """Build dataclass ``cls`` from its ``asdict`` form, recursing into ``list[<dataclass>]`` fields."""
    hints = typing.get_type_hints(cls)
    kw = {}
    for f in dataclasses.fields(cls):
        if f.name not in d:
            continue
        v, args = d[f.name], typing.get_args(hints[f.name])
        if typing.get_origin(hints[f.name]) is list and args and dataclasses.is_dataclass(args[0]):
            v = [_from_dict(args[0], x) for x in v]
        kw[f.name] = v
    return cls(**kw)


class Report(list):
    """All graph reports of a compile or a process (a list of :class:`GraphReport`)."""

    def count(self, op: str | None = None, pass_name: str | None = None) -> int:  # type: ignore[override]
        """Total matches over all graphs (see :meth:`GraphReport.count`)."""
        return sum(g.count(op, pass_name) for g in self)

    def providers(self) -> dict[str, list[str]]:
        """Provider names used per op over all graphs, e.g. ``{"rms_norm": ["flashinfer", "triton"]}``."""
        out: dict[str, set[str]] = {}
        for g in self:
            for op, provs in g.providers().items():
                out.setdefault(op, set()).update(provs)
        return {k: sorted(v) for k, v in out.items()}

    @property
    def near_misses(self) -> list[NearMiss]:
        """Every near-miss over all graphs."""
        return [n for g in self for n in g.near_misses]

    @property
    def matches(self) -> list[Match]:
        """Every match over all graphs."""
        return [m for g in self for m in g.matches]

    def to_json(self) -> str:
        """JSON list of the graph reports."""
        return json.dumps([g.to_dict() for g in self], indent=1)

    @classmethod
    def from_json(cls, text: str) -> Report:
        """Inverse of :meth:`to_json`.

        Raises:
            json.JSONDecodeError: not JSON; TypeError: not a list of graph report objects.
        """
        data = json.loads(text)
        if not isinstance(data, list) or not all(isinstance(g, dict) for g in data):
            raise TypeError("rocm_fused: a report's JSON is a list of graph report objects")
        return cls(GraphReport.from_dict(g) for g in data)

    def __str__(self) -> str:
        return "\n".join(str(g) for g in self) if self else "rocm_fused: no graph reached our passes (level 0, or "\
            "nothing was compiled)"


_REPORTS = Report()


def new_graph_report(platform: str) -> GraphReport:
    """Start the report of the next graph and keep it in the process list."""
    rep = GraphReport(graph_id=len(_REPORTS), platform=platform)
    _REPORTS.append(rep)
    return rep


def restore_cached_report(d: dict[str, Any]) -> GraphReport:
    """Append the stored report ``d`` of a graph served from Inductor's FX graph cache, marked ``cached``, with
    this process's next graph id, and log it like a compiled graph's (:func:`emit`)."""
    rep = GraphReport.from_dict({**d, "graph_id": len(_REPORTS), "cached": True})
    _REPORTS.append(rep)
    emit(rep)
    return rep


def reports() -> Report:
    """Every graph report of this process, oldest first (a live list)."""
    return _REPORTS


def last_report() -> GraphReport | None:
    """The newest graph report, or None."""
    return _REPORTS[-1] if _REPORTS else None


def clear_reports() -> None:
    """Forget every report (tests; or before a compile you want to inspect alone)."""
    _REPORTS.clear()


def emit(rep: GraphReport) -> None:
    """Log the summary (INFO) and each match / near-miss (DEBUG)."""
    log.info("%s", rep.summary())
    if log.isEnabledFor(logging.DEBUG):
        for m in rep.matches:
            note = m.detail or m.note
            log.debug("match %s %s provider=%s %s %s at %s%s", m.pass_name, m.op, m.provider, m.dtype, m.shape,
                      m.location, f" ({note})" if note else "")
        for n in rep.near_misses:
            log.debug("near-miss %s %s at %s: %s", n.pass_name, n.what, n.location, n.reason)
        if rep.cached:  # a compiled graph logs its GEMM lines while lowering (lowerings/gemm_buckets.py)
            for line in gemm_lines(rep.gemms):
                log.debug("rocm_fused graph %s: %s", rep.graph_id, line)


_FRAME = re.compile(r'File "([^"]+)", line (\d+)')


_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep


def location_of(node: torch.fx.Node | None) -> str:
    """``file.py:line`` of the innermost frame outside torch in ``node.meta["stack_trace"]``, or ``""``.

    Frames inside the torch package (``torch.nn.RMSNorm`` -> ``functional.py``) are skipped, so the line is the
    model's (a transformers modeling file counts as the model's); torch's own line only if nothing else is there.
    """
    if node is None:
        return ""
    trace = node.meta.get("stack_trace") or ""
    frames = _FRAME.findall(trace)
    if not frames:
        return ""
    outside = [f for f in frames if not os.path.abspath(f[0]).startswith(_TORCH_DIR)]
    path, line = (outside or frames)[-1]
    return f"{path.rsplit('/', 1)[-1]}:{line}"


def dtype_name(v: Any) -> str:
    """``"bfloat16"`` for ``torch.bfloat16`` or a tensor of it (anything else: its ``str`` minus ``torch.``)."""
    return str(getattr(v, "dtype", v)).replace("torch.", "")


def shape_str(shape: Any) -> str:
    """A shape as the report prints it: ``(2, 4, s81, 32)`` (symbolic sizes as Inductor names them)."""
    dims = [str(s) for s in shape]
    return f"({dims[0]},)" if len(dims) == 1 else f"({', '.join(dims)})"


def describe(val: Any) -> tuple[str, str]:
    """(shape, dtype) strings of a fake tensor for the report: ``("(2, 4, s81, 32)", "bfloat16")``."""
    if not isinstance(val, torch.Tensor):
        return "", ""
    return shape_str(val.shape), dtype_name(val)
