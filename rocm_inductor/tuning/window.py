"""The window a level-2 compile measures for one candidate: its region plus the neighbours Inductor would fuse.

A rewrite wins or loses in context: our extern op stops Inductor from fusing the region with what is next to it
(the per-head q/k norm with the transpose and RoPE after it, the sigmoid gate with its strided slice:
``policy.py`` has the measurements). So a candidate is timed inside its *window*:

- the *region*: the main-graph nodes the pass's ``emit`` replaces (found by emitting on a copy of the graph: the
  nodes the copy loses, dead code included);
- its *neighbours*, one hop: producers of the region's inputs and consumers of its outputs that are pointwise
  ops or reductions (``torch.Tag.pointwise`` / ``torch.Tag.reduction``, dtype casts), reached through free view
  ops (``view``, ``permute``, ``slice``, ...; Inductor fuses through them);
- the view ops that lead from a base tensor to anything the window reads (so every input is a base tensor and
  the window reads it with the graph's own strides and aliasing).

It is cut out of the FX graph as stand-alone ``GraphModule``s: :attr:`Window.base` (the window as Inductor gets
it) and one :attr:`Window.ours` per provider (the same window after the pass's ``emit`` with that provider
forced). Both take the same inputs, described by :class:`InputSpec` from the nodes' fake tensor metadata
(symbolic sizes at their hints), and return the values the rest of the graph reads from the window, in the
same order. Node names are renamed (``in0``, ``n0``, ...), so identical layers give identical code and one
:meth:`Window.key`.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
from collections.abc import Iterable, Sequence
from typing import Any

import torch
from torch.fx import Graph, GraphModule, Node

from ..platform import Choice

#: Casts Inductor fuses like pointwise ops (``_to_copy`` has no pointwise tag).
_CASTS = frozenset({torch.ops.aten._to_copy.default, torch.ops.prims.convert_element_type.default})
#: Longest chain of view ops followed to reach a neighbour.
_MAX_VIEWS = 4


class WindowError(Exception):
    """The window cannot be cut (the reason in plain words, for the report's "not measured" note)."""


@dataclasses.dataclass(frozen=True)
class InputSpec:
    """One input of a window, made from a node's fake tensor metadata.

    Attributes:
        kind: ``"tensor"`` or ``"scalar"``; shape / stride: concrete sizes (symbolic ones at their hints);
        dtype: e.g. ``"bfloat16"``; device: ``"cuda"`` / ``"cpu"`` (the device type);
        value: the scalar's value (``kind == "scalar"``).
    """

    kind: str
    shape: tuple[int, ...] = ()
    stride: tuple[int, ...] = ()
    dtype: str = ""
    device: str = "cpu"
    value: Any = None

    @property
    def nbytes(self) -> int:
        """Bytes of storage the tensor spans (0 for a scalar)."""
        if self.kind != "tensor" or not self.shape or 0 in self.shape:
            return 0
        span = 1 + sum((s - 1) * st for s, st in zip(self.shape, self.stride, strict=True))
        return span * torch.empty((), dtype=getattr(torch, self.dtype)).element_size()


@dataclasses.dataclass
class Window:
    """What is measured for one candidate (see module docstring).

    Attributes:
        op: the op the pass emits; base: the window as Inductor compiles it without our rewrite;
        ours: provider -> the window after the rewrite with that provider;
        inputs: one :class:`InputSpec` per placeholder of every module, in order;
        region / neighbours / views: the main-graph node names in each part (for reports and tests).
    """

    op: str
    base: GraphModule
    ours: dict[str, GraphModule]
    inputs: list[InputSpec]
    region: list[str]
    neighbours: list[str]
    views: list[str]

    def key(self) -> str:
        """SHA-256 of the modules' code and the input specs: equal for identical layers."""
        h = hashlib.sha256(self.op.encode())
        h.update(self.base.code.encode())
        for name in sorted(self.ours):
            h.update(name.encode())
            h.update(self.ours[name].code.encode())
        h.update(repr(self.inputs).encode())
        return h.hexdigest()


def _hint(v: Any) -> Any:
    """A concrete value for an int / float or a symbolic one (its ShapeEnv hint)."""
    if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        node = v.node
        hint = getattr(node, "hint", None)
        if hint is None:
            hint = node.shape_env.size_hint(node.expr, allow_none=True)
        if hint is None:
            raise WindowError(f"symbolic value {v} has no hint")
        if isinstance(v, torch.SymFloat):
            return float(hint)
        return bool(hint) if isinstance(v, torch.SymBool) else int(hint)
    return v


def spec_of(node: Node) -> InputSpec:
    """The :class:`InputSpec` of ``node`` from ``meta["val"]``.

    Raises:
        WindowError: no fake tensor metadata, or a value that is neither a tensor nor a scalar.
    """
    v = node.meta.get("val")
    if isinstance(v, torch.Tensor):
        return InputSpec("tensor", tuple(int(_hint(s)) for s in v.shape), tuple(int(_hint(s)) for s in v.stride()),
                         str(v.dtype).replace("torch.", ""), v.device.type)
    if isinstance(v, (int, float, bool, torch.SymInt, torch.SymFloat, torch.SymBool)):
        return InputSpec("scalar", value=_hint(v))
    raise WindowError(f"input {node.name} has no fake tensor metadata ({type(v).__name__})")


def _is_free(n: Node) -> bool:
    """A view op (no kernel of its own: Inductor fuses through it)."""
    return n.op == "call_function" and bool(getattr(n.target, "is_view", False))


def _is_fusible(n: Node) -> bool:
    """A pointwise op, a reduction or a cast (what Inductor fuses with its neighbours), not mutating."""
    t = n.target
    if n.op != "call_function" or not isinstance(t, torch._ops.OpOverload):
        return False
    if t._schema.is_mutable:
        return False
    return t in _CASTS or torch.Tag.pointwise in t.tags or torch.Tag.reduction in t.tags


def _flat(n: Node) -> list[Node]:
    """The nodes ``n`` reads, in argument order, repeats kept."""
    out: list[Node] = []
    torch.fx.node.map_arg((n.args, n.kwargs), out.append)
    return out


def _after_kernel(a: Node, region: set[Node], order: dict[Node, int], lo: int) -> bool:
    """Whether ``a`` is computed from ``region`` through a node Inductor does not fuse (a GEMM, an extern op): an
    ancestor walk that stops above the region's first node. A purely pointwise / view path fuses, so it does not
    count."""
    seen: set[tuple[Node, bool]] = set()
    todo = [(a, False)]
    while todo:
        n, crossed = todo.pop()
        if n in region:
            if crossed:
                return True
            continue
        if (n, crossed) in seen or order.get(n, -1) < lo:
            continue
        seen.add((n, crossed))
        crossed = crossed or not (_is_fusible(n) or _is_free(n))
        todo.extend((i, crossed) for i in n.all_input_nodes)
    return False


def neighbours(region: set[Node], order: dict[Node, int]) -> tuple[list[Node], list[Node]]:
    """(neighbours, the view ops on the way to them) of ``region``, one hop (see module docstring); ``order``: the
    graph's node positions.

    A consumer that also reads a value computed from the region (the next residual add ``s + mlp(norm(s))``:
    its other operand comes out of GEMMs fed by the region) is not a neighbour: Inductor schedules it after
    those GEMMs, so it cannot fuse with the region, while the window, where that operand is an input, would fuse
    it into the baseline's kernel (on the H200 that made Inductor's add + RMSNorm measure 1-1.5 us faster than
    ours in the window and ~4 us slower in the step; benchmarks/results/notes/46-tuning.md)."""
    found: list[Node] = []
    ways: list[Node] = []
    lo = min((order[r] for r in region), default=0)

    def later(u: Node, path: list[Node]) -> bool:
        return any(a not in region and a not in path and _after_kernel(a, region, order, lo)
                   for a in u.all_input_nodes)

    def add(path: list[Node], n: Node) -> None:
        if n not in region and n not in found:
            found.append(n)
            ways.extend(p for p in path if p not in ways and p not in region)

    for r in region:
        for a in r.all_input_nodes:  # producers, up through views
            path, cur = [], a
            while cur not in region and _is_free(cur) and len(path) < _MAX_VIEWS and cur.all_input_nodes:
                path.append(cur)
                cur = cur.all_input_nodes[0]
            if cur not in region and _is_fusible(cur):
                add(path, cur)
        stack = [(u, []) for u in r.users]  # consumers, down through views
        while stack:
            u, path = stack.pop()
            if u in region or u.op != "call_function":
                continue
            if _is_fusible(u):
                if not later(u, path):
                    add(path, u)
            elif _is_free(u) and len(path) < _MAX_VIEWS:
                stack.extend((w, [*path, u]) for w in u.users)
    return found, ways


def _view_closure(nodes: set[Node]) -> set[Node]:
    """The view ops (transitively) that produce what ``nodes`` read, so every input is a base tensor."""
    added: set[Node] = set()
    todo = [a for n in nodes for a in n.all_input_nodes]
    while todo:
        a = todo.pop()
        if a in nodes or a in added or not _is_free(a):
            continue
        added.add(a)
        todo.extend(a.all_input_nodes)
    return added


def _remap(obj: Any, vm: dict[Node, Node], memo: dict[int, Any]) -> Any:
    """``obj`` with every ``Node`` replaced by its copy (dataclasses, tuples, lists, dicts, plain objects of
    this package rebuilt; other values shared)."""
    if isinstance(obj, Node):
        return vm.get(obj, obj)
    if id(obj) in memo:
        return memo[id(obj)]
    if isinstance(obj, (str, int, float, bool, type(None), torch.Tensor, torch.dtype, torch.device)):
        return obj
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        out = type(obj)(*(_remap(x, vm, memo) for x in obj))
    elif isinstance(obj, (tuple, list, set, frozenset)):
        out = type(obj)(_remap(x, vm, memo) for x in obj)
    elif isinstance(obj, dict):
        out = {_remap(k, vm, memo): _remap(v, vm, memo) for k, v in obj.items()}
    elif (dataclasses.is_dataclass(obj) and not isinstance(obj, type)) or (
            hasattr(obj, "__dict__") and type(obj).__module__.startswith("rocm_inductor")):
        out = copy.copy(obj)
        memo[id(obj)] = out
        for k, v in vars(obj).items():
            object.__setattr__(out, k, _remap(v, vm, memo))
        return out
    else:
        return obj
    memo[id(obj)] = out
    return out


def _copy_graph(graph: Graph) -> tuple[Graph, dict[Node, Node]]:
    """A copy of ``graph`` and the node map (the output node included)."""
    g = Graph()
    vm: dict[Node, Node] = {}
    out = g.graph_copy(graph, vm)
    new_out = g.output(out)
    old_out = next(n for n in reversed(graph.nodes) if n.op == "output")
    vm[old_out] = new_out
    return g, vm


def _emit_on_copy(graph: Graph, pass_: Any, ctx: Any, cand: Any, params: Any, provider: str
                  ) -> tuple[Graph, dict[Node, Node], set[Node], set[Node]]:
    """Emit ``cand`` with ``provider`` forced on a copy of ``graph``: (copy, node map, region of the original
    graph, new nodes of the copy)."""
    from ..passes.context import PassContext
    from ..report import GraphReport

    g, vm = _copy_graph(graph)
    g.eliminate_dead_code()  # what was dead already is no part of any region
    alive = set(g.nodes)
    memo: dict[int, Any] = {}
    cand2, params2 = _remap(cand, vm, memo), _remap(params, vm, memo)
    ctx2 = PassContext(ctx.options, GraphReport(graph_id=-1, platform=ctx.report.platform))
    choice = Choice(provider, ())
    ctx2.pending = choice
    pass_.emit(g, ctx2, cand2, params2, choice)
    g.eliminate_dead_code()  # the region the rewrite left dead is part of it
    now = set(g.nodes)
    inv = {v: k for k, v in vm.items()}
    region = {inv[n] for n in alive - now if n in inv}
    if not region:
        raise WindowError("the rewrite replaced no node")
    return g, vm, region, now - alive


def _module(nodes: Sequence[Node], inputs: Sequence[Node], outputs: Sequence[Node]) -> GraphModule:
    """A stand-alone module of ``nodes`` (in order) reading ``inputs`` (placeholders ``in0``...) and returning
    the tuple of ``outputs``; node names renamed ``n0``... so equal windows print equal code."""
    g = Graph()
    env: dict[Node, Node] = {}
    for i, a in enumerate(inputs):
        p = g.placeholder(f"in{i}")
        p.meta = dict(a.meta)
        env[a] = p
    for i, n in enumerate(nodes):
        args, kwargs = torch.fx.node.map_arg((n.args, n.kwargs), lambda a: env[a])
        new = g.create_node(n.op, n.target, args, kwargs, name=f"n{i}")
        new.meta = dict(n.meta)
        env[n] = new
    g.output(tuple(env[o] for o in outputs))
    return GraphModule(torch.nn.Module(), g)


def _external_inputs(nodes: set[Node]) -> set[Node]:
    return {a for n in nodes for a in n.all_input_nodes if a not in nodes}


def cut(graph: Graph, pass_: Any, ctx: Any, cand: Any, params: Any, providers: Iterable[str], op: str
        ) -> Window:
    """The :class:`Window` of ``cand`` (see module docstring), with one rewritten module per provider.

    Args:
        graph: the post-grad graph the pass is rewriting (left unchanged); pass_, ctx, cand, params: what the
            pass contract hands ``emit``; providers: the providers to force, one ``ours`` module each; op: the
            op the pass emits (the window's name).

    Returns:
        The window.

    Raises:
        WindowError: the rewrite replaced nothing, an input has no fake tensor metadata, or the rewritten
            windows do not read and write the same values. Whatever ``emit`` raises on the copy.
    """
    providers = list(providers)
    if not providers:
        raise WindowError("no provider to measure")
    order = {n: i for i, n in enumerate(graph.nodes)}
    copies = [_emit_on_copy(graph, pass_, ctx, cand, params, p) for p in providers]
    region = copies[0][2]
    near, ways = neighbours(region, order)
    base = region | set(near) | set(ways)
    views = _view_closure(base)
    base |= views
    ours_sets = []
    for _g, vm, reg, new in copies:
        if reg != region:
            raise WindowError("providers rewrite different regions")
        mine = {vm[n] for n in base if n not in region} | new
        mine |= _view_closure(mine)
        ours_sets.append(mine)
    # the inputs: every base tensor either window reads, in the main graph's order
    inputs = set(_external_inputs(base))
    for (_g, vm, _, _), mine in zip(copies, ours_sets, strict=True):
        inv = {v: k for k, v in vm.items()}
        for a in _external_inputs(mine):
            if a not in inv:
                raise WindowError(f"the rewrite reads {a.name}, a node it created outside the window")
            inputs.add(inv[a])
    inputs_l = sorted(inputs, key=lambda n: order[n])
    base_l = sorted(base, key=lambda n: order[n])
    # the outputs: what the rest of the graph reads from the window, paired through the readers' arguments
    outs_base: list[Node] = []
    outs_ours: list[list[Node]] = [[] for _ in copies]
    for u in graph.nodes:
        if u in base:
            continue
        flat = _flat(u)
        for i, a in enumerate(flat):
            if a not in base or a in outs_base:
                continue
            outs_base.append(a)
            for k, ((_g, vm, _, _), mine) in enumerate(zip(copies, ours_sets, strict=True)):
                flat2 = _flat(vm[u])
                if len(flat2) != len(flat) or flat2[i] not in mine:
                    raise WindowError(f"after the rewrite {u.name} does not read the window's output at the same "
                                      "place")
                outs_ours[k].append(flat2[i])
    specs = [spec_of(n) for n in inputs_l]
    ours: dict[str, GraphModule] = {}
    for p, (g, vm, _, _), mine, outs in zip(providers, copies, ours_sets, outs_ours, strict=True):
        gorder = {n: i for i, n in enumerate(g.nodes)}
        ours[p] = _module(sorted(mine, key=lambda n: gorder[n]), [vm[a] for a in inputs_l], outs)
    return Window(op, _module(base_l, inputs_l, outs_base), ours, specs,
                  region=[n.name for n in base_l if n in region],
                  neighbours=[n.name for n in base_l if n in near],
                  views=[n.name for n in base_l if n in views or n in ways])

