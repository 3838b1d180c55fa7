"""Shared machinery of kind-based matching: extract a region of the graph, verify it against an op's reference.

The passes find a candidate from anchor ops every spelling of a kind contains (an inverse square root of a
mean of squares; a rotation's two linear combinations; a sigmoid multiplied in), read the op's parameters
off it, and then ask this module two things:

1. :func:`extract` -- the region between the candidate's inputs and its output, as a small stand-alone FX
   graph. It fails (returning the reason) when the region reads a tensor that is not one of its inputs, or
   when an intermediate escapes (is used outside the region: a rewrite would have to keep it anyway).
2. :func:`verify` -- evaluate that region and the candidate op's reference on a few random inputs at
   compile time and decide by the numerics contract (docs/ops.md) (``passes/verify.py`` evaluates and judges).

Results are cached per process by the region's *signature* (its ops, literal arguments, input
shapes/dtypes and the op parameters; node names left out), so the 32 identical layers of a model verify once.
:func:`stats` counts verifications and cache hits (``benchmarks/ops/bench_verify_cost.py`` reads it).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.fx import Graph, GraphModule, Node

from .fx import val
from .verify import (  # noqa: F401  (re-exported: the names callers read off ``discover``)
    CPU,
    INT_HIGH,
    KIND_RTOL,
    SEEDS,
    SYM_VALUES,
    InputMaker,
    Region,
    Verdict,
    evaluate,
    is_sym,
    random_inputs,
    rel_err,
    widened,
)

_CACHE: dict[str, Verdict] = {}
_STATS = {"verified": 0, "cache_hits": 0, "seconds": 0.0}
#: Process-wide switch (the compile-time measurement turns verification off to time its cost; a rewrite
#: then trusts the structural match alone).
ENABLED = [True]


def _constant_source(n: Node) -> bool:
    """A node with no tensor inputs that always makes the same value (``full``, ``scalar_tensor``, ``arange``)."""
    if n.op != "call_function" or n.all_input_nodes and any(not is_sym(val(m)) for m in n.all_input_nodes):
        return False
    tags = getattr(n.target, "tags", ())
    return torch.Tag.nondeterministic_seeded not in tags


def extract(inputs: Sequence[Node], outputs: Sequence[Node]) -> Region | str:
    """The region between ``inputs`` and ``outputs`` as a stand-alone graph, or why there is none.

    Args:
        inputs: tensor nodes the region may read (a candidate's x, weight, cos, sin, ...).
        outputs: the nodes whose values the op would replace.

    Returns:
        A :class:`Region`, or a reason string: the region reads another tensor (a graph input, a node outside
        it), contains a random op, or one of its intermediates is used outside it.
    """
    inset = set(inputs)
    nodes: set[Node] = set()
    syms: list[Node] = []
    stack = list(outputs)
    while stack:
        n = stack.pop()
        if n in nodes or n in inset:
            continue
        if is_sym(val(n)):
            if n not in syms:
                syms.append(n)
            continue
        if n.op != "call_function":
            return f"the region reads {n.name} ({n.op}), which is not one of its inputs"
        if torch.Tag.nondeterministic_seeded in getattr(n.target, "tags", ()):
            return f"the region contains a random op ({n.target})"
        if not n.all_input_nodes and not _constant_source(n):
            return f"the region reads {n.name} ({n.target}), which is not one of its inputs"
        nodes.add(n)
        stack.extend(n.all_input_nodes)
    outset = set(outputs)
    for n in nodes:
        if n in outset:
            continue
        for u in n.users:
            if u not in nodes:
                return f"the intermediate {n.name} ({n.target}) is also used outside the region (by {u.name})"
    graph = inputs[0].graph if inputs else outputs[0].graph
    order = [n for n in graph.nodes if n in nodes]
    sub = Graph()
    env: dict[Node, Node] = {}
    for i, n in enumerate([*inputs, *syms]):
        env[n] = sub.placeholder(f"in{i}")
        env[n].meta["val"] = val(n)
    for n in order:
        env[n] = sub.node_copy(n, lambda m: env[m])
    sub.output(tuple(env[o] for o in outputs))
    return Region(list(inputs) + syms, list(outputs), order, GraphModule(torch.nn.Module(), sub), len(inputs))


def _arg_sig(a: Any, index: dict[Node, int]) -> str:
    if isinstance(a, Node):
        return f"%{index.get(a, '?')}"
    if isinstance(a, (list, tuple)):
        return "[" + ",".join(_arg_sig(x, index) for x in a) + "]"
    if is_sym(a):
        return "sym"
    return repr(a)


def _tensor_sig(v: Any) -> str:
    if isinstance(v, torch.Tensor):
        return f"{v.dtype}{tuple(str(s) for s in v.shape)}"
    return type(v).__name__


def signature(region: Region, kind: str, params: Any) -> str:
    """The region's cache key: kind, parameters, input shapes/dtypes and each node's op and literal args."""
    index = {n: i for i, n in enumerate(region.module.graph.nodes)}
    parts = [kind, repr(params)]
    for n in region.module.graph.nodes:
        if n.op == "placeholder":
            parts.append("in:" + _tensor_sig(val(n)))
        else:
            parts.append(f"{n.target}({_arg_sig(n.args, index)};{_arg_sig(tuple(sorted(n.kwargs.items())), index)})")
    return "|".join(parts)


def verify(region: Region, kind: str, params: Any,
           math64: Callable[..., Sequence[torch.Tensor]],
           op_ref: Callable[..., Sequence[torch.Tensor]], inputs: InputMaker | None = None) -> Verdict:
    """Check that ``region`` computes ``kind`` with ``params`` (``passes/verify.py``), cached by signature.

    Args:
        region: from :func:`extract`.
        kind: the op family's name (part of the cache key).
        params: the parameters read off the region (hashable repr; part of the cache key).
        math64: the op's math in float64: called with the region's tensor inputs cast to float64, returns
            one tensor per region output.
        op_ref: the op's pure-torch reference in the graph's dtypes: called with the tensor inputs as they
            are, returns one tensor per region output (what the rewrite will compute).
        inputs: the family's own random inputs (``verify.InputMaker``; default: ``verify.random_inputs``).

    Returns:
        A :class:`Verdict`; an exception while evaluating becomes a failed verdict naming it.
    """
    if not ENABLED[0]:
        return Verdict(True, note="not verified (verification switched off)")
    key = signature(region, kind, params)
    hit = _CACHE.get(key)
    if hit is not None:
        _STATS["cache_hits"] += 1
        return dataclasses.replace(hit, cached=True)
    t0 = time.perf_counter()
    try:
        verdict = evaluate(region, math64, op_ref, inputs)
    except Exception as e:  # a region we cannot evaluate is not proven: never rewritten
        verdict = Verdict(False, f"verification could not evaluate the region ({type(e).__name__}: {e})")
    _STATS["verified"] += 1
    _STATS["seconds"] += time.perf_counter() - t0
    _CACHE[key] = verdict
    return verdict


def stats() -> dict[str, float]:
    """Counts since process start (or :func:`reset`): regions verified, cache hits, seconds spent verifying."""
    return dict(_STATS)


def reset() -> None:
    """Drop the signature cache and the counters (tests; the compile-time measurement)."""
    _CACHE.clear()
    _STATS.update(verified=0, cache_hits=0, seconds=0.0)
