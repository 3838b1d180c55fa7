"""Decode GEMMs that read one activation -> ``rocm_fused::merged_gemm`` (one launch, weights read in place).

Covers (post-grad ATen graph, after ``canonicalize``): ``mm(a, mat2)`` and ``addmm(bias, a, mat2)`` (default
beta/alpha) where
- ``a`` is the same (M, K) activation: one node, or ``view``/``reshape`` of one node to one (M, K) shape
  (HF and gpt-fast flatten the (b, s, h) hidden state to (b*s, h) once per projection);
- ``mat2`` is the transpose (``permute(w, [1, 0])`` / ``t(w)``) of an (N, K) weight (``nn.Linear`` /
  ``F.linear``), or any (K, N) tensor (passed on transposed, as a view);
- M is a decode bucket, decided as the level-2 GEMM override decides "small M"
  (``rocm_inductor.lowerings.gemm_buckets.decide``): a static M <= ``aten_gemm_max_m`` (default 32) or a
  symbolic M whose ShapeEnv upper bound is <= it (``mark_dynamic(x, 0, max=32)``);
- at least two such GEMMs, one dtype for activation, weights and biases.
Each group becomes one op returning every output as before (the ``mm`` nodes' users read ``getitem``s).
Groups of more than ``MAX_WEIGHTS`` (4) GEMMs are split into balanced chunks. Typical matches: q/k/v of HF
Llama/Qwen/Gemma attention (3), gate/up of their MLPs and gpt-fast's ``w1``/``w3`` (2).

Left alone, each reported as a near-miss with its reason:
- GEMMs of one activation with M above the bucket limit or unbounded (prefill);
- a GEMM of the group with another dtype (e.g. a float32 weight in a bf16 model);
- GEMMs that read the same tensor through different views or slices (not one (M, K) activation);
- a GEMM whose input is computed from another member's output (merging would reorder; the others merge);
- what the provider refuses (e.g. a weight not contiguous along K for the Triton kernel);
- a GEMM the op cannot express next to other GEMMs of its activation: ``addmm`` with beta/alpha != 1 or
  with a bias that is not (N,) (a (1,) or (M, N) bias broadcast by addmm);
- GEMMs of one activation of a dtype the op does not take (float64, integers).
A GEMM whose activation, weight or bias is the output of a GEMM merged before it reads that merge's output.
Inputs computed late (a weight cast or built inside each ``Linear.forward``: ``self.weight.to(x.dtype)``,
autocast, a LoRA-merged ``w + a @ b``, placed after the previous projection's output is already used) are
moved before that first use when they read no member's output (:func:`_hoist`); otherwise: near-miss.
A single GEMM of its activation in a decode bucket (o_proj, down_proj, lm_head, gpt-fast's fused ``wqkv``)
is offered to the providers as a one-weight ``merged_gemm`` (a provider choice, not a merge; also when its
activation feeds a GEMM the op cannot express, e.g. an ``addmm`` with beta != 1, reported above): the Triton
provider takes it only where its measured table has that (M bucket, K, N, dtype, GPU) and ours beat cuBLAS
(``providers/triton/gemm_merge.py: measured_single``); the reference provider never does. Reported as a match
("single GEMM, N ..., bucket M=..."), or as a near-miss with the numbers where the table measured cuBLAS
faster (or with the limit where it measured ours faster but the provider cannot take it: ``x @ w`` of a (K, N)
weight); an unmeasured single stays silent (and with Inductor), on CPU / the interpreter too.
Left alone silently: an unmeasured single GEMM (gpt-fast's already fused ``wqkv`` on every table so far),
``bmm``/``baddbmm`` (attention), scaled/int8 GEMMs, training graphs' GEMMs whose inputs are also saved
(merging them is still exact, but the pass targets inference and does not look at them differently).

On by default on CUDA only (``policy.PASS_DEFAULTS``; measured on the H200, and the Triton provider's
``check`` takes only merges its measured table says beat separate cuBLAS GEMMs: the others are near-misses
with the numbers), off on ROCm and CPU; unlike the other passes it is not switched on by a forced global
``provider=``: enable it with ``options={"passes": {"gemm_merge": True}}`` (or
force ``providers={"merged_gemm": ...}``). Under Inductor freezing the weights arrive as constants (often
already transposed into (K, N) tensors): they merge the same way; freezing's own concatenation of GEMMs of one
input (weights of one shape: gate/up) happens before this pass, which then sees one GEMM there.

   x ─► view ─► mm(·, permute(Wq)) ─► q          ==>     x ─► view ─► merged_gemm(·, [Wq, Wk, Wv]) ─► q, k, v
   x ─► view ─► mm(·, permute(Wk)) ─► k
   x ─► view ─► mm(·, permute(Wv)) ─► v
"""

from __future__ import annotations

import operator
from typing import Any

import torch
from torch.fx import Graph, Node
from torch.fx.experimental.symbolic_shapes import statically_known_true

from ..ops.gemm_merge import DTYPES, MAX_WEIGHTS, merged_gemm_spec
from ..refusal import MEASURED_REFUSED, MEASURED_SLOWER, any_of
from ..registry import ops_of
from ..report import Match as MatchRecord
from ..report import NearMiss, dtype_name, location_of
from .canonicalize import fake_eval
from .context import PassContext

aten = torch.ops.aten

#: Reshapes through which the shared activation is found (same values, same element order).
RESHAPES = frozenset({aten.view.default, aten.reshape.default, aten._unsafe_view.default})
#: Views/slices/casts through which "the same tensor read differently" is found (near-miss reporting only).
#: Not transposes: a GEMM of a transposed tensor is no projection of it (a training backward's weight
#: gradient ``permute(grad) @ x`` next to ``grad @ w``), and reporting every such pair would be noise.
VIEWS = RESHAPES | frozenset({
    torch.ops.prims.convert_element_type.default, aten._to_copy.default, aten.slice.Tensor, aten.select.int,
    aten.clone.default, aten.alias.default,
    aten.expand.default, aten.squeeze.dim, aten.unsqueeze.default, aten.narrow.default})
WHAT = "GEMMs of one activation"
WHAT_SINGLE = "a single small-M GEMM"


def _val(n: Any) -> Any:
    return n.meta.get("val") if isinstance(n, Node) else None


def _through(node: Any, ops: frozenset) -> Any:
    while isinstance(node, Node) and node.op == "call_function" and node.target in ops and node.args:
        node = node.args[0]
    return node


def _weight_of(mat2: Node) -> tuple[Node, bool]:
    """(node, is_nk): the (N, K) weight when ``mat2`` is its transpose, else ``mat2`` itself (K, N)."""
    if mat2.op == "call_function" and mat2.args:
        if mat2.target is aten.permute.default and list(mat2.args[1]) == [1, 0]:
            return mat2.args[0], True
        if mat2.target is aten.t.default or (mat2.target is aten.transpose.int
                                            and sorted(int(d) % 2 for d in mat2.args[1:3]) == [0, 1]):
            src = mat2.args[0]
            if isinstance(src, Node) and getattr(_val(src), "ndim", 0) == 2:
                return src, True
    return mat2, False


class _Gemm:
    """One ``mm``/``addmm`` candidate: its node, activation, weight (N, K) or mat2 (K, N), bias."""

    def __init__(self, node: Node) -> None:
        self.node = node
        if node.target is aten.addmm.default:
            self.bias, self.act, mat2 = node.args[0], node.args[1], node.args[2]
        else:
            self.bias, self.act, mat2 = None, node.args[0], node.args[1]
        self.mat2 = mat2
        self.weight, self.is_nk = _weight_of(mat2)
        v = _val(self.act)
        self.key = (_through(self.act, RESHAPES), tuple(str(s) for s in v.shape)) if v is not None else None
        self.root = _through(self.act, VIEWS)

    def why_not(self) -> str | None:
        """None if the op can express this GEMM (2-D activation, (N,) bias or none, default beta/alpha),
        else the reason in plain words (for the near-miss when other GEMMs read the same activation)."""
        node = self.node
        scaled = {k: node.kwargs[k] for k in ("beta", "alpha") if node.kwargs.get(k, 1) != 1}
        if scaled:
            return ("addmm with " + ", ".join(f"{k}={v}" for k, v in scaled.items())
                    + ": merged_gemm computes x @ w.T + bias (beta = alpha = 1)")
        a, m2 = _val(self.act), _val(self.mat2)
        if not (isinstance(a, torch.Tensor) and isinstance(m2, torch.Tensor) and a.ndim == 2 and m2.ndim == 2):
            return "not a 2-D (M, K) x (K, N) product"
        if self.bias is not None:
            b = _val(self.bias)
            if not (isinstance(b, torch.Tensor) and b.ndim == 1 and statically_known_true(b.shape[0] == m2.shape[1])):
                shape = tuple(b.shape) if isinstance(b, torch.Tensor) else b
                return (f"addmm bias of shape {shape} broadcast to (M, N={m2.shape[1]}): merged_gemm takes a "
                        f"bias of shape (N,)")
        if not isinstance(_val(node), torch.Tensor):
            return "no tensor output"
        return None

    def dtypes(self) -> tuple:
        return (_val(self.act).dtype, _val(self.mat2).dtype,
                None if self.bias is None else _val(self.bias).dtype, _val(self.node).dtype)

    def n(self) -> Any:
        return _val(self.mat2).shape[1]


def _var_ranges(val: Any) -> Any:
    mode = getattr(val, "fake_mode", None)
    env = getattr(mode, "shape_env", None)
    return getattr(env, "var_to_range", None)


def _chunks(items: list, size: int) -> list[list]:
    """Split ``items`` into ceil(len / size) chunks of balanced length (5 -> 3 + 2, not 4 + 1)."""
    k = -(-len(items) // size)
    base, extra = divmod(len(items), k)
    out, i = [], 0
    for j in range(k):
        step = base + (1 if j < extra else 0)
        out.append(items[i:i + step])
        i += step
    return out


def bucket_text(d: Any) -> str:
    """``M=8`` for a static M, ``M=s0 (<= 32)`` for a bounded symbolic one (a ``gemm_buckets.Decision``): the
    bucket as the match notes of this pass and of norm_gemm write it."""
    return f"M={d.m}" + ("" if d.m == str(d.m_upper) else f" (<= {d.m_upper})")


def _not_a_bucket(d: Any) -> str:
    """The near-miss text for M outside a decode bucket, with what would make it one."""
    why = d.reason.replace(": tuned", "")
    if why.startswith("override off"):
        why = ("decode buckets off (aten_gemm_max_m=0, the level-2 GEMM override's limit, is also this pass's "
               "small-M limit)")
    elif d.m_upper is None:  # min=1 too: torch 2.13's mark_dynamic(x, 0, max=32) alone fails in Dynamo
        why += " (bound it, e.g. torch._dynamo.mark_dynamic(x, 0, min=1, max=32))"
    return f"not a decode bucket: {why}"


def _reads(g: _Gemm, outputs: set, floor: int, order: dict) -> bool:
    """Whether ``g``'s activation, weight or bias is computed from one of ``outputs`` (nodes at >= floor)."""
    stack = [n for n in (g.act, g.weight, g.bias) if isinstance(n, Node)]
    seen: set[Node] = set()
    while stack:
        n = stack.pop()
        if n in outputs:
            return True
        if n in seen or order.get(n, -1) < floor:
            continue
        seen.add(n)
        stack.extend(n.all_input_nodes)
    return False


def _hoist(inputs: list, gemms: list[_Gemm], hi: int, order: dict) -> bool:
    """Move the computation of the group's late inputs before the first use of any member's output.

    A weight cast or built inside each ``Linear.forward`` (``F.linear(x, self.weight.to(x.dtype))``, autocast,
    a LoRA-merged ``w + a @ b``) is computed after the previous projection's output is already used (HF views
    q before k_proj runs). Those nodes (every ancestor of an input placed at or after position ``hi``) move,
    in their order, just before the node at ``hi``, if none of them is a member GEMM, reads a member's output
    (a real dependency), has side effects or draws random numbers. Returns whether it moved them; ``order``
    is refreshed when it did.
    """
    first_use = next(n for n, i in order.items() if i == hi)
    members = {g.node for g in gemms}
    outputs_read = {u for g in gemms for u in g.node.users}
    late: set[Node] = set()
    stack = [n for n in inputs if isinstance(n, Node) and order.get(n, -1) >= hi]
    while stack:
        n = stack.pop()
        if n in late:
            continue
        if (n in members or n in outputs_read or n.op != "call_function" or n.is_impure()
                or torch.Tag.nondeterministic_seeded in getattr(n.target, "tags", ())):
            return False
        late.add(n)
        stack.extend(a for a in n.all_input_nodes if order.get(a, -1) >= hi)
    for n in sorted(late, key=order.__getitem__):
        first_use.prepend(n)
    order.clear()
    order.update((n, i) for i, n in enumerate(first_use.graph.nodes))
    return True


class GemmMergePass:
    """The decode GEMM merge pass (see module docstring)."""

    name = "gemm_merge"
    ops = ops_of(name)
    #: Not switched on by a forced global ``provider=`` (the CPU tests and example force ``"reference"``):
    #: only the CUDA default, ``passes={"gemm_merge": True}`` or ``providers={"merged_gemm": ...}``.
    enabled_by_provider = False

    def __call__(self, graph: Graph, ctx: PassContext) -> None:
        from ..buckets import decide

        order = {n: i for i, n in enumerate(graph.nodes)}
        groups: dict[Any, list[_Gemm]] = {}
        by_root: dict[Any, list[_Gemm]] = {}
        refused: dict[Any, list[tuple[_Gemm, str]]] = {}
        for node in graph.nodes:
            if node.op != "call_function" or node.target not in (aten.mm.default, aten.addmm.default):
                continue
            g = _Gemm(node)
            if g.key is None:
                continue
            why = g.why_not()
            if why is not None:
                refused.setdefault(g.key, []).append((g, why))
                continue
            groups.setdefault(g.key, []).append(g)
            by_root.setdefault(g.root, []).append(g)
        self._report_other_views(groups, by_root, ctx)
        for key, rest in refused.items():  # GEMMs of a shared activation the op cannot express: not silent
            if len(rest) + len(groups.get(key, ())) < 2:
                continue
            act = _val(rest[0][0].act)
            d = decide("mm", act.shape[0], ctx.options.aten_gemm_max_m, _var_ranges(act))
            for g, why in rest:
                if not d.aten_only:
                    why = _not_a_bucket(d)
                ctx.near_miss(g.node.name, NearMiss(self.name, WHAT, why, location_of(g.node)))
        singles = []
        for gemms in groups.values():
            if len(gemms) < 2:  # alone of its activation among the GEMMs the op can express (a refused
                singles.append(gemms[0])  # addmm next to it is reported above; this one is still a single)
                continue
            act = _val(gemms[0].act)
            where = location_of(gemms[0].node)
            anchor = gemms[0].node.name
            d = decide("mm", act.shape[0], ctx.options.aten_gemm_max_m, _var_ranges(act))
            if not d.aten_only:
                ctx.near_miss(anchor, NearMiss(self.name, WHAT, f"{len(gemms)} GEMMs of one activation, "
                                               + _not_a_bucket(d), where))
                continue
            dt = act.dtype
            same = [g for g in gemms if all(t in (None, dt) for t in g.dtypes())]
            for g in gemms:
                if g not in same:
                    a, w, b, o = (dtype_name_of(t) for t in g.dtypes())
                    ctx.near_miss(g.node.name, NearMiss(self.name, WHAT, f"different dtypes: activation {a}, "
                                                        f"weight {w}, bias {b}, out {o} (the group is {a})",
                                                        location_of(g.node)))
            if dt not in DTYPES:
                ctx.near_miss(anchor, NearMiss(self.name, WHAT, f"{len(gemms)} GEMMs of one {dtype_name(act)} "
                                               "activation: merged_gemm takes float16/bfloat16/float32", where))
                continue
            if len(same) < 2:
                continue
            for chunk in _chunks(same, MAX_WEIGHTS):
                if len(chunk) >= 2:
                    self._merge(graph, ctx, chunk, order, d)
        for g in singles:
            self._single(graph, ctx, g, order)

    def _single(self, graph: Graph, ctx: PassContext, g: _Gemm, order: dict) -> None:
        """A lone GEMM of its activation in a decode bucket, offered to the providers as a one-weight
        ``merged_gemm``: taken only where a provider's measurements say it beats cuBLAS (the Triton provider's
        table: ``measured_single``); a refusal is reported only when it was measured (cuBLAS won, or ours won but
        another limit refused it), so unmeasured projections stay silent. Outside a bucket or of another dtype:
        silent too."""
        from ..buckets import decide

        act = _val(g.act)
        d = decide("mm", act.shape[0], ctx.options.aten_gemm_max_m, _var_ranges(act))
        if d.aten_only and act.dtype in DTYPES and all(t in (None, act.dtype) for t in g.dtypes()):
            self._merge(graph, ctx, [g], order, d, single=True)

    def _report_other_views(self, groups, by_root, ctx) -> None:
        """Near-miss: GEMMs whose activations are different views/slices of one tensor."""
        for root, gemms in by_root.items():
            keys = {g.key for g in gemms}
            if len(keys) < 2 or root is None:
                continue
            dtypes = {_val(g.act).dtype for g in gemms}
            for g in gemms:
                if len(groups.get(g.key, ())) != 1:
                    continue
                act = _val(g.act)
                if len(dtypes) > 1:
                    why = (f"different dtypes: reads {getattr(root, 'name', root)} cast to {dtype_name(act)}, "
                           f"other GEMMs of it read {'/'.join(sorted(dtype_name_of(d) for d in dtypes - {act.dtype}))}")
                else:
                    why = (f"reads {getattr(root, 'name', root)} through another view or slice than the other "
                           f"GEMMs of it (activation shape {tuple(act.shape)}): not the same (M, K) activation")
                ctx.near_miss(g.node.name, NearMiss(self.name, WHAT, why, location_of(g.node)), overwrite=False)

    def _merge(self, graph: Graph, ctx: PassContext, gemms: list[_Gemm], order: dict, decision: Any,
               single: bool = False) -> None:
        # Re-read each GEMM from its (still live) node: an earlier merge may have replaced its activation,
        # weight or bias (the output of a GEMM merged before, now a getitem) and erased the node it read.
        gemms = [_Gemm(g.node) for g in gemms]
        first = gemms[0]
        where, anchor = location_of(first.node), first.node.name
        x = first.act
        inputs = [x] + [g.weight for g in gemms] + [g.bias for g in gemms if g.bias is not None]
        users = [u for g in gemms for u in g.node.users]
        lo = max((order.get(n, -1) for n in inputs if isinstance(n, Node)), default=-1)
        hi = min((order.get(u, 1 << 60) for u in users), default=1 << 60)
        if lo >= hi and (single or not _hoist(inputs, gemms, hi, order)):
            if single:  # cannot happen for one mm node (its inputs precede it, its users follow it)
                return
            outs = {g.node for g in gemms}
            floor = min(order[g.node] for g in gemms)
            late = [g for g in gemms if _reads(g, outs, floor, order)]
            rest = [g for g in gemms if g not in late]
            for g in late:
                ctx.near_miss(g.node.name, NearMiss(self.name, WHAT, "an input of this GEMM is computed from "
                                                    "another GEMM's output: merging would reorder the graph",
                                                    location_of(g.node)))
            if not late:
                ctx.near_miss(anchor, NearMiss(self.name, WHAT, "an input of one GEMM is computed, after another "
                                               "GEMM's output is used, by an op that cannot move earlier (side "
                                               "effects or random numbers): merging would reorder the graph",
                                               where))
            if late and len(rest) >= 2:  # the GEMMs that do not depend on the others still merge
                self._merge(graph, ctx, rest, order, decision)
            return
        weights_val = [(_val(g.weight) if g.is_nk else _val(g.mat2).t()) for g in gemms]
        biases_val = [None if g.bias is None else _val(g.bias) for g in gemms]
        spec = merged_gemm_spec(_val(x), weights_val, biases_val, decision.m_upper)
        choice = ctx.choose("merged_gemm", spec)
        ns = "/".join(str(w.shape[0]) for w in weights_val)  # symbolic N as its expression, not None
        if choice.provider is None:
            if single:  # reported only where the table measured it (cuBLAS won, or another limit refused it)
                if any_of(choice.reasons, MEASURED_SLOWER, MEASURED_REFUSED):
                    ctx.near_miss(anchor, NearMiss(self.name, WHAT_SINGLE, f"K={_val(x).shape[1]} N {ns}: "
                                                   f"{choice.why_not}", where))
                return
            ctx.near_miss(anchor, NearMiss(self.name, WHAT, f"{len(gemms)} GEMMs (N {ns}): {choice.why_not}",
                                           where))
            return
        at = max((n for n in inputs if isinstance(n, Node)), key=lambda n: order.get(n, -1), default=None)
        # inserting_before(at.next), not inserting_after(at): the latter would put each new node before the last
        ins = graph.inserting_before(at.next if at is not None else first.node)
        with ins:
            ws = []
            for g in gemms:
                if g.is_nk:
                    ws.append(g.weight)
                else:  # a (K, N) tensor: hand the op its (N, K) view
                    t = graph.call_function(aten.permute.default, (g.mat2, [1, 0]))
                    t.meta["val"] = fake_eval(aten.permute.default, (g.mat2, [1, 0]))
                    ws.append(t)
            merged = graph.call_function(torch.ops.rocm_fused.merged_gemm.default,
                                         (x, ws, [g.bias for g in gemms], choice.provider))
            merged.meta["val"] = [g.node.meta["val"] for g in gemms]
            outs = []
            for i, g in enumerate(gemms):
                get = graph.call_function(operator.getitem, (merged, i))
                get.meta["val"] = g.node.meta["val"]
                outs.append(get)
        for key in ("stack_trace", "nn_module_stack", "source_fn_stack"):
            if key in first.node.meta:
                merged.meta[key] = first.node.meta[key]
        for g, get in zip(gemms, outs, strict=True):
            for key in ("stack_trace", "nn_module_stack"):
                if key in g.node.meta:
                    get.meta[key] = g.node.meta[key]
            g.node.replace_all_uses_with(get)
            graph.erase_node(g.node)
        order.clear()  # the graph changed: positions for the next group
        order.update((n, i) for i, n in enumerate(graph.nodes))
        m = bucket_text(decision)
        shape = f"{decision.m}x{_val(x).shape[1]}->{ns}"
        ctx.matched(anchor, MatchRecord(
            self.name, "merged_gemm", choice.provider, shape, dtype_name(_val(x)), where,
            note=("single GEMM" if single else f"{len(gemms)} GEMMs merged") + f", N {ns}, bucket {m}"
                 + (f", bias {sum(g.bias is not None for g in gemms)}/{len(gemms)}"
                    if any(g.bias is not None for g in gemms) else "")
                 + (f"; {choice.why_not}" if choice.reasons else "")))


def dtype_name_of(dt: Any) -> str:
    """``bfloat16`` for ``torch.bfloat16``, ``none`` for None."""
    return "none" if dt is None else str(dt).replace("torch.", "")
