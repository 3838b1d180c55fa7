"""Where the attention's K and V come from: the un-repeated (B, Hkv, L, D) tensor behind a head repeat.

Covers the repeats that map query head ``h`` to kv head ``h // g``: HF ``repeat_kv`` and gpt-fast / int-repeat
``repeat_interleave(g, dim=1)`` (both ``unsqueeze(x, 2) -> expand -> clone -> reshape`` here), a head gather
``x[:, idx]`` / ``index_select(x, 1, idx)`` whose index evaluates at compile time to ``arange(Hq) // g``,
``repeat(1, g, 1, 1)`` / ``unsqueeze(x, 1)``-expand when ``Hkv == 1`` (MQA: every mapping is ``h -> 0``), no
repeat (MHA), and native GQA (K/V given with ``Hkv < Hq``). Refused (the reason is returned): ``repeat`` /
``tile`` order (``h -> h % Hkv``), an index not known at compile time or not ``arange(Hq) // g``, and an expand
that also broadcasts the batch or length.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch.fx import Node

from ..fx import CONVERT, RESHAPES, is_call, known_equal, shape

aten = torch.ops.aten
prims = torch.ops.prims

CLONES = (aten.clone.default, aten.alias.default)
#: Ops an index expression may use and still be evaluated at compile time (no graph input under it).
_CONST_OPS = frozenset({
    prims.iota.default, aten.arange.default, aten.arange.start, aten.arange.start_step, aten.full.default,
    aten.div.Tensor_mode, aten.div.Tensor, aten.floor_divide.default, aten.mul.Tensor, aten.add.Tensor,
    aten.sub.Tensor, aten.cumsum.default, aten.searchsorted.Tensor, aten.clamp_max.default,
    aten.clamp_min.default, aten.clamp.default, aten.view.default, aten.reshape.default,
    aten._unsafe_view.default, aten.expand.default, aten.clone.default, aten.repeat_interleave.Tensor,
    aten.repeat_interleave.self_int, CONVERT, aten._to_copy.default, aten.lift_fresh_copy.default,
})


@dataclasses.dataclass
class HeadSource:
    """Where an attention's K or V input comes from.

    Attributes:
        node: the un-repeated (B, Hkv, L, D) tensor; groups: ``g = Hq // Hkv``;
        spelling: how the repeat was written (for the report); shared: the repeat has another consumer.
    """

    node: Node
    groups: int
    spelling: str
    shared: bool = False


def strip_clones(n: Any, chain: list | None = None) -> Any:
    """Walk back through clones; every node passed (and the result) is appended to ``chain``."""
    while is_call(n, *CLONES):
        if chain is not None:
            chain.append(n)
        n = n.args[0]
    if chain is not None:
        chain.append(n)
    return n


def _const_eval(n: Any, depth: int = 0) -> torch.Tensor | None:
    """Evaluate ``n`` at compile time on CPU when no graph input is under it (index tensors), else None."""
    if not isinstance(n, Node):
        return n if isinstance(n, (int, float, bool)) or n is None else None
    if depth > 16:
        return None
    if n.op == "get_attr":
        gm = n.graph.owning_module
        obj = gm
        try:
            for part in str(n.target).split("."):
                obj = getattr(obj, part)
        except AttributeError:
            return None
        return obj.detach().cpu() if isinstance(obj, torch.Tensor) else None
    if n.op != "call_function" or n.target not in _CONST_OPS:
        return None
    vals = []
    for a in n.args:
        if isinstance(a, (list, tuple)):
            items = [_const_eval(x, depth + 1) if isinstance(x, Node) else x for x in a]
            if any(isinstance(x, Node) for x in a) and any(i is None for i in items):
                return None
            vals.append(type(a)(items))
        elif isinstance(a, Node):
            v = _const_eval(a, depth + 1)
            if v is None:
                return None
            vals.append(v)
        else:
            if isinstance(a, (torch.SymInt, torch.SymFloat)):
                return None
            vals.append(a)
    kwargs = {k: (torch.device("cpu") if k == "device" else v) for k, v in n.kwargs.items() if k != "pin_memory"}
    if any(isinstance(v, Node) for v in kwargs.values()):
        return None
    try:
        out = n.target(*vals, **kwargs)
    except Exception:
        return None
    return out if isinstance(out, torch.Tensor) else None


def _index_mapping(idx: Any, hq: int, hkv: int) -> str | None:
    """None when the head index ``idx`` is ``arange(hq) // (hq // hkv)``, else why it is not (or unknown)."""
    value = _const_eval(idx)
    if value is None:
        return ("the head index is not known at compile time (a graph input or a computation we do not "
                "evaluate): cannot verify it maps query head h to kv head h // g")
    g = hq // hkv
    want = torch.arange(hq) // g
    if value.dtype.is_floating_point or value.shape != want.shape or not torch.equal(value.long(), want):
        return f"the head index {value.tolist()[:16]} is not arange({hq}) // {g} (h -> h // g)"
    return None


_TORCH_REPEAT_ORDER = ("the head repeat maps query head h to kv head h % Hkv (torch.repeat / tile order), not "
                       "h // g as repeat_kv / repeat_interleave do")


def _expand_repeat(n: Node, hq: int, chain: list[Node]) -> HeadSource | str | None:
    """The source of ``reshape(clone(expand(unsqueeze(x))))`` (HF ``repeat_kv`` / ``repeat_interleave(int)``:
    ``unsqueeze(x, 2) -> expand(B, Hkv, g, L, D) -> clone -> reshape``), why it is not ``h // g``, or None when
    ``n`` (a reshape) is no such repeat. ``chain`` holds the copies from the attention's input down to ``n``."""
    e = strip_clones(n.args[0], chain)
    shared = any(len(c.users) > 1 for c in chain[:-1])
    if not is_call(e, aten.expand.default):
        return None
    src5 = e.args[0]
    s5, e5 = shape(src5), shape(e)
    if not (len(s5) == 5 and len(e5) == 5 and isinstance(e5[1], int) and isinstance(e5[2], int)):
        return None
    src4 = src5.args[0] if is_call(src5, aten.unsqueeze.default, *RESHAPES) else None
    if is_call(src5, aten.unsqueeze.default) and src5.args[1] not in (1, 2, -3, -4):
        src4 = None
    s4, out4 = shape(src4), shape(n)
    # the expand may broadcast only the group dim: a batch-1 (shared-prefix) K/V broadcast to the batch in the
    # same expand is not a head repeat of a (B, Hkv, L, D) tensor
    bcast = [j for j in (0, 3, 4) if not known_equal(s5[j], e5[j])]
    if bcast and src4 is not None and len(s4) == 4:
        j = bcast[0]
        return (f"the head repeat's expand also broadcasts dim {j} ({s5[j]} -> {e5[j]}): a "
                "batch/length-broadcast K/V; the op takes K/V with q's batch")
    if src4 is not None and len(s4) == 4 and len(out4) == 4 and isinstance(s4[1], int) and \
            e5[1] * e5[2] == hq and all(known_equal(out4[i], e5[j]) for i, j in ((0, 0), (2, 3), (3, 4))):
        hkv = s4[1]
        same_rest = all(known_equal(s5[j], s4[i]) for i, j in ((0, 0), (2, 3), (3, 4)))
        if hkv == e5[1] and known_equal(s5[2], 1) and same_rest:
            # (B, Hkv, 1, L, D) -> (B, Hkv, g, L, D) -> (B, Hkv * g, L, D): head h reads h // g
            return HeadSource(src4, hq // hkv, "repeat_kv / repeat_interleave (expand + clone + reshape)", shared)
        if hkv == e5[2] and known_equal(s5[1], 1) and same_rest:
            # (B, 1, Hkv, L, D) -> (B, g, Hkv, L, D): head h reads h % Hkv (torch.repeat order)
            if hkv == 1:
                return HeadSource(src4, hq, "repeat (MQA)", shared)
            return _TORCH_REPEAT_ORDER
    return None


def head_source(node: Node, hq: int) -> HeadSource | str:
    """The un-repeated tensor behind an attention's K/V input ``node``, or why the head mapping is not ``h // g``.

    Args:
        node: the attention's key or value operand (a (B, H, L, D) fake-tensor node, any dtype).
        hq: number of query heads (static).

    Returns:
        a :class:`HeadSource` (``groups = hq // Hkv``; ``node`` itself with ``groups = 1`` when no repeat is
        found), or the reason (a string) the repeat is not taken.
    """
    s = shape(node)
    if len(s) != 4:
        return f"K/V are {len(s)}D, not (B, H, L, D)"
    h = s[1]
    if not isinstance(h, int):
        return f"K/V head count {h} is symbolic"
    if h != hq:
        if h == 0 or hq % h:
            return f"{hq} query heads are not a multiple of {h} kv heads"
        return HeadSource(node, hq // h, "native GQA / broadcast (un-repeated K/V)")
    chain: list[Node] = []  # the materialised copies from the attention's input down to the repeat
    n = strip_clones(node, chain)
    shared = any(len(c.users) > 1 for c in chain)
    if is_call(n, *RESHAPES):
        found = _expand_repeat(n, hq, chain)
        if found is not None:
            return found
    if is_call(n, aten.repeat.default):
        src, reps = n.args[0], list(n.args[1])
        ssrc = shape(src)
        if len(reps) == 4 and reps[0] == reps[2] == reps[3] == 1 and len(ssrc) == 4:
            if ssrc[1] == 1:
                return HeadSource(src, hq, "repeat (MQA)", shared)
            return _TORCH_REPEAT_ORDER
    gather = None
    if is_call(n, aten.index.Tensor) and len(n.args[1]) == 2 and n.args[1][0] is None:
        gather = (n.args[0], n.args[1][1], "head gather x[:, idx]")
    elif is_call(n, aten.index_select.default) and n.args[1] in (1, -3):
        gather = (n.args[0], n.args[2], "index_select(x, 1, idx)")
    if gather is not None:
        src, idx, spelling = gather
        ssrc = shape(src)
        if len(ssrc) == 4 and isinstance(ssrc[1], int) and ssrc[1] < hq:
            why = _index_mapping(idx, hq, ssrc[1])
            if why is not None:
                return why
            return HeadSource(src, hq // ssrc[1], spelling, shared)
    return HeadSource(node, 1, "no repeat (MHA)")
