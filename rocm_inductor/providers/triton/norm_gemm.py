"""Triton RMSNorm + merged GEMM (``rocm_fused::rms_norm_gemm``): the norm as the GEMM kernel's prologue.

Math: exactly :func:`rocm_inductor.providers.reference.rms_norm_gemm_ref`, with the RMSNorm kernels' float32
math (``rms_norm._inv_rms``: correctly rounded division and sqrt; the sum ``x + residual`` and the normalised
row each rounded once, RTNE) and the merged GEMM's (``gemm_merge``: float32 accumulation, one rounding).

One launch where the config (the measured prologue tile, :func:`gemm_tables.prologue_config`, else the GEMM's own
pick, as ``merged_gemm`` makes it) is the full-K GEMV tile without a K split (:func:`gemm_configs.prologue_fits`; the
decode M = 1-2 picks): every program loads whole rows of x (and the residual) next to its weight tile,
normalises them itself (K elements per row from L2: 4 KB at Llama-3.2-1B's K = 2048, against the program's
16 KB of weights at the measured BLOCK_N 4), and the program of column block 0 stores the sum ``s``. Otherwise
(dot tiles from M = 4, split-K tiles) two launches: the RMSNorm kernel, then the merged GEMM, which is what the
unfolded graph ran.

At M 2..32 the dot tiles take the prologue too (``gemm_kernels._norm_tile``: row sums of squares next to the dot
in the K loop, the rstd applied to the accumulator rows, the norm weight folded into the activation tile; bf16 /
fp32, no K split: :func:`gemm_configs.dot_prologue_fits`). Where the GEMM's pick is a split or GEMV tile the
fold runs :func:`fold_config`'s dot tile instead. On a GPU the pass takes M >= 2 only where a prologue tile was
measured or ``options={"features": {"norm_gemm_dot": True}}`` asks (spec key ``dot_prologue``): not measured yet.

Why: at decode the norm before q/k/v, gate/up and lm_head is a latency-bound launch (~1.8 us in a CUDA graph
on the H200 for (1, 2048) bf16, ``benchmarks/results/runs/ipdl_pair.csv``), next to a GEMM whose weights
stream in ~3 us: the fixed cost of the second launch is most of what separates q/k/v from its HBM floor.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from ...refusal import NOT_MEASURED, Refusal
from . import gemm_knobs as knobs
from . import gemm_merge as gm
from . import gemm_tables as tables
from . import rms_norm as rms
from .gemm_configs import NORM_DOT_MK, Config, dot_prologue_fits, norm_dot_config, prologue_fits
from .gemm_tables import prologue_config

#: (M, K, Ns, dtype, device) -> the prologue tile :func:`pick_config` found for it (None: none measured).
_PICKED: dict[tuple, Config | None] = {}


def pick_config(x2: torch.Tensor, weights: list[torch.Tensor], biases: list[torch.Tensor | None]) -> Config:
    """The config :func:`rms_norm_gemm` runs for (M, K) rows ``x2``: on a GPU the measured prologue tile
    (:func:`prologue_config`, looked up once per shape and process), else the GEMM's own
    (``gemm_merge.pick_config``; it takes the prologue only if :func:`gemm_configs.prologue_fits`)."""
    m, k = x2.shape
    cfg = None
    if x2.is_cuda and not gm._interpreting():
        key = (m, k, tuple(w.shape[0] for w in weights), x2.dtype, str(x2.device))
        if key not in _PICKED:
            _PICKED[key] = prologue_config(m, k, key[2], x2.dtype, tables._device_name())
        cfg = _PICKED[key]
    return cfg or gm.pick_config(x2, weights, biases)


def one_launch(cfg: Config, m: int, k: int, dtype: torch.dtype | None = None) -> bool:
    """Whether :func:`rms_norm_gemm` runs ``cfg`` as one launch for M rows of width K (non-empty outputs): the
    config takes the GEMV prologue (:func:`gemm_configs.prologue_fits`) or, given ``dtype``, the dot tile's
    (:func:`gemm_configs.dot_prologue_fits`), and its BLOCK_M covers M."""
    fits = prologue_fits(cfg, k) or (dtype is not None and dot_prologue_fits(cfg, dtype))
    return fits and m <= cfg.block_m


def fold_config(cfg: Config, m: int, k: int, dtype: torch.dtype) -> Config:
    """The config of the fold for the GEMM's pick ``cfg``: ``cfg`` where it runs in one launch; at M >= 2 a dot
    tile of it without the K split (BLOCK_K within ``gemm_configs.NORM_DOT_MK``), else
    :func:`gemm_configs.norm_dot_config`, where those can (bf16 / fp32); else ``cfg`` (two launches: the norm
    kernel, then the GEMM)."""
    if one_launch(cfg, m, k, dtype) or m < 2:
        return cfg
    own = dataclasses.replace(cfg, split_k=1, block_k=max(16, min(cfg.block_k, NORM_DOT_MK // cfg.block_m)))
    for c in ((own,) if cfg.dot else ()) + (norm_dot_config(m, k, dtype),):
        if one_launch(c, m, k, dtype):
            return c
    return cfg


def check(spec: dict[str, Any], device: str | None = None) -> str | None:
    """Compile-time limits: those of the RMSNorm kernels and of the merged GEMM (both paths must run), and on a
    GPU a measured prologue tile (:func:`prologue_config`) for this static M, K, Ns and dtype: a fold is a speed
    choice, taken only where one launch measured faster than the two (elsewhere the graph keeps them, as it
    would run the same two kernels). CPU / the interpreter, or ``ROCM_FUSED_GEMM_UNMEASURED=1`` (as for the
    merged GEMM): no measurement needed.

    ``spec["dot_prologue"]`` (the pass sets it from ``options={"features": {"norm_gemm_dot": True}}``) takes
    M >= 2 (or symbolic) without a measured tile, bf16 / fp32 only: the dot tile's prologue, not measured yet.

    Args:
        spec: keys of ``rocm_inductor.ops.norm_gemm.norm_gemm_spec``; device: GPU name (default: the current one;
            none for CPU tensors, :func:`gemm_tables.spec_device`).

    Returns:
        ``None`` if taken, else the reason in plain words.
    """
    why = rms.check(spec) or gm.check(spec)
    device = device or tables.spec_device(spec)
    if why is not None or device is None or gm._interpreting() or knobs.current().unmeasured:
        return why
    m, k, ns = spec.get("m"), spec.get("k"), tuple(spec.get("ns") or ())
    if spec.get("dot_prologue") and (m is None or m >= 2):  # asked for (options features.norm_gemm_dot)
        if spec.get("dtype") not in (torch.bfloat16, torch.float32):
            return ("the dot tile's RMSNorm prologue takes bfloat16 / float32 (s * weight before the rstd may "
                    "overflow float16)")
        return None
    if m is None:
        return "symbolic M: prologue tiles are measured per static M (tuning store: rms_norm_gemm)"
    if prologue_config(m, k, ns, spec.get("dtype"), device) is None:
        path = knobs.current().norm_table
        rows = tables.table_entries(k, ns, spec.get("dtype"), device, path, tables.tuning_tables.NORM_OP)
        if not any(e["m"] >= m for e in rows):
            return Refusal(f"no measured prologue tile at M={m} K={k} N {'/'.join(map(str, ns))} on {device} (none "
                           "measured: a level-2 compile measures it; tuning store: rms_norm_gemm)", NOT_MEASURED)
        return (f"no measured prologue tile beats the norm kernel + GEMM at M={m} K={k} N {'/'.join(map(str, ns))} "
                f"on {device} (tuning store: rms_norm_gemm; benchmarks/ops/bench_norm_gemm_pair.py --tiles)")
    return None


def rms_norm_gemm(x: torch.Tensor, residual: torch.Tensor | None, norm_weight: torch.Tensor | None, eps: float,
                  offset: float, weights: list[torch.Tensor], biases: list[torch.Tensor | None],
                  config: Config | None = None) -> list[torch.Tensor]:
    """RMSNorm of ``x (+ residual)`` and ``[y @ w.T (+ b)]`` (module docstring: one launch where it fits).

    Args:
        x: (..., K) float16/bfloat16/float32, M = x.numel() / K <= ``gemm_merge.MAX_M``.
        residual: x's shape and dtype, or None. norm_weight: (K,) float16/bfloat16/float32/float64 or None.
        eps, offset: as ``rocm_fused::rms_norm``. weights, biases: as ``gemm_merge.merged_gemm``.
        config: run this GEMM config instead of the table's / tuned one (tests, benchmarks).

    Returns:
        ``[out_0, ...]`` ((M, N_i), x's dtype) then ``s`` (x's shape) when ``residual`` is given.

    Raises:
        ValueError: what ``rms_norm.fused_add_rms_norm`` or ``gemm_merge.merged_gemm`` refuse (dtypes, M > 32,
            mismatched shapes).
    """
    rms._validate(x, norm_weight, residual)  # before reading x.shape[-1]: a 0-d x raises ValueError, not IndexError
    k = x.shape[-1]
    x2 = rms._rows(x, k)
    m = x2.shape[0]
    weights, biases = gm.validated(x2, weights, biases)
    cfg = config or fold_config(pick_config(x2, weights, biases), m, k, x.dtype)
    if m > 0 and all(w.shape[0] > 0 for w in weights) and one_launch(cfg, m, k, x.dtype):
        s = None if residual is None else torch.empty(x.shape, dtype=x.dtype, device=x.device)
        norm = gm.NormPrologue(None if residual is None else rms._rows(residual, k),
                               None if norm_weight is None else norm_weight.contiguous(), eps, offset,
                               None if s is None else s.view(m, k))
        outs = gm.launch(x2, weights, biases, cfg, norm=norm)
        return outs + ([] if s is None else [s])
    if residual is not None:
        y, s = rms.fused_add_rms_norm(x, residual, norm_weight, eps, offset)
    else:
        y, s = rms.rms_norm(x, norm_weight, eps, offset), None
    outs = gm.launch(y.reshape(m, k), weights, biases, cfg)  # weights validated and cfg picked above
    return outs + ([] if s is None else [s])
