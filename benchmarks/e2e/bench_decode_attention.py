"""Whole decode step with the attention pass (issue 13): Inductor vs rocm_fused over StaticCache lengths.

Models (``--models``, ``hf_models.py``): Llama-3.2-1B, Qwen3-0.6B and gemma-2b shapes, random bf16 weights,
SDPA, one new token per sequence at ``--pos`` (512) in a ``StaticCache`` of each ``--max-cache-len``
(1024, 4096), batch in ``--batches`` (1, 8, 32); no sampler. Configs, in one process:
  inductor     ``torch.compile(step, mode="reduce-overhead")`` (CUDA graphs)
  rocm_fused   ``backend="rocm_fused", options={"level": 1, "cudagraphs": True}`` (every default pass,
               the attention pass included; ``--provider`` forces one provider for every op,
               ``--attention-provider`` only decode_attention's, e.g. ``triton``)
Step time: median over ``--rounds`` rounds of ``--reps`` replays, CUDA events (``timing.time_call``).

Every rocm_fused compile must rewrite every layer's attention (``decode_attention`` matches in the report =
layers); the row says ``attention=<n>/<layers>[provider]`` and the near-miss reasons when not, and the script
exits with status 2 at the end if any rocm_fused row missed a layer (after writing everything). Each config's
logits are compared with the eager step's (``logit_err`` = max |diff| / max |eager logit|).

Budget: runs go in priority order (Llama at 1024 for B = 1, 8, 32; Llama at 4096; then Qwen3 and gemma at
1024, then at 4096; inductor before rocm_fused per bucket) and a run that would end past ``--budget-s``
(estimated from the last compile of that model) is skipped and listed.

    python benchmarks/e2e/bench_decode_attention.py [--models llama,qwen3,gemma] [--max-cache-len 1024,4096]
        [--batches 1,8,32] [--budget-s 470] [--out benchmarks/results]
Writes ``decode_attention.csv`` (columns exactly ``model,max_cache_len,batch,config,step_us``) and
``decode_attention.md`` (the same rows with vs_inductor, the attention rewrites, logit_err, status) under
``--out``, and prints the table last. ``--tiny --device cpu`` is the smoke test (2-layer models, no CUDA
graphs; ``tests/test_decode_attention_bench.py``).
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

os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="triton_dattn_"))
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="inductor_dattn_"))

import torch  # noqa: E402

import rocm_inductor  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # benchmarks/: cli, hf_models, timing
import cli  # noqa: E402  (benchmarks/cli.py)
import hf_models  # noqa: E402  (benchmarks/hf_models.py)
from timing import time_call, versions  # noqa: E402  (benchmarks/timing.py)

CONFIGS = ("inductor", "rocm_fused")
CSV_COLUMNS = ("model", "max_cache_len", "batch", "config", "step_us")
MD_COLUMNS = CSV_COLUMNS + ("vs_inductor", "attention", "logit_err", "compile_s", "status")
#: Seconds one compile + timing of a 16-layer model costs on the H200 before anything is measured (Inductor
#: compiles the Llama-3.2-1B decode step in ~20-25 s, benchmarks/RESULTS.md); scaled by the layer count.
FIRST_GUESS_S = 30.0

_mark = getattr(torch.compiler, "cudagraph_mark_step_begin", lambda: None)


def parse_args(argv=None) -> argparse.Namespace:
    """Command line (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default="llama,qwen3,gemma", help=f"families: {sorted(hf_models.FAMILIES)}")
    p.add_argument("--max-cache-len", default="1024,4096", help="StaticCache lengths")
    p.add_argument("--batches", default="1,8,32")
    cli.add_step_args(p, reps=20, rounds=5, budget_s=470.0)
    p.add_argument("--configs", default=",".join(CONFIGS))
    p.add_argument("--provider", default=None, help="force a rocm_fused provider (default: the platform's)")
    p.add_argument("--attention-provider", default=None,
                   help="force only decode_attention's provider (options providers={'decode_attention': ...})")
    p.add_argument("--out", default="benchmarks/results")
    return p.parse_args(argv)


def plan(args) -> list[tuple[str, int, int, str]]:
    """(model, max_cache_len, batch, config) in priority order: the first model at the first cache length,
    the first model at the others, then every other model at each cache length in turn."""
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    lens, batches = cli.ints(args.max_cache_len), cli.ints(args.batches)
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    unknown = sorted(set(configs) - set(CONFIGS) | set(models) - set(hf_models.FAMILIES))
    if unknown:
        raise SystemExit(f"unknown config(s)/model(s) {unknown}; configs {list(CONFIGS)}, "
                         f"models {sorted(hf_models.FAMILIES)}")
    configs = [c for c in CONFIGS if c in configs]
    order = [(models[0], n) for n in lens] + [(m, n) for n in lens for m in models[1:]]
    return [(m, n, b, c) for m, n in order for b in batches for c in configs]


def compile_step(config: str, step, cuda: bool, provider: str | None, attention_provider: str | None = None):
    """``step`` compiled as ``config`` with CUDA graphs when ``cuda`` (``provider`` forces every op's provider,
    ``attention_provider`` only decode_attention's)."""
    if config == "inductor":
        return torch.compile(step, mode="reduce-overhead" if cuda else None, fullgraph=True, dynamic=False)
    opts = {"level": 1, "cudagraphs": cuda}
    if provider:
        opts["provider"] = provider
    if attention_provider:
        opts["providers"] = {"decode_attention": attention_provider}
    return torch.compile(step, backend="rocm_fused", options=opts, fullgraph=True, dynamic=False)


def attention_summary(report, layers: int) -> tuple[str, bool]:
    """``"16/16[triton]"`` from the compile's reports and whether every layer was rewritten (one graph: the
    count over all graphs must equal the layer count); near-miss reasons appended when not."""
    matches = [m for m in report.matches if m.op == "decode_attention"]
    provs = sorted({m.provider for m in matches})
    text = f"{len(matches)}/{layers}" + (f"[{','.join(provs)}]" if provs else "")
    ok = len(matches) == layers and len(report) == 1
    if not ok:
        reasons = sorted({n.reason for n in report.near_misses if n.pass_name == "attention"})
        text += f" ({len(report)} graph(s))" + ("; near-miss: " + " | ".join(reasons)[:300] if reasons else "")
    return text, ok


def run_one(config: str, step, inputs, ref: torch.Tensor, cfg, args, cuda: bool) -> dict:
    """Compile ``step`` as ``config``, check the rewrites, compare with eager, time it."""
    row: dict = {}
    torch._dynamo.reset()
    rocm_inductor.clear_reports()
    fn = compile_step(config, step, cuda, args.provider, args.attention_provider)
    with torch.no_grad():
        with torch._inductor.config.patch(force_disable_caches=True):
            t0 = time.perf_counter()
            _mark()
            out = fn(*inputs)
            if cuda:
                torch.cuda.synchronize()
            row["compile_s"] = round(time.perf_counter() - t0, 1)
        out = out.float()
        row["logit_err"] = float(f"{float((out - ref).abs().max() / ref.abs().max().clamp_min(1e-30)):.3g}")
        if config == "rocm_fused":
            row["attention"], row["_ok"] = attention_summary(rocm_inductor.reports(), cfg.num_hidden_layers)

        def call():
            _mark()
            return fn(*inputs)

        us = time_call(call, args.reps, args.rounds, cuda)
    row["step_us"] = round(statistics.median(us), 1)
    return row


def write(rows: list[dict], out: str, title: str, extra: list[str]) -> str:
    """Write the CSV (exact columns) and the markdown table; returns the table text."""
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "decode_attention.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows(r for r in rows if r.get("step_us") not in (None, ""))
    ind = {(r["model"], r["max_cache_len"], r["batch"]): r.get("step_us") for r in rows if r["config"] == "inductor"}
    lines = ["| " + " | ".join(MD_COLUMNS) + " |", "|" + "---|" * len(MD_COLUMNS)]
    for r in rows:
        r = dict(r)
        base = ind.get((r["model"], r["max_cache_len"], r["batch"]))
        if base and r.get("step_us"):
            r["vs_inductor"] = round(base / r["step_us"], 3)
        lines.append("| " + " | ".join(str(r.get(c, "")) for c in MD_COLUMNS) + " |")
    text = "\n".join([*lines, *extra]) + "\n"
    with open(os.path.join(out, "decode_attention.md"), "w") as f:
        f.write(f"# {title}\n\n{text}")
    return text


def main(argv=None) -> int:
    """Run the benchmark; returns 0, 1 (no GPU) or 2 (a rocm_fused compile missed a layer's attention)."""
    args = parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA/ROCm device; use --device cpu --tiny for a smoke test", file=sys.stderr)
        return 1
    warnings.filterwarnings("ignore", message=".*past_key_values.*deprecated")
    cuda = args.device == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    if args.tiny:
        args.pos = min(args.pos, 16)
    runs = plan(args)
    start = time.perf_counter()
    rows, models, est, skipped = [], {}, {}, []
    title = f"Decode step with the attention pass ({versions()})"
    state = None  # (model, max_cache_len, batch) -> step, inputs, eager logits
    for model_name, max_len, batch, config in runs:
        spent = time.perf_counter() - start
        layers = args.layers or hf_models.FAMILIES[model_name].full["num_hidden_layers"]
        guess = 0.0 if args.tiny else est.get(model_name, FIRST_GUESS_S * layers / 16)
        row = dict(model=model_name, max_cache_len=max_len, batch=batch, config=config)
        if spent + guess > args.budget_s:
            row["status"] = f"skipped (budget: {spent:.0f} s + ~{guess:.0f} s > {args.budget_s:.0f} s)"
            skipped.append(row)
            rows.append(row)
            continue
        key = (model_name, max_len, batch)
        try:
            if model_name not in models:
                models.clear()
                state = None
                gc.collect()
                if cuda:
                    torch.cuda.empty_cache()
                models[model_name] = hf_models.build_model(model_name, args.device, dtype, args.tiny, args.layers)
            model, cfg = models[model_name]
            if state is None or state[0] != key:
                state = None
                gc.collect()
                if cuda:
                    torch.cuda.empty_cache()
                if args.pos + 1 > max_len:
                    raise ValueError(f"pos {args.pos} does not fit max_cache_len {max_len}")
                step, inputs, cache = hf_models.decode_step(model, cfg, batch, 1, args.pos, max_len, args.device,
                                                            dtype)
                with torch.no_grad():
                    ref = step(*inputs).float()
                state = (key, step, inputs, cache, ref)
            _, step, inputs, _, ref = state
            t0 = time.perf_counter()
            row.update(run_one(config, step, inputs, ref, cfg, args, cuda))
            est[model_name] = time.perf_counter() - t0
            row["status"] = "ok" if row.pop("_ok", True) else "ATTENTION NOT REWRITTEN IN EVERY LAYER"
        except Exception as e:  # one failing run must not lose the others' numbers
            msg = str(e).strip().splitlines()
            row["status"] = f"error: {type(e).__name__}: {(msg[0] if msg else '')[:160]}"
        rows.append(row)
        print(f"[{time.perf_counter() - start:6.0f}s] {model_name:<6} L={max_len:<5} B={batch:<3} {config:<10} "
              f"{ {k: v for k, v in row.items() if k not in ('model', 'max_cache_len', 'batch', 'config')} }",
              flush=True)
        write(rows, args.out, title, [])
    extra = ["", f"pos={args.pos} (valid slots pos + 1), bf16 on GPU / fp32 on CPU, reps={args.reps} x "
             f"rounds={args.rounds}; vs_inductor = Inductor us / this us (> 1 = faster); attention = "
             "decode_attention rewrites / layers [provider]; logit_err = max |logit - eager| / max |eager|; "
             f"{len(skipped)} run(s) skipped by the budget; elapsed {time.perf_counter() - start:.0f} s."]
    text = write(rows, args.out, title, extra)
    print(f"# {title}\n\n{text}")
    missed = [r for r in rows if r["config"] == "rocm_fused" and r.get("status", "").startswith("ATTENTION")]
    if missed:
        print(f"FAIL: {len(missed)} rocm_fused run(s) did not rewrite every layer's attention", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
