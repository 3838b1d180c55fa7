"""The pass contract: find -> read parameters -> gate (verify, policy, provider) -> emit.

Every rewrite pass is a :class:`RewritePass`. The pass manager drives it with :func:`run_pass`, and every
candidate ends in exactly one of two records, which the driver (not the pass) files in the graph's report:

- a match: :meth:`RewritePass.emit` edited the graph and returned the :class:`~rocm_inductor.report.Match`;
- a near-miss: a step raised :class:`Miss` with the failed check in plain words.

The steps, each small and testable alone:

``prepare(graph, ctx)``
    The literal fast path: Inductor's pattern matcher with the pass's generated pattern table. Its
    ``extra_check`` goes through the same read and gate helpers and records through the context itself
    (the matcher calls it without us).
``find(graph, ctx) -> candidates``
    Candidates discovered from anchor ops every spelling of the kind contains (an ``rsqrt`` of a mean of
    squares, an SDPA or ``bmm``, a rotation's two products). A list, taken before any rewrite.
``read(graph, ctx, cand) -> params``
    The op's parameters read off the region (eps, rotary_dim, top-k, the mask), or :class:`Miss`.
``gate(graph, ctx, cand, params) -> Choice``
    Compile-time verification of the region against the op's reference, the policy (sizes left to Inductor),
    and the provider choice (:meth:`~rocm_inductor.passes.context.PassContext.choose`), or :class:`Miss`.
``tuning`` (passes that declare ``tuning_op``)
    :func:`rocm_inductor.tuning.decide.decide`: the decision store's entry for the candidate's op and spec
    (``tuning_spec``); level 2 measures a missing one. A decision for Inductor is a near-miss with the times;
    a provider winner is forced; the match records where the decision came from (``Match.provenance``). A pass
    may ``defer`` a candidate its decision leaves to Inductor to a later pass that decides it jointly, and a
    later pass may judge its measured decision with what was deferred to it (``joint``): ``passes/joint.py``.
``emit(graph, ctx, cand, params, choice) -> Match | list[Match] | None``
    The graph edit; returns what was rewritten (``None``: nothing to record, e.g. a candidate that another
    rewrite already consumed).
``finish(graph, ctx)``
    Clean-up (dead code); runs once after the candidates.

A candidate whose anchor left the graph (an earlier rewrite consumed it) is skipped before ``read``. Calling a
pass, ``p(graph, ctx)``, runs it through :func:`run_pass` (the manager calls every pass that way).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

from torch.fx import Graph, Node

from ..platform import Choice
from ..report import Match, NearMiss, location_of
from ..tuning import decide as tuning_decide
from ..tuning import device as tuning_device
from .context import PassContext


class Miss(Exception):  # noqa: N818  (a near-miss, not an error: the name says what the report calls it)
    """A candidate that is not rewritten, with the reason in plain words (what would make it match).

    Args:
        reason: the failed check, e.g. ``"eps is a tensor, not a compile-time constant"``.
        what: what was found, when it differs from the candidate's (``"LayerNorm"`` for an ``"RMSNorm"``
            candidate that turned out to be mean-subtracted).
        anchors: the nodes the near-miss is recorded at (default: the candidate's anchor); a q/k RoPE pair
            records one near-miss per rotation.
        overwrite: ``False`` keeps an earlier, more specific reason recorded at the same anchor.
        silent: record nothing (a candidate the pass deliberately leaves without a word, e.g. a single GEMM
            nobody measured: reporting every projection would drown the report).
    """

    def __init__(self, reason: str, *, what: str | None = None, anchors: Sequence[Node] | None = None,
                 overwrite: bool = True, silent: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.what = what
        self.anchors = anchors
        self.overwrite = overwrite
        self.silent = silent


@dataclasses.dataclass
class Candidate:
    """One place in the graph a pass may rewrite.

    Attributes:
        anchor: the node that names the candidate (report anchor and ``file.py:line`` location).
        what: what was found, in the report's words (``"RMSNorm"``, ``"attention (SDPA)"``, ``"RoPE (neox)"``).
        data: what ``find`` learned (the pass's own structure: the region's nodes, the SDPA's arguments).
        where: the node whose ``file.py:line`` a near-miss names, when not the anchor's (the sigmoid gate's
            multiply: the anchor is its sigmoid).
    """

    anchor: Node
    what: str
    data: Any = None
    where: Node | None = None


class RewritePass:
    """Base class of a rewrite pass (see module docstring). Subclasses set ``name`` and ``ops`` (from
    ``rocm_inductor.registry``) and override the steps they need.

    Attributes:
        name: the pass's name; ops: the custom ops it emits.
        enabled_by_provider: whether forcing a provider for every op (``options={"provider": ...}``) turns the
            pass on (``gemm_merge`` / ``norm_gemm``: only their own names or ops do).
    """

    name: str = ""
    ops: tuple[str, ...] = ()
    enabled_by_provider: bool = True
    #: The op whose decisions the tuning store keeps for this pass (``rocm_inductor.tuning``); None: not tuned.
    tuning_op: str | None = None
    #: ``prepare`` is a literal fast path that rewrites without the tuning step (a pattern family), which ``find``
    #: also covers: it is skipped where the store decides (``tuning.decide.applies``). False: a clean-up step.
    literal_fast_path: bool = False

    def tuning_spec(self, graph: Graph, ctx: PassContext, cand: Candidate, params: Any,
                    choice: Choice) -> dict[str, Any] | None:
        """The spec the candidate's tuning decision is keyed by (``tuning.store.signature``); default: the spec
        the gate last chose a provider for, when it was for one of this pass's ops. None: not tuned."""
        last = ctx.last_spec
        return last[1] if last is not None and last[0] in self.ops else None

    def defer(self, graph: Graph, ctx: PassContext, cand: Candidate, params: Any, decision: Any) -> bool:
        """Whether a candidate whose decision leaves it to Inductor is still rewritten, provisionally, for a
        later pass to decide jointly (``passes/joint.py``: a norm feeding GEMMs that ``norm_gemm`` may fold);
        False by default."""
        return False

    def joint(self, ctx: PassContext, graph: Graph, cand: Candidate, params: Any, decision: Any) -> Any:
        """A measured decision judged with what earlier passes deferred to this one, before the store records
        it (``passes/joint.py``); unchanged by default."""
        return decision

    def prepare(self, graph: Graph, ctx: PassContext) -> None:
        """The literal fast path (pattern matcher); nothing by default."""

    def find(self, graph: Graph, ctx: PassContext) -> Iterable[Candidate]:
        """Candidates from anchor ops; none by default."""
        return ()

    def read(self, graph: Graph, ctx: PassContext, cand: Candidate) -> Any:
        """The op's parameters read off the candidate's region (default: what ``find`` put in ``data``).

        Raises:
            Miss: the region is not this kind, or a parameter is not a compile-time value.
        """
        return cand.data

    def gate(self, graph: Graph, ctx: PassContext, cand: Candidate, params: Any) -> Choice:
        """Verify, apply the policy and choose the provider.

        Raises:
            Miss: verification failed, the policy leaves it to Inductor, or no provider takes it.
        """
        raise NotImplementedError(f"{type(self).__name__}.gate")

    def emit(self, graph: Graph, ctx: PassContext, cand: Candidate, params: Any,
             choice: Choice) -> Match | list[Match] | None:
        """Rewrite the region to the op; return the report record(s)."""
        raise NotImplementedError(f"{type(self).__name__}.emit")

    def finish(self, graph: Graph, ctx: PassContext) -> None:
        """After every candidate: drop what the rewrites left dead."""
        graph.eliminate_dead_code()

    def __call__(self, graph: Graph, ctx: PassContext) -> None:
        """Run the pass over ``graph`` (:func:`run_pass`)."""
        run_pass(self, graph, ctx)


def bucket_spec(spec: dict[str, Any] | None, op: str) -> dict[str, Any] | None:
    """A GEMM spec with ``m`` replaced by the measured M whose row decides it (the merged GEMM's bucket rule,
    ``providers/triton/gemm_tables.py:decided_m``); unchanged when no row covers it."""
    if spec is None:
        return None
    from ..providers.triton.gemm_tables import decided_m

    m = decided_m(spec, op)
    return spec if m is None else {**spec, "m": m}


def choose_or_miss(ctx: PassContext, op: str, spec: dict[str, Any]) -> Choice:
    """The provider choice for ``op`` (``ctx.choose``), set as ``ctx.pending`` for the replacement.

    Raises:
        Miss: no provider takes it (the reason lists each provider's refusal).
    """
    choice = ctx.choose(op, spec)
    if choice.provider is None:
        raise Miss(choice.why_not)
    ctx.pending = choice
    return choice


def record_miss(ctx: PassContext, pass_name: str, cand: Candidate, miss: Miss) -> None:
    """File ``miss`` as the near-miss of ``cand`` (one per anchor)."""
    if miss.silent:
        return
    for node in miss.anchors or (cand.anchor,):
        at = cand.where if cand.where is not None and not miss.anchors else node
        ctx.near_miss(node.name, NearMiss(pass_name, miss.what or cand.what, miss.reason, location_of(at)),
                      overwrite=miss.overwrite)


def tuned(p: RewritePass, graph: Graph, ctx: PassContext, cand: Candidate, params: Any,
          choice: Choice) -> tuple[Choice, Any]:
    """The tuning step (:func:`rocm_inductor.tuning.decide.decide`) for a pass with ``tuning_op``.

    Returns:
        ``(choice, decision)``: the choice to emit with; the decision (None: not tuned).

    Raises:
        Miss: the decision leaves the candidate to Inductor ("measured slower than Inductor on ...").
    """
    if p.tuning_op is None:
        return choice, None
    new, decision = tuning_decide.decide(ctx, p, graph, cand, params, choice)
    spec = ctx.last_spec[1] if ctx.last_spec else {}
    if new is None:
        if p.defer(graph, ctx, cand, params, decision):  # rewritten provisionally: a later pass decides
            ctx.deferring = decision
            return choice, decision
        key = tuning_device.current(tuning_decide.device_type(spec))
        raise Miss(tuning_decide.slower_reason(decision, key))
    if decision is None or decision.source == "default":
        # nothing measured or stored decides it: a provisional choice ("not measured") and a candidate that is
        # off by default stay as they were without the tuning step
        why = ctx.provisional or ctx.default_off
        if why is not None:
            skipped = tuning_decide.skip_reason(decision)
            raise Miss(why + (f" ({skipped})" if skipped else ""))
    return new, decision


def run_pass(p: Any, graph: Graph, ctx: PassContext) -> None:
    """Drive one pass over ``graph``: ``prepare``, then each candidate through read -> gate -> emit, recording
    its match or near-miss, then ``finish``. A pass that is not a :class:`RewritePass` is called as
    ``p(graph, ctx)`` (a user's or a test's plain callable)."""
    if not isinstance(p, RewritePass):
        p(graph, ctx)
        return
    decided = tuning_decide.applies(ctx, p)
    ctx.measuring = decided and tuning_decide.can_measure(ctx.options)
    # the literal fast path rewrites without asking the store: it stands aside when the store decides
    ctx.fast_path = not (decided and p.literal_fast_path)
    if ctx.fast_path:
        p.prepare(graph, ctx)
    for cand in list(p.find(graph, ctx)):
        # consumed by an earlier rewrite (an erased node keeps its .graph: ask _erased)
        if getattr(cand.anchor, "_erased", False) or cand.anchor.graph is not graph:
            continue
        ctx.default_off = trial_reason(p, ctx)
        ctx.provisional = None
        try:
            params = p.read(graph, ctx, cand)
            ctx.last_spec = None
            choice = p.gate(graph, ctx, cand, params)
            choice, decision = tuned(p, graph, ctx, cand, params, choice)
            ctx.pending, ctx.decision = choice, decision
            records = p.emit(graph, ctx, cand, params, choice)
        except Miss as miss:
            record_miss(ctx, p.name, cand, miss)
            continue
        finally:
            ctx.decision = ctx.default_off = ctx.provisional = None
            deferring, ctx.deferring = ctx.deferring, None
        for rec in records if isinstance(records, list) else [records] if records is not None else []:
            if deferring is not None:
                for d in ctx.deferred.values():
                    if d.match is None:
                        d.match = rec
                        rec.note = "; ".join(s for s in (rec.note, "deferred to norm_gemm (alone: Inductor)") if s)
            if decision is not None and not rec.provenance:
                rec.provenance = tuning_decide.provenance(decision, tuning_device.current(
                    tuning_decide.device_type(ctx.last_spec[1] if ctx.last_spec else {})))
            ctx.matched(cand.anchor.name, rec)
    ctx.measuring, ctx.fast_path = False, True
    p.finish(graph, ctx)


def trial_reason(p: RewritePass, ctx: PassContext) -> str | None:
    """Why a candidate of a pass that runs only to be measured (``ctx.trial``: off by default here) stays with
    Inductor when no decision says otherwise; None for a pass that runs anyway."""
    if p.name not in ctx.trial:
        return None
    return (f"off on {ctx.report.platform.split(':')[0]} by default and not decided on this device (enable with "
            f"options={{'passes': {{'{p.name}': True}}}})")
