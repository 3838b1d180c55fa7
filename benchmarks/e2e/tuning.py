"""Decided on the device: a level-2 compile from an empty decision store vs today's shipped policy (issue 30).

Models (``--models``, ``hf_models.py``): Llama-3.2-1B- and Qwen3-0.6B-shaped decode steps (random bf16 weights,
SDPA, ``StaticCache(--max-cache-len)``, one new token per sequence at ``--pos``), ``--layers`` layers for the step
times (default 8, so both models and three buckets fit one device call: every layer is identical, the per-layer
kernels and decisions are the 16/28-layer models'), B in ``--buckets``. ``--models qwen3_next`` adds the one
family whose layers carry the ``attn * sigmoid(gate)`` output gate (Qwen3-Next's full-attention layer in every layer,
a dense MLP), so the gate's level-2 decision is measured in a step.

Configs, each a cold compile (``torch._dynamo.reset()``, Inductor caches off) replayed in CUDA graphs:
  inductor          ``torch.compile(step, mode="reduce-overhead")``
  shipped           ``backend="rocm_fused"``, level 1 (the shipped policy and H200 entries), an empty own store
  tuned_from_empty  ``backend="rocm_fused"``, level 2, a fresh empty store (``ROCM_FUSED_TUNING_DIR``) and no
                    shipped entries (``ROCM_FUSED_TUNING_SHIPPED=0``): every candidate measured on this GPU
                    (a GPU without shipped entries sees exactly this), then compiled
Compile cost (``tuning_cost.csv``), ``--cost-model`` at B = ``--buckets``' first, ``--cost-layers`` layers
(default 16), shipped entries off, four more compiles (the tuning worker restarted first, so its start counts):
  level2_cold   level 2 from an empty store (measures)      level2_warm   level 2 with the store it filled
  level1_empty  level 1 with an empty store                 level1_warm   level 1 with that filled store
  compile_s_level2 = level2_warm; compile_s_level2_tuning = level2_cold - level2_warm;
  compile_s_level1_warm_store = level1_warm - level1_empty

Step time: median over ``--rounds`` rounds of ``--reps`` steps, CUDA events around replays queued behind a GPU
sleep (``timing.time_call(queued=True)``: the device's time, the host's per-call work out; ``host_us`` in the run
log is the same loop without the sleep, which Qwen3 B = 1's host path, near its GPU time, made noisy). Writes
``<out>/tuning.csv`` (``model,batch,config,step_us``) and ``<out>/tuning_cost.csv``
(``model,compile_s_level2,compile_s_level2_tuning,compile_s_level1_warm_store``), keeping the rows of models not
run this time, appends both to the long files (``run_log``: topics ``tuning`` and ``tuning_cost``, with compile
seconds, layers and the rewrites taken), and prints the tuner's decisions. Runs go in priority order (B = 1 of
each model, the cost compiles, then the larger buckets); one that would end past ``--budget-s`` is skipped and
said so.

    python benchmarks/e2e/tuning.py [--models llama,qwen3] [--buckets 1,8,32] [--layers 8] [--budget-s 500]
``--tiny --device cpu`` is the script's smoke test (2 layers, no CUDA graphs, nothing measured: no GPU).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import gc
import os
import pathlib
import statistics
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))  # benchmarks/e2e: decode
import decode  # noqa: E402  (sets fresh Inductor/Triton cache dirs, imports rocm_inductor)
import torch  # noqa: E402

import rocm_inductor  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # benchmarks/
import cli  # noqa: E402
import hf_models  # noqa: E402
import run_log  # noqa: E402
from timing import time_call  # noqa: E402

CONFIGS = ("inductor", "shipped", "tuned_from_empty")
STEP_COLUMNS = ("model", "batch", "config", "step_us")
COST_COLUMNS = ("model", "compile_s_level2", "compile_s_level2_tuning", "compile_s_level1_warm_store")
#: First-guess seconds per cold compile of a 16-layer step on the H200, scaled by layers (level 1 / Inductor
#: 15-24 s: benchmarks/results/runs/decode_step.csv, compile_s; level 2 29 s: runs/tuning_cost.csv), plus the
#: tuning itself, which does not scale with layers (identical layers are measured once): at most 90 s by issue
#: 30's bound, guessed at 60.
GUESS_S = {"inductor": 20.0, "shipped": 22.0, "tuned_from_empty": 30.0, "level2_cold": 30.0, "level2_warm": 30.0,
           "level1_empty": 22.0, "level1_warm": 22.0}
TUNING_GUESS_S = 60.0
#: Configs that measure (level 2 from an empty store), and the cost configs (with the level each compiles at).
MEASURING = ("tuned_from_empty", "level2_cold")
LEVEL = {"inductor": 0, "shipped": 1, "tuned_from_empty": 2, "level2_cold": 2, "level2_warm": 2, "level1_empty": 1,
         "level1_warm": 1}
COST = ("level2_cold", "level2_warm", "level1_empty", "level1_warm")


def parse_args(argv=None) -> argparse.Namespace:
    """Command line (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default="llama,qwen3", help="families of hf_models.py")
    p.add_argument("--buckets", default="1,8,32", help="decode batch sizes")
    cli.add_step_args(p, reps=30, rounds=7, budget_s=500.0, layers=8)
    p.add_argument("--configs", default=",".join(CONFIGS),
                   help="step configs to run (a subset re-measures those rows; the file keeps the others)")
    p.add_argument("--cost-model", default="llama", help="the model of tuning_cost.csv ('' skips the cost runs)")
    p.add_argument("--cost-layers", type=int, default=16, help="layers of the cost compiles")
    p.add_argument("--max-cache-len", type=int, default=1024)
    p.add_argument("--out", default="benchmarks/results")
    p.add_argument("--no-log", action="store_true", help="do not append to benchmarks/results/runs/")
    p.add_argument("--report", action="store_true", help="print each measuring compile's match report")
    p.add_argument("--profile", action="store_true",
                   help="per step config: print the top GPU kernels of a replay (torch.profiler) and the kernel config "
                        "every merged GEMM launch ran (shape and config, recorded at capture)")
    return p.parse_args(argv)


def _compiled(config: str, step, graphs: bool, store: str):
    """``step`` compiled as ``config`` reading the decision store at ``store``; shipped entries only for the
    ``shipped`` config (``ROCM_FUSED_TUNING_SHIPPED``)."""
    os.environ["ROCM_FUSED_TUNING_DIR"] = store
    os.environ["ROCM_FUSED_TUNING_SHIPPED"] = "1" if config == "shipped" else "0"
    if config == "inductor":
        return torch.compile(step, mode="reduce-overhead" if graphs else None, fullgraph=True, dynamic=False)
    return torch.compile(step, backend="rocm_fused", options={"level": LEVEL[config], "cudagraphs": graphs},
                         fullgraph=True, dynamic=False)


def run_one(config: str, model, cfg, batch: int, args, store: str) -> dict:
    """Cold-compile ``config`` for one bucket, time its step; returns compile_s, step_us, rewrites."""
    from rocm_inductor.tuning import tuner, worker

    cuda = args.device == "cuda"
    dtype = next(model.parameters()).dtype
    decode._fresh_compile_state()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    if config == "level2_cold":
        worker.reset()  # a cold level-2 compile starts its tuning worker: its start is part of the cost
    worker.client().results.clear()  # measured windows are not reused across runs: each starts from its store
    tuner.TUNER.reset()
    step, inputs, _cache = hf_models.decode_step(model, cfg, batch, 1, args.pos, args.max_cache_len, args.device,
                                                 dtype)
    fn = _compiled(config, step, cuda, store)
    rocm_inductor.clear_reports()
    kernel_us = None
    launches = _record_gemm_launches() if args.profile else contextlib.nullcontext([])
    with torch.no_grad(), launches as launched:
        with torch._inductor.config.patch(force_disable_caches=True):
            decode._sync(cuda)
            t0 = time.perf_counter()
            fn(*inputs)
            decode._sync(cuda)
            compile_s = time.perf_counter() - t0
        for _ in range(2):  # the CUDA-graph warm-up run and capture launch the kernels from Python
            fn(*inputs)

        def call():
            decode._mark()
            return fn(*inputs)

        gc.collect()  # the compile's garbage is not collected inside a timing round
        host_us = time_call(call, args.reps, args.rounds, cuda)
        us = time_call(call, args.reps, args.rounds, cuda, queued=True)
        if args.profile and cuda:
            from decode_step import breakdown_text, profile_kernels

            print(breakdown_text(f"{cfg.model_type} B={batch} {config}", profile_kernels(call, cuda)[1], top=24))
            seq = _kernel_sequence(call)
            kernel_us = sum(k_us for _, k_us in seq)
            print(f"kernels of one {config} step in order (us; {kernel_us:.1f} in all):")
            for name, k_us in seq:
                print(f"  {k_us:7.1f}  {name[:100]}")
    for text in sorted(set(launched)):
        print(f"  merged GEMM launch {config} B={batch}: {text}", flush=True)
    row = dict(compile_s=round(compile_s, 1), step_us=round(statistics.median(us), 1),
               spread_us=round(max(us) - min(us), 1), host_us=round(statistics.median(host_us), 1),
               measured=len(tuner.TUNER.measured))
    if kernel_us is not None:
        row["kernel_us"] = round(kernel_us, 1)  # the kernels' own time in one replay (CUPTI), gaps out
    if config != "inductor":
        row["rewrites"] = decode.rewrites_summary(rocm_inductor.reports())
    if config in MEASURING and (tuner.TUNER.measured or tuner.TUNER.skipped):
        from rocm_inductor.tuning.cli import table

        print(table(tuner.TUNER.measured, tuner.TUNER.skipped), flush=True)
    if config in MEASURING and args.report:
        for rep in rocm_inductor.reports():
            print(rep, flush=True)
    return row


def _kernel_sequence(call) -> list[tuple[str, float]]:
    """(kernel name, CUPTI us) of one ``call()`` in launch order, memcpy/memset left out (``--profile``)."""
    from torch.profiler import ProfilerActivity, profile

    call()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        call()
        torch.cuda.synchronize()
    ks = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
          and not e.name.lower().startswith(("memcpy", "memset"))]
    ks.sort(key=lambda e: e.time_range.start)
    return [(e.name, e.time_range.end - e.time_range.start) for e in ks]


@contextlib.contextmanager
def _record_gemm_launches():
    """Record ``"M x K -> Ns: config"`` of every merged GEMM launch from Python inside the block (``--profile``)."""
    from rocm_inductor.providers.triton import gemm_merge
    from rocm_inductor.tuning.worker import config_label

    seen: list[str] = []
    real = gemm_merge.launch

    def spy(x, weights, biases, cfg, *a, **k):
        norm = " +norm" if k.get("norm") is not None or len(a) > 1 and a[1] is not None else ""
        seen.append(f"{tuple(x.shape)} -> {[w.shape[0] for w in weights]}{norm}: "
                    f"{config_label('triton', dataclasses.asdict(cfg))}")
        return real(x, weights, biases, cfg, *a, **k)

    gemm_merge.launch = spy
    try:
        yield seen
    finally:
        gemm_merge.launch = real


def plan(models: list[str], buckets: list[int], cost_model: str,
         configs: tuple[str, ...] = CONFIGS) -> list[tuple[str, int, str]]:
    """(model, batch, config) in priority order: B = 1 (the first bucket) of each model, the cost compiles of
    ``cost_model``, then the larger buckets; step configs only those of ``configs``."""
    configs = tuple(c for c in CONFIGS if c in configs)
    runs = [(m, buckets[0], c) for m in models for c in configs]
    if cost_model:
        runs += [(cost_model, buckets[0], c) for c in COST]
    runs += [(m, b, c) for b in buckets[1:] for m in models for c in configs]
    return runs


def _merge(path: pathlib.Path, columns: tuple[str, ...], rows: list[dict], key: tuple[str, ...]) -> None:
    """Write ``rows`` to ``path`` under exactly ``columns``, keeping the file's rows whose ``key`` columns
    (``("model",)``, or ``("model", "batch", "config")``) no new row has."""
    new = {tuple(str(r[k]) for k in key) for r in rows}
    old = []
    if path.exists():
        with open(path, newline="") as f:
            old = [r for r in csv.DictReader(f) if tuple(r.get(k) for k in key) not in new]
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, list(columns), lineterminator="\n", extrasaction="ignore")
        w.writeheader()
        w.writerows([*old, *rows])


def _write(args, models: list[str], buckets: list[int], steps: list[dict], compile_s: dict) -> list[dict]:
    """Write ``tuning.csv`` and (once its four compiles ran) ``tuning_cost.csv`` under ``args.out``; returns the
    cost rows."""
    costs = []
    c = {k: compile_s.get((args.cost_model, buckets[0], k)) for k in COST}
    if args.cost_model and None not in c.values():
        costs.append(dict(model=args.cost_model, compile_s_level2=c["level2_warm"],
                          compile_s_level2_tuning=round(c["level2_cold"] - c["level2_warm"], 1),
                          compile_s_level1_warm_store=round(c["level1_warm"] - c["level1_empty"], 1)))
    out = pathlib.Path(args.out)
    _merge(out / "tuning.csv", STEP_COLUMNS, steps, ("model", "batch", "config"))
    if costs:
        _merge(out / "tuning_cost.csv", COST_COLUMNS, costs, ("model",))
    return costs


def main(argv=None) -> int:
    """Run the benchmark; returns the exit code."""
    args = parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA/ROCm device; use --device cpu --tiny for a smoke test", file=sys.stderr)
        return 1
    cuda = args.device == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    if args.tiny:
        args.pos, args.max_cache_len = min(args.pos, 16), min(args.max_cache_len, 32)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    buckets = cli.ints(args.buckets)
    start = time.perf_counter()
    decode.warm_flashinfer(cuda)
    steps, results, built, stores, compile_s, observed = [], [], {}, {}, {}, {}
    configs = tuple(c.strip() for c in args.configs.split(",") if c.strip())
    if not set(configs) <= set(CONFIGS):
        print(f"unknown --configs {sorted(set(configs) - set(CONFIGS))}; known: {', '.join(CONFIGS)}",
              file=sys.stderr)
        return 2
    for name, batch, config in plan(models, buckets, args.cost_model, configs):
        layers = args.cost_layers if config in COST else args.layers
        if (name, layers) not in built:
            built.clear()  # one model on the GPU at a time
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            built[(name, layers)] = hf_models.build_model(name, args.device, dtype, args.tiny, layers)
        model, cfg = built[(name, layers)]
        guess = 0.0 if args.tiny else observed.get(config, GUESS_S[config] * cfg.num_hidden_layers / 16
                                                   + (TUNING_GUESS_S if config in MEASURING else 0.0))
        spent = time.perf_counter() - start
        if spent + guess > args.budget_s:
            print(f"skipped {name} B={batch} {config} (budget: {spent:.0f} s spent + ~{guess:.0f} s > "
                  f"{args.budget_s:.0f} s)", flush=True)
            continue
        if config in ("level2_warm", "level1_warm"):  # the store level2_cold filled
            store = stores.get((name, batch, "level2_cold"))
            if store is None:
                continue
        else:
            store = tempfile.mkdtemp(prefix=f"tuning_{config}_")  # empty
            stores[(name, batch, config)] = store
        t0 = time.perf_counter()
        try:
            row = run_one(config, model, cfg, batch, args, store)
        except Exception as e:  # one failing config must not lose the others' numbers
            print(f"{name} B={batch} {config}: error {type(e).__name__}: {str(e)[:200]}", flush=True)
            continue
        compile_s[(name, batch, config)] = row["compile_s"]
        observed[config] = time.perf_counter() - t0  # the next run of this config is guessed from this one
        if config in CONFIGS:
            steps.append(dict(model=name, batch=batch, config=config, step_us=row["step_us"]))
        results.append(dict(model=name, batch=batch, config=config, layers=cfg.num_hidden_layers,
                            max_cache_len=args.max_cache_len, timing="queued" if cuda else "wall", **row))
        print(f"[{time.perf_counter() - start:6.0f}s] {name} B={batch} {config} ({time.perf_counter() - t0:.0f} s): "
              f"{row}", flush=True)
        costs = _write(args, models, buckets, steps, compile_s)  # after every run: a timeout keeps what ran
    costs = _write(args, models, buckets, steps, compile_s)
    if not args.no_log and not args.tiny:
        script = "benchmarks/e2e/tuning.py " + " ".join(argv if argv is not None else sys.argv[1:])
        what = (f"decode step ({args.layers} layers; cost compiles {args.cost_layers}): inductor, shipped level 1, "
                "level 2 tuned from an empty store without shipped entries")
        run_id = run_log.append_run("tuning", results, script=script, what=what)
        if costs:
            run_log.append_run("tuning_cost", costs, script=script, run_id=run_id,
                               what="compile seconds: level 2, its tuning, a warm store at level 1")
    for r in steps:
        print(",".join(str(r[c]) for c in STEP_COLUMNS))
    for r in costs:
        print(",".join(str(r[c]) for c in COST_COLUMNS))
    print(f"elapsed {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
