"""Config sweep of the Triton sampler's launch constants (issue 14), op alone in a CUDA graph.

V = 128256 float32 logits ``randn * 3``, T = 0.7, B in {1, 8, 32, 64}. Two groups, each timed for every
candidate (a dict of constants of ``rocm_inductor/providers/triton/sampling.py`` set on the module):
- ``general`` (filter ``top_p0.9``: the whole-row search path): pivots per pass, compare
  tile, warps, target programs, the winner shortcut on/off;
- ``fast`` (filter ``hf_k50_p0.9``: the two-launch top-k path): launch 2's warps and pivots.
The pick per group is the candidate with the smallest sum of us over the batches (the fast group first,
with 30% of the time budget; a candidate is skipped once its group's share is spent).

Constants are set module-wide: since the 2026-12-01 run (whose candidates applied to every batch, as the
code then did) ``ACC_TILE`` / ``TARGET_PROGRAMS_LARGE`` / ``NPIV_LARGE`` act on ``B * V > SMALL_WORK`` only and
``COMPARE_TILE`` / ``TARGET_PROGRAMS`` / ``NPIV_SMALL`` below it (``ACC_SMALL`` accumulates there too), and
``{}`` is that run's per-bucket pick.

    python benchmarks/sweeps/sweep_sampling.py --out DIR [--budget-s S]
Writes ``sampling_sweep.csv`` (group,cand,vocab,batch,filters,us) and ``sampling_pick.json`` ({name: value}
for ``bench_sampling.py --set``) under ``--out``. Needs a GPU.
"""

from __future__ import annotations

import argparse
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
    {"LANE_ARGMAX": True},  # session topp2: per-lane max/argmax in launch 1 and the draws (not timed yet)
    {"ACC_TILE": 8192},
    {"ACC_TILE": 16384, "STEP_WARPS": 8},
    {"WINNER": False},
    {"NPIV_SMALL": 32, "NPIV_LARGE": 16, "COMPARE_TILE": 16384},
    {"ACC_TILE": 8192, "NPIV_SMALL": 32, "NPIV_LARGE": 32, "STEP_WARPS": 8},
    {"ACC_TILE": 8192, "NPIV_LARGE": 8, "TARGET_PROGRAMS": 1056},
    {"NPIV_SMALL": 16, "NPIV_LARGE": 16, "COMPARE_TILE": 16384, "STEP_WARPS": 4},
    {"NPIV_SMALL": 64, "NPIV_LARGE": 32, "COMPARE_TILE": 65536, "STEP_WARPS": 8},
]
FAST = [{}, {"NUM_WARPS2": 8}, {"NUM_WARPS2": 4}, {"NUM_WARPS2": 8, "FAST_NPIV": 16},
        {"NUM_WARPS2": 16, "FAST_NPIV": 16}, {"NUM_WARPS2": 8, "FAST_NPIV": 4}]


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
    defaults = {n: getattr(S, n) for c in GENERAL + FAST for n in c}
    xs = {b: torch.randn(b, V, device="cuda") * 3 for b in BATCHES}
    rows, t0, pick = [], time.time(), {}
    for group, cands, filters, until in (("fast", FAST, ("hf_k50_p0.9",), 0.3),
                                         ("general", GENERAL, ("top_p0.9",), 1.0)):
        best, best_us = {}, math.inf
        for i, cand in enumerate(cands):
            if time.time() - t0 > args.budget_s * until:
                print(f"{group} cand {i}: skipped (budget)", flush=True)
                continue
            for n, v in defaults.items():
                setattr(S, n, v)
            for n, v in cand.items():
                setattr(S, n, v)
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
    for n, v in defaults.items():
        setattr(S, n, v)
    with open(out / "sampling_sweep.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    (out / "sampling_pick.json").write_text(json.dumps(pick))
    print("pick", json.dumps(pick))


if __name__ == "__main__":
    main()
