"""K's RoPE and a decode layer's K/V cache writes -> ``rocm_fused::rope_kv_write`` (issue 31: one launch, not three).

Runs after ``rope`` (post-grad graph) and folds what that pass wrote, never the raw rotation: an
``index_put(k_cache, [None, None, pos], k_rot)`` whose value is the k output (``getitem 1``) of a
``rocm_fused::rope`` node, and an ``index_put(v_cache, [None, None, pos], v)`` with the same ``pos`` node into another
cache, both caches graph inputs that the graph copies the results back into (``copy_(cache, index_put)``: the
functional form of the in-place write at this point of the post-grad graph; Inductor re-inplaces it later). Eager
spellings that end like that: HF ``StaticCache.update``'s ``index_copy_(2, cache_position, k)``
(Llama, Qwen3, ...), gpt-fast ``KVCache.update``'s ``k_cache[:, :, input_pos] = k``. The V write paired with a K
write is the unclaimed one of the same positions nearest to it in graph order (gpt-fast shares ``input_pos`` across
layers; HF computes it per layer).

The rewrite: the op (which mutates both caches in place: ``mutates_args``) goes before the first reader of q's
rotation or of either write's result; every reader of a write's result reads the cache input instead, and the
``copy_`` epilogue, the writes and the rope node go. The op is an ordinary mutating extern node to Inductor's
scheduler, which orders it before every later reader of the caches (tests/test_rope_kv_pass.py compiles and runs
whole decode steps against eager).

Left alone, each a near-miss with its reason (at the K write): a cache that is not a graph input, or one the graph
also reads before the write or writes elsewhere; a write that is not copied back into its input (an out-of-place
``index_put``: nothing is mutated in eager); ``accumulate=True``; positions that are not a 1-D integer tensor; a
cache written along another dim (the (B, max_len, H, D) layout); no V write at the same positions into another
cache, or a V cache of another shape / dtype; a rotated k read by anything besides its write; inputs computed after
the first reader (folding would reorder); what no provider takes. The written value may be k through views that
drop leading size-1 dims (gpt-fast's ``k_cache[:, :, pos] = k`` stores k reshaped to (H, S, D) at batch 1), or
through a permute that keeps the last dim (gpt-fast rotates q and k in (B, S, H, D) and transposes them after):
the op then rotates permuted views of q, k and the tables and q's readers get the inverse permute of its output
(views). A cache write whose value is no rope output is left silently (V writes); when none of the graph's cache
writes is a rope output, each positions node gets one near-miss saying so. Only ``rocm_fused::rope`` outputs are
taken, not ``rope_cached`` (a near-miss). With the rope pass off (as on CUDA and ROCm by default), ``prepare`` runs
the rope pass's discovery on the rotations written into caches (``discover.py``) and ``finish`` gives the rotations
back to every rope node no fold took: such a graph keeps no ``rocm_fused::rope``.

Off on every platform until measured on a GPU (``policy.PASS_DEFAULTS``); not switched on by a forced global
``provider=``: ``options={"passes": {"rope_kv": True}}`` (with the rope pass on or off).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch.fx import Graph

from ...ops.rope_kv import check_args, rope_kv_spec
from ...platform import Choice
from ...registry import ops_of
from ...report import Match as MatchRecord
from ...report import describe, location_of
from ..context import PassContext
from ..contract import Candidate, Miss, RewritePass, choose_or_miss, run_pass
from ..fx import insert_call, is_call, val
from .discover import CacheRoPE, undo
from .read import WHAT, Fold, positions_of, read_fold, source

aten = torch.ops.aten


def _to4(t):
    """A fake tensor with leading size-1 dims up to 4-D."""
    while t.ndim < 4:
        t = t.unsqueeze(0)
    return t


class RoPEKVPass(RewritePass):
    """The RoPE + K/V cache write fold (see module docstring)."""

    name = "rope_kv"
    ops = ops_of(name)
    #: As gemm_merge / glu_gemm: only its own name or its op's provider turn it on (not a forced global provider).
    enabled_by_provider = False

    def prepare(self, graph: Graph, ctx: PassContext) -> None:
        """With the rope pass off, its discovery on the rotations written into caches (:class:`discover.CacheRoPE`)."""
        self._sub = None
        if "rope" not in ctx.will_run:
            self._sub = CacheRoPE()
            run_pass(self._sub, graph, ctx)

    def finish(self, graph: Graph, ctx: PassContext) -> None:
        """The rope nodes :meth:`prepare` wrote and no fold took get their rotations back (:func:`discover.undo`); the
        manager drops what is dead after the last pass."""
        if self._sub is not None:
            undo(graph, self._sub.made)

    def find(self, graph: Graph, ctx: PassContext) -> Iterable[Candidate]:
        """Every K write (a cache write of a rope node's k output) with its V partner (the module docstring's
        pairing); when no cache write of the graph is a rope output, each positions node gets one near-miss."""
        writes = [n for n in graph.nodes if is_call(n, aten.index_put.default)]
        k_writes = [w for w in writes if source(w) is not None]
        v_pool = [w for w in writes if source(w) is None and positions_of(w) is not None]
        order = {n: i for i, n in enumerate(graph.nodes)}
        out, claimed = [], set()
        for kw in k_writes:
            pos = positions_of(kw)
            pool = [w for w in v_pool if w not in claimed and positions_of(w) is pos and w.args[0] is not kw.args[0]]
            vw = min(pool, key=lambda w: abs(order[w] - order[kw]), default=None)
            if vw is not None:
                claimed.add(vw)
            out.append(Candidate(kw, WHAT, vw))
        seen = set()  # no rope output feeds any cache write: one near-miss per positions node
        for w in v_pool if not k_writes else ():
            pos = positions_of(w)
            if pos not in seen:
                seen.add(pos)
                out.append(Candidate(w, "K/V cache write", None))
        return out

    def read(self, graph: Graph, ctx: PassContext, cand: Candidate) -> Fold:
        """The checked fold (:func:`_read`).

        Raises:
            Miss: its reason; for cache writes without a rope output, why nothing is folded there.
        """
        if source(cand.anchor) is None:
            raise Miss("no K write at these positions is a RoPE the rope pass's discovery recognises and rewrote "
                       "(rope_kv folds rocm_fused::rope outputs)")
        return read_fold(graph, cand.anchor, cand.data)

    def gate(self, graph: Graph, ctx: PassContext, cand: Candidate, params: Fold) -> Choice:
        """The provider that takes the match's spec (:func:`rocm_inductor.ops.rope_kv.rope_kv_spec`).

        Raises:
            Miss: no provider takes it.
        """
        q, k, cos, _, rd, inter, half = params.rope.args[:7]
        qv, kv, cv = val(q), val(k), val(cos)
        if params.perm is not None:
            qv, kv, cv = qv.permute(params.perm), kv.permute(params.perm), _to4(cv).permute(params.perm)
        spec = rope_kv_spec(qv, kv, val(params.v), cv, val(params.kw.args[0]), rd, inter, half)
        try:  # the op's own contract on the fake values (a mismatch here would fail the insert, not miss)
            check_args(qv, kv, *(val(n) for n in (params.v, params.kw.args[0], params.vw.args[0],
                                                  params.kw.args[1][2])), rd)
        except ValueError as e:
            raise Miss(str(e)) from None
        return choose_or_miss(ctx, "rope_kv_write", spec)

    @staticmethod
    def _permuted(graph: Graph, p: Fold, t, table: bool):
        """``t`` (tables: unsqueezed to 4-D first) permuted by ``p.perm``, inserted before the op's spot."""
        for _ in range(4 - val(t).ndim if table else 0):
            t = insert_call(graph, p.before, aten.unsqueeze.default, (t, 0), like=p.kw)
        return insert_call(graph, p.before, aten.permute.default, (t, p.perm), like=p.kw)

    def emit(self, graph: Graph, ctx: PassContext, cand: Candidate, params: Fold, choice: Choice) -> MatchRecord:
        """Insert the op, point q's readers at it and the writes' readers at the caches, drop the rest."""
        p = params
        q, k, cos, sin, rd, inter, half = p.rope.args[:7]
        kc, vc, pos = p.kw.args[0], p.vw.args[0], p.kw.args[1][2]
        where = location_of(p.rope)
        if p.perm is not None:  # rotate q, k (and their tables) in the caches' (B, H, S, D) order: views only
            q, k, cos, sin = (self._permuted(graph, p, t, i >= 2) for i, t in enumerate((q, k, cos, sin)))
        op = insert_call(graph, p.before, torch.ops.rocm_fused.rope_kv_write.default,
                         (q, k, p.v, cos, sin, kc, vc, pos, rd, inter, half, choice.provider), like=p.kw)
        q_out = op
        if p.perm is not None:  # q's readers get its rotation back in the rope's layout (a view)
            q_out = insert_call(graph, p.before, aten.permute.default, (op, [p.perm.index(i) for i in range(4)]),
                                like=p.kw)
        cur = q_out
        for n in p.moved:  # after the op, in their order
            cur.append(n)
            cur = n
        for cp in p.copies:
            graph.erase_node(cp)
        for w, cache in ((p.kw, kc), (p.vw, vc)):
            w.replace_all_uses_with(cache)
            graph.erase_node(w)
        for n in p.views:  # the value views of the writes (kept only if something else reads them: v's)
            if not n.users:
                graph.erase_node(n)
        for g in list(p.rope.users):
            if g.args[1] == 0:
                g.replace_all_uses_with(q_out)
            graph.erase_node(g)
        graph.erase_node(p.rope)
        shape, dtype = describe(val(k))
        cache = tuple(val(kc).shape)
        note = f"q/k RoPE + K/V writes into caches {cache} in one op (folds the rope match at {where})"
        return MatchRecord(self.name, "rope_kv_write", choice.provider, shape, dtype, location_of(p.kw),
                           "; ".join([note, *choice.reasons]))
