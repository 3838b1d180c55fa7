"""Triton RMSNorm + merged GEMM (``rocm_fused::rms_norm_gemm``): the norm as the GEMM kernel's prologue.

Math: exactly :func:`rocm_inductor.providers.reference.rms_norm_gemm_ref`, with the RMSNorm kernels' float32
math (``rms_norm._inv_rms``: correctly rounded division and sqrt; the sum ``x + residual`` and the normalised
row each rounded once, RTNE) and the merged GEMM's (``gemm_merge``: float32 accumulation, one rounding).

One launch where the config (the measured prologue tile of :data:`TABLE_PATH`, else the GEMM's own pick, as
``merged_gemm`` makes it) is the full-K GEMV tile without a K split (:func:`gemm_merge.prologue_fits`; the
decode M = 1-2 picks): every program loads whole rows of x (and the residual) next to its weight tile,
normalises them itself (K elements per row from L2: 4 KB at Llama-3.2-1B's K = 2048, against the program's
16 KB of weights at the measured BLOCK_N 4), and the program of column block 0 stores the sum ``s``. Otherwise
(dot tiles from M = 4, split-K tiles) two launches: the RMSNorm kernel, then the merged GEMM, which is what the
unfolded graph ran.

Why: at decode the norm before q/k/v, gate/up and lm_head is a latency-bound launch (~1.8 us in a CUDA graph
on the H200 for (1, 2048) bf16, ``benchmarks/results/decode_gemm_ipdl.md``), next to a GEMM whose weights
stream in ~3 us: the fixed cost of the second launch is most of what separates q/k/v from its HBM floor.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from . import gemm_merge as gm
from . import rms_norm as rms

#: Measured prologue tiles (``benchmarks/bench_norm_gemm_pair.py --tiles``). The GEMM's own pick is not the best
#: tile with the prologue: each program normalises whole rows itself, so fewer, wider programs pay less of it.
#: H200, M = 1 (2026-12-01, torch 2.11.0+cu130, triton 3.6.0), one launch vs our norm + the GEMM's own pick:
#: Llama-3.2-1B q/k/v 6.14 vs 6.80 us (BLOCK_N 4, 4 warps; the GEMM's pick BLOCK_N 2 x 8 warps with the
#: prologue: 6.54-6.68), gate/up 18.65 vs 19.00; Qwen3-0.6B q/k/v 4.91 vs 5.81, gate/up 6.05 vs 6.63. Re-measured
#: 2026-12-02 (same GPU and versions, 2-3 runs in one process, warps 2-16, results/norm_gemm_pair_repeat_*.md):
#: Llama q/k/v n4 w4 6.15 median (6.00-6.16), Qwen3 q/k/v now n4 w2 4.78 (4.70-4.82; n16 w8 4.91-5.09),
#: gate/up picks unchanged (within 0.05 us of the best).
TABLE_PATH = os.path.join(os.path.dirname(__file__), "norm_gemm_tuned.json")
#: (M, K, Ns, dtype, device) -> the prologue tile :func:`pick_config` found for it (None: none measured).
_PICKED: dict[tuple, gm.Config | None] = {}


def prologue_config(m: int, k: int, ns: tuple[int, ...], dtype: torch.dtype, device: str | None) -> gm.Config | None:
    """The measured prologue tile of the smallest measured M >= ``m`` on ``device``, where it beat the two launches.

    The table (:data:`TABLE_PATH`, read by ``gemm_merge.load_table``) has the GEMM table's fields, with
    ``fused_us`` (one launch) and ``pair_us`` (our norm kernel + the GEMM) for the times.

    Args:
        m: rows (tokens); k: the norm's width = the GEMMs' K; ns: the GEMMs' N; dtype: x's torch dtype;
        device: ``torch.cuda.get_device_name`` of the GPU (None: the current one; no GPU, no entry).

    Returns:
        a :class:`gemm_merge.Config` whose BLOCK_M covers ``m`` and which takes the prologue, else None (the caller
        uses the GEMM's own config).
    """
    row = next((e for e in gm.table_entries(k, ns, dtype, device, TABLE_PATH) if e["m"] >= m), None)
    if row is None or row["fused_us"] >= row["pair_us"]:
        return None
    cfg = gm.Config(**row["config"])
    return cfg if cfg.block_m >= m and gm.prologue_fits(cfg, k) else None


def pick_config(x2: torch.Tensor, weights: list[torch.Tensor], biases: list[torch.Tensor | None]) -> gm.Config:
    """The config :func:`rms_norm_gemm` runs for (M, K) rows ``x2``: on a GPU the measured prologue tile
    (:func:`prologue_config`, looked up once per shape and process), else the GEMM's own
    (``gemm_merge.pick_config``; it takes the prologue only if :func:`gemm_merge.prologue_fits`)."""
    m, k = x2.shape
    cfg = None
    if x2.is_cuda and not gm._interpreting():
        key = (m, k, tuple(w.shape[0] for w in weights), x2.dtype, str(x2.device))
        if key not in _PICKED:
            _PICKED[key] = prologue_config(m, k, key[2], x2.dtype, gm._device_name())
        cfg = _PICKED[key]
    return cfg or gm.pick_config(x2, weights, biases)


def one_launch(cfg: gm.Config, m: int, k: int) -> bool:
    """Whether :func:`rms_norm_gemm` runs ``cfg`` as one launch for M rows of width K (non-empty outputs): the
    config takes the prologue (:func:`gemm_merge.prologue_fits`) and its BLOCK_M covers M."""
    return gm.prologue_fits(cfg, k) and m <= cfg.block_m


def check(spec: dict[str, Any], device: str | None = None) -> str | None:
    """Compile-time limits: those of the RMSNorm kernels and of the merged GEMM (both paths must run), and on a
    GPU a measured prologue tile (:func:`prologue_config`) for this static M, K, Ns and dtype: a fold is a speed
    choice, taken only where one launch measured faster than the two (elsewhere the graph keeps them, as it
    would run the same two kernels). CPU / the interpreter, or ``ROCM_FUSED_GEMM_UNMEASURED=1`` (as for the
    merged GEMM): no measurement needed.

    Args:
        spec: keys of ``rocm_inductor.ops.norm_gemm.norm_gemm_spec``; device: GPU name (default: the current one;
            none for CPU tensors, :func:`gemm_merge.spec_device`).

    Returns:
        ``None`` if taken, else the reason in plain words.
    """
    why = rms.check(spec) or gm.check(spec)
    device = device or gm.spec_device(spec)
    if why is not None or device is None or gm._interpreting() or os.environ.get("ROCM_FUSED_GEMM_UNMEASURED") == "1":
        return why
    m, k, ns = spec.get("m"), spec.get("k"), tuple(spec.get("ns") or ())
    if m is None:
        return "symbolic M: prologue tiles are measured per static M (norm_gemm_tuned.json)"
    if prologue_config(m, k, ns, spec.get("dtype"), device) is None:
        return (f"no measured prologue tile beats the norm kernel + GEMM at M={m} K={k} N {'/'.join(map(str, ns))} "
                f"on {device} (norm_gemm_tuned.json; benchmarks/bench_norm_gemm_pair.py --tiles)")
    return None


def rms_norm_gemm(x: torch.Tensor, residual: torch.Tensor | None, norm_weight: torch.Tensor | None, eps: float,
                  offset: float, weights: list[torch.Tensor], biases: list[torch.Tensor | None],
                  config: gm.Config | None = None) -> list[torch.Tensor]:
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
    cfg = config or pick_config(x2, weights, biases)
    if m > 0 and all(w.shape[0] > 0 for w in weights) and one_launch(cfg, m, k):
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
