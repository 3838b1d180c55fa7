"""Launch configurations of the merged GEMM kernel (``gemm_kernels``): which configs exist for a shape.

:class:`Config` is one launch configuration (BLOCK_M, BLOCK_N, BLOCK_K, SPLIT_K, warps, stages, the tile kind:
``tl.dot``, FMA, GEMV, full-K GEMV). :func:`default_config` is the heuristic used without tuning (interpreter,
graph capture of an untuned shape, tuning off): the widest column block that still gives one program per SM, then
the smallest power-of-two K split that gives two per SM. :func:`candidates` is what the launcher times at the
first call of an unmeasured shape; :func:`sweep_configs` / :func:`short_configs` what
``benchmarks/sweeps/sweep_decode_gemm.py`` times (its winners are the measured table, ``gemm_tables``);
``benchmarks/ops/bench_norm_gemm_pair.py`` sweeps :func:`gemv_full_tiles` for the RMSNorm prologue.

Configs with ``num_warps * warp_size > 1024`` are dropped (ROCm's 64-wide wavefronts), and every tile stays
within :data:`TILE_BUDGET`, the register budget found spill-free by AOT compiles for sm_90 and gfx942. Block
sizes follow the issue's guidance (BLOCK_N 16-128, BLOCK_K 64-256, padded M of 16). Everything here is a pure
function of the shape, dtype, SM count and warp size, except the two device probes :func:`warp_size` and
:func:`_sms`.
"""

from __future__ import annotations

import dataclasses

import torch
import triton

#: dtypes the kernel takes (x, weights and biases of one dtype).
DTYPES = (torch.float16, torch.bfloat16, torch.float32)
#: Largest M (tokens) the kernel takes: the decode buckets of the level-2 override (``aten_gemm_max_m``'s
#: default); larger M is compute-bound and belongs to cuBLAS/hipBLASLt or Inductor's templates.
MAX_M = 32
#: Threads per program a GPU can launch (CUDA and HIP both).
MAX_THREADS = 1024


@dataclasses.dataclass(frozen=True)
class Config:
    """One launch configuration.

    Attributes:
        block_m: padded rows (16/32 with ``dot``; 1/2/4/8 for FMA); block_n, block_k: tile of a weight;
        split_k: K ranges summed through the workspace (1 = direct store); num_warps, num_stages: Triton's;
        dot: ``tl.dot`` tiles (True) or a broadcast multiply + sum (False).
        late: (with ``dot=False``) the GEMV tile: products accumulate in a (BLOCK_M, BLOCK_N, BLOCK_K) float32
            register tile, summed over K once after the K loop (no cross-thread reduction per K step).
        full: (with ``dot=False``) the full-K GEMV tile: BLOCK_K covers the program's whole K range (K / split_k
            padded to a power of two), so every weight load of a program is issued before the first FMA (one
            iteration, no K loop); then one ``tl.sum`` over K per row of x (M in registers, one row at a time).
        evict: load the weights with ``eviction_policy="evict_first"`` (they are streamed once per step).
    """

    block_m: int
    block_n: int
    block_k: int
    split_k: int = 1
    num_warps: int = 4
    num_stages: int = 3
    dot: bool = True
    late: bool = False
    full: bool = False
    evict: bool = False


def prologue_fits(cfg: Config, k: int) -> bool:
    """Whether ``cfg`` can run an RMSNorm prologue: the full-K GEMV tile without a K split, so every program
    holds whole rows of x (BLOCK_K >= K) and normalises them itself."""
    return cfg.full and not cfg.dot and cfg.split_k == 1 and cfg.block_k >= k


#: Largest BLOCK_M * BLOCK_K of a dot tile with the RMSNorm prologue (the x, residual and weight tiles of a K step
#: in registers next to the dot's operands). AOT compiles (triton 3.9, 2026-12-03, merged kernel with add + RMSNorm,
#: BLOCK_N 32, 4 warps): 16 x 64 and 32 x 32 compile without spills on sm_90 (186 / 168 registers), gfx942 and gfx950;
#: 16 x 128 spilled 48 B of stack on sm_90 and 77 SGPRs on gfx942, 32 x 64 102 SGPRs on gfx942 (8 at 8 warps).
NORM_DOT_MK = 1024


def dot_prologue_fits(cfg: Config, dtype: torch.dtype) -> bool:
    """Whether ``cfg`` can run the dot tile's RMSNorm prologue (``gemm_kernels._norm_tile``, M 2..32): a ``tl.dot``
    tile without a K split (the row's rstd needs the whole K in one program: it scales the float32 accumulator
    after the K loop), for bfloat16 / float32 only: the activation tile is ``s * (g + offset)`` before the rstd,
    which can overflow float16's 65504 where ``s * rstd * (g + offset)`` does not (bfloat16 and float32 have
    float32's range); BLOCK_M * BLOCK_K <= :data:`NORM_DOT_MK` (registers)."""
    return (cfg.dot and cfg.split_k == 1 and dtype in (torch.bfloat16, torch.float32)
            and cfg.block_m * cfg.block_k <= NORM_DOT_MK)


def norm_dot_config(m: int, k: int, dtype: torch.dtype, warp: int = 32) -> Config:
    """The dot tile the RMSNorm fold runs at M 2..32 when the GEMM's own pick cannot take the prologue (a GEMV
    tile, a K split): BLOCK_M 16 / 32, BLOCK_N 32, 4 warps, 3 stages, no K split, the largest BLOCK_K of
    :func:`tiles` within :data:`NORM_DOT_MK`. The family of the 4-warp no-split dot tiles that won Qwen3's
    q/k/v at M = 8 and 32 (:func:`deep_dot_configs`); not measured with the prologue (the fold is off at M >= 2
    until it is)."""
    block_m = 16 if m <= 16 else 32
    table = {(bn, w): bk for bn, bk, w in tiles(block_m, k, dtype, warp)}
    return Config(block_m, 32, min(table.get((32, 4), 64), NORM_DOT_MK // block_m), 1, 4, 3, True)


def warp_size() -> int:
    """Warp (wavefront) size of the current device: 64 on HIP (CDNA), 32 on NVIDIA and the interpreter."""
    from .sigmoid_gate import warp_size as ws

    return ws()


def _sms() -> int:
    if torch.cuda.is_available():
        return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    return 132  # interpreter: the H200's count, only shapes the default config


def _pow2_at_least(v: int) -> int:
    return triton.next_power_of_2(max(int(v), 1))


def _blocks(ns: tuple[int, ...], block_n: int) -> int:
    return sum(triton.cdiv(n, block_n) for n in ns)


def _split_for(ns: tuple[int, ...], k: int, block_n: int, block_k: int, sms: int) -> int:
    """Smallest power-of-two K split (<= 8, each split >= one BLOCK_K) giving >= 2 programs per SM; none
    when the column blocks alone give >= 1.5 per SM (the split's workspace round trip would cost more)."""
    split, programs = 1, _blocks(ns, block_n)
    if 2 * programs >= 3 * sms:
        return 1
    while programs * split < 2 * sms and split < 8 and k >= 2 * split * block_k:
        split *= 2
    return split


#: Register budget of a ``tl.dot`` program: BLOCK_M * BLOCK_N * BLOCK_K <= TILE_BUDGET * num_warps (16-bit
#: inputs; half for float32). Measured by AOT compiling every :func:`tiles` entry for sm_90 (ptxas -v) and
#: gfx942 (triton 3.9, 2026-12-01): none spilled (sm_90: 127-182 registers; gfx942: 58-194 VGPRs, no scratch),
#: while tiles at twice the budget did: M 16 x N 64 x K 256 at 4 warps 255 registers + 36 B spilled on sm_90,
#: N 128 x K 128 2260 B; N 64 x K 256 at 8 warps spilled 31 VGPRs on gfx942.
TILE_BUDGET = 16384


def tiles(block_m: int, k: int, dtype: torch.dtype, warp: int) -> list[tuple[int, int, int]]:
    """(BLOCK_N, BLOCK_K, num_warps) within :data:`TILE_BUDGET`, BLOCK_N 16-128, BLOCK_K 64-256 (128 for float32;
    <= K padded to a power of two), 4 or 8 warps with ``num_warps * warp <= 1024`` (ROCm wave64: both fit)."""
    budget = TILE_BUDGET // (2 if dtype == torch.float32 else 1)
    kmax = max(16, _pow2_at_least(k))
    # BLOCK_K at most 512 bytes of a weight row: N 16 x K 512 at 8 warps spilled 12 B on sm_90 (128 registers)
    bk_max = 128 if dtype == torch.float32 else 256
    out = []
    for warps in (4, 8):
        if warps * warp > MAX_THREADS:
            continue
        for bn in (16, 32, 64, 128):
            bk = bk_max
            while bk > 64 and block_m * bn * bk > budget * warps:
                bk //= 2
            if block_m * bn * bk <= budget * warps:
                out.append((bn, min(bk, kmax), warps))
    return out


def default_config(m: int, ns: tuple[int, ...], k: int, dtype: torch.dtype, sms: int | None = None,
                   warp: int = 32) -> Config:
    """The untuned config (see the module docstring); a pure function of the shape and SM count.

    ``tl.dot`` with M padded to 16 (32 above 16 rows), 8 warps, the widest BLOCK_N of 64/32/16 giving >= one
    program per SM, the largest BLOCK_K of :func:`tiles` for it, then the K split of :func:`_split_for`.
    A guess from the issue's guidance, not measured: it has to be correct, capture-safe and not slow.
    """
    sms = sms or _sms()
    block_m = 16 if m <= 16 else 32
    block_n = 16
    for bn in (64, 32):
        if _blocks(ns, bn) >= sms:
            block_n = bn
            break
    table = {(bn, w): bk for bn, bk, w in tiles(block_m, k, dtype, warp)}
    warps = 8 if (block_n, 8) in table else 4
    block_k = table[(block_n, warps)]
    return Config(block_m, block_n, block_k, _split_for(ns, k, block_n, block_k, sms), warps, 3, True)


#: Largest M the GEMV tile takes: its 3-D accumulator grows with M (decode buckets need M <= 8).
GEMV_MAX_M = 8
#: float32 products each thread of a GEMV tile keeps (BLOCK_M * BLOCK_N * BLOCK_K / threads): 32-64, i.e. at
#: M = 1 four to eight 16-byte weight loads in flight per thread per K step. A guess bounded like the dot
#: tiles' budget (64 float32 accumulators); tests/test_triton_aot.py compiles the aot_cases for spills and
#: benchmarks/sweeps/sweep_decode_gemm.py measures which tile wins.
GEMV_ELEMS = (32, 64)


def gemv_tiles(m: int, k: int, warp: int) -> list[tuple[int, int, int]]:
    """(BLOCK_N, BLOCK_K, num_warps) of the GEMV tile at M <= :data:`GEMV_MAX_M`: BLOCK_N 4-32, BLOCK_K
    128-512 (<= K padded to a power of two), 4 or 8 warps (``num_warps * warp <= 1024``), with
    :data:`GEMV_ELEMS` products per thread."""
    if m > GEMV_MAX_M:
        return []
    bm = _pow2_at_least(m)
    kmax = max(16, _pow2_at_least(k))
    out = []
    for warps in (4, 8):
        if warps * warp > MAX_THREADS:
            continue
        for bn in (4, 8, 16, 32):
            for bk in (128, 256, 512):
                if bk > kmax and bk != 128:
                    continue
                e = bm * bn * min(bk, kmax) / (warps * warp)
                if GEMV_ELEMS[0] <= e <= GEMV_ELEMS[1]:
                    out.append((bn, min(bk, kmax), warps))
    return sorted(set(out))


def gemv_configs(m: int, ns: tuple[int, ...], k: int, sms: int, warp: int) -> list[Config]:
    """Every GEMV-tile config of :func:`gemv_tiles` at its automatic K split (:func:`_split_for`), and
    without a split where that split is > 1 and the column blocks alone fill the SMs once."""
    out = []
    for bn, bk, warps in gemv_tiles(m, k, warp):
        split = _split_for(ns, k, bn, bk, sms)
        out.append(Config(_pow2_at_least(m), bn, bk, split, warps, 3, False, True))
        if split > 1 and _blocks(ns, bn) >= sms:
            out.append(Config(_pow2_at_least(m), bn, bk, 1, warps, 3, False, True))
    return out


#: 16-bit weight elements each thread of a full-K GEMV tile loads (BLOCK_N * BLOCK_K / threads): 16-128, i.e.
#: 2-16 16-byte loads in flight per thread (8-64 32-bit registers for the packed tile). Issue 19's diagnosis
#: (H200, 2026-12-01, CUPTI kernel times): the runtime-K-loop GEMV tile had ~8 KB in flight per program
#: and ran at the speed of a naive read; the upper end is bounded by the AOT spill check
#: (tests/test_triton_aot.py, sm_90 and gfx942), the rest is left to the sweep.
GEMV_FULL_ELEMS = (16, 128)


def gemv_full_tiles(m: int, k: int, split: int, warp: int, warp_counts: tuple[int, ...] = (4, 8)
                    ) -> list[tuple[int, int, int]]:
    """(BLOCK_N, BLOCK_K, num_warps) of the full-K GEMV tile at M <= :data:`GEMV_MAX_M` and K split ``split``:
    BLOCK_K = ceil(K / split) padded to a power of two (>= 16), BLOCK_N 1-16, ``warp_counts`` warps (the sweep's
    4 and 8; benchmarks pass others) with ``num_warps * warp <= 1024``, :data:`GEMV_FULL_ELEMS` weight elements
    per thread. Empty above M = 8."""
    if m > GEMV_MAX_M:
        return []
    bk = max(16, _pow2_at_least(triton.cdiv(k, split)))
    out = []
    for warps in warp_counts:
        if warps * warp > MAX_THREADS:
            continue
        for bn in (1, 2, 4, 8, 16):
            e = bn * bk / (warps * warp)
            if GEMV_FULL_ELEMS[0] <= e <= GEMV_FULL_ELEMS[1]:
                out.append((bn, bk, warps))
    return out


def gemv_full_configs(m: int, ns: tuple[int, ...], k: int, sms: int, warp: int) -> list[Config]:
    """Full-K GEMV configs (:func:`gemv_full_tiles`), weights loaded ``evict_first``; without a K split, and
    with the smallest power-of-two split (<= 8) that fills the SMs where the column blocks alone cannot
    (a split-K reduce launch costs ~1-2 us, the H200 CUPTI profile); plus the normal-eviction twins of the
    64-elements-per-thread tiles, so the sweep shows what ``evict_first`` is worth."""
    out = []
    bm = _pow2_at_least(m)
    for split in (1, 2, 4, 8):
        if split > 1 and k < 16 * split:
            break
        for bn, bk, warps in gemv_full_tiles(m, k, split, warp):
            blocks = _blocks(ns, bn)
            if split > 1 and (blocks >= sms or blocks * split // 2 >= sms or warps != 4):
                continue  # columns fill the SMs already (or a smaller split did); splits at 4 warps only
            out.append(Config(bm, bn, bk, split, warps, 1, False, False, True, True))
            if split == 1 and bn * bk == 64 * warps * warp:
                out.append(Config(bm, bn, bk, split, warps, 1, False, False, True, False))
    return out


#: LDS bytes a swept ``tl.dot`` config may ask for its pipeline stages ((BLOCK_M + BLOCK_N) * BLOCK_K * 2 B per
#: stage): gfx942's 64 KiB (the smallest of our targets; sm_90 has 227 KiB).
STAGE_LDS_BYTES = 64 << 10


def deep_dot_configs(m: int, ns: tuple[int, ...], k: int, dtype: torch.dtype, sms: int, warp: int) -> list[Config]:
    """``tl.dot`` tiles with a deeper software pipeline (num_stages 5: more K blocks of the weight in flight
    per program, the lever the H200 CUPTI profile points at) for M 8..32, 16-bit dtypes: BLOCK_N 16/32 of
    :func:`tiles` at 4 warps, at the automatic K split and without a split, within :data:`STAGE_LDS_BYTES`;
    plus each tile's 3-stage, no-split twin (to separate the stages' effect from the 4 warps' and the split's).
    Caveat: AOT compiles with the local triton 3.9 report the same shared memory at num_stages 1, 3 and 5
    (even for a plain dot loop), so that Triton pipelines this loop is not confirmed from the CPU machine."""
    if not GEMV_MAX_M <= m <= MAX_M or dtype == torch.float32:
        return []
    block_m = 16 if m <= 16 else 32
    out = []
    for bn, bk, warps in tiles(block_m, k, dtype, warp):
        if bn > 32 or warps != 4:  # 4 warps: the 8-warp dot tiles are candidates() already (3 stages)
            continue
        stages = 5
        while bk > 64 and (block_m + bn) * bk * 2 * stages > STAGE_LDS_BYTES:
            bk //= 2
        if (block_m + bn) * bk * 2 * stages > STAGE_LDS_BYTES:
            continue
        split = _split_for(ns, k, bn, bk, sms)
        for sp in sorted({split, 1}):
            out.append(Config(block_m, bn, bk, sp, warps, stages, True))
        # the 3-stage twin: the 2026-12-01 sweep's winners (4 warps, 5 stages, no split) had none, so what the 5 stages
        # are worth (vs the 4 warps and the missing split) is not measured yet
        out.append(Config(block_m, bn, bk, 1, warps, 3, True))
    return out


def short_configs(m: int, ns: tuple[int, ...], k: int, dtype: torch.dtype, sms: int, warp: int) -> list[Config]:
    """A short sweep list (``sweep_decode_gemm.py --short``: compiles dominate a device call), 4-7 configs,
    the kinds that won the 2026-12-01 sweeps (``results/runs/decode_gemm_layer.csv``): the default; below M = 8
    (16-bit) the full-K GEMV tiles with ``evict_first`` at 32 and 64 weight elements per thread, 4 and 8 warps, each at
    its smallest SM-filling K split (none when the columns fill the SMs), i.e. the M = 1 winners' family
    (not at M = 8: it lost there, Qwen3 q/k/v 10.4 vs 5.95 us); from M = 8 the deep-pipeline dot
    tiles (:func:`deep_dot_configs`, 5 stages only) and the 8-warp BLOCK_N 64
    dot tile without a split (Llama gate/up's M = 8 winner)."""
    out = [default_config(m, ns, k, dtype, sms, warp)]
    if dtype != torch.float32 and m < GEMV_MAX_M:
        out += [c for c in gemv_full_configs(m, ns, k, sms, warp)
                if c.evict and c.block_n * c.block_k / (c.num_warps * warp) in (32, 64)]
    if dtype != torch.float32 and m >= GEMV_MAX_M:
        out += [c for c in deep_dot_configs(m, ns, k, dtype, sms, warp) if c.num_stages == 5]
        bm = 16 if m <= 16 else 32
        out += [Config(bm, 64, bk, 1, 8, 3, True) for bn, bk, w in tiles(bm, k, dtype, warp) if (bn, w) == (64, 8)]
    return _distinct_fitting(out, warp)


def _distinct_fitting(configs: list[Config], warp: int) -> list[Config]:
    """``configs`` in order without repeats and without those over ``MAX_THREADS`` threads at ``warp``."""
    seen, kept = set(), []
    for c in configs:
        if c not in seen and c.num_warps * warp <= MAX_THREADS:
            seen.add(c)
            kept.append(c)
    return kept


def sweep_configs(m: int, ns: tuple[int, ...], k: int, dtype: torch.dtype, sms: int, warp: int) -> list[Config]:
    """What ``benchmarks/sweeps/sweep_decode_gemm.py`` times per shape: :func:`candidates` (with two runtime-K-loop
    GEMV tiles) plus every :func:`gemv_full_configs` and :func:`deep_dot_configs` entry (16-bit dtypes only;
    float32 keeps the dot tiles)."""
    out = list(candidates(m, ns, k, dtype, sms, warp))
    if dtype != torch.float32:
        out += [c for c in gemv_full_configs(m, ns, k, sms, warp) + deep_dot_configs(m, ns, k, dtype, sms, warp)
                if c not in out]
    return out


def candidates(m: int, ns: tuple[int, ...], k: int, dtype: torch.dtype, sms: int, warp: int) -> list[Config]:
    """Configs timed for one shape (first call on a GPU), 4-6 of them, since each is one more Triton compile
    (~0.5-1 s) at the first call of a shape: the default; the 8-warp :func:`tiles` with BLOCK_N 16/32/64 at
    their auto K split (BLOCK_N 128 too when it still gives one program per SM); the default's BLOCK_N
    without a split when it has one; the FMA variant (BLOCK_N 32, BLOCK_K 128, 4 warps: 127 registers on
    sm_90 at M = 1, no spills) for M <= 2. Configs over 1024 threads at ``warp`` are dropped."""
    block_m = 16 if m <= 16 else 32
    default = default_config(m, ns, k, dtype, sms, warp)
    out = [default]
    for bn, bk, warps in tiles(block_m, k, dtype, warp):
        if warps != default.num_warps or (bn == 128 and _blocks(ns, 128) < sms):
            continue
        out.append(Config(block_m, bn, bk, _split_for(ns, k, bn, bk, sms), warps, 3, True))
    if default.split_k > 1:
        out.append(dataclasses.replace(default, split_k=1))
    if m <= 2 and dtype != torch.float32:
        out.append(Config(_pow2_at_least(m), 32, 128, _split_for(ns, k, 32, 128, sms), 4, 2, False))
    if m <= GEMV_MAX_M and dtype != torch.float32:  # two GEMV tiles: narrow and wide column blocks
        g = gemv_configs(m, ns, k, sms, warp)
        out += g[:1] + g[-1:]
        full = gemv_full_configs(m, ns, k, sms, warp)  # and the full-K tile nearest 64 elements per thread
        if full:
            out.append(min(full, key=lambda c: (abs(c.block_n * c.block_k / (c.num_warps * warp) - 64),
                                                c.split_k, not c.evict, c.num_warps)))
    return _distinct_fitting(out, warp)

