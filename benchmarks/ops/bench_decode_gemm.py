"""Decode GEMMs (issue 19): per-layer projections and the whole decode step, with and without gemm_merge.

Part 1, per layer (``decode_gemm_layer.csv|md``): at M = batch in ``--buckets`` (one token per sequence),
bf16, us per call from CUDA-graph replays (CUDA events), with the weights rotated over enough copies that
each call streams them from HBM (> 2x the L2 size in flight: a 12 MB q/k/v set would otherwise stay in the
H200's L2 across replays). Groups per model shape (Llama-3.2-1B: hidden 2048, q 2048, k/v 512, inter 8192;
Qwen3-0.6B: hidden 1024, q 16 x 128, k/v 8 x 128, inter 3072):
  qkv, gate_up   separate cuBLAS GEMMs (``F.linear`` per weight, what the compiled graph runs today),
                 one cuBLAS GEMM on a concatenated weight (what freezing / fused-QKV model code gets; costs one
                 more copy of those weights), ours (``rocm_fused::merged_gemm`` on the Triton provider, weights
                 read in place; its config is tuned at the first call and printed), and the HBM floor
                 (weights + x + outputs at the copy bandwidth measured here);
  k_proj, lm_head  one GEMM alone: cuBLAS vs ours (issue 19: take ours for single GEMMs only where faster).
Part 2, whole decode step (``decode_gemm.csv`` with exactly ``model,batch,config,step_us``, plus
``decode_gemm_steps.md`` with compile seconds, what was rewritten and the logit difference to Inductor):
Llama-3.2-1B and Qwen3-0.6B shapes (``benchmarks/hf_models.py``, random bf16 weights, StaticCache,
position ``--pos``), B in ``--buckets``, configs
  inductor            ``torch.compile(step, mode="reduce-overhead")``
  inductor_freezing   the same under ``torch._inductor.config.freezing=True`` (weights become constants;
                      Inductor's own passes may concatenate some GEMMs of one input)
  rocm_fused          ``backend="rocm_fused"`` with CUDA graphs and only ``gemm_merge`` on (the effect of this
                      issue alone; ``rocm_fused_all`` = the platform's default passes + gemm_merge, norm_gemm off)
  rocm_fused_norms    (optional) rms_norm + gemm_merge on (our add + RMSNorm kernel next to our GEMM: two launches)
  rocm_fused_norm_gemm (optional) rms_norm + gemm_merge + norm_gemm (the norm as the GEMM's prologue: one launch)
  rocm_fused_all_norm_gemm (optional) the platform's default passes + gemm_merge + norm_gemm
  rocm_fused_freezing (optional) rocm_fused under freezing: Inductor's freezing concatenates GEMMs of one input
                      only when their weights have one shape (gate/up), our pass then merges q/k/v
  rocm_fused_pdl      (optional) rocm_fused with the PDL switch on for the run (``gemm_knobs.override(pdl=True)``:
                      programmatic dependent launch of our GEMM kernels where available; ``rocm_fused`` keeps the
                      default)
  inductor_pdl        (optional) inductor compiled with Inductor's own PDL codegen
                      (``torch._inductor.config.triton.enable_pdl``: its Triton kernels wait / signal early and
                      launch with ``launch_pdl``); skipped, with the reason, where this torch lacks the field
  rocm_fused_pdl_all  (optional) rocm_fused with Inductor's PDL codegen and our PDL switch on: the one
                      setting where the producers of our GEMM (Inductor's add + RMSNorm) signal early
Runs go in priority order (B=1 of every model first, Inductor and rocm_fused before freezing) and a run whose
estimated cost would pass ``--budget-s`` is skipped and listed (compiles: ~30 s for the 16-layer Llama, ~70 s
for the 28-layer Qwen3 on the H200, benchmarks/results/decode_*.csv); the full matrix takes more than one
4-minute call: split it with ``--models`` / ``--buckets``.

    python benchmarks/ops/bench_decode_gemm.py [--models llama,qwen3] [--buckets 1,8,32] [--out benchmarks/results]
    python benchmarks/ops/bench_decode_gemm.py --tiny --device cpu --out /tmp/x     # smoke test (CPU, interpreter)
"""

from __future__ import annotations

import argparse
import csv
import gc
import os
import pathlib
import statistics
import sys
import tempfile
import time
import warnings

os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="triton_dgemm_"))
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="inductor_dgemm_"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # benchmarks/: cli, hf_models, timing
sys.path.insert(1, str(pathlib.Path(__file__).resolve().parents[2]))  # rocm_inductor without an install
import cli  # noqa: E402  (benchmarks/cli.py)
import hf_models  # noqa: E402  (benchmarks/hf_models.py)
from timing import copy_bandwidth_gbs, graph_time_us, time_call, versions, write_results  # noqa: E402

CONFIGS = ("inductor", "rocm_fused", "rocm_fused_norms", "rocm_fused_norm_gemm", "rocm_fused_all",
           "rocm_fused_all_norm_gemm", "rocm_fused_pdl_all", "inductor_pdl", "rocm_fused_pdl", "inductor_freezing",
           "rocm_fused_freezing")
#: passes on (all others off) per rocm_fused config that names them; the others keep the platform defaults.
ONLY_PASSES = {"rocm_fused": ("gemm_merge",), "rocm_fused_freezing": ("gemm_merge",),
               "rocm_fused_pdl": ("gemm_merge",), "rocm_fused_pdl_all": ("gemm_merge",),
               "rocm_fused_norms": ("rms_norm", "gemm_merge"),
               "rocm_fused_norm_gemm": ("rms_norm", "gemm_merge", "norm_gemm")}
FREEZING = ("inductor_freezing", "rocm_fused_freezing")
#: configs compiled with Inductor's own PDL codegen (``triton.enable_pdl``); configs with our GEMM's PDL on.
INDUCTOR_PDL = ("inductor_pdl", "rocm_fused_pdl_all")
OUR_PDL = ("rocm_fused_pdl", "rocm_fused_pdl_all")
STEP_COLUMNS = ("model", "batch", "config", "step_us")

#: (hidden, q, kv, inter, vocab) per model shape (the checkpoints' config.json; hf_models.FAMILIES).
SHAPES = {"llama": (2048, 2048, 512, 8192, 128256), "qwen3": (1024, 2048, 1024, 3072, 151936)}
TINY_SHAPES = {"llama": (64, 64, 32, 96, 256), "qwen3": (64, 64, 32, 96, 256)}


def parse_args(argv=None) -> argparse.Namespace:
    """Command line (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default="llama,qwen3")
    p.add_argument("--buckets", default="1,8,32", help="decode batch sizes (M of each GEMM)")
    p.add_argument("--configs", default="inductor,rocm_fused,inductor_freezing", help=f"of {list(CONFIGS)}")
    p.add_argument("--no-layer", action="store_true", help="skip the per-layer table")
    p.add_argument("--no-step", action="store_true", help="skip the whole decode step")
    p.add_argument("--freezing-last", action="store_true",
                   help="every freezing run after every other run (default: the first bucket's right after it)")
    cli.add_step_args(p, reps=20, rounds=5, budget_s=225.0)
    p.add_argument("--max-cache-len", type=int, default=1024)
    p.add_argument("--out", default="benchmarks/results")
    return p.parse_args(argv)


# ---------------------------------------------------------------------------------------------- per layer


def _time_rotating(calls, cuda: bool, reps: int = 10) -> float:
    """Median us per call of ``calls`` (one per weight copy), all captured in one CUDA graph and replayed
    ``reps`` times (CUDA events); CPU: wall clock over one pass of the list."""
    for c in calls[:2]:
        c()
    if not cuda:
        t = time.perf_counter()
        for c in calls:
            c()
        return (time.perf_counter() - t) * 1e6 / len(calls)
    # one graph holds every call (weights rotated over copies > L2); our kernel's one-time tuning runs in
    # the warm-up outside the capture
    return graph_time_us(lambda: [c() for c in calls], 1, reps) / len(calls)


def _copies(nbytes: int, cuda: bool) -> int:
    """Weight copies to rotate over: > 2x L2 in total on a GPU (H200: 60 MB L2 -> >= 128 MB), at most 64."""
    if not cuda:
        return 2
    l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 64 << 20) or (64 << 20)
    return max(2, min(64, -(-(2 * l2 + (16 << 20)) // max(nbytes, 1))))


def layer_rows(args, bw_gbs: float, cuda: bool, dev: str) -> list[dict]:
    """The per-layer table's rows (see the module docstring)."""
    from rocm_inductor.providers.triton import gemm_configs as tgc
    from rocm_inductor.providers.triton import gemm_merge as tg

    dtype = torch.bfloat16 if cuda else torch.float32
    esize = torch.finfo(dtype).bits // 8
    rows = []
    shapes = TINY_SHAPES if args.tiny else SHAPES
    for model in [m.strip() for m in args.models.split(",") if m.strip()]:
        hidden, q, kv, inter, vocab = shapes[model]
        groups = {"qkv": (q, kv, kv), "gate_up": (inter, inter), "k_proj": (kv,), "lm_head": (vocab,)}
        for gname, ns in groups.items():
            wbytes = sum(ns) * hidden * esize
            n_copies = _copies(wbytes, cuda)
            g = torch.Generator(device=dev).manual_seed(0)
            sets = [[torch.randn(n, hidden, device=dev, dtype=dtype, generator=g) * 0.02 for n in ns]
                    for _ in range(n_copies)]
            cats = [torch.cat(ws) for ws in sets] if len(ns) > 1 else None
            for m in cli.ints(args.buckets):
                x = torch.randn(m, hidden, device=dev, dtype=dtype)
                floor_us = (wbytes + m * hidden * esize + m * sum(ns) * esize) / (bw_gbs * 1e3)
                sep = _time_rotating([lambda ws=ws, x=x: [F.linear(x, w) for w in ws] for ws in sets], cuda)
                ours_calls = [lambda ws=ws, x=x: tg.merged_gemm(x, ws, [None] * len(ws)) for ws in sets]
                ours = _time_rotating(ours_calls, cuda)
                cfg = tg._TUNED.get(tg._key(x, sets[0], [None] * len(ns))) or tgc.default_config(
                    m, tuple(ns), hidden, dtype)
                out = tg.merged_gemm(x, sets[0], [None] * len(ns))
                err = max(float((o.float() - F.linear(x, w).float()).abs().max()) for o, w in zip(out, sets[0]))
                row = dict(model=model, group=gname, M=m, K=hidden, N="/".join(map(str, ns)),
                           separate_cublas_us=round(sep, 2), concat_cublas_us="", ours_us=round(ours, 2),
                           floor_us=round(floor_us, 2), ours_vs_separate=round(sep / ours, 3),
                           ours_vs_floor=round(ours / floor_us, 2), ours_config=_cfg_str(cfg),
                           max_abs_diff=f"{err:.2g}", concat_extra_mib="")
                if cats is not None:
                    cat = _time_rotating([lambda c=c, x=x: F.linear(x, c) for c in cats], cuda)
                    row.update(concat_cublas_us=round(cat, 2), concat_extra_mib=round(wbytes / 2**20, 1))
                rows.append(row)
                print(f"layer {model:<6} {gname:<8} M={m:<3} sep {sep:8.2f} cat {row['concat_cublas_us']!s:>8} "
                      f"ours {ours:8.2f} floor {floor_us:7.2f} us  [{row['ours_config']}]", flush=True)
            del sets, cats
            gc.collect()
            if cuda:
                torch.cuda.empty_cache()
    return rows


def _cfg_str(c) -> str:
    kind = "dot" if c.dot else "fma"
    tail = "".join(s for s, on in ((" late", getattr(c, "late", False)), (" full", getattr(c, "full", False)),
                                   (" evict", getattr(c, "evict", False))) if on and not c.dot)
    return f"{kind} m{c.block_m} n{c.block_n} k{c.block_k} split{c.split_k} w{c.num_warps} s{c.num_stages}{tail}"


# ---------------------------------------------------------------------------------------------- whole step


_mark = getattr(torch.compiler, "cudagraph_mark_step_begin", lambda: None)


def compile_step(config: str, step, cuda: bool, tiny: bool):
    """``step`` compiled as ``config`` (see the module docstring)."""
    if config in ("inductor", "inductor_freezing", "inductor_pdl"):
        return torch.compile(step, mode="reduce-overhead" if cuda else None, fullgraph=True, dynamic=False)
    # the *_all configs: the platform's defaults + gemm_merge, norm_gemm named either way (it is on by default on
    # CUDA since session 7: rocm_fused_all must switch it off to stay the baseline of rocm_fused_all_norm_gemm)
    opts = {"cudagraphs": cuda, "passes": {"gemm_merge": True, "norm_gemm": config == "rocm_fused_all_norm_gemm"}}
    if config in ONLY_PASSES:
        from rocm_inductor.options import PASS_NAMES

        opts["passes"] = {p: p in ONLY_PASSES[config] for p in PASS_NAMES}
    if not cuda:
        opts["provider"] = "reference"  # CPU smoke test: nothing is rewritten by default there
    from rocm_inductor.backend import rocm_fused  # the callable: no installed entry point needed

    return torch.compile(step, backend=rocm_fused, options=opts, fullgraph=True, dynamic=False)


def step_run(config, model, cfg, args, batch, cuda, dev) -> dict:
    """Compile (cold, caches off), time and check one (model, batch, config)."""

    torch._dynamo.reset()
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    dtype = next(model.parameters()).dtype
    step, inputs, cache = hf_models.decode_step(model, cfg, batch, 1, args.pos, args.max_cache_len, dev, dtype)
    if config in INDUCTOR_PDL and not inductor_has_pdl():
        raise SkipConfig("this torch's Inductor has no triton.enable_pdl")
    fn = compile_step(config, step, cuda, args.tiny)
    if config in OUR_PDL:  # the launcher reads the switch at each launch: on for this run only
        from rocm_inductor.providers.triton import gemm_knobs

        with gemm_knobs.override(pdl=True):
            return _step_timed(config, fn, inputs, args, cuda)
    return _step_timed(config, fn, inputs, args, cuda)


def inductor_has_pdl(config=None) -> bool:
    """Whether Inductor's config (``config``, default ``torch._inductor.config``) has ``triton.enable_pdl``,
    its PDL codegen switch (torch 2.11 and 2.13 have it: seen on the H200 2026-12-01 and in the CI venv)."""
    config = torch._inductor.config if config is None else config
    return hasattr(getattr(config, "triton", None), "enable_pdl")


class SkipConfig(Exception):
    """A config this process cannot run (the message says why); listed as skipped, not as an error."""


#: replays compared with the first call's logits (a missing PDL wait would show as a changed replay).
REPLAY_CHECKS = 20


def pdl_kernel_files() -> int:
    """Generated Inductor kernel files under ``TORCHINDUCTOR_CACHE_DIR`` calling ``gdc_wait`` (Inductor's PDL
    codegen ran), cumulative over the process."""
    n = 0
    for root, _, files in os.walk(os.environ.get("TORCHINDUCTOR_CACHE_DIR", "")):
        for f in files:
            if f.endswith(".py"):
                try:
                    n += "gdc_wait" in pathlib.Path(root, f).read_text(errors="ignore")
                except OSError:
                    pass
    return n


def _step_timed(config, fn, inputs, args, cuda) -> dict:
    """First call (compile + capture) and timing of one compiled step (see :func:`step_run`)."""
    import rocm_inductor
    from rocm_inductor.providers.triton import gemm_merge as tg

    rocm_inductor.clear_reports()
    before = dict(tg.PDL_LAUNCHES)
    patches = {"force_disable_caches": True}
    if config in FREEZING:
        patches["freezing"] = True
    if config in INDUCTOR_PDL:
        patches["triton.enable_pdl"] = True  # read at codegen: the compile runs in the first call below
    files0 = pdl_kernel_files() if config in INDUCTOR_PDL else 0
    with torch.no_grad(), torch._inductor.config.patch(patches):
        t0 = time.perf_counter()
        _mark()
        first = fn(*inputs)[:, -1].float().clone()
        if cuda:
            torch.cuda.synchronize()
        compile_s = time.perf_counter() - t0
    with torch.no_grad():
        rewrites = _rewrites(rocm_inductor.reports()) if config.startswith("rocm_fused") else ""

        def call():
            _mark()
            return fn(*inputs)

        us = time_call(call, args.reps, args.rounds, cuda)
        replay = max(float((call()[:, -1].float() - first).abs().max()) for _ in range(REPLAY_CHECKS))
    pdl = {k: tg.PDL_LAUNCHES[k] - before[k] for k in before}  # our kernel's launches (warm-up, captures)
    extra = {"gemm_launches_pdl_on_off": f"{pdl['on']}/{pdl['off']}"} if config.startswith("rocm_fused") else {}
    if config in INDUCTOR_PDL:
        extra["inductor_pdl_kernel_files"] = pdl_kernel_files() - files0
    extra["replay_max_diff"] = replay  # 20 replays vs the first call's logits (0 = no stale read seen)
    return dict(step_us=round(statistics.median(us), 1), spread_us=round(max(us) - min(us), 1),
                compile_s=round(compile_s, 1), rewrites=rewrites, _logits=first, **extra)


def _rewrites(report) -> str:
    counts: dict[str, int] = {}
    for m in report.matches:
        parts = m.note.split(",")  # "3 GEMMs merged, N ..." / "single GEMM, N 2048, ..." (N tells which one)
        key = f"{m.op}[{m.provider}]" + (f" {parts[0]}" + (f"{parts[1]}" if parts[0] == "single GEMM" else "")
                                         if m.op == "merged_gemm" else "")
        counts[key] = counts.get(key, 0) + 1
    misses = len(report.near_misses)
    return (" ".join(f"{k} x{n}" for k, n in sorted(counts.items())) or "none") + (
        f"; {misses} near-miss(es)" if misses else "")


def first_guess_s(layers: int, config: str) -> float:
    """Seconds one step compile + timing costs before anything is measured: Inductor compiled the 16-layer
    Llama step in ~30 s, the 28-layer Qwen3 in ~70 s (benchmarks/results/decode_*.csv); freezing adds
    constant folding (a guess: +30%)."""
    base = 30.0 if layers <= 16 else 70.0 * layers / 28
    return base * (1.3 if config in FREEZING else 1.0) + 5.0


def plan(args) -> list[tuple[str, int, str]]:
    """(model, batch, config) in priority order: the first bucket (B=1) of every model first, its freezing runs
    with it, the other buckets' freezing runs after the rest (``--freezing-last``: every freezing run last)."""
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    unknown = sorted(set(configs) - set(CONFIGS))
    if unknown:
        raise SystemExit(f"unknown config(s) {unknown}; valid: {list(CONFIGS)}")
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    buckets = cli.ints(args.buckets)
    runs = []
    for b in buckets:
        for m in models:
            runs += [(m, b, c) for c in CONFIGS if c in configs and c not in FREEZING]
            if b == buckets[0] and not getattr(args, "freezing_last", False):
                runs += [(m, b, c) for c in FREEZING if c in configs]
    for b in (buckets if getattr(args, "freezing_last", False) else buckets[1:]):
        runs += [(m, b, c) for m in models for c in FREEZING if c in configs]
    return runs


def step_rows(args, cuda: bool, dev: str, start: float) -> tuple[list[dict], list[dict]]:
    """(CSV rows, detail rows) of the whole-step part."""
    rows, details, built, ref, est = [], [], {}, {}, {}
    dtype = torch.bfloat16 if cuda else torch.float32
    for model_name, batch, config in plan(args):
        if model_name not in built:
            built.clear()
            gc.collect()
            built[model_name] = hf_models.build_model(model_name, dev, dtype, args.tiny,
                                                      1 if args.tiny and not args.layers else args.layers)
        model, cfg = built[model_name]
        layers = cfg.num_hidden_layers
        cost = 0.0 if args.tiny else est.get((model_name, config), first_guess_s(layers, config))
        spent = time.perf_counter() - start
        detail = dict(model=model_name, batch=batch, config=config, layers=layers)
        if spent + cost > args.budget_s:
            detail["status"] = f"skipped (budget: {spent:.0f} s spent + ~{cost:.0f} s > {args.budget_s:.0f} s)"
            details.append(detail)
            print(f"step {model_name} B={batch} {config}: {detail['status']}", flush=True)
            continue
        t0 = time.perf_counter()
        try:
            r = step_run(config, model, cfg, args, batch, cuda, dev)
            logits = r.pop("_logits")
            key = (model_name, batch)
            if config == "inductor":
                ref[key] = logits
            if config == "rocm_fused":
                ref[key + ("rocm_fused",)] = logits
            if config == "rocm_fused_norms":
                ref[key + ("rocm_fused_norms",)] = logits
            if config == "rocm_fused_norm_gemm" and key + ("rocm_fused_norms",) in ref:  # the fold alone
                r["max_abs_diff_vs_rocm_fused_norms"] = float((logits - ref[key + ("rocm_fused_norms",)]).abs().max())
            if config == "inductor_pdl" and key in ref:  # Inductor's PDL codegen must not change a bit
                r["max_abs_diff_vs_inductor"] = float((logits - ref[key]).abs().max())
            if config in OUR_PDL and key + ("rocm_fused",) in ref:  # PDL must not change a bit
                r["max_abs_diff_vs_rocm_fused"] = float((logits - ref[key + ("rocm_fused",)]).abs().max())
            if key in ref:
                base = ref[key]
                r["logit_diff_vs_inductor"] = f"{float((logits - base).abs().max() / base.abs().max()):.3g}"
            detail.update(status="ok", **r)
            rows.append(dict(model=model_name, batch=batch, config=config, step_us=r["step_us"]))
        except SkipConfig as e:
            detail["status"] = f"skipped: {e}"
        except Exception as e:  # one failing config must not lose the others' numbers
            msg = str(e).strip().splitlines()
            detail["status"] = f"error: {type(e).__name__}: {(msg[0] if msg else '')[:160]}"
        est[(model_name, config)] = time.perf_counter() - t0
        details.append(detail)
        print(f"[{time.perf_counter() - start:5.0f}s] step {model_name} B={batch} {config}: "
              f"{ {k: v for k, v in detail.items() if k not in ('model', 'batch', 'config')} }", flush=True)
        _write_steps(rows, details, args)  # a timeout later still leaves what ran
    return rows, details


def _write_steps(rows, details, args) -> None:
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "decode_gemm.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=STEP_COLUMNS)
        w.writeheader()
        w.writerows(rows)
    cols = ("model", "batch", "config", "layers", "status", "compile_s", "step_us", "spread_us", "vs_inductor",
            "logit_diff_vs_inductor", "max_abs_diff_vs_inductor", "max_abs_diff_vs_rocm_fused",
            "max_abs_diff_vs_rocm_fused_norms", "replay_max_diff",
            "rewrites")
    ind = {(d["model"], d["batch"]): d.get("step_us") for d in details if d["config"] == "inductor"}
    out = []
    for d in details:
        d = dict(d)
        if d.get("step_us") and ind.get((d["model"], d["batch"])):
            d["vs_inductor"] = round(ind[(d["model"], d["batch"])] / d["step_us"], 3)
        out.append({c: d.get(c, "") for c in cols})
    if out:
        write_results(out, args.out, "decode_gemm_steps", f"Decode step, gemm_merge ({versions()})",
                      ["", "vs_inductor = Inductor us / this us (> 1 = faster); logit_diff = max |diff| / max "
                       "|Inductor logit| of the first step's last-position logits."])


# ---------------------------------------------------------------------------------------------- main


def main(argv=None) -> int:
    """Run the benchmark; returns the process exit code."""
    args = parse_args(argv)
    cuda = args.device == "cuda"
    if cuda and not torch.cuda.is_available():
        print("no CUDA/ROCm device; use --tiny --device cpu for a smoke test", file=sys.stderr)
        return 1
    if not cuda:
        os.environ.setdefault("TRITON_INTERPRET", "1")  # our kernel on CPU (read when it is first imported)
    if args.tiny:
        args.pos = min(args.pos, 8)
        args.max_cache_len = min(args.max_cache_len, 16)
    warnings.filterwarnings("ignore", message=".*past_key_values.*deprecated")
    dev = "cuda" if cuda else "cpu"
    start = time.perf_counter()
    title = f"Decode GEMMs per layer ({versions()})"
    if not args.no_layer:
        bw = copy_bandwidth_gbs() if cuda else 10.0  # CPU: a nominal 10 GB/s, only so the column exists
        print(f"copy bandwidth {bw:.0f} GB/s", flush=True)
        rows = layer_rows(args, bw, cuda, dev)
        text = write_results(rows, args.out, "decode_gemm_layer", title, [
            "", f"bf16, us per call (CUDA-graph replays, weights rotated over copies > 2x L2); floor = bytes / "
            f"{bw:.0f} GB/s copy bandwidth measured here; concat_extra_mib = the extra weight memory a "
            "concatenated copy costs (per layer; freezing / fused-QKV code pays it once instead of the separate "
            f"weights); elapsed {time.perf_counter() - start:.0f} s."])
        print(f"# {title}\n\n{text}", flush=True)
    if not args.no_step:
        rows, details = step_rows(args, cuda, dev, start)
        _write_steps(rows, details, args)
        print("\nmodel,batch,config,step_us")
        for r in rows:
            print(f"{r['model']},{r['batch']},{r['config']},{r['step_us']}")
        for d in details:
            if d.get("status") != "ok":
                print(f"# {d['model']} B={d['batch']} {d['config']}: {d['status']}")
    print(f"elapsed {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
