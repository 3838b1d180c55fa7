"""Config sweep of the Triton sampler's launch constants (issue 14), op alone in a CUDA graph.

V = 128256 float32 logits ``randn * 3``, T = 0.7, B in {1, 8, 32, 64}. Two groups, each timed for every
candidate (a dict of the sampler's knobs, ``rocm_inductor/providers/triton/sampling/knobs.py``, applied with
``override``):
- ``general`` (filter ``top_p0.9``: the whole-row search path): pivots per pass, compare
  tile, warps, target programs, the winner shortcut on/off;
- ``fast`` (filter ``hf_k50_p0.9``: the two-launch top-k path): launch 2's warps and pivots.
The pick per group is the candidate with the smallest sum of us over the batches (the fast group first,
with 30% of the time budget; a candidate is skipped once its group's share is spent).

Knobs apply to every batch: ``acc_tile`` / ``target_programs_large`` / ``npiv_large`` act on ``B * V >
small_work`` only and ``compare_tile`` / ``target_programs`` / ``npiv_small`` below it (``acc_small`` accumulates
there too); ``{}`` is the defaults (the per-bucket pick of run 2026-12-01-1117-sampling-sweep).

    python benchmarks/sweeps/sweep_sampling.py --out DIR [--budget-s S]
Writes ``sampling_sweep.csv`` (group,cand,vocab,batch,filters,us) and ``sampling_pick.json`` ({name: value}
for ``bench_sampling.py --set``) under ``--out``. Needs a GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import math
import pathlib
import sys
import time

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # benchmarks/: timing
from timing import graph_time_us  # noqa: E402  (benchmarks/timing.py)

import rocm_inductor  # noqa: F401  (registers the ops)
from rocm_inductor.providers.triton import sampling as S

T, V, BATCHES = 0.7, 128256, (1, 8, 32, 64)
FILT = {"top_p0.9": (0, 0.9, 0.0), "min_p0.1": (0, 1.0, 0.1), "hf_k50_p0.9": (50, 0.9, 0.0)}
GENERAL = [  # most promising first: the sweep stops at its time budget
    {},  # the code's defaults
    {"lane_argmax": True},  # per-lane max/argmax in launch 1 and the draws everywhere
    {"acc_tile": 8192},
    {"acc_tile": 16384, "step_warps": 8},
    {"winner": False},
    {"npiv_small": 32, "npiv_large": 16, "compare_tile": 16384},
    {"acc_tile": 8192, "npiv_small": 32, "npiv_large": 32, "step_warps": 8},
    {"acc_tile": 8192, "npiv_large": 8, "target_programs": 1056},
    {"npiv_small": 16, "npiv_large": 16, "compare_tile": 16384, "step_warps": 4},
    {"npiv_small": 64, "npiv_large": 32, "compare_tile": 65536, "step_warps": 8},
]
FAST = [{}, {"num_warps2": 8}, {"num_warps2": 4}, {"num_warps2": 8, "fast_npiv": 16},
        {"num_warps2": 16, "fast_npiv": 16}, {"num_warps2": 8, "fast_npiv": 4}]


def op(x, k, p, mp):
    def call():
        seed = torch.randint(0, 2**31 - 1, (1,), device="cuda", dtype=torch.int64)
        return torch.ops.rocm_fused.sample(x, seed, None, T, None, k, None, p, None, mp, None, False, True, False,
                                           "triton")
    return call


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--budget-s", type=float, default=150.0)
    args = ap.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cand_knobs = contextlib.ExitStack()  # the override of the candidate being timed
    xs = {b: torch.randn(b, V, device="cuda") * 3 for b in BATCHES}
    rows, t0, pick = [], time.time(), {}
    for group, cands, filters, until in (("fast", FAST, ("hf_k50_p0.9",), 0.3),
                                         ("general", GENERAL, ("top_p0.9",), 1.0)):
        best, best_us = {}, math.inf
        for i, cand in enumerate(cands):
            if time.time() - t0 > args.budget_s * until:
                print(f"{group} cand {i}: skipped (budget)", flush=True)
                continue
            cand_knobs.close()
            cand_knobs.enter_context(S.override(**cand))
            total = 0.0
            for filt in filters:
                for b in BATCHES:
                    try:
                        us = graph_time_us(op(xs[b], *FILT[filt]), 20, 5)
                    except Exception as e:  # a config that does not compile / launch: out of the race
                        print(f"{group} {cand} {filt} B={b}: {type(e).__name__}: {str(e)[:200]}", flush=True)
                        us = math.inf
                    rows.append(dict(group=group, cand=json.dumps(cand), vocab=V, batch=b, filters=filt,
                                     us=f"{us:.1f}"))
                    if filt == filters[0]:
                        total += us
            print(f"[{time.time() - t0:.0f} s] {group} {cand}: " + " ".join(
                f"{r['filters']}/B{r['batch']}={r['us']}" for r in rows if r["cand"] == json.dumps(cand)
                and r["group"] == group), flush=True)
            if total < best_us:
                best, best_us = cand, total
        pick.update(best)
        print(f"{group} pick {best} (sum {best_us:.1f} us)", flush=True)
    cand_knobs.close()
    with open(out / "sampling_sweep.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    (out / "sampling_pick.json").write_text(json.dumps(pick))
    print("pick", json.dumps(pick))


if __name__ == "__main__":
    main()
