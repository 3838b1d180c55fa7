"""Launch configurations of the routed-experts kernels (``moe_experts_kernels``, launched by ``moe_experts.py``).

:class:`Config` is one configuration (path and tile sizes), :data:`CONFIGS` what a sweep times
(``benchmarks/ops/bench_moe_experts.py --sweep``), :func:`default_config` the untuned choice: the GEMV path at one
token (each selected expert is read once anyway, and the per-slot grid of k * I / BLOCK_N programs fills the GPU),
the grouped ``tl.dot`` path from two tokens on (an expert chosen by several tokens is read once per 16 of them).
Pure data and functions of the shape: no device probe.
"""

from __future__ import annotations

import dataclasses

import torch

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
#: and ``tl.dot`` tiles. Each compiles without spills for sm_90 at HF's strides (AOT, specialised as
#: ``moe_experts_kernels.aot_cases``, triton 3.9, 2026-12-03: 64-252 registers, no stack); down tiles of
#: BLOCK_H 64 x BLOCK_K 128 and larger spilled (255 registers, 16-152 B of stack: the float32 h tile and its two
#: 16-bit parts) and are left out. Not yet timed: ``benchmarks/ops/bench_moe_experts.py --sweep`` measures them.
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

#: The defaults: 16 intermediate rows per GEMV program (Qwen3-MoE at T = 1: 8 slots x 48 tiles = 384 programs,
#: about three per H200 SM at its 153 registers, one wave) and the smallest spill-free dot tile set.
GEMV_DEFAULT = CONFIGS[0]
DOT_DEFAULT = CONFIGS[7]


def default_config(tokens: int, dtype: torch.dtype = torch.bfloat16) -> Config:
    """The untuned config for T = ``tokens`` (see the module docstring): GEMV at one token, grouped above.

    A guess within the register budgets of :data:`CONFIGS` (float32 weights halve the GEMV's K chunk); the
    sweep of ``bench_moe_experts.py`` is what confirms or replaces it.
    """
    cfg = GEMV_DEFAULT if tokens <= 1 else DOT_DEFAULT
    if dtype == torch.float32:
        cfg = dataclasses.replace(cfg, block_k=cfg.block_k // 2, block_kd=cfg.block_kd // 2)
    return cfg
