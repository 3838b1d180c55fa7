"""Decode attention over a (static) KV cache -> ``rocm_fused::decode_attention`` (issue 13).

A direct walk over the post-grad graph (``find_nodes`` on the SDPA targets and on ``bmm``, no pattern
matcher: one node per attention, and its K/V/mask producers are read backwards from it).

Covers, in float16/bfloat16/float32, static or dynamic batch / KV length:
- the SDPA node of every platform, its arguments read by schema name (so argument order and the
  ``attn_mask`` / ``attn_bias`` spelling do not matter): CPU ``_scaled_dot_product_flash_attention_for_cpu``
  (``attn_mask=``, native GQA when K/V have fewer heads); CUDA ``_scaled_dot_product_efficient_attention``
  (``attn_bias``), ``_scaled_dot_product_cudnn_attention``, ``_scaled_dot_product_flash_attention`` (no mask;
  native GQA under ``enable_gqa``), ``_scaled_dot_product_fused_attention_overrideable`` (XPU/HPU-style),
  ``_scaled_dot_product_attention_math`` and ``scaled_dot_product_attention`` (``enable_gqa=``), where they
  survive to this graph; only the attention output may be used (index 0), dropout 0;
- the math form ``reshape(bmm(softmax(s), v))`` with ``s = c * reshape(bmm(a * q, b * k^T)) (+ mask |
  masked_fill(~m, -inf | v) | where(m, s, -inf | v))``, softmax as Inductor decomposes it (``exp(s - amax) /
  sum``, with or without an fp32 up/down-cast, SDPA's safe-softmax ``where``, and Inductor's scale-folded
  ``softmax(x * c)`` pattern): HF's eager attention, K/V of 1 head broadcast over q's heads by ``matmul`` (MQA,
  the op reads the one kv head), CPU SDPA's own decomposition (Dv != D, a 3D mask), SDPA's math fallback
  (half q/k/v up-cast to float32 and the result cast back: the op gets the half tensors, no float32 copy of
  the cache); scale = a * b * c. Every node from the scores on
  must feed only this attention (the q/k/v/mask preparation may be shared, e.g. two attentions over one cache);
- K and V behind a head repeat of a smaller tensor, mapping query head ``h`` to kv head ``h // g``:
  HF ``repeat_kv`` and gpt-fast / int-repeat ``repeat_interleave(g, dim=1)`` (both reach this graph as
  ``unsqueeze(x, 2) -> expand -> clone -> reshape``), a head gather ``x[:, idx]`` / ``index_select(x, 1, idx)``
  whose index evaluates at compile time to ``arange(Hq) // g`` (``torch.arange(Hq) // g``, a tensor-repeats
  ``repeat_interleave``: iota/div, cumsum/searchsorted), ``repeat(1, g, 1, 1)`` when ``Hkv == 1`` (MQA: every
  mapping is ``h -> 0``), no repeat (MHA), or native GQA (K/V given with ``Hkv < Hq``). K and V recognised
  with different head counts (V sliced after its repeat) are both taken as given (correct, no GQA saving);
- query length a decode bucket: static ``<= options.aten_gemm_max_m`` (32 by default, the level machinery's
  small-M limit, ``lowerings/gemm_buckets.py``) or symbolic with a ShapeEnv upper bound within it;
- mask: none; boolean or float additive, any rank that broadcasts (viewed 4D), walked back through an
  ``expand`` on broadcast dims, through the efficient kernel's alignment ``slice(constant_pad_nd(bias))``,
  and SDPA's own bool -> additive conversion ``where(m, 0, -inf)`` / ``where(~m, -inf, 0)`` (the bool is
  recovered: same meaning, a fraction of the bytes); HF's ``where(m, 0, finfo.min)`` stays additive (exact:
  a fully masked row then is uniform, not zeros, as in eager); in the math form, scores filled with a finite
  ``v <= -2**127`` (float32 / bfloat16 ``finfo.min``) get the additive mask ``where(filled, v, 0)``, exact
  because float32 ``s + v == v`` for |s| < 2**103 (so a fully masked row stays uniform as in eager);
- scale: SDPA's ``scale`` or ``1/sqrt(D)`` when None.
A repeat whose output has another consumer stays for that consumer; the attention is rewritten anyway (it no
longer reads the repeated copy, the Inductor-fused copy for the other consumer remains; the note says so).

Near-misses (reported, left to Inductor): query length above the limit (prefill), ``is_causal=True`` (SDPA's
causal mask is top-left aligned, not a decode over a cache, unless Lq == Lkv == 1), dropout, outputs other than
the attention used (logsumexp: a training graph; the math form's probabilities: ``output_attentions``), a head
repeat with another mapping (``repeat`` / ``tile``: ``h -> h % Hkv``; an index not known at compile time or
not ``arange(Hq) // g``), non-4D or batch-broadcast q/k/v, dtypes the op does not take, a mask that does not
broadcast, a math-form fill the op cannot mean exactly (a finite fill above -2**127, e.g. float16's finfo.min
-65504 or -1e4: its fully masked rows are uniform in eager, not reproducible by an additive or bool mask),
every other math-form attention not taken (a softmax over bmm scores feeding a bmm: 3D bmm attention, a tensor
scale, an unrecognised mask or softmax spelling; none is skipped silently), a symbolic head_dim without a
scale, and whatever the chosen provider's ``check`` refuses (head_dim, layout).
Numerics: the op computes scores, softmax and P @ V in float32 and rounds once; a row
the mask removes entirely returns zeros (SDPA's behaviour; HF's eager softmax would give NaN there).

   k ─► unsqueeze ─► expand ─► clone ─► reshape ─┐
   v ─► unsqueeze ─► expand ─► clone ─► reshape ─┤               q, k, v, mask ─► rocm_fused::decode_attention
   q ────────────────────────────────────────────┼─► SDPA[0]  ==>
   m ─► where(m, 0, -inf) ─► (pad, slice, expand)┘
"""

from __future__ import annotations

import dataclasses
import math
import operator
from typing import Any

import torch
from torch.fx import Graph, Node
from torch.fx.experimental.symbolic_shapes import statically_known_true

from ..buckets import m_upper_bound
from ..ops.attention import DTYPES, attention_spec
from ..registry import ops_of
from ..report import Match as MatchRecord
from ..report import NearMiss, describe, dtype_name, location_of
from .canonicalize import fake_eval, insert_call
from .context import PassContext

aten = torch.ops.aten
prims = torch.ops.prims

#: Query length limit when ``options.aten_gemm_max_m`` is 0 (the GEMM override off): the level machinery's
#: default decode bucket (``Options.aten_gemm_max_m = 32``).
DEFAULT_MAX_Q = 32


def _sdpa_targets() -> dict[Any, str]:
    """SDPA overloads present in this torch (name -> short name for reports)."""
    names = ("_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_efficient_attention",
             "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention",
             "_scaled_dot_product_fused_attention_overrideable", "_scaled_dot_product_attention_math",
             "scaled_dot_product_attention")
    out = {}
    for name in names:
        packet = getattr(aten, name, None)
        op = getattr(packet, "default", None) if packet is not None else None
        if op is not None:
            out[op] = name
    return out


#: The SDPA targets this pass looks for.
SDPA_TARGETS: dict[Any, str] = _sdpa_targets()

_RESHAPES = (aten.view.default, aten.reshape.default, aten._unsafe_view.default)
_CLONES = (aten.clone.default, aten.alias.default)
#: Ops an index expression may use and still be evaluated at compile time (no graph input under it).
_CONST_OPS = frozenset({
    prims.iota.default, aten.arange.default, aten.arange.start, aten.arange.start_step, aten.full.default,
    aten.div.Tensor_mode, aten.div.Tensor, aten.floor_divide.default, aten.mul.Tensor, aten.add.Tensor,
    aten.sub.Tensor, aten.cumsum.default, aten.searchsorted.Tensor, aten.clamp_max.default,
    aten.clamp_min.default, aten.clamp.default, aten.view.default, aten.reshape.default,
    aten._unsafe_view.default, aten.expand.default, aten.clone.default, aten.repeat_interleave.Tensor,
    aten.repeat_interleave.self_int, prims.convert_element_type.default, aten._to_copy.default,
    aten.lift_fresh_copy.default,
})


def bind(node: Node) -> dict[str, Any]:
    """``node``'s arguments by schema name, defaults filled in (``{"query": <Node>, "attn_mask": None, ...}``)."""
    out = {}
    for i, a in enumerate(node.target._schema.arguments):
        if i < len(node.args):
            out[a.name] = node.args[i]
        elif a.name in node.kwargs:
            out[a.name] = node.kwargs[a.name]
        else:
            out[a.name] = a.default_value if a.has_default_value() else None
    return out


def _val(n: Any) -> Any:
    return n.meta.get("val") if isinstance(n, Node) else None


def _is(n: Any, *targets: Any) -> bool:
    return isinstance(n, Node) and n.op == "call_function" and n.target in targets


def _eq(a: Any, b: Any) -> bool:
    return statically_known_true(a == b)


def _shape(n: Any) -> tuple:
    v = _val(n)
    return tuple(v.shape) if isinstance(v, torch.Tensor) else ()


@dataclasses.dataclass
class HeadSource:
    """Where an SDPA K or V input comes from.

    Attributes:
        node: the un-repeated (B, Hkv, L, D) tensor; groups: ``g = Hq // Hkv``;
        spelling: how the repeat was written (for the report); shared: the repeat has another consumer.
    """

    node: Node
    groups: int
    spelling: str
    shared: bool = False


def _strip_clones(n: Any, chain: list | None = None) -> Any:
    """Walk back through clones; every node passed (and the result) is appended to ``chain``."""
    while _is(n, *_CLONES):
        if chain is not None:
            chain.append(n)
        n = n.args[0]
    if chain is not None:
        chain.append(n)
    return n


def _const_eval(n: Any, depth: int = 0) -> torch.Tensor | None:
    """Evaluate ``n`` at compile time on CPU when no graph input is under it (index tensors), else None."""
    if not isinstance(n, Node):
        return n if isinstance(n, (int, float, bool)) or n is None else None
    if depth > 16:
        return None
    if n.op == "get_attr":
        gm = n.graph.owning_module
        obj = gm
        try:
            for part in str(n.target).split("."):
                obj = getattr(obj, part)
        except AttributeError:
            return None
        return obj.detach().cpu() if isinstance(obj, torch.Tensor) else None
    if n.op != "call_function" or n.target not in _CONST_OPS:
        return None
    vals = []
    for a in n.args:
        if isinstance(a, (list, tuple)):
            items = [_const_eval(x, depth + 1) if isinstance(x, Node) else x for x in a]
            if any(isinstance(x, Node) for x in a) and any(i is None for i in items):
                return None
            vals.append(type(a)(items))
        elif isinstance(a, Node):
            v = _const_eval(a, depth + 1)
            if v is None:
                return None
            vals.append(v)
        else:
            if isinstance(a, (torch.SymInt, torch.SymFloat)):
                return None
            vals.append(a)
    kwargs = {k: (torch.device("cpu") if k == "device" else v) for k, v in n.kwargs.items() if k != "pin_memory"}
    if any(isinstance(v, Node) for v in kwargs.values()):
        return None
    try:
        out = n.target(*vals, **kwargs)
    except Exception:
        return None
    return out if isinstance(out, torch.Tensor) else None


def _index_mapping(idx: Any, hq: int, hkv: int) -> str | None:
    """None when the head index ``idx`` is ``arange(hq) // (hq // hkv)``, else why it is not (or unknown)."""
    value = _const_eval(idx)
    if value is None:
        return ("the head index is not known at compile time (a graph input or a computation we do not "
                "evaluate): cannot verify it maps query head h to kv head h // g")
    g = hq // hkv
    want = torch.arange(hq) // g
    if value.dtype.is_floating_point or value.shape != want.shape or not torch.equal(value.long(), want):
        return f"the head index {value.tolist()[:16]} is not arange({hq}) // {g} (h -> h // g)"
    return None


def head_source(node: Node, hq: int) -> HeadSource | str:
    """The un-repeated tensor behind an SDPA K/V input ``node``, or why the head mapping is not ``h // g``.

    Args:
        node: the SDPA's key or value argument (a (B, H, L, D) fake-tensor node).
        hq: number of query heads (static).
    """
    shape = _shape(node)
    if len(shape) != 4:
        return f"K/V are {len(shape)}D, not (B, H, L, D)"
    h = shape[1]
    if not isinstance(h, int):
        return f"K/V head count {h} is symbolic"
    if h != hq:
        if h == 0 or hq % h:
            return f"{hq} query heads are not a multiple of {h} kv heads"
        return HeadSource(node, hq // h, "native GQA / broadcast (un-repeated K/V)")
    chain: list[Node] = []  # the materialised copies from the SDPA's input down to the repeat
    n = _strip_clones(node, chain)
    shared = any(len(c.users) > 1 for c in chain)
    # HF repeat_kv / repeat_interleave(int): unsqueeze(x, 2) -> expand(B, Hkv, g, L, D) -> clone -> reshape
    if _is(n, *_RESHAPES):
        e = _strip_clones(n.args[0], chain)
        shared = any(len(c.users) > 1 for c in chain[:-1])
        if _is(e, aten.expand.default):
            src5 = e.args[0]
            s5, e5 = _shape(src5), _shape(e)
            if len(s5) == 5 and len(e5) == 5 and isinstance(e5[1], int) and isinstance(e5[2], int):
                src4 = src5.args[0] if _is(src5, aten.unsqueeze.default, *_RESHAPES) else None
                if _is(src5, aten.unsqueeze.default) and src5.args[1] not in (1, 2, -3, -4):
                    src4 = None
                s4, out4 = _shape(src4), _shape(n)
                # the expand may broadcast only the group dim: a batch-1 (shared-prefix) K/V broadcast to the
                # batch in the same expand is not a head repeat of a (B, Hkv, L, D) tensor
                bcast = [j for j in (0, 3, 4) if not _eq(s5[j], e5[j])]
                if bcast and src4 is not None and len(s4) == 4:
                    j = bcast[0]
                    return (f"the head repeat's expand also broadcasts dim {j} ({s5[j]} -> {e5[j]}): a "
                            "batch/length-broadcast K/V; the op takes K/V with q's batch")
                if src4 is not None and len(s4) == 4 and len(out4) == 4 and isinstance(s4[1], int) and \
                        e5[1] * e5[2] == hq and all(_eq(out4[i], e5[j]) for i, j in ((0, 0), (2, 3), (3, 4))):
                    hkv = s4[1]
                    if hkv == e5[1] and _eq(s5[2], 1) and all(_eq(s5[j], s4[i]) for i, j in ((0, 0), (2, 3), (3, 4))):
                        # (B, Hkv, 1, L, D) -> (B, Hkv, g, L, D) -> (B, Hkv * g, L, D): head h reads h // g
                        return HeadSource(src4, hq // hkv, "repeat_kv / repeat_interleave (expand + clone + "
                                          "reshape)", shared)
                    if hkv == e5[2] and _eq(s5[1], 1) and all(_eq(s5[j], s4[i]) for i, j in ((0, 0), (2, 3), (3, 4))):
                        # (B, 1, Hkv, L, D) -> (B, g, Hkv, L, D): head h reads h % Hkv (torch.repeat order)
                        if hkv == 1:
                            return HeadSource(src4, hq, "repeat (MQA)", shared)
                        return ("the head repeat maps query head h to kv head h % Hkv (torch.repeat / tile "
                                "order), not h // g as repeat_kv / repeat_interleave do")
    if _is(n, aten.repeat.default):
        src, reps = n.args[0], list(n.args[1])
        ssrc = _shape(src)
        if len(reps) == 4 and reps[0] == reps[2] == reps[3] == 1 and len(ssrc) == 4:
            if ssrc[1] == 1:
                return HeadSource(src, hq, "repeat (MQA)", shared)
            return ("the head repeat maps query head h to kv head h % Hkv (torch.repeat / tile order), not "
                    "h // g as repeat_kv / repeat_interleave do")
    gather = None
    if _is(n, aten.index.Tensor) and len(n.args[1]) == 2 and n.args[1][0] is None:
        gather = (n.args[0], n.args[1][1], "head gather x[:, idx]")
    elif _is(n, aten.index_select.default) and n.args[1] in (1, -3):
        gather = (n.args[0], n.args[2], "index_select(x, 1, idx)")
    if gather is not None:
        src, idx, spelling = gather
        ssrc = _shape(src)
        if len(ssrc) == 4 and isinstance(ssrc[1], int) and ssrc[1] < hq:
            why = _index_mapping(idx, hq, ssrc[1])
            if why is not None:
                return why
            return HeadSource(src, hq // ssrc[1], spelling, shared)
    return HeadSource(node, 1, "no repeat (MHA)")


@dataclasses.dataclass
class MaskSource:
    """The mask to hand the op: ``node`` (or None), its kind and how it was found."""

    node: Node | None
    kind: str
    spelling: str = ""
    invert: bool = False  # the bool mask is the negation of ``node`` (``where(~m, -inf, 0)`` with no ~ node)
    #: ``(value, dtype)`` when the op's mask is the additive ``convert(node, dtype) * value`` (``node`` True where
    #: the scores were filled with ``value``: ``masked_fill(~m, finfo.min)`` / ``where(m, s, finfo.min)``)
    fill: tuple[float, torch.dtype] | None = None


def _scalar_value(a: Any) -> float | None:
    """The constant of ``a``: a Python number, or a ``full``/``scalar_tensor`` node of one value."""
    if isinstance(a, (int, float)) and not isinstance(a, bool):
        return float(a)
    if _is(a, aten.full.default) and isinstance(a.args[1], (int, float)):
        return float(a.args[1])
    if _is(a, aten.scalar_tensor.default) and isinstance(a.args[0], (int, float)):
        return float(a.args[0])
    if _is(a, aten.zeros.default, aten.zeros_like.default):
        return 0.0
    return None


def _strip_expand(n: Any) -> Any:
    """Walk back through ``expand`` (broadcast only: the input's dims are 1 or equal, right-aligned)."""
    while _is(n, aten.expand.default):
        src = n.args[0]
        s, o = _shape(src), _shape(n)
        if not s or len(s) > len(o):
            break
        if not all(_eq(a, 1) or _eq(a, b) for a, b in zip(s, o[len(o) - len(s):], strict=True)):
            break
        n = src
    return n


def _strip_pad_slice(n: Any) -> Any:
    """``slice(constant_pad_nd(x, [0, p]), -1, 0, L)`` with L = x's last dim -> x (SDPA's bias alignment)."""
    if not _is(n, aten.slice.Tensor):
        return n
    args = list(n.args) + [None] * (5 - len(n.args))
    src, dim, start, end, step = args[:5]
    pad = src
    if not _is(pad, aten.constant_pad_nd.default):
        return n
    x = pad.args[0]
    xs = _shape(x)
    padding = list(pad.args[1])
    value = pad.args[2] if len(pad.args) > 2 else 0
    if not xs or dim not in (-1, len(xs) - 1) or start not in (0, None) or (step not in (1, None)):
        return n
    if len(padding) != 2 or padding[0] != 0 or value != 0:
        return n
    if end is not None and not _eq(end, xs[-1]) and not (isinstance(end, int) and end >= 2**62):
        return n
    return x


_WHERES = tuple(getattr(aten.where, o) for o in ("self", "ScalarSelf", "ScalarOther", "Scalar")
                if hasattr(aten.where, o))


def mask_source(node: Any) -> MaskSource:
    """Walk the SDPA mask back to the smallest tensor that means the same (see module docstring)."""
    if node is None:
        return MaskSource(None, "none")
    spelling = []
    n = _strip_expand(node)
    p = _strip_pad_slice(n)
    if p is not n:
        spelling.append("alignment pad/slice")
        n = _strip_expand(p)
    if _is(n, *_WHERES) and len(n.args) == 3:
        c, a, b = n.args
        av, bv = _scalar_value(a), _scalar_value(b)
        cv = _val(c)
        if isinstance(cv, torch.Tensor) and cv.dtype == torch.bool and av is not None and bv is not None:
            if av == 0.0 and bv == -math.inf:
                spelling.append("bool recovered from where(m, 0, -inf)")
                return MaskSource(_strip_expand(c), "bool", ", ".join(spelling))
            if av == -math.inf and bv == 0.0:
                spelling.append("bool recovered from where(~m, -inf, 0)")
                if _is(c, aten.logical_not.default, aten.bitwise_not.default):
                    return MaskSource(_strip_expand(c.args[0]), "bool", ", ".join(spelling))
                return MaskSource(c, "bool", ", ".join(spelling), invert=True)
    v = _val(n)
    kind = "bool" if isinstance(v, torch.Tensor) and v.dtype == torch.bool else "additive"
    return MaskSource(n, kind, ", ".join(spelling))


def _cudagraphs() -> bool:
    try:
        return bool(torch._inductor.config.triton.cudagraphs)
    except AttributeError:
        return False


def q_len_limit(ctx: PassContext) -> int:
    """Largest query length rewritten: ``options.aten_gemm_max_m`` (default 32), or 32 when that is 0."""
    return ctx.options.aten_gemm_max_m or DEFAULT_MAX_Q


def _upper(s: Any) -> int | None:
    if isinstance(s, int):
        return s
    try:
        var_ranges = s.node.shape_env.var_to_range
    except AttributeError:
        var_ranges = None
    return m_upper_bound(s, var_ranges)


def _sym(s: Any) -> str:
    return str(s)


class _Miss(Exception):
    """A candidate that is not rewritten (message: the reason)."""


def _to_4d(graph: Graph, before: Node, n: Node, ndim: int) -> Node:
    """``n`` (an ``ndim``-D mask) viewed 4D with leading size-1 dims (SDPA's right-aligned broadcast)."""
    for _ in range(4 - ndim):
        n = insert_call(graph, before, aten.unsqueeze.default, (n, 0), like=before)
    return n


@dataclasses.dataclass
class Candidate:
    """One attention found in the graph, before the common checks.

    Attributes:
        node: the node whose users get the op's output (the SDPA node for the tuple-returning targets, else
            the 4D attention output); tuple_out: ``node`` returns a tuple whose ``[0]`` is the attention;
        q, k, v: the 4D (B, H, L, D) inputs as the attention sees them (K/V possibly repeated);
        mask: where the mask comes from; scale: the score scale (None: ``1/sqrt(D)``); source: for the report.
    """

    node: Node
    tuple_out: bool
    q: Any
    k: Any
    v: Any
    mask: MaskSource
    scale: Any
    source: str


def sdpa_candidate(sdpa: Node) -> Candidate:
    """The :class:`Candidate` of an SDPA node, or :class:`_Miss` for the SDPA-only refusals."""
    a = bind(sdpa)
    if a.get("dropout_p") not in (0, 0.0, None):
        raise _Miss(f"dropout_p={a['dropout_p']} (training): the op has no dropout")
    tuple_out = sdpa.target is not getattr(aten.scaled_dot_product_attention, "default", None)
    if tuple_out:  # only the attention (index 0) may be used
        for u in sdpa.users:
            if u.users and not (u.target is operator.getitem and u.args[1] == 0):
                raise _Miss(f"output {u.args[1] if u.target is operator.getitem else '?'} of the SDPA "
                            "(logsumexp / RNG state) is used: a training graph")
    q, k = _val(a["query"]), _val(a["key"])
    if a.get("is_causal") and not (isinstance(q, torch.Tensor) and q.ndim == 4 and _eq(q.shape[2], 1)
                                   and isinstance(k, torch.Tensor) and k.ndim == 4 and _eq(k.shape[2], 1)):
        raise _Miss("is_causal=True: SDPA's causal mask is top-left aligned (query i sees keys 0..i), not a "
                    "decode over a cache; pass the mask explicitly")
    mask_node = a.get("attn_mask", a.get("attn_bias"))
    return Candidate(sdpa, tuple_out, a["query"], a["key"], a["value"], mask_source(mask_node), a.get("scale"),
                     SDPA_TARGETS[sdpa.target])


def _upcast_source(n: Any) -> Any:
    """``x`` when ``n = convert_element_type(x, float32)`` with ``x`` float16/bfloat16, else None."""
    if not _is(n, prims.convert_element_type.default) or n.args[1] != torch.float32:
        return None
    src = _val(n.args[0])
    return n.args[0] if isinstance(src, torch.Tensor) and src.dtype in (torch.float16, torch.bfloat16) else None


def _narrow_inputs(cand: Candidate, q: Any, k: Any, v: Any) -> tuple[Any, Any, Any] | None:
    """The half-precision q, k, v behind float32 up-casts (SDPA's math path), when the attention output is only
    cast back to that dtype; else None."""
    if cand.tuple_out:
        return None
    srcs = [_upcast_source(x) for x in (q, k, v)]
    if any(x is None for x in srcs):
        return None
    dt = {_val(x).dtype for x in srcs}
    users = list(cand.node.users)
    if len(dt) != 1 or not users or not all(
            _is(u, prims.convert_element_type.default) and u.args[1] in dt for u in users):
        return None
    return srcs[0], srcs[1], srcs[2]


def rewrite(graph: Graph, ctx: PassContext, cand: Candidate) -> None:
    """Check one candidate and rewrite it, or raise :class:`_Miss` with the reason."""
    q_node, k_node, v_node = cand.q, cand.k, cand.v
    q, k, v = _val(q_node), _val(k_node), _val(v_node)
    if not all(isinstance(t, torch.Tensor) for t in (q, k, v)):
        raise _Miss("q/k/v carry no fake tensors")
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise _Miss(f"q/k/v are {q.ndim}D/{k.ndim}D/{v.ndim}D, the op takes (B, H, L, D)")
    lq, lkv = q.shape[2], k.shape[2]
    limit = q_len_limit(ctx)
    up = _upper(lq)
    if up is None or up > limit:
        what = f"query length {lq}" + ("" if isinstance(lq, int) else f" (upper bound {up})")
        raise _Miss(f"{what} > {limit}: prefill stays with Inductor (the limit is options.aten_gemm_max_m)")
    if q.dtype not in DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        raise _Miss(f"dtypes q={dtype_name(q)}, k={dtype_name(k)}, v={dtype_name(v)}: the op takes one of "
                    "float16/bfloat16/float32 for all three")
    if not (_eq(q.shape[0], k.shape[0]) and _eq(k.shape[0], v.shape[0])):
        raise _Miss(f"batch dims differ (q {q.shape[0]}, k {k.shape[0]}, v {v.shape[0]}): SDPA broadcasts them, "
                    "the op does not")
    hq = q.shape[1]
    if not isinstance(hq, int):
        raise _Miss(f"query head count {hq} is symbolic")
    ks, vs = head_source(k_node, hq), head_source(v_node, hq)
    for name, s in (("K", ks), ("V", vs)):
        if isinstance(s, str):
            raise _Miss(f"{name}: {s}")
    for name, s in (("K", ks), ("V", vs)):  # the un-repeated tensor must still agree with q on the batch
        if not _eq(_shape(s.node)[0], q.shape[0]):
            raise _Miss(f"{name}: {s.spelling} source has batch {_shape(s.node)[0]}, q has {q.shape[0]}")
    if _shape(ks.node)[1] != _shape(vs.node)[1]:  # e.g. V sliced after its repeat: take both as given (MHA)
        why = f"K {ks.spelling} x{ks.groups}, V {vs.spelling} x{vs.groups}: both taken as given"
        ks, vs = HeadSource(k_node, 1, why), HeadSource(v_node, 1, why)
    scale = cand.scale
    if scale is None:
        d = q.shape[-1]
        if not isinstance(d, int):
            raise _Miss(f"head_dim {d} is symbolic and no scale is given")
        scale = 1.0 / math.sqrt(d)
    if not isinstance(scale, (int, float)):
        raise _Miss(f"scale {scale!r} is not a compile-time number")
    ms = cand.mask
    mval = _val(ms.node)
    if ms.fill is not None:  # the additive mask the rewrite builds: node's shape, the fill's dtype
        mval = fake_eval(prims.convert_element_type.default, (ms.node, ms.fill[1]))
    if ms.node is not None:
        if not isinstance(mval, torch.Tensor):
            raise _Miss("the mask carries no fake tensor")
        if mval.dtype != torch.bool and not mval.dtype.is_floating_point:
            raise _Miss(f"mask dtype {dtype_name(mval)}: the op takes bool or float masks")
        full = (q.shape[0], hq, lq, lkv)
        ms_shape = tuple(mval.shape)
        if len(ms_shape) > 4 or not all(_eq(m, 1) or _eq(m, f) for m, f in
                                          zip(ms_shape, full[4 - len(ms_shape):], strict=True)):
            raise _Miss(f"mask shape {ms_shape} does not broadcast to (B, Hq, Lq, Lkv) = {full} dim by dim")
        mval4 = mval.reshape((1,) * (4 - mval.ndim) + ms_shape) if mval.ndim < 4 else mval
    else:
        mval4 = None
    # SDPA's math path upcasts half q/k/v to float32 and casts the result back: hand the op the half tensors
    # (it computes in float32 and rounds once, as that path does) when every use of the output is that cast
    narrow = _narrow_inputs(cand, q_node, ks.node, vs.node)
    if narrow is not None:
        q_node, ks.node, vs.node = narrow
        q = _val(q_node)
    spec = attention_spec(q, _val(ks.node), _val(vs.node), mval4, cudagraphs=_cudagraphs())
    choice = ctx.choose("decode_attention", spec)
    if choice.provider is None:
        raise _Miss(choice.why_not)
    # rewrite
    at = cand.node
    mask_arg = None
    if ms.node is not None:
        mask_arg = ms.node
        if ms.invert:
            mask_arg = insert_call(graph, at, aten.logical_not.default, (mask_arg,), like=at)
        if ms.fill is not None:  # convert(filled, dtype) * fill: fill where filled, -0.0 elsewhere (s + -0.0 = s)
            mask_arg = insert_call(graph, at, prims.convert_element_type.default, (mask_arg, ms.fill[1]), like=at)
            mask_arg = insert_call(graph, at, aten.mul.Tensor, (mask_arg, ms.fill[0]), like=at)
        mask_arg = _to_4d(graph, at, mask_arg, mval.ndim)
    new = insert_call(graph, at, torch.ops.rocm_fused.decode_attention.default,
                      (q_node, ks.node, vs.node, mask_arg, float(scale), choice.provider), like=at)
    if cand.tuple_out or narrow is not None:  # getitem [0] / the down-cast users take the op's output
        for u in list(at.users):
            u.replace_all_uses_with(new)
            graph.erase_node(u)
    else:
        at.replace_all_uses_with(new)
    graph.erase_node(at)
    hkv = _shape(ks.node)[1]
    mask_desc = ms.kind if ms.node is None else f"{ms.kind} {'x'.join(map(str, mval4.shape))}"
    notes = [f"q_len={_sym(lq)} kv_len={_sym(lkv)} GQA {hq}/{hkv}={hq // hkv} ({ks.spelling}) mask={mask_desc}"
             + (f" ({ms.spelling})" if ms.spelling else "") + f" from {cand.source}"]
    if ks.shared or vs.shared:
        notes.append("the repeated K/V has another consumer: that repeat stays for it")
    notes += list(choice.reasons)
    shape, dtype = describe(q)
    ctx.pending = choice
    ctx.matched(at.name, MatchRecord("attention", "decode_attention", choice.provider, shape, dtype,
                                     location_of(at), "; ".join(notes)))



# ---------------------------------------------------------------------------------------------- math form


def _unflatten(n: Any) -> Any:
    """The 4D tensor behind a bmm operand ``reshape(clone(expand(x4)), [B*H, X, Y])`` (expand, clone optional; the
    expand may broadcast x4's size-1 batch / head dims, as ``matmul`` does for MQA's 1-head K/V), or None."""
    if not _is(n, *_RESHAPES):
        return None
    x = _strip_clones(n.args[0])  # matmul's broadcast of a 1-head K/V: reshape(clone(expand(k^T)))
    if _is(x, aten.expand.default) and len(_shape(x.args[0])) == len(_shape(x)):
        x = x.args[0]
    return x if len(_shape(x)) == 4 else None


def _last_dim(dims: Any, ndim: int) -> bool:
    return isinstance(dims, (list, tuple)) and len(dims) == 1 and dims[0] in (-1, ndim - 1)


def _strip_convert(n: Any) -> Any:
    return n.args[0] if _is(n, prims.convert_element_type.default) else n


def _base(n: Any) -> Any:
    """``n`` without scalings by Python numbers and dtype casts (to compare two spellings of one score tensor)."""
    while True:
        m = _strip_convert(_strip_scale(n)[0])
        if m is n:
            return n
        n = m


def _shifted(z: Any, nd: int) -> tuple[Any, float] | None:
    """``(x, f)`` when the exponent ``z`` of a softmax numerator is ``f * x - amax(f * x, -1)``, else None.

    Spellings: ``x - amax(x)``; Inductor's ``softmax(inp * c)`` pattern (joint_graph ``mul_softmax_pattern`` /
    ``div_softmax_pattern``), which folds the scale after the row max: ``(y - amax(y)) * c`` with ``y = inp * sign``
    (x = inp's base, f = c * sign), and on newer torch ``where(all_finite, (y - amax(y)) * c, x - amax(x))``
    (both branches the same softmax of ``x``; the plain branch is taken)."""
    if _is(z, aten.sub.Tensor) and len(z.args) == 2:
        x, mx = z.args
        if _is(mx, aten.amax.default) and mx.args[0] is x and _last_dim(mx.args[1], nd):
            return x, 1.0
        return None
    if _is(z, *_WHERES) and len(z.args) == 3 and getattr(_val(z.args[0]), "dtype", None) == torch.bool:
        stable, plain = _shifted(z.args[1], nd), _shifted(z.args[2], nd)
        if stable is not None and plain is not None and plain[1] == 1.0 and _base(stable[0]) is _base(plain[0]):
            return plain
        return None
    y, c = _strip_scale(z)
    if y is not z:
        inner = _shifted(y, nd)
        if inner is not None and inner[1] == 1.0:
            x, sign = _strip_scale(inner[0])
            return _strip_convert(x), c * sign
    return None


def _softmax_input(p: Any) -> tuple[Any, float] | None:
    """``(s, f)`` when ``p = softmax(f * s, -1)`` as Inductor decomposes it (``exp(s - amax) / sum``, the scale
    possibly folded in by Inductor's ``softmax(x * c)`` pattern, see :func:`_shifted`), optionally behind a
    down-cast and SDPA's safe-softmax ``where(row_empty, 0, p)``; None if ``p`` is not one."""
    n = p
    if _is(n, prims.convert_element_type.default):
        n = n.args[0]
    nd = len(_shape(n))
    softmax_ops = tuple(op for op in (getattr(aten, "_softmax", None), getattr(aten, "_safe_softmax", None))
                        if op is not None and hasattr(op, "default"))
    if _is(n, *(op.default for op in softmax_ops)) and n.args[1] in (-1, nd - 1):
        x, f = n.args[0], 1.0
    else:
        if _is(n, *_WHERES) and len(n.args) == 3 and _scalar_value(n.args[1]) == 0.0 and \
                getattr(_val(n.args[0]), "dtype", None) == torch.bool:
            n = n.args[2]  # rows with no finite score -> 0 (SDPA's _safe_softmax); the op does the same
        if not (_is(n, aten.div.Tensor) and len(n.args) == 2):
            return None
        e, sm = n.args
        if not (_is(sm, aten.sum.dim_IntList) and sm.args[0] is e and _last_dim(sm.args[1], nd)
                and _is(e, aten.exp.default)):
            return None
        xf = _shifted(e.args[0], nd)
        if xf is None:
            return None
        x, f = xf
    return _strip_convert(x), f  # HF: softmax(..., dtype=torch.float32) of bf16 scores


def _strip_scale(n: Any) -> tuple[Any, float]:
    """``n`` without multiplications / divisions by Python numbers, and their product."""
    f = 1.0
    while _is(n, aten.mul.Tensor, aten.div.Tensor, aten.mul.Scalar, aten.div.Scalar) and len(n.args) == 2 \
            and isinstance(n.args[1], (int, float)) and not isinstance(n.args[1], bool) and n.args[1] != 0:
        f = f * n.args[1] if n.target in (aten.mul.Tensor, aten.mul.Scalar) else f / n.args[1]
        n = n.args[0]
    return n, f


def _qk_or_why(n: Any) -> tuple[Any, Any, float] | str:
    """``(q, k, scale)`` of scores ``n = c * reshape(bmm(reshape(a * q), reshape(b * k^T)))``, else why not."""
    n, c = _strip_scale(n)
    if _is(n, aten.mul.Tensor, aten.div.Tensor) and len(n.args) == 2 and not isinstance(n.args[1], (int, float)):
        return (f"the scores are scaled by {getattr(n.args[1], 'name', n.args[1])}, not a compile-time number "
                "(the op's scale is a float)")
    if _is(n, aten.bmm.default):
        return "the scores are a 3D bmm over (B*H, Lq, Lkv), not a (B, H, Lq, Lkv) view: the op takes (B, H, L, D)"
    if not (_is(n, *_RESHAPES) and len(_shape(n)) == 4 and _is(n.args[0], aten.bmm.default)):
        what = n.target if isinstance(n, Node) else n
        return (f"the softmax input is {what}, not c * (q @ k^T) viewed (B, H, Lq, Lkv), with a mask (if any) "
                "added or masked_fill(~m, -inf | finfo.min) after the scaling")
    q4, k4 = (_unflatten(x) for x in n.args[0].args)
    if q4 is None or k4 is None:
        return "the operands of the scores' bmm are not (B*H)-flattened 4D q and k^T"
    q, a = _strip_scale(q4)
    kt, b = _strip_scale(k4)
    if _is(kt, aten.permute.default) and list(kt.args[1]) == [0, 1, 3, 2]:
        k = kt.args[0]
    elif _is(kt, aten.transpose.int) and sorted(d % 4 for d in kt.args[1:3]) == [2, 3]:
        k = kt.args[0]
    else:
        return f"the scores' second bmm operand is {getattr(kt, 'target', kt)}, not k.transpose(-1, -2) of a 4D K"
    return q, k, a * b * c


def _qk(n: Any) -> tuple[Any, Any, float] | None:
    """``(q, k, scale)`` of scores ``n`` (see :func:`_qk_or_why`), or None."""
    r = _qk_or_why(n)
    return None if isinstance(r, str) else r


def _reaches(n: Any, targets: Any, depth: int, stop: tuple = ()) -> bool:
    """A node of ``targets`` (a tuple of targets, or a predicate on nodes) is ``n`` or within ``depth`` producers
    of it (not walking through ``stop``)."""
    if not (isinstance(n, Node) and n.op == "call_function"):
        return False
    if (targets(n) if callable(targets) else n.target in targets):
        return True
    if depth == 0 or n.target in stop:
        return False
    return any(_reaches(a, targets, depth - 1, stop) for a in n.all_input_nodes)


def _normalised_exp(n: Node) -> bool:
    """``n`` is a softmax op, or an ``exp`` that a row sum normalises (a softmax in some spelling)."""
    return n.target in _SOFTMAX_OPS or (n.target is aten.exp.default and
                                        any(_is(u, aten.sum.dim_IntList) for u in n.users))


#: Random sources of a dropout keep-mask in a post-grad graph.
_RANDOM_OPS = tuple(op for op in (getattr(prims, "inductor_random", None), getattr(aten, "rand", None),
                                  getattr(aten, "rand_like", None), getattr(aten, "bernoulli", None))
                    if op is not None)


def _is_random(n: Any, depth: int = 0) -> bool:
    """``n`` is computed (within 3 ops) from a random op: a dropout keep-mask such as ``rand > p``."""
    if not (isinstance(n, Node) and n.op == "call_function"):
        return False
    if getattr(n.target, "overloadpacket", None) in _RANDOM_OPS:
        return True
    return depth < 3 and any(_is_random(a, depth + 1) for a in n.all_input_nodes)


def _under_dropout(p: Any) -> Any:
    """The probabilities behind dropout ``p * keep * (1 / (1 - p_drop))`` with a random ``keep`` (SDPA's math
    form with ``dropout_p > 0``), else None."""
    n, random = p, False
    for _ in range(4):
        if not (_is(n, aten.mul.Tensor, aten.mul.Scalar, aten.div.Tensor, aten.div.Scalar) and len(n.args) == 2):
            break
        a, b = n.args
        if not isinstance(b, Node):
            n = a
            continue
        ra, rb = _is_random(a), _is_random(b)
        if ra == rb:
            break
        random, n = True, (b if ra else a)
    return n if random else None


#: Mask fill values at most this (float32 / bfloat16 ``finfo.min``) are absorbed by float32 addition: ``s + fill ==
#: fill`` for |s| < 2**103 (half an ulp of 2**127 is 2**103), so ``s + where(filled, fill, 0)`` is ``where(filled,
#: fill, s)`` exactly, and a fully masked row stays uniform as in eager.
_ABSORBING_FILL = -(2.0 ** 127)


def _fill_mask(s: Node) -> tuple[Any, MaskSource] | None:
    """``(scores, mask)`` of a ``where`` that fills masked scores: ``masked_fill(~m, v)`` -> ``where(~m, v, s)``,
    ``torch.where(m, s, v)``; None when ``s`` is no such ``where``; :class:`_Miss` for a fill the op cannot take.

    ``v = -inf`` gives the bool mask; a finite ``v <= -2**127`` (float32 / bfloat16 ``finfo.min``) the additive
    mask ``where(filled, v, 0)`` (exact, see ``_ABSORBING_FILL``); other values are refused."""
    if not (_is(s, *_WHERES) and len(s.args) == 3 and getattr(_val(s.args[0]), "dtype", None) == torch.bool):
        return None
    c, a, b = s.args
    for value, scores, keep in ((b, a, True), (a, b, False)):  # keep: where(c, s, v) keeps c; else fills c
        v = _scalar_value(value)
        sv = _val(scores)
        if v is None or not isinstance(sv, torch.Tensor) or _qk(scores) is None:
            continue
        v = float(torch.tensor(v, dtype=sv.dtype))  # the fill as the scores hold it
        if v == -math.inf:
            if keep:
                return scores, MaskSource(_strip_expand(c), "bool", "masked_fill(~m, -inf)")
            inner = c.args[0] if _is(c, aten.logical_not.default, aten.bitwise_not.default) else None
            return scores, (MaskSource(_strip_expand(inner), "bool", "masked_fill(~m, -inf)") if inner is not None
                            else MaskSource(c, "bool", "masked_fill(m, -inf)", invert=True))
        if math.isfinite(v) and v <= _ABSORBING_FILL:
            return scores, MaskSource(_strip_expand(c), "additive", f"masked_fill(~m, {v:.6g}) (finfo.min) as the "
                                      f"additive where(~m, {v:.6g}, 0)", invert=keep, fill=(v, sv.dtype))
        raise _Miss(f"masked_fill / where with the fill {v:g} ({dtype_name(sv)} scores): not -inf and not a finite "
                    "fill <= -2**127 that float32 addition absorbs, so the op's additive mask would make a fully "
                    "masked row softmax(s + fill) ~ softmax(s) where eager's is uniform, and a bool mask would make "
                    "it zeros; fill with -inf or torch.finfo(torch.float32 / bfloat16).min")
    return None


_SOFTMAX_OPS = tuple(op.default for op in (getattr(aten, "_softmax", None), getattr(aten, "_safe_softmax", None))
                     if op is not None and hasattr(op, "default"))


def math_candidate(bmm2: Node) -> Candidate | None:
    """The :class:`Candidate` of a decomposed attention ending in ``bmm2`` (``softmax(q k^T * s + m) @ v``),
    None when ``bmm2`` is not one; :class:`_Miss` when it is one that cannot be rewritten (any softmax over the
    output of a bmm feeding ``bmm2``: none of them is skipped silently)."""
    p_raw = bmm2.args[0]
    p4, v4 = (_unflatten(x) for x in bmm2.args)
    p = p4 if p4 is not None else p_raw
    sf = _softmax_input(p)
    if sf is None:
        inner = _under_dropout(p)
        if inner is not None and _softmax_input(inner) is not None:
            raise _Miss("dropout on the attention probabilities (a random keep-mask in the graph, SDPA's math "
                        "form with dropout_p > 0): the op has no dropout")
        if _reaches(p_raw, _normalised_exp, 6, stop=(aten.bmm.default,)) and \
                _reaches(p_raw, (aten.bmm.default,), 12):
            raise _Miss("the bmm's left operand is an exp / softmax of bmm scores in a spelling the pass does not "
                        "recognise as softmax(s, -1) (exp(s - amax(s)) / sum, its scale-folded or safe forms)")
        return None
    s, factor = sf
    if not _reaches(s, (aten.bmm.default,), 8):
        return None  # a softmax over something other than q @ k^T (e.g. routing weights): not attention
    # from here on the graph holds softmax(bmm(...)) @ v: every refusal is a near-miss with its reason
    users = list(bmm2.users)
    if len(users) != 1 or not _is(users[0], *_RESHAPES) or len(_shape(users[0])) != 4 or p4 is None or v4 is None:
        raise _Miss("the attention is a 3D bmm over (B*H, L, D) (P @ V not a view of (B, H, Lq, Dv) / its "
                    "operands not flattened 4D tensors): the op takes (B, H, L, D)")
    out = users[0]
    mask = MaskSource(None, "none")
    scores = s
    # softmax(factor * s) with factor != 1 (Inductor's scale-folded softmax): a mask inside s would be scaled
    # too, so only s = c * q @ k^T is taken there
    if factor != 1.0:
        filled = None
    elif _is(s, aten.add.Tensor) and len(s.args) == 2 and all(isinstance(x, Node) for x in s.args):
        filled = None
        for i in (0, 1):
            if _qk(s.args[i]) is not None:
                scores, mask = s.args[i], mask_source(s.args[1 - i])
                break
    else:
        filled = _fill_mask(s)
    if filled is not None:
        scores, mask = filled
    qk = _qk_or_why(scores)
    if isinstance(qk, str):
        if scores is s and _is(s, aten.add.Tensor, *_WHERES):  # report the operand that holds the bmm
            sides = [x for x in s.args if isinstance(x, Node) and _reaches(x, (aten.bmm.default,), 8)]
            if len(sides) == 1:
                qk = _qk_or_why(sides[0])
        raise _Miss(qk if isinstance(qk, str) else "the scores' mask spelling is not an additive / bool mask or "
                    "masked_fill(~m, -inf | finfo.min)")
    q, k, scale = qk
    scale = scale * factor
    qs, ks_, vs_, ss, os_ = (_shape(x) for x in (q, k, v4, scores, out))
    if not (len(qs) == len(ks_) == len(vs_) == 4 and len(ss) == 4 and len(os_) == 4):
        raise _Miss(f"q/k/v/scores/output ranks {len(qs)}/{len(ks_)}/{len(vs_)}/{len(ss)}/{len(os_)}, not 4D")
    want_s, want_o = (qs[0], qs[1], qs[2], ks_[2]), (qs[0], qs[1], qs[2], vs_[3])
    if not (all(_eq(a, b) for a, b in zip(ss, want_s, strict=True))
            and all(_eq(a, b) for a, b in zip(os_, want_o, strict=True)) and _eq(vs_[2], ks_[2])):
        raise _Miss(f"scores {ss} / output {os_} are not (B, H, Lq, Lkv) / (B, H, Lq, Dv) of q {qs}, k {ks_}, "
                    f"v {vs_}: the (B*H) flattening is not undone in (B, H, L, D) order (q broadcast over K/V's "
                    "heads?)")
    # every node between the inputs and the output must feed only this attention (else: probabilities or
    # scores returned, e.g. output_attentions), or the rewrite would compute them twice
    inside, todo = set(), [bmm2]
    stop = {q, k, v4} | ({mask.node} if mask.node is not None else set())
    while todo:
        n = todo.pop()
        if n in inside or n in stop or not isinstance(n, Node) or n.op != "call_function":
            continue
        inside.add(n)
        todo.extend(a for a in n.all_input_nodes)
    # only the nodes computed from the scores (bmm(q, k^T) onwards) must be private: the operand preparation
    # (q/k/v flattening views, mask conversions) may also feed another attention over the same K/V
    bmm1 = _strip_scale(scores)[0].args[0]
    on_scores: set[Node] = set()
    for n in bmm2.graph.nodes:  # topological order
        if n in inside and (n is bmm1 or any(a in on_scores for a in n.all_input_nodes)):
            on_scores.add(n)
    for n in inside:
        if not n.all_input_nodes or n not in on_scores:
            continue  # constants (full / scalar_tensor) and operand preparation may be shared
        extra = [u for u in n.users if u not in inside and u is not out]
        if extra:
            raise _Miss(f"{n.name} (attention scores / probabilities) is also used by {extra[0].name} "
                        "(output_attentions?): rewriting would compute the attention twice")
    return Candidate(out, False, q, k, v4, mask, scale, "the math form (bmm, softmax, bmm)")


class AttentionPass:
    """The decode-attention pass (see module docstring)."""

    name = "attention"
    ops = ops_of(name)

    def __call__(self, graph: Graph, ctx: PassContext) -> None:
        for target in SDPA_TARGETS:
            for sdpa in list(graph.find_nodes(op="call_function", target=target)):
                anchor, where = sdpa.name, location_of(sdpa)
                try:
                    rewrite(graph, ctx, sdpa_candidate(sdpa))
                except _Miss as e:
                    ctx.near_miss(anchor, NearMiss("attention", "attention (SDPA)", str(e), where))
        for bmm in list(graph.find_nodes(op="call_function", target=aten.bmm.default)):
            anchor, where = bmm.name, location_of(bmm)
            try:
                cand = math_candidate(bmm)
                if cand is not None:
                    rewrite(graph, ctx, cand)
            except _Miss as e:
                ctx.near_miss(anchor, NearMiss("attention", "attention (bmm, softmax, bmm)", str(e), where))
        graph.eliminate_dead_code()
