"""Benchmark: HF top-k/top-p sampling (T=0.7, k=50, p=0.9) per provider vs eager vs Inductor, CUDA-graph timed.

Rows per (B, V) in {1, 16, 64} x {32000, 128256, 151936}, float32 logits:
- eager: HF's chain (TemperatureLogitsWarper -> TopK -> TopP -> softmax -> multinomial);
- inductor: ``torch.compile(chain, dynamic=True)`` (a crash is reported as a crash: torch 2.11 failed in
  SplitScan codegen here, DEVICE.md);
- rocm_fused: the same chain compiled by our backend with the sampling pass on (the platform's provider
  order; FlashInfer 0.5.3 is chosen where nothing asks for CUDA graphs, and cannot then be captured);
- rocm_fused[triton]: the same with our capture-safe Triton provider forced;
- op[<provider>]: ``rocm_fused::sample`` called directly with each usable provider (triton, flashinfer...).
Every row is timed over a captured CUDA graph of ``ITERS`` calls (torch.cuda.Event); a callable that can't
be captured (FlashInfer 0.5.3 reads host generator state) is timed as an event-bracketed eager loop and
marked ``(eager loop)``. ``%copy`` = bytes of the logits read once / time / measured D2D copy bandwidth.

    python benchmarks/bench_sampling.py [--out benchmarks/results] [--quick]
Writes ``sampling.md`` and ``sampling.csv`` under ``--out``. Needs a GPU; FlashInfer optional.
"""

from __future__ import annotations

import argparse
import csv
import pathlib
import time

import torch
from timing import copy_bandwidth_gbs, graph_time_us, time_call  # noqa: E402  (benchmarks/timing.py)

import rocm_inductor  # noqa: F401  (registers the ops)

T, K, P = 0.7, 50, 0.9
ITERS = 20


def hf_chain(logits: torch.Tensor) -> torch.Tensor:
    """HF generate's sampling step on (B, V) logits."""
    scores = logits.float() / T
    scores = scores.masked_fill(scores < torch.topk(scores, K)[0][..., -1, None], -float("inf"))
    sorted_logits, sorted_indices = torch.sort(scores, descending=False)
    remove = sorted_logits.softmax(-1).cumsum(-1) <= (1 - P)
    remove[..., -1:] = 0
    scores = scores.masked_fill(remove.scatter(1, sorted_indices, remove), -float("inf"))
    return torch.multinomial(torch.softmax(scores, -1), 1).squeeze(1)


def time_us(fn) -> tuple[float, str]:
    """Per-call time in us over a captured graph of ITERS calls, else (not capturable) an eager loop."""
    try:
        return graph_time_us(fn, ITERS, 5), "graph"
    except Exception as e:  # not capturable: time the eager loop instead
        torch.cuda.synchronize()
        return time_call(fn, ITERS, 1, True)[0], f"eager loop ({type(e).__name__})"


def usable_providers() -> list[str]:
    from rocm_inductor import PlatformDispatch
    from rocm_inductor.providers import get_provider

    plat = PlatformDispatch.platform()
    return [n for n in ("triton", "flashinfer", "amd_flashinfer") if get_provider(n).available(plat) is None]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--quick", action="store_true", help="B=1 and V=151936 only")
    args = ap.parse_args()
    assert torch.cuda.is_available(), "needs a GPU"
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    bw = copy_bandwidth_gbs() * 1e9  # bytes/s
    provs = usable_providers()
    t0 = time.time()
    inductor = torch.compile(hf_chain, dynamic=True)
    on = {"passes": {"sampling": True}}  # off by default on CUDA (policy.py): measured here to decide
    ours = torch.compile(hf_chain, backend="rocm_fused", options=on, dynamic=True)
    ours_triton = torch.compile(hf_chain, backend="rocm_fused", options={**on, "providers": {"sample": "triton"}},
                                dynamic=True)
    rows = []
    shapes = [(1, 151936)] if args.quick else [(b, v) for v in (32000, 128256, 151936) for b in (1, 16, 64)]
    for b, v in shapes:
        x = torch.randn(b, v, device="cuda") * 3
        cands = {"eager": lambda x=x: hf_chain(x), "inductor": lambda x=x: inductor(x),
                 "rocm_fused": lambda x=x: ours(x), "rocm_fused[triton]": lambda x=x: ours_triton(x)}
        for p in provs:
            def op(x=x, p=p):
                seed = torch.randint(0, 2**31 - 1, (1,), device="cuda", dtype=torch.int64)
                return torch.ops.rocm_fused.sample(x, seed, None, T, None, K, None, P, None, 0.0, None, False,
                                                   True, False, p)
            cands[f"op[{p}]"] = op
        for name, fn in cands.items():
            try:
                with torch.no_grad():
                    us, how = time_us(fn)
                frac = b * v * 4 / (us * 1e-6) / bw
                rows.append(dict(B=b, V=v, impl=name, us=f"{us:.1f}", pct_copy=f"{100 * frac:.1f}", timing=how))
            except Exception as e:  # report crashes as crashes
                msg = f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"
                rows.append(dict(B=b, V=v, impl=name, us="crash", pct_copy="", timing=msg))
            print(rows[-1], flush=True)
    with open(out / "sampling.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    lines = [f"# Sampling (T={T}, k={K}, p={P}), {torch.cuda.get_device_name()}, torch {torch.__version__}",
             f"copy bandwidth {bw / 1e12:.2f} TB/s; providers usable: {provs}; total {time.time() - t0:.0f} s", "",
             "| B | V | impl | us | % copy BW | timing |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['B']} | {r['V']} | {r['impl']} | {r['us']} | {r['pct_copy']} | {r['timing']} |" for r in rows]
    (out / "sampling.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
