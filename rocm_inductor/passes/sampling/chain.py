"""The recognised sampling chain (:class:`Chain`) and the walk that builds it (:func:`recognise`): up from the
scores the draw reads, absorbing filters nearest first, then a temperature, then at most one ban (the grammar
is in the package docstring).
"""

from __future__ import annotations

import dataclasses

from torch.fx import Node

from ..fx import val
from .filters import read_ban, read_temperature, read_top_k, read_top_p
from .min_p import read_min_p


@dataclasses.dataclass
class Chain:
    """A recognised sampling chain: what the replacement needs (see the package docstring)."""

    anchor: Node
    scores: Node
    keepdim: bool
    is_probs: bool = False
    temperature: float | Node = 1.0
    top_k: int | Node = 0
    top_p: float | Node = 1.0  # a float, or a per-row tensor node (numel 1 or B)
    min_p: float | Node = 0.0  # a float, or a per-row float tensor node (numel 1 or B)
    ban: Node | None = None
    order: list[str] = dataclasses.field(default_factory=list)  # filters, nearest the draw first
    stopped_at: str = ""  # why the upward walk stopped (for near-miss reports)
    refused: str = ""  # why the whole chain must stay in Inductor (e.g. a NaN temperature)
    notes: list[str] = dataclasses.field(default_factory=list)  # partial matches (for near-miss reports)
    verified: str = ""  # the verification's note for the report, empty when not verified
    escaped: bool = False  # the draw is rewritten on probabilities also used elsewhere; the filters stay
    gathered: Node | None = None  # a sorted-order draw's gather back to token ids (replaced with the draw)
    named: bool = False  # the filters were named by kind (kinds.py: verified on random logits)

    @property
    def top_k_first(self) -> bool:
        """HF order unless top-p was found *upstream* of top-k (i.e. applied first); min-p is always last."""
        return [f for f in self.order if f != "min_p"] != ["top_k", "top_p"]



def recognise(chain: Chain, pre: bool = False) -> Chain:
    """Walk up from ``chain.scores`` absorbing filters, temperature and a ban (the package docstring's grammar);
    ``pre``: the filters are already known (named by kind), only a temperature (unless one was named) and a
    ban are absorbed above them."""
    if chain.is_probs:
        return chain
    sv = val(chain.scores)
    b, v = (1, sv.shape[0]) if sv.ndim == 1 else sv.shape
    s = chain.scores
    t_seen = pre and chain.temperature != 1.0  # after temperature/ban only temperature/ban may follow upstream
    while True:
        mp = read_min_p(s, b)
        if not pre:
            if mp is not None and not isinstance(mp, str) and not {"min_p", "top_p"} & set(chain.order):
                # HF applies min-p last (after temperature, top-k, top-p); so does the op. Min-p and top-k
                # commute (both keep the tokens at or above a threshold on s; the max survives both), so
                # a min-p above a top-k is absorbed too; one above a top-p or below a temperature is not.
                s, chain.min_p = mp
                chain.order.append("min_p")
                continue
            tk = read_top_k(s) if "top_k" not in chain.order else None
            if tk is not None:
                s, chain.top_k = tk
                chain.order.append("top_k")
                continue
            tp = read_top_p(s, b) if "top_p" not in chain.order else None
            if isinstance(tp, str):
                chain.stopped_at = tp
                break
            if tp is not None:
                s, chain.top_p = tp
                chain.order.append("top_p")
                continue
        if not t_seen:
            tt = read_temperature(s, b)
            if isinstance(tt, str):
                chain.refused = tt
                break
            if tt is not None:
                s, chain.temperature = tt
                t_seen, pre = True, True
                continue
        if chain.ban is None:
            bn = read_ban(s, b, v)
            if bn is not None:
                if mp is not None:  # a min-p mask the op can't apply itself: exact as a ban, not fused
                    chain.notes.append(mp if isinstance(mp, str) else
                                       "min-p applied before top-p or temperature (the op applies it after "
                                       "both, like HF) is not fused")
                chain.ban, s = bn
                pre = True
                continue
        break
    chain.scores = s
    return chain

