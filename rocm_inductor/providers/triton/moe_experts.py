"""Triton routed experts for decode buckets: the launcher, its configs and limits (kernels: ``moe_experts_kernels``).

Math: exactly :func:`rocm_inductor.providers.reference_moe_experts.moe_experts_ref` up to the float32 summation
order (every product accumulated in float32, activation and the weighted sum over the k slots in float32, the
output rounded once; the down GEMM's float32 input is carried as two 16-bit parts, ``moe_experts_kernels``).

Three launches, no atomics, no gathered weight copy, no host sync (capture-safe: every grid is a function of
the shapes):

1. gate/up + activation -> ``h`` (T * k, I) float32: per slot (GEMV path) or per expert (grouped path);
2. down, times the slot's routing weight -> ``Y`` (T * k, H) float32, same path;
3. the reduce over the k slots -> (T, H) in x's dtype.

Which path and tile sizes: a :class:`Config` (``moe_experts(..., config=)``; the tuning store or
``benchmarks/ops/bench_moe_experts.py --sweep`` pick one of :data:`CONFIGS`), else :func:`default_config`:
the GEMV path at one token (each selected expert is read once anyway, and the per-slot grid of k * I / BLOCK_N
programs fills the GPU), the grouped ``tl.dot`` path from two tokens on (an expert chosen by several tokens is read
once per 16 of them). Buffers: ``h`` and ``Y`` at T = 32, k = 8, I = 768, H = 2048 are 0.8 MB and 2.1 MB.

Limits (what :func:`check` refuses; the pass then leaves the graph to Inductor and reports why): dtype not
float16/bfloat16/float32; more than :data:`MAX_TOKENS` tokens (prefill: Inductor's GEMMs win there);
symbolic sizes other than T.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import torch
import triton

from . import moe_experts_kernels as kern

#: dtypes the kernel takes.
DTYPES = (torch.float16, torch.bfloat16, torch.float32)
#: Largest token count (T) the kernel is offered for: the default decode bucket (``rocm_inductor/buckets.py``,
#: ``aten_gemm_max_m = 32``).
MAX_TOKENS = 32
#: Activation codes passed to the kernels (the op's activation names).
ACT_CODES = {"silu": 0, "swiglu_clamp": 1}
#: Columns of the reduce's programs (one row of Y per slot: 512 float32 = 2 KB per load).
REDUCE_BLOCK = 512


@dataclasses.dataclass(frozen=True)
class Config:
    """One launch configuration of the experts kernels.

    Attributes:
        dot: the grouped ``tl.dot`` path (tokens grouped by expert, ``block_m`` rows per chunk) instead of the
            per-slot GEMV path.
        block_n: intermediate rows per gate/up program (each program computes ``block_n`` gate and up rows);
        block_k: gate/up reduction chunk (over H); block_h: output columns per down program; block_kd: down
        reduction chunk (over I); block_m: token rows of a grouped chunk (16: the smallest ``tl.dot`` M);
        num_warps, num_stages: Triton's (stages only pipeline the grouped path's dot loops).
    """

    dot: bool
    block_n: int
    block_k: int
    block_h: int
    block_kd: int
    num_warps: int = 4
    num_stages: int = 3
    block_m: int = 16

    def name(self) -> str:
        """Short label, e.g. ``gemv n16 k256 h32 kd256 w4`` (benchmark tables)."""
        head = f"dot m{self.block_m}" if self.dot else "gemv"
        tail = f" s{self.num_stages}" if self.dot else ""
        return f"{head} n{self.block_n} k{self.block_k} h{self.block_h} kd{self.block_kd} w{self.num_warps}{tail}"


#: The configs a sweep times: GEMV tiles of 16-64 float32 partial products per thread in each late accumulator,
#: and ``tl.dot`` tiles. Each compiles without spills for sm_90 at HF's strides (AOT as ``compile_cases``,
#: triton 3.9, 2026-12-03: 64-252 registers, no stack); down tiles of BLOCK_H 64 x BLOCK_K 128 and larger
#: spilled (255 registers, 16-152 B of stack: the float32 h tile and its two 16-bit parts) and are left out.
#: Not yet timed: ``benchmarks/ops/bench_moe_experts.py --sweep`` is the measurement.
CONFIGS: tuple[Config, ...] = (
    Config(False, 16, 256, 32, 256, 4),
    Config(False, 16, 512, 32, 512, 8),
    Config(False, 8, 512, 16, 512, 4),
    Config(False, 32, 256, 64, 256, 8),
    Config(False, 8, 256, 16, 256, 4),
    Config(False, 16, 128, 32, 128, 4),
    Config(False, 4, 1024, 8, 1024, 4),
    Config(True, 32, 128, 64, 64, 4, 3),
    Config(True, 64, 128, 64, 64, 4, 3),
    Config(True, 16, 256, 32, 128, 4, 3),
    Config(True, 16, 256, 64, 64, 4, 4),
    Config(True, 64, 64, 128, 64, 4, 4),
    Config(True, 64, 64, 128, 64, 8, 3),
    Config(True, 32, 128, 32, 128, 4, 2),
)


def default_config(tokens: int, dtype: torch.dtype = torch.bfloat16) -> Config:
    """The untuned config for T = ``tokens`` (see the module docstring): GEMV at one token, grouped above.

    A guess within the register budgets of :data:`CONFIGS` (float32 weights halve the GEMV's K chunk); the
    sweep of ``bench_moe_experts.py`` is what confirms or replaces it.
    """
    if tokens <= 1:
        cfg = CONFIGS[0]
    else:
        cfg = CONFIGS[7]
    if dtype == torch.float32:
        cfg = dataclasses.replace(cfg, block_k=cfg.block_k // 2, block_kd=cfg.block_kd // 2)
    return cfg


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


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def moe_experts(x: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor, w_gate_up: torch.Tensor,
                w_down: torch.Tensor, b_gate_up: torch.Tensor | None, b_down: torch.Tensor | None,
                activation: str, interleaved: bool, transposed: bool, alpha: float, limit: float,
                config: Config | None = None) -> torch.Tensor:
    """The routed experts (``rocm_fused::moe_experts``, see ``ops/moe_experts.py``) in three launches.

    Args:
        x: (T, H) float16/bfloat16/float32 (made row-contiguous if its last stride is not 1);
        topk_weights, topk_ids: (T, k), any strides; w_gate_up, w_down: in the layout ``transposed`` names,
        any strides; b_gate_up (E, 2I), b_down (E, H) or None (made row-contiguous);
        activation, interleaved, alpha, limit: as the op; config: tile sizes and path (None:
        :func:`default_config`).

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
    n_exp = w_gate_up.shape[0]
    inter = w_down.shape[1] if transposed else w_down.shape[2]
    cfg = config or default_config(t, x.dtype)
    # (s_n, s_k): strides along the output rows and along the reduction of each expert's matrix
    gu_n, gu_k = (w_gate_up.stride(2), w_gate_up.stride(1)) if transposed else (w_gate_up.stride(1),
                                                                                 w_gate_up.stride(2))
    dn_n, dn_k = (w_down.stride(2), w_down.stride(1)) if transposed else (w_down.stride(1), w_down.stride(2))
    b1 = b_gate_up.contiguous() if b_gate_up is not None else x
    b2 = b_down.contiguous() if b_down is not None else x
    out = torch.empty((t, h), dtype=x.dtype, device=x.device)
    if t == 0:
        return out
    slots = t * k
    hbuf = torch.empty((slots, inter), dtype=torch.float32, device=x.device)
    ybuf = torch.empty((slots, h), dtype=torch.float32, device=x.device)
    ids_s = (topk_ids.stride(0), topk_ids.stride(1))
    tw_s = (topk_weights.stride(0), topk_weights.stride(1))
    launch = {"num_warps": cfg.num_warps}
    if not cfg.dot:
        kern._gemv_gate_up[(slots, triton.cdiv(inter, cfg.block_n))](
            x, topk_ids, w_gate_up, b1, hbuf, h, inter, k, x.stride(0), *ids_s, w_gate_up.stride(0), gu_n, gu_k,
            b1.stride(0), float(alpha), float(limit), HAS_BIAS=b_gate_up is not None, ACT=act,
            INTERLEAVED=interleaved, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, **launch)
        kern._gemv_down[(slots, triton.cdiv(h, cfg.block_h))](
            hbuf, topk_ids, topk_weights, w_down, b2, ybuf, h, inter, k, *ids_s, *tw_s, w_down.stride(0), dn_n,
            dn_k, b2.stride(0), HAS_BIAS=b_down is not None, BLOCK_H=cfg.block_h, BLOCK_K=cfg.block_kd, **launch)
    else:
        slot_major = slots < n_exp
        groups = min(n_exp, slots)
        common = dict(SLOT_MAJOR=slot_major, UPCAST=_interpreting(), IEEE=x.dtype == torch.float32,
                      BLOCK_S=triton.next_power_of_2(slots), BLOCK_M=cfg.block_m, num_stages=cfg.num_stages, **launch)
        kern._grouped_gate_up[(groups, triton.cdiv(inter, cfg.block_n))](
            x, topk_ids, w_gate_up, b1, hbuf, slots, h, inter, k, x.stride(0), *ids_s, w_gate_up.stride(0), gu_n,
            gu_k, b1.stride(0), float(alpha), float(limit), HAS_BIAS=b_gate_up is not None, ACT=act,
            INTERLEAVED=interleaved, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, **common)
        kern._grouped_down[(groups, triton.cdiv(h, cfg.block_h))](
            hbuf, topk_ids, topk_weights, w_down, b2, ybuf, slots, h, inter, k, *ids_s, *tw_s, w_down.stride(0),
            dn_n, dn_k, b2.stride(0), HAS_BIAS=b_down is not None, SPLIT=x.dtype != torch.float32,
            BLOCK_H=cfg.block_h, BLOCK_K=cfg.block_kd, **common)
    kern._reduce[(t, triton.cdiv(h, REDUCE_BLOCK))](ybuf, out, h, k, out.stride(0), BLOCK=REDUCE_BLOCK)
    return out


def compile_cases() -> list[dict]:
    """AOT compile cases of ``moe_experts_kernels`` (its ``aot_cases``): every kernel in bf16 at the default
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
            case(f"gemv gate_up {what}", kern._gemv_gate_up, {"HAS_BIAS": gpt, "ACT": act, "INTERLEAVED": gpt,
                                                              "BLOCK_N": gemv.block_n, "BLOCK_K": gemv.block_k},
                 gemv, **lay),
            case(f"gemv down {what}", kern._gemv_down, {"HAS_BIAS": gpt, "BLOCK_H": gemv.block_h,
                                                        "BLOCK_K": gemv.block_kd}, gemv, **lay) if gpt else None,
            case(f"grouped gate_up {what}", kern._grouped_gate_up,
                 {"HAS_BIAS": gpt, "ACT": act, "INTERLEAVED": gpt, **grouped, "BLOCK_N": dot.block_n,
                  "BLOCK_K": dot.block_k}, dot, **lay),
            case(f"grouped down {what}", kern._grouped_down,
                 {"HAS_BIAS": gpt, "SPLIT": True, **grouped, "BLOCK_H": dot.block_h, "BLOCK_K": dot.block_kd}, dot,
                 **lay) if gpt else None,
        ]
    out = [c for c in out if c is not None]
    out.append(case("reduce", kern._reduce, {"BLOCK": REDUCE_BLOCK}, gemv))
    return out
