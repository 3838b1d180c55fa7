"""The joint RMSNorm + fold decision: a norm that loses alone may still win folded into the GEMMs it feeds.

The tuning store decides each candidate on its own (``tuning/decide.py``). For a pre-norm that is wrong: on the
H200 (``benchmarks/results/notes/46-tuning.md``, Llama-3.2-1B-shaped step at B=1) our ``rms_norm`` measured alone
ties or loses to Inductor's fused norm, so it stayed with Inductor, and ``norm_gemm`` (whose fold is the shipped
policy's B=1 winner) had no ``rocm_fused`` norm to fold: the build ran at 0.87x the shipped policy.

So, where the store decides (level >= 1), an RMSNorm (or add + RMSNorm) whose own decision is Inductor and whose
output only feeds GEMMs (``mm`` / ``addmm`` reading it, through reshapes, as the activation) is rewritten
*provisionally* when ``gemm_merge`` and ``norm_gemm`` run in this compile: "deferred to norm_gemm". The norm pass
records the original region (:func:`capture`: a copy of its nodes as a small graph); ``norm_gemm``:

- compares the folded op against the unfolded pair (our norm + the merged GEMM: the window's baseline) and
  against Inductor's norm + the merged GEMM, estimated from the two measurements the store holds: unfolded
  time - our norm's time + Inductor's norm time (the norm's own decision, same shape). :func:`joint_decision`
  rewrites the fold's decision accordingly *before* it is stored, so a level-1 compile applies the joint result
  without measuring;
- when the fold is not taken (loses, not measured, the GEMMs were not merged), :func:`revert` restores the
  recorded Inductor nodes (the norm's own decision) and turns the norm's match into a near-miss with its times.

Recording the region, rather than folding the raw Inductor spelling in ``norm_gemm``, keeps one recogniser of
the norm family (``passes/rms_norm``) and restores exactly the nodes the user's spelling made (its rounding).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch.fx import Graph, Node

from ..report import Match, NearMiss
from .fx import RESHAPES, is_call

aten = torch.ops.aten

#: Views from a norm's output to the GEMM operand (the projections' flattening; ``unsqueeze`` of a 1-D vector).
_VIEWS = RESHAPES | {aten.unsqueeze.default}
#: The passes the deferral hands the decision to: both must run in this compile.
NEEDS = frozenset({"gemm_merge", "norm_gemm"})


@dataclasses.dataclass
class Deferred:
    """A provisional norm rewrite (see module docstring).

    Attributes:
        op: the ``rocm_fused`` norm node; outs: the nodes the graph now reads in place of the region's outputs
            (``[op]``, or the fused op's ``[getitem 0, getitem 1]``); region: the original nodes as a graph whose
            placeholders are the op's tensor arguments, in order (:func:`revert` reads the op's current ones: a fold
            taken since may have replaced one) and whose output is the tuple of the originals of ``outs``;
            decision: the norm's own decision (winner ``"inductor"``); anchor: the node the match is named by;
            match: the norm's report record (set by the contract after ``emit``).
    """

    op: Node
    outs: list[Node]
    region: Graph
    decision: Any
    anchor: str
    match: Match | None = None


def feeds_only_gemms(y: Node) -> bool:
    """Whether every reader of ``y`` (through reshapes) is an ``mm`` / ``addmm`` reading it as its activation:
    what ``gemm_merge`` may merge and ``norm_gemm`` may fold. Also False for ``y`` with no reader."""
    todo, seen = [y], 0
    while todo:
        n = todo.pop()
        for u in n.users:
            if is_call(u, *_VIEWS) and u.args[0] is n:
                todo.append(u)
            elif is_call(u, aten.mm.default) and u.args[0] is n and u.args[1] is not n:
                seen += 1
            elif is_call(u, aten.addmm.default) and u.args[1] is n and n not in (u.args[0], u.args[2]):
                seen += 1
            else:
                return False
    return seen > 0


def wanted(ctx: Any, decision: Any, y: Node | None) -> bool:
    """Whether a norm whose decision is ``decision`` is rewritten provisionally (module docstring's rule)."""
    return (decision is not None and decision.winner == "inductor" and y is not None
            and NEEDS <= getattr(ctx, "will_run", frozenset()) and feeds_only_gemms(y))


def capture(inputs: list[Node], originals: list[Node]) -> Graph | None:
    """A copy of the nodes between ``inputs`` and ``originals`` (the region's outputs) as a stand-alone graph,
    or None when the region reads another node (then nothing is deferred: the norm is not restorable)."""
    inset, nodes, todo = set(inputs), set(), list(originals)
    while todo:
        n = todo.pop()
        if n in inset or n in nodes:
            continue
        if n.op != "call_function":
            return None
        nodes.add(n)
        todo.extend(n.all_input_nodes)
    g = Graph()
    env: dict[Node, Node] = {}
    for i, a in enumerate(inputs):
        env[a] = g.placeholder(f"in{i}")
    order = {n: i for i, n in enumerate(originals[0].graph.nodes)}
    for n in sorted(nodes, key=order.__getitem__):
        env[n] = g.node_copy(n, lambda a: env[a])
    g.output(tuple(env[o] for o in originals))
    return g


def revert(graph: Graph, ctx: Any, d: Deferred, why: str) -> None:
    """Put the recorded Inductor nodes back in place of ``d.op`` (and its getitems), and file the norm's match as
    a near-miss: its own decision (``why``: the fold's outcome)."""
    from ..tuning import decide as tuning_decide
    from ..tuning import device as tuning_device

    env: dict[Node, Node] = {}
    outs: tuple = ()
    phs = [n for n in d.region.nodes if n.op == "placeholder"]
    # The op's current tensor arguments, not those it was recorded with: a fold taken since may have replaced an
    # input (the sum of the norm before it, now read from the fold's getitem) and erased the node recorded then.
    env.update(zip(phs, [a for a in d.op.args if isinstance(a, Node)], strict=True))
    with graph.inserting_before(d.op):
        for n in d.region.nodes:
            if n.op == "output":
                outs = n.args[0]
            elif n.op != "placeholder":
                env[n] = graph.node_copy(n, lambda a: env[a])
    for new, orig in zip(d.outs, outs, strict=True):
        new.replace_all_uses_with(env[orig])
    for n in reversed(d.outs):
        if n is not d.op and not n.users:
            graph.erase_node(n)
    if not d.op.users:
        graph.erase_node(d.op)
    key = tuning_device.current("cuda")
    reason = f"{tuning_decide.slower_reason(d.decision, key)}; deferred to norm_gemm: {why}"
    what = "RMSNorm"
    if d.match is not None:
        ctx.report.matches[:] = [m for m in ctx.report.matches if m is not d.match]
        what = {"fused_add_rms_norm": "residual add + RMSNorm"}.get(d.match.op, what)
    ctx.report.near_misses.append(NearMiss("rms_norm", what, reason, d.match.location if d.match else ""))


def revert_left(graph: Graph, ctx: Any) -> int:
    """Revert every provisional norm no fold consumed (``norm_gemm.finish``); returns how many."""
    n = 0
    for d in list(getattr(ctx, "deferred", {}).values()):
        if not getattr(d.op, "_erased", False) and d.op.graph is graph:
            revert(graph, ctx, d, "the fold was not taken")
            n += 1
    ctx.deferred.clear()
    return n


def joint_decision(ctx: Any, norm: Node, d: Any) -> Any:
    """The fold's decision ``d`` judged against Inductor's norm too, when ``norm`` is deferred.

    Adds the times (microseconds) ``"unfolded_ours"`` (the measured pair: our norm + the merged GEMM) and
    ``"inductor_norm"`` (``unfolded_ours`` - our norm's time + Inductor's norm time, from the norm's own decision),
    sets ``"unfolded"`` to the faster of the two (the pair the GEMM tables compare a fold with,
    ``tuning/tables.py:row``), and makes ``"inductor"`` the winner unless the fold beats it by ``tuner.MIN_GAIN``.
    Unchanged for a norm that is not deferred or a decision without the times.
    """
    from ..tuning.decide import BASELINES
    from ..tuning.tuner import MIN_GAIN  # imported already: this runs only after the tuner measured

    dfr = getattr(ctx, "deferred", {}).get(norm)
    if dfr is None or d is None:
        return d
    own = dfr.decision.times_us
    ours = min((v for k, v in own.items() if k not in BASELINES), default=None)
    theirs, pair = own.get("inductor"), d.times_us.get("unfolded", d.times_us.get("inductor"))
    fold = min((v for k, v in d.times_us.items() if k not in BASELINES), default=None)
    if ours is None or theirs is None or pair is None or fold is None:
        return d
    est = pair - ours + theirs
    best = min(pair, est)
    times = {**d.times_us, "unfolded_ours": pair, "inductor_norm": est, "unfolded": best}
    note = (f"joint: fold {fold:.1f}us vs our norm + merged GEMM {pair:.1f}us and Inductor's norm + merged GEMM "
            f"{est:.1f}us (= {pair:.1f} - {ours:.1f} + {theirs:.1f}, the norm's own times)")
    evidence = f"{d.evidence}; {note}" if d.evidence else note
    if d.winner != "inductor" and fold < best * (1 - MIN_GAIN):
        return dataclasses.replace(d, times_us=times, evidence=evidence)
    return dataclasses.replace(d, winner="inductor", times_us=times, evidence=evidence)  # config: the best tile (a row)
