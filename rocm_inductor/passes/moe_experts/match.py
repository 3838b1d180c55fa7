"""Reading an HF experts region off the post-grad graph: the two expert GEMMs, their inputs and parameters.

Anchors (what every spelling of the kind contains): a GEMM whose weight operand is a 3-D stack of expert
matrices, read either through a gather ``W[ids]`` (``aten.index``, HF ``batched_mm``) or whole with
per-expert offsets (``aten._grouped_mm`` / ``transformers::grouped_mm_fallback``, HF ``grouped_mm``), followed
by a second such GEMM on the same ids (or offsets): gate/up then down. The rest is read by walking from them:
the token states, the ids and routing weights (the (T, k) tensors the region starts from), the biases, the
layouts, the activation and its constants, and the output (the sum over the k slots).
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Any

import torch
from torch.fx import Graph, Node

from ..contract import Miss
from ..fx import CONVERT, RESHAPES, is_call, shape, val
from .sentinel import sentinel_fill

aten = torch.ops.aten

#: Grouped GEMMs with per-expert offsets: ``(input (S, K), weight (E, K, N), offs (E,))``.
GROUPED = (aten._grouped_mm.default,)
#: Ops walked through from a GEMM's operand up to the token states / ids / weights.
_UP = frozenset({*RESHAPES, CONVERT, aten.unsqueeze.default, aten.squeeze.dim, aten.expand.default,
                 aten.clone.default, aten.index.Tensor, aten.cumsum.default, aten.histc.default, aten.sort.default,
                 aten.repeat_interleave.self_int, aten.permute.default})
#: Most nodes walked from the down GEMM to the sum over the k slots.
_MAX_FORWARD = 16


def grouped_targets() -> tuple[Any, ...]:
    """``aten._grouped_mm`` and, when transformers registered it, its float fallback op."""
    fallback = getattr(getattr(torch.ops, "transformers", None), "grouped_mm_fallback", None)
    return GROUPED + ((fallback.default,) if fallback is not None and hasattr(fallback, "default") else ())


@dataclasses.dataclass
class Gemm:
    """One expert GEMM: the node, its form, the 3-D weight it reads, the token-side operand, the routing key
    (the gathered ids for ``batched_mm``, the offsets for ``grouped_mm``), whether the weight is stored
    (E, K, N) (``transposed``)."""

    node: Node
    form: str
    weight: Node
    operand: Node
    key: Node
    transposed: bool


@dataclasses.dataclass
class Experts:
    """An experts region: inputs of the op, its output, and the parameters read off it."""

    up: Gemm
    down: Gemm
    x: Node | None = None
    topk_weights: Node | None = None
    topk_ids: Node | None = None
    b_gate_up: Node | None = None
    b_down: Node | None = None
    out: Node | None = None
    activation: str = "silu"
    interleaved: bool = False
    alpha: float = 1.702
    limit: float = 7.0
    verdict: Any = None


def _weight3d(n: Any) -> bool:
    v = val(n)
    return isinstance(v, torch.Tensor) and v.ndim == 3 and v.is_floating_point()


def as_gemm(n: Node, grouped: tuple[Any, ...]) -> Gemm | None:
    """``n`` as an expert GEMM, or None."""
    if is_call(n, aten.bmm.default) and len(n.args) == 2:
        a, b = n.args
        for gathered, other, transposed in ((a, b, False), (b, a, True)):
            if is_call(gathered, aten.index.Tensor) and _weight3d(gathered.args[0]) \
                    and len(gathered.args[1]) == 1 and isinstance(gathered.args[1][0], Node):
                return Gemm(n, "batched_mm", gathered.args[0], other, gathered.args[1][0], transposed)
        return None
    if is_call(n, *grouped) and len(n.args) >= 3 and isinstance(n.args[1], Node):
        w = n.args[1]
        if is_call(w, aten.permute.default) and list(w.args[1]) in ([0, 2, 1], [0, -1, -2]) and _weight3d(w.args[0]):
            return Gemm(n, "grouped_mm", w.args[0], n.args[0], n.args[2], False)
        if _weight3d(w) and not is_call(w, aten.permute.default):
            return Gemm(n, "grouped_mm", w, n.args[0], n.args[2], True)
    return None


def find_pairs(graph: Graph) -> tuple[list[tuple[Gemm, Gemm]], list[Gemm]]:
    """(gate/up, down) expert GEMM pairs: two GEMMs of one form on the same routing key, the second reading
    what the first computes; and the expert GEMMs left without a partner (near-misses)."""
    grouped = grouped_targets()
    order = {n: i for i, n in enumerate(graph.nodes)}
    gemms = [g for g in (as_gemm(n, grouped) for n in graph.nodes if n.op == "call_function") if g is not None]
    pairs, used = [], set()
    for i, up in enumerate(gemms):
        if up.node in used:
            continue
        for down in gemms[i + 1:]:
            if down.form == up.form and down.key is up.key and down.node not in used \
                    and reads(down.operand, up.node, order):
                pairs.append((up, down))
                used.update((up.node, down.node))
                break
    return pairs, [g for g in gemms if g.node not in used]


def reads(n: Node, src: Node, order: dict[Node, int]) -> bool:
    """Whether ``src`` is an ancestor of ``n`` (``order``: graph positions; nodes before ``src`` are pruned)."""
    stack, seen, floor = [n], set(), order.get(src, 0)
    while stack:
        m = stack.pop()
        if m is src:
            return True
        if m in seen or not isinstance(m, Node) or order.get(m, -1) < floor:
            continue
        seen.add(m)
        stack.extend(m.all_input_nodes)
    return False


def _walk_up(n: Any, ok, experts: Any = None) -> Node | None:
    """First node up the first-argument chain (through :data:`_UP` ops and, given the expert count, HF's
    sentinel fill, ``sentinel.py``) for which ``ok(node)`` holds."""
    for _ in range(16):
        if not isinstance(n, Node):
            return None
        if ok(n):
            return n
        if n.op != "call_function" or not n.args:
            return None
        inner = sentinel_fill(n, experts) if experts is not None else None
        if inner is not None:
            n = inner
            continue
        if n.target not in _UP and n.target is not operator.getitem:
            return None
        n = n.args[0]
    return None


def _is2d(n: Node, dims: tuple, floating: bool | None) -> bool:
    v = val(n)
    if not isinstance(v, torch.Tensor) or v.ndim != 2:
        return False
    if floating is not None and v.is_floating_point() != floating:
        return False
    return all(d is None or _eq(s, d) for s, d in zip(v.shape, dims, strict=True))


def _eq(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:
        return False


def _closure(out: Node, stop: set[Node]) -> list[Node]:
    """Nodes the output depends on, stopping at ``stop`` (the region's inputs)."""
    seen, stack = [], [out]
    while stack:
        n = stack.pop()
        if n in stop or n in seen or not isinstance(n, Node) or n.op != "call_function":
            continue
        seen.append(n)
        stack.extend(n.all_input_nodes)
    return seen


def _number(a: Any) -> float | None:
    return float(a) if isinstance(a, (int, float)) and not isinstance(a, bool) else None


def _activation(e: Experts, nodes: list[Node]) -> None:
    """Layout (concatenated / interleaved halves) and activation (``silu`` / ``swiglu_clamp`` with its alpha
    and limit) read off the nodes between the GEMMs; verification decides whether the reading is right.

    Raises:
        Miss: a clamp or a sigmoid's scale that is not a compile-time number.
    """
    e.interleaved = any(is_call(n, aten.slice.Tensor) and len(n.args) > 4 and n.args[4] == 2 for n in nodes)
    clamps = [n for n in nodes if is_call(n, aten.clamp.default, aten.clamp_max.default, aten.clamp_min.default)]
    if not clamps:
        e.activation = "silu"
        return
    e.activation = "swiglu_clamp"
    limits = [x for n in clamps for x in (_number(a) for a in n.args[1:3]) if x is not None and x > 0]
    if not limits:
        raise Miss("the activation's clamp bounds are not compile-time numbers")
    e.limit = max(limits)
    for sig in (n for n in nodes if is_call(n, aten.sigmoid.default)):
        arg = sig.args[0]
        if is_call(arg, aten.mul.Tensor):
            nums = [x for x in (_number(a) for a in arg.args) if x is not None]
            if nums:
                e.alpha = nums[0]
                return
    raise Miss("the clamped SwiGLU's sigmoid scale (alpha) is not a compile-time number")


def _sum_over_k(down: Node, t: Any, k: Any) -> Node | None:
    """The ``sum(dim=1)`` over a (T, k, H) view below the down GEMM (within :data:`_MAX_FORWARD` nodes)."""
    frontier, seen = [down], set()
    while frontier and len(seen) < _MAX_FORWARD:
        n = frontier.pop(0)
        if n in seen:
            continue
        seen.add(n)
        if is_call(n, aten.sum.dim_IntList) and list(n.args[1]) in ([1], [-2]):
            s = shape(n.args[0])
            if len(s) == 3 and _eq(s[0], t) and _eq(s[1], k):
                return n
        frontier.extend(n.users)
    return None


def read_experts(up: Gemm, down: Gemm) -> Experts:
    """The experts region of a (gate/up, down) GEMM pair.

    Raises:
        Miss: a piece of the region is not where HF's experts code puts it (reason in plain words).
    """
    e = Experts(up, down)
    order = {n: i for i, n in enumerate(up.node.graph.nodes)}
    if up.transposed != down.transposed:
        raise Miss("the gate/up and down weights are stored in different layouts")
    ids = _walk_up(up.key, lambda n: _is2d(n, (None, None), False))
    if ids is None:
        raise Miss("the expert ids are not a (tokens, k) integer tensor the region starts from")
    t, k = shape(ids)
    hidden = shape(up.weight)[1 if up.transposed else 2]
    x = _walk_up(up.operand, lambda n: _is2d(n, (t, hidden), True), experts=shape(up.weight)[0])
    if x is None:
        raise Miss(f"the token states are not a (tokens, {hidden}) tensor the region starts from")
    out = _sum_over_k(down.node, t, k)
    if out is None:
        raise Miss("no sum over the k expert slots of a (tokens, k, hidden) view follows the down GEMM")
    users = list(out.users)
    if len(users) == 1 and is_call(users[0], CONVERT):
        out = users[0]
    if val(out).dtype != val(x).dtype:
        raise Miss(f"the experts' sum is {val(out).dtype}, not the token states' {val(x).dtype}")
    stop = {x, ids, up.weight, down.weight}
    nodes = _closure(out, stop)
    tw = None
    for m in (n for n in nodes if is_call(n, aten.mul.Tensor)):
        for a in m.args:
            cand = _walk_up(a, lambda n: _is2d(n, (t, k), True))
            if cand is not None and not reads(cand, down.node, order):
                tw = cand
        if tw is not None:
            break
    if tw is None:
        raise Miss("no (tokens, k) routing weight multiplies the experts' outputs")
    # a bias is an (E, N) tensor gathered by expert id that the region does not compute: HF grouped_mm's
    # inverse permutation ``weighted_out[inv_perm]`` is an (S, H) gather too, and S = T * k equals E at some
    # decode sizes (GPT-OSS: B = 8, k = 4, E = 32), so the shape alone would take the experts' output for a bias
    biases = [n for n in nodes if is_call(n, aten.index.Tensor) and n.args[0] not in stop
              and _is2d(n.args[0], (shape(up.weight)[0], None), True) and not reads(n.args[0], x, order)]
    for b in biases:  # a bias gathered before the down GEMM is gate/up's, one after it is down's
        if reads(down.node, b, order):
            e.b_gate_up = e.b_gate_up if e.b_gate_up is not None else b.args[0]
        elif e.b_down is None:
            e.b_down = b.args[0]
    e.x, e.topk_ids, e.topk_weights, e.out = x, ids, tw, out
    _activation(e, _closure(down.node, stop | {up.node}))
    return e
