"""Launch configuration of the Triton decode attention: the provider's limits, the block sizes, the split heuristic,
the measured configs of the tuning store (op ``decode_attention``) and the one-launch switch.

Order of a launch's config (:func:`pick`): an explicit override (tests, the benchmark's sweep, the level-2 tuner),
else this device's measured entry of exactly this call (batch, cache length, :func:`variant`), else the shipped
entry of the nearest measured batch and cache length (``tuning/shipped/<gpu>.json``, op ``decode_attention``:
:func:`stored_config`), else :func:`launch_config`'s heuristic. The one-launch
form (the last split program of a tile combines the partials, ``kernels.py``) is on where the config says
``one_launch`` (a store entry, or :data:`ONE_LAUNCH_DEFAULT`), unless ``ROCM_FUSED_ATTN_ONE_LAUNCH`` says
otherwise (``0``: never, ``1``: wherever it is safe: :func:`one_launch_wanted`).
"""

from __future__ import annotations

import functools
import os
from typing import Any

import torch
import triton

from ....report import dtype_name

INPUT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
MASK_DTYPES = (torch.bool, torch.float16, torch.bfloat16, torch.float32)
POS_DTYPES = (torch.int32, torch.int64)
MAX_HEAD_DIM = 256
#: Longest query the kernel is offered for (decode buckets; the default decode bucket is <= 32). The kernel is
#: correct for any length (M is tiled), but for prefill lengths one program per (kv head, M tile) re-reads K/V.
MAX_Q_LEN = 64
#: Split heuristic: aim at this many programs per SM (flash-decoding wants several resident per SM to hide
#: load latency; with the loop's `if` skip the compiler does not software-pipeline the K/V loads: no async
#: copies in the sm_90 TTGIR, triton 3.6). 8: on the
#: H200 sweep (benchmarks/results/runs/attention_sweep.csv, 2026-12-01; 132 SMs) the configuration it picks (with
#: :func:`block_sizes`) was the fastest swept, or within 2% of it, at 10 of the 18 issue-13 shapes and within
#: 17% at the rest (worst: gemma-2b B=1, 1024 slots, 7.9 vs 6.8 us; Qwen3-0.6B B=32, 1024 slots, 4 splits
#: 32.6 us vs 1 split 28.2 us). 4 and 6 lost up to 30% (Llama-3.2-1B B=8, 4096 slots), 16 up to 25%.
PROGRAMS_PER_SM = 8
#: Fewest KV slots per split (one BLOCK_N = 128 block; the sweep's best B = 1 configs used 128-slot splits).
MIN_SPLIT_LEN = 128
#: Most splits (the combine kernel holds (MAX_SPLITS, Dv) float32 per row).
MAX_SPLITS = 64
#: Split counters of the one-launch form per device (int32, 256 KiB): one per (batch, kv head, M tile) program
#: tile; a launch needing more takes two launches.
MAX_COUNTERS = 1 << 16
#: One launch where no store entry says otherwise. Off: not yet timed on a GPU against the two-launch form
#: (benchmarks/ops/bench_attention.py writes both columns); the store entries or the environment turn it on.
ONE_LAUNCH_DEFAULT = False
#: Environment switch of the one-launch form: ``0`` never, ``1`` wherever safe; unset or other: the config's.
ONE_LAUNCH_ENV = "ROCM_FUSED_ATTN_ONE_LAUNCH"
#: Tuning-store op of the kernel's configs.
STORE_OP = "decode_attention"
#: The launch grid timed per shape by the level-2 tuner (``tuning/tuner.py``) and by
#: ``benchmarks/ops/bench_attention.py --sweep`` (the shipped H200 entries' source): BLOCK_N x splits.
SWEEP_BLOCK_N = (32, 64, 128)
SWEEP_SPLITS = (1, 2, 4, 8, 16, 32)
#: Config fields a store entry may set (others are ignored).
CONFIG_KEYS = ("num_splits", "block_n", "num_warps", "num_stages", "one_launch", "skip")


def check(spec: dict[str, Any]) -> str | None:
    """Compile-time limits of the kernel (spec keys: ``rocm_inductor.ops.attention``); ``None`` if it takes it."""
    dt = spec.get("dtype")
    if dt not in INPUT_DTYPES:
        return f"triton decode attention takes float16/bfloat16/float32 q/k/v, got {dtype_name(dt)}"
    for key, what in (("head_dim", "head_dim"), ("v_head_dim", "v head_dim")):
        d = spec.get(key)
        if not isinstance(d, int) or isinstance(d, bool):
            return f"{what} is symbolic; the kernel's block sizes come from a static head dim"
        if not 1 <= d <= MAX_HEAD_DIM:
            return f"{what} {d} outside [1, {MAX_HEAD_DIM}]"
    lq = spec.get("q_len")
    if isinstance(lq, int) and lq > MAX_Q_LEN:
        return f"query length {lq} > {MAX_Q_LEN}: a prefill shape, Inductor's flash attention serves it"
    if not spec.get("last_dim_contiguous", False):
        return "q, k, v or the mask is not contiguous in its last dim"
    kind = spec.get("mask_kind", "none")
    if kind != "none":
        mdt = spec.get("mask_dtype")
        if mdt not in MASK_DTYPES:
            return f"mask dtype {dtype_name(mdt)}: the kernel takes bool or float16/bfloat16/float32 masks"
        shape = spec.get("mask_shape")
        if shape is None or len(shape) != 4:
            return "mask is not 4D"
    sdt = spec.get("sinks_dtype")
    if sdt is not None and sdt not in INPUT_DTYPES:
        return f"sinks dtype {dtype_name(sdt)}: the kernel takes float16/bfloat16/float32 sinks"
    pdt = spec.get("positions_dtype")
    if pdt is not None and pdt not in POS_DTYPES:
        return f"positions dtype {dtype_name(pdt)}: the kernel takes int32/int64 positions"
    cap = spec.get("softcap", 0.0)
    if not (isinstance(cap, (int, float)) and 0.0 <= cap < float("inf")):
        return f"softcap {cap!r}: the kernel takes a finite cap >= 0 (0: none)"
    return None


@functools.cache
def sm_count(index: int) -> int:
    """SM (CU) count of CUDA device ``index``."""
    return torch.cuda.get_device_properties(index).multi_processor_count


def _on_rocm() -> bool:
    return torch.version.hip is not None


def block_sizes(d: int, dv: int, m: int, base: int = 1, rocm: bool | None = None,
                force_block_n: int | None = None) -> tuple[int, int, int, int]:
    """``(BLOCK_M, BLOCK_N, BLOCK_D, BLOCK_DV)`` for head dims ``d``/``dv``, ``m = g * Lq`` rows per kv head
    and ``base = B * Hkv`` (programs before splitting); ``rocm`` defaults to the running torch's platform.

    BLOCK_M: ``next_pow2(m)``, at least 16 (``tl.dot``'s smallest M), at most 64 (32 for a 256 head dim: the
    float32 accumulator is BLOCK_M x BLOCK_DV per program). BLOCK_D/BLOCK_DV: next power of two, >= 16.
    BLOCK_N, with BLOCK_M = 16 (decode: g <= 16, Lq = 1): 128 for head dims <= 128: the fastest of 32/64/128 at
    every Llama-3.2-1B / Qwen3-0.6B shape of the H200 sweep (benchmarks/results/runs/attention_sweep.csv,
    2026-12-01: the loop's mask test keeps the loads unpipelined, so fewer, larger blocks win). Head dim 256:
    128 when ``base <= 8``, else 64 (gemma-2b: bn128 7.9-9.8 us vs bn64 9.1-11.0 at B = 1 and 8; bn64 11.3 vs
    13.6 us at B = 32, 1024 slots); on ROCm always 64 (bn128 needs the whole 64 KiB LDS of gfx942 and spilled
    5-84 VGPRs in the AOT compile, triton 3.6/3.9). With BLOCK_M >= 32 (query lengths > 1): 64, or 32 for a
    256 head dim (64/128 spilled on sm_90 or gfx942 at those BLOCK_M; not timed on a GPU).
    ``force_block_n`` replaces BLOCK_N (tests).
    """
    rocm = _on_rocm() if rocm is None else rocm
    bd = max(16, triton.next_power_of_2(d))
    bdv = max(16, triton.next_power_of_2(dv))
    wide = max(bd, bdv) > 128
    bm = max(16, min(32 if wide else 64, triton.next_power_of_2(max(m, 1))))
    if bm > 16:
        bn = 32 if wide else 64
    elif wide:
        bn = 128 if base <= 8 and not rocm else 64
    else:
        bn = 128
    return bm, force_block_n or bn, bd, bdv


def _prev_pow2(x: int) -> int:
    return 1 << (max(1, x).bit_length() - 1)


def launch_config(b: int, hkv: int, lq: int, lkv: int, g: int, d: int, dv: int, sms: int,
                  num_splits: int | None = None, block_n: int | None = None,
                  rocm: bool | None = None) -> dict[str, int]:
    """Launch shape for one call (static shapes only): the heuristic where no store entry decides.

    Splits: ``prev_pow2(min(PROGRAMS_PER_SM * sms // base, lkv // MIN_SPLIT_LEN, MAX_SPLITS))`` with ``base =
    B * Hkv * MB`` programs before splitting (H200, 132 SMs: Llama-3.2-1B B = 1 / 8 / 32 -> 8 / 8 / 4 splits at
    1024 slots, 32 / 16 / 4 at 4096), each split a multiple of BLOCK_N slots.

    Args:
        b, hkv, lq, lkv, g: batch, kv heads, query length, KV length (cache slots), query heads per kv head.
        d, dv: head dims of q/k and v. sms: SM (CU) count of the device.
        num_splits, block_n: overrides (tests, tuning, store entries); else the heuristic.
        rocm: pick ROCm's block sizes (default: the running torch's platform).

    Returns:
        dict with BLOCK_M, BLOCK_N, BLOCK_D, BLOCK_DV, MB (M tiles), NSPLIT, SPLIT_LEN (slots per split, a
        multiple of BLOCK_N), num_warps (4, or 8 for a 256 head dim; <= 16 so ROCm's 64-wide waves fit 1024).
    """
    bm = block_sizes(d, dv, g * lq)[0]
    mb = triton.cdiv(g * lq, bm)
    base = max(1, b * hkv * mb)
    bm, bn, bd, bdv = block_sizes(d, dv, g * lq, base, rocm)
    if block_n:
        bn = block_n
    nblocks = max(1, triton.cdiv(lkv, bn))
    ns = num_splits
    if not ns:
        ns = _prev_pow2(min(PROGRAMS_PER_SM * sms // base, lkv // MIN_SPLIT_LEN, MAX_SPLITS))
    ns = max(1, min(ns, nblocks, MAX_SPLITS))
    split_len = triton.cdiv(nblocks, ns) * bn
    ns = max(1, triton.cdiv(lkv, split_len))
    # sm_90 AOT (triton 3.6 and 3.9, 2026-12-01), BLOCK_M 16: head dims <= 128 took 115-236 registers at 4
    # warps, no spills (gfx942: 134-236 VGPRs, no scratch); a 256 head dim 188 registers at 4 warps, 128-208
    # at 8 (bn 32-128).
    warps = 8 if max(bd, bdv) > 128 else 4
    return dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_D=bd, BLOCK_DV=bdv, MB=mb, NSPLIT=ns, SPLIT_LEN=split_len,
                num_warps=warps)


#: Shared-memory budget of the software pipeline of K/V loads in the unskipped forms (positions, ``skip: False``):
#: bytes of all stages (CUDA: under the H200's 227 KiB per block with room for a second program; ROCm: gfx942's
#: 64 KiB LDS). Not timed on a GPU: a store entry's ``num_stages`` wins.
STAGE_BYTES = {"cuda": 160 << 10, "rocm": 64 << 10}


def sweep_points(lkv: int) -> list[dict[str, int]]:
    """The (``num_splits``, ``block_n``) launch configs worth timing for ``lkv`` KV slots: :data:`SWEEP_BLOCK_N`
    x :data:`SWEEP_SPLITS`, a split count only where every split gets at least one BLOCK_N block (at most 18
    configs). The heuristic's own pick is among them unless it takes more than 32 splits (8192 slots and up)."""
    return [{"num_splits": ns, "block_n": bn} for bn in SWEEP_BLOCK_N for ns in SWEEP_SPLITS
            if ns == 1 or lkv // bn >= ns]


def default_stages(block_n: int, block_d: int, block_dv: int, elt: int, rocm: bool | None = None) -> int:
    """Pipeline stages for the unskipped forms: as many ``BLOCK_N x (BLOCK_D + BLOCK_DV)`` K/V tiles of ``elt``
    bytes as :data:`STAGE_BYTES` holds, 1 to 3 (the skip form's loads sit under a branch: not pipelined)."""
    rocm = _on_rocm() if rocm is None else rocm
    per = block_n * (block_d + block_dv) * elt
    return max(1, min(3, STAGE_BYTES["rocm" if rocm else "cuda"] // per))


def combine_warps(block_s: int, block_dv: int) -> int:
    """Warps of the combine kernel: 8 when its (splits, Dv) float32 tile is >= 8192 elements (64 x 256 took
    180 registers at 4 warps, 96 at 8, sm_90 AOT 2026-12-01), else 4."""
    return 8 if block_s * block_dv >= 8192 else 4


# -- the tuning store --------------------------------------------------------------------------------------------

def _fields(sig: str) -> dict[str, str]:
    from ....tuning.store import parse_signature

    return parse_signature(sig)


#: Signature fields of a measured entry that must match the call (:func:`variant`): a sliding-window layer and a
#: full one of the same shape, or layers with and without sinks, positions (the causal mask in the op), a soft cap
#: or a mask, are measured apart.
VARIANT_KEYS = ("mask_kind", "window", "sinks", "positions", "softcap")


def variant(mask_kind: str = "none", window: int = 0, sinks: bool = False, softcap: float = 0.0,
            positions: bool = False) -> tuple[tuple[str, str], ...]:
    """A call's :data:`VARIANT_KEYS` as the store signature writes them (``ops/attention.py:attention_spec``):
    ``mask_kind`` ``"none"`` / ``"bool"`` / ``"additive"``, ``window`` in slots, sinks present, positions present,
    ``softcap``."""
    return (("mask_kind", mask_kind), ("window", str(int(window))), ("sinks", "1" if sinks else "0"),
            ("positions", "1" if positions else "0"), ("softcap", str(float(softcap))))


def _entry_variant(f: dict[str, str]) -> dict[str, str]:
    """The :data:`VARIANT_KEYS` an entry's signature fields carry (a shipped sweep entry carries none)."""
    out = {}
    if "mask_kind" in f:
        out["mask_kind"] = f["mask_kind"]
    if "window" in f:
        out["window"] = f["window"]
    if "sinks_dtype" in f:
        out["sinks"] = "0" if f["sinks_dtype"] in ("?", "None") else "1"
    if "positions_dtype" in f:
        out["positions"] = "0" if f["positions_dtype"] in ("?", "None") else "1"
    if "softcap" in f:
        try:
            out["softcap"] = str(float(f["softcap"]))
        except ValueError:
            out["softcap"] = f["softcap"]
    return out


@functools.lru_cache(maxsize=256)
def _lookup(key: Any, mtime: Any, dtype: str, hq: int, hkv: int, lq: int, d: int, dv: int, b: int,
            lkv: int, call: tuple[tuple[str, str], ...] | None = None) -> tuple[dict, str] | None:
    from ....tuning.store import default_store

    fixed = {"dtype": dtype, "num_q_heads": str(hq), "num_kv_heads": str(hkv), "q_len": str(lq),
             "head_dim": str(d), "v_head_dim": str(dv)}
    want = dict(call or ())
    best = None
    for dec in default_store().entries(key, STORE_OP):
        f = _fields(dec.signature)
        if any(f.get(k) != v for k, v in fixed.items()) or dec.winner != "triton":
            continue
        try:
            eb, el = int(f["batch"]), int(f["kv_len"])
        except (KeyError, ValueError):
            continue
        own = dec.source == "store"
        if own and (eb != b or el != lkv or any(want.get(k, v) != v for k, v in _entry_variant(f).items())):
            continue  # a measured entry applies to the call it measured: its batch, cache length and variant
        # the nearest measured batch, then cache length: the smallest >= ours, else the largest below
        rank = (eb < b, abs(eb - b), el < lkv, abs(el - lkv), not own)
        if best is None or rank < best[0]:
            best = (rank, dec)
    if best is None:
        return None
    dec = best[1]
    cfg = {k: v for k, v in (dec.config or {}).items() if k in CONFIG_KEYS}
    return cfg, f"{dec.source}: {dec.signature}"


def stored_config(dtype: torch.dtype, hq: int, hkv: int, lq: int, d: int, dv: int, b: int, lkv: int,
                  device_type: str = "cuda", call: tuple[tuple[str, str], ...] | None = None
                  ) -> tuple[dict, str] | None:
    """The store's config for this shape on the current device: this device's own (measured) entry of exactly
    this batch, cache length and call variant (``call``: :func:`variant`; None matches any), else among its GPU
    model's shipped entries (the sweep grid) of the same dtype, heads, query length and head dims won by
    ``triton``, the one of the nearest measured batch (the smallest >= ``b``, else the largest), then cache length.

    Returns:
        ``(config, "<source>: <signature>")`` with the :data:`CONFIG_KEYS` it sets, or None (no entry; on CPU the
        device key names no GPU, so only a faked key (``tuning.device.override``) finds entries).
    """
    from ....tuning import device as tuning_device
    from ....tuning.store import default_store

    key = tuning_device.current(device_type)
    store = default_store()
    try:
        mtime = store.path(key).stat().st_mtime_ns
    except OSError:
        mtime = None
    dt = str(dtype).replace("torch.", "")
    return _lookup(key, mtime, dt, hq, hkv, lq, d, dv, b, lkv, call)


def one_launch_wanted(cfg_value: Any, override: bool | None = None) -> bool:
    """Whether to try the one-launch form: ``override`` (the launcher's ``inline_combine``) when given, else
    ``$ROCM_FUSED_ATTN_ONE_LAUNCH`` (``0``/``1``) when set, else the config's ``one_launch`` (None:
    :data:`ONE_LAUNCH_DEFAULT`). Safety (counters, capture) is the launcher's to check."""
    if override is not None:
        return bool(override)
    env = os.environ.get(ONE_LAUNCH_ENV)
    if env in ("0", "1"):
        return env == "1"
    return ONE_LAUNCH_DEFAULT if cfg_value is None else bool(cfg_value)


def pick(b: int, hq: int, hkv: int, lq: int, lkv: int, d: int, dv: int, dtype: torch.dtype, sms: int,
         num_splits: int | None = None, block_n: int | None = None, use_store: bool = True,
         rocm: bool | None = None, fields: dict | None = None,
         call: tuple[tuple[str, str], ...] | None = None) -> dict[str, Any]:
    """The launch config of one call: :func:`launch_config` with the store entry's fields (module docstring),
    explicit ``num_splits`` / ``block_n`` winning over both. ``fields`` (:data:`CONFIG_KEYS`, a benchmark's
    sweep point) replaces the store entry; ``use_store=False`` (the interpreter) skips the store; ``call`` is the
    call's :func:`variant` (None: any measured entry of the shape matches).

    Returns:
        :func:`launch_config`'s dict plus ``num_stages`` (None: Triton's default), ``one_launch`` (the config's,
        None when unset), ``SKIP`` (the mask's block skip, default True) and ``source`` (``"heuristic"`` or the
        store entry's ``"<source>: <signature>"``).
    """
    if fields is not None:
        stored = ({k: v for k, v in fields.items() if k in CONFIG_KEYS}, "given")
    else:
        stored = stored_config(dtype, hq, hkv, lq, d, dv, b, lkv, call=call) if use_store else None
    cfg_in, source = stored if stored is not None else ({}, "heuristic")
    ns = num_splits or cfg_in.get("num_splits")
    bn = block_n or cfg_in.get("block_n")
    cfg: dict[str, Any] = launch_config(b, hkv, lq, lkv, hq // hkv, d, dv, sms, ns, bn, rocm)
    if cfg_in.get("num_warps"):
        cfg["num_warps"] = int(cfg_in["num_warps"])
    cfg.update(num_stages=cfg_in.get("num_stages"), one_launch=cfg_in.get("one_launch"),
               SKIP=bool(cfg_in.get("skip", True)), source=source)
    return cfg
