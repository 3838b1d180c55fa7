"""Triton routed experts for decode buckets: a grouped GEMV over the selected experts, weights read in place.

Math: exactly :func:`rocm_inductor.providers.reference_moe_experts.moe_experts_ref` up to the float32
summation order: every product is accumulated in float32, the activation and the weighted sum over the k
slots are float32, and the output is rounded once (round-to-nearest-even through ``rms_norm.py:_round_to``,
which the interpreter needs: it truncates float32 -> bfloat16).

Two launches, no atomics, no gathered weight copy:

1. ``_gate_up_kernel``, one program per (token, slot, tile of ``BLOCK_I`` intermediate rows): it reads the
   expert id of its slot, streams that expert's gate and up rows of ``W_gate_up`` against ``x[t]`` in chunks
   of ``BLOCK_K`` (strides passed in, so both HF layouts and both gate/up orders are one kernel), adds the
   biases, applies the activation and stores ``h`` (T * k, I) in float32 (at T = 32, k = 8, I = 768: 786 KB,
   the only intermediate).
2. ``_down_kernel``, one program per (token, tile of ``BLOCK_H`` output columns): for each of the k slots it
   streams that expert's ``W_down`` rows against ``h`` and adds ``weight * (row . h + bias)`` to a float32
   accumulator; the sum over k stays inside the program, so no atomics and a deterministic order.

Each selected expert's weights are read once per token that chose it (at decode, T <= 32, tokens rarely share
an expert's tile in cache anyway); HF's ``batched_mm`` form reads them, writes a gathered copy and reads that
again. The launch is capture-safe: no host sync, grid a pure function of the shapes.

Tile sizes are fixed (not autotuned, not yet measured: ``benchmarks/e2e/moe_decode.py`` is the measurement
that must confirm or replace them): ``BLOCK_K = 128`` elements of the reduction (256 B of bf16 per row: full
128-byte lines on both vendors), ``BLOCK_I = 32`` and ``BLOCK_H = 32`` output rows per program, so that at
T = 1 a Qwen3-MoE-shaped layer (I = 768, H = 2048, k = 8) launches 192 + 64 programs, more than one per SM of
an H200 (132) or an MI300X (304 CUs: the down launch under-fills it; measure).

Limits (what :func:`check` refuses; the pass then leaves the graph to Inductor and reports why): dtype not
float16/bfloat16/float32; more than :data:`MAX_TOKENS` tokens (prefill: Inductor's GEMMs win there);
symbolic sizes other than T.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from .rms_norm import _round_to

#: dtypes the kernel takes.
DTYPES = (torch.float16, torch.bfloat16, torch.float32)
#: Largest token count (T) the kernel is offered for: the default decode bucket (``rocm_inductor/buckets.py``,
#: ``aten_gemm_max_m = 32``); past it the grouped GEMV re-reads each expert per token, which a GEMM avoids.
MAX_TOKENS = 32
#: Tile sizes (see the module docstring: not yet measured).
BLOCK_K = 128
BLOCK_I = 32
BLOCK_H = 32
#: Activation codes passed to the kernels (the op's activation names).
ACT_CODES = {"silu": 0, "swiglu_clamp": 1}


def check(spec: dict[str, Any]) -> str | None:
    """``None`` when the kernel takes the match described by ``spec`` (``ops/moe_experts.py``), else why not."""
    if spec["dtype"] not in DTYPES:
        return f"dtype {spec['dtype']} is not float16/bfloat16/float32"
    upper = spec.get("tokens_upper")
    if upper is None or upper > MAX_TOKENS:
        return f"T={spec.get('tokens')} (upper bound {upper}) is not a decode bucket (<= {MAX_TOKENS} tokens)"
    if any(spec.get(key) is None for key in ("top_k", "experts", "hidden", "inter")):
        return "k, E, H and I must be static sizes"
    if spec["activation"] not in ACT_CODES:
        return f"activation {spec['activation']!r} has no kernel"
    return None


@triton.jit
def _activate(g, u, ACT: tl.constexpr, alpha, limit):
    if ACT == 0:
        return g * tl.sigmoid(g) * u
    else:
        g = tl.minimum(g, limit)
        u = tl.minimum(tl.maximum(u, -limit), limit)
        return (u + 1.0) * (g * tl.sigmoid(g * alpha))


@triton.jit
def _gate_up_kernel(X, IDS, W, B, Hbuf, H, N_I, K_TOP, s_xt, s_it, s_ij, s_we, s_wn, s_wk, s_be,
                    gate_step, up_off, alpha, limit, HAS_BIAS: tl.constexpr, ACT: tl.constexpr,
                    BLOCK_I: tl.constexpr, BLOCK_K: tl.constexpr):
    pid = tl.program_id(0)  # token * K_TOP + slot
    t = pid // K_TOP
    j = pid % K_TOP
    e = tl.load(IDS + t * s_it + j * s_ij).to(tl.int64)
    rows = tl.program_id(1) * BLOCK_I + tl.arange(0, BLOCK_I)
    rmask = rows < N_I
    g_rows = rows * gate_step
    u_rows = rows * gate_step + up_off
    wbase = W + e * s_we
    acc_g = tl.zeros([BLOCK_I], dtype=tl.float32)
    acc_u = tl.zeros([BLOCK_I], dtype=tl.float32)
    for k0 in range(0, H, BLOCK_K):
        cols = k0 + tl.arange(0, BLOCK_K)
        cmask = cols < H
        xv = tl.load(X + t * s_xt + cols, mask=cmask, other=0.0).to(tl.float32)
        m2 = rmask[:, None] & cmask[None, :]
        wg = tl.load(wbase + g_rows[:, None] * s_wn + cols[None, :] * s_wk, mask=m2, other=0.0).to(tl.float32)
        wu = tl.load(wbase + u_rows[:, None] * s_wn + cols[None, :] * s_wk, mask=m2, other=0.0).to(tl.float32)
        acc_g += tl.sum(wg * xv[None, :], axis=1)
        acc_u += tl.sum(wu * xv[None, :], axis=1)
    if HAS_BIAS:
        acc_g += tl.load(B + e * s_be + g_rows, mask=rmask, other=0.0).to(tl.float32)
        acc_u += tl.load(B + e * s_be + u_rows, mask=rmask, other=0.0).to(tl.float32)
    h = _activate(acc_g, acc_u, ACT, alpha, limit)
    tl.store(Hbuf + pid * N_I + rows, h, mask=rmask)


@triton.jit
def _down_kernel(Hbuf, IDS, TW, W, B, OUT, H, N_I, K_TOP, s_it, s_ij, s_tt, s_tj, s_we, s_wn, s_wk, s_be, s_ot,
                 HAS_BIAS: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr):
    t = tl.program_id(0)
    rows = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    rmask = rows < H
    out = tl.zeros([BLOCK_H], dtype=tl.float32)
    for j in range(0, K_TOP):
        e = tl.load(IDS + t * s_it + j * s_ij).to(tl.int64)
        wt = tl.load(TW + t * s_tt + j * s_tj).to(tl.float32)
        wbase = W + e * s_we
        acc = tl.zeros([BLOCK_H], dtype=tl.float32)
        for k0 in range(0, N_I, BLOCK_K):
            cols = k0 + tl.arange(0, BLOCK_K)
            cmask = cols < N_I
            hv = tl.load(Hbuf + (t * K_TOP + j) * N_I + cols, mask=cmask, other=0.0)
            w = tl.load(wbase + rows[:, None] * s_wn + cols[None, :] * s_wk,
                        mask=rmask[:, None] & cmask[None, :], other=0.0).to(tl.float32)
            acc += tl.sum(w * hv[None, :], axis=1)
        if HAS_BIAS:
            acc += tl.load(B + e * s_be + rows, mask=rmask, other=0.0).to(tl.float32)
        out += wt * acc
    tl.store(OUT + t * s_ot + rows, _round_to(out, OUT.dtype.element_ty), mask=rmask)


def moe_experts(x: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor, w_gate_up: torch.Tensor,
                w_down: torch.Tensor, b_gate_up: torch.Tensor | None, b_down: torch.Tensor | None,
                activation: str, interleaved: bool, transposed: bool, alpha: float,
                limit: float) -> torch.Tensor:
    """The routed experts (``rocm_fused::moe_experts``, see ``ops/moe_experts.py``) in two launches.

    Args:
        x: (T, H) float16/bfloat16/float32 (made row-contiguous if its last stride is not 1);
        topk_weights, topk_ids: (T, k), any strides; w_gate_up, w_down: in the layout ``transposed`` names,
        any strides; b_gate_up (E, 2I), b_down (E, H) or None (made row-contiguous);
        activation, interleaved, alpha, limit: as the op.

    Returns:
        (T, H) contiguous tensor of ``x.dtype``.

    Raises:
        KeyError: an activation without a kernel code.
    """
    act = ACT_CODES[activation]
    if x.stride(-1) != 1:
        x = x.contiguous()
    t, h = x.shape
    k = topk_ids.shape[1]
    inter = w_down.shape[1] if transposed else w_down.shape[2]
    # (s_n, s_k): strides along the output rows and along the reduction of each expert's matrix
    gu_n, gu_k = (w_gate_up.stride(2), w_gate_up.stride(1)) if transposed else (w_gate_up.stride(1),
                                                                                 w_gate_up.stride(2))
    dn_n, dn_k = (w_down.stride(2), w_down.stride(1)) if transposed else (w_down.stride(1), w_down.stride(2))
    gate_step, up_off = (2, 1) if interleaved else (1, inter)
    b1 = b_gate_up.contiguous() if b_gate_up is not None else x
    b2 = b_down.contiguous() if b_down is not None else x
    hbuf = torch.empty((t * k, inter), dtype=torch.float32, device=x.device)
    out = torch.empty((t, h), dtype=x.dtype, device=x.device)
    if t == 0:
        return out
    _gate_up_kernel[(t * k, triton.cdiv(inter, BLOCK_I))](
        x, topk_ids, w_gate_up, b1, hbuf, h, inter, k, x.stride(0), topk_ids.stride(0), topk_ids.stride(1),
        w_gate_up.stride(0), gu_n, gu_k, b1.stride(0), gate_step, up_off, float(alpha), float(limit),
        HAS_BIAS=b_gate_up is not None, ACT=act, BLOCK_I=BLOCK_I, BLOCK_K=BLOCK_K)
    _down_kernel[(t, triton.cdiv(h, BLOCK_H))](
        hbuf, topk_ids, topk_weights, w_down, b2, out, h, inter, k, topk_ids.stride(0), topk_ids.stride(1),
        topk_weights.stride(0), topk_weights.stride(1), w_down.stride(0), dn_n, dn_k, b2.stride(0), out.stride(0),
        HAS_BIAS=b_down is not None, BLOCK_H=BLOCK_H, BLOCK_K=BLOCK_K)
    return out


def aot_cases() -> list[dict]:
    """Compile cases (``providers/triton/_aot.py``): both kernels in bf16 for SwiGLU without biases (Qwen3-MoE)
    and the clamped SwiGLU with biases (GPT-OSS)."""
    up = {"X": "*bf16", "IDS": "*i64", "W": "*bf16", "B": "*bf16", "Hbuf": "*fp32",
          **{n: "i32" for n in ("H", "N_I", "K_TOP", "s_xt", "s_it", "s_ij", "s_we", "s_wn", "s_wk", "s_be",
                                "gate_step", "up_off")},
          "alpha": "fp32", "limit": "fp32", "HAS_BIAS": "constexpr", "ACT": "constexpr", "BLOCK_I": "constexpr",
          "BLOCK_K": "constexpr"}
    down = {"Hbuf": "*fp32", "IDS": "*i64", "TW": "*fp32", "W": "*bf16", "B": "*bf16", "OUT": "*bf16",
            **{n: "i32" for n in ("H", "N_I", "K_TOP", "s_it", "s_ij", "s_tt", "s_tj", "s_we", "s_wn", "s_wk",
                                  "s_be", "s_ot")},
            "HAS_BIAS": "constexpr", "BLOCK_H": "constexpr", "BLOCK_K": "constexpr"}
    # known_spill: the 20+ scalar arguments (strides, sizes) spill SGPRs on gfx942/gfx950 (44-114) and the
    # gate/up kernel uses stack on sm_90 (72 B, 488 B with biases): recorded by tests/test_triton_aot.py, to be
    # removed by packing the strides (not done yet)
    out = []
    for what, act, bias in (("silu", 0, False), ("swiglu_clamp bias", 1, True)):
        out.append({"name": f"moe_experts gate_up {what}", "fn": _gate_up_kernel, "signature": up,
                    "constexprs": {"HAS_BIAS": bias, "ACT": act, "BLOCK_I": BLOCK_I, "BLOCK_K": BLOCK_K},
                    "num_warps": 4, "known_spill": True})  # the launch default
        out.append({"name": f"moe_experts down {what}", "fn": _down_kernel, "signature": down,
                    "constexprs": {"HAS_BIAS": bias, "BLOCK_H": BLOCK_H, "BLOCK_K": BLOCK_K},
                    "num_warps": 4, "known_spill": True})
    return out
