"""Issue 14, session 6: does every sampler path scale the logits to the same float? One mode per process.

Modes (how ``x / T`` is computed, and FP contraction): ``div`` (shipped: ``x / T``, contraction off),
``div_fuse`` (before session 6: contraction on), ``recip`` / ``recip_fuse`` (``x * div_rn(1, T)``), ``div_rn``
(IEEE division). Prints the token mismatches of the row path and the chain against the plain search (min-p 1 /
0.5 and top-p 0.4 at T = 0.8 / 0.7 / 0.3; min-p 1 keeps only the row max, so any disagreement on the max shows)
and op times in a CUDA graph. H200 results: benchmarks/RESULTS.md, "Issue 14, session 6".

    python benchmarks/probe_sampling_fp.py div        # on a GPU; TRITON_CACHE_DIR per mode is safest
"""
import sys

import torch
import triton
import triton.language as tl

sys.path.insert(0, "benchmarks")
from timing import graph_time_us  # noqa: E402

from rocm_inductor.providers.triton import sampling as S  # noqa: E402
from rocm_inductor.providers.triton import sampling_rows as R  # noqa: E402


@triton.jit
def _div(x, t):
    return x / t


@triton.jit
def _recip(x, t):
    return x * tl.math.div_rn(1.0, t)


@triton.jit
def _div_rn(x, t):
    return tl.math.div_rn(x, t)


def main(mode: str) -> None:
    S._scaled = R._scaled = {"div": _div, "div_fuse": _div, "recip": _recip, "recip_fuse": _recip,
                             "div_rn": _div_rn}[mode]
    S.FP_OPTIONS["enable_fp_fusion"] = mode.endswith("_fuse")  # the dict every launch unpacks
    g = torch.Generator().manual_seed(11)

    def draw(x, seed, t, mp, p):
        sd = torch.tensor([seed], dtype=torch.int64, device=x.device)
        return S.sample(x, sd, None, t, None, 0, None, p, mp, 0.0, None, False, True).cpu()
    bad = tot = 0
    for b, v in ((17, 7), (24, 603), (8, 128256)):
        x = (torch.randn(b, v, generator=g) * 3).cuda()
        for t in (0.8, 0.7, 0.3):
            for mpv, p in ((1.0, 1.0), (0.5, 1.0), (0.0, 0.4)):
                mp = torch.full((b,), mpv, device="cuda") if mpv > 0 else None
                for seed in range(4):
                    R.ROW_PATH = True
                    rows = draw(x, seed, t, mp, p)
                    R.ROW_PATH, S.WINNER = False, False
                    ref = draw(x, seed, t, mp, p)
                    S.WINNER = True
                    chain = draw(x, seed, t, mp, p)
                    R.ROW_PATH = None
                    bad += int((rows != ref).sum()) + int((chain != ref).sum())
                    tot += 2 * b
    print(f"MODE {mode}: rows/chain != plain search {bad} of {tot}", flush=True)
    torch.manual_seed(0)
    out = []
    for v, b, k, p, mp in ((128256, 32, 0, 0.9, 0.0), (128256, 64, 0, 0.9, 0.0), (32000, 64, 0, 0.9, 0.0),
                           (128256, 8, 0, 0.9, 0.0), (128256, 32, 50, 0.9, 0.0), (128256, 64, 0, 1.0, 0.1)):
        x = torch.randn(b, v, device="cuda") * 3

        def f(x=x, k=k, p=p, mp=mp):
            sd = torch.randint(0, 2**31 - 1, (1,), device="cuda", dtype=torch.int64)
            return S.sample(x, sd, None, 0.7, None, k, None, p, None, mp, None, False, True)
        out.append(f"V={v} B={b} k={k} p={p} min_p={mp}: {graph_time_us(f, 20, 5):.1f} us")
    print(f"MODE {mode} TIME " + " | ".join(out), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
