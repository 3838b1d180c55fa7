"""H200 timing of variants of the Triton sampler's constants (issue 14; written for session topp3's chain schedules,
used since for A/B runs of two trees with ``--tree``):
top-p 0.9 alone at V in {32000, 128256, 151936} x B in {1, 8, 32, 64}, min-p 0.1 alone and the HF chain
(T=0.7, k=50, p=0.9) at B=64 V=128256, op in a CUDA graph (20 calls per replay, median of 5 replays,
``torch.randint`` seed inside the graph), float32 ``randn * 3`` logits, T=0.7.

Modes (``--mode``): ``warm`` compiles one variant's kernels (run several at once: the Triton cache is shared,
so the timing run only loads them); ``time`` times every variant (rows ``vocab,batch,filters,config,us``,
config ``ours+<variant>``); ``best`` reads that CSV, picks the fastest variant per (V, B), prints the table,
a CUPTI breakdown (torch.profiler) of the best at V=128256 B=32 and V=32000 B=64, and a token-equality check
of every variant against the plain search (``winner=False``) at B=64, 4 seeds. Variants: JSON
``{"name": {knob: value}}`` (fields of ``rocm_inductor.providers.triton.sampling.knobs.Knobs``, applied with
``override``; an upper-case name, or ``rows.X`` as the row kernel's were once spelled, is read as the field ``x``).
The ``--tree`` must have the ``sampling`` package (``sampling/knobs.py``).
``TOPP_DEV=cpu TOPP_SCALE=64`` (with TRITON_INTERPRET=1): a dry run on tiny shapes, no timing. ``TOPP_BS``:
the batches (default 1,8,32,64; 32 and 64 are needed by ``best``). ``TOPP_MINP=1``: min-p 0.1 at every (V, B).
``TOPP_CHECK_BS`` / ``TOPP_CHECK_FILTERS``: the token check's batches (default 64) and filters (default top_p0.9;
``top_p0.3`` rejects most first candidates, so rows stay open into the chain's later passes).
"""
import argparse
import collections
import contextlib
import json
import os
import sys

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--tree", default=".")
ap.add_argument("--mode", choices=("warm", "time", "best"), required=True)
ap.add_argument("--variants", required=True)
ap.add_argument("--only", default=None, help="warm: this variant only")
ap.add_argument("--csv", required=True)
a = ap.parse_args()
sys.path.insert(0, a.tree)
sys.path.insert(0, os.path.join(a.tree, "benchmarks"))
from timing import graph_time_us, kernel_breakdown  # noqa: E402

from rocm_inductor.providers.triton import sampling as S  # noqa: E402

DEV = os.environ.get("TOPP_DEV", "cuda")
SCALE = int(os.environ.get("TOPP_SCALE", "1"))
VS = [v // SCALE for v in (32000, 128256, 151936)]
BS = tuple(int(b) for b in os.environ.get("TOPP_BS", "1,8,32,64").split(","))  # TOPP_BS: a subset
FILTERS = {"top_p0.9": (0, 0.9, 0.0), "min_p0.1": (0, 1.0, 0.1), "hf_k50_p0.9": (50, 0.9, 0.0),
           "top_p0.3": (0, 0.3, 0.0)}  # top_p0.3: checks only (most first candidates rejected)
#: ``best``'s token check: batches (TOPP_CHECK_BS, default 64) and filters (TOPP_CHECK_FILTERS, default top_p0.9)
CHECK_BS = tuple(int(b) for b in os.environ.get("TOPP_CHECK_BS", "64").split(","))
CHECK_FILTERS = tuple(os.environ.get("TOPP_CHECK_FILTERS", "top_p0.9").split(","))
VARIANTS = json.loads(a.variants)


def _knob(attr):
    """The :class:`Knobs` field a variant's name stands for: ``rows.X`` and upper-case names in lower case."""
    return (attr[5:] if attr.startswith("rows.") else attr).lower()


VARIANTS = {name: {_knob(k): v for k, v in attrs.items()} for name, attrs in VARIANTS.items()}
_VARIANT = contextlib.ExitStack()  # the override of the variant in use
torch.manual_seed(0)
XS = {(v, b): torch.randn(b, v, device=DEV) * 3 for v in VS for b in BS}


def use(name):
    """Switch to variant ``name`` (the defaults plus its knobs): the previous variant's override is left."""
    _VARIANT.close()
    _VARIANT.enter_context(S.override(**VARIANTS[name]))


def make(x, k, p, mp, seed=None):
    def f():
        sd = seed if seed is not None else torch.randint(0, 2**31 - 1, (1,), device=DEV, dtype=torch.int64)
        return S.sample(x, sd, None, 0.7, None, k, None, p, None, mp, None, False, True)
    return f


def cases():
    for (v, b) in XS:
        yield v, b, "top_p0.9"
    if os.environ.get("TOPP_MINP") == "1":  # min-p at every (V, B)
        for (v, b) in XS:
            yield v, b, "min_p0.1"
    else:
        yield VS[1], 64, "min_p0.1"


def timed(fn):
    if DEV == "cpu":
        fn()
        return 0.0
    return graph_time_us(fn, 20, 5)


def check(name, v, b, filt="top_p0.9", seeds=4):
    _k, p, mp = FILTERS[filt]
    if (v, b) not in XS:
        XS[(v, b)] = torch.randn(b, v, device=DEV) * 3
    bad = 0
    for seed in range(seeds):
        sd = torch.tensor([seed], device=DEV, dtype=torch.int64)
        use(name)
        with S.override(winner=True):
            t1 = S.sample(XS[(v, b)], sd, None, 0.7, None, 0, None, p, None, mp, None, False, True)
        with S.override(winner=False):
            t2 = S.sample(XS[(v, b)], sd, None, 0.7, None, 0, None, p, None, mp, None, False, True)
        bad += int((t1 != t2).sum())
    return bad


if a.mode == "warm":
    use(a.only)
    for v, b, filt in cases():
        make(XS[(v, b)], *FILTERS[filt])()
    if a.only == next(iter(VARIANTS)):
        make(XS[(VS[1], 64)], *FILTERS["hf_k50_p0.9"])()
    for v in VS:  # the check's shapes, both paths
        for b in CHECK_BS:
            for filt in CHECK_FILTERS:
                check(a.only, v, b, filt, seeds=1)
    if DEV != "cpu":
        torch.cuda.synchronize()
    print(f"WARM {a.only} done", flush=True)

elif a.mode == "time":
    for name in VARIANTS:
        use(name)
        for v, b, filt in cases():
            try:
                us = timed(make(XS[(v, b)], *FILTERS[filt]))
            except Exception as e:  # report, go on
                print(f"FAIL {name} V={v} B={b} {filt}: {e!r}"[:400], flush=True)
                continue
            with open(a.csv, "a") as fh:
                fh.write(f"{v},{b},{filt},ours+{name},{us:.1f}\n")
            print(f"TIME {name:16s} V={v:6d} B={b:3d} {filt:10s} {us:8.1f} us", flush=True)
    use(next(iter(VARIANTS)))
    us = timed(make(XS[(VS[1], 64)], *FILTERS["hf_k50_p0.9"]))
    with open(a.csv, "a") as fh:
        fh.write(f"{VS[1]},64,hf_k50_p0.9,ours+{next(iter(VARIANTS))},{us:.1f}\n")
    print(f"TIME HF chain V={VS[1]} B=64 {us:.1f} us", flush=True)

else:
    t = collections.defaultdict(dict)
    for line in open(a.csv).read().split("\n")[1:]:
        if line:
            v, b, f, c, us = line.split(",")
            t[(int(v), int(b), f)][c.split("+", 1)[1]] = float(us)
    best = {}
    for key, d in sorted(t.items()):
        name = min(d, key=d.get)
        best[key] = name
        base = d.get(next(iter(VARIANTS)), float("nan"))
        print(f"BEST V={key[0]:6d} B={key[1]:3d} {key[2]:10s} {name:16s} {d[name]:7.1f} us (base {base:.1f}) | "
              + " ".join(f"{n}={u:.1f}" for n, u in sorted(d.items(), key=lambda kv: kv[1])[:5]), flush=True)
    for v, b in ((VS[1], 32), (VS[0], 64)):
        name = best.get((v, b, "top_p0.9"), next(iter(VARIANTS)))
        use(name)
        if DEV != "cpu":
            parts = [f"{n.replace('_kernel', '')[:12]} {us:.1f}" for n, us in kernel_breakdown(
                make(XS[(v, b)], *FILTERS["top_p0.9"]), 10)]
            print(f"PROF {name} V={v} B={b}: {len(parts)} kernels | " + ", ".join(parts), flush=True)
    for name in VARIANTS:
        for v in (VS[0], VS[1], VS[2]):
            for b in CHECK_BS:
                for filt in CHECK_FILTERS:
                    print(f"CHECK {name} V={v} B={b} {filt}: {check(name, v, b, filt)} different tokens of {4 * b}",
                          flush=True)
