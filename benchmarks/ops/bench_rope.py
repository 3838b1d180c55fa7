"""Benchmark RoPE: ``rocm_fused::rope`` / ``rope_cached`` per provider vs Inductor's kernel for the HF code.

Shapes (issue 3): tokens in {1, 32, 512, 8192}, (H_q, H_kv, D) in {(32, 8, 128), (64, 8, 128), (16, 16, 64)},
bfloat16, HF layout (q/k are (1, H, T, D) transposed views of the (1, T, H, D) projections; cos/sin (1, T, D)
bf16 as ``LlamaRotaryEmbedding`` returns them). Implementations, all timed as ``--inner`` calls replayed from
one captured CUDA graph (median of ``--reps`` replays, per call):
- ``eager``: HF ``apply_rotary_pos_emb`` in eager PyTorch;
- ``inductor``: ``torch.compile(backend="inductor")`` of the same eager code;
- ``ours[triton]``: ``rocm_fused::rope`` (model's cos/sin, one launch for q and k) through our Triton kernel;
- ``ours_cached[triton|flashinfer]``: ``rocm_fused::rope_cached`` (float32 [max_pos, D] table, positions);
  FlashInfer rows only when ``import flashinfer`` works (its RoPE JIT compile, ~42 s at 0.5.3, is excluded
  from the timing by the warm-up).
- ``pass[triton]``: the HF eager code compiled with ``backend="rocm_fused"`` and the rope pass forced on.
Bandwidth column: the bytes RoPE must move (read and write q and k: 2 x T x (H_q + H_kv) x D x 2 bytes; tables
excluded) over the time, and its fraction of the device-to-device copy bandwidth measured here the same way.

Writes ``rope.md`` / ``rope.csv`` to ``--out`` (default benchmarks/results). About 60-90 s on an H200 plus
FlashInfer's JIT.

Usage: ``python benchmarks/ops/bench_rope.py [--out DIR] [--reps 20] [--inner 20]``
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/
from timing import copy_bandwidth_gbs, graph_time_us, write_results  # noqa: E402  (benchmarks/timing.py)

TOKENS = (1, 32, 512, 8192)
HEADS = ((32, 8, 128), (64, 8, 128), (16, 16, 64))
DTYPE = torch.bfloat16
DEVICE = "cuda"
MAX_POS = 16384


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def hf_rope(q, k, cos, sin):
    """HF ``apply_rotary_pos_emb`` (unsqueeze_dim=1)."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def bench(args: argparse.Namespace) -> list[dict]:
    import rocm_inductor  # noqa: F401  (registers the ops)
    from rocm_inductor.ops.rope import build_cos_sin_cache

    torch.manual_seed(0)
    copy_bw = copy_bandwidth_gbs(args.inner, args.reps)
    has_fi = importlib.util.find_spec("flashinfer") is not None
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}  D2D copy {copy_bw:.0f} GB/s  "
          f"flashinfer {'present' if has_fi else 'absent'}")
    rows: list[dict] = []
    for hq, hkv, d in HEADS:
        inv_freq = 1.0 / (10000.0 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
        cache = build_cos_sin_cache(inv_freq, MAX_POS, device=DEVICE)
        for t in TOKENS:
            rows += _case(hq, hkv, d, t, inv_freq, cache, copy_bw, has_fi, args)
            print(f"done {hq}/{hkv}/{d} x {t}", flush=True)
    return rows


def _case(hq, hkv, d, t, inv_freq, cache, copy_bw, has_fi, args) -> list[dict]:
    """Rows of every implementation at one (H_q, H_kv, D, tokens)."""
    torch._dynamo.reset()
    q = torch.randn(1, t, hq, d, dtype=DTYPE, device=DEVICE).transpose(1, 2)
    k = torch.randn(1, t, hkv, d, dtype=DTYPE, device=DEVICE).transpose(1, 2)
    pos = torch.arange(t, device=DEVICE)[None]
    ang = pos[..., None].float() * inv_freq.to(DEVICE)
    emb = torch.cat([ang, ang], -1)
    cos, sin = emb.cos().to(DTYPE), emb.sin().to(DTYPE)
    nbytes = 2 * t * (hq + hkv) * d * 2
    want = hf_rope(q.float(), k.float(), cos.float(), sin.float())
    ind = torch.compile(hf_rope, backend="inductor", dynamic=False)
    pas = torch.compile(hf_rope, backend="rocm_fused", dynamic=False,
                        options={"passes": {"rope": True}, "providers": {"rope": "triton"}})
    impls = [("eager", lambda: hf_rope(q, k, cos, sin)), ("inductor", lambda: ind(q, k, cos, sin)),
             ("pass[triton]", lambda: pas(q, k, cos, sin)),
             ("ours[triton]", lambda: torch.ops.rocm_fused.rope(q, k, cos.unsqueeze(1), sin.unsqueeze(1),
                                                               d, False, False, "triton")),
             ("ours_cached[triton]", lambda: torch.ops.rocm_fused.rope_cached(
                 q, k, pos[:, None], cache, d, False, "triton"))]
    if has_fi:
        impls.append(("ours_cached[flashinfer]", lambda: torch.ops.rocm_fused.rope_cached(
            q, k, pos[:, None], cache, d, False, "flashinfer")))
    rows = []
    for impl, fn in impls:
        row = {"H_q": hq, "H_kv": hkv, "D": d, "tokens": t, "impl": impl, "us": "", "GB/s": "",
               "frac_copy_bw": "", "note": ""}
        try:
            with torch.no_grad():
                for g, w in zip(fn(), want):
                    torch.testing.assert_close(g.float(), w, atol=3e-2, rtol=3e-2)
                us = graph_time_us(fn, args.inner, args.reps)
        except Exception as e:  # one failing provider must not lose the table
            row["note"] = f"{type(e).__name__}: {e}"[:160]
            rows.append(row)
            continue
        gbs = nbytes / (us * 1e-6) / 1e9
        row.update({"us": round(us, 2), "GB/s": round(gbs), "frac_copy_bw": round(gbs / copy_bw, 3)})
        rows.append(row)
    return rows


def write(rows: list[dict], out: str) -> None:
    print(write_results(rows, out, "rope", f"RoPE on {torch.cuda.get_device_name()} (torch {torch.__version__})"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "results"))
    p.add_argument("--reps", type=int, default=20, help="graph replays timed (median)")
    p.add_argument("--inner", type=int, default=20, help="calls captured per graph")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_rope: needs a CUDA or ROCm GPU", file=sys.stderr)
        return 2
    write(bench(args), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
