"""Benchmark the router top-k: ``rocm_fused::moe_routing`` vs Inductor's kernels for the same eager router code.

What it measures, per router and token count T in {1, 8, 32, 512}, on one GPU, from the router logits on (the
router GEMM is not timed: it is the same extern GEMM on both sides):
- ``qwen3_moe``: softmax top-k, renormalised, bf16 logits, E = 128, k = 8 (HF ``Qwen3MoeTopKRouter``);
- ``gpt_oss``: top-k then softmax, bf16 logits, E = 128, k = 4 (HF ``GptOssTopKRouter``, gpt-oss-120b's shape);
- ``deepseek_v3``: sigmoid + correction bias, 8 groups keep 4, k = 8, renormalised, x 2.5, fp32 logits, E = 256
  (HF ``DeepseekV3TopkRouter``).
Implementations:
- ``eager``: the HF router code in PyTorch eager;
- ``inductor``: ``torch.compile(backend="inductor")`` of that code;
- ``ours[<provider>]``: ``torch.ops.rocm_fused.moe_routing`` with the Triton provider (and AITER's on ROCm when it
  imports; its absence is reported);
- ``pass[triton]``: ``backend="rocm_fused"`` with the moe_routing pass on and Triton forced (what a model gets).
Every timing replays a captured CUDA/HIP graph of ``--inner`` calls, median of ``--reps`` replays, per call. The
bandwidth column is the bytes the op must move (logits in, weights and ids out) over the time, and its fraction of
the device-to-device copy bandwidth measured here the same way (router rows are tiny: expect launch-bound times).

Writes ``moe_routing.csv`` and ``moe_routing.md`` to ``--out`` (default benchmarks/results) and prints the table.
Runtime about 2 minutes on an H200 (Inductor compiles included).

Usage: ``PYTHONPATH=$PWD:$PWD/benchmarks python benchmarks/ops/bench_moe_routing.py --out $OUT [--reps 30]
[--inner 20]``
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # benchmarks/
from timing import copy_bandwidth_gbs, graph_time_us, write_results  # noqa: E402  (benchmarks/timing.py)

TOKENS = (1, 8, 32, 512)
DEVICE = "cuda"
#: router -> (experts, k, logits dtype, op arguments after k: kind, renormalize, n_group, topk_group, scale, sorted)
ROUTERS = {
    "qwen3_moe": (128, 8, torch.bfloat16, ("softmax_topk", True, 1, 1, 1.0, True)),
    "gpt_oss": (128, 4, torch.bfloat16, ("topk_softmax", False, 1, 1, 1.0, True)),
    "deepseek_v3": (256, 8, torch.float32, ("sigmoid_grouped", True, 8, 4, 2.5, False)),
}


def eager_router(name: str, logits: torch.Tensor, bias: torch.Tensor, k: int):
    """The HF router from its logits on (transformers 5.24's ``*TopKRouter.forward`` after the GEMM)."""
    if name == "qwen3_moe":
        v, i = torch.topk(F.softmax(logits, dtype=torch.float, dim=-1), k, dim=-1)
        v = v / v.sum(dim=-1, keepdim=True)
        return v.to(logits.dtype), i
    if name == "gpt_oss":
        v, i = torch.topk(logits, k, dim=-1)
        return F.softmax(v, dim=1, dtype=v.dtype), i
    e, ng, tg = logits.shape[1], 8, 4
    scores = logits.sigmoid()
    choice = scores + bias
    gs = choice.view(-1, ng, e // ng).topk(2, dim=-1)[0].sum(dim=-1)
    gi = torch.topk(gs, k=tg, dim=-1, sorted=False)[1]
    gm = torch.zeros_like(gs).scatter_(1, gi, 1)
    sm = gm.unsqueeze(-1).expand(-1, ng, e // ng).reshape(-1, e)
    choice = choice.masked_fill(~sm.bool(), float("-inf"))
    i = torch.topk(choice, k=k, dim=-1, sorted=False)[1]
    w = scores.gather(1, i)
    w = w / (w.sum(dim=-1, keepdim=True) + 1e-20)
    return w * 2.5, i


def _differing(got, want) -> int:
    """Tokens whose chosen experts differ from eager's (order-free: DeepSeek's sorted=False); where they agree the
    weights must be within bf16 rounding. A difference is a tie at the k-th place decided otherwise (bf16
    logits tie often), reported in the row's note rather than failed."""
    (w, i), (we, ie) = got, want
    oi, oe = i.argsort(-1), ie.argsort(-1)
    i, ie = i.gather(-1, oi), ie.gather(-1, oe)
    same = (i == ie).all(-1)
    torch.testing.assert_close(w.float().gather(-1, oi)[same], we.float().gather(-1, oe)[same], rtol=1e-2,
                               atol=1e-3)
    return int((~same).sum())


def _providers() -> list[str]:
    from rocm_inductor.providers import get_provider

    out = ["triton"]
    if torch.version.hip is not None:
        try:
            get_provider("aiter").lib()
            out.append("aiter")
        except Exception as e:  # AITER absent or not importable: reported, not fatal
            print(f"aiter: not available ({type(e).__name__}: {e})")
    return out


def _bench_one(name: str, t: int, bias, provs: list[str], args: argparse.Namespace, copy_bw: float) -> list[dict]:
    """Every implementation of router ``name`` at ``t`` tokens, one row each."""
    import rocm_inductor

    e, k, dtype, op_args = ROUTERS[name]
    torch._dynamo.reset()
    logits = torch.randn(t, e, device=DEVICE, dtype=dtype)
    nbytes = logits.numel() * logits.element_size() + t * k * (4 + 8)
    router = lambda x: eager_router(name, x, bias, k)  # noqa: E731
    want = router(logits)
    ind = torch.compile(router, backend="inductor", dynamic=False)
    ours = torch.compile(router, backend="rocm_fused", dynamic=False,
                         options={"passes": {"moe_routing": True}, "providers": {"moe_routing": "triton"}})
    impls = [("eager", lambda: router(logits)), ("inductor", lambda: ind(logits))]
    for p in provs:
        impls.append((f"ours[{p}]", lambda p=p: torch.ops.rocm_fused.moe_routing(
            logits, k, op_args[0], op_args[1], bias, *op_args[2:], p)))
    impls.append(("pass[triton]", lambda: ours(logits)))
    rows = []
    for impl, fn in impls:
        with torch.no_grad():
            diff = _differing(fn(), want)
            note = f"{diff} tokens chose other (tied) experts than eager" if diff else ""
            if impl == "pass[triton]":
                rep = rocm_inductor.last_report()
                note = "; ".join(x for x in (f"rewrites={rep.count('moe_routing') if rep else 0}", note) if x)
            us = graph_time_us(fn, args.inner, args.reps)
        gbs = nbytes / (us * 1e-6) / 1e9
        rows.append({"router": name, "experts": e, "k": k, "tokens": t, "impl": impl, "us": round(us, 2),
                     "GB/s": round(gbs), "frac_copy_bw": round(gbs / copy_bw, 4), "note": note})
    return rows


def bench(args: argparse.Namespace) -> list[dict]:
    torch.manual_seed(0)
    copy_bw = copy_bandwidth_gbs(args.inner, args.reps)
    provs = _providers()
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}  D2D copy {copy_bw:.0f} GB/s  "
          f"providers {provs}")
    rows: list[dict] = []
    for name, (e, *_) in ROUTERS.items():
        bias = (torch.randn(e, device=DEVICE) * 0.1) if name == "deepseek_v3" else None
        for t in TOKENS:
            rows += _bench_one(name, t, bias, provs, args, copy_bw)
    return rows


def write(rows: list[dict], out: str) -> None:
    extra = [""]
    by = {(r["router"], r["tokens"], r["impl"]): r["us"] for r in rows}
    for (name, t, impl), us in by.items():
        if impl.startswith(("ours", "pass")) and (name, t, "inductor") in by:
            extra.append(f"- {name} T={t}: inductor {by[(name, t, 'inductor')]} us, {impl} {us} us, "
                         f"speed-up x{by[(name, t, 'inductor')] / us:.2f}")
    title = f"moe_routing on {torch.cuda.get_device_name()} (torch {torch.__version__})"
    print(write_results(rows, out, "moe_routing", title, extra))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "results"))
    p.add_argument("--reps", type=int, default=30, help="graph replays timed (median)")
    p.add_argument("--inner", type=int, default=20, help="calls captured per graph")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_moe_routing: needs a CUDA or ROCm GPU", file=sys.stderr)
        return 2
    write(bench(args), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
