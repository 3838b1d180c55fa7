"""Benchmark the sigmoid output gate: ``rocm_fused::sigmoid_gate`` vs Inductor's fused elementwise kernel.

What it measures, per (tokens, width) in {(1, 4096), (32, 4096), (2048, 8192)}, bfloat16, on one GPU:
1. ``op``: the gate alone, ``y = x * sigmoid(g)`` on contiguous (tokens, width) tensors:
   - ``eager``: PyTorch eager (two kernels: sigmoid, mul);
   - ``inductor``: ``torch.compile(backend="inductor")`` of the same eager code (one fused Triton kernel);
   - ``ours[triton]``: ``torch.ops.rocm_fused.sigmoid_gate(x, g, "triton")`` (autotuned before capture);
   - ``ours[reference]``: the pure-torch reference provider (for completeness).
2. ``ctx``: the gate in its Qwen3-Next context, ``o_proj(attn * sigmoid(gate.reshape))`` where ``gate`` is the
   second half of each head of q_proj's output (a strided slice): Inductor fuses that slice's copy into its
   gate kernel; our pass cannot (the op takes contiguous inputs), so this row shows the whole cost:
   - ``inductor``: ``backend="rocm_fused"`` at level 0 (plain Inductor);
   - ``ours[triton]``: ``backend="rocm_fused"`` with the gate pass on and the Triton provider forced.
Every timing replays a captured CUDA graph of ``--inner`` calls (no launch overhead, no bare compiled
calls), median of ``--reps`` replays, per call. The bandwidth column is the bytes the gate must move
(read x and g, write y: 3 x tokens x width x 2 bytes) over the time, and its fraction of the device-to-device
copy bandwidth measured here the same way (H200: ~4.3 TB/s). Neither FlashInfer nor AITER has this op, so
no vendor provider appears (FlashInfer's presence is only reported).

Writes ``sigmoid_gate.md`` and ``sigmoid_gate.csv`` to ``--out`` (default benchmarks/results) and prints the
table. Runtime about a minute on an H200 (Inductor compiles and our autotuning included).

Usage: ``python benchmarks/ops/bench_sigmoid_gate.py [--out DIR] [--reps 30] [--inner 20]``
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from collections.abc import Callable

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/
from timing import copy_bandwidth_gbs, graph_time_us, write_results  # noqa: E402  (benchmarks/timing.py)

SHAPES = ((1, 4096), (32, 4096), (2048, 8192))
HEAD_DIM = 256  # Qwen3-Next's head_dim (16 heads x 256 = 4096)
DTYPE = torch.bfloat16
DEVICE = "cuda"  # a module global so a CPU smoke run can patch it


def _gate(x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """The eager gate as model code writes it (two kernels in eager; one fused kernel under Inductor)."""
    return x * torch.sigmoid(g)


def _bench_shape(tokens: int, width: int, add: Callable, args: argparse.Namespace) -> None:
    """Time every implementation of the gate alone and in context at (tokens, width); rows go to ``add``."""
    import rocm_inductor
    from rocm_inductor.providers.triton import sigmoid_gate as K

    torch._dynamo.reset()
    x = torch.randn(tokens, width, dtype=DTYPE, device=DEVICE)
    g = torch.randn(tokens, width, dtype=DTYPE, device=DEVICE)
    nbytes = 3 * x.numel() * x.element_size()
    ind = torch.compile(_gate, backend="inductor", dynamic=False)
    want = _gate(x, g)
    for impl, fn in (("eager", lambda: _gate(x, g)), ("inductor", lambda: ind(x, g)),
                     ("ours[triton]", lambda: torch.ops.rocm_fused.sigmoid_gate(x, g, "triton")),
                     ("ours[reference]", lambda: torch.ops.rocm_fused.sigmoid_gate(x, g, "reference"))):
        torch.testing.assert_close(fn(), want, rtol=1e-2, atol=1e-2)
        note = ""
        best = getattr(K._tuned_kernel, "best_config", None) if impl == "ours[triton]" else None
        if best is not None:
            note = f"tuned BLOCK={best.kwargs['BLOCK']} num_warps={best.num_warps}"
        add("op", tokens, width, impl, graph_time_us(fn, args.inner, args.reps), nbytes, note)

    # In context: Qwen3-Next's strided gate slice and o_proj.
    heads = width // HEAD_DIM
    qg = torch.randn(tokens, heads, 2 * HEAD_DIM, dtype=DTYPE, device=DEVICE)
    o_proj = torch.nn.Linear(width, 2048, bias=False, device=DEVICE, dtype=DTYPE)

    def ctx(attn, qg):
        gate_ = qg[..., HEAD_DIM:].reshape(attn.shape)
        return o_proj(attn * torch.sigmoid(gate_))

    variants = (("inductor", {"level": 0}),
                ("ours[triton]", {"passes": {"sigmoid_gate": True}, "providers": {"sigmoid_gate": "triton"}}))
    with torch.no_grad():
        want = ctx(x, qg)
        for impl, opts in variants:
            torch._dynamo.reset()
            fn = torch.compile(ctx, backend="rocm_fused", options=opts, dynamic=False)
            torch.testing.assert_close(fn(x, qg), want, rtol=2e-2, atol=2e-2)
            note = ""
            if impl.startswith("ours"):
                rep = rocm_inductor.last_report()
                note = f"rewrites={rep.count('sigmoid_gate') if rep else 0}"
            add("ctx", tokens, width, impl, graph_time_us(lambda fn=fn: fn(x, qg), args.inner, args.reps),
                nbytes, note + " (includes o_proj; bandwidth columns count the gate's bytes only)")


def bench(args: argparse.Namespace) -> list[dict]:
    import rocm_inductor  # noqa: F401  (registers the ops)
    from rocm_inductor.providers.triton import sigmoid_gate as K

    torch.manual_seed(0)
    copy_bw = copy_bandwidth_gbs(args.inner, args.reps)
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}  D2D copy {copy_bw:.0f} GB/s  "
          f"warp size {K.warp_size()}  configs kept {len(K.prune_configs(K.CONFIGS, K.warp_size()))}"
          f"/{len(K.CONFIGS)}  flashinfer {'present' if importlib.util.find_spec('flashinfer') else 'absent'}"
          " (has no gate op)")
    rows: list[dict] = []

    def add(kind, tokens, width, impl, t_us, gate_bytes, note=""):
        gbs = gate_bytes / (t_us * 1e-6) / 1e9
        rows.append({"kind": kind, "tokens": tokens, "width": width, "impl": impl, "us": round(t_us, 2),
                     "GB/s": round(gbs), "frac_copy_bw": round(gbs / copy_bw, 3), "note": note})

    for tokens, width in SHAPES:
        _bench_shape(tokens, width, add, args)
    return rows


def write(rows: list[dict], out: str) -> None:
    # Speed-up of ours over Inductor per (kind, shape): the number the CUDA policy entry needs.
    extra = [""]
    by = {(r["kind"], r["tokens"], r["width"], r["impl"]): r["us"] for r in rows}
    for (kind, t, w_, impl), us in by.items():
        if impl == "ours[triton]" and (kind, t, w_, "inductor") in by:
            extra.append(f"- {kind} {t}x{w_}: inductor {by[(kind, t, w_, 'inductor')]} us, ours[triton] {us} us, "
                         f"speed-up x{by[(kind, t, w_, 'inductor')] / us:.2f}")
    title = f"sigmoid_gate on {torch.cuda.get_device_name()} (torch {torch.__version__})"
    print(write_results(rows, out, "sigmoid_gate", title, extra))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "results"))
    p.add_argument("--reps", type=int, default=30, help="graph replays timed (median)")
    p.add_argument("--inner", type=int, default=20, help="calls captured per graph")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_sigmoid_gate: needs a CUDA or ROCm GPU", file=sys.stderr)
        return 2
    write(bench(args), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
