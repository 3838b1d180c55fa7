"""Dense decode step, with and without the HF sampler: Inductor vs rocm_fused, step time and kernels per step.

Models (``--models``, ``benchmarks/hf_models.py``): Llama-3.2-1B (16 layers) and Qwen3-0.6B (28 layers) shapes,
random bf16 weights, SDPA, ``StaticCache``. One new token per sequence at ``--pos`` for B in ``--batches``;
``--cache-lens`` lists the static cache sizes (each ``MODEL:B:LEN`` in ``--also`` adds one cell, e.g. Llama
B=32 at 4096 slots). Configs (``--configs``; both replay CUDA graphs):
  inductor    ``torch.compile(step, mode="reduce-overhead")``
  rocm_fused  ``backend="rocm_fused", options={"level": 1, "cudagraphs": True}`` (shipped defaults)
  NAME        from ``--extra NAME=JSON``: rocm_fused with these options merged in (A/B of a pass or knob); the
              JSON's ``"env"`` dict is not an option: environment variables set while that config compiles, warms
              up and records its graphs (a launch-time kernel switch, e.g. ``{"env":
              {"ROCM_FUSED_ATTN_ONE_LAUNCH": "1"}}``)
Per cell the step is compiled once; ``sampler=hf`` then compiles HF generate's sampler (T=0.7, top-k 50,
top-p 0.9, ``tests/sampling_spellings.py``'s ``hf_sampler``) with the same backend and times step + sampler.
``kernels``: GPU kernels per step seen by ``torch.profiler`` (CUPTI records the kernels of a CUDA-graph replay;
memcpy/memset excluded). ``logit_err``: max |logits - eager| / max |eager| on the step's inputs. ``step_us``: median of
``--rounds`` rounds of ``--reps`` calls from the host (CUDA events; what a caller of the compiled step waits);
``device_us``: the same calls queued behind a GPU sleep (``timing.time_call(queued=True)``), the device's time with
the host's per-call work (Dynamo guards, cudagraph-tree bookkeeping) out.

Writes ``decode_step.md`` and ``decode_step_kernels.md`` (per cell and config without sampler: the kernels that
take the step's time, launches and CUPTI us per step) under ``--out`` and records the rows in
``results/runs/decode_step.csv`` (unless ``--no-log``); ``python benchmarks/results_report.py`` regenerates
``results/decode_step.csv`` (columns exactly ``model,batch,max_cache_len,sampler,config,step_us,kernels``, configs
``inductor`` and ``rocm_fused``). Runs go in order and one that would end past ``--budget-s`` is skipped and
listed.

    PYTHONPATH=$PWD:$PWD/benchmarks python benchmarks/e2e/decode_step.py --models llama,qwen3 \\
        [--batches 1,8,32] [--also llama:32:4096] [--budget-s 540] [--extra 'x={"passes": {"rope": false}}']

``--tiny --device cpu`` is the smoke test of the script itself (2 layers, no CUDA graphs, no profiler).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.util
import json
import os
import pathlib
import statistics
import sys
import tempfile
import time
import warnings

os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="triton_step_"))
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="inductor_step_"))

import torch  # noqa: E402

import rocm_inductor  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # benchmarks/: cli, hf_models, timing
import cli  # noqa: E402  (benchmarks/cli.py)
import hf_models  # noqa: E402  (benchmarks/hf_models.py)
import run_log  # noqa: E402  (benchmarks/run_log.py)
from timing import capture, time_call, versions  # noqa: E402  (benchmarks/timing.py)

COLUMNS = ("model", "batch", "max_cache_len", "sampler", "config", "step_us", "kernels")
MD_COLUMNS = COLUMNS + ("device_us", "vs_inductor", "logit_err", "compile_s", "rewrites", "status")
#: Seconds one compile + timing of a 16-layer step costs before anything is measured (Inductor compiles the
#: Llama-3.2-1B decode step in ~20-25 s, benchmarks/RESULTS.md "decode"); scaled by the layer count.
FIRST_GUESS_S = 30.0

_mark = getattr(torch.compiler, "cudagraph_mark_step_begin", lambda: None)


def parse_args(argv=None) -> argparse.Namespace:
    """Command line (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default="llama,qwen3", help=f"of {sorted(hf_models.FAMILIES)}")
    p.add_argument("--batches", default="1,8,32")
    p.add_argument("--cache-lens", default="1024")
    p.add_argument("--also", default="llama:32:4096", help="extra MODEL:B:LEN cells, comma-separated")
    p.add_argument("--configs", default="inductor,rocm_fused")
    p.add_argument("--extra", action="append", default=[], help="NAME=JSON: a rocm_fused config with options")
    p.add_argument("--no-sampler", action="store_true", help="only the step without sampler")
    p.add_argument("--out", default="benchmarks/results")
    p.add_argument("--no-log", action="store_true", help="do not record the run in results/runs/")
    cli.add_step_args(p, reps=20, rounds=5, budget_s=540.0)
    return p.parse_args(argv)


def load_hf_sampler():
    """HF generate's sampler (T=0.7, top-k 50, top-p 0.9) from ``tests/sampling_spellings.py``, by path."""
    path = pathlib.Path(__file__).resolve().parents[2] / "tests" / "sampling_spellings.py"
    spec = importlib.util.spec_from_file_location("_step_sampling_spellings", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.hf_sampler(temperature=0.7, top_k=50, top_p=0.9)


def options_of(config: str, extra: dict[str, dict], cuda: bool) -> dict | None:
    """rocm_fused's options for ``config`` (None: Inductor)."""
    if config == "inductor":
        return None
    opts = {"level": 1, "cudagraphs": cuda}
    for k, v in extra.get(config, {}).items():
        if k == "env":  # not an option: run_cell sets these around the config's run
            continue
        opts[k] = {**opts.get(k, {}), **v} if isinstance(v, dict) and isinstance(opts.get(k), dict) else v
    return opts


def compiled(fn, opts: dict | None, cuda: bool):
    """``fn`` compiled by Inductor (``opts is None``) or rocm_fused with ``opts``, CUDA graphs on a GPU."""
    if opts is None:
        return torch.compile(fn, mode="reduce-overhead" if cuda else None, fullgraph=True, dynamic=False)
    return torch.compile(fn, backend="rocm_fused", options=opts, fullgraph=True, dynamic=False)


def profile_kernels(call, cuda: bool, n: int = 5) -> tuple[int | str, dict[str, tuple[int, float]]]:
    """GPU kernels per ``call()`` (torch.profiler, CUDA activity; memcpy/memset left out) and, per kernel name,
    (launches per call, CUPTI microseconds per call); ``("", {})`` without a GPU or when the profiler sees none
    (a stack whose CUPTI does not report graph kernels)."""
    if not cuda:
        return "", {}
    from torch.profiler import ProfilerActivity, profile

    call()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            call()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
               and not e.name.lower().startswith(("memcpy", "memset"))]
    per: dict[str, tuple[int, float]] = {}
    for e in kernels:
        c, us = per.get(e.name, (0, 0.0))
        per[e.name] = (c + 1, us + (e.time_range.end - e.time_range.start))
    per = {k: (round(c / n), us / n) for k, (c, us) in per.items()}
    return (round(len(kernels) / n) if kernels else ""), per


def breakdown_text(title: str, per: dict[str, tuple[int, float]], top: int = 14) -> str:
    """The ``top`` kernels by time per call as markdown lines (name cut to 90 characters)."""
    total = sum(us for _, us in per.values())
    lines = [f"### {title}: {sum(c for c, _ in per.values())} kernels, {total:.1f} us of kernel time", "",
             "| kernel | launches | us | share |", "|---|---|---|---|"]
    for name, (c, us) in sorted(per.items(), key=lambda kv: -kv[1][1])[:top]:
        lines.append(f"| `{name[:90]}` | {c} | {us:.1f} | {us / max(total, 1e-9):.1%} |")
    return "\n".join(lines) + "\n"


def rewrites() -> str:
    """``op[provider] xN`` over the compile's reports."""
    counts: dict[str, int] = {}
    for m in rocm_inductor.reports().matches:
        key = f"{m.op}[{m.provider}]"
        counts[key] = counts.get(key, 0) + 1
    return " ".join(f"{k} x{n}" for k, n in sorted(counts.items())) or "none"


@contextlib.contextmanager
def env_set(env: dict[str, str]):
    """``os.environ`` updated with ``env`` inside the block, restored after."""
    old = {k: os.environ.get(k) for k in env}
    os.environ.update({k: str(v) for k, v in env.items()})
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_cell(config: str, step, inputs, ref, sampler, args, extra, cuda: bool) -> list[dict]:
    """Compile ``step`` as ``config``, time it alone and (unless ``--no-sampler``) with the sampler, with the
    config's ``"env"`` (``--extra``) set throughout."""
    with env_set(extra.get(config, {}).get("env", {})):
        return _run_cell(config, step, inputs, ref, sampler, args, extra, cuda)


def _run_cell(config: str, step, inputs, ref, sampler, args, extra, cuda: bool) -> list[dict]:
    torch._dynamo.reset()
    rocm_inductor.clear_reports()
    opts = options_of(config, extra, cuda)
    fn = compiled(step, opts, cuda)
    rows = []
    with torch.no_grad():
        t0 = time.perf_counter()
        _mark()
        out = fn(*inputs)
        if cuda:
            torch.cuda.synchronize()
        compile_s = round(time.perf_counter() - t0, 1)
        err = float((out.float() - ref).abs().max() / ref.abs().max().clamp_min(1e-30))
        info = dict(logit_err=float(f"{err:.3g}"), compile_s=compile_s, status="ok")
        if opts is not None:
            info["rewrites"] = rewrites()

        def call():
            _mark()
            return fn(*inputs)

        us = time_call(call, args.reps, args.rounds, cuda)
        queued = time_call(call, args.reps, args.rounds, cuda, queued=True) if cuda else None
        kernels, per = profile_kernels(call, cuda)
        rows.append(dict(sampler="none", config=config, step_us=round(statistics.median(us), 1),
                         device_us=round(statistics.median(queued), 1) if queued else "", kernels=kernels,
                         _breakdown=per, **info))
        if sampler is None:
            return rows
        _mark()
        logits = fn(*inputs).clone()
        samp = compiled(sampler, opts, cuda)
        t0 = time.perf_counter()
        try:
            _mark()
            samp(logits)
            info = dict(info, compile_s=round(time.perf_counter() - t0, 1))
        except Exception as e:  # torch 2.11's Inductor crashes on the HF sampler's cumsum at B > 1 (docs/gpu.md)
            msg = str(e).strip().splitlines()
            samp, why = eager_sampler_graph(sampler, logits, cuda)
            info = dict(info, compile_s=round(time.perf_counter() - t0, 1),
                        status=f"sampler compile crashed ({type(e).__name__}: {(msg[0] if msg else '')[:80]}): "
                               f"eager sampler {'loop: ' + why if why else 'in its own CUDA graph'}")
        if opts is not None:
            info["rewrites"] = rewrites()

        def call_sampled():
            _mark()
            return samp(fn(*inputs))

        us = time_call(call_sampled, args.reps, args.rounds, cuda)
        queued = time_call(call_sampled, args.reps, args.rounds, cuda, queued=True) if cuda else None
        rows.append(dict(sampler="hf", config=config, step_us=round(statistics.median(us), 1),
                         device_us=round(statistics.median(queued), 1) if queued else "",
                         kernels=profile_kernels(call_sampled, cuda)[0], **info))
    return rows


def eager_sampler_graph(sampler, logits: torch.Tensor, cuda: bool):
    """The eager ``sampler`` over a static copy of ``logits`` (B, V), captured in its own CUDA graph
    (``timing.capture``) -> ``(call(x), None)``, or ``(call(x), reason)`` running it eagerly when there is no GPU
    or capture fails. Used when a config cannot compile the sampler, so its row still times step + sampler."""
    static = logits.clone()
    replay, why = capture(lambda: sampler(static), cuda)

    def call(x):
        static.copy_(x)
        return replay()

    return call, why


def cells(args) -> list[tuple[str, int, int]]:
    """(model, batch, max_cache_len) in run order: per model, small B first, then the ``--also`` cells."""
    out = [(m, b, n) for m in args.models.split(",") for n in cli.ints(args.cache_lens) for b in cli.ints(args.batches)]
    for item in filter(None, args.also.split(",")):
        m, b, n = item.split(":")
        if m in args.models.split(",") and (m, int(b), int(n)) not in out:
            out.append((m, int(b), int(n)))
    return out


def table(rows: list[dict]) -> str:
    """The markdown table (vs_inductor = Inductor us / this row's us, same cell and sampler)."""
    base = {(r["model"], r["batch"], r["max_cache_len"], r["sampler"]): r.get("step_us") for r in rows
            if r["config"] == "inductor"}
    lines = ["| " + " | ".join(MD_COLUMNS) + " |", "|" + "---|" * len(MD_COLUMNS)]
    for r in rows:
        r = dict(r)
        b = base.get((r["model"], r["batch"], r["max_cache_len"], r.get("sampler")))
        if b and r.get("step_us"):
            r["vs_inductor"] = round(b / r["step_us"], 3)
        lines.append("| " + " | ".join(str(r.get(c, "")) for c in MD_COLUMNS) + " |")
    return "\n".join(lines) + "\n"


def _cut(row: dict, layers: int | None) -> dict:
    """The logged ``layers``; a model cut by ``--layers`` is logged under ``<config>_<n>l`` so its rows never
    stand for the checkpoint's in ``results/decode_step.csv`` (the latest row of a cell wins there)."""
    full = hf_models.FAMILIES[row["model"]].full["num_hidden_layers"]
    if not layers or layers == full:
        return {"layers": full}
    return {"layers": layers, "config": f"{row['config']}_{layers}l"}


def main(argv=None) -> int:
    """Run the benchmark; returns 0, or 1 without a GPU (use ``--tiny --device cpu``)."""
    args = parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA/ROCm device; use --device cpu --tiny for a smoke test", file=sys.stderr)
        return 1
    warnings.filterwarnings("ignore", message=".*past_key_values.*deprecated")
    cuda = args.device == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    extra = {}
    for item in args.extra:
        name, _, text = item.partition("=")
        extra[name] = json.loads(text)
    configs = [*args.configs.split(","), *[n for n in extra if n not in args.configs.split(",")]]
    sampler = None if args.no_sampler else load_hf_sampler()
    start, rows, models, est, breakdowns = time.perf_counter(), [], {}, {}, []
    title = f"Decode step, Inductor vs rocm_fused ({versions()})"
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, batch, slots in cells(args):
        layers = 2 if args.tiny else (args.layers or hf_models.FAMILIES[name].full["num_hidden_layers"])
        pos = min(args.pos, slots - 1)
        state = None
        for config in configs:
            key = dict(model=name, batch=batch, max_cache_len=slots)
            guess = 0.0 if args.tiny else est.get((name, config), FIRST_GUESS_S * layers / 16)
            spent = time.perf_counter() - start
            if spent + guess > args.budget_s:
                rows.append(dict(key, sampler="", config=config,
                                 status=f"skipped (budget: {spent:.0f} s + ~{guess:.0f} s > {args.budget_s:.0f} s)"))
                continue
            try:
                if name not in models:
                    models.clear()
                    gc.collect()
                    if cuda:
                        torch.cuda.empty_cache()
                    models[name] = hf_models.build_model(name, args.device, dtype, tiny=args.tiny,
                                                         layers=args.layers)
                model, cfg = models[name]
                if state is None:
                    step, inputs, _ = hf_models.decode_step(model, cfg, batch, 1, pos, slots, args.device, dtype)
                    with torch.no_grad():
                        ref = step(*inputs).float()
                    state = (step, inputs, ref)
                t0 = time.perf_counter()
                got = run_cell(config, *state, sampler, args, extra, cuda)
                est[(name, config)] = time.perf_counter() - t0
                rows += [dict(key, **r) for r in got]
                if got[0].get("_breakdown"):
                    breakdowns.append(breakdown_text(f"{name} B={batch} {slots} slots, {config}",
                                                     got[0]["_breakdown"]))
                    (out / "decode_step_kernels.md").write_text("\n".join(breakdowns))
            except Exception as e:  # one failing cell must not lose the others' numbers
                msg = str(e).strip().splitlines()
                rows.append(dict(key, sampler="", config=config,
                                 status=f"error: {type(e).__name__}: {(msg[0] if msg else '')[:160]}"))
            print(f"[{time.perf_counter() - start:6.0f}s] { {k: v for k, v in rows[-1].items() if k[0] != '_'} }",
                  flush=True)
            (out / "decode_step.md").write_text(f"# {title}\n\n{table(rows)}")
    text = table(rows) + (f"\npos={args.pos}, bf16 on GPU / fp32 on CPU, reps={args.reps} x rounds={args.rounds}, "
                          f"{time.perf_counter() - start:.0f} s\n")
    (out / "decode_step.md").write_text(f"# {title}\n\n{text}")
    print(text)
    if not args.no_log and not args.tiny:
        measured = [{**{k: r.get(k, "") for k in (*COLUMNS, "device_us", "logit_err", "compile_s", "rewrites",
                                                 "status")},
                     **_cut(r, args.layers)} for r in rows if r.get("step_us") not in (None, "")]
        run_log.append_run("decode_step", measured, script="benchmarks/e2e/decode_step.py " + " ".join(
            argv or sys.argv[1:]), what=f"dense decode step ({args.models}), with/without the HF sampler, "
                                       "kernels per step: Inductor vs rocm_fused")
    return 0


if __name__ == "__main__":
    sys.exit(main())
