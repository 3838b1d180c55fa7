"""The GEMMs of one activation, grouped: each ``mm`` / ``addmm`` read as (activation, weight, bias), grouped by
the (M, K) activation it reads (one node, through reshapes, one shape), and turned into the pass's candidates
in the order their outcomes are reported (:func:`candidates`).

A candidate is a merge (a chunk of at most ``MAX_WEIGHTS`` GEMMs of one group), a single GEMM offered as a
one-weight ``merged_gemm``, or a GEMM already refused here: the near-miss (a :class:`Miss`) is its data.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch.fx import Graph, Node

from ...ops.gemm_merge import DTYPES, MAX_WEIGHTS
from ...report import dtype_name
from ..context import PassContext
from ..contract import Candidate, Miss
from ..fx import CONVERT, RESHAPES, is_call, known_equal, through, val

aten = torch.ops.aten

#: Views/slices/casts through which "the same tensor read differently" is found (near-miss reporting only).
#: Not transposes: a GEMM of a transposed tensor is no projection of it (a training backward's weight
#: gradient ``permute(grad) @ x`` next to ``grad @ w``), and reporting every such pair would be noise.
VIEWS = RESHAPES | frozenset({
    CONVERT, aten._to_copy.default, aten.slice.Tensor, aten.select.int, aten.clone.default, aten.alias.default,
    aten.expand.default, aten.squeeze.dim, aten.unsqueeze.default, aten.narrow.default})
WHAT = "GEMMs of one activation"
WHAT_SINGLE = "a single small-M GEMM"


def _weight_of(mat2: Node) -> tuple[Node, bool]:
    """(node, is_nk): the (N, K) weight when ``mat2`` is its transpose, else ``mat2`` itself (K, N)."""
    if mat2.op == "call_function" and mat2.args:
        if mat2.target is aten.permute.default and list(mat2.args[1]) == [1, 0]:
            return mat2.args[0], True
        if mat2.target is aten.t.default or (mat2.target is aten.transpose.int
                                            and sorted(int(d) % 2 for d in mat2.args[1:3]) == [0, 1]):
            src = mat2.args[0]
            if isinstance(src, Node) and getattr(val(src), "ndim", 0) == 2:
                return src, True
    return mat2, False


class Gemm:
    """One ``mm``/``addmm`` candidate: its node, activation, weight (N, K) or mat2 (K, N), bias."""

    def __init__(self, node: Node) -> None:
        self.node = node
        if node.target is aten.addmm.default:
            self.bias, self.act, mat2 = node.args[0], node.args[1], node.args[2]
        else:
            self.bias, self.act, mat2 = None, node.args[0], node.args[1]
        self.mat2 = mat2
        self.weight, self.is_nk = _weight_of(mat2)
        v = val(self.act)
        self.key = (through(self.act, RESHAPES), tuple(str(s) for s in v.shape)) if v is not None else None
        self.root = through(self.act, VIEWS)

    def why_not(self) -> str | None:
        """None if the op can express this GEMM (2-D activation, (N,) bias or none, default beta/alpha),
        else the reason in plain words (for the near-miss when other GEMMs read the same activation)."""
        node = self.node
        scaled = {k: node.kwargs[k] for k in ("beta", "alpha") if node.kwargs.get(k, 1) != 1}
        if scaled:
            return ("addmm with " + ", ".join(f"{k}={v}" for k, v in scaled.items())
                    + ": merged_gemm computes x @ w.T + bias (beta = alpha = 1)")
        a, m2 = val(self.act), val(self.mat2)
        if not (isinstance(a, torch.Tensor) and isinstance(m2, torch.Tensor) and a.ndim == 2 and m2.ndim == 2):
            return "not a 2-D (M, K) x (K, N) product"
        if self.bias is not None:
            b = val(self.bias)
            if not (isinstance(b, torch.Tensor) and b.ndim == 1 and known_equal(b.shape[0], m2.shape[1])):
                shape = tuple(b.shape) if isinstance(b, torch.Tensor) else b
                return (f"addmm bias of shape {shape} broadcast to (M, N={m2.shape[1]}): merged_gemm takes a "
                        f"bias of shape (N,)")
        if not isinstance(val(node), torch.Tensor):
            return "no tensor output"
        return None

    def dtypes(self) -> tuple:
        return (val(self.act).dtype, val(self.mat2).dtype,
                None if self.bias is None else val(self.bias).dtype, val(self.node).dtype)


@dataclasses.dataclass
class Merge:
    """A merge candidate's data: its GEMMs (in graph order), the decode-bucket decision of their activation
    (``buckets.decide``), and whether it is a single GEMM offered alone."""

    gemms: list[Gemm]
    decision: Any
    single: bool = False


def var_ranges(v: Any) -> Any:
    """The ShapeEnv's value ranges of the symbols in fake tensor ``v`` (None for a static tensor)."""
    mode = getattr(v, "fake_mode", None)
    env = getattr(mode, "shape_env", None)
    return getattr(env, "var_to_range", None)


def chunks(items: list, size: int) -> list[list]:
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


def dtype_name_of(dt: Any) -> str:
    """``bfloat16`` for ``torch.bfloat16``, ``none`` for None."""
    return "none" if dt is None else str(dt).replace("torch.", "")


def _refused(g: Gemm, why: str, overwrite: bool = True) -> Candidate:
    return Candidate(g.node, WHAT, data=Miss(why, overwrite=overwrite))


def _other_views(groups: dict, by_root: dict) -> list[Candidate]:
    """Near-misses: GEMMs whose activations are different views/slices of one tensor."""
    out = []
    for root, gemms in by_root.items():
        keys = {g.key for g in gemms}
        if len(keys) < 2 or root is None:
            continue
        dtypes = {val(g.act).dtype for g in gemms}
        for g in gemms:
            if len(groups.get(g.key, ())) != 1:
                continue
            act = val(g.act)
            if len(dtypes) > 1:
                why = (f"different dtypes: reads {getattr(root, 'name', root)} cast to {dtype_name(act)}, "
                       f"other GEMMs of it read {'/'.join(sorted(dtype_name_of(d) for d in dtypes - {act.dtype}))}")
            else:
                why = (f"reads {getattr(root, 'name', root)} through another view or slice than the other "
                       f"GEMMs of it (activation shape {tuple(act.shape)}): not the same (M, K) activation")
            out.append(_refused(g, why, overwrite=False))
    return out


def candidates(graph: Graph, ctx: PassContext) -> list[Candidate]:
    """Every GEMM outcome of the graph in report order: the refusals the grouping decides (other views of one
    tensor, GEMMs the op cannot express, M outside a bucket, mixed or unsupported dtypes), then per group its
    chunks, then the single GEMMs."""
    from ...buckets import decide

    groups: dict[Any, list[Gemm]] = {}
    by_root: dict[Any, list[Gemm]] = {}
    refused: dict[Any, list[tuple[Gemm, str]]] = {}
    for node in graph.nodes:
        if not is_call(node, aten.mm.default, aten.addmm.default):
            continue
        g = Gemm(node)
        if g.key is None:
            continue
        why = g.why_not()
        if why is not None:
            refused.setdefault(g.key, []).append((g, why))
            continue
        groups.setdefault(g.key, []).append(g)
        by_root.setdefault(g.root, []).append(g)
    out = _other_views(groups, by_root)
    for key, rest in refused.items():  # GEMMs of a shared activation the op cannot express: not silent
        if len(rest) + len(groups.get(key, ())) < 2:
            continue
        act = val(rest[0][0].act)
        d = decide("mm", act.shape[0], ctx.options.aten_gemm_max_m, var_ranges(act))
        out += [_refused(g, why if d.aten_only else _not_a_bucket(d)) for g, why in rest]
    singles = []
    for gemms in groups.values():
        if len(gemms) < 2:  # alone of its activation among the GEMMs the op can express (a refused
            singles.append(gemms[0])  # addmm next to it is reported above; this one is still a single)
            continue
        act = val(gemms[0].act)
        d = decide("mm", act.shape[0], ctx.options.aten_gemm_max_m, var_ranges(act))
        if not d.aten_only:
            out.append(_refused(gemms[0], f"{len(gemms)} GEMMs of one activation, " + _not_a_bucket(d)))
            continue
        dt = act.dtype
        same = [g for g in gemms if all(t in (None, dt) for t in g.dtypes())]
        for g in gemms:
            if g not in same:
                a, w, b, o = (dtype_name_of(t) for t in g.dtypes())
                out.append(_refused(g, f"different dtypes: activation {a}, weight {w}, bias {b}, out {o} (the "
                                       f"group is {a})"))
        if dt not in DTYPES:
            out.append(_refused(gemms[0], f"{len(gemms)} GEMMs of one {dtype_name(act)} activation: merged_gemm "
                                          "takes float16/bfloat16/float32"))
            continue
        if len(same) < 2:
            continue
        out += [Candidate(c[0].node, WHAT, data=Merge(c, d)) for c in chunks(same, MAX_WEIGHTS) if len(c) >= 2]
    for g in singles:  # a lone GEMM in a bucket, of one dtype: offered alone; outside one or mixed: silent
        act = val(g.act)
        d = decide("mm", act.shape[0], ctx.options.aten_gemm_max_m, var_ranges(act))
        if d.aten_only and act.dtype in DTYPES and all(t in (None, act.dtype) for t in g.dtypes()):
            out.append(Candidate(g.node, WHAT_SINGLE, data=Merge([g], d, single=True)))
    return out
