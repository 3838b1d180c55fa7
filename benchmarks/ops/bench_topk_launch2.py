"""Benchmark: variants of the Triton sampler's top-k path (launch 2, ``_topk_draw_kernel``), issue 14 at B=1.

Each variant is a set of the sampler's knobs (``rocm_inductor/providers/triton/sampling/knobs.py``, applied with
``override``; :data:`VARIANTS`): ``base`` is the pivot-search tail of before (``cand_cap=0``, uniform first bound
pass). Timed: the op alone
(``torch.ops.rocm_fused.sample(..., "triton")`` with its seed drawn by ``torch.randint`` in the graph) over a
captured CUDA graph (benchmarks/timing.py, 20 calls per graph, median of 5 replays), float32 logits
``randn * 3``, T = 0.7, filters ``hf_k50_p0.9`` (top-k 50 then top-p 0.9) and ``top_k50``. Also: a CUPTI
per-kernel breakdown (torch.profiler) at B = 1, and each variant's tokens vs ``base``'s for the same seed.

    python benchmarks/ops/bench_topk_launch2.py --warm NAME        # compile one variant's kernels (cache fill)
    python benchmarks/ops/bench_topk_launch2.py --out DIR [--budget-s S]
Writes ``DIR/sampling_topk_session3.csv`` (columns ``vocab,batch,filters,config,us``, config ``ours_<variant>``)
and prints a table last. Needs a GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import pathlib
import sys
import time

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # benchmarks/: timing
from timing import graph_time_us, kernel_breakdown  # noqa: E402  (benchmarks/timing.py)

import rocm_inductor  # noqa: F401  (registers the ops)
from rocm_inductor.providers.triton import sampling as S

T = 0.7
FILTERS = {"hf_k50_p0.9": (50, 0.9), "top_k50": (50, 1.0)}
VARIANTS = {
    "base": dict(cand_cap=0, fast_geo=False, num_warps2_wide=16),
    "geo": dict(cand_cap=0, fast_geo=True, num_warps2_wide=16),
    "cc128": dict(cand_cap=128, cand_tile=None, cand_tile_wide=None, fast_geo=False, num_warps2_wide=16),
    "cc128_geo": dict(cand_cap=128, cand_tile=None, cand_tile_wide=None, fast_geo=True, num_warps2_wide=16),
    "cc128_geo_cj64": dict(cand_cap=128, cand_tile=64, cand_tile_wide=64, fast_geo=True, num_warps2_wide=16),
    "cc128_geo_cj32": dict(cand_cap=128, cand_tile=32, cand_tile_wide=32, fast_geo=True, num_warps2_wide=16),
    "cc128_geo_cj64_w8": dict(cand_cap=128, cand_tile=64, cand_tile_wide=64, fast_geo=True, num_warps2=8,
                              num_warps2_wide=8),
    "gcap128_cc256_geo_cj32": dict(cand_cap=256, cand_tile=32, cand_tile_wide=32, fast_geo=True, group_cap=128,
                                   num_warps2_wide=16),
    "default": {},  # the knobs' defaults (picked from the 2026-12-01 12:36 UTC run of the variants above)
}
#: variants timed at every batch (the others at B = 1 only); the 2026-12-01 call timed base, cc128_geo_cj64,
#: cc128_geo_cj32, cc128_geo_cj64_w8 (before "default" existed) and ran out of budget before B = 32.
FULL = ("base", "default")
VOCABS = (32000, 128256, 151936)
BATCHES = (1, 8, 32, 64)
_VARIANT = contextlib.ExitStack()  # the override of the variant in use


def use(name: str) -> None:
    """Switch to variant ``name``: the previous variant's override is left, this one's entered (defaults + its
    knobs)."""
    _VARIANT.close()
    _VARIANT.enter_context(S.override(**VARIANTS[name]))


def _seed():
    return torch.randint(0, 2**31 - 1, (1,), device="cuda", dtype=torch.int64)


def call(x, k, p, seed=None):
    return torch.ops.rocm_fused.sample(x, _seed() if seed is None else seed, None, T, None, k, None, p, None, 0.0,
                                       None, False, True, False, "triton")


def logits(v, b):
    return torch.randn(b, v, device="cuda", generator=torch.Generator("cuda").manual_seed(b + v)) * 3


def cupti(fn, n=10) -> str:
    """Median CUPTI duration (us) of each kernel of one call, in launch order."""
    return " | ".join(f"{name[:24]} {us:.1f}" for name, us in kernel_breakdown(fn, n))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--warm", help="only compile this variant's kernels")
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--budget-s", type=float, default=60.0)
    args = ap.parse_args()
    t0 = time.time()
    if args.warm:
        use(args.warm)
        for v in VOCABS:
            for b in (BATCHES if args.warm in FULL else (1,)):
                x = logits(v, b)
                for k, p in FILTERS.values():
                    call(x, k, p)
        torch.cuda.synchronize()
        print(f"warm {args.warm}: {time.time() - t0:.0f} s", flush=True)
        return
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"{torch.cuda.get_device_name()} torch {torch.__version__} triton {__import__('triton').__version__} "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", flush=True)
    rows = []
    xs = {(v, b): logits(v, b) for v in VOCABS for b in BATCHES}
    order = [(n, v, b) for b in BATCHES for v in (128256, 32000, 151936) for n in VARIANTS if b == 1 or n in FULL]
    for name, v, b in order:
        if time.time() - t0 > args.budget_s:
            print(f"budget: stop before {name} V={v} B={b}", flush=True)
            break
        use(name)
        for filt, (k, p) in FILTERS.items():
            x = xs[(v, b)]
            try:
                with torch.no_grad():
                    us = graph_time_us(lambda x=x, k=k, p=p: call(x, k, p), 20, 5)
            except Exception as e:  # a variant that fails to build or run is a row of nan, listed
                print(f"FAIL {name} V={v} B={b} {filt}: {type(e).__name__}: {str(e)[:200]}", flush=True)
                us = float("nan")
            rows.append(dict(vocab=v, batch=b, filters=filt, config=f"ours_{name}", us=f"{us:.1f}"))
            print(rows[-1], flush=True)
        with open(out / "sampling_topk_session3.csv", "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=["vocab", "batch", "filters", "config", "us"])
            w.writeheader()
            w.writerows(rows)
    # tokens vs base (same seed, B = 64), then the CUPTI breakdown at B = 1
    for v in VOCABS:
        x = xs[(v, 64)]
        seed = torch.tensor([12345], device="cuda")
        for filt, (k, p) in FILTERS.items():
            use("base")
            ref = call(x, k, p, seed)
            diffs = []
            for name in VARIANTS:
                use(name)
                diffs.append(f"{name}:{int((call(x, k, p, seed) != ref).sum())}")
            print(f"tokens != base, V={v} B=64 {filt}: " + " ".join(diffs), flush=True)
    for name in VARIANTS:
        if time.time() - t0 > args.budget_s + 25:
            break
        use(name)
        for filt, (k, p) in FILTERS.items():
            line = cupti(lambda k=k, p=p: call(xs[(128256, 1)], k, p))
            print(f"cupti {name} V=128256 B=1 {filt}: {line}", flush=True)
    by = {(r["config"], int(r["vocab"]), int(r["batch"]), r["filters"]): r["us"] for r in rows}
    print("\nvariant | filter | " + " | ".join(f"V{v // 1000}k B{b}" for v in VOCABS for b in BATCHES))
    for name in VARIANTS:
        for filt in FILTERS:
            print(f"{name} | {filt} | " + " | ".join(by.get((f"ours_{name}", v, b, filt), "-") for v in VOCABS
                                                     for b in BATCHES))
    print(f"done {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
