"""A q/k/v GEMM and the RoPE + K/V cache writes it feeds -> ``rocm_fused::qkv_rope_kv`` (issue 31: one launch).

Runs last (post-grad graph) and folds two of our own ops, never raw eager code: a ``rocm_fused::rope_kv_write``
(written by the ``rope_kv`` pass) whose q, k and v are the three outputs of one ``rocm_fused::merged_gemm`` or
``rocm_fused::rms_norm_gemm`` (written by ``gemm_merge`` / ``norm_gemm``), each reaching it through views only.
What it checks is the head split every attention spells its projections with (HF ``q_proj(x).view(B, S, -1,
D).transpose(1, 2)``, gpt-fast's ``view(B, S, H, D)`` then ``transpose(1, 2)`` after its RoPE): the fake value
``rope_kv_write`` reads is the (M, N) GEMM output reinterpreted as (B, S, H, D) and permuted to (B, H, S, D), with
S the positions' length and M = B * S (:func:`head_split`). Any chain of view ops with that net layout is taken.

The rewrite: the op goes where the ``rope_kv_write`` was (every input of the GEMM is defined before that); the
write's readers read the op's q output, the readers of the norm's residual sum (``rms_norm_gemm``'s last output)
read the op's, and the write, the views, the getitems and the GEMM go.

Left alone, each a near-miss with its reason (at the write): q, k or v that is not a view or slice of a GEMM output
(Qwen3's per-head q/k RMSNorm sits between the projection and the RoPE; a ``select`` / ``unbind`` or an index); the
three from different GEMMs (separate GEMMs that ``gemm_merge`` did not merge); an ATen ``addmm`` the op cannot
express (``beta`` / ``alpha`` other than 1, a bias that is not (N,): ``gemm_merge``'s ``Gemm.why_not``) or a (K, N)
weight; a projection or view also read elsewhere (the op never stores the unrotated projections); a head split of
another layout; a reader of the residual sum before the write (the fold would move the norm past it); what no
provider takes.

Off on every platform until measured on a GPU (``policy.PASS_DEFAULTS``); not switched on by a forced global
``provider=``: ``options={"passes": {"qkv_rope_kv": True}}`` with ``rope_kv`` and ``gemm_merge`` (and ``norm_gemm``
for the norm) on.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Iterable
from typing import Any

import torch
from torch.fx import Graph, Node

from ..buckets import m_upper_bound
from ..ops.qkv_rope_kv import qkv_rope_kv_spec
from ..platform import Choice
from ..registry import ops_of
from ..report import Match as MatchRecord
from ..report import describe, location_of
from .context import PassContext
from .contract import Candidate, Miss, RewritePass, choose_or_miss
from .fx import RESHAPES, insert_call, is_call, same, val
from .gemm_merge import var_ranges
from .gemm_merge.group import Gemm

aten = torch.ops.aten
WHAT = "q/k/v GEMM -> RoPE + K/V cache writes"
_ROPE_KV = torch.ops.rocm_fused.rope_kv_write.default
_MERGED = torch.ops.rocm_fused.merged_gemm.default
_NORMED = torch.ops.rocm_fused.rms_norm_gemm.default
#: The view ops a head split is spelled with (post-grad): reshapes, permutes / transposes, unit dims.
VIEWS = RESHAPES | {aten.permute.default, aten.transpose.int, aten.unsqueeze.default, aten.squeeze.dim,
                    aten.squeeze.dims, aten.squeeze.default}


def head_split(t: Any, m: Any, s: Any, d: Any, row: Any) -> int | None:
    """The column offset at which fake tensor ``t`` (B, H, S, D) reads an (M, ``row``) contiguous GEMM output viewed
    as (B, S, H*D) columns and split into (B, H, S, D) heads (strides (S*row, D, row, 1) where a size is not 1, M =
    B * S, the H*D columns inside the row); None when it is another layout."""
    if t is None or t.ndim != 4:
        return None
    b, h, s_, d_ = t.shape
    off = t.storage_offset()
    if not (same(s_, s) and same(d_, d) and same(b * s_, m)) or not (isinstance(off, int) and 0 <= off):
        return None
    want = (s_ * row, d_, row, 1)
    if not all(same(size, 1) or same(st, w) for size, st, w in zip(t.shape, t.stride(), want, strict=True)):
        return None
    return off if same(off + h * d_ <= row, True) else None


@dataclasses.dataclass
class Source:
    """Where a q, k or v of the write comes from: the GEMM node (a merged / norm GEMM, or ATen's ``mm`` / ``addmm``),
    its output index, the (M, N) output node, and the views / slices from the write's argument up to that output
    (the getitem included; ATen's GEMM itself not)."""

    gemm: Node
    index: int
    out: Node
    chain: list[Node]
    why: str | None = None  #: why an ATen GEMM cannot be the op's (scaled addmm, broadcast bias, (K, N) weight)


def _source(n: Any) -> Source | None:
    """The :class:`Source` of ``n`` through :data:`VIEWS` and slices, or None."""
    chain = []
    while is_call(n, *VIEWS, aten.slice.Tensor):
        chain.append(n)
        n = n.args[0]
    if is_call(n, operator.getitem) and is_call(n.args[0], _MERGED, _NORMED):
        return Source(n.args[0], n.args[1], n, [*chain, n])
    if is_call(n, aten.mm.default, aten.addmm.default):  # gpt-fast's wqkv, split after
        g = Gemm(n)
        why = g.why_not() or (None if g.is_nk else "its weight is a (K, N) matrix, not an (N, K) weight transposed")
        return Source(n, 0, n, chain, why)
    return None


@dataclasses.dataclass
class Fold:
    """The fold: the write, the GEMM, the new op's (x, residual, norm weight, eps, offset), the q/k/v weights and
    biases as (node, first row, rows) slices of the GEMM's, every view and getitem that goes, and the sum's getitem
    (``rms_norm_gemm`` with a residual)."""

    write: Node
    gemm: Node
    nargs: tuple
    weights: list[tuple[Any, int, int]]
    biases: list[tuple[Any, int, int] | None]
    chains: list[Node]
    s_get: list[Node]
    m_upper: int | None


def _gemm_args(gemm: Node) -> tuple[tuple, list[Any], list[Any]]:
    """The new op's norm arguments and the GEMM's weights and biases (a list per output)."""
    if gemm.target is _NORMED:
        return tuple(gemm.args[:5]), list(gemm.args[5]), list(gemm.args[6])
    if gemm.target is _MERGED:
        return (gemm.args[0], None, None, None, 0.0), list(gemm.args[1]), list(gemm.args[2])
    g = Gemm(gemm)
    return (g.act, None, None, None, 0.0), [g.weight], [g.bias]


def read_fold(graph: Graph, write: Node) -> Fold:
    """The checked fold of ``write`` (the module docstring's list).

    Raises:
        Miss: the check that failed.
    """
    q, k, v = write.args[:3]
    kc, pos = write.args[5], write.args[7]
    found = [_source(t) for t in (q, k, v)]
    for name, f in zip("qkv", found, strict=True):
        if f is None:
            raise Miss(f"{name} is not a view or slice of a q/k/v GEMM output (merged_gemm / rms_norm_gemm / mm): "
                       "something else sits between the projection and the RoPE (e.g. a per-head q/k RMSNorm, a "
                       "select or an index)")
        if f.why is not None:
            raise Miss(f"{name}'s GEMM: {f.why}")
    gemm = found[0].gemm
    if any(f.gemm is not gemm for f in found):
        raise Miss("q, k and v come from different GEMMs (the fold takes one q/k/v GEMM)")
    nargs, weights, biases = _gemm_args(gemm)
    s_get = [u for u in gemm.users if u.target is operator.getitem and u.args[1] == len(weights)]
    chains = {c for f in found for c in f.chain}
    for name, f in zip("qkv", found, strict=True):  # every view / getitem read only towards the write
        for c in f.chain:
            other = [u for u in c.users if u not in chains and u is not write]
            if other:
                raise Miss(f"the {name} projection is also read by {', '.join(sorted(u.name for u in other))} (the op "
                           "never stores it)")
    other = [u for u in gemm.users if u not in chains and u not in s_get]
    if other:
        raise Miss(f"the GEMM's outputs are also read by {', '.join(sorted(u.name for u in other))} (the op never "
                   "stores them)")
    s, d = val(pos).shape[0], val(kc).shape[-1]
    slices = []
    for name, f, t in zip("qkv", found, (q, k, v), strict=True):
        ov = val(f.out)
        off = None if ov is None or ov.ndim != 2 else head_split(val(t), ov.shape[0], s, d, ov.shape[1])
        if off is None:
            raise Miss(f"{name} is not the (B*S, H*D) projection split into (B, H, S, D) heads (another layout)")
        slices.append((f.index, off, val(t).shape[1] * d))
    order = {n: i for i, n in enumerate(graph.nodes)}
    if any(order[u] < order[write] for g in s_get for u in g.users):
        raise Miss("the residual sum is read before the RoPE + cache write (folding would move the norm past it)")
    xv = val(found[0].out)
    return Fold(write, gemm, nargs, [(weights[i], o, n) for i, o, n in slices],
                [None if biases[i] is None else (biases[i], o, n) for i, o, n in slices],
                sorted(chains, key=order.__getitem__, reverse=True), s_get, m_upper_bound(xv.shape[0], var_ranges(xv)))


def _rows_val(t: tuple[Any, int, int]) -> Any:
    """The fake value of rows [first, first + n) of a weight or bias node."""
    node, first, n = t
    return val(node)[first:first + n]


class QkvRoPEKVPass(RewritePass):
    """The q/k/v GEMM + RoPE + K/V cache write fold (see module docstring)."""

    name = "qkv_rope_kv"
    ops = ops_of(name)
    #: As gemm_merge / rope_kv: only its own name or its op's provider turn it on (not a forced global provider).
    enabled_by_provider = False

    def find(self, graph: Graph, ctx: PassContext) -> Iterable[Candidate]:
        """Every ``rope_kv_write`` (``read`` checks where its q, k, v come from)."""
        return [Candidate(n, WHAT) for n in graph.find_nodes(op="call_function", target=_ROPE_KV)]

    def read(self, graph: Graph, ctx: PassContext, cand: Candidate) -> Fold:
        """The GEMM, the views and the sum (:func:`read_fold`)."""
        return read_fold(graph, cand.anchor)

    def gate(self, graph: Graph, ctx: PassContext, cand: Candidate, params: Fold) -> Choice:
        """The provider that takes the fold's spec (``ops.qkv_rope_kv.qkv_rope_kv_spec``).

        Raises:
            Miss: no provider takes it, or shapes that do not split into heads.
        """
        w = params.write
        cos, rd, inter, half = w.args[3], w.args[8], w.args[9], w.args[10]
        x, res, nw, eps, offset = params.nargs
        try:
            spec = qkv_rope_kv_spec(val(x), val(res), val(nw), eps is not None, float(offset),
                                    [_rows_val(t) for t in params.weights],
                                    [None if b is None else _rows_val(b) for b in params.biases], val(cos),
                                    val(w.args[5]), val(w.args[7]), rd, inter, half, params.m_upper)
        except ValueError as e:
            raise Miss(str(e)) from None
        return choose_or_miss(ctx, "qkv_rope_kv", spec)

    @staticmethod
    def _rows(graph: Graph, before: Node, t: tuple[Any, int, int]) -> Any:
        """Rows [first, first + n) of a weight or bias node (the node itself when that is all of it)."""
        node, first, n = t
        if first == 0 and same(val(node).shape[0], n):
            return node
        return insert_call(graph, before, aten.slice.Tensor, (node, 0, first, first + n), like=before)

    def emit(self, graph: Graph, ctx: PassContext, cand: Candidate, params: Fold, choice: Choice) -> MatchRecord:
        """Insert the op at the write, move the write's and the sum's readers to its outputs, drop the rest."""
        p, w = params, params.write
        cos, sin, kc, vc, pos, rd, inter, half = w.args[3:11]
        weights = [self._rows(graph, w, t) for t in p.weights]
        biases = [None if t is None else self._rows(graph, w, t) for t in p.biases]
        op = insert_call(graph, w, torch.ops.rocm_fused.qkv_rope_kv.default,
                         (*p.nargs, weights, biases, cos, sin, kc, vc, pos, rd, inter, half, choice.provider),
                         like=w)
        q_out = insert_call(graph, w, operator.getitem, (op, 0), like=w)
        w.replace_all_uses_with(q_out)
        for g in p.s_get:
            g.replace_all_uses_with(insert_call(graph, w, operator.getitem, (op, 1), like=g))
            graph.erase_node(g)
        graph.erase_node(w)
        for c in p.chains:  # views and getitems, from the write up: each now without readers
            if not c.users:
                graph.erase_node(c)
        gemm_at = location_of(p.gemm)
        if not p.gemm.users:
            graph.erase_node(p.gemm)
        shape, dtype = describe(val(q_out))
        what = "RMSNorm + " if p.nargs[3] is not None else ""
        note = (f"{what}q/k/v GEMM (at {gemm_at}) + q/k RoPE + K/V writes into caches {tuple(val(kc).shape)} in one "
                "op")
        return MatchRecord(self.name, "qkv_rope_kv", choice.provider, shape, dtype, location_of(w),
                           "; ".join([note, *choice.reasons]))
