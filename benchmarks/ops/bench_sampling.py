"""Benchmark: ``rocm_fused::sample`` alone vs FlashInfer vs eager HF vs Inductor, per call, CUDA-graph timed.

Grid: V in {32000, 128256, 151936} x B in {1, 8, 32, 64} x filters (float32 logits ``randn * 3``):
``hf_k50_p0.9`` (HF order: T=0.7, top-k 50, top-p 0.9), ``top_p0.9`` (T=0.7), ``top_k50`` (T=0.7),
``min_p0.1`` (T=0.7). Configs:
- ``ours``: ``torch.ops.rocm_fused.sample(..., "triton")`` with its seed drawn by ``torch.randint`` in the graph;
- ``eager``: HF's warpers (``TemperatureLogitsWarper`` -> TopK / TopP / MinP -> softmax -> multinomial), literally;
- ``inductor``: ``torch.compile`` of the same chain (``dynamic=True``, one compile per filter; where that
  crashes, a static compile for the shape if the time budget allows; a crash is recorded as ``nan``);
- ``flashinfer_<version>``: FlashInfer's own entry points as a user would call them (``--flashinfer`` runs
  only these, in a process whose ``PYTHONPATH`` holds one FlashInfer release): hf ->
  ``top_k_top_p_sampling_from_logits(x / T, 50, 0.9)``; top-p / top-k / min-p -> ``softmax(x, T)`` then
  ``top_p_ / top_k_ / min_p_sampling_from_probs``. Releases with device ``seed``/``offset`` tensors (>= 0.6.4,
  detected by the parameter's type) are timed in a CUDA graph with the seed drawn in the graph; older ones
  read host generator state (not capture-safe) and are timed as event-bracketed eager calls (launch
  overhead included).
Everything else is timed over a captured CUDA graph of ``ITERS`` calls (median of ``REPS`` replays).

    python benchmarks/ops/bench_sampling.py [--out DIR] [--append] [--flashinfer] [--budget-s S] [--quick]
Writes ``sampling.csv`` (columns ``vocab,batch,filters,config,us``) and ``sampling.md`` (a table per filter,
timing mode per config) under ``--out``; ``--append`` merges with the rows already there (one run per FlashInfer
release). Needs a GPU; FlashInfer optional.
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
from timing import graph_time_us, time_call  # noqa: E402  (benchmarks/timing.py)

import rocm_inductor  # noqa: F401  (registers the ops)

T = 0.7
FILTERS = {"hf_k50_p0.9": dict(k=50, p=0.9, mp=0.0), "top_p0.9": dict(k=0, p=0.9, mp=0.0),
           "top_k50": dict(k=50, p=1.0, mp=0.0), "min_p0.1": dict(k=0, p=1.0, mp=0.1)}
VOCABS = (32000, 128256, 151936)
BATCHES = (1, 8, 32, 64)
ITERS, REPS = 20, 5
COLS = ["vocab", "batch", "filters", "config", "us"]


def hf_chain(k: int, p: float, mp: float):
    """HF generate's sampling step (T, then top-k, top-p, min-p as configured) on (B, V) logits."""

    def chain(logits: torch.Tensor) -> torch.Tensor:
        scores = logits.float() / T
        if k > 0:
            scores = scores.masked_fill(scores < torch.topk(scores, k)[0][..., -1, None], -float("inf"))
        if p < 1.0:
            sorted_logits, sorted_indices = torch.sort(scores, descending=False)
            remove = sorted_logits.softmax(-1).cumsum(-1) <= (1 - p)
            remove[..., -1:] = 0
            scores = scores.masked_fill(remove.scatter(1, sorted_indices, remove), -float("inf"))
        if mp > 0.0:
            probs = torch.softmax(scores, -1)
            remove = probs < mp * probs.amax(-1, keepdim=True)
            remove.scatter_(-1, torch.topk(probs, 1, dim=-1).indices, False)
            scores = scores.masked_fill(remove, -float("inf"))
        return torch.multinomial(torch.softmax(scores, -1), 1).squeeze(1)

    return chain


def graph_us(fn) -> float:
    with torch.no_grad():
        return graph_time_us(fn, ITERS, REPS)


def eager_us(fn) -> float:
    with torch.no_grad():
        torch.cuda.synchronize()
        return min(time_call(fn, ITERS, 3, True))


def _seed():
    return torch.randint(0, 2**31 - 1, (1,), device="cuda", dtype=torch.int64)


def ours(x, f):
    return lambda: torch.ops.rocm_fused.sample(x, _seed(), None, T, None, f["k"], None, f["p"], None, f["mp"], None,
                                               False, True, False, "triton")


def flashinfer_calls():
    """(version, seeded, {filter: make(x) -> callable}) for the importable FlashInfer, or None."""
    try:
        import flashinfer
        from flashinfer import sampling as S
    except Exception as e:  # absent or broken: no FlashInfer rows
        print(f"flashinfer unavailable: {type(e).__name__}: {e}")
        return None
    from rocm_inductor.providers._vendor_sampling import device_seed

    seeded = device_seed(S.top_k_top_p_sampling_from_logits)
    softmax = getattr(S, "softmax", None)

    def kw(b):
        if seeded:
            return dict(seed=_seed(), offset=torch.zeros(1, dtype=torch.int64, device="cuda"))
        return {}

    def probs(x):
        return softmax(x, temperature=T) if softmax is not None else torch.softmax(x / T, -1)

    import os

    # FI_TOPK_TENSOR=1: pass k as a (B,) tensor, which skips 0.6.x's radix top-k fast path (its JIT module
    # may be absent on the device: see benchmarks/device_sampling.sh)
    tensor_k = os.environ.get("FI_TOPK_TENSOR") == "1"

    def k_arg(x):
        return torch.full((x.shape[0],), 50, dtype=torch.int32, device=x.device) if tensor_k else 50

    makers = {
        "hf_k50_p0.9": lambda x: lambda: S.top_k_top_p_sampling_from_logits(x / T, k_arg(x), 0.9, **kw(x.shape[0])),
        "top_p0.9": lambda x: lambda: S.top_p_sampling_from_probs(probs(x), 0.9, **kw(x.shape[0])),
        "top_k50": lambda x: lambda: S.top_k_sampling_from_probs(probs(x), 50, **kw(x.shape[0])),
        "min_p0.1": lambda x: lambda: S.min_p_sampling_from_probs(probs(x), 0.1, **kw(x.shape[0])),
    }
    return flashinfer.__version__ + (" (k tensor)" if tensor_k else ""), seeded, makers


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--append", action="store_true", help="merge with the rows already in --out")
    ap.add_argument("--flashinfer", action="store_true", help="only the importable FlashInfer's rows")
    ap.add_argument("--configs", default="ours,eager,inductor")
    ap.add_argument("--budget-s", type=float, default=200.0, help="stop starting new rows after this")
    ap.add_argument("--quick", action="store_true", help="V=128256, B in {1, 64} only")
    ap.add_argument("--warm-only", action="store_true",
                    help="compile every kernel once (fills the on-disk Triton / Inductor caches for a later run)")
    ap.add_argument("--inductor-filters", default=",".join(FILTERS), help="filters Inductor compiles")
    ap.add_argument("--inductor-vocabs", default=",".join(map(str, VOCABS)), help="vocabularies for Inductor")
    ap.add_argument("--set", default="", help="JSON {name: value}: knobs of providers/triton/sampling/knobs.py to "
                    "override for the whole run (a config picked by benchmarks/sweeps/sweep_sampling.py; "
                    "upper-case names are read as the knob of that name in lower case)")
    args = ap.parse_args()
    if args.set:
        from rocm_inductor.providers.triton import sampling as tsampling

        set_knobs = contextlib.ExitStack()  # held until main() returns: the whole run
        set_knobs.enter_context(tsampling.override(**{n.lower(): v for n, v in json.loads(args.set).items()}))
    assert torch.cuda.is_available(), "needs a GPU"
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    vocabs, batches = ((128256,), (1, 64)) if args.quick else (VOCABS, BATCHES)
    rows: list[dict] = []
    meta: dict[str, str] = {}
    crashes: list[str] = []

    old: list[dict] = []
    if args.append and (out / "sampling.csv").exists():
        with open(out / "sampling.csv") as fh:
            old = list(csv.DictReader(fh))
    meta_path = out / "sampling_meta.json"
    allmeta = json.loads(meta_path.read_text()) if args.append and meta_path.exists() else {}
    allmeta.setdefault("timing", {})
    allmeta.setdefault("crashes", [])
    allmeta.setdefault("runs", [])
    n_crash = len(allmeta["crashes"])
    run_i = len(allmeta["runs"])

    def write_out():
        """Rewrite CSV / meta / md with every row so far (a run killed by its timeout keeps its rows)."""
        done = {r["config"] for r in rows}
        all_rows = [r for r in old if r["config"] not in done] + rows
        with open(out / "sampling.csv", "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=COLS)
            w.writeheader()
            w.writerows(all_rows)
        allmeta["timing"].update(meta)
        allmeta["crashes"][n_crash:] = crashes
        allmeta["runs"][run_i:] = [f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: "
                                   f"{torch.cuda.get_device_name()}, torch {torch.__version__}, "
                                   f"triton {__import__('triton').__version__}, configs {sorted(meta)}, "
                                   f"{time.time() - t0:.0f} s"]
        meta_path.write_text(json.dumps(allmeta, indent=1))
        (out / "sampling.md").write_text(markdown(all_rows, allmeta))

    def record(v, b, filt, config, fn, timer):
        if time.time() - t0 > args.budget_s:
            crashes.append(f"{config} {filt} V={v} B={b}: skipped (time budget)")
            us = math.nan
        else:
            try:
                us = timer(fn)
            except Exception as e:  # report crashes as crashes
                crashes.append(f"{config} {filt} V={v} B={b}: {type(e).__name__}: {str(e).splitlines()[0][:150]}"
                               if str(e) else f"{config} {filt} V={v} B={b}: {type(e).__name__}")
                us = math.nan
        rows.append(dict(vocab=v, batch=b, filters=filt, config=config, us=f"{us:.1f}"))
        print(rows[-1], flush=True)
        write_out()

    shapes = [(v, b) for v in vocabs for b in batches]
    xs = {(v, b): torch.randn(b, v, device="cuda", generator=torch.Generator("cuda").manual_seed(b + v)) * 3
          for v, b in shapes}
    if args.warm_only:
        with torch.no_grad():
            for x in xs.values():
                for f in FILTERS.values():
                    ours(x, f)()
            torch.cuda.synchronize()
            print(f"warm: ours compiled in {time.time() - t0:.0f} s", flush=True)
        return
    if args.flashinfer:
        fi = flashinfer_calls()
        if fi is not None:
            ver, seeded, makers = fi
            name = f"flashinfer_{ver.split()[0]}"
            meta[name] = ("CUDA graph (device seed/offset)" if seeded else "eager calls (host generator state)") + (
                "; hf: top_k passed as a (B,) tensor (radix top-k module not built)" if "k tensor" in ver else "")
            for (v, b), x in xs.items():
                for filt, make in makers.items():
                    record(v, b, filt, name, make(x), graph_us if seeded else eager_us)
    else:
        configs = args.configs.split(",")
        if "ours" in configs:
            meta["ours"] = "CUDA graph"
            for (v, b), x in xs.items():
                for filt, f in FILTERS.items():
                    record(v, b, filt, "ours", ours(x, f), graph_us)
        if "eager" in configs:
            meta["eager"] = "CUDA graph"
            for (v, b), x in xs.items():
                for filt, f in FILTERS.items():
                    record(v, b, filt, "eager", hf_chain(**f), lambda fn, x=x: graph_us(lambda: fn(x)))
        if "inductor" in configs:
            meta["inductor"] = "CUDA graph (torch.compile dynamic=True; static per shape where that crashed)"
            torch._dynamo.config.cache_size_limit = 256
            ind_v = {int(v) for v in args.inductor_vocabs.split(",")}
            for filt, f in FILTERS.items():
                if filt not in args.inductor_filters.split(","):
                    continue
                dyn = torch.compile(hf_chain(**f), dynamic=True)
                for (v, b), x in xs.items():
                    if v not in ind_v:
                        continue
                    def timer(fn, x=x, f=f):
                        try:
                            with torch.no_grad():
                                fn(x)
                        except Exception:  # torch 2.11: SplitScan codegen crash for B > 1 (docs/gpu.md)
                            fn = torch.compile(hf_chain(**f), dynamic=False)
                        return graph_us(lambda: fn(x))
                    record(v, b, filt, "inductor", dyn, timer)
    write_out()
    print((out / "sampling.md").read_text())


def markdown(rows: list[dict], meta: dict) -> str:
    """One table per filter: (V, B) rows x config columns, us per call."""
    configs = sorted({r["config"] for r in rows}, key=lambda c: (c != "ours", c.startswith("inductor"), c))
    lines = ["# Sampling op alone, us per call (float32 logits randn * 3, T = 0.7)", ""]
    lines += [f"- {r}" for r in meta.get("runs", [])]
    lines += [f"- `{c}`: {m}" for c, m in sorted(meta.get("timing", {}).items())]
    lines += ["- nan = crashed or skipped (listed at the end)", ""]
    by = {(r["filters"], int(r["vocab"]), int(r["batch"]), r["config"]): r["us"] for r in rows}
    for filt in FILTERS:
        keys = sorted({(v, b) for f, v, b, _ in by if f == filt})
        if not keys:
            continue
        lines += [f"## {filt}", "", "| V | B | " + " | ".join(configs) + " |", "|---|---|" + "---|" * len(configs)]
        lines += [f"| {v} | {b} | " + " | ".join(by.get((filt, v, b, c), "") for c in configs) + " |"
                  for v, b in keys]
        lines.append("")
    if meta.get("crashes"):
        lines += ["## Crashed / skipped", ""] + [f"- {c}" for c in meta["crashes"]]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
