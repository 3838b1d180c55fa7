"""Triton routed experts for decode buckets: the launcher, its configs and limits (kernels: ``moe_experts_kernels``).

Math: exactly :func:`rocm_inductor.providers.reference_moe_experts.moe_experts_ref` up to the float32 summation
order (every product accumulated in float32, activation and the weighted sum over the k slots in float32, the
output rounded once; the down GEMM's float32 input is carried as two 16-bit parts, ``moe_experts_kernels``).

Three launches, no atomics, no gathered weight copy, no host sync (capture-safe: every grid is a function of
the shapes):

1. gate/up + activation -> ``h`` (T * k, I) float32: per slot (GEMV path) or per expert (grouped path);
2. down, times the slot's routing weight -> ``Y`` (T * k, H) float32, same path;
3. the reduce over the k slots -> (T, H) in x's dtype.

Which path and tile sizes: a :class:`Config` of ``moe_experts_configs`` (``moe_experts(..., config=)``; the
tuning store or ``benchmarks/ops/bench_moe_experts.py --sweep`` pick one of :data:`CONFIGS`), else
:func:`default_config` (GEMV at one token, grouped ``tl.dot`` from two). Buffers: ``h`` and ``Y`` at T = 32,
k = 8, I = 768, H = 2048 are 0.8 MB and 2.1 MB.

Limits (what :func:`check` refuses; the pass then leaves the graph to Inductor and reports why): dtype not
float16/bfloat16/float32; more than :data:`MAX_TOKENS` tokens (prefill: Inductor's GEMMs win there);
symbolic sizes other than T.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import triton

from . import moe_experts_kernels as kern
from .moe_experts_configs import CONFIGS, REDUCE_BLOCK, Config, default_config

__all__ = ["CONFIGS", "Config", "check", "default_config", "moe_experts"]

#: dtypes the kernel takes.
DTYPES = (torch.float16, torch.bfloat16, torch.float32)
#: Largest token count (T) the kernel is offered for: the default decode bucket (``rocm_inductor/buckets.py``,
#: ``aten_gemm_max_m = 32``).
MAX_TOKENS = 32
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
