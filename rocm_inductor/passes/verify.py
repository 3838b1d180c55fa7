"""Compile-time verification of an extracted region (a :class:`Region`) against an op's reference.

The region and the op's reference are evaluated on a few random inputs, with symbolic sizes replaced by small
concrete ones, and judged by the numerics contract (docs/ops.md):

- *kind*: the region evaluated in float64 (every float cast inside it widened to float64) equals the op's
  float64 math within :data:`KIND_RTOL` relative (the same function with the same parameters: eps, offset,
  rotary_dim, style are right);
- *contract*: in the graph's own dtypes, the op's reference is no further from the float64 truth than the
  region itself, plus one ulp of the output dtype. When the op is clearly closer (eager rounds in between, or
  accumulates in bf16), :attr:`Verdict.note` says it is more exact than eager.

``passes/discover.py`` extracts the region and caches the verdicts; this module only evaluates.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from torch.fx import Graph, GraphModule, Node

from .fx import val

#: Relative tolerance of the float64 kind check: both sides compute one function in float64, so they agree
#: to ~1e-15; 1e-9 leaves room for a different summation order and rejects any wrong eps/offset/sign.
KIND_RTOL = 1e-9
#: Seeds of the random inputs (two draws: one could hide a wrong sign on a symmetric input by chance).
SEEDS = (0, 1)
#: Concrete values given to symbolic sizes, in order of first appearance (small, distinct, not 0/1, which
#: torch specialises).
SYM_VALUES = (3, 5, 6, 7, 9, 10, 11, 13)
#: Upper bound (exclusive) of random integer inputs (positions, indices).
INT_HIGH = 8
#: Where verification evaluates a region: on the CPU whatever device the graph is for (float64 math, no
#: device state; a CUDA graph's ``device=cuda`` constants are moved here too, see :func:`_run`).
CPU = torch.device("cpu")


@dataclasses.dataclass
class Region:
    """A region of a graph, copied into a stand-alone graph module (made by ``discover.extract``).

    Attributes:
        inputs: the main graph's nodes the region reads (tensor inputs first, in the order given, then the
            symbolic sizes it needs); outputs: its output nodes; nodes: the main-graph nodes inside it
            (topological order); module: the stand-alone copy (placeholders = inputs, output = outputs);
        n_tensor_inputs: how many of ``inputs`` are the tensor inputs.
    """

    inputs: list[Node]
    outputs: list[Node]
    nodes: list[Node]
    module: GraphModule
    n_tensor_inputs: int


@dataclasses.dataclass
class Verdict:
    """Outcome of verification: ``ok``; ``reason`` (the failed check, for a near-miss) or ``note`` (the
    report's note: more exact than eager, or the error figures); ``cached``: from the signature cache."""

    ok: bool
    reason: str = ""
    note: str = ""
    cached: bool = False


def is_sym(v: Any) -> bool:
    """True for a symbolic size or scalar (``SymInt`` / ``SymFloat`` / ``SymBool``)."""
    return isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool))


def substitution(region: Region) -> dict[Any, int]:
    """Small concrete values (:data:`SYM_VALUES`) for every free symbol of the region's inputs."""
    free: list[Any] = []
    for n in region.inputs:
        v = val(n)
        leaves = list(v.shape) if isinstance(v, torch.Tensor) else [v]
        for s in leaves:
            if is_sym(s):
                for sym in sorted(s.node.expr.free_symbols, key=str):
                    if sym not in free:
                        free.append(sym)
    return {s: SYM_VALUES[i % len(SYM_VALUES)] for i, s in enumerate(free)}


def _concrete(s: Any, subs: dict[Any, int]) -> int:
    return int(s.node.expr.subs(subs)) if is_sym(s) else int(s)


def random_inputs(region: Region, seed: int) -> tuple[list[Any], dict[Any, int]]:
    """Random values for the region's inputs (floats ~ N(0, 1), ints in [0, INT_HIGH), bools), symbolic sizes
    replaced by :data:`SYM_VALUES`. Returns the values and the substitution used."""
    subs = substitution(region)
    g = torch.Generator().manual_seed(seed)
    vals: list[Any] = []
    for n in region.inputs:
        v = val(n)
        if not isinstance(v, torch.Tensor):
            vals.append(_concrete(v, subs))
            continue
        shape = [_concrete(s, subs) for s in v.shape]
        if v.dtype.is_floating_point:
            t = torch.randn(shape, generator=g, dtype=torch.float64).to(v.dtype)
        elif v.dtype is torch.bool:
            t = torch.rand(shape, generator=g) > 0.5
        elif v.dtype.is_complex:
            t = torch.randn(shape, generator=g, dtype=v.dtype)
        else:
            t = torch.randint(0, INT_HIGH, shape, generator=g, dtype=v.dtype)
        vals.append(t)
    return vals, subs


def _widen(x: Any) -> Any:
    if isinstance(x, torch.dtype) and x.is_floating_point:
        return torch.float64
    if isinstance(x, torch.dtype) and x.is_complex:
        return torch.complex128
    return x


def widened(module: GraphModule) -> GraphModule:
    """A copy of ``module`` whose float dtype arguments (casts, ``dtype=``) are all float64."""
    g = Graph()
    g.output(g.graph_copy(module.graph, {}))
    for n in g.nodes:
        if n.op == "call_function":
            n.args = torch.fx.node.map_aggregate(n.args, _widen)
            n.kwargs = torch.fx.node.map_aggregate(n.kwargs, _widen)
    out = GraphModule(torch.nn.Module(), g)
    return out


def _run(module: GraphModule, args: list[Any], subs: dict[Any, int]) -> list[torch.Tensor]:
    """Run a stand-alone region for real (outside fake mode), symbolic literals replaced by ``subs``."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    def conc(a: Any) -> Any:
        if isinstance(a, torch.device) and a.type != "cpu":
            return CPU  # the random inputs live on the CPU: a region's constants (full, scalar_tensor) follow
        return _concrete(a, subs) if is_sym(a) else a

    env: dict[Node, Any] = {}
    it = iter(args)
    with unset_fake_temporarily(), torch.no_grad():
        for n in module.graph.nodes:
            if n.op == "placeholder":
                env[n] = next(it)
            elif n.op == "call_function":
                a, kw = torch.fx.node.map_arg((n.args, n.kwargs), lambda m: env[m])
                a, kw = torch.fx.node.map_aggregate((a, kw), conc)
                env[n] = n.target(*a, **kw)
            elif n.op == "output":
                return list(torch.fx.node.map_arg(n.args[0], lambda m: env[m]))
    raise RuntimeError("region has no output")


def rel_err(a: torch.Tensor, ref: torch.Tensor) -> float:
    """max |a - ref| / max |ref| in float64 (0 for empty tensors; NaN/inf mismatches give inf)."""
    if ref.numel() == 0:
        return 0.0
    a, ref = a.double(), ref.double()
    finite = torch.isfinite(ref)
    if not torch.equal(finite, torch.isfinite(a)):
        return float("inf")
    d = (a - ref).abs()[finite]
    return float(d.max() / ref.abs()[finite].max().clamp_min(1e-30)) if d.numel() else 0.0


#: ``inputs(region, seed) -> (args, args64, subs)``: a family's own random inputs for :func:`evaluate` (the
#: graph-dtype values, the same values in float64, the symbol substitution), for regions whose inputs must obey
#: a rule random floats and ints break (expert ids below the expert count) or are too large to draw in full.
InputMaker = Callable[[Region, int], tuple[list[Any], list[Any], dict[Any, int]]]


def evaluate(region: Region, math64: Callable, op_ref: Callable, inputs: InputMaker | None = None) -> Verdict:
    """Judge ``region`` against the op (see module docstring); no cache (``discover.verify`` caches).

    Args:
        region: the extracted region.
        math64: the op's math in float64, called with the region's tensor inputs cast to float64; returns one
            tensor per region output.
        op_ref: the op's pure-torch reference in the graph's dtypes, called with the tensor inputs as they are.
        inputs: the family's input maker (:data:`InputMaker`); default :func:`random_inputs`, widened by casts.

    Returns:
        A :class:`Verdict`. Raises whatever evaluating the region or the op raises.
    """
    wide = widened(region.module)
    worst_kind, worst_op, worst_eager, dts = 0.0, 0.0, 0.0, set()
    for seed in SEEDS:
        if inputs is None:
            args, subs = random_inputs(region, seed)
            args64 = [a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]
        else:
            args, args64, subs = inputs(region, seed)
        tens = args[:region.n_tensor_inputs]
        tens64 = args64[:region.n_tensor_inputs]
        eager = _run(region.module, args, subs)
        eager64 = _run(wide, args64, subs)
        want64 = list(math64(*tens64))
        got = list(op_ref(*tens))
        if len(want64) != len(eager) or len(got) != len(eager):
            return Verdict(False, "the op has a different number of outputs than the region")
        for e, e64, w64, o in zip(eager, eager64, want64, got, strict=True):
            if tuple(e.shape) != tuple(w64.shape) or tuple(o.shape) != tuple(e.shape):
                return Verdict(False, f"the op's output shape {tuple(o.shape)} differs from the region's "
                                      f"{tuple(e.shape)}")
            if o.dtype != e.dtype:
                return Verdict(False, f"the op's output dtype {o.dtype} differs from the region's {e.dtype}")
            k = rel_err(e64, w64)
            if not k <= KIND_RTOL:
                return Verdict(False, f"evaluated in float64 on random inputs the region differs from the op's "
                                      f"math by {k:.3g} (relative; > {KIND_RTOL:g}): not the same function")
            ulp = torch.finfo(e.dtype).eps if e.is_floating_point() else 0.0
            eo, ee = rel_err(o, w64), rel_err(e, w64)
            if not eo <= ee + ulp:
                return Verdict(False, f"in {e.dtype} the op's error {eo:.3g} exceeds eager's {ee:.3g} + 1 ulp "
                                      f"(numerics contract)")
            worst_kind, worst_op, worst_eager = max(worst_kind, k), max(worst_op, eo), max(worst_eager, ee)
            dts.add(str(e.dtype).replace("torch.", ""))
    note = ""
    # "clearly more exact": eager's error at least twice the op's and above half an ulp of the dtype
    if worst_eager > 2 * worst_op and any(worst_eager > torch.finfo(getattr(torch, d)).eps / 2 for d in dts
                                           if getattr(torch, d).is_floating_point):
        note = (f"more exact than eager: rel. error vs float64 {worst_op:.2g} (eager {worst_eager:.2g}; "
                "eager rounds in between or accumulates in a narrower dtype)")
    return Verdict(True, note=note)
