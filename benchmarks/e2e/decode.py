"""End-to-end decode/prefill benchmark: eager vs Inductor vs rocm_fused levels 1 and 2 on HF models (issue 8).

Models (``--models``, see ``hf_models.py``): Llama-3.2-1B, Qwen3-0.6B and gemma-2b shapes, random bf16 weights,
SDPA, ``StaticCache(--max-cache-len)``. Buckets: decode with B in ``--buckets`` (one new token per sequence at
position ``--pos``) and one sequence of ``--prefill`` tokens at position 0.

Configs (``--configs``; every one replays CUDA graphs on the GPU, so step times compare kernels, not Python):
  eager           the HF step captured in one ``torch.cuda.CUDAGraph`` (an eager loop, marked, if capture fails)
  inductor        ``torch.compile(step, mode="reduce-overhead")``
  rocm_fused_l1   ``backend="rocm_fused", options={"level": 1, "cudagraphs": True}``
  rocm_fused_l2   ``backend="rocm_fused", options={"level": 2}`` (max-autotune, ATen GEMMs for small M)
Inductor always runs (the ratios divide Inductor's time by each config's, in the same process: > 1 = faster).

Per (model, bucket, config): cold compile seconds (``torch._dynamo.reset()``, caches off, first call), step
time (median over ``--rounds`` rounds of ``--reps`` steps, CUDA events; spread = max - min), decode step +
HF top-k/top-p sampler (T=0.7, k=50, p=0.9, ``tests/sampling_spellings.py``'s ``hf_sampler``) compiled with
the same backend, or the eager sampler in its own CUDA graph when that compile crashes (the crash is
reported), peak memory (``torch.cuda.max_memory_allocated``, weights included), what the compile rewrote
(``rewrites``: op[provider] x count, from the match report), and correctness next to eager on a zeroed cache:
``argmax_equal``, the argmax agreement over ``--greedy-steps`` steps x B rows with every config fed eager's
greedy tokens (teacher forcing), ``greedy_equal``, the number of leading free-running greedy steps whose tokens
equal eager's in every row, ``logit_err``, the largest max |logit diff| / max |eager logit| over those steps
(``logits_ok``: <= ``--logit-tol``), and ``top2_gap``, eager's smallest top-1/top-2 logit gap. Random bf16
weights give near-flat logits over a large vocabulary, so exact ties (gap 0) are common and a free-running
trace diverges at the first tie for any compiler (Inductor too); teacher forcing keeps one flip local. For
prefill: argmax agreement over all positions. Correctness is reported, never asserted.

Budget: runs go in priority order (per decode bucket eager, inductor, level 1; then the prefill; then level 2,
which compiles 2.5-3x longer) and a run whose estimated cost (first guess scaled by layer count, then the
last measured run of that config and bucket kind) would pass ``--budget-s`` is skipped and marked so.

    python benchmarks/e2e/decode.py --models llama [--buckets 1,8,32] [--prefill 512] [--out benchmarks/results]
    python benchmarks/e2e/decode.py --chart benchmarks/results/decode_*.csv   # one chart from several runs
Writes ``decode_<models>.csv|md|png`` under ``--out`` and prints the table last. ``--tiny --device cpu`` is
the smoke test of the script itself (2 layers, no CUDA graphs; ``tests/test_decode_bench.py``).
"""

from __future__ import annotations

import argparse
import csv
import gc
import importlib.util
import os
import pathlib
import statistics
import sys
import tempfile
import time
import warnings

os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="triton_decode_"))
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="inductor_decode_"))

import torch  # noqa: E402

import rocm_inductor  # noqa: E402,F401  (registers the custom ops; reports of what each compile rewrote)

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # benchmarks/: cli, hf_models, timing
import cli  # noqa: E402  (benchmarks/cli.py)
import hf_models  # noqa: E402  (benchmarks/hf_models.py)
from timing import capture, time_call, versions, write_results  # noqa: E402  (benchmarks/timing.py)

CONFIGS = ("eager", "inductor", "rocm_fused_l1", "rocm_fused_l2")
T, TOP_K, TOP_P = 0.7, 50, 0.9
COLUMNS = ("model", "bucket", "config", "status", "compile_s", "step_us", "spread_us", "vs_inductor",
           "sample_step_us", "sample_vs_inductor", "sampler", "sampler_compile_s", "peak_mem_gib",
           "argmax_equal", "greedy_equal", "logit_err", "logits_ok", "top2_gap", "rewrites")


def parse_args(argv=None) -> argparse.Namespace:
    """Command line (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default="llama,qwen3,gemma", help=f"families: {sorted(hf_models.FAMILIES)}")
    p.add_argument("--buckets", default="1,8,32", help="decode batch sizes")
    p.add_argument("--prefill", type=int, default=512, help="prefill tokens (0 = no prefill bucket)")
    p.add_argument("--configs", default=",".join(CONFIGS), help="inductor is always added")
    cli.add_step_args(p, reps=20, rounds=5, budget_s=480.0)
    p.add_argument("--greedy-steps", type=int, default=16)
    p.add_argument("--logit-tol", type=float, default=0.05, help="max |diff| / max |eager logit| for logits_ok")
    p.add_argument("--no-sampler", action="store_true", help="skip the decode step + sampler timing")
    p.add_argument("--provider", default=None, help="force a rocm_fused provider (default: the platform's)")
    p.add_argument("--max-cache-len", type=int, default=1024)
    p.add_argument("--out", default="benchmarks/results")
    p.add_argument("--chart", nargs="+", metavar="CSV", help="only draw one chart from these CSVs and exit")
    return p.parse_args(argv)


def load_hf_sampler():
    """``hf_sampler`` from ``tests/sampling_spellings.py``, loaded by path (``tests`` is not a package)."""
    path = pathlib.Path(__file__).resolve().parents[2] / "tests" / "sampling_spellings.py"
    spec = importlib.util.spec_from_file_location("_decode_sampling_spellings", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.hf_sampler


# ---------------------------------------------------------------------------------------------- compiling


def _fresh_compile_state() -> None:
    torch._dynamo.reset()
    try:
        from torch._inductor import select_algorithm

        select_algorithm._ALGORITHM_SELECTOR_CACHE = None  # no in-memory autotune results across runs
    except Exception:
        pass


def compile_fn(name: str, fn, graphs: bool, provider: str | None, fullgraph: bool = True):
    """``fn`` compiled as config ``name`` (not ``eager``), with CUDA graphs when ``graphs``."""
    if name == "inductor":
        return torch.compile(fn, mode="reduce-overhead" if graphs else None, fullgraph=fullgraph, dynamic=False)
    opts = {"level": {"rocm_fused_l1": 1, "rocm_fused_l2": 2}[name], "cudagraphs": graphs}
    if provider:
        opts["provider"] = provider
    return torch.compile(fn, backend="rocm_fused", options=opts, fullgraph=fullgraph, dynamic=False)


def _sync(cuda: bool) -> None:
    if cuda:
        torch.cuda.synchronize()


_mark = getattr(torch.compiler, "cudagraph_mark_step_begin", lambda: None)


# ---------------------------------------------------------------------------------------------- correctness


def greedy_trace(call, inputs, cache, steps: int, decode: bool, forced: torch.Tensor | None = None) -> dict:
    """Run ``call(ids, position_ids, cache_position)`` greedily from a zeroed cache.

    Decode: ``steps`` steps feeding back the argmax, or the tokens ``forced`` (steps, B) when given (teacher
    forcing: every config then sees eager's inputs, so one near-tie flip does not change every later step);
    returns the argmax tokens (steps, B) and every step's float32 last-position logits (steps, B, V).
    Prefill: one call; the argmax at every position (1, S) and the logits (1, S, V)."""
    ids, pos_ids, cache_pos = inputs
    cache.reset()
    if not decode:
        _mark()
        logits = call(ids, pos_ids, cache_pos).float().clone()
        return dict(tokens=logits.argmax(-1), logits=logits[:1])
    tokens, logits_all = [], []
    for i in range(steps):
        _mark()
        logits = call(ids, pos_ids + i, cache_pos + i)[:, -1].float().clone()
        logits_all.append(logits)
        nxt = logits.argmax(-1)
        tokens.append(nxt)
        ids = (nxt if forced is None else forced[i])[:, None]
    return dict(tokens=torch.stack(tokens), logits=torch.stack(logits_all))


def compare(trace: dict, free: dict | None, ref: dict, decode: bool, tol: float) -> dict:
    """Correctness columns of a config's teacher-forced ``trace`` (and free-running ``free``) against the
    eager ``ref`` (see the module docstring)."""
    diff = (trace["logits"] - ref["logits"]).abs().amax(-1)  # (steps, B) max |diff| per position
    scale = ref["logits"].abs().amax(-1).clamp_min(1e-30)
    err = float((diff / scale).max())
    top2 = ref["logits"].topk(2, dim=-1).values
    gap = float((top2[..., 0] - top2[..., 1]).min())
    agree = int((trace["tokens"] == ref["tokens"]).sum())
    out = dict(logit_err=float(f"{err:.3g}"), logits_ok=err <= tol, top2_gap=float(f"{gap:.3g}"),
               argmax_equal=f"{agree}/{ref['tokens'].numel()}" + ("" if decode else " pos"))
    if decode and free is not None:
        same = (free["tokens"] == ref["tokens"]).all(dim=1).tolist()
        out["greedy_equal"] = f"{next((i for i, s in enumerate(same) if not s), len(same))}/{len(same)}"
    return out


# ---------------------------------------------------------------------------------------------- one run


def run_one(name, model, cfg, args, batch, seq, sampler, ref) -> dict:
    """Compile, time, sample-time and check one (config, bucket); returns the row's measured columns."""
    cuda = args.device == "cuda"
    dtype = next(model.parameters()).dtype
    decode = seq == 1
    pos = args.pos if decode else 0
    row = {}
    _fresh_compile_state()
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    step, inputs, cache = hf_models.decode_step(model, cfg, batch, seq, pos, args.max_cache_len, args.device,
                                                dtype)
    notes = []
    with torch.no_grad():
        if name == "eager":
            fn = step
            call, why = capture(lambda: step(*inputs), cuda)
            if why and cuda:
                notes.append(f"eager loop ({why})")
        else:
            fn = compile_fn(name, step, cuda, args.provider)
            rocm_inductor.clear_reports()
            with torch._inductor.config.patch(force_disable_caches=True):
                _sync(cuda)
                t0 = time.perf_counter()
                fn(*inputs)
                _sync(cuda)
                row["compile_s"] = round(time.perf_counter() - t0, 1)
            if name != "inductor":
                row["rewrites"] = rewrites_summary(rocm_inductor.reports())

            def call():
                _mark()
                return fn(*inputs)

        us = time_call(call, args.reps, args.rounds, cuda)
        row.update(step_us=round(statistics.median(us), 1), spread_us=round(max(us) - min(us), 1))

        if decode and sampler is not None:
            try:
                row.update(sample_step(name, step, fn, inputs, sampler, args, cuda))
            except Exception as e:  # a late failure (recording, replay) must not lose the step numbers
                msg = str(e).strip().splitlines()
                row["sampler"] = f"error: {type(e).__name__}: {(msg[0] if msg else '')[:100]}"
        if ref is not None:
            forced = greedy_trace(fn, inputs, cache, args.greedy_steps, decode, forced=ref["tokens"])
            free = greedy_trace(fn, inputs, cache, args.greedy_steps, decode) if decode else None
            row.update(compare(forced, free, ref, decode, args.logit_tol))
    if cuda:
        row["peak_mem_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    if notes:
        row["status"] = "ok; " + "; ".join(notes)
    return row


def rewrites_summary(report) -> str:
    """``op[provider] xN`` per rewritten op over a compile's graphs (``none`` when nothing was rewritten)."""
    counts: dict[str, int] = {}
    for m in report.matches:
        key = f"{m.op}[{m.provider}]"
        counts[key] = counts.get(key, 0) + 1
    return " ".join(f"{k} x{n}" for k, n in sorted(counts.items())) or "none"


def sample_step(name, step, fn, inputs, sampler, args, cuda) -> dict:
    """Time one decode step + the HF sampler: eager captures both in one graph; a compiled config compiles
    the sampler with the same backend (the eager sampler in its own CUDA graph if that compile crashes)."""
    out = {}
    if name == "eager":
        call, why = capture(lambda: sampler(step(*inputs)), cuda)
        out["sampler"] = "eager" + (" loop" if why else " (graph)")
    else:
        _mark()
        logits = fn(*inputs).clone()
        samp = compile_fn(name, sampler, cuda, args.provider)
        rocm_inductor.clear_reports()
        try:
            with torch._inductor.config.patch(force_disable_caches=True):
                _sync(cuda)
                t0 = time.perf_counter()
                _mark()
                samp(logits)
                _sync(cuda)
            out.update(sampler="compiled", sampler_compile_s=round(time.perf_counter() - t0, 1))
            if name != "inductor" and rocm_inductor.reports().count("sample"):
                out["sampler"] = "compiled: rocm_fused::sample"
        except Exception as e:  # Inductor has crashed compiling this chain (RESULTS.md): report, fall back
            msg = str(e).strip().splitlines()
            out["sampler"] = f"crash: {type(e).__name__}: {(msg[0] if msg else '')[:100]} -> eager sampler"
            static = logits.clone()
            eager_samp, why = capture(lambda: sampler(static), cuda)
            out["sampler"] += " loop" if why else " (graph)"

            def samp(x):
                static.copy_(x)
                return eager_samp()

        def call():
            _mark()
            return samp(fn(*inputs))

    us = time_call(call, args.reps, args.rounds, cuda)
    out["sample_step_us"] = round(statistics.median(us), 1)
    return out


# ---------------------------------------------------------------------------------------------- plan, budget


def plan(args) -> list[tuple[str, str, str, int, int]]:
    """(model, config, bucket label, batch, seq) in priority order (see the module docstring)."""
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    unknown = sorted(set(configs) - set(CONFIGS))
    if unknown:
        raise SystemExit(f"unknown config(s) {unknown}; valid: {list(CONFIGS)}")
    configs = [c for c in CONFIGS if c in configs or c == "inductor"]
    buckets = [(f"decode B={b}", b, 1) for b in cli.ints(args.buckets)]
    if args.prefill:
        buckets.append((f"prefill {args.prefill}", 1, args.prefill))
    runs = []
    for model in [m.strip() for m in args.models.split(",") if m.strip()]:
        runs += [(model, c, *bk) for bk in buckets for c in configs if c != "rocm_fused_l2"]
        runs += [(model, c, *bk) for bk in buckets for c in configs if c == "rocm_fused_l2"]
    return runs


def first_guess_s(config: str, seq: int, layers: int, sampler: bool) -> float:
    """Seconds one run costs on the H200 before anything is measured: Inductor compiles a 16-layer Llama
    step in ~20-25 s, level 2 in 56-72 s per decode bucket (RESULTS.md); scaled by layers; + sampler."""
    base = {"eager": 4.0, "inductor": 25.0, "rocm_fused_l1": 27.0, "rocm_fused_l2": 70.0 if seq == 1 else 110.0}
    return base[config] * (1 if config == "eager" else layers / 16) + (8.0 if sampler and seq == 1 else 0.0)


# ---------------------------------------------------------------------------------------------- main


def main(argv=None) -> int:
    """Run the benchmark (or only the chart with ``--chart``); returns the process exit code."""
    args = parse_args(argv)
    if args.chart:
        rows = []
        for path in args.chart:
            with open(path, newline="") as f:
                rows += list(csv.DictReader(f))
        chart(rows, pathlib.Path(args.out) / "decode.png")
        return 0
    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA/ROCm device; use --device cpu --tiny for a smoke test", file=sys.stderr)
        return 1
    warnings.filterwarnings("ignore", message=".*past_key_values.*deprecated")
    cuda = args.device == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    if args.tiny:
        args.pos = min(args.pos, 16)
        args.max_cache_len = min(args.max_cache_len, args.pos + max(args.greedy_steps, args.prefill, 1) + 1)
    start = time.perf_counter()
    warm_flashinfer(cuda)
    sampler = None if args.no_sampler else load_hf_sampler()(temperature=T, top_k=TOP_K, top_p=TOP_P)
    runs = plan(args)
    rows, models, refs, est = [], {}, {}, {}
    for model_name, name, label, batch, seq in runs:
        if model_name not in models:
            models.clear()  # one family on the GPU at a time
            gc.collect()
            t0 = time.perf_counter()
            models[model_name] = hf_models.build_model(model_name, args.device, dtype, args.tiny, args.layers)
            print(f"built {model_name} in {time.perf_counter() - t0:.1f} s", flush=True)
        model, cfg = models[model_name]
        key = (model_name, label)
        if key not in refs:  # eager reference for correctness (cheap: no compile)
            refs[key] = eager_reference(model, cfg, args, batch, seq)
        kind = (name, seq == 1)
        cost = 0.0 if args.tiny else est.get(kind, first_guess_s(name, seq, cfg.num_hidden_layers, sampler is not None))
        spent = time.perf_counter() - start
        row = dict(model=model_name, bucket=label, config=name)
        if spent + cost > args.budget_s:
            row["status"] = f"skipped (budget: {spent:.0f} s spent + ~{cost:.0f} s > {args.budget_s:.0f} s)"
        else:
            t0 = time.perf_counter()
            try:
                row.update(run_one(name, model, cfg, args, batch, seq, sampler, refs[key]))
                row.setdefault("status", "ok")
            except Exception as e:  # one failing config must not lose the others' numbers
                msg = str(e).strip().splitlines()
                row["status"] = f"error: {type(e).__name__}: {(msg[0] if msg else '')[:120]}"
            est[kind] = time.perf_counter() - t0
        row.pop("_trace", None)
        rows.append(row)
        finish(rows, args, start, draw=False)  # a timeout later still leaves the CSV of what ran
        print(f"[{time.perf_counter() - start:6.0f}s] {model_name:<6} {label:<13} {name:<14} "
              f"{ {k: v for k, v in row.items() if k not in ('model', 'bucket', 'config')} }", flush=True)
    text, title, stem = finish(rows, args, start, draw=True)
    print(f"# {title}\n\n{text}")
    return 0


def finish(rows: list[dict], args, start: float, draw: bool) -> tuple[str, str, str]:
    """Add the ratios vs Inductor (same model and bucket) and write ``decode_<models>.csv|md`` (+ the chart
    when ``draw``); returns ``(markdown table, title, file stem)``."""
    inductor = {(r["model"], r["bucket"]): r for r in rows if r["config"] == "inductor"}
    out = []
    for row in rows:
        row = dict(row)
        ind = inductor.get((row["model"], row["bucket"]), {})
        for col, src in (("vs_inductor", "step_us"), ("sample_vs_inductor", "sample_step_us")):
            if row.get(src) and ind.get(src):
                row[col] = round(ind[src] / row[src], 3)
        out.append({c: row.get(c, "") for c in COLUMNS})
    stem = "decode_" + "_".join(sorted({r["model"] for r in out}))
    title = f"Decode benchmark ({versions()})"
    extra = ["", f"pos={args.pos}, max_cache_len={args.max_cache_len}, reps={args.reps} x rounds={args.rounds}, "
             f"sampler T={T} top-k={TOP_K} top-p={TOP_P}; vs_inductor = Inductor us / this us (> 1 = faster); "
             "argmax_equal = teacher-forced argmax equal to eager's (steps x rows, or prefill positions); "
             "greedy_equal = leading free-running steps equal to eager in every row; "
             "logit_err = max over positions of max |diff| / max |eager logit|; top2_gap = eager's smallest "
             "top-1 - top-2 logit gap (0 = exact bf16 ties, which random weights produce); "
             "compile_s of a later config may reuse Triton kernels an earlier one built (shared kernel cache); "
             f"elapsed {time.perf_counter() - start:.0f} s."]
    text = write_results(out, args.out, stem, title, extra)
    if draw:
        chart(out, pathlib.Path(args.out) / f"{stem}.png")
    return text, title, stem


def eager_reference(model, cfg, args, batch, seq) -> dict:
    """The eager greedy trace of one bucket (see :func:`greedy_trace`), on its own zeroed cache."""
    dtype = next(model.parameters()).dtype
    decode = seq == 1
    step, inputs, cache = hf_models.decode_step(model, cfg, batch, seq, args.pos if decode else 0,
                                                args.max_cache_len, args.device, dtype)
    with torch.no_grad():
        ref = greedy_trace(step, inputs, cache, args.greedy_steps, decode)
    del cache
    return ref


def warm_flashinfer(cuda: bool) -> None:
    """JIT FlashInfer's norm module once up front (~14 s on the H200, docs/gpu.md), so it does not land in
    the first level-1 compile time. Absent FlashInfer is fine (the policy falls back to Triton)."""
    if not cuda:
        return
    try:
        import flashinfer

        t0 = time.perf_counter()
        x = torch.randn(2, 2048, device="cuda", dtype=torch.bfloat16)
        rmsnorm = getattr(flashinfer, "rmsnorm", None) or flashinfer.norm.rmsnorm
        rmsnorm(x, torch.ones(2048, device="cuda", dtype=torch.bfloat16))
        torch.cuda.synchronize()
        print(f"flashinfer {flashinfer.__version__} norm JIT/warm-up {time.perf_counter() - t0:.1f} s", flush=True)
    except Exception as e:
        print(f"flashinfer not warmed ({type(e).__name__}: {str(e)[:80]})", flush=True)


def chart(rows: list[dict], path: pathlib.Path) -> None:
    """Bar chart of speedup vs Inductor (step and step + sampler) per model and bucket, one bar per config;
    skipped with a message when matplotlib is missing or no row has a ratio."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"matplotlib not installed: no chart ({path.name})")
        return
    groups = list(dict.fromkeys((r["model"], r["bucket"]) for r in rows))
    configs = [c for c in CONFIGS if c != "inductor" and any(r["config"] == c for r in rows)]
    cols = [c for c in ("vs_inductor", "sample_vs_inductor") if any(r.get(c) not in ("", None) for r in rows)]
    if not groups or not configs or not cols:
        print(f"nothing to chart ({path.name})")
        return
    val = {(r["model"], r["bucket"], r["config"], c): float(r[c])
           for r in rows for c in cols if r.get(c) not in ("", None)}
    fig, axes = plt.subplots(len(cols), 1, figsize=(max(6, 1.3 * len(groups)), 3.6 * len(cols)), squeeze=False)
    width = 0.8 / len(configs)
    for ax, col in zip(axes[:, 0], cols):
        for i, c in enumerate(configs):
            xs = [g + (i - (len(configs) - 1) / 2) * width for g in range(len(groups))]
            ys = [val.get((m, b, c, col), float("nan")) for m, b in groups]  # nan: no bar
            ax.bar(xs, ys, width, label=c)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks(range(len(groups)), [f"{m}\n{b}" for m, b in groups], fontsize=8)
        ax.set_ylabel("Inductor time / config time")
        ax.set_title("decode step" if col == "vs_inductor" else "decode step + HF top-k/top-p sampler")
        ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"chart: {path}")


if __name__ == "__main__":
    sys.exit(main())
