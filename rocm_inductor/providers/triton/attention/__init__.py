"""Triton split-KV flash-decoding for ``rocm_fused::decode_attention`` (GQA packed per program, mask skip).

Meaning: :func:`rocm_inductor.providers.reference_attention.decode_attention_ref` (see ``ops/attention.py``).
Math: online softmax (Milakov & Gimelshein 2018) as in FlashAttention (Dao et al. 2022), with the KV length
split across programs and a second pass combining the splits (flash-decoding, Dao et al. 2023).

Layout: grid ``(B * Hkv * MB, NSPLIT)``. A program serves one batch row ``b``, one kv head ``hk``, one slice
of ``BLOCK_M`` of the ``M = g * Lq`` (query head, query position) rows that share ``hk`` (``g = Hq // Hkv``;
row ``r`` is query head ``hk * g + r // Lq`` at position ``r % Lq``; MB = cdiv(M, BLOCK_M), 1 in decode), and
one split: a contiguous range of ``split_len`` KV slots (a multiple of ``BLOCK_N``). Packing the ``g`` heads
and ``Lq`` rows into the M dim of ``tl.dot`` (padded to >= 16) means K and V are read once per kv head (not
``g`` times, as SDPA over HF's ``repeat_kv`` copies does). Per KV block:

1. with a mask, load its ``(BLOCK_M, BLOCK_N)`` tile first (broadcast dims have stride 0; a mask broadcast
   over heads and query positions, HF's decode ``(B, 1, 1, L)``, loads one ``BLOCK_N`` row); ``keep`` = bool
   True or additive ``!= -inf``. If no row of the program keeps any slot of the block (a scalar ``tl.max``),
   skip the block: its K and V are never loaded. Inside a kept block, slots no row keeps are not loaded
   either (predicated loads, ``other=0``), so NaN or garbage in removed cache slots cannot leak in.
2. ``S = (Q K^T) * scale (+ additive mask)`` in float32, removed entries ``-inf``; online softmax in natural
   units for the running max (an additive ``finfo.min`` mask therefore behaves like SDPA: a row with only
   such entries averages them), ``exp2`` of ``(s - m) * log2(e)``; ``P`` rounded to the K/V dtype for
   ``P @ V`` (as FlashAttention does; float32 inputs use IEEE float32 dots), float32 accumulator. Under
   ``TRITON_INTERPRET=1`` bfloat16 dots are done on float32 copies (the interpreter's bfloat16 ``tl.dot``
   returned garbage, triton 3.9 on CPU, 2026-12-01), with the same rounding of ``P``.
3. ``NSPLIT == 1``: write ``acc / l`` (``l == 0``, a row nothing kept: zeros) rounded once to q's dtype.
   Otherwise write the float32 partial ``(acc, m, l)`` and merge the splits of each row in a fixed order
   (deterministic): in one launch, the last split program of each (batch, kv head, M tile) to arrive (a
   per-tile int32 counter, ``atomic_add`` acq_rel at gpu scope after a CTA barrier) merges the tile's rows and
   puts the counter back to 0, so the next launch and every CUDA-graph replay start from zeros; or in two
   launches, ``_combine_kernel`` (grid ``B * Hq * Lq``) after the split kernel. One launch is taken where
   ``config.one_launch_wanted`` says so and it is safe (:func:`_counters`: the device's counter buffer exists,
   reserved by :func:`check` at compile time or by an eager launch outside a capture, and is large enough;
   launches of one device run one at a time, as on one stream).
4. Sinks (GPT-OSS): the row's sink logit joins the final max and adds ``exp(sink - m)`` to ``l`` only, where
   the row is written: the unsplit program's store, or the combine of the splits (the split programs do not
   read it). A row nothing kept then has ``l = 1``, ``acc = 0``: zeros, as GPT-OSS's eager code gives.
5. Positions (``positions=``, ``window=``): the causal / sliding-window mask is computed from each row's query
   position (slot ``j`` kept iff ``j <= pos`` and ``j > pos - window``), so no mask is read and each tile's
   slot range ``[min pos - window + 1, max pos]`` is split evenly across its programs (no empty splits, no
   per-block skip branch: the loads can be pipelined). A mask, when also given, removes more.
6. Softcap (Gemma2 / Gemma3, ``softcap=``): the float32 scores ``s * scale`` become ``cap * tanh(s * scale /
   cap)`` (``kernels._softcap``) in every block before the mask, so the split and one-launch forms and the
   combine are unchanged (the cap is applied per score, before the online softmax).

Capture-safe: no host sync; the launch shape and constexprs come from static shapes only (the mask and
any lengths are read on the device); partial buffers come from ``torch.empty`` (the caching allocator).

Launch choice (``config.pick``): the tuning store's ``decode_attention`` entry of the shape (splits, BLOCK_N,
warps, stages, one launch, block skip; the H200's shipped entries are the sweep's fastest configs,
benchmarks/results/runs/attention_sweep.csv), else ``config.launch_config``: ``NSPLIT`` a power of two from
(B, Hkv, Lkv, MB) and the SM count, aiming at ``PROGRAMS_PER_SM`` programs per SM with at least
``MIN_SPLIT_LEN`` slots per split; ``BLOCK_N`` from the head dim, the row tile and the platform
(``config.block_sizes``). ROCm not measured. Files: ``config.py`` (limits, configs), ``kernels.py`` (the
kernels), ``aot.py`` (the AOT compile cases).

Performance (H200, per layer, 513 of 1024 slots kept, benchmarks/results/runs/attention_layer.csv): Llama-3.2-1B
5.5 / 7.6 / 17.2 us at B = 1 / 8 / 32 (2.2x the HBM floor of the kept K/V at B = 32). Skipped blocks are not
free: each still costs its mask load, one dependent round trip per block, which is why flex_attention (whose
block mask lists the kept blocks up front) stays ahead at Qwen3-0.6B B = 32 with 4096 slots (35.8 vs 44.1 us).

Limits (``config.check``): q/k/v float16/bfloat16/float32, head_dim and v head_dim <= 256, last dim contiguous,
mask None / bool / float16 / bfloat16 / float32, 4D, each dim 1 or full; positions int32/int64; query length
<= ``MAX_Q_LEN`` (longer queries are prefill: Inductor's flash kernels are built for those).
"""

from __future__ import annotations

from typing import Any

import torch

from .aot import aot_cases
from .config import (
    CONFIG_KEYS,
    INPUT_DTYPES,
    MASK_DTYPES,
    MAX_COUNTERS,
    MAX_HEAD_DIM,
    MAX_Q_LEN,
    MAX_SPLITS,
    MIN_SPLIT_LEN,
    ONE_LAUNCH_ENV,
    POS_DTYPES,
    PROGRAMS_PER_SM,
    block_sizes,
    combine_warps,
    default_stages,
    launch_config,
    one_launch_wanted,
    pick,
    stored_config,
    variant,
)
from .config import (
    check as _limits,
)
from .kernels import _combine_kernel, _split_kernel

__all__ = ["CONFIG_KEYS", "INPUT_DTYPES", "MASK_DTYPES", "MAX_COUNTERS", "MAX_HEAD_DIM", "MAX_Q_LEN", "MAX_SPLITS",
           "MIN_SPLIT_LEN", "ONE_LAUNCH_ENV", "POS_DTYPES", "PROGRAMS_PER_SM", "aot_cases", "block_sizes", "check",
           "combine_warps", "decode_attention", "launch_config", "one_launch_wanted", "pick", "reserve_counters",
           "stored_config",
           "_combine_kernel", "_split_kernel"]

#: Tests and the level-2 tuner (``tuning/worker.py:forced_config``): force this many splits / this BLOCK_N.
FORCE_SPLITS: int | None = None
FORCE_BLOCK_N: int | None = None
#: SM count used under the interpreter (CPU tests): small, so the default there is one split.
INTERP_SMS = 1
#: The one-launch form's split counters, one int32 buffer of MAX_COUNTERS per device (zeros; every launch leaves
#: them zero), never freed: captured graphs keep using it. Reserved by :func:`check` at compile time, so a compiled
#: graph's first launch finds it; an eager launch outside a capture allocates it itself.
_COUNTERS: dict[str, torch.Tensor] = {}


def reserve_counters(device: torch.device) -> None:
    """Allocate ``device``'s counter buffer (MAX_COUNTERS int32, 256 KiB) unless it exists or a CUDA-graph
    capture is running (a buffer allocated there would be zeroed by the graph and belong to its pool).

    A compiled graph needs it reserved before it runs: cudagraph trees' warmup run allocates in the graph's pool,
    and a buffer a launch allocated there fails its check ("Detected 1 tensor(s) in the cudagraph pool not
    tracked as outputs", seen on the H100 on the first one-launch compile of a process)."""
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())  # the key a launch looks up: str(q.device)
    key = str(device)
    if key in _COUNTERS or (device.type == "cuda" and torch.cuda.is_current_stream_capturing()):
        return
    _COUNTERS[key] = torch.zeros(MAX_COUNTERS, dtype=torch.int32, device=device)


def check(spec: dict[str, Any]) -> str | None:
    """``config.check``'s limits; where they take a GPU call, also reserves its device's counters (compile time,
    outside any graph pool: :func:`reserve_counters`)."""
    reason = _limits(spec)
    dev = spec.get("device")
    if reason is None and isinstance(dev, torch.device) and dev.type == "cuda" and torch.cuda.is_available():
        reserve_counters(dev)
    return reason


def _counters(device: torch.device, n: int) -> torch.Tensor | None:
    """The device's counter buffer when the one-launch form is safe for ``n`` tiles, else None (two launches):
    more tiles than :data:`MAX_COUNTERS`, or none reserved yet and a CUDA-graph capture is running."""
    if n > MAX_COUNTERS:
        return None
    reserve_counters(device)
    return _COUNTERS.get(str(device))


def _mask_strides(mask: torch.Tensor) -> tuple[int, int, int, int]:
    """The mask's strides with 0 for every size-1 (broadcast) dim."""
    return tuple(0 if mask.shape[i] == 1 else mask.stride(i) for i in range(4))  # type: ignore[return-value]


def _validate(q, k, v, mask, sinks, positions) -> None:
    hq = q.shape[1]
    if q.dtype not in INPUT_DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"triton decode attention: dtypes {q.dtype}, {k.dtype}, {v.dtype}")
    if max(q.shape[3], v.shape[3]) > MAX_HEAD_DIM:
        raise ValueError(f"triton decode attention: head dims {q.shape[3]}/{v.shape[3]} > {MAX_HEAD_DIM}")
    if sinks is not None and (sinks.dtype not in INPUT_DTYPES or sinks.shape != (hq,)):
        raise ValueError(f"triton decode attention: sinks {tuple(sinks.shape)} {sinks.dtype}, want ({hq},) float")
    if positions is not None and (positions.dtype not in POS_DTYPES or positions.ndim != 2):
        raise ValueError(f"triton decode attention: positions {tuple(positions.shape)} {positions.dtype}, want "
                         "(B|1, Lq|1) int32/int64")
    if mask is not None and mask.dtype not in MASK_DTYPES:
        raise ValueError(f"triton decode attention: mask dtype {mask.dtype}")
    for name, t in (("q", q), ("k", k), ("v", v)) + ((("mask", mask),) if mask is not None else ()):
        if t.shape[-1] != 1 and t.stride(-1) != 1:
            raise ValueError(f"triton decode attention: {name} is not contiguous in its last dim")


def decode_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, scale: float,
                     num_splits: int | None = None, block_n: int | None = None,
                     sinks: torch.Tensor | None = None, positions: torch.Tensor | None = None, window: int = 0,
                     inline_combine: bool | None = None, config: dict | None = None,
                     softcap: float = 0.0) -> torch.Tensor:
    """Split-KV flash-decoding over un-repeated GQA K/V (package docstring; meaning in ``ops/attention.py``).

    Args:
        q: (B, Hq, Lq, D); k: (B, Hkv, Lkv, D); v: (B, Hkv, Lkv, Dv); float16/bfloat16/float32, one dtype,
            last dim contiguous (other strides free), ``Hq % Hkv == 0``, D and Dv <= 256.
        mask: None or 4D broadcastable to (B, Hq, Lq, Lkv), bool (True = attend) or float16/bfloat16/float32
            (added to the scores; ``-inf`` entries count as removed and let blocks be skipped).
        scale: multiplies q.k.
        num_splits, block_n: launch overrides (tests and tuning); ``None`` = ``config.pick``'s choice.
        sinks: None or (Hq,) float32 / q's dtype per-head sink logits (GPT-OSS; package doc, step 4).
        positions: None or (B|1, Lq|1) int32/int64: the absolute position of each query row (package doc,
            step 5); slot ``j`` is kept iff ``j <= pos`` (and ``j > pos - window`` when ``window > 0``).
        window: sliding-window length in slots (0: none); only with ``positions``.
        inline_combine: True / False forces the one-launch / two-launch form (True still falls back to two
            launches where one is unsafe); None: ``config.one_launch_wanted``.
        config: config fields (``config.CONFIG_KEYS``) replacing the store entry's (the benchmark's sweep).
        softcap: logit soft cap (Gemma2 ``attn_logit_softcapping``; package doc, step 6); 0.0: none.

    Returns:
        (B, Hq, Lq, Dv) contiguous, q's dtype. Rows with nothing kept are zeros (with or without sinks).

    Raises:
        ValueError: a last dim not contiguous, a head dim over 256, or a dtype or shape outside the limits.
    """
    from .. import interpreting

    _validate(q, k, v, mask, sinks, positions)
    if not 0.0 <= softcap < float("inf"):
        raise ValueError(f"triton decode attention: softcap {softcap}, want finite and >= 0 (0: none)")
    bsz, hq, lq, d = q.shape
    hkv, lkv, dv = k.shape[1], k.shape[2], v.shape[3]
    out = torch.empty((bsz, hq, lq, dv), dtype=q.dtype, device=q.device)
    if out.numel() == 0:
        return out
    interp = interpreting()
    sms = INTERP_SMS if interp or q.device.type != "cuda" else config_sms(q.device)
    g = hq // hkv
    kind = "none" if mask is None else "bool" if mask.dtype == torch.bool else "additive"
    cfg = pick(bsz, hq, hkv, lq, lkv, d, dv, q.dtype, sms, num_splits or FORCE_SPLITS, block_n or FORCE_BLOCK_N,
               fields=config, call=variant(kind, window, sinks is not None, softcap, positions is not None))
    if mask is None:
        mptr, ms, has_mask, mbool, mrow_only = q, (0, 0, 0, 0), False, False, False
    else:
        mbool = mask.dtype == torch.bool
        mptr = mask.view(torch.uint8) if mbool else mask
        ms, has_mask = _mask_strides(mask), True
        mrow_only = ms[1] == 0 and ms[2] == 0  # the same mask row for every query head and position
    if positions is None:
        pptr, ps = q, (0, 0)
    else:
        pptr = positions
        ps = tuple(0 if positions.shape[i] == 1 else positions.stride(i) for i in range(2))
    ns = cfg["NSPLIT"]
    tiles = bsz * hkv * cfg["MB"]
    counter = None
    if ns > 1 and one_launch_wanted(cfg.get("one_launch"), inline_combine):
        counter = _counters(q.device, tiles)
    if ns > 1:
        rows = bsz * hq * lq
        op = torch.empty((rows, ns, dv), dtype=torch.float32, device=q.device)
        mp = torch.empty((rows, ns), dtype=torch.float32, device=q.device)
        lp = torch.empty((rows, ns), dtype=torch.float32, device=q.device)
    else:
        op = mp = lp = out
    sptr = q if sinks is None else sinks.contiguous()  # (Hq,): a view of the model's parameter, no copy
    stages = cfg.get("num_stages")
    skip = cfg["SKIP"] and has_mask  # positions without a mask: nothing to skip, the loads can pipeline
    if stages is None and not skip:
        stages = default_stages(cfg["BLOCK_N"], cfg["BLOCK_D"], cfg["BLOCK_DV"], q.element_size())
    extra = {} if stages is None else {"num_stages": int(stages)}
    _split_kernel[(tiles, ns)](
        q, k, v, mptr, sptr, pptr, out, op, mp, lp, q if counter is None else counter,
        q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2), *ms, *ps,
        hq, lq, lkv, cfg["SPLIT_LEN"], ns, cfg["MB"], int(window) if positions is not None else 0, float(scale),
        float(softcap) if softcap else 1.0,
        HKV=hkv, G=g, D=d, DV=dv, BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_D=cfg["BLOCK_D"],
        BLOCK_DV=cfg["BLOCK_DV"], HAS_MASK=has_mask, MASK_BOOL=mbool, MASK_ROW=mrow_only, WRITE_PARTIAL=ns > 1,
        IEEE=q.dtype == torch.float32, UPCAST_DOT=interp and q.dtype == torch.bfloat16, MANUAL_BF16=interp,
        HAS_SINKS=sinks is not None and (ns == 1 or counter is not None), HAS_POS=positions is not None,
        HAS_WINDOW=positions is not None and window > 0, SKIP=skip, INLINE_COMBINE=counter is not None,
        BLOCK_S=triton_next_pow2(ns) if counter is not None else 1, HAS_SOFTCAP=softcap > 0,
        num_warps=cfg["num_warps"], **extra,
    )
    if ns > 1 and counter is None:
        bs = triton_next_pow2(ns)
        _combine_kernel[(bsz * hq * lq,)](out, op, mp, lp, sptr, ns, hq, lq, DV=dv, BLOCK_S=bs,
                                          BLOCK_DV=cfg["BLOCK_DV"], MANUAL_BF16=interp, HAS_SINKS=sinks is not None,
                                          num_warps=combine_warps(bs, cfg["BLOCK_DV"]))
    return out


def config_sms(device: torch.device) -> int:
    """SM (CU) count of a CUDA device."""
    from .config import sm_count

    return sm_count(device.index if device.index is not None else torch.cuda.current_device())


def triton_next_pow2(n: int) -> int:
    """Smallest power of two >= ``n``."""
    import triton

    return triton.next_power_of_2(n)
