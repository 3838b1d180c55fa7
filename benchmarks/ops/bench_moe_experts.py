"""Benchmark the routed experts alone: ``rocm_fused::moe_experts``'s Triton kernel vs Inductor's compiled HF region.

What it measures, per model shape and token count T (``--tokens``, default 1, 8, 32), on one GPU, from the token
states, expert ids and routing weights on (the router is not timed):
- ``qwen3_moe``: Qwen3-30B-A3B's experts: E = 128, k = 8, H = 2048, I = 768, SwiGLU, (E, 2I, H) weights;
- ``gpt_oss``: gpt-oss-20b's experts: E = 32, k = 4, H = 2880, I = 2880, clamped SwiGLU, interleaved gate/up,
  (E, H, 2I) weights, biases.
Implementations:
- ``inductor``: ``torch.compile`` (Inductor, fullgraph) of HF's experts module with ``--experts`` (``grouped_mm``,
  what ``benchmarks/e2e/moe_decode.py`` runs, or ``batched_mm``);
- ``ours``: the Triton kernel at ``default_config(T)``; with ``--sweep``, every config of ``CONFIGS`` of the
  path T takes (GEMV at T = 1, grouped above; ``--sweep all``: both paths at every T).
Every timing replays a captured CUDA graph of ``--sets`` calls, each with its own expert ids (drawn as a top-k
gives them: distinct per token), so consecutive calls read different experts and the weights stream from HBM
rather than from the 50 MB L2 (at T = 1 a Qwen3-MoE call reads 75 MB, a GPT-OSS call 200 MB), median of
``--reps`` replays, per call. ``GB/s`` is the bytes of the distinct experts the ids select over the time,
``of_copy`` its fraction of the device-to-device copy bandwidth measured in the same run. ``err`` is the max
error relative to the max of eager HF (bf16 GEMMs, ``--experts`` form) on the same inputs.

Writes ``moe_experts.csv`` / ``.md`` under ``--out`` and prints the table. Runtime on an H200: both models
without ``--sweep`` ran in under 60 s (2026-12-04, run ``2026-12-04-2102-moe_experts``); ``--sweep`` is estimated
at about 75 s per model (not yet run).

Usage: ``PYTHONPATH=$PWD:$PWD/benchmarks python benchmarks/ops/bench_moe_experts.py --model qwen3_moe,gpt_oss
--out $OUT [--sweep [all]] [--tokens 1,8,32]``
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/
from timing import copy_bandwidth_gbs, graph_time_us, write_results  # noqa: E402  (benchmarks/timing.py)

#: model -> (config class, experts module path under transformers.models, config kwargs, op tail: activation,
#: interleaved, transposed)
MODELS = {
    "qwen3_moe": ("Qwen3MoeConfig", "qwen3_moe.modeling_qwen3_moe.Qwen3MoeExperts",
                  dict(hidden_size=2048, moe_intermediate_size=768, num_experts=128, num_experts_per_tok=8),
                  ("silu", False, False)),
    "gpt_oss": ("GptOssConfig", "gpt_oss.modeling_gpt_oss.GptOssExperts",
                dict(hidden_size=2880, intermediate_size=2880, num_local_experts=32, num_experts_per_tok=4),
                ("swiglu_clamp", True, True)),
}


def parse_args(argv=None) -> argparse.Namespace:
    """Command line (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="qwen3_moe,gpt_oss", help=f"comma list of {sorted(MODELS)}")
    p.add_argument("--tokens", default="1,8,32")
    p.add_argument("--experts", default="grouped_mm", choices=("grouped_mm", "batched_mm"))
    p.add_argument("--sweep", nargs="?", const="path", default=None, choices=("path", "all"))
    p.add_argument("--sets", type=int, default=4, help="routings (expert ids) cycled inside one graph")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--out", default="benchmarks/results")
    return p.parse_args(argv)


def build(name: str, impl: str):
    """The HF experts module of ``name`` (random bf16 weights on the GPU), its config and the op's tail."""
    import importlib

    import transformers

    conf_cls, mod_path, kw, tail = MODELS[name]
    cfg = getattr(transformers, conf_cls)(num_hidden_layers=1, **kw)
    cfg._experts_implementation = impl
    module, cls = mod_path.rsplit(".", 1)
    klass = getattr(importlib.import_module(f"transformers.models.{module}"), cls)
    torch.manual_seed(0)
    m = klass(cfg).to(device="cuda", dtype=torch.bfloat16).eval()
    with torch.no_grad():
        for prm in m.parameters():  # N(0, 1/fan_in): activations O(1), SiLU and the clamp not saturated
            prm.normal_(0, prm.shape[-1] ** -0.5 if prm.ndim == 3 else 0.1)
    return m, cfg, (*tail, getattr(m, "alpha", 1.702), getattr(m, "limit", 7.0))


def op_args(m) -> tuple:
    """(w_gate_up, w_down, b_gate_up, b_down) of an HF experts module."""
    return m.gate_up_proj, m.down_proj, getattr(m, "gate_up_proj_bias", None), getattr(m, "down_proj_bias", None)


def routing(t: int, k: int, e: int, seed: int = 0):
    """Token states' stand-ins: distinct expert ids per token (as a top-k gives) and softmaxed weights."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.stack([torch.randperm(e, generator=g)[:k] for _ in range(t)]).cuda()
    tw = torch.softmax(torch.randn(t, k, generator=g), -1).cuda()
    return ids, tw


def cycler(fns):
    """A callable that calls ``fns`` in turn (one per routing set)."""
    state = {"i": 0}

    def call():
        f = fns[state["i"] % len(fns)]
        state["i"] += 1
        return f()

    return call


def main(argv=None) -> None:
    args = parse_args(argv)
    from rocm_inductor.providers.triton import moe_experts as K

    bw = copy_bandwidth_gbs()
    rows = []
    for name in args.model.split(","):
        torch._dynamo.reset()
        mod, cfg, tail = build(name, args.experts)
        k = cfg.num_experts_per_tok
        e, h = mod.gate_up_proj.shape[0], cfg.hidden_size
        per_expert = sum(w[0].numel() * w.element_size() for w in op_args(mod) if w is not None)
        region = torch.compile(mod, fullgraph=True, dynamic=False)
        for t in (int(s) for s in args.tokens.split(",")):
            x = torch.randn(t, h, device="cuda", dtype=torch.bfloat16)
            sets = [routing(t, k, e, seed) for seed in range(args.sets)]
            nbytes = per_expert * sum(len(set(ids.flatten().tolist())) for ids, _ in sets) / len(sets)
            ids, tw = sets[0]
            with torch.no_grad():
                eager = mod(x, ids, tw).float()
                t0 = time.perf_counter()
                region(x, ids, tw)
                compile_s = time.perf_counter() - t0
                scale = float(eager.abs().max())
                cands = [("inductor", None), ("ours " + K.default_config(t).name(), K.default_config(t))]
                if args.sweep:
                    cands += [("ours " + c.name(), c) for c in K.CONFIGS
                              if c != K.default_config(t) and (args.sweep == "all" or c.dot == (t > 1))]
                base = None
                for label, c in cands:
                    if c is None:
                        fns = [lambda r=r, f=region, a=x: f(a, *r) for r in sets]
                    else:
                        fns = [lambda r=r, c=c, a=x, m=mod, tl=tail: K.moe_experts(a, r[1], r[0], *op_args(m), *tl,
                                                                                   config=c) for r in sets]
                    got = fns[0]()
                    err = float((got.float() - eager).abs().max()) / scale
                    us = graph_time_us(cycler(fns), args.sets, args.reps)
                    base = us if base is None else base
                    gbs = nbytes / (us * 1e-6) / 1e9
                    rows.append({"model": name, "T": t, "impl": label, "us": round(us, 1),
                                 "vs_inductor": round(base / us, 2), "GB/s": round(gbs), "of_copy": round(gbs / bw, 2),
                                 "err": f"{err:.2g}", "compile_s": round(compile_s, 1) if c is None else ""})
                    print(rows[-1], flush=True)
        del mod, region
        torch.cuda.empty_cache()
    extra = [f"copy bandwidth {bw:.0f} GB/s; {torch.cuda.get_device_name()}; experts={args.experts}; "
             f"{args.sets} routings (expert ids) cycled per graph"]
    print(write_results(rows, args.out, "moe_experts", "MoE experts: ours vs Inductor's HF region", extra))


if __name__ == "__main__":
    main()
