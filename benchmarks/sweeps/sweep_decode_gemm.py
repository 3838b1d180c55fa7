"""Config sweep of the merged decode GEMM (issue 19): every config of ``sweep_configs`` per shape and M, the
best written to a table of rows (``gemm_merge_tuned.json``), plus the per-layer table.

Shapes: Llama-3.2-1B and Qwen3-0.6B q/k/v, gate/up (merges; K = hidden) and the single GEMMs k_proj,
lm_head (K = hidden), o_proj (K = heads x head_dim, N = hidden) and down_proj (K = intermediate, N = hidden),
bf16, M in ``--buckets`` (default 1,2,4,8,16,32), in the priority order ``--order`` (M = 1 and 8 first) until
``--budget-s`` is spent; or exactly the ``--jobs`` list (``model/group/M,...``, in that order). ``--short``
times ``short_configs`` (4-7 per shape) instead of every ``sweep_configs`` entry; the ``--table``'s current
config for a shape is timed again with them (a re-sweep never records a config slower than one it had).
Timing as ``bench_decode_gemm.py``'s per-layer part: us per call from CUDA-graph
replays (CUDA events) with the weights rotated over copies > 2x L2, so every call streams them from HBM;
separate cuBLAS (``F.linear`` per weight), one cuBLAS GEMM on concatenated weights (multi-GEMM groups) and the
HBM floor at the measured copy bandwidth. Outputs under ``--out``: ``decode_gemm_sweep.csv`` (every config),
``decode_gemm_layer.csv|md`` (best config per shape vs cuBLAS), ``gemm_merge_tuned.json`` (also written to
``--table``; ``ROCM_FUSED_GEMM_TABLE=<file>`` makes ``providers/triton/gemm_tables.py`` read it). The package
ships the rows as tuning decisions: ``scripts/convert_tuned_tables.py --gemm $OUT/gemm_merge_tuned.json ...``
writes ``rocm_inductor/tuning/shipped/<gpu>.json``.

    python benchmarks/sweeps/sweep_decode_gemm.py --out $OUT
    python benchmarks/sweeps/sweep_decode_gemm.py --tiny --device cpu --out /tmp/x      # smoke test (interpreter)
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import gc
import json
import os
import pathlib
import sys
import time

import torch
import torch.nn.functional as F

sys.path[:0] = [str(pathlib.Path(__file__).resolve().parents[1] / d) for d in ("ops", ".")]  # bench_decode_gemm, timing
sys.path.insert(2, str(pathlib.Path(__file__).resolve().parents[2]))  # rocm_inductor without an install
from bench_decode_gemm import SHAPES, TINY_SHAPES, _cfg_str, _copies, _time_rotating  # noqa: E402
from timing import copy_bandwidth_gbs, versions, write_results  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    """Command line (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default="llama,qwen3")
    p.add_argument("--buckets", default="1,2,4,8,16,32")
    p.add_argument("--order", default="1,8,32,4,2,16", help="M priority (budget runs out last on the tail)")
    p.add_argument("--groups", default="qkv,gate_up,k_proj,lm_head")
    p.add_argument("--budget-s", type=float, default=150.0)
    p.add_argument("--device", default="cuda")
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--out", default="benchmarks/results")
    p.add_argument("--table", default=None, help="also write the picked configs here")
    p.add_argument("--jobs", default="", help="model/group/M,... to sweep in this order (overrides the loops)")
    p.add_argument("--short", action="store_true", help="short candidate lists (short_configs)")
    return p.parse_args(argv)


def group_shapes(shape: tuple[int, ...]) -> dict[str, tuple[int, tuple[int, ...]]]:
    """group -> (K, Ns) for one model shape ``(hidden, q, kv, inter, vocab)`` (``bench_decode_gemm.SHAPES``)."""
    hidden, q, kv, inter, vocab = shape
    return {"qkv": (hidden, (q, kv, kv)), "gate_up": (hidden, (inter, inter)), "k_proj": (hidden, (kv,)),
            "lm_head": (hidden, (vocab,)), "o_proj": (q, (hidden,)), "down_proj": (inter, (hidden,))}


def _save(args, sweep: list[dict], entries: list[dict]) -> None:
    """Write the sweep CSV and the table (after every shape: a timeout still leaves what was measured)."""
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "decode_gemm_sweep.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=("model", "group", "M", "config", "us", "error"))
        w.writeheader()
        w.writerows(sweep)
    doc = {"source": f"benchmarks/sweeps/sweep_decode_gemm.py, {time.strftime('%Y-%m-%d')}, {versions()}; us per call "
                     "in "
                     "CUDA graphs, weights streaming from HBM", "entries": entries}
    for path in [os.path.join(args.out, "gemm_merge_tuned.json")] + ([args.table] if args.table else []):
        old = []
        try:  # keep the file's entries of other devices/shapes/M: a sweep replaces only what it measured
            with open(path) as f:
                old = json.load(f).get("entries", [])
        except (OSError, ValueError):
            pass
        key = lambda e: (e["device"], e["m"], e["k"], tuple(e["ns"]), e["dtype"])  # noqa: E731
        new = {key(e) for e in entries}
        with open(path, "w") as f:
            json.dump({**doc, "entries": [e for e in old if key(e) not in new] + entries}, f, indent=1)


def main(argv=None) -> int:
    """Run the sweep; returns the process exit code."""
    args = parse_args(argv)
    cuda = args.device == "cuda"
    if not cuda:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    from rocm_inductor.providers.triton import gemm_configs as tgc
    from rocm_inductor.providers.triton import gemm_merge as tg

    dev = "cuda" if cuda else "cpu"
    dtype = torch.bfloat16 if cuda else torch.float32
    esize = torch.finfo(dtype).bits // 8
    dname = torch.cuda.get_device_name(0) if cuda else "cpu"
    sms = tgc._sms()
    warp = tgc.warp_size()
    start = time.perf_counter()
    bw = copy_bandwidth_gbs() if cuda else 10.0
    print(f"{dname}: copy bandwidth {bw:.0f} GB/s, {sms} SMs", flush=True)
    shapes = TINY_SHAPES if args.tiny else SHAPES
    buckets = [int(b) for b in args.buckets.split(",")]
    order = [int(b) for b in args.order.split(",") if int(b) in buckets]
    order += [b for b in buckets if b not in order]
    models = [m for m in args.models.split(",") if m]
    groups = [g for g in args.groups.split(",") if g]
    sweep, layer, entries, skipped = [], [], [], []
    old_entries = []
    if args.table:
        try:
            with open(args.table) as f:
                old_entries = json.load(f).get("entries", [])
        except (OSError, ValueError):
            pass
    if args.jobs:
        jobs = [(j.split("/")[0], j.split("/")[1], int(j.split("/")[2])) for j in args.jobs.split(",") if j]
    else:  # the first model's shapes first (the step benchmark's), M in priority order
        jobs = [(model, gname, m) for model in models for m in order for gname in groups]
    for model, gname, m in jobs:
        hidden, ns = group_shapes(shapes[model])[gname]  # K of this GEMM (hidden, but o_proj / down_proj)
        if time.perf_counter() - start > args.budget_s:
            skipped.append(f"{model} {gname} M={m}")
            continue
        wbytes = sum(ns) * hidden * esize
        g = torch.Generator(device=dev).manual_seed(0)
        sets = [[torch.randn(n, hidden, device=dev, dtype=dtype, generator=g) * 0.02 for n in ns]
                for _ in range(_copies(wbytes, cuda))]
        x = torch.randn(m, hidden, device=dev, dtype=dtype)
        floor = (wbytes + m * hidden * esize + m * sum(ns) * esize) / (bw * 1e3)
        sep = _time_rotating([lambda ws=ws, x=x: [F.linear(x, w) for w in ws] for ws in sets], cuda)
        cat = ""
        if len(ns) > 1:
            cats = [torch.cat(ws) for ws in sets]
            cat = round(_time_rotating([lambda c=c, x=x: F.linear(x, c) for c in cats], cuda), 2)
            del cats
        cfgs = (tgc.short_configs if args.short else tgc.sweep_configs)(m, ns, hidden, dtype, sms, warp)
        for e in old_entries:  # re-timed: the table's current pick for this shape competes again
            if (e.get("device"), e.get("m"), e.get("k"), tuple(e.get("ns", ())), e.get("dtype")) == (
                    dname, m, hidden, tuple(ns), str(dtype).replace("torch.", "")):
                prev = tgc.Config(**e["config"])
                cfgs += [prev] if prev not in cfgs else []
        if args.tiny:
            cfgs = cfgs[:2] + [c for c in cfgs if c.late][:1] + [c for c in cfgs if c.full][:1]
        best, best_us = None, float("inf")
        refs = [F.linear(x, w).float() for w in sets[0]]
        for cfg in cfgs:
            try:
                outs = tg.merged_gemm(x, sets[0], [None] * len(ns), cfg)
                err = max(float((o.float() - r).abs().max()) for o, r in zip(outs, refs))
                if err > 0.05 * max(float(r.abs().max()) for r in refs) + 1e-3:
                    raise RuntimeError(f"wrong result: max abs diff {err:.3g}")
                us = _time_rotating([lambda ws=ws, cfg=cfg, x=x: tg.merged_gemm(x, ws, [None] * len(ws), cfg)
                                     for ws in sets], cuda)
            except Exception as e:  # a config that fails to compile/launch/verify: listed, skipped
                sweep.append(dict(model=model, group=gname, M=m, config=_cfg_str(cfg), us="",
                                  error=f"{type(e).__name__}: {str(e)[:80]}"))
                continue
            sweep.append(dict(model=model, group=gname, M=m, config=_cfg_str(cfg), us=round(us, 2),
                              error=""))
            if us < best_us:
                best, best_us = cfg, us
        del sets
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
        if best is None:
            continue
        name = _cfg_str(best)
        layer.append(dict(model=model, group=gname, M=m, K=hidden, N="/".join(map(str, ns)),
                          separate_cublas_us=round(sep, 2), concat_cublas_us=cat, ours_us=round(best_us, 2),
                          floor_us=round(floor, 2), ours_vs_separate=round(sep / best_us, 3),
                          ours_vs_floor=round(best_us / floor, 2), best_config=name, configs=len(cfgs)))
        entries.append(dict(device=dname, m=m, k=hidden, ns=list(ns), dtype=str(dtype).replace("torch.", ""),
                            config=dataclasses.asdict(best), ours_us=round(best_us, 2),
                            separate_us=round(sep, 2), concat_us=cat, floor_us=round(floor, 2),
                            group=f"{model} {gname}"))
        _save(args, sweep, entries)
        print(f"[{time.perf_counter() - start:4.0f}s] {model:<6} {gname:<8} M={m:<3} sep {sep:7.2f} cat "
              f"{cat!s:>7} ours {best_us:7.2f} floor {floor:6.2f} us [{name}] ({len(cfgs)} configs)",
              flush=True)
    _save(args, sweep, entries)
    layer.sort(key=lambda r: (r["model"], r["group"], r["M"]))
    text = write_results(layer, args.out, "decode_gemm_layer", f"Decode GEMMs per layer ({versions()}, {dname})", [
        "", f"bf16, us per call (CUDA-graph replays, weights rotated over copies > 2x L2); floor = bytes / {bw:.0f} "
        "GB/s copy bandwidth measured here; ours = the best of `configs` configs swept (best_config; late = the "
        "runtime-K-loop GEMV tile, full = the full-K GEMV tile, evict = evict_first weight loads); elapsed "
        f"{time.perf_counter() - start:.0f} s"
        + (f"; skipped (budget): {', '.join(skipped)}" if skipped else "") + "."])
    print(text, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
