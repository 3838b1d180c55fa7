"""The pass contract's tuning step: between ``gate`` and ``emit``, what the store says about the candidate.

:func:`decide` is called by ``passes/contract.py:run_pass`` for a pass that declares ``tuning_op`` (and
``tuning_spec``): level 0 / 1 read the store only; level 2 measures a missing entry through :data:`measure_hook`
and records it. See ``docs/architecture.md``, "Tuning store".
"""

from __future__ import annotations

from typing import Any

#: level-2 measuring function, set by ``rocm_inductor.tuning.tuner``; None = nothing measures.
#: Signature: ``measure_hook(ctx, pass_, graph, cand, params, choice) -> Decision | None``.
measure_hook = None


def decide(ctx: Any, pass_: Any, graph: Any, cand: Any, params: Any, choice: Any) -> tuple[Any, Any]:
    """The store's decision for one candidate that passed ``gate``.

    Returns:
        ``(choice, decision)``: ``choice`` is None when the decision leaves the region to Inductor, else the
        provider choice to emit with (the winner forced); ``decision`` says where it came from.
    """
    raise NotImplementedError  # filled in below the skeleton commit
