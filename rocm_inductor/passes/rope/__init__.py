"""Rotary embeddings (RoPE) -> ``rocm_fused::rope``: one op for q and k together.

What is matched is the *kind*, on the canonical post-grad graph: a rotation (``rotation.py``)

    out = x * c + rot(x) * s          rot = rotate_half (NeoX)  : cat(-x[..., h:], x[..., :h], -1)
                                            rotate_every_two (GPT-J): reshape(cat(unsq(-x[..., 1::2], -1),
                                                                                 unsq(x[..., ::2], -1), -1))
    out = flatten(view_as_real(view_as_complex(x.reshape(..., -1, 2)) * freqs_cis))   (complex form)

with ``neg`` or ``* -1``, operands in either order, any unsqueeze dim / layout / dtype of c and s (they are
taken as they reach the multiply and broadcast by the op), any head_dim, static or dynamic sequence length
(docs/spellings.md, RoPE 1, 4, 5). Around a rotation the pass folds, repeatedly (``fold.py``):
- an upcast: ``x = q.float()`` and the only use of ``out`` is ``.to(q.dtype)`` -> the op reads q and rounds
  once to q's dtype (the same single rounding eager does) (docs/spellings.md, RoPE 2, 5);
- partial rotary: ``x = q[..., :rd]`` and the only use of ``out`` is ``cat([out, q[..., rd:]], -1)`` -> the
  op rotates the first rd features of q and copies the tail (docs/spellings.md, RoPE 3).
Discovery (``combo.py``): the rotation spelled as two linear combinations ``o1 = x0 * cos - x1 * sin``,
``o2 = x1 * cos + x0 * sin`` of x's two parts -- halves (``chunk`` / slices: GPT-OSS, vLLM ``forward_native``
NeoX), even/odd features (vLLM GPT-J) or pairs (``x.reshape(..., d/2, 2)[..., 0 | 1]``: gpt-fast and ChatGLM,
whose table stores cos and sin interleaved) -- reassembled by ``cat`` (halves) or ``stack(...).flatten(-2)``;
and ``x * cos + rot(x) * sin`` where float32 tables promote q and rot(q) separately (transformers 5.24 FlexOlmo,
cast back with ``.to(q.dtype)``). The op's cos/sin are read off o1 (half tables); o2, the signs and the tables'
roles are left to verification: the region is evaluated against ``rope_ref`` on random inputs
(passes/discover.py) and only then rewritten; a near-rotation that fails is a near-miss naming the check.
More discovery (issue 32): every split of the halves (``chunk`` / ``split`` / ``unbind`` / ``view(.., 2, h).unbind``)
arrives as slices (``passes/splits.py``, in canonicalize); pairs in, halves out (transformers 5.24 DeepSeek-V3) is
NeoX's rotation of ``cat(x[..., 0::2], x[..., 1::2])`` (``combo.deinterleave``); the complex form on x's halves or
even/odd features (``view_as_complex(stack(..))`` / ``torch.complex``, reassembled any way: ``complex_form.py``);
a ``q.double()`` upcast (folded, then verified). Near-RoPEs (``near.py``: x's signed parts reassembled in a way
that is no rotation) are verified too, and their near-miss says what they compute (``diagnose.py``).
Rotations that share c and s (the same nodes, after canonicalize's CSE) are paired in graph order into one
op for q and k (one launch); an unpaired rotation gets an op with ``k=None`` (``emit.py``).

Cached path (``rocm_fused::rope_cached``, ``cached.py``): when the cos/sin of a NeoX rotation are computed in
the graph from inputs known at compile time, :func:`cached_plan` evaluates the chain, reads inv_freq and the
positions off it, builds the float32 [max_pos, rotary_dim] table once (float64 angles, attention scaling
folded in) and proves that every position's row equals the model's cos/sin; otherwise the on-the-fly op is
emitted. Either way the match note in the report says which path was taken and why.

Why not ``register_replacement``: the spellings differ in integer literals (half dim, slice dims, unsqueeze
dims, reshape sizes) and in where the broadcast happens, which a traced pattern bakes in; a structural match
over the few ops above covers all of them with one rule and reads rotary_dim and the style from the match.

Deliberately left alone (reported as near-misses): rotations whose output is broadcast larger than x (c/s
with extra dims), tables whose last dim is neither the rotated width nor (complex) half of it, symbolic
head_dim, > 4-D tensors (Triton limit), and anything no provider takes. In a training forward graph the
rewrite is still exact (the backward graph was already derived and reads saved tensors, not our op).

The steps (``passes/contract.py``): ``find`` matches, folds and checks every rotation before any rewrite (a q/k
pair is formed only from rotations the op can take); ``read`` pairs a rotation with the next one of its group
(cos/sin, rotary_dim, style, head_dim, dtype) when one op can serve both; ``gate`` chooses the cached op when
its plan holds and a provider takes it, else the on-the-fly op; ``emit`` rewrites.

   q ─► x*c + rot(x)*s ─► out_q                 q, k, cos, sin ─► rocm_fused::rope ─► (out_q, out_k)
   k ─► x*c + rot(x)*s ─► out_k      ==>        (or q, k, positions, table ─► rocm_fused::rope_cached)
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch._inductor.pattern_matcher import stable_topological_sort
from torch.fx import Graph, Node

from ...ops.rope import rope_spec
from ...platform import Choice
from ...registry import ops_of
from ...report import Match as MatchRecord
from ..context import PassContext
from ..contract import Candidate, Miss, RewritePass
from ..fx import val
from .cached import MAX_TABLE_POS, CachedPlan, cached_plan
from .combo import match_combo
from .complex_form import match_complex_form
from .emit import Pair, emit_cached, emit_rope, group_key, head_axis, place
from .fold import check, fold_partial, fold_upcast
from .near import match_near_add
from .rotation import Rotation, match_add, match_complex

__all__ = ["MAX_TABLE_POS", "CachedPlan", "RoPEPass", "Rotation", "cached_plan"]


class RoPEPass(RewritePass):
    """The RoPE family pass (see module docstring)."""

    name = "rope"
    ops = ops_of(name)
    tuning_op = "rope"  # decisions per shape incl. tokens (rocm_inductor.tuning)

    def find(self, graph: Graph, ctx: PassContext) -> Iterable[Candidate]:
        """Every rotation, folded and checked (``fold.check``), before any rewrite: first those the op can't
        take (their ``read`` reports why), in graph order; then the others by group (first appearance), each
        group in graph order, ready to pair."""
        self._plans: dict[tuple[int, int], CachedPlan | str] = {}  # per (cos, sin): layers share one table
        self._tables: dict[tuple[int, int], Node] = {}
        self._done: set[int] = set()  # ids of the rotations already given to an op
        missed, groups = [], {}
        for n in list(graph.nodes):
            r = (match_add(n) or match_complex(n) or match_complex_form(n) or match_combo(n)
                 or match_near_add(n))
            if r is None:
                continue
            while fold_partial(r) or fold_upcast(r):
                pass
            why = check(r)
            if why is not None:
                missed.append(Candidate(r.anchor, r.what, (r, why, None)))
                continue
            groups.setdefault(group_key(r), []).append(r)
        return missed + [Candidate(r.anchor, r.what, (r, None, g)) for g in groups.values() for r in g]

    def read(self, graph: Graph, ctx: PassContext, cand: Candidate) -> Pair:
        """The rotation with the next rotation of its group not yet rewritten, when one op can serve both
        (:func:`place`), else alone.

        Raises:
            Miss: the rotation failed its checks (the reason), or an earlier op already took it (silent).
        """
        r, why, group = cand.data
        if why is not None:
            raise Miss(why)
        if id(r) in self._done:
            raise Miss("", silent=True)  # the k of an earlier pair
        at = next(i for i, m in enumerate(group) if m is r)
        partner = next((m for m in group[at + 1:] if id(m) not in self._done), None)
        pair = place(graph, [r, partner]) if partner is not None else None
        if pair is None:
            pair = place(graph, [r])
        if pair is None:
            raise Miss("", silent=True)  # a rotation feeding its own input: not a DAG, never seen
        self._done.update(id(m) for m in pair.rots)
        return pair

    def gate(self, graph: Graph, ctx: PassContext, cand: Candidate, params: Pair) -> Choice:
        """The cached op when :func:`cached_plan` proves the table and a provider takes ``rope_cached``; else
        the on-the-fly op's provider.

        Raises:
            Miss: no provider takes ``rope`` (one near-miss per rotation of the pair).
        """
        r1 = params.rots[0]
        qv = val(r1.inp)
        kv = val(params.rots[1].inp) if len(params.rots) == 2 else None
        plan = self._plan(graph, r1)
        fake_table = None
        if not isinstance(plan, str) and hasattr(qv, "fake_mode"):
            fake_table = qv.fake_mode.from_tensor(plan.table.to(qv.device))
        if fake_table is not None:
            spec = rope_spec(qv, kv, fake_table, r1.rotary_dim, False, True, cached=True, head_axis=head_axis(r1))
            choice = ctx.choose("rope_cached", spec)
            if choice.provider is not None:
                params.plan = plan
                return choice
            # the on-the-fly op may still have a provider
            self._plans[(id(r1.cos), id(r1.sin))] = f"no provider takes rope_cached ({choice.why_not})"
        table = val(r1.cos) if not isinstance(r1.cos, tuple) else torch.empty(0)
        spec = rope_spec(qv, kv, table, r1.rotary_dim, r1.interleaved, r1.half_table, cached=False,
                         head_axis=head_axis(r1))
        choice = ctx.choose("rope", spec)
        if choice.provider is None:
            raise Miss(choice.why_not, anchors=[r.anchor for r in params.rots])
        return choice

    def emit(self, graph: Graph, ctx: PassContext, cand: Candidate, params: Pair, choice: Choice) -> MatchRecord:
        """One op for the pair (:func:`emit_cached` / :func:`emit_rope`); users of an earlier rotation that now
        come before the op move after it."""
        if params.plan is not None:
            rec = emit_cached(graph, params, choice.provider, choice.reasons, self._tables)
        else:
            rec = emit_rope(graph, params, choice.provider, choice.reasons, self._plan(graph, params.rots[0]))
        if params.reorder:
            stable_topological_sort(graph)
        return rec

    def finish(self, graph: Graph, ctx: PassContext) -> None:
        """Nothing: the rotations left dead stay for the passes after this one and go with the manager's
        dead-code elimination after the last pass."""

    def _plan(self, graph: Graph, r: Rotation) -> CachedPlan | str:
        """:func:`cached_plan` of ``r`` (memoized per cos/sin), the package's :data:`MAX_TABLE_POS` as the limit;
        an evaluation error is the reason (the on-the-fly path is always exact)."""
        key = (id(r.cos), id(r.sin))
        if key not in self._plans:
            try:
                self._plans[key] = cached_plan(graph, r, MAX_TABLE_POS)
            except Exception as e:  # evaluation of an odd chain failed: the on-the-fly path is always exact
                self._plans[key] = f"cos/sin chain could not be evaluated at compile time ({type(e).__name__}: {e})"
        return self._plans[key]

