"""Whole decode step of mixture-of-experts models: Inductor vs rocm_fused with the moe_experts pass on.

Models (``--models``; random bf16 weights from ``transformers`` configs, no download, cut to ``--layers``):
  qwen3_moe  Qwen/Qwen3-30B-A3B's shape: hidden 2048, 128 experts, top-8, moe_intermediate 768, 32/4 heads of
             128, vocab 151936 (48 layers in the checkpoint; default here 4: one compile per config and batch
             must fit the call, ~20 s each for 4 layers is a first guess, the script prints the real ones)
  gpt_oss    openai/gpt-oss-20b's shape: hidden 2880, 32 experts, top-4, intermediate 2880, 64/8 heads of 64,
             vocab 201088, clamped SwiGLU with biases (24 layers; default here 4). Every layer is
             ``full_attention``: StaticCache's sliding layers keep a Python-int length and recompile per position
             (``benchmarks/hf_models.py``); HF's GPT-OSS attention is ``eager`` (no SDPA, sinks)
Experts implementation ``--experts`` (HF's default ``grouped_mm``, or ``batched_mm``). One new token per
sequence at ``--pos`` in a ``StaticCache(--max-cache-len)``, B in ``--batches`` (1, 8, 32). Configs:
  inductor    ``torch.compile(step, mode="reduce-overhead")`` (CUDA graphs)
  rocm_fused  ``backend="rocm_fused", options={"level": 1, "cudagraphs": True, "passes": {"moe_experts": True}}``
              (+ ``moe_routing`` when this build has that pass: the script runs with or without it)
Step time: median over ``--rounds`` rounds of ``--reps`` replays, CUDA events (``timing.time_call``); ``device_us``
(markdown and run log): the same replays queued behind a GPU sleep, the device's time without the host's per-call
work. ``--profile`` prints each config's top kernels per replay (CUPTI).

Writes ``moe_decode.csv`` (columns exactly ``model,batch,config,step_us``; ``--append`` keeps the rows of other
(model, batch, config) already there) and ``moe_decode.md`` (with vs_inductor, the rewrites, logit_err vs the eager
step, compile_s, status) under ``--out``, records the rows in ``results/runs/moe_decode.csv``
(``run_log.append_run``, unless ``--no-log``) and prints the table last. Runs go in priority order (B = 1 for
both configs first) and a run that would end past ``--budget-s`` is skipped and listed.

    PYTHONPATH=$PWD:$PWD/benchmarks python benchmarks/e2e/moe_decode.py --models qwen3_moe [--layers 4]
        [--batches 1,8,32] [--budget-s 190] [--out benchmarks/results] [--append]

``--tiny --device cpu`` is the smoke test of the script itself (2 layers, small dims, no CUDA graphs).
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

os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="triton_moe_"))
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="inductor_moe_"))

import torch  # noqa: E402

import rocm_inductor  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # benchmarks/: cli, hf_models, timing
import cli  # noqa: E402  (benchmarks/cli.py)
import hf_models  # noqa: E402  (benchmarks/hf_models.py)
import run_log  # noqa: E402  (benchmarks/run_log.py)
from timing import time_call, versions  # noqa: E402  (benchmarks/timing.py)

CONFIGS = ("inductor", "rocm_fused")
CSV_COLUMNS = ("model", "batch", "config", "step_us")
MD_COLUMNS = CSV_COLUMNS + ("device_us", "vs_inductor", "rewrites", "logit_err", "compile_s", "status")
#: (config class, model class, checkpoint-shaped kwargs, tiny kwargs, attention implementation, source).
MODELS = {
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM",
                  dict(hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768, num_experts=128,
                       num_experts_per_tok=8, norm_topk_prob=True, num_attention_heads=32, num_key_value_heads=4,
                       head_dim=128, vocab_size=151936, max_position_embeddings=40960, rope_theta=1000000.0,
                       rms_norm_eps=1e-6, tie_word_embeddings=False),
                  dict(hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_experts=8,
                       num_experts_per_tok=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                       vocab_size=256),
                  "sdpa", "Qwen/Qwen3-30B-A3B"),
    "gpt_oss": ("GptOssConfig", "GptOssForCausalLM",
                dict(hidden_size=2880, intermediate_size=2880, num_local_experts=32, num_experts_per_tok=4,
                     num_attention_heads=64, num_key_value_heads=8, head_dim=64, vocab_size=201088,
                     max_position_embeddings=131072, rms_norm_eps=1e-5, tie_word_embeddings=False),
                dict(hidden_size=64, intermediate_size=32, num_local_experts=8, num_experts_per_tok=2,
                     num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=256),
                "eager", "openai/gpt-oss-20b"),
}
#: Seconds one compile + timing of a 4-layer model costs before anything is measured (a guess: Inductor compiles
#: the 16-layer Llama-3.2-1B decode step in ~20-25 s, benchmarks/RESULTS.md); scaled by the layer count.
FIRST_GUESS_S = 20.0

_mark = getattr(torch.compiler, "cudagraph_mark_step_begin", lambda: None)


def parse_args(argv=None) -> argparse.Namespace:
    """Command line (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default="qwen3_moe,gpt_oss", help=f"of {sorted(MODELS)}")
    p.add_argument("--batches", default="1,8,32")
    p.add_argument("--max-cache-len", type=int, default=1024)
    p.add_argument("--experts", default="grouped_mm", choices=("grouped_mm", "batched_mm"))
    p.add_argument("--out", default="benchmarks/results")
    p.add_argument("--append", action="store_true", help="keep other rows of an existing moe_decode.csv")
    p.add_argument("--provider", default=None, help="force moe_experts' provider (the CPU smoke: reference)")
    p.add_argument("--no-log", action="store_true", help="do not record the run in results/runs/")
    p.add_argument("--profile", action="store_true",
                   help="print each config's top GPU kernels of a replay (torch.profiler): where the step's time goes")
    cli.add_step_args(p, reps=20, rounds=5, budget_s=190.0, layers=4)
    return p.parse_args(argv)


def build(name: str, args, device: str, dtype: torch.dtype):
    """The random-weight model ``name`` cut to ``args.layers`` layers (``(model, config)``)."""
    import transformers

    conf_cls, model_cls, full, tiny, attn, _ = MODELS[name]
    kw = dict(tiny if args.tiny else full)
    kw["num_hidden_layers"] = 2 if args.tiny else args.layers
    if name == "gpt_oss":
        kw["layer_types"] = ["full_attention"] * kw["num_hidden_layers"]
    cfg = getattr(transformers, conf_cls)(**kw)
    cfg._attn_implementation = attn
    cfg._experts_implementation = args.experts
    prev = torch.get_default_dtype()
    torch.manual_seed(0)
    with torch.device(device):
        torch.set_default_dtype(dtype)
        try:
            model = getattr(transformers, model_cls)(cfg).eval()
        finally:
            torch.set_default_dtype(prev)
    with torch.no_grad():  # HF may initialise routers at zero (every expert ties): draw them
        for n, prm in model.named_parameters():
            if "router" in n or n.endswith("mlp.gate.weight"):
                prm.normal_(0, 0.02)
    return model, cfg


def rocm_options(cuda: bool, provider: str | None = None) -> dict:
    """rocm_fused's options: level 1, CUDA graphs, moe_experts on, and moe_routing when this build has it
    (``provider`` forced on both when given)."""
    from rocm_inductor.registry import PASS_NAMES

    passes = {"moe_experts": True}
    if "moe_routing" in PASS_NAMES:
        passes["moe_routing"] = True
    opts = {"level": 1, "cudagraphs": cuda, "passes": passes}
    if provider:
        opts["providers"] = {p: provider for p in passes}
    return opts


def rewrites(layers: int) -> tuple[str, bool]:
    """``"moe_experts=4/4[triton] ..."`` from the compile's reports, and whether every layer's experts were
    rewritten; the near-miss reasons when not."""
    reps = rocm_inductor.reports()
    counts: dict[str, set] = {}
    n = {}
    for m in reps.matches:
        n[m.op] = n.get(m.op, 0) + 1
        counts.setdefault(m.op, set()).add(m.provider)
    text = " ".join(f"{op}={c}[{','.join(sorted(counts[op]))}]" for op, c in sorted(n.items()))
    ok = n.get("moe_experts", 0) == layers
    if not ok:
        why = sorted({x.reason for x in reps.near_misses if x.pass_name == "moe_experts"})
        text += f" moe_experts {n.get('moe_experts', 0)}/{layers}" + ("; near-miss: " + " | ".join(why)[:300]
                                                                     if why else "")
    return text, ok


def run_one(config: str, step, inputs, ref: torch.Tensor, layers: int, args, cuda: bool, label: str = "") -> dict:
    """Compile ``step`` as ``config``, check the rewrites, compare with eager, time it."""
    row: dict = {}
    torch._dynamo.reset()
    rocm_inductor.clear_reports()
    if config == "inductor":
        fn = torch.compile(step, mode="reduce-overhead" if cuda else None, fullgraph=True, dynamic=False)
    else:
        fn = torch.compile(step, backend="rocm_fused", options=rocm_options(cuda, args.provider), fullgraph=True,
                           dynamic=False)
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
            row["rewrites"], row["_ok"] = rewrites(layers)

        def call():
            _mark()
            return fn(*inputs)

        us = time_call(call, args.reps, args.rounds, cuda)
        if cuda:
            row["device_us"] = round(statistics.median(time_call(call, args.reps, args.rounds, cuda, queued=True)), 1)
        if args.profile and cuda:
            from decode_step import breakdown_text, profile_kernels  # benchmarks/e2e, this script's folder

            print(breakdown_text(f"{label} {config}".strip(), profile_kernels(call, cuda)[1], top=30), flush=True)
    row["step_us"] = round(statistics.median(us), 1)
    return row


def write(rows: list[dict], out: str, title: str, extra: list[str], append: bool) -> str:
    """Write the CSV (exact columns; ``append`` keeps other keys' rows) and the markdown table."""
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "moe_decode.csv")
    kept = []
    if append and os.path.exists(path):
        mine = {(r["model"], str(r["batch"]), r["config"]) for r in rows}
        with open(path, newline="") as f:
            kept = [r for r in csv.DictReader(f) if (r["model"], r["batch"], r["config"]) not in mine]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows(kept)
        w.writerows(r for r in rows if r.get("step_us") not in (None, ""))
    ind = {(r["model"], r["batch"]): r.get("step_us") for r in rows if r["config"] == "inductor"}
    lines = ["| " + " | ".join(MD_COLUMNS) + " |", "|" + "---|" * len(MD_COLUMNS)]
    for r in rows:
        r = dict(r)
        base = ind.get((r["model"], r["batch"]))
        if base and r.get("step_us"):
            r["vs_inductor"] = round(base / r["step_us"], 3)
        lines.append("| " + " | ".join(str(r.get(c, "")) for c in MD_COLUMNS) + " |")
    text = "\n".join([*lines, *extra]) + "\n"
    with open(os.path.join(out, "moe_decode.md"), "w") as f:
        f.write(f"# {title}\n\n{text}")
    return text


def main(argv=None) -> int:
    """Run the benchmark; returns 0, 1 (no GPU) or 2 (a rocm_fused compile missed a layer's experts)."""
    args = parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA/ROCm device; use --device cpu --tiny for a smoke test", file=sys.stderr)
        return 1
    warnings.filterwarnings("ignore", message=".*past_key_values.*deprecated")
    cuda = args.device == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    if args.tiny:
        args.pos, args.max_cache_len = min(args.pos, 16), min(args.max_cache_len, 32)
    runs = [(m, b, c) for b in cli.ints(args.batches) for m in args.models.split(",") for c in CONFIGS]
    runs.sort(key=lambda r: (r[0] != args.models.split(",")[0], r[1]))  # first model first, small B first
    start = time.perf_counter()
    rows, models, est, bad = [], {}, {}, False
    title = f"MoE decode step, {args.experts} experts ({versions()})"
    state = None
    for name, batch, config in runs:
        spent = time.perf_counter() - start
        layers = 2 if args.tiny else args.layers
        guess = 0.0 if args.tiny else est.get(name, FIRST_GUESS_S * layers / 4)
        row = dict(model=name, batch=batch, config=config)
        if spent + guess > args.budget_s:
            row["status"] = f"skipped (budget: {spent:.0f} s + ~{guess:.0f} s > {args.budget_s:.0f} s)"
            rows.append(row)
            continue
        try:
            if name not in models:
                models.clear()
                state = None
                gc.collect()
                if cuda:
                    torch.cuda.empty_cache()
                models[name] = build(name, args, args.device, dtype)
            model, cfg = models[name]
            if state is None or state[0] != (name, batch):
                state = None
                gc.collect()
                step, inputs, _ = hf_models.decode_step(model, cfg, batch, 1, args.pos, args.max_cache_len,
                                                        args.device, dtype)
                with torch.no_grad():
                    ref = step(*inputs).float()
                state = ((name, batch), step, inputs, ref)
            _, step, inputs, ref = state
            t0 = time.perf_counter()
            row.update(run_one(config, step, inputs, ref, layers, args, cuda, label=f"{name} B={batch}"))
            est[name] = time.perf_counter() - t0
            ok = row.pop("_ok", True)
            bad |= not ok
            row["status"] = "ok" if ok else "EXPERTS NOT REWRITTEN IN EVERY LAYER"
        except Exception as e:  # one failing run must not lose the others' numbers
            msg = str(e).strip().splitlines()
            row["status"] = f"error: {type(e).__name__}: {(msg[0] if msg else '')[:160]}"
        rows.append(row)
        print(f"[{time.perf_counter() - start:6.0f}s] {name:<9} B={batch:<3} {config:<10} "
              f"{ {k: v for k, v in row.items() if k not in ('model', 'batch', 'config')} }", flush=True)
        write(rows, args.out, title, [], args.append)
    extra = ["", f"layers={2 if args.tiny else args.layers}, pos={args.pos}, max_cache_len={args.max_cache_len}, "
             f"experts={args.experts}, bf16 on GPU / fp32 on CPU, reps={args.reps} x rounds={args.rounds}, "
             f"{time.perf_counter() - start:.0f} s"]
    print(write(rows, args.out, title, extra, args.append))
    if not args.no_log and not args.tiny:
        measured = [{**{k: r.get(k, "") for k in (*CSV_COLUMNS, "device_us", "rewrites", "logit_err", "compile_s",
                                                  "status")}, "experts": args.experts, "layers": args.layers}
                    for r in rows if r.get("step_us") not in (None, "")]  # experts: part of the topic's key
        command = "benchmarks/e2e/moe_decode.py " + " ".join(argv or sys.argv[1:])
        run_log.append_run("moe_decode", measured, script=command,
                           what=f"MoE decode step ({args.models}, {args.layers} layers, {args.experts}): Inductor vs "
                                "rocm_fused with moe_experts")
    return 2 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
