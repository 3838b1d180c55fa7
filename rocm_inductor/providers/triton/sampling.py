"""Triton sampler: temperature, top-k, top-p, min-p and one draw per row in one capture-safe kernel.

Meaning: :func:`rocm_inductor.providers.reference_sampling.sample_ref` (HF's chain). No sort: each filter is
a *threshold* on the order-preserving int32 key of the float32 scaled logit (``bits`` for ``x >= 0``,
``bits ^ 0x7FFFFFFF`` below), found by a 17-ary search (16 pivots per pass over the row; about 8 passes for
the 2^32 key range):

- top-k: the largest key ``t`` with ``count(key >= t) >= k`` is the k-th largest logit exactly; keeping
  ``key >= t`` is HF's ``scores >= topk(scores, k)[0][..., -1]`` (ties at the k-th value kept).
- top-p: HF drops token i iff the ascending cumulative probability at i is ``<= 1 - p``. Without a sort,
  "cumulative at i" is taken as the mass of tokens with ``key <= key_i`` (all ties together), so the kept
  set is ``key >= t`` with ``t`` the largest key whose strictly-lower mass is ``<= (1 - p) * Z``. Equal to
  HF except where tokens *tie exactly* at the boundary: HF keeps the ones its sort happened to put last,
  we keep all of them. ``p <= 0`` keeps the largest token(s).
- min-p: ``exp(s - max) >= min_p`` (HF's ``probs >= min_p * max_prob``; the normaliser cancels).
- draw: Gumbel-max over the kept set, ``argmax(s_i - log(-log(u_i)))`` (exact categorical sampling from
  ``softmax(s)`` restricted to the kept set; Gumbel 1954, used for sampling by e.g. vLLM and gpt-fast's
  equivalent exponential race). ``u`` is Philox (Triton's ``tl.random``) keyed by the seed read from a
  device tensor, counter ``(column, row)``: one independent stream per row, no host state, so a captured
  graph replays with whatever seed the graph's ``torch.randint`` drew. The 24-bit uniforms bound the Gumbel
  tail at about 16.6 (a token ``e^16`` times less likely than the top one is drawn slightly too rarely).

Rows are packed ``ROWS`` per program for small vocabularies (and the interpreter); a large vocabulary is
streamed in ``BLOCK``-wide tiles, so any V works (V not a multiple of BLOCK is masked). Performance is not
tuned: one program per row streams the row about 2 + 8 (top-k) + 9 (top-p) times; a B=1 row on a large
vocabulary uses one program only (see benchmarks/bench_sampling.py).

Limits (:func:`check`): scores float16/bfloat16/float32, 2D; B * V < 2^31 is not needed (int64 offsets).
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from ...ops.sampling import ban_rows, per_row

INPUT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
#: Pivots per search pass (17-ary search): a (ROWS, BLOCK, NPIV) compare tile per step.
NPIV = 16
#: Elements per tile (ROWS * BLOCK): 2048 x 16 pivots = 32K compares per step. Not measured on a GPU.
TILE = 2048
MAX_BLOCK = 2048
MAX_ROWS = 256
#: Under ``TRITON_INTERPRET=1`` (CPU tests) numpy pays per op, not per element: pack many more rows.
INTERP_TILE = 16384
INTERP_MAX_ROWS = 1024
_KEY_MIN = tl.constexpr(-(2**31))  # a constexpr: compiled Triton reads no plain globals


def check(spec: dict[str, Any]) -> str | None:
    """Compile-time limits: ``spec["dtype"]`` in :data:`INPUT_DTYPES`; anything else is taken."""
    if spec.get("dtype") not in INPUT_DTYPES:
        return f"triton sampler takes float16/bfloat16/float32 scores, got {spec.get('dtype')}"
    return None


def launch_config(v: int) -> tuple[int, int, int]:
    """``(BLOCK, ROWS, num_warps)`` for vocabulary ``v``: BLOCK = next_pow2(v) capped at 2048, rows packed
    up to :data:`TILE` elements per tile, 4 warps (8 for full 2048 tiles); num_warps * 64 <= 1024 on ROCm."""
    from . import interpreting

    block = min(triton.next_power_of_2(max(v, 1)), MAX_BLOCK)
    tile, max_rows = (INTERP_TILE, INTERP_MAX_ROWS) if interpreting() else (TILE, MAX_ROWS)
    rows = max(1, min(max_rows, tile // block))
    return block, rows, 8 if block * rows >= 2048 else 4


@triton.jit
def _key(y):
    """float32 -> int32 key with the same order (NaN never reaches here)."""
    bits = y.to(tl.int32, bitcast=True)
    return tl.where(bits >= 0, bits, bits ^ 0x7FFFFFFF)


@triton.jit
def _load(X, stride_x, BAN, stride_ban, rows, rmask, cols, V, IS_PROBS: tl.constexpr, HAS_BAN: tl.constexpr):
    """(ROWS, BLOCK) float32 logits: -inf outside V, NaN -> -inf, log of probabilities, banned -> -inf."""
    cmask = cols < V
    m2 = rmask[:, None] & cmask[None, :]
    x = tl.load(X + rows[:, None] * stride_x + cols[None, :], mask=m2, other=float("-inf")).to(tl.float32)
    if IS_PROBS:
        x = tl.log(x)
    x = tl.where(x != x, float("-inf"), x)
    if HAS_BAN:
        b = tl.load(BAN + rows[:, None] * stride_ban + cols[None, :], mask=m2, other=0)
        x = tl.where(b != 0, float("-inf"), x)
    return x, m2


@triton.jit
def _pivots(lo, hi, NP: tl.constexpr):
    """(ROWS, NP) int32 pivots strictly inside (lo, hi) whenever hi - lo >= 2 (lo/hi int64 (ROWS,))."""
    j = tl.arange(0, NP).to(tl.int64) + 1
    d = hi - lo
    return (lo[:, None] + (d[:, None] * j[None, :]) // (NP + 1)).to(tl.int32)


@triton.jit
def _narrow(lo, hi, piv, ok):
    """Shrink (lo, hi) given per-pivot predicate ``ok`` (true on a prefix of increasing pivots)."""
    p64 = piv.to(tl.int64)
    new_lo = tl.maximum(lo, tl.max(tl.where(ok, p64, lo[:, None]), axis=1))
    new_hi = tl.minimum(hi, tl.min(tl.where(ok, hi[:, None], p64), axis=1))
    return new_lo, new_hi


@triton.jit
def _sample_kernel(
    X, stride_x, BAN, stride_ban, SEED, OUT,
    T_PTR, K_PTR, P_PTR, MINP_PTR,
    B, V, t_val, k_val, p_val, omp_val, minp_val,
    T_ROWS: tl.constexpr, K_ROWS: tl.constexpr, P_ROWS: tl.constexpr, MINP_ROWS: tl.constexpr,
    USE_K: tl.constexpr, USE_P: tl.constexpr, USE_MINP: tl.constexpr,
    IS_PROBS: tl.constexpr, HAS_BAN: tl.constexpr, TOP_K_FIRST: tl.constexpr,
    BLOCK: tl.constexpr, ROWS: tl.constexpr, NP: tl.constexpr,
):
    """ROWS rows per program; see the module docstring for the passes."""
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    rmask = rows < B
    ar = tl.arange(0, BLOCK)
    # Per-row parameters (a tensor wins over the scalar).
    if T_ROWS:
        t = tl.load(T_PTR + rows, mask=rmask, other=1.0).to(tl.float32)
    else:
        t = tl.zeros([ROWS], dtype=tl.float32) + t_val
    greedy_t = t <= 0.0
    t_safe = tl.where(greedy_t, 1.0, t)

    # Pass 1: row max of the scaled logits.
    m = tl.full([ROWS], float("-inf"), tl.float32)
    for c0 in range(0, V, BLOCK):
        x, m2 = _load(X, stride_x, BAN, stride_ban, rows, rmask, c0 + ar, V, IS_PROBS, HAS_BAN)
        m = tl.maximum(m, tl.max(x / t_safe[:, None], axis=1))
    # Greedy rows: temperature <= 0, a +inf score, or nothing finite (m = -inf).
    greedy = greedy_t | (m == float("inf")) | (m == float("-inf"))
    m_safe = tl.where(greedy, 0.0, m)
    key_max = _key(m_safe).to(tl.int64)

    # Top-k threshold over all tokens: largest t with count(key >= t) >= k.
    tk = tl.full([ROWS], _KEY_MIN, tl.int64)
    if USE_K:
        if K_ROWS:
            k = tl.load(K_PTR + rows, mask=rmask, other=0).to(tl.int64)
        else:
            k = tl.zeros([ROWS], dtype=tl.int64) + k_val
        k_on = (k > 0) & (k < V) & (~greedy)
        lo = tl.full([ROWS], _KEY_MIN, tl.int64)
        hi = tl.where(k_on, key_max + 1, lo + 1)
        while tl.max(hi - lo) > 1:
            piv = _pivots(lo, hi, NP)
            cnt = tl.zeros([ROWS, NP], dtype=tl.int64)
            for c0 in range(0, V, BLOCK):
                x, m2 = _load(X, stride_x, BAN, stride_ban, rows, rmask, c0 + ar, V, IS_PROBS, HAS_BAN)
                kk = _key(x / t_safe[:, None])
                ge = (kk[:, :, None] >= piv[:, None, :]) & m2[:, :, None]
                cnt += tl.sum(ge.to(tl.int64), axis=1)
            lo, hi = _narrow(lo, hi, piv, cnt >= k[:, None])
        tk = lo

    # Top-p threshold: largest t whose strictly-lower mass (within the base set) is <= (1 - p) * Z.
    tp = tl.full([ROWS], _KEY_MIN, tl.int64)
    if USE_P:
        if P_ROWS:
            p = tl.load(P_PTR + rows, mask=rmask, other=1.0).to(tl.float32)
            omp = 1.0 - p
        else:
            p = tl.zeros([ROWS], dtype=tl.float32) + p_val
            omp = tl.zeros([ROWS], dtype=tl.float32) + omp_val  # 1 - p rounded once, as HF's threshold
        p_on = (p < 1.0) & (~greedy)
        if TOP_K_FIRST:
            base = tk
        else:
            base = tl.full([ROWS], _KEY_MIN, tl.int64)
        z = tl.zeros([ROWS], dtype=tl.float32)
        for c0 in range(0, V, BLOCK):
            x, m2 = _load(X, stride_x, BAN, stride_ban, rows, rmask, c0 + ar, V, IS_PROBS, HAS_BAN)
            y = x / t_safe[:, None]
            e = tl.where(_key(y).to(tl.int64) >= base[:, None], tl.exp(y - m_safe[:, None]), 0.0)
            z += tl.sum(e, axis=1)
        thr = omp * z
        lo = base
        hi = tl.where(p_on & (p > 0.0), key_max + 1, lo + 1)
        while tl.max(hi - lo) > 1:
            piv = _pivots(lo, hi, NP)
            mass = tl.zeros([ROWS, NP], dtype=tl.float32)
            for c0 in range(0, V, BLOCK):
                x, m2 = _load(X, stride_x, BAN, stride_ban, rows, rmask, c0 + ar, V, IS_PROBS, HAS_BAN)
                y = x / t_safe[:, None]
                kk = _key(y)
                e = tl.where(kk.to(tl.int64) >= base[:, None], tl.exp(y - m_safe[:, None]), 0.0)
                below = kk[:, :, None] < piv[:, None, :]
                mass += tl.sum(tl.where(below, e[:, :, None], 0.0), axis=1)
            lo, hi = _narrow(lo, hi, piv, mass <= thr[:, None])
        # p <= 0: only the largest token(s) survive.
        tp = tl.where(p_on & (p <= 0.0), key_max, tl.where(p_on, lo, _KEY_MIN))
    keep_from = tl.maximum(tk, tp)

    if USE_MINP:
        if MINP_ROWS:
            mp = tl.load(MINP_PTR + rows, mask=rmask, other=0.0).to(tl.float32)
        else:
            mp = tl.zeros([ROWS], dtype=tl.float32) + minp_val
    seed = tl.load(SEED).to(tl.int64)

    # Final pass: Gumbel-max over the kept set (greedy rows: argmax of the raw masked logits).
    best = tl.full([ROWS], float("-inf"), tl.float32)
    best_i = tl.zeros([ROWS], dtype=tl.int64)
    for c0 in range(0, V, BLOCK):
        cols = c0 + ar
        x, m2 = _load(X, stride_x, BAN, stride_ban, rows, rmask, cols, V, IS_PROBS, HAS_BAN)
        y = x / t_safe[:, None]
        keep = _key(y).to(tl.int64) >= keep_from[:, None]
        if USE_MINP:
            keep = keep & ((tl.exp(y - m_safe[:, None]) >= mp[:, None]) | (mp[:, None] <= 0.0))
        c2 = (cols[None, :] + tl.zeros([ROWS, BLOCK], dtype=tl.int32)).to(tl.uint32)
        r2 = (rows[:, None] + tl.zeros([ROWS, BLOCK], dtype=tl.int64)).to(tl.uint32)
        r0, _, _, _ = tl.random.philox(seed, c2, r2, c2 * 0, c2 * 0)
        u = tl.random.uint_to_uniform_float(r0)
        g = -tl.log(-tl.log(u))
        score = tl.where(keep & m2, y + g, float("-inf"))
        score = tl.where(greedy[:, None], x, score)
        score = tl.where(m2, score, float("-inf"))
        blk_best = tl.max(score, axis=1)
        blk_i = tl.argmax(score, axis=1).to(tl.int64) + c0
        better = blk_best > best
        best_i = tl.where(better, blk_i, best_i)
        best = tl.where(better, blk_best, best)
    tl.store(OUT + rows, best_i, mask=rmask)


def sample(scores: torch.Tensor, seed: torch.Tensor, temperature: torch.Tensor | None,
           temperature_value: float, top_k: torch.Tensor | None, top_k_value: int,
           top_p: torch.Tensor | None, top_p_value: float,
           min_p: torch.Tensor | None, min_p_value: float, ban: torch.Tensor | None, is_probs: bool,
           top_k_first: bool) -> torch.Tensor:
    """Launch the sampler; arguments as ``rocm_inductor.ops.sampling.sample`` (validated there).

    Args:
        scores: (B, V) float16/bfloat16/float32, B >= 1, last dim read with unit stride (copied otherwise).

    Returns:
        (B,) int64 token ids in [0, V).

    Raises:
        ValueError: a dtype :func:`check` refuses.
    """
    reason = check({"dtype": scores.dtype})
    if reason is not None:
        raise ValueError(reason)
    b, v = scores.shape
    x = scores if scores.stride(1) == 1 else scores.contiguous()
    out = torch.empty(b, dtype=torch.int64, device=x.device)
    ban_t, ban_stride = ban_rows(ban, b, v)
    ts = per_row(temperature, b, torch.float32)
    ks = per_row(top_k, b, torch.int64)
    ps = per_row(top_p, b, torch.float32)
    mps = per_row(min_p, b, torch.float32)
    use_k = ks is not None or 0 < top_k_value < v
    use_p = ps is not None or top_p_value < 1.0
    use_minp = mps is not None or min_p_value > 0.0
    block, rows, num_warps = launch_config(v)
    dummy = out
    grid = (triton.cdiv(b, rows),)
    args = (x, x.stride(0), dummy if ban_t is None else ban_t, ban_stride, seed.reshape(-1), out,
            dummy if ts is None else ts, dummy if ks is None else ks, dummy if ps is None else ps,
            dummy if mps is None else mps, b, v, float(temperature_value), int(min(max(top_k_value, 0), v)),
            float(top_p_value), 1.0 - float(top_p_value), float(min_p_value))
    kw = dict(T_ROWS=ts is not None, K_ROWS=ks is not None, P_ROWS=ps is not None, MINP_ROWS=mps is not None,
              USE_K=use_k, USE_P=use_p, USE_MINP=use_minp, IS_PROBS=is_probs, HAS_BAN=ban_t is not None,
              TOP_K_FIRST=top_k_first, BLOCK=block, ROWS=rows, NP=NPIV, num_warps=num_warps)
    if x.is_cuda and x.device.index != torch.cuda.current_device():
        with torch.cuda.device(x.device):
            _sample_kernel[grid](*args, **kw)
    else:
        _sample_kernel[grid](*args, **kw)
    return out
