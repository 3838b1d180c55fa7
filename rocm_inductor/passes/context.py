"""What a rewrite pass gets besides the graph: :class:`PassContext` (options, the graph's report, the provider
choice of the match being replaced) and :func:`current_context` for pattern ``extra_check`` / replacement
functions, which Inductor's pattern matcher calls without our arguments.

A leaf of the passes package: the passes import it, the manager (which imports the passes) creates it.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any

from ..options import Options
from ..platform import Choice, PlatformDispatch
from ..refusal import NOT_MEASURED, any_of, kind_of
from ..report import GraphReport, Match, NearMiss


@dataclasses.dataclass
class PassContext:
    """What a rewrite pass gets besides the graph.

    Attributes:
        options: the compile's options; report: this graph's report;
        pending: the provider choice of the match being replaced (set by a pass's ``extra_check``, read
            by its replacement while it is traced, so the provider name is baked into the graph);
        last_spec: the ``(op, spec)`` of the last :meth:`choose` (a tuned pass's default ``tuning_spec``);
        decision: the tuning decision of the candidate being emitted (``rocm_inductor.tuning``; None: not
            tuned), whose ``config`` an emit may bake in;
        is_inference: what Inductor says of the graph (True: an inference graph, False: a training forward or
            backward graph, None: this torch does not say).
        measuring: the pass now running is tuned and this compile measures (level 2 with a timer:
            ``tuning.decide.can_measure``): a "not measured" refusal then yields a provisional choice
            (:meth:`choose`), so the candidate reaches the measurement instead of being refused;
        fast_path: whether the running pass's literal fast path (``prepare``) ran: it stands aside when the
            tuning store decides (``tuning.decide.applies``), and ``find`` then covers the forms it takes;
        trial: the passes that run only as candidates to measure (off by default here);
        default_off: why the candidate being gated stays with Inductor unless a decision (measured, stored or
            shipped) says otherwise: set for a trial pass's candidates and by a gate whose size policy would
            have refused it (``passes/rms_norm``: per-head norms); provisional: the refusal behind a
            provisional choice (the near-miss when nothing is measured). Both reset per candidate.
        measured_now: the (op, signature) decisions measured while this graph was rewritten (their identical
            regions' provenance says "measured now", not "store").
        will_run: the names of the passes this compile runs (``passes/joint.py`` defers a norm to ``norm_gemm``
            only when it and ``gemm_merge`` run); deferring: the norm's own decision while a norm deferred to
            ``norm_gemm`` is emitted (None otherwise); deferred: provisional norm node -> its
            ``joint.Deferred`` (the recorded Inductor region ``norm_gemm`` restores when the fold is not taken).
    """

    options: Options
    report: GraphReport
    pending: Choice | None = None
    last_spec: tuple[str, dict[str, Any]] | None = None
    decision: Any = None
    is_inference: bool | None = None
    measuring: bool = False
    fast_path: bool = True
    trial: frozenset[str] = frozenset()
    default_off: str | None = None
    provisional: str | None = None
    measured_now: set[tuple[str, str]] = dataclasses.field(default_factory=set)
    will_run: frozenset[str] = frozenset()
    deferring: Any = None
    deferred: dict[Any, Any] = dataclasses.field(default_factory=dict)
    _near: dict[str, NearMiss] = dataclasses.field(default_factory=dict)
    _matched: set[str] = dataclasses.field(default_factory=set)

    def kept_output_text(self) -> str:
        """Why a value that is also a graph output is kept, in words that fit this graph's kind."""
        return kept_output_text(self.is_inference)

    def choose(self, op: str, spec: dict[str, Any], forced: str | None = None) -> Choice:
        """Provider for ``op`` under the options' forcing (or ``forced``: a tuning decision's winner), via
        :class:`PlatformDispatch`; remembers ``(op, spec)`` as :attr:`last_spec`."""
        self.last_spec = (op, spec)
        forced = forced or self.options.provider_for(op)
        choice = PlatformDispatch.choose(op, spec, forced)
        if choice.provider is None and self.measuring and forced is None \
                and any_of(choice.reasons, NOT_MEASURED):
            # measuring is the way out of "not measured": take the first such provider provisionally; the
            # tuning step measures it against Inductor (or refuses with these reasons when it cannot)
            from ..providers import get_provider

            names, _ = PlatformDispatch.candidates(op, None)
            name = next((n for n in names if kind_of(get_provider(n).check(op, spec)) == NOT_MEASURED), None)
            if name is not None:
                self.provisional = choice.why_not
                return Choice(name, choice.reasons)
        return choice

    def matched(self, anchor: str, m: Match) -> None:
        """Record a rewrite anchored at node ``anchor`` (drops any earlier near-miss of that anchor).

        When ``m.note`` is empty it gets why better-ranked providers were skipped (from ``pending``).
        """
        if not m.note and self.pending is not None and self.pending.provider == m.provider:
            m.note = "; ".join(self.pending.reasons)
        self._matched.add(anchor)
        self._near.pop(anchor, None)
        self.report.matches.append(m)

    def near_miss(self, anchor: str, miss: NearMiss, overwrite: bool = True) -> None:
        """Record a near-miss at node ``anchor``; a later match of the same anchor supersedes it.

        ``overwrite=False`` keeps an earlier, more specific reason for the same anchor.
        """
        if anchor in self._matched or (not overwrite and anchor in self._near):
            return
        self._near[anchor] = miss

    def flush(self) -> None:
        """Move the surviving near-misses into the report (end of each pass)."""
        self.report.near_misses.extend(self._near.values())
        self._near.clear()


_CURRENT: list[PassContext] = []


def kept_output_text(is_inference: bool | None) -> str:
    """Why a value that is also a graph output is kept: returned (inference graph), saved for backward (training
    graph), or either when the graph's kind is not known (``None``: outside a pass, or a torch that does not say)."""
    if is_inference:
        return "the graph returns it (a model output, or a value used after this graph)"
    if is_inference is False:
        return "a training graph saves it for backward: compile under torch.no_grad() or torch.inference_mode()"
    return ("a graph output: a training graph saving it for backward, or a value the model returns or uses after "
            "this graph")


def running() -> PassContext | None:
    """The context of the pass now running, or None outside a pass (texts shared with code run outside)."""
    return _CURRENT[-1] if _CURRENT else None


def current_context() -> PassContext:
    """The context of the pass now running (for pattern ``extra_check`` / replacement functions).

    Raises:
        RuntimeError: called outside a pass.
    """
    if not _CURRENT:
        raise RuntimeError("rocm_fused: no pass is running")
    return _CURRENT[-1]


@contextlib.contextmanager
def active(ctx: PassContext) -> Iterator[None]:
    _CURRENT.append(ctx)
    try:
        yield
    finally:
        _CURRENT.pop()
