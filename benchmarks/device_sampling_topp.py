"""One-process H200 timing of the Triton sampler without top-k (issue 14, session topp2): top-p 0.9 alone,
min-p 0.1 alone and the HF chain (T=0.7, k=50, p=0.9) at V=128256, B in {1, 8, 32, 64}, the op in a CUDA graph
(20 calls per replay, median of 5 replays, ``torch.randint`` seed inside the graph), optional CUPTI kernel
breakdown (torch.profiler, median per launch position over 10 eager calls) and a same-token check of the
chain against the plain search (``WINNER = False``).

Run from a tree whose ``rocm_inductor`` is to be timed: ``python3 device_sampling_topp.py --tree DIR --label L
[--variants JSON] [--prof] [--check] --csv OUT.csv`` (rows ``vocab,batch,filters,config,us``).
"""
import argparse
import json
import os
import sys

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--tree", required=True)
ap.add_argument("--label", required=True)
ap.add_argument("--variants", default='{"": {}}', help='{"name": {module attr: value}, ...}')
ap.add_argument("--batches", default="1,8,32,64")
ap.add_argument("--filters", default="top_p0.9,min_p0.1,hf_k50_p0.9")
ap.add_argument("--prof", action="store_true")
ap.add_argument("--check", action="store_true")
ap.add_argument("--csv", required=True)
a = ap.parse_args()
sys.path.insert(0, a.tree)
from timing import graph_time_us, kernel_breakdown  # noqa: E402  (benchmarks/timing.py, beside this script)

from rocm_inductor.providers.triton import sampling as S  # noqa: E402

# TOPP_DEV=cpu TOPP_V=1000 (with TRITON_INTERPRET=1): a dry run of this script, no timing
DEV, V = os.environ.get("TOPP_DEV", "cuda"), int(os.environ.get("TOPP_V", "128256"))
FILTERS = {"top_p0.9": (0, 0.9, 0.0), "min_p0.1": (0, 1.0, 0.1), "hf_k50_p0.9": (50, 0.9, 0.0)}


def make(x, k, p, mp):
    def f():
        seed = torch.randint(0, 2**31 - 1, (1,), device=DEV, dtype=torch.int64)
        return S.sample(x, seed, None, 0.7, None, k, None, p, None, mp, None, False, True)
    return f


def graph_us(fn, iters=20, reps=5):
    if DEV == "cpu":
        fn()
        return 0.0
    return graph_time_us(fn, iters, reps)


def prof(fn, label, n=10):
    if DEV == "cpu":
        return
    parts = [f"{name.replace('_kernel', '')[:14]} {us:.1f}" for name, us in kernel_breakdown(fn, n)]
    print(f"PROF {a.label} {label}: {len(parts)} kernels | " + ", ".join(parts), flush=True)


torch.manual_seed(0)
xs = {b: torch.randn(b, V, device=DEV) * 3 for b in map(int, a.batches.split(","))}
for vname, attrs in json.loads(a.variants).items():
    saved = {k: getattr(S, k) for k in attrs}
    for k, v in attrs.items():
        setattr(S, k, v)
    cfg = a.label + (f"+{vname}" if vname else "")
    for b, x in xs.items():
        for filt in a.filters.split(","):
            f = make(x, *FILTERS[filt])
            try:
                us = graph_us(f)
            except Exception as e:  # report, go on
                print(f"FAIL {cfg} B={b} {filt}: {e!r}"[:300], flush=True)
                continue
            with open(a.csv, "a") as fh:
                fh.write(f"{V},{b},{filt},{cfg},{us:.1f}\n")
            print(f"TIME {cfg:28s} B={b:3d} {filt:12s} {us:8.1f} us", flush=True)
            if a.prof and not vname and b in (8, 64) and filt != "hf_k50_p0.9":
                prof(f, f"B={b} {filt}")
    for k, v in saved.items():
        setattr(S, k, v)
if a.check:
    for b in [b for b in xs if b in (8, 64)]:
        for filt in ("top_p0.9", "min_p0.1"):
            _k, p, mp = FILTERS[filt]
            bad = 0
            for seed in range(4):
                sd = torch.tensor([seed], device=DEV, dtype=torch.int64)
                S.WINNER = True
                t1 = S.sample(xs[b], sd, None, 0.7, None, 0, None, p, None, mp, None, False, True)
                S.WINNER = False
                t2 = S.sample(xs[b], sd, None, 0.7, None, 0, None, p, None, mp, None, False, True)
                S.WINNER = True
                bad += int((t1 != t2).sum())
            print(f"CHECK {a.label} B={b} {filt}: chain vs plain search, {bad} different tokens of {4 * b}",
                  flush=True)
