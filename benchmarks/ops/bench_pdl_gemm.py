"""Programmatic dependent launch (PDL) for the decode GEMV (issue 19): the merged q/k/v GEMM, PDL off vs on.

Llama-3.2-1B q/k/v at M = 1 (K 2048 -> N 2048 + 512 + 512, bf16, 12.6 MB of weights), our Triton merged GEMM
with its measured config (``gemm_merge_tuned.json``), us per call from CUDA-graph replays with the weights
rotated over copies > 2x L2 (``bench_decode_gemm._time_rotating``), ``gemm_knobs.Knobs.pdl`` False vs True:
  b2b    the GEMM back to back (one per weight copy in one graph): the most PDL can overlap;
  pair   a producer of x, then the GEMM reading x, repeated in one graph (what a decode step has):
         producer ``inductor``: a torch.compile'd add + RMSNorm (one Inductor Triton kernel, as in the step);
         ``aten``: ``torch.mul`` (an ATen elementwise kernel); also the producer alone, so
         ``gemm_in_pair = pair - producer``;
  numerics  PDL-on outputs vs PDL-off outputs, bitwise: eager calls, and 8 (producer, GEMM) pairs with
         different inputs replayed in one graph (a missing wait would read a stale x);
  edges  the captured graph's dependency edges (``cuGraphGetEdges_v2``): programmatic ones mean the capture
         kept the PDL launch attribute.
Weights are ``nn.Parameter`` (the launcher takes PDL only for parameters). Where PDL is not available (no
sm_90, ROCm, interpreter) the "on" rows equal "off" and say so.

    python benchmarks/ops/bench_pdl_gemm.py --out $OUT
    TRITON_INTERPRET=1 python benchmarks/ops/bench_pdl_gemm.py --device cpu --tiny --out /tmp/x    # smoke test
"""

from __future__ import annotations

import argparse
import ctypes
import os
import pathlib
import sys
import time

import torch

sys.path[:0] = [str(pathlib.Path(__file__).resolve().parents[i]) for i in (0, 1)]  # ops/, benchmarks/ (timing)
sys.path.insert(2, str(pathlib.Path(__file__).resolve().parents[2]))  # rocm_inductor without an install
from bench_decode_gemm import _copies, _time_rotating  # noqa: E402
from timing import versions, write_results  # noqa: E402

#: (K, Ns): Llama-3.2-1B q/k/v; the tiny smoke shape.
SHAPE = (2048, (2048, 512, 512))
TINY_SHAPE = (64, (64, 32, 32))


def _norm(h: torch.Tensor, r: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """Decode's add + RMSNorm (eps 1e-5) in float32, rounded to h's dtype (Inductor fuses it into one kernel)."""
    s = (h + r).float()
    return (s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + 1e-5) * g.float()).to(h.dtype)


def graph_edges(fn) -> dict | None:
    """Capture ``fn`` once (``keep_graph=True``) and count the graph's nodes and edge types through the driver's
    ``cuGraphGetEdges_v2`` (CUgraphEdgeData.type 1 = programmatic). None where that is unavailable."""
    try:
        g = torch.cuda.CUDAGraph(keep_graph=True)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            fn()
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(g):
            fn()
        raw = ctypes.c_void_p(g.raw_cuda_graph())
        lib = ctypes.CDLL("libcuda.so.1")
        get = lib.cuGraphGetEdges_v2
        n = ctypes.c_size_t(0)
        if get(raw, None, None, None, ctypes.byref(n)) != 0:
            return {"error": "cuGraphGetEdges_v2 count failed"}
        frm = (ctypes.c_void_p * max(n.value, 1))()
        to = (ctypes.c_void_p * max(n.value, 1))()
        data = (ctypes.c_ubyte * (8 * max(n.value, 1)))()  # CUgraphEdgeData: from_port, to_port, type, 5 reserved
        rc = get(raw, frm, to, data, ctypes.byref(n))
        if rc != 0:
            return {"error": f"cuGraphGetEdges_v2 rc {rc}"}
        types = [data[8 * i + 2] for i in range(n.value)]
        nn = ctypes.c_size_t(0)
        lib.cuGraphGetNodes(raw, None, ctypes.byref(nn))
        return {"nodes": nn.value, "edges": n.value, "programmatic": sum(t == 1 for t in types),
                "other": sum(t > 1 for t in types), "default": sum(t == 0 for t in types)}
    except Exception as e:  # an older torch (no keep_graph) or driver: not measured
        return {"error": f"{type(e).__name__}: {e}"[:160]}


def parse_pair_args(p: argparse.ArgumentParser, argv=None):
    """The PDL pair scripts' common flags (``--device``, ``--tiny``, ``--out``) on top of ``p``'s own; off CUDA
    the Triton interpreter is switched on. Returns (args, device, dtype (bf16 on CUDA, fp32 on CPU), K, Ns)."""
    p.add_argument("--device", default="cuda")
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--out", default="benchmarks/results")
    args = p.parse_args(argv)
    cuda = args.device == "cuda"
    if not cuda:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    k, ns = TINY_SHAPE if args.tiny else SHAPE
    return args, "cuda" if cuda else "cpu", torch.bfloat16 if cuda else torch.float32, k, ns


def main(argv=None) -> int:
    """Run the measurements; returns the process exit code."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--no-inductor", action="store_true", help="skip the torch.compile'd producer")
    args, dev, dtype, k, ns = parse_pair_args(p, argv)
    cuda = dev == "cuda"
    from rocm_inductor.providers.triton import gemm_knobs as knobs
    from rocm_inductor.providers.triton import gemm_merge as tg

    t0 = time.perf_counter()
    nbytes = sum(ns) * k * torch.finfo(dtype).bits // 8
    g = torch.Generator(device=dev).manual_seed(0)
    sets = [[torch.nn.Parameter(torch.randn(n, k, device=dev, dtype=dtype, generator=g) * 0.02,
                                requires_grad=False) for n in ns] for _ in range(_copies(nbytes, cuda))]
    nob = [None] * len(ns)
    x = torch.randn(1, k, device=dev, dtype=dtype)
    h, r = torch.randn(1, k, device=dev, dtype=dtype), torch.randn(1, k, device=dev, dtype=dtype)
    gw = torch.rand(k, device=dev, dtype=dtype) + 0.5
    avail = tg.pdl_available(x)
    cfg = tg.pick_config(x, sets[0], nob)
    print(f"{versions()}; PDL available: {avail}; config {cfg}; {len(sets)} weight copies", flush=True)
    producers = {"aten": lambda: torch.mul(h, gw)}
    if not args.no_inductor:
        try:
            comp = torch.compile(_norm, dynamic=False)
            comp(h, r, gw)
            producers["inductor"] = lambda: comp(h, r, gw)
        except Exception as e:  # not fatal: the ATen producer still runs
            print(f"inductor producer failed: {type(e).__name__}: {str(e)[:200]}", flush=True)
    rows = []
    # numerics first (eager; then replayed pairs with 8 different inputs)
    outs = {}
    hs = [torch.randn(1, k, device=dev, dtype=dtype) for _ in range(8)]
    for pdl in (False, True):
        with knobs.override(pdl=pdl):
            eager = tg.merged_gemm(x, sets[0], nob)
            if cuda:
                gr = torch.cuda.CUDAGraph()
                res = []
                with torch.cuda.graph(gr):
                    for i, hi in enumerate(hs):
                        res.append(tg.merged_gemm(torch.mul(hi, gw), sets[i % len(sets)], nob))
                gr.replay()
                torch.cuda.synchronize()
            else:
                res = [tg.merged_gemm(torch.mul(hi, gw), sets[i % len(sets)], nob) for i, hi in enumerate(hs)]
            outs[pdl] = (eager, res)
    same_eager = all(torch.equal(a, b) for a, b in zip(outs[False][0], outs[True][0]))
    same_graph = all(torch.equal(a, b) for ra, rb in zip(outs[False][1], outs[True][1]) for a, b in zip(ra, rb))
    ref = [torch.nn.functional.linear(torch.mul(hi, gw).float(), w.float()) for hi, w in
           zip(hs, [s[0] for s in (sets * 8)[:8]])]
    err = max(float((o[0].float() - f).abs().max()) for o, f in zip(outs[True][1], ref))
    print(f"numerics: PDL on == off bitwise: eager {same_eager}, 8 graph-replayed pairs {same_graph}; "
          f"max |on - fp32 ref| (q) {err:.3g}", flush=True)
    rows.append(dict(case="numerics", producer="", pdl="on vs off", us="",
                     note=f"bitwise eager {same_eager}, graph pairs {same_graph}; max|q - fp32| {err:.3g}"))
    for pdl in (False, True):
        with knobs.override(pdl=pdl):
            us = _time_rotating([lambda ws=ws: tg.merged_gemm(x, ws, nob) for ws in sets], cuda)
            rows.append(dict(case="b2b", producer="", pdl="on" if pdl else "off", us=round(us, 3), note=""))
            print(f"b2b pdl={pdl}: {us:.3f} us per GEMM", flush=True)
    for name, prod in producers.items():
        alone = _time_rotating([prod] * len(sets), cuda)
        rows.append(dict(case="producer alone", producer=name, pdl="", us=round(alone, 3), note=""))
        for pdl in (False, True):
            with knobs.override(pdl=pdl):
                us = _time_rotating([lambda ws=ws, pr=prod: tg.merged_gemm(pr(), ws, nob) for ws in sets], cuda)
                rows.append(dict(case="pair", producer=name, pdl="on" if pdl else "off", us=round(us, 3),
                                 note=f"gemm_in_pair {us - alone:.3f}"))
                print(f"pair {name} pdl={pdl}: {us:.3f} us per pair (producer alone {alone:.3f}, GEMM in pair "
                      f"{us - alone:.3f})", flush=True)
    if cuda:
        for pdl in (False, True):
            with knobs.override(pdl=pdl):
                prod = producers.get("inductor", producers["aten"])
                e = graph_edges(lambda pr=prod: [tg.merged_gemm(pr(), ws, nob) for ws in sets[:4]])
                rows.append(dict(case="graph edges (4 pairs)", producer="inductor" if "inductor" in producers
                                 else "aten", pdl="on" if pdl else "off", us="", note=str(e)))
                print(f"graph edges pdl={pdl}: {e}", flush=True)
    text = write_results(rows, args.out, "decode_gemm_pdl", f"PDL, merged q/k/v GEMM at M = 1 ({versions()})", [
        "", f"us per call (CUDA-graph replays, weights rotated over {len(sets)} copies); PDL available: {avail}; "
        f"config {cfg}; elapsed {time.perf_counter() - t0:.0f} s."])
    print(text, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
