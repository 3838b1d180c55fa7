"""``rocm_fused::decode_attention``: attention of a few query tokens over a (static) KV cache, GQA native.

Meaning (pure-torch reference: :func:`rocm_inductor.providers.reference.decode_attention_ref`), per batch
``b``, query head ``h`` and query position ``i``, with ``g = Hq // Hkv`` and kv head ``h // g`` (the head
mapping of HF's ``repeat_kv`` and gpt-fast's ``repeat_interleave(g, dim=1)``):

    s_j  = scale * <q[b, h, i], k[b, h // g, j]>                      (float32)
    s_j += mask[b, h, i, j]            (additive float mask, broadcast)   or
    s_j  = -inf where not mask[b, h, i, j]   (boolean mask, True = attend: SDPA's convention)
    out[b, h, i] = sum_j softmax(s)_j * v[b, h // g, j]                (float32, rounded once to q.dtype)

With ``sinks`` (one logit per query head, GPT-OSS's attention sinks: transformers
models/gpt_oss/modeling_gpt_oss.py ``eager_attention_forward``, ``softmax(cat([s, sink], -1))[..., :-1]``) the
sink joins the softmax's max and denominator and contributes no value:

    m = max(max_j s_j, sinks[h]);   out[b, h, i] = sum_j exp(s_j - m) v[b, h // g, j] / (sum_j exp(s_j - m)
                                                                                        + exp(sinks[h] - m))

With ``positions`` (B|1, Lq|1) int32/int64, the absolute position ``p`` of each query row, and ``window``
(0: none), the causal / sliding-window mask of a static cache is part of the op: slot ``j`` is kept iff
``j <= p`` and (``window > 0``) ``j > p - window`` (HF's ``causal_mask`` / ``sliding_window_overlay``); a
``mask`` given too removes more. Providers compute it from the positions instead of reading a mask tensor.

With ``softcap > 0`` (Gemma2 / Gemma3's ``attn_logit_softcapping``: transformers models/gemma2/modeling_gemma2.py
``eager_attention_forward``, ``w = tanh(w / softcap) * softcap`` after the scaling, before the mask) the scaled
score is capped first, in float32: ``s_j = softcap * tanh(scale * <q, k_j> / softcap)``, then masked. ``0``: none
(the op as it was without it).

A row whose every score is ``-inf`` (the mask removes every key) returns zeros: without sinks as SDPA does on
torch >= 2.5 (``_safe_softmax``; seen on torch 2.13 CPU for boolean and additive masks), with sinks because the
denominator is the sink's alone (what GPT-OSS's eager code gives for such a row, ``finfo.min`` or ``-inf``
masked). ``sinks=None`` is the op without sinks, bit for bit. Scores, softmax and the weighted
sum are float32; the output is rounded once (eager's flash/efficient kernels also round the probabilities to
the input dtype before ``P @ V``; one rounding is within the numerics contract, docs/ops.md). The op never repeats K/V:
providers read each kv head once for its ``g`` query heads.

Shapes: q (B, Hq, Lq, D); k (B, Hkv, Lkv, D); v (B, Hkv, Lkv, Dv); ``Hq % Hkv == 0``; mask ``None`` or 4D
broadcastable to (B, Hq, Lq, Lkv) (each dim 1 or full), bool or a float dtype. q, k, v share one dtype
(float16/bfloat16/float32) and device; sinks ``None`` or (Hq,) float32 or q's dtype (GPT-OSS keeps them in the
model's dtype), q's device. Output (B, Hq, Lq, Dv), contiguous, q's dtype. B = 0 gives an empty
output. Functional (``mutates_args=()``).

Compile-time spec keys read by providers' ``check`` (built by :func:`attention_spec`):
    dtype, head_dim, v_head_dim, q_len, kv_len (int or None when symbolic), num_q_heads, num_kv_heads,
    mask_kind ("none" | "bool" | "additive"), mask_dtype (None without a mask), mask_shape (tuple of int or
    None per dim), last_dim_contiguous (bool: q, k, v and mask all have unit stride in their last dim, or the
    dim has size 1), cudagraphs (bool: Inductor will capture the graph), sinks_dtype (None without sinks),
    positions_dtype (None without positions), window (int), softcap (float, 0.0: none), device (q's
    ``torch.device``; not part of a store signature).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.fx.experimental.symbolic_shapes import statically_known_true

from ..providers import get_provider

#: dtypes the op is defined for.
DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _validate(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
              sinks: torch.Tensor | None = None, positions: torch.Tensor | None = None, window: int = 0,
              softcap: float = 0.0) -> None:
    if not (softcap >= 0.0 and softcap < float("inf")):
        raise ValueError(f"decode_attention: softcap={softcap} must be finite and >= 0 (0: none)")
    if q.dtype not in DTYPES:
        raise ValueError(f"decode_attention takes float16/bfloat16/float32, q is {q.dtype}")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"decode_attention: q, k, v dtypes differ ({q.dtype}, {k.dtype}, {v.dtype})")
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ValueError("decode_attention: q, k, v must be 4D (B, H, L, D)")
    b, hq, _, d = q.shape
    if k.shape[0] != b or v.shape[0] != b or k.shape[1] != v.shape[1] or k.shape[2] != v.shape[2]:
        raise ValueError(f"decode_attention: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)} "
                         "do not agree on batch / kv heads / kv length")
    if k.shape[3] != d:
        raise ValueError(f"decode_attention: q head_dim {d} != k head_dim {k.shape[3]}")
    hkv = k.shape[1]
    if hkv == 0 or hq % hkv != 0:
        raise ValueError(f"decode_attention: {hq} query heads are not a multiple of {hkv} kv heads")
    if mask is not None:
        if mask.ndim != 4:
            raise ValueError(f"decode_attention: mask must be 4D, got {mask.ndim}D")
        full = (b, hq, q.shape[2], k.shape[2])
        for i, (m, f) in enumerate(zip(mask.shape, full, strict=True)):
            if m != 1 and m != f:
                raise ValueError(f"decode_attention: mask shape {tuple(mask.shape)} does not broadcast to "
                                 f"{full} (dim {i})")
        if mask.dtype != torch.bool and not mask.dtype.is_floating_point:
            raise ValueError(f"decode_attention: mask must be bool or float, got {mask.dtype}")
    if sinks is not None:
        if sinks.ndim != 1 or sinks.shape[0] != hq:
            raise ValueError(f"decode_attention: sinks must be ({hq},) (one logit per query head), got "
                             f"{tuple(sinks.shape)}")
        if sinks.dtype not in (torch.float32, q.dtype):
            raise ValueError(f"decode_attention: sinks must be float32 or q's dtype {q.dtype}, got {sinks.dtype}")
    if positions is not None:
        if positions.ndim != 2 or positions.shape[0] not in (1, b) or positions.shape[1] not in (1, q.shape[2]):
            raise ValueError(f"decode_attention: positions must be (B|1, Lq|1) = ({b}|1, {q.shape[2]}|1), got "
                             f"{tuple(positions.shape)}")
        if positions.dtype not in (torch.int32, torch.int64):
            raise ValueError(f"decode_attention: positions must be int32/int64, got {positions.dtype}")
    if window < 0 or (window and positions is None):
        raise ValueError(f"decode_attention: window={window} needs positions and must be >= 0")
    extra = tuple(t for t in (mask, sinks, positions) if t is not None)
    for t in (k, v) + extra:
        if t.device != q.device:
            raise ValueError(f"decode_attention: tensors on {q.device} and {t.device}")


@torch.library.custom_op("rocm_fused::decode_attention", mutates_args=())
def decode_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                     scale: float, provider: str, sinks: torch.Tensor | None = None,
                     positions: torch.Tensor | None = None, window: int = 0, softcap: float = 0.0) -> torch.Tensor:
    """Attention of q over an un-repeated (GQA) KV cache (see module docstring for the exact meaning).

    Args:
        q: (B, Hq, Lq, D) float16/bfloat16/float32.
        k: (B, Hkv, Lkv, D), v: (B, Hkv, Lkv, Dv), q's dtype; ``Hq % Hkv == 0``.
        mask: None, or 4D broadcastable to (B, Hq, Lq, Lkv): bool (True = attend) or float (added).
        scale: multiplies q.k (SDPA's ``scale``; ``1/sqrt(D)`` when the model gave none).
        provider: provider name chosen at compile time (``"reference"``, ``"triton"``); the last positional
            argument, as in every op of ours.
        sinks: None, or (Hq,) float32 / q's dtype: per-head sink logits (module docstring). A keyword with a
            default, so a call or graph without sinks is the op as it was before sinks existed.
        positions: None, or (B|1, Lq|1) int32/int64 absolute query positions: the causal mask in the op
            (module docstring). window: sliding-window length in slots (0: none; needs positions).
        softcap: the logit soft cap (Gemma2: 50.0): ``softcap * tanh(s / softcap)`` of the scaled scores before
            the mask; 0.0: none.

    Returns:
        (B, Hq, Lq, Dv) contiguous tensor of q's dtype.

    Raises:
        ValueError: shapes, dtypes or devices outside the module docstring's rules.
        KeyError: unknown provider. ProviderUnavailable: its library cannot be imported here.
    """
    _validate(q, k, v, mask, sinks, positions, window, softcap)
    if q.shape[0] == 0 or q.shape[2] == 0:
        return q.new_empty(q.shape[:3] + v.shape[3:])
    kw: dict[str, Any] = {} if sinks is None else {"sinks": sinks}
    if positions is not None:  # only then: a provider without the positions form is called as before
        kw.update(positions=positions, window=window)
    if softcap:  # only then: a provider without the softcap form is called as before
        kw["softcap"] = float(softcap)
    return get_provider(provider).decode_attention(q, k, v, mask, scale, **kw).contiguous()


@decode_attention.register_fake
def _decode_attention_fake(q, k, v, mask, scale, provider, sinks=None, positions=None, window=0, softcap=0.0):
    _validate(q, k, v, mask, sinks, positions, window, softcap)
    return q.new_empty(q.shape[:3] + v.shape[3:])


def _int_or_none(s: Any) -> int | None:
    return s if isinstance(s, int) else None


def _last_dim_ok(t: Any) -> bool:
    return statically_known_true(t.shape[-1] == 1) or statically_known_true(t.stride(-1) == 1)


def attention_spec(q: Any, k: Any, v: Any, mask: Any | None, cudagraphs: bool = False,
                   sinks: Any | None = None, positions: Any | None = None, window: int = 0,
                   softcap: float = 0.0) -> dict[str, Any]:
    """Build the compile-time spec of a decode-attention match from fake tensors (``node.meta["val"]``).

    Args:
        q, k, v: fake tensors of the op's q, (un-repeated) k and v; mask: the mask's fake tensor or None.
        cudagraphs: whether Inductor will capture the compiled graph; sinks: the sinks' fake tensor or None;
        positions: the positions' fake tensor or None; window: the sliding window (0: none); softcap: the logit
        soft cap (0.0: none).

    Returns:
        dict with the keys listed in the module docstring.
    """
    tensors = (q, k, v) + (() if mask is None else (mask,))
    if mask is None:
        kind = "none"
    else:
        kind = "bool" if mask.dtype == torch.bool else "additive"
    return {
        "dtype": q.dtype,
        "batch": _int_or_none(q.shape[0]),
        "head_dim": _int_or_none(q.shape[-1]),
        "v_head_dim": _int_or_none(v.shape[-1]),
        "q_len": _int_or_none(q.shape[2]),
        "kv_len": _int_or_none(k.shape[2]),
        "num_q_heads": _int_or_none(q.shape[1]),
        "num_kv_heads": _int_or_none(k.shape[1]),
        "mask_kind": kind,
        "mask_dtype": None if mask is None else mask.dtype,
        "mask_shape": None if mask is None else tuple(_int_or_none(s) for s in mask.shape),
        "last_dim_contiguous": all(_last_dim_ok(t) for t in tensors),
        "cudagraphs": cudagraphs,
        "sinks_dtype": None if sinks is None else sinks.dtype,
        "positions_dtype": None if positions is None else positions.dtype,
        "window": int(window),
        "softcap": float(softcap),
        "device": q.device,
    }
