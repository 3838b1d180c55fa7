"""RMSNorm as the merged GEMM's prologue (issue 19, ``rocm_fused::rms_norm_gemm``): the norm + projection pair.

Per model shape (Llama-3.2-1B, Qwen3-0.6B) and group (q/k/v, gate/up) at M = ``--buckets`` (bf16, one token per
sequence), us per call from CUDA-graph replays (CUDA events), the weights rotated over copies > 2x L2 (every
GEMM streams its weights from HBM; ``bench_decode_gemm._copies``), ``PAIRS`` calls per graph:
  gemm alone        our merged GEMM back to back (x ready);
  norm ours / ind   the add + RMSNorm alone: our Triton kernel (the rms_norm pass's), Inductor's compiled one;
  pair ours         our add + RMSNorm then our merged GEMM (rms_norm + gemm_merge: two launches);
  pair inductor     Inductor's add + RMSNorm then our merged GEMM (gemm_merge alone: two launches);
  fused             ``rms_norm_gemm``: one launch where the GEMM's config takes the prologue, else two;
  floor             weights + activations at the copy bandwidth measured here;
  fused nB wW       (``--tiles``) every full-K GEMV tile (BLOCK_N B, W warps of ``--warps``, no K split) with
                    the prologue, next to the same tile's GEMM alone.
``--repeat R`` runs everything R times in the process (column ``run``) and ends with the q/k/v and gate/up share
(fused - our norm alone, the shipped config) of every run: min / median / max and their multiple of the floor.
The q/k/v projection's cost per layer is reported as ``fused - norm alone`` (the norm's standalone time is what
a step would still pay with no projection after it; issue 19's q/k/v target is <= 1.5x the floor).
Numerics: the fused outputs vs the two-launch pair (max |diff| of the GEMM outputs, ``s`` bitwise) and vs the
float64 reference of norm + GEMMs (max |diff| / max |ref|, next to the pair's own).

    python benchmarks/ops/bench_norm_gemm_pair.py --out $OUT [--buckets 1,8] [--models llama,qwen3]
    TRITON_INTERPRET=1 python benchmarks/ops/bench_norm_gemm_pair.py --device cpu --tiny --out /tmp/x   # smoke test
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys
import tempfile
import time

os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="inductor_normgemm_"))

import torch  # noqa: E402

sys.path[:0] = [str(pathlib.Path(__file__).resolve().parents[i]) for i in (0, 1)]  # ops/, benchmarks/ (timing)
sys.path.insert(2, str(pathlib.Path(__file__).resolve().parents[2]))  # rocm_inductor without an install
from bench_decode_gemm import SHAPES, TINY_SHAPES, _cfg_str, _copies, _time_rotating  # noqa: E402
from bench_pdl_gemm import _norm, parse_pair_args  # noqa: E402
from timing import copy_bandwidth_gbs, versions, write_results  # noqa: E402

#: calls per captured graph (and at most this many weight copies).
PAIRS = 16
EPS = 1e-5


def groups(model: str, tiny: bool) -> dict[str, tuple[int, tuple[int, ...]]]:
    """(K, Ns) of the q/k/v and gate/up groups of a model shape."""
    hidden, q, kv, inter, _ = (TINY_SHAPES if tiny else SHAPES)[model]
    return {"qkv": (hidden, (q, kv, kv)), "gate_up": (hidden, (inter, inter))}


def bucket(add, model, group, m, k, ns, sets, gw, cuda, bw, tiles=False, warps=(4, 8)) -> None:
    """The rows of one (model, group, M): numerics, then the timings (module docstring)."""
    from rocm_inductor.providers.reference import rms_norm_gemm_ref
    from rocm_inductor.providers.triton import gemm_configs as tgc
    from rocm_inductor.providers.triton import gemm_merge as tg
    from rocm_inductor.providers.triton import norm_gemm as tng
    from rocm_inductor.providers.triton import rms_norm as trms

    dev, dtype = gw.device, gw.dtype
    nbytes = sum(ns) * k * torch.finfo(dtype).bits // 8
    nob = [None] * len(ns)
    h = torch.randn(m, k, device=dev, dtype=dtype)
    r = torch.randn(m, k, device=dev, dtype=dtype)
    cfg = tg.pick_config(h, sets[0], nob)  # the GEMM's own (the "gemm alone" row)
    fcfg = tng.pick_config(h, sets[0], nob)  # what the fused op runs
    fits = tng.one_launch(fcfg, m, k)
    floor = (nbytes + (2 * m * k + m * sum(ns)) * torch.finfo(dtype).bits // 8) / (bw * 1e3)
    ind = torch.compile(_norm, dynamic=False)
    ind(h, r, gw)

    def ours_norm():
        return trms.fused_add_rms_norm(h, r, gw, EPS, 0.0)

    # numerics first (one weight set): fused vs the two-launch pair vs float64
    y, s = ours_norm()
    pair = tg.merged_gemm(y, sets[0], nob)
    fused = tng.rms_norm_gemm(h, r, gw, EPS, 0.0, sets[0], nob)
    ref = rms_norm_gemm_ref(h.double(), r.double(), gw.double(), EPS, 0.0,
                            [w.double() for w in sets[0]], nob)
    d_pair = max(float((a.float() - b.float()).abs().max()) for a, b in zip(fused[:-1], pair, strict=True))
    rel = lambda outs: max(float((a.double() - b).abs().max() / b.abs().max())  # noqa: E731
                           for a, b in zip(outs, ref[:-1], strict=True))
    add(model, group, m, "numerics", "",
        f"fused vs pair max|diff| {d_pair:.3g}; s bitwise {torch.equal(fused[-1], s)}; rel err vs fp64 "
        f"fused {rel(fused[:-1]):.3g} pair {rel(pair):.3g}")
    alone = {"ours": _time_rotating([ours_norm] * PAIRS, cuda),
             "inductor": _time_rotating([lambda: ind(h, r, gw)] * PAIRS, cuda)}
    gemm = _time_rotating([lambda ws=ws: tg.merged_gemm(h, ws, nob) for ws in sets], cuda)
    add(model, group, m, "gemm alone", gemm, f"config {cfg}; floor {floor:.3f} us ({gemm / floor:.2f}x)")
    add(model, group, m, "norm ours", alone["ours"])
    add(model, group, m, "norm inductor", alone["inductor"])
    po = _time_rotating([lambda ws=ws: tg.merged_gemm(ours_norm()[0], ws, nob) for ws in sets], cuda)
    add(model, group, m, "pair ours", po, f"share {po - alone['ours']:.3f}")
    pi = _time_rotating([lambda ws=ws: tg.merged_gemm(ind(h, r, gw), ws, nob) for ws in sets], cuda)
    add(model, group, m, "pair inductor", pi, f"share {pi - alone['inductor']:.3f}")
    fu = _time_rotating([lambda ws=ws: tng.rms_norm_gemm(h, r, gw, EPS, 0.0, ws, nob) for ws in sets],
                        cuda)
    add(model, group, m, "fused", fu,
        f"{'one launch' if fits else 'two launches (config takes no prologue)'} ({_cfg_str(fcfg)}); share vs our norm "
        f"{fu - alone['ours']:.3f} ({(fu - alone['ours']) / floor:.2f}x floor), vs Inductor's "
        f"{fu - alone['inductor']:.3f} ({(fu - alone['inductor']) / floor:.2f}x); saves "
        f"{po - fu:.3f} vs pair ours, {pi - fu:.3f} vs pair inductor")
    add(model, group, m, "floor", floor)
    if tiles and cuda and m <= tgc.GEMV_MAX_M:
        for bn, bk, nw in tgc.gemv_full_tiles(m, k, 1, 32, warps):
            c = tgc.Config(tgc._pow2_at_least(m), bn, bk, 1, nw, 1, False, False, True, True)
            try:
                b2b = _time_rotating([lambda ws=ws, c=c: tg.launch(h, ws, nob, c) for ws in sets], cuda)
                fc = _time_rotating([lambda ws=ws, c=c: tng.rms_norm_gemm(h, r, gw, EPS, 0.0, ws, nob, config=c)
                                     for ws in sets], cuda)
            except Exception as ex:  # a tile this device cannot compile: listed, not fatal
                add(model, group, m, f"tile n{bn} w{nw}", "", f"failed: {type(ex).__name__}: {str(ex)[:80]}")
                continue
            add(model, group, m, f"fused n{bn} w{nw}", fc,
                f"gemm alone {b2b:.3f}; saves {po - fc:.3f} vs pair ours; share vs our norm {fc - alone['ours']:.3f} "
                f"({(fc - alone['ours']) / floor:.2f}x floor)")


def main(argv=None) -> int:
    """Run the measurements; returns the process exit code."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default="llama,qwen3")
    p.add_argument("--groups", default="qkv,gate_up")
    p.add_argument("--buckets", default="1")
    p.add_argument("--tiles", action="store_true", help="also every full-K GEMV tile with the prologue (M <= 8)")
    p.add_argument("--warps", default="4,8", help="warp counts of the --tiles sweep")
    p.add_argument("--repeat", type=int, default=1, help="run everything this many times (column run)")
    args, dev, dtype, _, _ = parse_pair_args(p, argv)  # --device / --tiny / --out; its own (K, N) shape unused
    cuda = dev == "cuda"
    t0 = time.perf_counter()
    bw = copy_bandwidth_gbs() if cuda else 1.0
    print(f"{versions()}; copy bandwidth {bw:.0f} GB/s", flush=True)
    rows = []
    state = {"run": 0}

    def add(model, group, m, case, us, note=""):
        run = state["run"]
        rows.append(dict(run=run, model=model, group=group, m=m, case=case, us=round(us, 3) if us != "" else "",
                         note=note))
        print(f"{run} {model:<6} {group:<8} M={m:<3} {case:<16} {us if us == '' else f'{us:8.3f}'} us  {note}",
              flush=True)

    warps = tuple(int(w) for w in args.warps.split(","))
    for state["run"] in range(args.repeat):
        measure(args, add, dev, dtype, cuda, bw, warps)
    text = write_results(rows, args.out, "norm_gemm_pair", f"RMSNorm prologue + merged GEMM ({versions()})",
                         ["", f"us per call (CUDA-graph replays, {PAIRS} calls per graph, weights rotated); copy "
                          f"bandwidth {bw:.0f} GB/s; elapsed {time.perf_counter() - t0:.0f} s.", "",
                          *share_summary(rows)])
    print(text, flush=True)
    return 0


def share_summary(rows: list[dict]) -> list[str]:
    """Per (model, group, M): the shipped fold's share (fused - our norm alone) over the runs, vs the floor."""
    import statistics

    out = []
    for key in sorted({(r["model"], r["group"], r["m"]) for r in rows}):
        pick = lambda case, key=key: {r["run"]: r["us"] for r in rows  # noqa: E731
                             if (r["model"], r["group"], r["m"]) == key and r["case"] == case and r["us"] != ""}
        fused, norm, floor = pick("fused"), pick("norm ours"), pick("floor")
        shares = [fused[i] - norm[i] for i in sorted(fused) if i in norm]
        if not shares or not floor:
            continue
        fl = statistics.median(floor.values())
        lo, med, hi = min(shares), statistics.median(shares), max(shares)
        out.append(f"- {key[0]} {key[1]} M={key[2]}: share (fused - norm ours) over {len(shares)} run(s) min / median /"
                   f" max {lo:.3f} / {med:.3f} / {hi:.3f} us = {lo / fl:.2f}x / {med / fl:.2f}x / {hi / fl:.2f}x"
                   f" the {fl:.3f} us floor")
    return out


def measure(args, add, dev, dtype, cuda, bw, warps) -> None:
    """One run over every model, group and bucket."""
    for model in args.models.split(","):
        for group in args.groups.split(","):
            k, ns = groups(model, args.tiny)[group]
            nbytes = sum(ns) * k * torch.finfo(dtype).bits // 8
            g = torch.Generator(device=dev).manual_seed(0)
            copies = min(PAIRS, _copies(nbytes, cuda))
            sets = [[torch.nn.Parameter(torch.randn(n, k, device=dev, dtype=dtype, generator=g) * 0.02,
                                        requires_grad=False) for n in ns] for _ in range(copies)]
            sets = (sets * PAIRS)[:PAIRS] if cuda else sets
            gw = torch.rand(k, device=dev, dtype=dtype) + 0.5
            for m in (int(b) for b in args.buckets.split(",")):
                bucket(add, model, group, m, k, ns, sets, gw, cuda, bw, args.tiles, warps)


if __name__ == "__main__":
    sys.exit(main())
