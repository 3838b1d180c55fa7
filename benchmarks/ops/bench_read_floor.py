"""Streaming-read floor of the decode GEMMs' weights (issue 19): the fastest measured read of N bytes.

The q/k/v target (1.5x the HBM floor, 4.44 us for Llama-3.2-1B at M = 1) assumes the weights (12.6 MB) can be
read at the copy bandwidth. This measures, in the same harness as the per-layer GEMM numbers
(``bench_decode_gemm._time_rotating``: us per call from CUDA-graph replays, buffers rotated over copies
> 2x L2 so every call reads from HBM), the best read of the q/k/v weights' bytes and of gate/up's (67.1 MB):
  triton      a pure-load kernel (int64 loads, summed into one int64 per program: a few bytes written),
              over a few BLOCK / UNROLL / num_warps / programs configs (``programs = 0``: one BLOCK x UNROLL
              tile per program, every load of a program issued at once, as the full-K GEMV tile does);
  torch_sum   ``buf.view(torch.int64).sum()`` (ATen's reduction);
  half_copy   half the time of a device-to-device ``copy_`` of the buffer (reads + writes 2N bytes);
and the table's floor: N / the copy bandwidth (``timing.copy_bandwidth_gbs``, read + write counted).
Any kernel that reads each weight once needs at least the best of these per call.

PDL table (``decode_gemm_pdl_floor``; ``--pdl-only`` skips the sweep above): programmatic dependent launch
(Hopper; ``launch_pdl=True`` + ``gdc_launch_dependents()`` first, loads issued, ``gdc_wait()`` before the
store) of a few read configs, and the per-launch fixed cost in a graph: an empty kernel and a one-element read
(``PDL_LAUNCHES`` back-to-back launches per graph), each with PDL off and on. Where PDL is not available
(no sm_90, ROCm, the interpreter, a Triton without it) the "on" rows are left out.

    python benchmarks/ops/bench_read_floor.py --out $OUT
    TRITON_INTERPRET=1 python benchmarks/ops/bench_read_floor.py --device cpu --tiny --out /tmp/x   # smoke test
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys

import torch
import triton
import triton.language as tl

sys.path[:0] = [str(pathlib.Path(__file__).resolve().parents[i]) for i in (0, 1)]  # ops/, benchmarks/ (timing)
from bench_decode_gemm import _copies, _time_rotating  # noqa: E402
from timing import copy_bandwidth_gbs, versions, write_results  # noqa: E402

try:  # Hopper's grid dependency control (triton 3.6 and 3.9); absent: PDL rows are skipped
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait
except ImportError:
    gdc_launch_dependents = gdc_wait = None

#: Bytes read per call: Llama-3.2-1B q/k/v weights ((2048 + 512 + 512) x 2048 bf16) and gate/up (2 x 8192 x 2048).
SIZES = {"qkv_llama1b": (2048 + 512 + 512) * 2048 * 2, "gate_up_llama1b": 2 * 8192 * 2048 * 2}
TINY_SIZES = {"tiny": 3000 * 8}
#: (BLOCK int64 elements, UNROLL, num_warps, programs; 0 = one tile per program). BLOCK 1024 at 4 warps is
#: 8 int64 (4 x 16-byte loads) per thread per load; UNROLL independent loads in flight per loop step.
#: Programs 264 / 1056 = 2 / 8 per H200 SM (132). A guess at the space, not tuned elsewhere.
CONFIGS = [(b, u, w, p) for w in (4, 8) for b in (1024, 4096) for u in (1, 4) for p in (0, 264, 1056)
           if w * 32 <= 1024]


#: Read configs timed with PDL off and on: session 4's fastest q/k/v reads (``results/runs/read_floor.csv``:
#: BLOCK 4096 w8 tile 5.20 us, BLOCK 1024 w8 1056 programs 5.37 us) and the 4-warp tile (5.86 us).
PDL_CONFIGS = [(4096, 1, 8, 0), (1024, 1, 8, 1056), (1024, 1, 4, 0)]
#: Back-to-back launches per graph of the empty / one-element kernels (one graph replay each rep).
PDL_LAUNCHES = 200


@triton.jit
def _read_kernel(X, OUT, n, chunk, BLOCK: tl.constexpr, UNROLL: tl.constexpr, PDL: tl.constexpr):
    """Program ``pid`` sums (wrapping int64 adds) the int64 elements ``[pid * chunk, (pid + 1) * chunk)``
    (masked at ``n``), UNROLL loads of BLOCK per loop step, and stores one int64 to ``OUT[pid]``. ``PDL``:
    ``gdc_launch_dependents()`` first, ``gdc_wait()`` after the loads, before the store."""
    if PDL:
        gdc_launch_dependents()
    pid = tl.program_id(0)
    lo = pid.to(tl.int64) * chunk
    acc = tl.zeros((BLOCK,), dtype=tl.int64)
    for base in range(lo, lo + chunk, BLOCK * UNROLL):
        for u in tl.static_range(UNROLL):
            offs = base + u * BLOCK + tl.arange(0, BLOCK)
            acc += tl.load(X + offs, mask=offs < n, other=0)
    if PDL:
        gdc_wait()
    tl.store(OUT + pid, tl.sum(acc, axis=0))


@triton.jit
def _empty_kernel(OUT, READ: tl.constexpr, PDL: tl.constexpr):
    """One program: nothing (``READ`` False) or ``OUT[1] = OUT[0]`` (a one-element read and write); ``PDL``:
    ``gdc_launch_dependents()`` first and ``gdc_wait()`` before the write (and before anything else)."""
    if PDL:
        gdc_launch_dependents()
    if READ:
        v = tl.load(OUT)
        if PDL:
            gdc_wait()
        tl.store(OUT + 1, v)
    else:
        if PDL:
            gdc_wait()


def pdl_ok(x: torch.Tensor) -> bool:
    """PDL launches possible on ``x``'s device: ``gemm_merge.pdl_available`` (CUDA sm_90+, no interpreter, a
    Triton with ``launch_pdl`` and the gdc functions)."""
    from rocm_inductor.providers.triton import gemm_merge as tg

    return gdc_wait is not None and tg.pdl_available(x)


def read(x: torch.Tensor, out: torch.Tensor, block: int, unroll: int, warps: int, programs: int,
         pdl: bool = False) -> torch.Tensor:
    """Launch :func:`_read_kernel` over the int64 view of ``x`` (its byte size a multiple of 8); ``out`` holds
    >= the program count int64s. ``pdl``: its PDL form with ``launch_pdl=True`` (only where :func:`pdl_ok`).
    Returns the per-program sums (a view of ``out``, one per program)."""
    v = x.view(torch.int64)
    n = v.numel()
    step = block * unroll
    chunk = step if programs == 0 else triton.cdiv(triton.cdiv(n, programs), step) * step
    grid = triton.cdiv(n, chunk)
    extra = {"launch_pdl": True} if pdl else {}
    _read_kernel[(grid,)](v, out, n, chunk, BLOCK=block, UNROLL=unroll, PDL=pdl, num_warps=warps, **extra)
    return out[:grid]


def empty(out: torch.Tensor, read_one: bool, pdl: bool = False) -> None:
    """Launch :func:`_empty_kernel` once (one program, 1 warp) on ``out`` (>= 2 int64)."""
    extra = {"launch_pdl": True} if pdl else {}
    _empty_kernel[(1,)](out, READ=read_one, PDL=pdl, num_warps=1, **extra)


def aot_cases() -> list[dict]:
    """Compile cases of the read kernel (the preamble's format): the BLOCK / UNROLL / warps of :data:`CONFIGS`,
    the PDL forms of :data:`PDL_CONFIGS` and the empty / one-element kernels (PDL ones sm_90 only)."""
    sig = {"X": "*i64", "OUT": "*i64", "n": "i64", "chunk": "i64", "BLOCK": "constexpr", "UNROLL": "constexpr",
           "PDL": "constexpr"}
    seen = sorted({(b, u, w) for b, u, w, _ in CONFIGS})
    cases = [{"name": f"read_b{b}_u{u}_w{w}", "fn": _read_kernel, "signature": sig,
              "constexprs": {"BLOCK": b, "UNROLL": u, "PDL": False}, "num_warps": w} for b, u, w in seen]
    esig = {"OUT": "*i64", "READ": "constexpr", "PDL": "constexpr"}
    cases += [{"name": f"empty_read{int(r)}", "fn": _empty_kernel, "signature": esig,
               "constexprs": {"READ": r, "PDL": False}, "num_warps": 1} for r in (False, True)]
    if gdc_wait is not None:
        cases += [{"name": f"read_pdl_b{b}_u{u}_w{w}", "fn": _read_kernel, "signature": sig,
                   "constexprs": {"BLOCK": b, "UNROLL": u, "PDL": True}, "num_warps": w, "targets": ["sm_90"]}
                  for b, u, w in sorted({(b, u, w) for b, u, w, _ in PDL_CONFIGS})]
        cases += [{"name": f"empty_pdl_read{int(r)}", "fn": _empty_kernel, "signature": esig,
                   "constexprs": {"READ": r, "PDL": True}, "num_warps": 1, "targets": ["sm_90"]}
                  for r in (False, True)]
    return cases


def pdl_rows(sizes: dict[str, int], configs, cuda: bool, dev: str) -> list[dict]:
    """The PDL table's rows (see the module docstring): us per call, PDL off / on."""
    rows = []
    probe = torch.empty(2, dtype=torch.int64, device=dev)
    modes = [False, True] if pdl_ok(probe) else [False]
    out = torch.zeros(1 << 16, dtype=torch.int64, device=dev)
    launches = PDL_LAUNCHES if cuda else 4
    for read_one, name in ((False, "empty kernel"), (True, "one-element read")):
        for pdl in modes:
            us = _time_rotating([lambda p=pdl, r=read_one: empty(out, r, p)] * launches, cuda)
            rows.append(dict(bytes_name="launch", bytes=0 if not read_one else 8, method=name, config="1 warp",
                             pdl="on" if pdl else "off", us=round(us, 3), gbs=""))
            print(f"pdl {name:<16} pdl={rows[-1]['pdl']:<3} {us:8.3f} us per launch", flush=True)
    for name, nbytes in sizes.items():
        bufs = [torch.randint(0, 1 << 20, (nbytes // 8,), dtype=torch.int64, device=dev)
                for _ in range(_copies(nbytes, cuda))]
        want = int(bufs[0].sum())
        for b, u, w, progs in configs:
            for pdl in modes:
                c = (b, u, w, progs, pdl)
                if int(read(bufs[0], out, *c).sum()) != want:
                    raise RuntimeError(f"read kernel sum mismatch for {c}")
                us = _time_rotating([lambda x=x, c=c: read(x, out, *c) for x in bufs], cuda)
                rows.append(dict(bytes_name=name, bytes=nbytes, method="triton",
                                 config=f"BLOCK {b} UNROLL {u} w{w} programs {progs or 'tile'}",
                                 pdl="on" if pdl else "off", us=round(us, 3), gbs=round(nbytes / us / 1e3)))
                print(f"pdl {name} {rows[-1]['config']} pdl={rows[-1]['pdl']}: {us:.3f} us", flush=True)
        del bufs
        if cuda:
            torch.cuda.empty_cache()
    return rows


def main(argv=None) -> int:
    """Run the measurements; returns the process exit code."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--out", default="benchmarks/results")
    p.add_argument("--pdl-only", action="store_true", help="only the PDL table (no config sweep)")
    args = p.parse_args(argv)
    cuda = args.device == "cuda"
    if not cuda:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    dev = "cuda" if cuda else "cpu"
    sizes = TINY_SIZES if args.tiny else SIZES
    prow = pdl_rows(sizes if not args.pdl_only or args.tiny else {"qkv_llama1b": SIZES["qkv_llama1b"]},
                    [(64, 2, 4, 0)] if args.tiny else PDL_CONFIGS, cuda, dev)
    text = write_results(prow, args.out, "decode_gemm_pdl_floor", f"PDL read floor and launch cost ({versions()})",
                         ["", "us per call (CUDA-graph replays; reads rotated over copies > 2x L2; launch rows: "
                          f"{PDL_LAUNCHES} back-to-back launches per graph); pdl = launch_pdl + gdc_* in the kernel."])
    print(text, flush=True)
    if args.pdl_only:
        return 0
    bw = copy_bandwidth_gbs() if cuda else 10.0
    rows = []
    configs = CONFIGS if not args.tiny else [(64, 2, 4, 0), (64, 1, 4, 3)]
    for name, nbytes in sizes.items():
        bufs = [torch.randint(0, 1 << 20, (nbytes // 8,), dtype=torch.int64, device=dev)  # sums cannot overflow
                for _ in range(_copies(nbytes, cuda))]
        want = int(bufs[0].sum())
        out = torch.empty(1 << 16, dtype=torch.int64, device=dev)
        floor = nbytes / (bw * 1e3)
        rows.append(dict(bytes_name=name, bytes=nbytes, method="floor (copy bandwidth)", config=f"{bw:.0f} GB/s",
                         us=round(floor, 3), gbs=round(bw)))
        for b, u, w, progs in configs:
            if int(read(bufs[0], out, b, u, w, progs).sum()) != want:
                raise RuntimeError(f"read kernel sum mismatch for {(b, u, w, progs)}")
            us = _time_rotating([lambda x=x, o=out, c=(b, u, w, progs): read(x, o, *c) for x in bufs], cuda)
            rows.append(dict(bytes_name=name, bytes=nbytes, method="triton",
                             config=f"BLOCK {b} UNROLL {u} w{w} programs {progs or 'tile'}", us=round(us, 3),
                             gbs=round(nbytes / us / 1e3)))
        us = _time_rotating([lambda x=x: x.view(torch.int64).sum() for x in bufs], cuda)
        rows.append(dict(bytes_name=name, bytes=nbytes, method="torch_sum", config="view(int64).sum()",
                         us=round(us, 3), gbs=round(nbytes / us / 1e3)))
        dsts = [torch.empty_like(x) for x in bufs]
        us = _time_rotating([lambda x=x, d=d: d.copy_(x) for x, d in zip(bufs, dsts)], cuda) / 2
        rows.append(dict(bytes_name=name, bytes=nbytes, method="half_copy", config="copy_() / 2", us=round(us, 3),
                         gbs=round(nbytes / us / 1e3)))
        del bufs, dsts
        if cuda:
            torch.cuda.empty_cache()
        best = min((r for r in rows if r["bytes_name"] == name and r["method"] != "floor (copy bandwidth)"),
                   key=lambda r: r["us"])
        print(f"{name}: {nbytes} B, floor {floor:.3f} us; best read {best['us']} us ({best['method']} "
              f"{best['config']}, {best['gbs']} GB/s)", flush=True)
    text = write_results(rows, args.out, "decode_gemm_read_floor", f"Streaming-read floor ({versions()})", [
        "", "us per call (CUDA-graph replays, buffers rotated over copies > 2x L2); gbs = bytes / us (read only; "
        "the floor row: the copy bandwidth, read + write counted)."])
    print(text, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
