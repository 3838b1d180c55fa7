"""Kernel benchmark: rms_norm and fused_add_rms_norm, ours per provider vs Inductor's kernel vs eager.

For every (M, H) the same HF-spelled eager code is timed three ways: eager, ``torch.compile`` with
``backend="inductor"`` (Inductor's generated Triton kernel), and our op ``rocm_fused::*`` with each usable
provider. Every variant is captured in a CUDA graph of ``--calls`` back-to-back calls and replayed; the
time per call is the median over ``--reps`` replays (CUDA events), so Python and launch overhead is out.
Bandwidth: bytes a perfect kernel must move (read x [+ residual] + write y [+ residual] + weight) divided by
the time, as a fraction of the device-to-device copy bandwidth measured in the same run.

    python benchmarks/ops/bench_rms_norm.py [--out benchmarks/results] [--quick]
"""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/
from timing import copy_bandwidth_gbs, graph_time_us  # noqa: E402  (benchmarks/timing.py)

import rocm_inductor  # noqa: F401  (registers the ops)
from rocm_inductor.platform import PlatformDispatch
from rocm_inductor.providers import get_provider

EPS = 1e-6


def hf_norm(x, w):
    """HF LlamaRMSNorm, as Inductor sees it in a model."""
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS)
    return w * h.to(x.dtype)


def hf_add_norm(x, r, w):
    """HF pre-norm residual add then RMSNorm: returns (normed, new residual)."""
    s = x + r
    return hf_norm(s, w), s


def make_variants(fused: bool, x, r, w, provs: list[str]) -> dict:
    """name -> zero-argument callable: eager, Inductor's kernel for the same code, our op per provider."""
    eager_fn = hf_add_norm if fused else hf_norm
    args = (x, r, w) if fused else (x, w)
    ind = torch.compile(eager_fn, backend="inductor", dynamic=False)
    variants = {"eager": lambda: eager_fn(*args), "inductor": lambda: ind(*args)}
    for p in provs:
        if fused:
            variants[p] = lambda p=p: torch.ops.rocm_fused.fused_add_rms_norm(x, r, w, EPS, 0.0, p)
        else:
            variants[p] = lambda p=p: torch.ops.rocm_fused.rms_norm(x, w, EPS, 0.0, p)
    return variants


def providers_for(op: str) -> list[str]:
    plat = PlatformDispatch.platform()
    names = []
    for name in ("flashinfer", "amd_flashinfer", "triton"):
        p = get_provider(name)
        if p.available(plat) is None and op in p.ops:
            names.append(name)
    return names


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--quick", action="store_true", help="fewer shapes (smoke run)")
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    Ms = [1, 32, 4096] if args.quick else [1, 32, 512, 4096, 16384]
    Hs = [4096] if args.quick else [2048, 4096, 8192]
    bw = copy_bandwidth_gbs() * 1e9
    dt = torch.bfloat16
    rows = []
    for fused in (False, True):
        op = "fused_add_rms_norm" if fused else "rms_norm"
        provs = providers_for(op)
        for H in Hs:
            w = (1 + 0.1 * torch.randn(H, device="cuda")).to(dt)
            for M in Ms:
                torch._dynamo.reset()
                x = torch.randn(M, H, device="cuda", dtype=dt)
                r = torch.randn(M, H, device="cuda", dtype=dt)
                variants = make_variants(fused, x, r, w, provs)
                nbytes = (4 if fused else 2) * M * H * x.element_size() + H * w.element_size()
                res = {}
                for name, fn in variants.items():
                    try:
                        res[name] = graph_time_us(fn, args.calls, args.reps)
                    except Exception as e:  # report, don't hide
                        print(f"# {op} M={M} H={H} {name}: {type(e).__name__}: {e}", file=sys.stderr)
                        res[name] = float("nan")
                for name, us in res.items():
                    rows.append({"op": op, "M": M, "H": H, "variant": name, "us": round(us, 2),
                                 "vs_inductor": round(res["inductor"] / us, 2) if us == us else "",
                                 "frac_copy_bw": round(nbytes / (us * 1e-6) / bw, 3) if us == us else ""})
                print(op, M, H, {k: round(v, 1) for k, v in res.items()}, flush=True)
    stamp = datetime.date.today().isoformat()
    gpu = torch.cuda.get_device_name()
    fi = get_provider("flashinfer").version()
    header = (f"rms_norm benchmark, {stamp}, {gpu}, torch {torch.__version__}, "
              f"triton {__import__('triton').__version__}, flashinfer {fi}; copy bandwidth {bw / 1e12:.2f} TB/s; "
              f"bf16; us per call (CUDA graph of {args.calls} calls, median of {args.reps} replays)")
    with open(os.path.join(args.out, "rms_norm.csv"), "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=list(rows[0]))
        wr.writeheader()
        wr.writerows(rows)
    # markdown: one row per (op, M, H), one column per variant (us and speedup vs inductor)
    names = sorted({r["variant"] for r in rows}, key=lambda n: ["eager", "inductor"].index(n)
                   if n in ("eager", "inductor") else 2)
    lines = [header, "", "| op | M | H | " + " | ".join(names) + " | best ours vs inductor | best ours % copy BW |",
             "|---|---|---|" + "---|" * (len(names) + 2)]
    keyed: dict = {}
    for r in rows:
        keyed.setdefault((r["op"], r["M"], r["H"]), {})[r["variant"]] = r
    for (op, M, H), d in keyed.items():
        ours = [d[n] for n in names if n not in ("eager", "inductor") and n in d and d[n]["us"] == d[n]["us"]]
        best = min(ours, key=lambda r: r["us"]) if ours else None
        cells = [f"{d[n]['us']:.1f}" if n in d else "-" for n in names]
        extra = [f"{best['vs_inductor']:.2f}x ({best['variant']})", f"{100 * best['frac_copy_bw']:.0f}%"] \
            if best else ["-", "-"]
        lines.append(f"| {op} | {M} | {H} | " + " | ".join(cells + extra) + " |")
    text = "\n".join(lines)
    with open(os.path.join(args.out, "rms_norm.md"), "w") as f:
        f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
