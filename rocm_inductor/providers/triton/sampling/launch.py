"""The sampler's launcher: :func:`sample` picks the path (top-k path, row path, chain, plain search) from shapes
and flags and issues its fixed launch sequence (package docstring).
"""

from __future__ import annotations

import torch
import triton

from ..._sampling_args import ban_rows, per_row
from .._launch import on_device
from . import knobs
from . import rows as _rows
from .common import (
    FP_OPTIONS,
)
from .configs import (
    _pick_rows,
    chain_pass_shape,
    chain_schedule,
    check,
    fast_config,
    fast_path_ok,
    lane_argmax,
    launch_config,
    search_passes,
)
from .search import (
    _chain_kernel,
    _pick_kernel,
    _step_kernel,
)
from .topk import (
    _group_max_kernel,
    _topk_draw_kernel,
)


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
    with on_device(scores):
        return _sample(scores, seed, temperature, temperature_value, top_k, top_k_value, top_p, top_p_value,
                       min_p, min_p_value, ban, is_probs, top_k_first)


def _sample(scores, seed, temperature, temperature_value, top_k, top_k_value, top_p, top_p_value, min_p,
            min_p_value, ban, is_probs, top_k_first) -> torch.Tensor:
    """:func:`sample` on the scores' current device: a fixed sequence of launches (module docstring)."""
    kn = knobs.current()
    b, v = scores.shape
    x = scores if scores.stride(1) == 1 else scores.contiguous()
    dev = x.device
    out = torch.empty(b, dtype=torch.int64, device=dev)
    ban_t, ban_stride = ban_rows(ban, b, v)
    ts = per_row(temperature, b, torch.float32, dev)
    ks = per_row(top_k, b, torch.int64, dev)
    ps = per_row(top_p, b, torch.float64, dev)
    mps = per_row(min_p, b, torch.float32, dev)
    use_k = ks is not None or 0 < top_k_value < v
    use_p = ps is not None or top_p_value < 1.0
    use_minp = mps is not None or min_p_value > 0.0
    p_s = float(top_p_value)
    if 0.0 < p_s < 1e-30:  # as the per-row clamp: a subnormal p would flush to 0 on the GPU (another path)
        p_s = 1e-30
    scalars = (float(temperature_value), int(min(max(top_k_value, 0), v)), p_s, 1.0 - p_s, float(min_p_value))
    if fast_path_ok(b, v, ks, top_k_value, use_p, top_k_first):
        return _sample_topk(x, seed, ts, top_k_value, ps, mps, ban_t, ban_stride, use_p, use_minp, is_probs,
                            scalars, out)
    if kn.winner and not use_k and (use_p or use_minp):
        if _rows.row_path(b, v, use_p):
            return _rows.sample_rows(x, seed, ts, ps, mps, ban_t, ban_stride, use_p, use_minp, is_probs, scalars,
                                     out)
    cfg = launch_config(b, v)
    nch, npiv, rows = cfg["NCH"], cfg["NP"], cfg["ROWS"]
    passes = search_passes(npiv)
    f32 = dict(dtype=torch.float32, device=dev)
    pmax = torch.empty(b, nch, **f32)
    cnt = torch.empty(2, b, nch, npiv, dtype=torch.int32, device=dev) if use_k else out
    win = kn.winner and not use_k and (use_p or use_minp)
    sched = chain_schedule(npiv) if win and use_p else ()  # the chain's pivots per pass
    mass = torch.empty(2, b, nch, max((npiv,) + sched), **f32) if use_p else pmax
    zp = torch.empty(b, nch, **f32) if use_p else pmax
    n_steps = 1 + (passes if use_k else 0) + (passes if use_p else 0)
    st = torch.empty(n_steps + 1, 2, b, dtype=torch.int64, device=dev)
    tk = torch.empty(b, dtype=torch.int64, device=dev) if use_p else out
    if win:
        # the chain's candidate partials, [launch % 2] (launch 1 writes [1]); CS: its per-launch row state
        gv2 = torch.empty(2, b, nch, **f32)
        gi2 = torch.empty(2, b, nch, dtype=torch.int64, device=dev)
        gv, gi = gv2[1], gi2[1]
    else:
        gv = torch.empty(b, nch, **f32)
        gi = torch.empty(b, nch, dtype=torch.int64, device=dev) if nch > 1 else out
    dummy = out
    grid = (triton.cdiv(b, rows), nch)
    args = (x, x.stride(0), dummy if ban_t is None else ban_t, ban_stride, seed.reshape(-1),
            dummy if ts is None else ts, dummy if ks is None else ks, dummy if ps is None else ps,
            dummy if mps is None else mps, pmax, cnt, mass, zp, st, tk, gv, gi, out, b, v, nch)
    kw = dict(T_ROWS=ts is not None, K_ROWS=ks is not None, P_ROWS=ps is not None, MINP_ROWS=mps is not None,
              USE_K=use_k, USE_P=use_p, USE_MINP=use_minp, IS_PROBS=is_probs, HAS_BAN=ban_t is not None,
              TOP_K_FIRST=top_k_first, CHUNK=cfg["CHUNK"], BLOCK=cfg["BLOCK"], ROWS=rows, NP=npiv,
              NCHB=cfg["NCHB"], CB=cfg["CB"], WIN=win, ACC=cfg["ACC"], LANE=lane_argmax(b, v),
              num_warps=cfg["num_warps"])

    def launch(step: int, prev: int, cur: int) -> None:
        _step_kernel[grid](*args, step, *scalars, PREV=prev, CUR=cur, **kw, **FP_OPTIONS)

    step, prev = 1, 0
    launch(step, 0, 0)  # maxima (+ top-k pass 1)
    if win:
        return _chain(args, kw, grid, cfg, sched, gv2, gi2, scalars, out)
    if use_k:
        prev = 1
        for _ in range(passes - 1):
            step += 1
            launch(step, 1, 1)
    if use_p:
        for _ in range(passes):
            step += 1
            launch(step, prev, 2)
            prev = 2
    launch(step + 1, prev, 3)  # draw
    if nch > 1:
        frows = _pick_rows(b, cfg["NCHB"])
        _pick_kernel[(triton.cdiv(b, frows),)](gv, gi, out, b, nch, ROWS=frows, NCHB=cfg["NCHB"], OPEN=False,
                                               num_warps=4, **FP_OPTIONS)
    return out


def _sample_topk(x, seed, ts, k, ps, mps, ban_t, ban_stride, use_p, use_minp, is_probs, scalars, out):
    """Launch the two-kernel top-k path (:func:`fast_path_ok` holds)."""
    b, v = x.shape
    cfg = fast_config(b, v)
    dev = x.device
    gm = torch.empty(b, cfg["NG"], dtype=torch.float32, device=dev)
    cand = torch.empty(b, cfg["GCAP"], dtype=torch.int32, device=dev)
    cbuf = torch.empty(b, max(cfg["CC"], 1), dtype=torch.int64, device=dev)
    dummy = out
    ban_arg = dummy if ban_t is None else ban_t
    t_arg = dummy if ts is None else ts
    t_val, _, p_val, omp_val, minp_val = scalars
    common = dict(T_ROWS=ts is not None, IS_PROBS=is_probs, HAS_BAN=ban_t is not None, G=cfg["G"])
    grid1 = (triton.cdiv(b, cfg["ROWS1"]), triton.cdiv(cfg["NG"], cfg["CG"]))
    _group_max_kernel[grid1](x, x.stride(0), ban_arg, ban_stride, t_arg, gm, b, v, cfg["NG"], t_val,
                             CG=cfg["CG"], SBG=cfg["SBG"], ROWS=cfg["ROWS1"], num_warps=cfg["num_warps1"],
                             **common, **FP_OPTIONS)
    grid2 = (triton.cdiv(b, cfg["ROWS"]),)
    _topk_draw_kernel[grid2](x, x.stride(0), ban_arg, ban_stride, seed.reshape(-1), t_arg,
                             dummy if ps is None else ps, dummy if mps is None else mps, gm, cand, cbuf, out,
                             b, v, cfg["NG"], int(k), t_val, p_val, omp_val, minp_val,
                             P_ROWS=ps is not None, MINP_ROWS=mps is not None, USE_P=use_p, USE_MINP=use_minp,
                             GCAP=cfg["GCAP"], ET=cfg["ET"], CT=cfg["CT"], FB=cfg["FB"], NP=cfg["NP"],
                             NPASS=cfg["NPASS"], CC=cfg["CC"], CJ=cfg["CJ"], NPB=cfg["NPB"], GEO=cfg["GEO"],
                             ROWS=cfg["ROWS"], num_warps=cfg["num_warps"], **common, **FP_OPTIONS)
    return out


#: Parameter names of the two kernels (read once: tests wrap the kernels), so _chain picks its arguments by name.
_STEP_ARGS = tuple(_step_kernel.arg_names)


_CHAIN_ARGS = tuple(_chain_kernel.arg_names)


def _chain(args, kw, grid, cfg, sched, gv2, gi2, scalars, out) -> torch.Tensor:
    """Launches 2 .. len(sched) + 2 of the restricted-winner chain (:func:`_chain_kernel`) after launch 1, pass i
    with ``sched[i]`` pivots (:func:`chain_schedule`; empty: min-p alone), then the pick of the rows still open
    (when a row has more than one chunk)."""
    named = dict(zip(_STEP_ARGS, args))  # launch 1's arguments by parameter name
    x, b, nch = named["X"], named["B"], named["NCH"]
    named.update(CS=torch.empty(len(sched) + 3, 4, b, dtype=torch.int64, device=x.device), GV=gv2, GI=gi2,
                 MSTRIDE=named["MASS"].numel() // 2)  # MASS: [2, B, NCH, max NP] (or a dummy: min-p alone)
    cargs = tuple(named[n] for n in _CHAIN_ARGS[:_CHAIN_ARGS.index("step")])
    ckw = {k: kw[k] for k in ("T_ROWS", "P_ROWS", "MINP_ROWS", "USE_P", "USE_MINP", "IS_PROBS", "HAS_BAN", "CHUNK",
                              "ROWS", "NCHB", "ACC", "LANE", "num_warps")}
    t_val, _k, p_val, omp_val, minp_val = scalars
    # launch 2 cannot reject launch 1's winner without min-p and with one p > 0 (module docstring): no draw code
    draw2 = kw["USE_MINP"] or kw["P_ROWS"] or not p_val > 0.0
    shape = {n: chain_pass_shape(cfg, n) for n in {cfg["NP"], *sched}}  # BLOCK / CB per pivot count, once
    step, prev, pnp = 1, 0, cfg["NP"]
    for npiv in sched:
        step += 1
        _chain_kernel[grid](*cargs, step, t_val, p_val, omp_val, minp_val, PREV=prev, CUR=2,
                            DRAW=bool(prev == 2 or draw2), NP=npiv, PNP=pnp, BLOCK=shape[npiv]["BLOCK"],
                            CB=shape[pnp]["CB"], **ckw, **FP_OPTIONS)
        prev, pnp = 2, npiv
    step += 1
    # the last launch narrows with the previous pass's PNP pivots and only draws: launch 1's tile shape
    _chain_kernel[grid](*cargs, step, t_val, p_val, omp_val, minp_val, PREV=prev, CUR=3, DRAW=True, NP=cfg["NP"],
                        PNP=pnp, BLOCK=cfg["BLOCK"], CB=shape[pnp]["CB"], **ckw, **FP_OPTIONS)
    if nch > 1:
        frows = _pick_rows(b, cfg["NCHB"])
        _pick_kernel[(triton.cdiv(b, frows),)](gv2[step % 2], gi2[step % 2], out, b, nch, ROWS=frows,
                                               NCHB=cfg["NCHB"], OPEN=True, num_warps=4, **FP_OPTIONS)
    return out
