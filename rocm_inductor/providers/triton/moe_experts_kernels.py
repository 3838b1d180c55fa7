"""Triton kernels of the routed experts (``rocm_fused::moe_experts``); the launcher is ``moe_experts.py``.

Two paths, both reading each selected expert's weights where they live (no gathered copy of ``W[ids]``), both
ending in per-(token, slot) float32 outputs ``Y`` (T * k, H) and one deterministic reduce (no atomics):

- GEMV (one token per slot, ``Config.dot = False``): :func:`_gemv_gate_up`, one program per (slot, tile of
  ``BLOCK_N`` intermediate rows), streams that slot's expert's gate and up rows against ``x[t]``; products
  accumulate in a (BLOCK_N, BLOCK_K) float32 register tile summed once after the K loop (no cross-thread
  reduction per step: ``gemm_configs.Config.late``'s finding), the biases and the activation run in the
  epilogue and ``h`` (T * k, I) float32 is stored. :func:`_gemv_down`, one program per (slot, tile of
  ``BLOCK_H`` output columns), writes ``Y[slot] = w_slot * (W_down[e] @ h[slot] + b_down[e])``.
- Grouped (``Config.dot = True``, tokens grouped by expert): :func:`_grouped_gate_up` / :func:`_grouped_down`,
  one program per (expert, column tile). Each program finds the slots that chose its expert (a scan of the
  T * k ids: the in-kernel form of vLLM's ``moe_align_block_size``, which sorts the slots by expert and pads each
  expert's run to ``BLOCK_M`` rows; here the run is read in ``BLOCK_M``-row chunks of the slots in slot order),
  gathers their token rows and multiplies them with ``tl.dot`` against the expert's weight tile, so an expert
  chosen by several tokens is read once per chunk instead of once per token. The first grid axis is
  ``min(E, T * k)``: expert-major when every expert can appear, else slot-major, where only the first slot of
  each expert works (the others exit), so no grid of E programs idles at small T.
- :func:`_reduce`: ``out[t] = sum_j Y[t * k + j]`` in slot order, rounded once (round-to-nearest-even through
  ``rms_norm.py:_round_to``: the interpreter truncates float32 -> bfloat16).

Numerics: every product is exact in float32 and accumulated in float32. The down GEMM's input ``h`` is float32;
``tl.dot`` on 16-bit weights takes 16-bit inputs, so ``h`` is split into two parts of the weight dtype,
``hi = h.to(dtype)`` and ``lo = (h - hi).to(dtype)``, and both are multiplied (``SPLIT``): ``hi + lo`` carries 16
of h's 24 mantissa bits (error <= 2^-16 relative, below HF's own rounding of h to bf16, 2^-8). float32 weights
use ``input_precision="ieee"`` (no TF32). The interpreter's ``tl.dot`` on bfloat16 returns garbage (measured:
triton 3.9, errors of 1e10 on a 16x16 product), so ``UPCAST`` (set by the launcher under ``TRITON_INTERPRET=1``)
multiplies float32 copies of the same 16-bit values instead: the same math.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .moe_experts_configs import REDUCE_BLOCK, default_config
from .rms_norm import _round_to


@triton.jit
def _activate(g, u, ACT: tl.constexpr, alpha, limit):
    if ACT == 0:  # SwiGLU: silu(g) * u
        return g * tl.sigmoid(g) * u
    else:  # GPT-OSS: g <= limit, u in [-limit, limit], (u + 1) * g * sigmoid(alpha * g)
        g = tl.minimum(g, limit)
        u = tl.minimum(tl.maximum(u, -limit), limit)
        return (u + 1.0) * (g * tl.sigmoid(g * alpha))


@triton.jit
def _mma(a, b, acc, UPCAST: tl.constexpr, IEEE: tl.constexpr):
    """``acc + a @ b`` in float32 (see the module docstring for UPCAST / IEEE)."""
    if UPCAST:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    elif IEEE:
        return tl.dot(a, b, acc, input_precision="ieee")
    else:
        return tl.dot(a, b, acc)


@triton.jit
def _gemv_gate_up(X, IDS, W, B, HB, H, N_I, K_TOP, s_xt, s_it, s_ij, s_we, s_wn, s_wk, s_be, alpha, limit,
                  HAS_BIAS: tl.constexpr, ACT: tl.constexpr, INTERLEAVED: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_K: tl.constexpr):
    s = tl.program_id(0)  # slot = token * K_TOP + j
    t = s // K_TOP
    e = tl.load(IDS + t * s_it + (s % K_TOP) * s_ij).to(tl.int64)
    rows = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rmask = rows < N_I
    wbase = W + e * s_we
    if INTERLEAVED:  # gate/up rows alternate: one tile of 2 * BLOCK_N adjacent rows, split after the sum
        r2 = tl.program_id(1) * 2 * BLOCK_N + tl.arange(0, 2 * BLOCK_N)
        r2mask = r2 < 2 * N_I
        acc = tl.zeros([2 * BLOCK_N, BLOCK_K], dtype=tl.float32)
        for k0 in range(0, H, BLOCK_K):
            cols = k0 + tl.arange(0, BLOCK_K)
            cmask = cols < H
            xv = tl.load(X + t * s_xt + cols, mask=cmask, other=0.0).to(tl.float32)
            w = tl.load(wbase + r2[:, None] * s_wn + cols[None, :] * s_wk, mask=r2mask[:, None] & cmask[None, :],
                        other=0.0, eviction_policy="evict_first")
            acc += w.to(tl.float32) * xv[None, :]
        gu = tl.sum(acc, axis=1)
        if HAS_BIAS:
            gu += tl.load(B + e * s_be + r2, mask=r2mask, other=0.0).to(tl.float32)
        g, u = tl.split(tl.reshape(gu, (BLOCK_N, 2)))
    else:  # gate rows [0, I), up rows [I, 2I)
        acc_g = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
        acc_u = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
        for k0 in range(0, H, BLOCK_K):
            cols = k0 + tl.arange(0, BLOCK_K)
            cmask = cols < H
            xv = tl.load(X + t * s_xt + cols, mask=cmask, other=0.0).to(tl.float32)
            m2 = rmask[:, None] & cmask[None, :]
            wg = tl.load(wbase + rows[:, None] * s_wn + cols[None, :] * s_wk, mask=m2, other=0.0,
                         eviction_policy="evict_first")
            wu = tl.load(wbase + (rows + N_I)[:, None] * s_wn + cols[None, :] * s_wk, mask=m2, other=0.0,
                         eviction_policy="evict_first")
            acc_g += wg.to(tl.float32) * xv[None, :]
            acc_u += wu.to(tl.float32) * xv[None, :]
        g = tl.sum(acc_g, axis=1)
        u = tl.sum(acc_u, axis=1)
        if HAS_BIAS:
            g += tl.load(B + e * s_be + rows, mask=rmask, other=0.0).to(tl.float32)
            u += tl.load(B + e * s_be + rows + N_I, mask=rmask, other=0.0).to(tl.float32)
    tl.store(HB + s * N_I + rows, _activate(g, u, ACT, alpha, limit), mask=rmask)


@triton.jit
def _gemv_down(HB, IDS, TW, W, B, YB, H, N_I, K_TOP, s_it, s_ij, s_tt, s_tj, s_we, s_wn, s_wk, s_be,
               HAS_BIAS: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr):
    s = tl.program_id(0)
    t = s // K_TOP
    j = s % K_TOP
    e = tl.load(IDS + t * s_it + j * s_ij).to(tl.int64)
    wt = tl.load(TW + t * s_tt + j * s_tj).to(tl.float32)
    rows = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    rmask = rows < H
    wbase = W + e * s_we
    acc = tl.zeros([BLOCK_H, BLOCK_K], dtype=tl.float32)
    for k0 in range(0, N_I, BLOCK_K):
        cols = k0 + tl.arange(0, BLOCK_K)
        cmask = cols < N_I
        hv = tl.load(HB + s * N_I + cols, mask=cmask, other=0.0)
        w = tl.load(wbase + rows[:, None] * s_wn + cols[None, :] * s_wk, mask=rmask[:, None] & cmask[None, :],
                    other=0.0, eviction_policy="evict_first")
        acc += w.to(tl.float32) * hv[None, :]
    y = tl.sum(acc, axis=1)
    if HAS_BIAS:
        y += tl.load(B + e * s_be + rows, mask=rmask, other=0.0).to(tl.float32)
    tl.store(YB + s * H + rows, wt * y, mask=rmask)


@triton.jit
def _expert_slots(IDS, n_slots, K_TOP, s_it, s_ij, SLOT_MAJOR: tl.constexpr, BLOCK_S: tl.constexpr):
    """(expert, slots of all T * k, which of them chose it, how many, their rank in slot order) of this
    program; slot-major programs that are not their expert's first slot get a count of 0."""
    p = tl.program_id(0)
    sidx = tl.arange(0, BLOCK_S)
    smask = sidx < n_slots
    ids = tl.load(IDS + (sidx // K_TOP) * s_it + (sidx % K_TOP) * s_ij, mask=smask, other=-1).to(tl.int64)
    if SLOT_MAJOR:
        e = tl.load(IDS + (p // K_TOP) * s_it + (p % K_TOP) * s_ij).to(tl.int64)
    else:
        e = p.to(tl.int64)
    hit = (ids == e) & smask
    hits = hit.to(tl.int32)
    n = tl.sum(hits, axis=0)
    if SLOT_MAJOR:
        n = tl.where(tl.sum(tl.where(sidx < p, hits, 0), axis=0) == 0, n, 0)
    return e, sidx, hit, n, tl.cumsum(hits, axis=0) - 1


@triton.jit
def _chunk(sidx, hit, rank, c, n, BLOCK_M: tl.constexpr):
    """Slots ``c .. c + BLOCK_M`` of the expert's run (in slot order) and which of them exist."""
    target = c + tl.arange(0, BLOCK_M)
    sel = hit[None, :] & (rank[None, :] == target[:, None])
    return tl.sum(tl.where(sel, sidx[None, :], 0), axis=1), target < n


@triton.jit
def _grouped_gate_up(X, IDS, W, B, HB, n_slots, H, N_I, K_TOP, s_xt, s_it, s_ij, s_we, s_wn, s_wk, s_be, alpha, limit,
                     HAS_BIAS: tl.constexpr, ACT: tl.constexpr, INTERLEAVED: tl.constexpr, SLOT_MAJOR: tl.constexpr,
                     UPCAST: tl.constexpr, IEEE: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_M: tl.constexpr,
                     BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    e, sidx, hit, n, rank = _expert_slots(IDS, n_slots, K_TOP, s_it, s_ij, SLOT_MAJOR, BLOCK_S)
    rows = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rmask = rows < N_I
    r2 = tl.program_id(1) * 2 * BLOCK_N + tl.arange(0, 2 * BLOCK_N)  # interleaved: 2 * BLOCK_N adjacent rows
    r2mask = r2 < 2 * N_I
    wbase = W + e * s_we
    for c in range(0, n, BLOCK_M):
        slot, valid = _chunk(sidx, hit, rank, c, n, BLOCK_M)
        tok = slot // K_TOP
        if INTERLEAVED:
            acc = tl.zeros([BLOCK_M, 2 * BLOCK_N], dtype=tl.float32)
            for k0 in range(0, H, BLOCK_K):
                cols = k0 + tl.arange(0, BLOCK_K)
                cmask = cols < H
                xt = tl.load(X + tok[:, None] * s_xt + cols[None, :], mask=valid[:, None] & cmask[None, :],
                             other=0.0)
                w = tl.load(wbase + cols[:, None] * s_wk + r2[None, :] * s_wn, mask=cmask[:, None] & r2mask[None, :],
                            other=0.0)
                acc = _mma(xt, w, acc, UPCAST, IEEE)
            if HAS_BIAS:
                acc += tl.load(B + e * s_be + r2, mask=r2mask, other=0.0).to(tl.float32)[None, :]
            acc_g, acc_u = tl.split(tl.reshape(acc, (BLOCK_M, BLOCK_N, 2)))
        else:
            acc_g = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
            acc_u = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
            for k0 in range(0, H, BLOCK_K):
                cols = k0 + tl.arange(0, BLOCK_K)
                cmask = cols < H
                xt = tl.load(X + tok[:, None] * s_xt + cols[None, :], mask=valid[:, None] & cmask[None, :],
                             other=0.0)
                m2 = cmask[:, None] & rmask[None, :]
                wg = tl.load(wbase + cols[:, None] * s_wk + rows[None, :] * s_wn, mask=m2, other=0.0)
                wu = tl.load(wbase + cols[:, None] * s_wk + (rows + N_I)[None, :] * s_wn, mask=m2, other=0.0)
                acc_g = _mma(xt, wg, acc_g, UPCAST, IEEE)
                acc_u = _mma(xt, wu, acc_u, UPCAST, IEEE)
            if HAS_BIAS:
                acc_g += tl.load(B + e * s_be + rows, mask=rmask, other=0.0).to(tl.float32)[None, :]
                acc_u += tl.load(B + e * s_be + rows + N_I, mask=rmask, other=0.0).to(tl.float32)[None, :]
        h = _activate(acc_g, acc_u, ACT, alpha, limit)
        tl.store(HB + slot[:, None] * N_I + rows[None, :], h, mask=valid[:, None] & rmask[None, :])


@triton.jit
def _grouped_down(HB, IDS, TW, W, B, YB, n_slots, H, N_I, K_TOP, s_it, s_ij, s_tt, s_tj, s_we, s_wn, s_wk, s_be,
                  HAS_BIAS: tl.constexpr, SLOT_MAJOR: tl.constexpr, SPLIT: tl.constexpr, UPCAST: tl.constexpr,
                  IEEE: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_H: tl.constexpr,
                  BLOCK_K: tl.constexpr):
    e, sidx, hit, n, rank = _expert_slots(IDS, n_slots, K_TOP, s_it, s_ij, SLOT_MAJOR, BLOCK_S)
    cols = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    cmask = cols < H
    wbase = W + e * s_we
    for c in range(0, n, BLOCK_M):
        slot, valid = _chunk(sidx, hit, rank, c, n, BLOCK_M)
        acc = tl.zeros([BLOCK_M, BLOCK_H], dtype=tl.float32)
        for k0 in range(0, N_I, BLOCK_K):
            kk = k0 + tl.arange(0, BLOCK_K)
            kmask = kk < N_I
            hv = tl.load(HB + slot[:, None] * N_I + kk[None, :], mask=valid[:, None] & kmask[None, :], other=0.0)
            w = tl.load(wbase + kk[:, None] * s_wk + cols[None, :] * s_wn, mask=kmask[:, None] & cmask[None, :],
                        other=0.0)
            if SPLIT:
                hi = hv.to(w.dtype)
                acc = _mma(hi, w, acc, UPCAST, IEEE)
                acc = _mma((hv - hi.to(tl.float32)).to(w.dtype), w, acc, UPCAST, IEEE)
            else:
                acc = _mma(hv.to(w.dtype), w, acc, UPCAST, IEEE)
        if HAS_BIAS:
            acc += tl.load(B + e * s_be + cols, mask=cmask, other=0.0).to(tl.float32)[None, :]
        tok = slot // K_TOP
        wt = tl.load(TW + tok * s_tt + (slot % K_TOP) * s_tj, mask=valid, other=0.0).to(tl.float32)
        tl.store(YB + slot[:, None] * H + cols[None, :], acc * wt[:, None], mask=valid[:, None] & cmask[None, :])


@triton.jit
def _reduce(YB, OUT, H, K_TOP, s_ot, BLOCK: tl.constexpr):
    t = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    cmask = cols < H
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for j in range(0, K_TOP):
        acc += tl.load(YB + (t * K_TOP + j) * H + cols, mask=cmask, other=0.0)
    tl.store(OUT + t * s_ot + cols, _round_to(acc, OUT.dtype.element_ty), mask=cmask)


def aot_cases() -> list[dict]:
    """Compile cases (``providers/triton/_aot.py``): every kernel in bf16 at the default
    configs; gate/up for SwiGLU without biases (Qwen3-MoE) and the interleaved clamped SwiGLU with biases
    (GPT-OSS), down with biases only (the other form differs by one bias load). Measured 2026-12-03 (triton 3.9):
    none spills; sm_90 127-176 registers, gfx942 84-132 VGPRs, gfx950 82-124."""
    gemv, dot = default_config(1), default_config(8)
    types = {"X": "*bf16", "IDS": "*i64", "W": "*bf16", "B": "*bf16", "HB": "*fp32", "TW": "*fp32", "YB": "*fp32",
             "OUT": "*bf16", "alpha": "fp32", "limit": "fp32"}

    def case(name, fn, const, cfg, ones=(), div16=()):
        # as the JIT specialises a launch: integer arguments equal to 1 become constants, multiples of 16 get
        # the divisibility attribute (the unit strides decide whether weight loads are vectorised)
        const = {**const, **{a: 1 for a in ones if a in fn.arg_names}}
        sig = {a: "constexpr" if a in const else types.get(a, "i32") for a in fn.arg_names}
        attrs = {a: [["tt.divisibility", 16]] for a in fn.arg_names
                 if a not in const and (sig[a].startswith("*") or a in div16)}
        return {"name": f"moe_experts {name}", "fn": fn, "signature": sig, "constexprs": const, "attrs": attrs,
                "num_warps": cfg.num_warps, "num_stages": cfg.num_stages}

    out = []
    for what, act, gpt in (("silu", 0, False), ("swiglu_clamp bias", 1, True)):
        grouped = {"SLOT_MAJOR": True, "UPCAST": False, "IEEE": False, "BLOCK_S": 64, "BLOCK_M": dot.block_m}
        # strides of HF's contiguous stacks: Qwen3-MoE (E, 2I, H) / (E, H, I), GPT-OSS (E, H, 2I) / (E, I, H)
        lay = dict(ones=("s_wn", "s_ij", "s_tj") if gpt else ("s_wk", "s_ij", "s_tj"),
                   div16=("s_we", "s_wk", "s_xt", "s_be", "H", "N_I") if gpt else ("s_we", "s_wn", "s_xt", "H", "N_I"))
        out += [
            case(f"gemv gate_up {what}", _gemv_gate_up, {"HAS_BIAS": gpt, "ACT": act, "INTERLEAVED": gpt,
                                                              "BLOCK_N": gemv.block_n, "BLOCK_K": gemv.block_k},
                 gemv, **lay),
            case(f"gemv down {what}", _gemv_down, {"HAS_BIAS": gpt, "BLOCK_H": gemv.block_h,
                                                        "BLOCK_K": gemv.block_kd}, gemv, **lay) if gpt else None,
            case(f"grouped gate_up {what}", _grouped_gate_up,
                 {"HAS_BIAS": gpt, "ACT": act, "INTERLEAVED": gpt, **grouped, "BLOCK_N": dot.block_n,
                  "BLOCK_K": dot.block_k}, dot, **lay),
            case(f"grouped down {what}", _grouped_down,
                 {"HAS_BIAS": gpt, "SPLIT": True, **grouped, "BLOCK_H": dot.block_h, "BLOCK_K": dot.block_kd}, dot,
                 **lay) if gpt else None,
        ]
    out = [c for c in out if c is not None]
    out.append(case("reduce", _reduce, {"BLOCK": REDUCE_BLOCK}, gemv))
    return out
