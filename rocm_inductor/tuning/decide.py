"""The pass contract's tuning step: between ``gate`` and ``emit``, what the store says about the candidate.

:func:`decide` is called by ``passes/contract.py:run_pass`` for a pass that declares ``tuning_op`` (its
``tuning_spec`` gives the spec the decision is keyed by):

- level 0 / 1 read the store only (:meth:`~rocm_inductor.tuning.store.DecisionStore.lookup`) and never measure;
- level 2 measures a missing entry through :data:`measure_hook` (when set) and records it in the store;
- then the decision applies: winner ``"inductor"`` -> the candidate stays with Inductor (the contract files a
  near-miss with the times); a provider -> that provider is forced (if it still takes the spec); no entry ->
  the gate's choice (today's conservative default), ``source="default"`` with the way to measure it.

See ``docs/architecture.md``, "Tuning store".
"""

from __future__ import annotations

import dataclasses
from typing import Any

from . import device
from .store import Decision, default_store, signature

#: level-2 measuring function, set by ``rocm_inductor.tuning.tuner``; None = nothing measures.
#: Signature: ``measure_hook(ctx, pass_, graph, cand, params, choice) -> Decision | None``.
measure_hook = None

#: What a default decision's provenance says (how to get a measured one).
DEFAULT_WHY = ("default (not measured on this device: one level-2 compile or `python -m rocm_inductor tune` "
               "measures it)")


#: Time labels of what the region gets without our op (not candidates): Inductor's compiled window, eager, and
#: the fold's unfolded pair ("unfolded": the best pair; "unfolded_ours" / "inductor_norm": our norm's or
#: Inductor's norm before the merged GEMM, ``passes/joint.py``).
BASELINES = frozenset({"inductor", "eager", "unfolded", "unfolded_ours", "inductor_norm"})


def can_measure(options: Any) -> bool:
    """Whether a compile with ``options`` measures what the store lacks: level 2, the tuner installed, and its
    timer usable here (a GPU, or the tests' fake timer)."""
    if options.level < 2 or measure_hook is None:
        return False
    available = getattr(measure_hook, "available", None)
    return available is None or available() is None


def applies(ctx: Any, pass_: Any) -> bool:
    """Whether the store's decisions decide ``pass_``'s candidates in this compile: a tuned pass whose ops no
    provider is forced for, at level >= 1, when this compile measures or this device's store holds entries of
    its op. Then the pass's literal fast path (``prepare``) stands aside so every candidate reaches ``decide``."""
    op = getattr(pass_, "tuning_op", None)
    if op is None or ctx.options.level < 1:
        return False
    if any(ctx.options.provider_for(o) is not None for o in getattr(pass_, "ops", (op,))):
        return False
    return can_measure(ctx.options) or stored(pass_)


def stored(pass_: Any) -> bool:
    """Whether this device's own store (GPU decisions: ``device.current()``) holds a decision of one of
    ``pass_``'s ops."""
    op = getattr(pass_, "tuning_op", None)
    if op is None:
        return False
    try:
        return default_store().has_own(device.current(), tuple(getattr(pass_, "ops", (op,))))
    except OSError:
        return False


def tuning_target(ctx: Any, pass_: Any, graph: Any, cand: Any, params: Any, choice: Any
                  ) -> tuple[str, dict[str, Any]] | None:
    """The (op, spec) the candidate's decision is keyed by: the pass's ``tuning_spec`` for its ``tuning_op``,
    where the spec's op is the one ``ctx.choose`` last chose for (a pass emits one of several ops: the RMSNorm
    pass's ``rms_norm`` / ``fused_add_rms_norm``). None: not tuned."""
    op = getattr(pass_, "tuning_op", None)
    if op is None:
        return None
    spec = pass_.tuning_spec(graph, ctx, cand, params, choice)
    if spec is None:
        return None
    last = getattr(ctx, "last_spec", None)
    if last is not None and last[1] is spec and last[0] in getattr(pass_, "ops", (op,)):
        op = last[0]
    return op, spec


def device_type(spec: dict[str, Any]) -> str:
    """``"cpu"`` for a spec of CPU tensors (the GPU's decisions do not describe them), else ``"cuda"``."""
    return "cpu" if spec.get("device_type") == "cpu" else "cuda"


def provenance(d: Decision, key: device.DeviceKey) -> str:
    """The report's words for where ``d`` came from: ``"measured now on NVIDIA H200: triton 5.4us, ..."``,
    ``"store (measured on this device earlier): ..."``, ``"shipped:NVIDIA H200 (<evidence>): ..."``, or
    :data:`DEFAULT_WHY`."""
    if d.source == "default":
        return DEFAULT_WHY
    times = d.times_line()
    head = {"measured": f"measured now on {key.name}", "store": "store (measured on this device earlier)"}.get(
        d.source, f"{d.source} ({d.evidence})" if d.evidence else d.source)
    return f"{head}: {times}" if times else head


def skip_reason(d: Decision | None) -> str:
    """Why a default decision was not measured (the tuner's last skip of its op and signature, or the
    measurement's failure), for the near-miss of a candidate that stays with Inductor; empty when unknown."""
    if d is None:
        return ""
    if d.evidence:
        return d.evidence
    for op, sig, why in reversed(getattr(measure_hook, "skipped", None) or []):
        if (op, sig) == (d.op, d.signature):
            return why
    return ""


def slower_reason(d: Decision, key: device.DeviceKey) -> str:
    """The near-miss text of a decision that leaves the region to Inductor:
    ``"measured slower than Inductor on NVIDIA H200 (store: 7.1us vs 6.6us)"``."""
    ours = min((v for k, v in d.times_us.items() if k not in BASELINES), default=None)
    theirs = min((v for k, v in d.times_us.items() if k in BASELINES), default=None)
    nums = f": {ours:.1f}us vs {theirs:.1f}us" if ours is not None and theirs is not None else ""
    src = d.source + (f", {d.evidence}" if d.evidence and d.source.startswith("shipped") else "")
    return f"measured slower than Inductor on {key.name} ({src}{nums})"


def decide(ctx: Any, pass_: Any, graph: Any, cand: Any, params: Any, choice: Any) -> tuple[Any, Decision | None]:
    """The store's decision for one candidate that passed ``gate``.

    Args:
        ctx: the :class:`~rocm_inductor.passes.context.PassContext` (its ``options.level`` decides whether a
            missing entry is measured); pass_, graph, cand, params: the contract's; choice: the gate's
            :class:`~rocm_inductor.platform.Choice`.

    Returns:
        ``(choice, decision)``: ``choice`` is None when the decision leaves the region to Inductor, else the
        provider choice to emit with (the winner forced where it takes the spec); ``decision`` is None for a
        pass that is not tuned or an op whose provider the options force, else the decision with its
        ``source``. A store that cannot be read or written never fails the compile: it reads as empty and the
        measurement is kept for this compile only.
    """
    target = tuning_target(ctx, pass_, graph, cand, params, choice)
    if target is None:
        return choice, None
    op, spec = target
    if ctx.options.provider_for(op) is not None:  # the user forced a provider: the store does not overrule it
        return choice, None
    key = device.current(device_type(spec))
    sig = signature(op, spec)
    store = default_store()
    d = store.lookup(key, op, sig)
    now = getattr(ctx, "measured_now", None)
    if d is not None and now is not None and (op, sig) in now:  # an identical region measured in this graph
        d = dataclasses.replace(d, source="measured")
    if d is None and ctx.options.level >= 2 and measure_hook is not None:
        try:
            d = measure_hook(ctx, pass_, graph, cand, params, choice)
        except Exception as e:  # a measurement never fails the compile (strict: tests see it)
            if ctx.options.strict:
                raise
            return choice, Decision(op, sig, choice.provider or "inductor", None, {}, "default",
                                    evidence=f"measuring failed: {type(e).__name__}: {e}")
        if d is not None:
            # judged with what earlier passes deferred to this one (passes/joint.py), before it is stored
            d = dataclasses.replace(pass_.joint(ctx, graph, cand, params, d) if hasattr(pass_, "joint") else d,
                                    source="measured")
            if now is not None:
                now.add((op, sig))
            try:
                store.record(key, d)
            except OSError:  # a read-only cache dir: keep the decision for this compile
                pass
    if d is None:
        return choice, Decision(op, sig, choice.provider or "inductor", None, {}, "default")
    if d.winner == "inductor":
        return None, d
    if d.winner != choice.provider:
        forced = ctx.choose(op, spec, forced=d.winner)
        if forced.provider == d.winner:
            return forced, d
        return choice, dataclasses.replace(d, source="default", evidence=f"{d.winner} refused: {forced.why_not}")
    return choice, d
