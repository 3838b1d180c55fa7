"""Compile levels on a Llama-3.2-1B-shaped model: cold compile seconds and CUDA-graph step time.

Configs (every one with CUDA graphs, so step times compare kernels, not Python):
  inductor        torch.compile(mode="reduce-overhead")        Inductor defaults
  inductor_ma     torch.compile(mode="max-autotune")           Triton GEMM templates tuned for every shape
  rocm_fused_l1   backend="rocm_fused", level 1 (+cudagraphs)  our rewrites, Inductor defaults
  rocm_fused_l2   backend="rocm_fused", level 2                our rewrites + max-autotune, ATen GEMMs for
                                                               M <= aten_gemm_max_m (default 32)
  rocm_fused_l2_nocdt  level 2 with inductor_config={"coordinate_descent_tuning": False}: M=1 GEMMs stay
                   GEMMs (reach the override -> cuBLAS) instead of Inductor's mul + sum reduction

Model: ``LlamaForCausalLM`` from a transformers ``LlamaConfig`` with Llama-3.2-1B's shape (hidden 2048,
16 layers, 32/8 heads, head_dim 64, MLP 8192, vocab 128256), random bf16 weights, SDPA. Decode bucket M =
batch size B, one new token per sequence, ``StaticCache(max_cache_len)`` at position ``--pos``; prefill =
one sequence of ``--prefill`` tokens. Each (config, bucket) is compiled from scratch (``torch._dynamo.reset()``,
``force_disable_caches``, a fresh Inductor autotune selector); "compile s" is the wall time of the first
call. Triton's own kernel cache lives in a temp dir made at start, so a kernel that repeats across runs
is built once (this favours later runs slightly; runs go in the order given by ``--configs``).

Budget: max-autotune costs ~80 s per bucket on the H200 (docs/gpu.md), so by default it runs on
``--autotune-buckets 8`` only (one decode bucket; prefill tuning is the same work level 2 does), and a run
is skipped (marked "budget") once ``--budget-s`` (default 480 s) would be exceeded. Defaults fit one device
call of < 9 minutes; widen with e.g. ``--buckets 1,2,4,8,16,32 --autotune-buckets 1,8,32`` over several calls.

Writes ``gemm_levels[_TAG].md`` and ``.csv`` to ``--out`` and prints the table last; ``--merge a.csv b.csv``
turns the CSVs of several device calls into one table (with a per-bucket summary).
``--tiny --device cpu`` is a smoke test of the script itself (2 layers, small dims, no CUDA graphs).
"""

from __future__ import annotations

import argparse
import csv
import os
import pathlib
import statistics
import sys
import tempfile
import time

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # benchmarks/: cli, hf_models, timing
import cli  # noqa: E402  (benchmarks/cli.py)
import hf_models  # noqa: E402  (benchmarks/hf_models.py: the model and step, shared with decode.py)
from timing import time_call  # noqa: E402  (benchmarks/timing.py)


def _private_caches() -> None:
    """Triton's and Inductor's caches in temp dirs of this run (both read their env var when used)."""
    os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="triton_gemm_levels_"))
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="inductor_gemm_levels_"))


CONFIGS = ("inductor", "rocm_fused_l1", "rocm_fused_l2", "rocm_fused_l2_nocdt", "inductor_ma")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default="benchmarks/results")
    p.add_argument("--buckets", default="1,8,32", help="decode batch sizes (GEMM M) for every config")
    p.add_argument("--prefill", type=int, default=512, help="prefill tokens (0 = none); not for inductor_ma")
    p.add_argument("--autotune-buckets", default="8", help="decode buckets that inductor_ma runs")
    p.add_argument("--autotune-prefill", action="store_true", help="also run inductor_ma on the prefill")
    p.add_argument("--nocdt-buckets", default="1", help="decode buckets that rocm_fused_l2_nocdt runs")
    p.add_argument("--tag", default="", help="suffix of the output files (gemm_levels_TAG.md/.csv)")
    p.add_argument("--merge", nargs="+", metavar="CSV", help="merge CSVs of earlier runs into one table and exit")
    p.add_argument("--configs", default=",".join(CONFIGS))
    cli.add_step_args(p, reps=50, rounds=3, budget_s=480.0, layers=16)
    p.add_argument("--max-cache-len", type=int, default=1024)
    return p.parse_args(argv)


def build_model(args):
    """``(model, config, dtype)``: the Llama-3.2-1B-shaped model of ``hf_models.py`` (tiny with ``--tiny``)."""
    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    model, cfg = hf_models.build_model("llama", args.device, dtype, tiny=args.tiny,
                                       layers=None if args.tiny else args.layers)
    return model, cfg, dtype


def make_inputs(model, cfg, dtype, args, batch: int, seq: int):
    """(step_fn, inputs) for one bucket: ``batch`` sequences of ``seq`` new tokens at ``--pos`` (or 0)."""
    pos0 = 0 if seq > 1 else min(args.pos, args.max_cache_len - 1)
    step, inputs, _cache = hf_models.decode_step(model, cfg, batch, seq, pos0, args.max_cache_len, args.device,
                                                 dtype)
    return step, inputs


def compile_fn(name: str, step, cuda: bool):
    graphs = cuda
    if name == "inductor":
        return torch.compile(step, mode="reduce-overhead" if graphs else None, fullgraph=True, dynamic=False)
    if name == "inductor_ma":
        return torch.compile(step, mode="max-autotune" if graphs else "max-autotune-no-cudagraphs",
                             fullgraph=True, dynamic=False)
    level = {"rocm_fused_l1": 1, "rocm_fused_l2": 2, "rocm_fused_l2_nocdt": 2}[name]
    opts = {"level": level, "cudagraphs": graphs}
    if name == "rocm_fused_l2_nocdt":
        opts["inductor_config"] = {"coordinate_descent_tuning": False}
    return torch.compile(step, backend="rocm_fused", options=opts, fullgraph=True, dynamic=False)


def _fresh_compile_state():
    torch._dynamo.reset()
    try:
        from torch._inductor import select_algorithm

        select_algorithm._ALGORITHM_SELECTOR_CACHE = None  # no in-memory autotune results across runs
    except Exception:
        pass


def time_steps(fn, inputs, args) -> list[float]:
    """Per-step microseconds, one value per round (``benchmarks/timing.py:time_call`` over ``reps`` steps)."""
    mark = getattr(torch.compiler, "cudagraph_mark_step_begin", lambda: None)

    def step():
        mark()
        fn(*inputs)

    return time_call(step, args.reps, args.rounds, args.device == "cuda")


def run_one(name, model, cfg, dtype, args, batch, seq):
    from torch._dynamo.utils import counters

    from rocm_inductor.report import clear_reports, reports

    _fresh_compile_state()
    clear_reports()
    step, inputs = make_inputs(model, cfg, dtype, args, batch, seq)
    fn = compile_fn(name, step, args.device == "cuda")
    tuned0 = counters["inductor"]["select_algorithm_autotune"]
    with torch._inductor.config.patch(force_disable_caches=True), torch.no_grad():
        if args.device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn(*inputs)
        if args.device == "cuda":
            torch.cuda.synchronize()
        compile_s = time.perf_counter() - t0
        tuned = counters["inductor"]["select_algorithm_autotune"] - tuned0
        us = time_steps(fn, inputs, args)
    gemms = [g for r in reports() for g in r.gemms]
    return dict(compile_s=compile_s, step_us=statistics.median(us), spread_us=max(us) - min(us),
                autotuned=tuned, aten_only=sum(g.aten_only for g in gemms), gemms_seen=len(gemms))


def plan(args) -> list[tuple[str, str, int, int]]:
    """(config, bucket label, batch, seq) in run order: per bucket, every config that runs it."""
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    unknown = sorted(set(configs) - set(CONFIGS))
    if unknown:
        raise SystemExit(f"unknown config(s) {unknown}; valid: {list(CONFIGS)}")
    only = {"inductor_ma": set(cli.ints(args.autotune_buckets)),
            "rocm_fused_l2_nocdt": set(cli.ints(args.nocdt_buckets))}
    runs = []
    for b in cli.ints(args.buckets):
        for c in configs:
            if c not in only or b in only[c]:
                runs.append((c, f"decode M={b}", b, 1))
    if args.prefill:
        for c in configs:
            if c not in only or (c == "inductor_ma" and args.autotune_prefill):
                runs.append((c, f"prefill M={args.prefill}", 1, args.prefill))
    return runs


def versions() -> str:
    import transformers
    import triton

    dev = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    return (f"torch {torch.__version__}, triton {triton.__version__}, transformers {transformers.__version__}, "
            f"{dev}")


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.merge:
        rows = []
        for path in args.merge:
            with open(path, newline="") as f:
                tag = pathlib.Path(path).stem.removeprefix("gemm_levels").lstrip("_")
                rows += [{**_typed(r), "run": r.get("run") or tag} for r in csv.DictReader(f)]
        header = next((r["versions"] for r in rows if r.get("versions")), "versions not recorded")
        write(rows, args, header=header)
        return 0
    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA/ROCm device; use --device cpu --tiny for a smoke test", file=sys.stderr)
        return 1
    _private_caches()
    start = time.perf_counter()
    model, cfg, dtype = build_model(args)
    rows = []
    for name, label, batch, seq in plan(args):
        spent = time.perf_counter() - start
        # H200, 16 layers (session 2): max-autotune ~95-120 s a bucket, level 2 ~40 s (M=1: ~90 s: the
        # M=1 GEMMs are reductions, coordinate-descent tuned), Inductor / level 1 ~25-35 s
        cost = {"inductor_ma": 120.0, "rocm_fused_l2": 95.0 if batch * seq == 1 else 60.0}.get(name, 40.0)
        if args.tiny:
            cost = 0.0
        row = dict(config=name, bucket=label)
        if spent + cost > args.budget_s:
            row.update(status="skipped (budget)")
        else:
            try:
                row.update(run_one(name, model, cfg, dtype, args, batch, seq), status="ok")
            except Exception as e:  # one failing config must not lose the others' numbers
                row.update(status=f"error: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
        rows.append(row)
        print(f"[{time.perf_counter() - start:6.0f}s] {name:<14} {label:<16} {row}", flush=True)
        write(rows, args, quiet=True)  # after every run: a call killed at its time limit keeps its rows
    write(rows, args)
    return 0


KEYS = ["run", "config", "bucket", "status", "compile_s", "step_us", "spread_us", "autotuned", "aten_only",
        "gemms_seen", "versions"]


def _typed(row: dict) -> dict:
    """A CSV row with its numbers as numbers again."""
    out = dict(row)
    for k in ("compile_s", "step_us", "spread_us"):
        out[k] = float(row[k]) if row.get(k) else None
    for k in ("autotuned", "aten_only", "gemms_seen"):
        out[k] = int(row[k]) if row.get(k) else ""
    return out


def summary(rows) -> list[str]:
    """Per bucket: step us / compile s of each config and level 2 against the others (markdown lines).

    A config run more than once on a bucket shows every run (``a; b``); its ratios use the mean.
    """
    by: dict[str, dict[str, list[dict]]] = {}
    for r in rows:
        if r.get("status") == "ok":
            by.setdefault(r["bucket"], {}).setdefault(r["config"], []).append(r)
    names = [c for c in CONFIGS if any(c in v for v in by.values())]
    head = "| bucket | " + " | ".join(names) + " | L2 vs max-autotune (step, compile) | L2 vs Inductor step |"
    lines = ["step us / cold compile s; ratios > 1 = level 2 faster (step: other us / L2 us; compile: "
             "other s / L2 s).", "", head, "|---" * (len(names) + 3) + "|"]
    mean = lambda runs, k: statistics.mean(r[k] for r in runs) if runs else None
    ratio = lambda a, b: f"{a / b:.2f}x" if a and b else "–"
    for bucket, cfgs in by.items():
        cells = ["; ".join(f"{r['step_us']:.0f} / {r['compile_s']:.1f}" for r in cfgs[c]) if c in cfgs else "–"
                 for c in names]
        l2, ma, ind = cfgs.get("rocm_fused_l2", []), cfgs.get("inductor_ma", []), cfgs.get("inductor", [])
        vs_ma = (f"{ratio(mean(ma, 'step_us'), mean(l2, 'step_us'))}, "
                 f"{ratio(mean(ma, 'compile_s'), mean(l2, 'compile_s'))}" if l2 and ma else "–")
        vs_ind = ratio(mean(ind, "step_us"), mean(l2, "step_us")) if l2 and ind else "–"
        lines.append(f"| {bucket} | " + " | ".join(cells) + f" | {vs_ma} | {vs_ind} |")
    return lines


def write(rows, args, header: str | None = None, quiet: bool = False) -> None:
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"gemm_levels_{args.tag}" if args.tag else "gemm_levels"
    header = header or versions()
    rows = [{**r, "run": r.get("run") or args.tag, "versions": header} for r in rows]
    with open(out / f"{stem}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=KEYS)
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k, "") for k in KEYS})
    fmt = lambda v, p: "" if v is None or v == "" else f"{v:.{p}f}"
    lines = [f"# GEMM levels ({header})", "", *summary(rows), "",
             f"layers={args.layers if not args.tiny else 2}, pos={args.pos}, max_cache_len={args.max_cache_len}, "
             f"reps={args.reps} x rounds={args.rounds}; step = median over rounds (spread = max - min); "
             "autotuned = GEMMs Inductor benchmarked (select_algorithm_autotune); aten_only = GEMMs the "
             "level-2 override kept on ATen.", "",
             "| run | bucket | config | compile s | step us | spread us | autotuned | aten_only | status |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['run']} | {r['bucket']} | {r['config']} | {fmt(r.get('compile_s'), 1)} | "
                     f"{fmt(r.get('step_us'), 1)} | {fmt(r.get('spread_us'), 1)} | {r.get('autotuned', '')} | "
                     f"{r.get('aten_only', '')} | {r['status']} |")
    text = "\n".join(lines) + "\n"
    (out / f"{stem}.md").write_text(text)
    if not quiet:
        print(text)


if __name__ == "__main__":
    sys.exit(main())
