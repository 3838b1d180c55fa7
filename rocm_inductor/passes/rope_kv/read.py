"""Reading one ``rope_kv`` fold off the post-grad graph: the K write's rope node, its V partner's checks, the readers
that move after the op (``passes/rope_kv/__init__.py`` says what is taken and what is left alone)."""

from __future__ import annotations

import dataclasses
import operator
from typing import Any

import torch
from torch.fx import Graph, Node

from ..contract import Miss
from ..fx import RESHAPES, is_call, val

aten = torch.ops.aten
WHAT = "RoPE + K/V cache write"
ROPE = torch.ops.rocm_fused.rope.default
ROPE_CACHED = torch.ops.rocm_fused.rope_cached.default


def value_of(w: Node) -> tuple[Any, list[Node]]:
    """The 4-D tensor write ``w`` stores and the views from it to the value (``cache[:, :, pos] = k`` reshapes a
    (1, H, S, D) k to (H, S, D): only views that drop leading size-1 dims, which broadcast back to the same)."""
    value, chain = w.args[2], []
    while is_call(value, *RESHAPES) and isinstance(value.args[0], Node):
        outer, inner = val(value), val(value.args[0])
        if outer is None or inner is None:
            break
        lead = inner.ndim - outer.ndim
        if lead < 0 or tuple(inner.shape[lead:]) != tuple(outer.shape) \
                or any(str(d) != "1" for d in inner.shape[:lead]):
            break
        chain.append(value)
        value = value.args[0]
    return value, chain


#: Views a rotated k may reach a cache write through (recognition only: :func:`value_of` decides what is folded).
VIEWS = RESHAPES | {aten.permute.default, aten.transpose.int, aten.unsqueeze.default, aten.squeeze.dim,
                     aten.expand.default}


def source(w: Node) -> Node | None:
    """The rope node whose k output write ``w`` stores, through any views (:data:`VIEWS`), else None."""
    value = w.args[2]
    while is_call(value, *VIEWS):
        value = value.args[0]
    return _rope_of(value)


def _rope_of(value: Any) -> Node | None:
    """The rope node when ``value`` is its k output (``getitem(rope, 1)``), else None."""
    if is_call(value, operator.getitem) and value.args[1] == 1 and is_call(value.args[0], ROPE, ROPE_CACHED):
        return value.args[0]
    return None


def positions_of(w: Node) -> Node | None:
    """The ``pos`` of an ``index_put(cache, [None, None, pos], value)``, else None."""
    idx = w.args[1]
    if isinstance(idx, (list, tuple)) and len(idx) == 3 and idx[0] is None and idx[1] is None \
            and isinstance(idx[2], Node):
        return idx[2]
    return None


def _copy_back(w: Node) -> Node | None:
    """The ``copy_(cache, w)`` epilogue of write ``w``, if any."""
    return next((u for u in w.users if is_call(u, aten.copy_.default) and u.args[0] is w.args[0]
                 and u.args[1] is w), None)


@dataclasses.dataclass
class Fold:
    """One layer's fold: the rope node, the K and V writes, their copy_ epilogues, where the op goes, the readers
    that move after it, the value views the writes leave, and the permute from the rope's layout to (B, H, S, D)
    (None: the rope's k is already in it)."""

    rope: Node
    kw: Node
    vw: Node
    v: Node
    copies: list[Node]
    before: Node
    moved: list[Node]
    views: list[Node]
    perm: list[int] | None = None


def _ancestors(nodes: list[Node]) -> set[Node]:
    """Every node ``nodes`` are computed from (themselves included)."""
    seen, stack = set(), list(nodes)
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        stack.extend(a for a in n.all_input_nodes)
    return seen


def _check_write(w: Node, role: str) -> Node:
    """The copy_ epilogue of a checked write (the module docstring's cache checks).

    Raises:
        Miss: the check that failed.
    """
    cache = w.args[0]
    if len(w.args) > 3 and w.args[3]:
        raise Miss(f"the {role} write accumulates (index_put accumulate=True), it does not overwrite slots")
    if not isinstance(cache, Node) or cache.op != "placeholder":
        raise Miss(f"the {role} cache is not a graph input (computed in the graph: the op writes a cache in place)")
    cp = _copy_back(w)
    if cp is None:
        raise Miss(f"the {role} write is not copied back into its cache input (an out-of-place index_put: eager "
                   "mutates nothing)")
    others = [u.name for u in cache.users if u is not w and u is not cp]
    if others:
        raise Miss(f"the {role} cache input is also read or written by {', '.join(sorted(others))} (the op mutates "
                   "it in place at the write)")
    return cp


def read_fold(graph: Graph, kw: Node, vw: Node | None) -> Fold:
    """The fold of K write ``kw`` and its V partner ``vw``, checked.

    Raises:
        Miss: the check that failed.
    """
    (kget, kchain), (vnode, vchain) = value_of(kw), value_of(vw) if vw is not None else (None, [])
    rope = source(kw)
    if rope.target is ROPE_CACHED:
        raise Miss("k's RoPE is rocm_fused::rope_cached (table by position): rope_kv_write takes the model's "
                   "cos/sin (rocm_fused::rope) only")
    pos = positions_of(kw)
    if pos is None:
        raise Miss("the K cache is not written as cache[:, :, positions] (another layout, e.g. (B, max_len, H, D); "
                   "the op writes (B, H_kv, max_len, D) caches along dim 2)")
    layout = ("the rotated k reaches the cache through a reshape or a permute that moves its last dim (another "
              "layout than (B, H_kv, S, D) into (B, H_kv, max_len, D))")
    perm = None
    if _rope_of(kget) is not rope and is_call(kget, aten.permute.default) and _rope_of(kget.args[0]) is rope:
        # gpt-fast rotates (B, S, H, D) and transposes after: the op rotates q and k permuted the same way
        perm = [int(d) % 4 for d in kget.args[1]] if len(kget.args[1]) == 4 else None
        vals = [val(a) for a in rope.args[:4]]
        if perm is None or perm[3] != 3 or any(t is None or t.ndim > 4 for t in vals) or vals[0].ndim != 4:
            raise Miss(layout)
        kchain.append(kget)
        kget = kget.args[0]
    if _rope_of(kget) is not rope:
        raise Miss(layout)
    pv = val(pos)
    if pv is None or pv.ndim != 1 or pv.is_floating_point() or pv.dtype == torch.bool:
        raise Miss("the positions are not a 1-D integer tensor")
    copies = [_check_write(kw, "K")]
    if vw is None:
        raise Miss("no V write at the same positions into another cache input")
    copies.append(_check_write(vw, "V"))
    kc, vc, k, v = (val(n) for n in (kw.args[0], vw.args[0], kget, vnode))
    k = k if perm is None else k.permute(perm)
    if kc.ndim != 4 or tuple(kc.shape) != tuple(vc.shape) or kc.dtype != vc.dtype or kc.dtype != k.dtype \
            or tuple(k.shape) != tuple(v.shape) or v.dtype != k.dtype:
        raise Miss(f"K/V caches {tuple(kc.shape)} / {tuple(vc.shape)} ({kc.dtype} / {vc.dtype}) with k "
                   f"{tuple(k.shape)} and v {tuple(v.shape)}: not one (B, H_kv, max_len, D) layout and dtype")
    if (kc.shape[0], kc.shape[1], kc.shape[3]) != (k.shape[0], k.shape[1], k.shape[3]):
        raise Miss(f"k {tuple(k.shape)} does not fill cache rows {tuple(kc.shape)} as (B, H_kv, S, D)")
    for n, nxt in zip([kget, *kchain[::-1]], [*kchain[::-1], kw]):
        if len(n.users) != 1:
            raise Miss("the rotated k is also read by " + ", ".join(sorted(u.name for u in n.users if u is not nxt))
                       + " (the op writes it only into the cache)")
    order = {n: i for i, n in enumerate(graph.nodes)}
    inputs = [a for a in (*rope.args[:4], vnode, pos) if isinstance(a, Node)]
    last = max(inputs, key=order.__getitem__)
    # readers of q's rotation or of a write's result placed before the op's last input (HF's repeat_kv of K comes
    # before v's projection): moved after the op, in their order, unless an input of the op depends on them
    outs = [u for u in rope.users if u is not kget] + [kw, vw]
    moved, stack = set(), [u for o in outs for u in o.users if u not in copies]
    while stack:
        n = stack.pop()
        if n in moved or order[n] > order[last] or n in copies:
            continue
        moved.add(n)
        stack.extend(n.users)
    if moved & _ancestors(inputs):
        raise Miss("an input of the op (v, q, k, cos, sin or the positions) is computed from a reader of the "
                   "rotation or of the cache: folding would reorder")
    return Fold(rope, kw, vw, vnode, copies, last.next, sorted(moved, key=order.__getitem__), kchain + vchain, perm)
