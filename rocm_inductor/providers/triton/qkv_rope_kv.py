"""Triton ``rocm_fused::qkv_rope_kv``: a decode layer's attention prologue in one launch (issue 31).

Math: exactly :func:`rocm_inductor.providers.reference.qkv_rope_kv_ref`, the composition of ``rms_norm_gemm`` (or
``merged_gemm`` when ``eps`` is None) and ``rope_kv_write``, each stage rounding where the unfused graph rounds: the
RMSNorm kernels' float32 math (the sum and the normalised row rounded once each; ``gemm_kernels._norm_row`` /
``_norm_tile``), the GEMMs accumulated in float32 and rounded once to the model dtype, the rotation (RoFormer,
arXiv:2104.09864, as HF spells it) in float32 from those rounded values, rounded once (RTNE). The kernel and its
tile are described in ``qkv_rope_kv_kernels``.

Layout: x (..., K) (any row stride; unit column stride with a norm, copied otherwise), residual x's shape, weights
(N_i, K) with unit K stride (``gemm_merge.validated`` copies others), biases (N_i,); cos/sin broadcast separately
against q's and k's (B, H, S, D) head views (stride 0, ``rope._table_view``); caches (B, H_kv, max_len, D) any
strides, written in place at ``positions``; q_rot out (B, H_q, S, D) contiguous, s (x's shape) contiguous.

Config (:func:`launch_config`): the q/k/v GEMM's own pick (``norm_gemm.pick_config`` + ``fold_config`` with a
norm, ``gemm_merge.pick_config`` without), made split-free by :func:`tile_config` (the epilogue needs complete
sums): the full-K GEMV tile (M <= 8) with BLOCK_K covering K, or the dot tile without its K split (BLOCK_K within
``gemm_configs.NORM_DOT_MK`` with a norm). BLOCK_N is kept (even: two rows per rotation pair), so the launch has
the merged GEMM's program count.

Limits (:func:`check`): the merged GEMM's (float16/bfloat16/float32, M <= 32, three weights, static K/N, unit K
stride), the RMSNorm kernels' with a norm, ``rope_kv.check``'s (on-the-fly tables, one dtype), an even head_dim,
and with an RMSNorm in float16 M <= 8 (the dot tile's prologue may overflow float16:
``gemm_configs.dot_prologue_fits``; the GEMV tile's does not). Not measured on a GPU: ``check`` refuses nothing for
speed; whether the fold is taken is the pass's and the policy's choice.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import triton

from . import gemm_merge as gm
from . import norm_gemm as ng
from . import qkv_rope_kv_kernels as kernels
from . import rms_norm as rms
from . import rope as _rope
from . import rope_kv as _rope_kv
from ._launch import on_device
from .gemm_configs import GEMV_MAX_M, MAX_THREADS, NORM_DOT_MK, Config, dot_prologue_fits, gemv_full_tiles, warp_size

#: Weight elements per thread above which :func:`tile_config` narrows a full-K GEMV tile that lost its K split
#: (``gemm_configs.GEMV_FULL_ELEMS``' upper end, the AOT spill bound of the merged kernel's tile).
_FULL_MAX_ELEMS = 128


def tile_refused(m: int | None, dtype: torch.dtype, normed: bool) -> str | None:
    """Why no split-free tile takes M rows (``m``: the static M or its upper bound) of ``dtype``, else None."""
    if normed and dtype == torch.float16 and (m is None or m > GEMV_MAX_M):
        return (f"float16 with an RMSNorm prologue runs only on the full-K GEMV tile (M <= {GEMV_MAX_M}): the dot "
                f"tile's prologue (s * weight before the rstd) may overflow float16; M (upper bound {m}) is larger")
    return None


def _full_tile(m: int, k: int, block_n: int, warps: int) -> Config:
    """The full-K GEMV tile without a K split: BLOCK_K = K padded to a power of two, BLOCK_N even (two rows per
    pair), narrowed (then widened to more warps) while a thread would hold more than :data:`_FULL_MAX_ELEMS`."""
    bk = max(16, triton.next_power_of_2(k))
    bn = 2 * max(1, block_n // 2)
    warp = warp_size()
    while bn > 2 and bn * bk > _FULL_MAX_ELEMS * warps * warp:
        bn //= 2
    while bn * bk > _FULL_MAX_ELEMS * warps * warp and 2 * warps * warp <= MAX_THREADS:
        warps *= 2
    return Config(triton.next_power_of_2(m), bn, bk, 1, warps, 1, False, False, True, True)


def tile_config(pick: Config, m: int, k: int, dtype: torch.dtype, normed: bool) -> Config | None:
    """The split-free config of the GEMM's pick ``pick`` for M rows of width K (None: :func:`tile_refused`).

    A full-K GEMV pick (M <= 8) keeps its BLOCK_N and warps, with BLOCK_K covering K; a dot pick drops its K split
    (with a norm BLOCK_K <= ``NORM_DOT_MK / BLOCK_M``, as ``norm_gemm.fold_config``) where the dot prologue fits;
    otherwise the full-K GEMV tile nearest 64 weight elements per thread (M <= 8, 16-bit; the merged GEMM's
    ``candidates`` choice), else the RMSNorm fold's dot tile (``gemm_configs.norm_dot_config``)."""
    if tile_refused(m, dtype, normed) is not None:
        return None
    if pick.full and not pick.dot and m <= GEMV_MAX_M:
        return _full_tile(m, k, pick.block_n, pick.num_warps)
    if pick.dot:
        c = dataclasses.replace(pick, split_k=1, block_m=max(pick.block_m, 16 if m <= 16 else 32))
        if normed:
            c = dataclasses.replace(c, block_k=max(16, min(c.block_k, NORM_DOT_MK // c.block_m)))
        if not normed or dot_prologue_fits(c, dtype):
            return c
    if m <= GEMV_MAX_M and dtype != torch.float32:
        warp = warp_size()
        tiles = gemv_full_tiles(m, k, 1, warp)
        bn, _, warps = min(tiles, key=lambda t: abs(t[0] * t[1] / (t[2] * warp) - 64)) if tiles else (4, 0, 4)
        return _full_tile(m, k, bn, warps)
    return ng.norm_dot_config(m, k, dtype)


def launch_config(x2: torch.Tensor, weights: list[torch.Tensor], biases: list[torch.Tensor | None],
                  normed: bool) -> Config:
    """The config a launch runs for (M, K) rows ``x2``: :func:`tile_config` of the q/k/v GEMM's own pick.

    Raises:
        ValueError: :func:`tile_refused`.
    """
    m, k = x2.shape
    if normed:
        pick = ng.fold_config(ng.pick_config(x2, weights, biases), m, k, x2.dtype)
    else:
        pick = gm.pick_config(x2, weights, biases)
    cfg = tile_config(pick, m, k, x2.dtype, normed)
    if cfg is None:
        raise ValueError(f"triton qkv_rope_kv: {tile_refused(m, x2.dtype, normed)}")
    return cfg


def check(spec: dict[str, Any]) -> str | None:
    """Compile-time limits (the module docstring; spec keys: ``rocm_inductor.ops.qkv_rope_kv.qkv_rope_kv_spec``).

    Returns:
        ``None`` if the kernel takes the match, else the reason in plain words.
    """
    if spec.get("device_type") == "cpu" and not gm._interpreting():  # a CPU graph on a GPU host
        return "CPU tensors: Triton runs them only under TRITON_INTERPRET=1"
    why = gm.dtype_and_bucket_refused(spec, "qkv_rope_kv")
    if why is not None:
        return why
    if spec.get("count") != 3:
        return f"{spec.get('count')} weights; qkv_rope_kv takes three (q, k, v)"
    k, ns = spec.get("k"), tuple(spec.get("ns") or (None,))
    if k is None or None in ns:
        return "K or an N is symbolic (weights have static shapes in every model we target)"
    if k < 1:
        return "K = 0: nothing to normalise or multiply"
    if not all(spec.get("weight_k_contiguous", ())):
        return "a weight is not contiguous along K (the kernel streams (N, K) rows with unit K stride)"
    if spec.get("normed"):
        why = rms.check(spec)
        if why is not None:
            return why
    why = _rope_kv.check(spec)
    if why is not None:
        return why
    if spec["head_dim"] % 2:
        return f"head_dim {spec['head_dim']} is odd: the kernel computes the head's features in pairs"
    if not spec.get("heads") or not spec.get("kv_heads"):
        return f"{spec.get('heads')} q heads / {spec.get('kv_heads')} kv heads: nothing to rotate or cache"
    m = spec.get("m") if spec.get("m") is not None else spec.get("m_upper")
    return tile_refused(m, spec.get("dtype"), bool(spec.get("normed")))


def _head_view(b: int, h: int, s: int, d: int) -> torch.Tensor:
    """A (B, H, S, D) shape for ``rope._table_view`` (it reads only the shape): no memory."""
    return torch.empty((b, h, s, d), device="meta")


def qkv_rope_kv(x: torch.Tensor, residual: torch.Tensor | None, norm_weight: torch.Tensor | None, eps: float | None,
                offset: float, weights: list[torch.Tensor], biases: list[torch.Tensor | None], cos: torch.Tensor,
                sin: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, positions: torch.Tensor,
                rotary_dim: int, interleaved: bool, half_table: bool, config: Config | None = None
                ) -> list[torch.Tensor]:
    """One launch of ``qkv_rope_kv_kernels._qkv_rope_kv_kernel``; the caches are written in place.

    Args: as ``rocm_fused::qkv_rope_kv`` (shapes checked by ``ops.qkv_rope_kv.check_args``); ``config``: run this
        split-free :class:`Config` (a full-K GEMV tile covering K, or a dot tile) instead of :func:`launch_config`'s.

    Returns:
        ``[q_rot]`` ((B, H_q, S, D) contiguous), then ``s`` (x's shape) when ``residual`` is given.

    Raises:
        ValueError: what :func:`check` refuses, a config the kernel cannot run, tables that do not broadcast.
    """
    normed = eps is not None
    if not normed and (residual is not None or norm_weight is not None):
        raise ValueError("triton qkv_rope_kv: a residual or norm weight needs eps (eps None means no RMSNorm)")
    if normed:
        rms._validate(x, norm_weight, residual)
    k = x.shape[-1]
    x2 = rms._rows(x, k)
    m = x2.shape[0]
    weights, biases = gm.validated(x2, weights, biases)
    seq, d = positions.shape[0], k_cache.shape[-1]
    b, hq, hkv = m // seq, weights[0].shape[0] // d, k_cache.shape[1]
    spec = {"dtype": x.dtype, "k_dtype": x.dtype, "v_dtype": v_cache.dtype, "table_dtype": cos.dtype,
            "cache_dtype": k_cache.dtype, "head_dim": d, "rotary_dim": rotary_dim, "ndim": 4}
    why = _rope_kv.check(spec) or (f"head_dim {d} is odd" if d % 2 else None) or (
        "K = 0" if k == 0 else None) or (None if hq and hkv else "no q or kv heads")
    if why is not None:
        raise ValueError(f"triton qkv_rope_kv: {why}")
    width = rotary_dim // 2 if half_table else rotary_dim
    qv, kv = _head_view(b, hq, seq, d), _head_view(b, hkv, seq, d)
    tq = (_rope._table_view(cos, qv, width), _rope._table_view(sin, qv, width))
    tk = (_rope._table_view(cos, kv, width), _rope._table_view(sin, kv, width))
    qo = torch.empty((b, hq, seq, d), dtype=x.dtype, device=x.device)
    s = None if residual is None else torch.empty(x.shape, dtype=x.dtype, device=x.device)
    outs = [qo] + ([] if s is None else [s])
    if m == 0:
        return outs
    cfg = config or launch_config(x2, weights, biases, normed)
    full = cfg.full and not cfg.dot
    if cfg.split_k != 1 or cfg.block_m < m or cfg.block_n % 2 or not (cfg.dot or (full and cfg.block_k >= k)):
        raise ValueError(f"triton qkv_rope_kv runs a full-K GEMV tile covering K={k} or a dot tile, without a K "
                         f"split, BLOCK_M >= M={m}, an even BLOCK_N; got {cfg}")
    if normed and cfg.dot and not dot_prologue_fits(cfg, x.dtype):
        raise ValueError(f"triton qkv_rope_kv: the dot tile's RMSNorm prologue does not take {cfg} for {x.dtype}")
    bp = cfg.block_n // 2
    nqp, nkp = triton.cdiv(hq * d // 2, bp), triton.cdiv(hkv * d // 2, bp)
    res = None if residual is None else rms._rows(residual, k)
    nrm = (x2 if res is None else res, x2 if norm_weight is None else norm_weight.contiguous(),
           x2 if s is None else s.view(m, k))
    bs = [bb if bb is not None else weights[0] for bb in biases]
    call = (x2, *weights, *bs, qo, k_cache, v_cache, tq[0], tq[1], positions, *nrm,
            m, k, seq, hq, hkv, d, rotary_dim, k_cache.shape[2], nqp, nkp, x2.stride(0), x2.stride(1),
            0 if res is None else res.stride(0), *(w.stride(0) for w in weights),
            *tq[0].stride(), *tq[1].stride(), *tk[0].stride(), *tk[1].stride(), *k_cache.stride(),
            *v_cache.stride(), positions.stride(0), float(eps or 0.0), float(offset))
    kw = dict(HBQ=biases[0] is not None, HBK=biases[1] is not None, HBV=biases[2] is not None,
              INTERLEAVED=bool(interleaved), HALF_TABLE=bool(half_table), BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
              BLOCK_K=cfg.block_k, EVEN_K=k % cfg.block_k == 0, DOT=cfg.dot, IEEE=x.dtype == torch.float32,
              MANUAL_BF16=gm._interpreting(), FULL=full, EVICT=cfg.evict and full, NORM=normed,
              HAS_RES=res is not None, HAS_G=normed and norm_weight is not None, num_warps=cfg.num_warps,
              num_stages=cfg.num_stages)
    grid = (nqp + 2 * nkp,)
    with on_device(x):
        kernels._qkv_rope_kv_kernel[grid](*call, **kw)
    return outs

