"""Tensor-parallel benchmark: all-reduce + residual add + RMSNorm as one op vs the unfused sequence (2 ranks).

For each (tokens, hidden) the same eager code, ``s = all_reduce(x) + residual; y = HF RMSNorm(s)`` with the
all-reduce as ``_c10d_functional.all_reduce`` (what a TP model's graph holds), is timed as:
- ``eager``: that code run eagerly (NCCL all-reduce, then ATen ops);
- ``inductor``: ``torch.compile(backend="inductor")`` of it (NCCL all-reduce + Inductor's fused add+norm kernel);
- ``rocm_fused``: ``torch.compile(backend="rocm_fused")`` with the ``all_reduce_norm`` pass on (the pass rewrites
  it to ``rocm_fused::all_reduce_add_rms_norm`` with the platform's provider; on CPU the reference);
- ``op:<provider>``: our op called directly, per usable provider (``reference`` = NCCL all-reduce + our
  fused add+norm reference; ``flashinfer`` = TRT-LLM all-reduce fusion, IPC workspace, no multicast);
- ``all_reduce_only``: the all-reduce alone (the floor any unfused sequence pays).
On a GPU each variant is captured in one CUDA graph of ``--calls`` back-to-back calls (after a warm-up on a
side stream, which also creates FlashInfer's workspace outside capture) and replayed ``--reps`` times; the
time per call is the median replay time, and the row keeps the slower rank's value (max over ranks). Every
variant's (y, s) is checked against the eager run's first.

Run (2 GPUs; NVLink multicast stays off):
    TORCH_SYMM_MEM_DISABLE_MULTICAST=1 torchrun --nproc-per-node 2 benchmarks/ops/bench_tp.py --out benchmarks/results
CPU smoke (gloo, tiny shapes, wall-clock timing, no CUDA graphs):
    torchrun --nproc-per-node 2 benchmarks/ops/bench_tp.py --device cpu --quick --out /tmp/tp
Writes ``<out>/tp.csv`` (columns ``tokens,hidden,config,us``) and ``<out>/tp.md`` from rank 0.
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/: timing
from timing import graph_time_us, write_results  # noqa: E402  (benchmarks/timing.py)

import rocm_inductor  # noqa: E402,F401  (registers the ops)
from rocm_inductor.platform import PlatformDispatch  # noqa: E402
from rocm_inductor.providers import get_provider  # noqa: E402

EPS = 1e-6
OP = "all_reduce_add_rms_norm"


def unfused(x: torch.Tensor, r: torch.Tensor, w: torch.Tensor, group_name: str):
    """The eager TP sequence: functional all-reduce, residual add in the model dtype, HF LlamaRMSNorm."""
    fc = torch.ops._c10d_functional
    s = fc.wait_tensor(fc.all_reduce(x, "sum", group_name)) + r
    h = s.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS)
    return w * h.to(s.dtype), s


def providers_for(device: str) -> list[str]:
    """Providers of the op usable here (``reference`` always; vendors when importable on this platform)."""
    plat = PlatformDispatch.platform()
    names = ["reference"]
    for name in ("flashinfer", "aiter"):
        p = get_provider(name)
        if device != "cpu" and p.available(plat) is None and OP in p.ops:
            names.append(name)
    return names


def variants(x, r, w, group_name: str, device: str) -> dict:
    """config name -> zero-argument callable returning (y, s) (``all_reduce_only`` returns the sum)."""
    fc = torch.ops._c10d_functional
    ind = torch.compile(unfused, backend="inductor", dynamic=False)
    opts = {"passes": {"all_reduce_norm": True, "rms_norm": True}}
    if device == "cpu":
        opts["provider"] = "reference"
    ours = torch.compile(unfused, backend="rocm_fused", options=opts, dynamic=False)
    out = {
        "eager": lambda: unfused(x, r, w, group_name),
        "inductor": lambda: ind(x, r, w, group_name),
        "rocm_fused": lambda: ours(x, r, w, group_name),
        "all_reduce_only": lambda: fc.wait_tensor(fc.all_reduce(x, "sum", group_name)),
    }
    for p in providers_for(device):
        out[f"op:{p}"] = lambda p=p: torch.ops.rocm_fused.all_reduce_add_rms_norm(x, r, w, EPS, 0.0, group_name, p)
    return out


def wall_time_us(fn, calls: int, reps: int) -> float:
    """CPU: median wall-clock microseconds per call over ``reps`` rounds of ``calls`` calls (after 3 warm-ups)."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        dist.barrier()
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t) * 1e6 / calls)
    return statistics.median(times)


def check(name: str, got, ref, tokens: int, hidden: int) -> None:
    """(y, s) of a variant vs eager's: s within an ulp of the addends, y within bf16 rounding."""
    if name == "all_reduce_only":
        return
    y, s = got
    ey, es = ref
    ulp = torch.finfo(es.dtype).eps
    bad_s = float(((s.float() - es.float()).abs() - ulp * 2 * es.float().abs()).max())
    bad_y = float((y.float() - ey.float()).abs().max())
    if bad_s > 1e-3 or bad_y > 0.1:
        print(f"# MISMATCH tokens={tokens} hidden={hidden} {name}: residual excess {bad_s:.3g}, "
              f"norm max diff {bad_y:.3g}", file=sys.stderr, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--quick", action="store_true", help="fewer shapes (smoke run)")
    ap.add_argument("--calls", type=int, default=20, help="calls per CUDA graph (CPU: per timed round)")
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()

    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    cuda = args.device == "cuda"
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world)
    group_name = dist.group.WORLD.group_name
    dev = torch.device("cuda" if cuda else "cpu")
    tokens_list = [1, 8] if args.quick else [1, 8, 32, 128, 512]
    hiddens = ([256] if not cuda else [4096]) if args.quick else [2048, 4096, 8192]
    dt = torch.bfloat16
    rows = []
    try:
        for hidden in hiddens:
            torch.manual_seed(0)
            w = (1 + 0.1 * torch.randn(hidden)).to(dt).to(dev)
            for tokens in tokens_list:
                torch._dynamo.reset()
                torch.manual_seed(1 + rank)  # each rank's partial sum differs
                x = torch.randn(tokens, hidden, dtype=dt).to(dev)
                torch.manual_seed(0)
                r = torch.randn(tokens, hidden, dtype=dt).to(dev)
                vs = variants(x, r, w, group_name, args.device)
                ref = vs["eager"]()
                start = len(rocm_inductor.reports())
                with torch._inductor.config.patch(force_disable_caches=True):  # a cache hit skips our pass
                    vs["rocm_fused"]()  # compile now, to say what the pass did with this shape
                if rank == 0:
                    reps = rocm_inductor.reports()[start:]
                    done = sum(g.count(OP) for g in reps)
                    why = "; ".join(m.reason for g in reps for m in g.near_misses if m.pass_name == "all_reduce_norm")
                    print(f"# tokens={tokens} hidden={hidden}: rocm_fused rewrote {done} "
                          f"({[g.providers().get(OP) for g in reps]}) {why}", flush=True)
                res = {}
                for name, fn in vs.items():
                    dist.barrier()
                    try:
                        check(name, fn(), ref, tokens, hidden)
                        us = graph_time_us(fn, args.calls, args.reps) if cuda else \
                            wall_time_us(fn, args.calls, args.reps)
                    except Exception as e:  # report, don't hide; every rank fails the same way
                        print(f"# rank {rank} tokens={tokens} hidden={hidden} {name}: {type(e).__name__}: {e}",
                              file=sys.stderr, flush=True)
                        us = float("nan")
                    t = torch.tensor([us], dtype=torch.float64, device=dev)
                    dist.all_reduce(t, op=dist.ReduceOp.MAX)  # the slower rank's time (NaN stays NaN)
                    res[name] = float(t.item())
                for name, us in res.items():
                    rows.append({"tokens": tokens, "hidden": hidden, "config": name, "us": round(us, 2)})
                if rank == 0:
                    print("tp", tokens, hidden, {k: round(v, 1) for k, v in res.items()}, flush=True)
        if rank == 0 and rows:
            fi = get_provider("flashinfer").version() if cuda else "-"
            name = torch.cuda.get_device_name() if cuda else "cpu (gloo)"
            timing = (f"CUDA graph of {args.calls} calls, median of {args.reps} replays" if cuda
                      else f"wall clock, {args.calls} calls x {args.reps} rounds")
            extra = ["", f"{datetime.date.today().isoformat()}, {world} x {name}, torch {torch.__version__}, "
                     f"flashinfer {fi}; bf16; us per call ({timing}), slower rank."]
            print(write_results(rows, args.out, "tp", "all-reduce + residual add + RMSNorm (TP)", extra))
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
