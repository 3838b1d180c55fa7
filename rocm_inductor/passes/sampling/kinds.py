"""Naming a sampling filter by kind: a region between some scores ``s0`` and the probabilities the draw reads
that the structural reads (``filters.py``, ``min_p.py``) could not name is evaluated in float64 on random,
tie-free logits and compared with top-k, top-p, min-p and their combinations (HF order: temperature -> top-k
-> top-p -> min-p, and top-p before top-k; vLLM / FlashInfer order: min-p first), with every parameter (T, k,
p, min_p) taken from the region's own constants. When one of them gives the region's distribution on every
row of every seed (within :data:`ATOL`), it is the region's kind and its parameters become the op's.

Candidates are ordered and capped by what the region's anchor ops say (``topk``, or a ``sort`` with integer
constants -> the top-k family; ``cumsum`` -> top-p; a product with a constant in (0, 1) -> min-p), and a
parameter value is tried only when its filter alone keeps every token the region keeps (each filter of a
combination keeps a superset of what the combination keeps), and combinations of fewer filters come first, so
a region costs tens of evaluations, not thousands (at most :data:`MAX_CANDIDATES`). The draw may read the
probabilities in sorted order (``gather(sort(x)[1], -1, multinomial(q))``: SGLang, meta-llama): the
distribution is then scattered back before the comparison. The math of each filter is the op's reference
(``providers/reference_sampling.py``).
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import math
import operator
from typing import Any

import torch
from torch.fx import Node

from ..fx import is_call, same, val

aten = torch.ops.aten

#: Seeds of the random logits and the scale of each (flat rows, where top-p keeps many tokens and top-k binds,
#: and peaked ones, where top-p keeps few: a filter that binds on neither is provably a no-op there).
SEEDS = ((0, 0.3), (1, 2.0), (2, 6.0))
#: Rows evaluated per scale at least (a batch of 3 rows gets 11 seeds per scale: the peaked rows where a
#: min_tokens_to_keep = 2 shows are a few per cent of a scale's rows).
MIN_ROWS = 32
#: The elements of one scale's random logits when more seeds are drawn for a small batch.
EVAL_NUMEL = 1 << 19
#: Absolute tolerance on probabilities (both sides are float64 evaluations of the same filter: ~1e-16 apart).
ATOL = 1e-9
#: The most kind candidates one region is compared with.
MAX_CANDIDATES = 128
#: The largest region (elements of s0) evaluated at compile time.
MAX_NUMEL = 1 << 22
_ANCHORS = (aten.topk.default, aten.sort.default, aten.sort.stable, aten.cumsum.default)


@dataclasses.dataclass
class Named:
    """A region named by kind: its scores ``s0`` and the op's parameters (``order``: filters nearest the draw
    first, as :class:`~.chain.Chain` keeps them)."""

    s0: Node
    temperature: float
    top_k: int
    top_p: float
    min_p: float
    top_k_first: bool
    order: list[str]


def _ancestors(n: Node, limit: int = 400) -> list[Node]:
    """The ``limit`` nearest ancestors of ``n`` (breadth first: a filter sits next to the draw, the model far)."""
    seen: dict[Node, None] = {}
    queue = collections.deque([n])
    while queue and len(seen) < limit:
        m = queue.popleft()
        if m in seen:
            continue
        seen[m] = None
        queue.extend(m.all_input_nodes)
    return list(seen)


def filter_anchors(start: Node, v: Any) -> list[Node]:
    """The ``topk`` / ``sort`` / ``cumsum`` nodes over a last dim of size ``v`` (the vocabulary) among the
    nearest ancestors of ``start``: a filter not named yet (a router's ``topk`` over experts is no filter)."""
    return [m for m in _ancestors(start) if is_call(m, *_ANCHORS)
            and same(getattr(val(m.args[0]), "shape", (None,))[-1], v)]


def sorted_gather(draw: Node) -> tuple[Node, Node] | None:
    """``(gather, sort indices)`` when the draw's only user maps a sorted-order index back to a token:
    ``gather(sort(x)[1], -1, draw)`` (SGLang's torch sampler, meta-llama's ``sample_top_p``)."""
    if len(draw.users) != 1:
        return None
    g = next(iter(draw.users))
    if not (is_call(g, aten.gather.default) and g.args[2] is draw and g.args[1] in (-1, 1)):
        return None
    idx = g.args[0]
    if not (is_call(idx, operator.getitem) and idx.args[1] == 1 and is_call(idx.args[0], aten.sort.default,
                                                                             aten.sort.stable)):
        return None
    return g, idx


def _constants(nodes: list[Node]) -> tuple[set[int], set[float], set[float]]:
    """Integers, floats in (0, 1), positive multipliers / divisors of the region (T candidates)."""
    ints: set[int] = set()
    fracs: set[float] = set()
    temps: set[float] = set()
    for n in nodes:
        args = list(n.args) + list(n.kwargs.values())
        if is_call(n, aten.full.default) and len(n.args) > 1:
            args = [n.args[1]]
        for a in args:
            for x in (a if isinstance(a, (list, tuple)) else [a]):
                if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
                    continue
                if isinstance(x, int):
                    ints.add(abs(x))
                elif 0.0 < x < 1.0:
                    fracs.add(float(x))
                if is_call(n, aten.div.Tensor, aten.mul.Tensor) and isinstance(x, float) and x > 0:
                    temps.update((float(x),) if is_call(n, aten.div.Tensor) else (1.0 / x,))
    return ints, fracs, temps


def _filters(s: torch.Tensor, t: float, k: int, p: float, mp: float, order: str) -> torch.Tensor:
    """The op's filtered distribution of the (R, V) float64 logits ``s`` (``order``: "hf" top-k first, "pk"
    top-p first, "vllm" min-p first, then top-k, then top-p)."""
    from ...providers.reference_sampling import _min_p, _top_k, _top_p

    s = s / t
    if order == "vllm":
        s = _top_p(_top_k(_min_p(s, mp), k), p)
    else:
        s = _top_p(_top_k(s, k), p) if order == "hf" else _top_k(_top_p(s, p), k)
        s = _min_p(s, mp)
    return torch.softmax(s, -1)


def _region_dist(region: Any, x: torch.Tensor, subs: dict, space: str, sorted_out: bool) -> torch.Tensor:
    from ..verify import _run, widened

    outs = _run(widened(region.module), [x, *[subs.get(val(m), 3) for m in region.inputs[1:]]], subs)
    q = outs[0].double()
    if sorted_out:
        q = torch.zeros_like(x).scatter(-1, outs[1].long().reshape(x.shape), q.reshape(x.shape))
    q = q.reshape(x.shape)
    if space == "logits":
        return torch.softmax(q, -1)
    return q / q.sum(-1, keepdim=True)


def name_region(out: Node, space: str, draw: Node, b: Any, v: Any) -> Named | str | None:
    """Name the filters between some scores and ``out`` (the probabilities, or logits when ``space`` is
    "logits", that ``draw`` reads) by kind; None when there is nothing to name (no filter anchor), a reason
    string when anchors are there but no kind of the op fits.

    ``b``, ``v``: the draw's batch (1 for 1-D logits) and vocabulary sizes. Raises nothing (a region that
    can't be evaluated is not named).
    """
    from .. import discover
    from .softmax import softmax_input

    anchors = filter_anchors(out, v)
    if not anchors:
        return None
    sg = sorted_gather(draw)
    outs = [out, sg[1]] if sg else [out]
    cands: list[Node] = []
    for a in anchors:
        for x in (a.args[0], softmax_input(a.args[0])):
            xv = val(x)
            if (isinstance(x, Node) and isinstance(xv, torch.Tensor) and xv.is_floating_point() and xv.ndim in (1, 2)
                    and same(xv.shape[-1], v) and x not in cands):
                cands.append(x)
    order = {n: i for i, n in enumerate(out.graph.nodes)}
    cands.sort(key=lambda n: order.get(n, 0))
    nokind = "no top-k / top-p / min-p kind (HF or vLLM order, parameters from the region's constants) fits"
    why = ""
    for s0 in cands[:4]:
        region = discover.extract([s0], outs)
        if isinstance(region, str):
            why = why or f"the filter region can't be named: {region}"
            continue
        got = _try(region, s0, space, sg is not None)
        if isinstance(got, Named):
            return got
        if not why or why.startswith("the filter region can't be named"):  # an evaluated region says more
            why = got or nokind
    return why or nokind


def _try(region: Any, s0: Node, space: str, sorted_out: bool) -> Named | str | None:
    from ..verify import random_inputs

    try:
        _, subs = random_inputs(region, 0)
        shape = [subs.get(d, d) if not isinstance(d, int) else d for d in val(s0).shape]
        shape = [int(subs.get(d, 3)) if not isinstance(d, int) else d for d in shape]
        if math.prod(shape) > MAX_NUMEL:
            return "the filter region is too large to evaluate at compile time"
        xs, dists = [], []
        # small batches: more seeds per scale, within EVAL_NUMEL elements (a 128k vocabulary gets 4 per scale)
        reps = max(1, min(-(-MIN_ROWS // max(1, math.prod(shape[:-1]))), EVAL_NUMEL // math.prod(shape)))
        for seed, scale in [(s * reps + r, sc) for s, sc in SEEDS for r in range(reps)]:
            g = torch.Generator().manual_seed(seed)
            x = torch.randn(shape, generator=g, dtype=torch.float64) * scale
            xs.append(x.reshape(-1, shape[-1]))
            dists.append(_region_dist(region, x, subs, space, sorted_out).reshape(-1, shape[-1]))
        x, d = torch.cat(xs), torch.cat(dists)
    except Exception as e:  # a region we cannot evaluate is not named
        return f"the filter region can't be evaluated ({type(e).__name__})"
    if not torch.isfinite(d).all():
        return None
    ints, fracs, temps = _constants(region.nodes)
    v = x.shape[-1]
    kept = d > 0
    fam_k = any(is_call(n, aten.topk.default) for n in region.nodes) or (
        any(is_call(n, aten.sort.default, aten.sort.stable) for n in region.nodes) and bool(ints))
    fam_p = any(is_call(n, aten.cumsum.default) for n in region.nodes)
    fam_m = any(is_call(n, aten.mul.Tensor) and any(a in fracs for a in n.args if isinstance(a, float))
                for n in region.nodes)
    ts = _temperature(x, d, kept, temps)

    def alone(t: float, k: int, p: float, mp: float) -> bool:  # the filter alone keeps all the region keeps
        return bool((_filters(x, t, k, p, mp, "hf")[kept] > 0).all())

    tried = 0
    for t in ts:
        ks = sorted({k for kk in ints for k in (kk, kk + 1, v - kk) if 1 <= k < v and alone(t, k, 1.0, 0.0)}) \
            if fam_k else []
        ps = sorted({p for f in fracs for p in (f, 1.0 - f) if alone(t, 0, p, 0.0)}) if fam_p else []
        mps = sorted(f for f in fracs if alone(t, 0, 1.0, f)) if fam_m else []
        # fewest filters first: a filter that never binds on these rows is left out, not named
        for k, p, mp in sorted(itertools.product([0, *ks], [1.0, *ps], [0.0, *mps]),
                               key=lambda c: (c[0] > 0) + (c[1] < 1.0) + (c[2] > 0.0)):
            orders = ["hf"] + (["pk"] if k and p < 1.0 else []) + (["vllm"] if mp > 0 and p < 1.0 else [])
            for o in orders:
                tried += 1
                if tried > MAX_CANDIDATES:
                    return "no kind found within the candidates tried"
                if (_filters(x, t, k, p, mp, o) - d).abs().max() <= ATOL:
                    if o == "vllm" and not (_filters(x, t, k, p, mp, "hf") - d).abs().max() <= ATOL:
                        return (f"named as min-p {mp} applied before top-p {p} (vLLM's order): the op applies "
                                "min-p last, like HF")
                    fl = [n for n, on in (("min_p", mp > 0), ("top_p", p < 1.0), ("top_k", k > 0)) if on]
                    if o == "pk":
                        fl = [n for n in ("min_p", "top_k", "top_p") if n in fl]
                    return Named(s0, t, k, p, mp, o != "pk", fl)
    return None


def _temperature(x: torch.Tensor, d: torch.Tensor, kept: torch.Tensor, temps: set[float]) -> list[float]:
    """The temperatures to try: the one the kept tokens' log-ratios show (``log d_i - log d_j = (x_i - x_j) /
    T``), snapped to a constant of the region (or 1); every candidate when no row keeps two tokens."""
    cands = sorted({1.0, *temps})
    rows = kept.sum(-1) >= 2
    if not rows.any():
        return cands
    lx = torch.where(kept, x, math.nan)[rows]
    ld = torch.where(kept, d.clamp_min(1e-300).log(), math.nan)[rows]
    i = torch.nan_to_num(lx, nan=-math.inf).argmax(-1, keepdim=True)
    dx = (lx.gather(-1, i) - lx)
    dl = (ld.gather(-1, i) - ld)
    ok = dx.abs() > 1e-6
    t_hat = float((dx[ok] / dl[ok]).median()) if ok.any() else 1.0
    near = [t for t in cands if abs(t - t_hat) <= 1e-6 * t]
    return near or []
