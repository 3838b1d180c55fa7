"""Ahead-of-time compile cases of the general path, the chain and the top-k path
(``rocm_inductor.providers.triton._aot``; the row path's are ``rows.aot_cases``).
"""

from __future__ import annotations

from typing import Any

from . import knobs
from .common import (
    AOT_FLAGS,
    FP_OPTIONS,
)
from .configs import (
    _pick_rows,
    chain_pass_shape,
    chain_schedule,
    fast_config,
    lane_argmax,
    launch_config,
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

#: Llama-3 vocabulary (128256) at decode batch 1 and 64 (issue 16's typical sizes).
AOT_SHAPES = ((1, 128256), (64, 128256))


def _search_aot_cases() -> list[dict[str, Any]]:
    """The GPU launch shapes of :func:`.launch._sample` for float32 logits with scalar top-k and top-p on.

    Launches of one call: maxima (PREV=0, CUR=0), top-k passes (1, 1), top-p passes (1, 2) / (2, 2), the draw
    (2, 3), then ``_pick_kernel``. At B=64 the top-p passes (CUR=2) spill with triton 3.6 (the GPU machine's:
    gfx942 30 SGPRs, sm_90 255 registers and 56 B of stack; AOT compile 2026-12-01), not with 3.9: marked
    ``known_spill``.
    """
    ptr = {"X": "*fp32", "stride_x": "i32", "BAN": "*i64", "stride_ban": "i32", "SEED": "*i64",
           "T_PTR": "*i64", "K_PTR": "*i64", "P_PTR": "*i64", "MINP_PTR": "*i64", "PMAX": "*fp32",
           "CNT": "*i32", "MASS": "*fp32", "ZP": "*fp32", "ST": "*i64", "TK": "*i64", "GV": "*fp32",
           "GI": "*i64", "OUT": "*i64", "B": "i32", "V": "i32", "NCH": "i32", "step": "i32", "t_val": "fp32",
           "k_val": "i32", "p_val": "fp32", "omp_val": "fp32", "minp_val": "fp32"}
    flags = ("T_ROWS", "K_ROWS", "P_ROWS", "MINP_ROWS", "USE_K", "USE_P", "USE_MINP", "IS_PROBS", "HAS_BAN",
             "TOP_K_FIRST", "PREV", "CUR", "CHUNK", "BLOCK", "ROWS", "NP", "NCHB", "CB", "WIN", "ACC", "LANE")
    cases = []
    for b, v in AOT_SHAPES:
        cfg = launch_config(b, v, interp=False)
        base = dict(T_ROWS=False, K_ROWS=False, P_ROWS=False, MINP_ROWS=False, USE_K=True, USE_P=True,
                    USE_MINP=False, IS_PROBS=False, HAS_BAN=False, TOP_K_FIRST=True, WIN=False, ACC=cfg["ACC"],
                    LANE=lane_argmax(b, v),
                    **{k: cfg[k] for k in ("CHUNK", "BLOCK", "ROWS", "NP", "NCHB", "CB")})
        spill = "B=64 top-p pass of the general path spills with triton 3.6 (issue 16)"
        for prev, cur in ((0, 0), (1, 1), (1, 2), (2, 2), (2, 3)):
            case = {"name": f"sample step PREV={prev} CUR={cur} B={b} V={v}", "fn": _step_kernel,
                    "signature": {**ptr, **{k: "constexpr" for k in flags}},
                    "constexprs": {**base, "PREV": prev, "CUR": cur}, "num_warps": cfg["num_warps"]}
            if b >= 64 and cur == 2:
                case["known_spill"] = spill
            if b == 1 and (cur, prev) in ((0, 0), (2, 1)):
                # triton 3.9 AOT, 2026-12-01: top-k pass 1 (NP=64, before the sweep) 6 / 9 SGPRs spilled to VGPR
                # lanes on gfx942 / gfx950; first top-p pass after top-k at the swept B=1 constants (NP=16, 4 warps)
                # 21 / 25 SGPRs and 16 B of sm_90 stack. The measured top-p-only launches (USE_K off) are clean.
                case["known_spill"] = "general path with top-k at B=1: SGPR spills (gfx), 16 B stack (sm_90)"
            cases.append(case)
        # top-p and/or min-p without top-k: launch 1 (WIN) draws the winner, then the chain (_chain_kernel):
        # top-p passes PREV=0 -> 2, 2 -> 2, the last launch 2 -> 3; min-p alone 0 -> 3
        cases.append({"name": f"sample top-p-only step PREV=0 CUR=0 B={b} V={v}", "fn": _step_kernel,
                      "signature": {**ptr, **{k: "constexpr" for k in flags}},
                      "constexprs": {**base, "USE_K": False, "WIN": True, "PREV": 0, "CUR": 0},
                      "num_warps": cfg["num_warps"]})
        csig = {k: ptr[k] for k in ("X", "stride_x", "BAN", "stride_ban", "SEED", "T_PTR", "P_PTR", "MINP_PTR",
                                    "PMAX", "MASS", "ZP")}
        csig.update({"CS": "*i64", "GV": "*fp32", "GI": "*i64", "OUT": "*i64", "B": "i32", "V": "i32",
                     "NCH": "i32", "MSTRIDE": "i32", "step": "i32", "t_val": "fp32", "p_val": "fp32",
                     "omp_val": "fp32", "minp_val": "fp32"})
        cflags = ("T_ROWS", "P_ROWS", "MINP_ROWS", "USE_P", "USE_MINP", "IS_PROBS", "HAS_BAN", "PREV", "CUR",
                  "CHUNK", "BLOCK", "ROWS", "NP", "PNP", "NCHB", "CB", "ACC", "LANE", "DRAW")
        csig.update({k: "constexpr" for k in cflags})
        cbase = {k: base[k] for k in cflags if k in base}
        # the passes of chain_schedule: head (NP -> NP), the switch (NP -> tail), tail (tail -> tail), the last
        sched = chain_schedule(cfg["NP"])
        npt = sched[-1]

        def shape(n, cfg=cfg):
            return chain_pass_shape(cfg, n)
        passes = [(0, 2, True, False, cfg["NP"], cfg["NP"], shape(cfg["NP"])["BLOCK"]),
                  (2, 2, True, False, cfg["NP"], cfg["NP"], shape(cfg["NP"])["BLOCK"]),
                  (2, 2, True, False, npt, cfg["NP"], shape(npt)["BLOCK"]),
                  (2, 2, True, False, npt, npt, shape(npt)["BLOCK"]),
                  (2, 3, True, False, cfg["NP"], npt, cfg["BLOCK"]),
                  (0, 3, False, True, cfg["NP"], cfg["NP"], cfg["BLOCK"])]
        for prev, cur, use_p, use_minp, npiv, pnp, block in dict.fromkeys(passes):
            case = {"name": f"sample chain PREV={prev} CUR={cur} NP={npiv} PNP={pnp} top-p={use_p} "
                            f"min-p={use_minp} B={b} V={v}",
                    "fn": _chain_kernel, "signature": csig,
                    "constexprs": {**cbase, "USE_P": use_p, "USE_MINP": use_minp, "PREV": prev, "CUR": cur,
                                   "DRAW": prev == 2 or cur == 3, "NP": npiv, "PNP": pnp, "BLOCK": block,
                                   "CB": shape(pnp)["CB"]},
                    "num_warps": cfg["num_warps"]}
            if b == 1 and npiv != pnp:
                # triton 3.9 AOT, 2026-12-01: the switch to 64 pivots after 16 (one launch per call) spills 9 SGPRs
                # to VGPR lanes on gfx942; gfx950 and sm_90 clean
                case["known_spill"] = "chain 16 -> 64 pivot switch at B=1: 9 SGPRs spilled on gfx942"
            cases.append(case)
        if cfg["NCH"] > 1:
            frows = _pick_rows(b, cfg["NCHB"])
            for open_ in (False, True):
                cases.append({"name": f"sample pick OPEN={open_} B={b} V={v}", "fn": _pick_kernel,
                              "signature": {"GV": "*fp32", "GI": "*i64", "OUT": "*i64", "B": "i32", "NCH": "i32",
                                            "ROWS": "constexpr", "NCHB": "constexpr", "OPEN": "constexpr"},
                              "constexprs": {"ROWS": frows, "NCHB": cfg["NCHB"], "OPEN": open_}, "num_warps": 4})
    return cases


def aot_cases() -> list[dict[str, Any]]:
    """Representative compile cases of the top-k path at the launcher's GPU specialisations (HF chain
    T=0.7, k=50, p=0.9 over float32 logits, V=128256 / 151936; min-p + per-row params + bf16 + ban), for the
    ahead-of-time spill / work-group / LDS checks (preamble: sm_90, gfx942, gfx950)."""
    kn = knobs.current()
    cases = []
    for name, (dt, flags) in AOT_FLAGS.items():
        sig1 = {"X": dt, "stride_x": "i32", "BAN": "*i1", "stride_ban": "i32", "T_PTR": "*fp32", "GM": "*fp32",
                "B": "i32", "V": "i32", "NG": "i32", "t_val": "fp32", "T_ROWS": "constexpr",
                "IS_PROBS": "constexpr", "HAS_BAN": "constexpr", "G": "constexpr", "CG": "constexpr",
                "SBG": "constexpr", "ROWS": "constexpr"}
        for cg in (32, 512):
            cases.append({"name": f"group_max_{name}_cg{cg}", "fn": _group_max_kernel, "signature": sig1,
                          "constexprs": {"T_ROWS": flags["T_ROWS"], "IS_PROBS": False, "HAS_BAN": flags["HAS_BAN"],
                                         "G": kn.group, "CG": cg, "SBG": min(cg, kn.fast_tile // kn.group), "ROWS": 1},
                          "num_warps": 4})
        sig2 = {"X": dt, "stride_x": "i32", "BAN": "*i1", "stride_ban": "i32", "SEED": "*i64", "T_PTR": "*fp32",
                "P_PTR": "*fp64", "MINP_PTR": "*fp32", "GM": "*fp32", "CAND": "*i32", "CBUF": "*i64", "OUT": "*i64",
                "B": "i32",
                "V": "i32", "NG": "i32", "k_val": "i32", "t_val": "fp32", "p_val": "fp32", "omp_val": "fp32",
                "minp_val": "fp32"}
        sig2.update({c: "constexpr" for c in ("T_ROWS", "P_ROWS", "MINP_ROWS", "USE_P", "USE_MINP", "IS_PROBS",
                                              "HAS_BAN", "G", "GCAP", "ET", "CT", "FB", "NP", "NPASS", "CC", "CJ",
                                              "NPB", "GEO", "ROWS")})
        for v in (128256, 151936):
            cfg = fast_config(1, v, interp=False)
            cases.append({"name": f"topk_draw_{name}_v{v}", "fn": _topk_draw_kernel, "signature": sig2,
                          "constexprs": {**flags, "ET": cfg["ET"], "ROWS": 1,
                                         **{c: cfg[c] for c in ("G", "GCAP", "CT", "FB", "NP", "NPASS", "CC", "CJ",
                                                                "NPB", "GEO")}},
                          "num_warps": cfg["num_warps"],
                          # AOT 2026-12-01 with the compact tail (CAND_TILE 32 / 64 wide): triton 3.9 (CI) V=128256
                          # 16 warps sm_90 8-16 B of stack, gfx942/gfx950 clean; V=151936 8 warps sm_90 clean,
                          # gfx942/gfx950 7-13 SGPRs spilled. triton 3.6 (the H200's, timed): sm_90 0-8 B;
                          # gfx942 22-25 VGPRs at 16 warps (the pivot-search tail of before: 13), 16-30 SGPRs at 8.
                          "known_spill": "sm_90 stack <= 16 B / gfx SGPR spills in the register-resident top-k draw"})
    return [{**c, "options": dict(FP_OPTIONS)} for c in cases + _search_aot_cases()]  # as launched
