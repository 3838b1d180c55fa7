"""Triton router top-k (``rocm_fused::moe_routing``): one program per token, the row of logits in registers.

Math: :func:`rocm_inductor.providers.reference_moe.moe_routing_ref` in float32, per kind:
``softmax_topk`` (softmax over the row, then the k largest probabilities), ``topk_softmax`` (the k largest logits,
then a softmax over them), ``sigmoid_grouped`` (sigmoid scores, + correction bias for the choice, DeepSeek-V3's
group filter: each group scores the sum of its two best, the ``topk_group`` best groups stay, the rest are -inf;
the weights are the unbiased scores); then ``w / (sum + 1e-20)`` when renormalising and ``* routed_scaling_factor``.

The top-k is k rounds of an argmax over the row: NaN ranks above every number (as in torch.topk), and among
equal scores the lower expert index wins. That is the choice torch.topk makes on CUDA/ROCm at the k-th place
(``aten/src/ATen/native/cuda/TensorTopK.cu`` gathers the values equal to the k-th in index order); CPU's
torch.topk picks among equal values in its partial sort's order, so under the interpreter a tied row may choose
other, equally scored experts than eager (tests/test_moe_routing_pass.py shows both). The output is always
largest first, which also serves ``sorted=False`` (an order torch leaves to the device).

Layout: the row is read as a [groups, group size] tile (one group when ungrouped), padded to powers of two and
masked. No allocation besides the outputs, the grid is the token count: capture-safe.

Limits (:func:`check`, data below): logits float16/bfloat16/float32 with a unit last stride, a static expert
count <= :data:`MAX_EXPERTS`, k <= :data:`MAX_K` (the rounds are unrolled), groups <= :data:`MAX_GROUPS`.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from ..reference_moe import RENORM_EPS

#: Logit dtypes the kernel reads (math in float32).
DTYPES = (torch.float16, torch.bfloat16, torch.float32)
#: Largest expert count: the padded row lives in registers of one program (Qwen3-Next and Qwen3.5 have 512
#: experts, DeepSeek-V3 256, Kimi-K2 384); beyond it a row would spill.
MAX_EXPERTS = 2048
#: Largest k: the k argmax rounds are unrolled at compile time (routers use k <= 16: Qwen3-Next 10, DeepSeek-V3 8).
MAX_K = 64
#: Largest group count (DeepSeek-V3: 8).
MAX_GROUPS = 64
_KIND_CODE = {"softmax_topk": 0, "topk_softmax": 1, "sigmoid_grouped": 2}


def check(spec: dict[str, Any]) -> str | None:
    """Compile-time limits of this kernel.

    Args:
        spec: keys of ``rocm_inductor.ops.moe_routing.routing_spec``.

    Returns:
        ``None`` if the kernel takes it, else the reason in plain words.
    """
    if spec.get("dtype") not in DTYPES:
        return f"triton moe_routing takes float16/bfloat16/float32 logits, not {spec.get('dtype')}"
    if not spec.get("row_contiguous", False):
        return "the logits' last dim is not contiguous (the kernel reads rows with unit stride)"
    e = spec.get("experts")
    if e is None:
        return "the expert count is symbolic; the kernel's tile is sized at compile time"
    if e > MAX_EXPERTS:
        return f"{e} experts > {MAX_EXPERTS} (one program holds the row in registers)"
    if spec.get("k", 0) > MAX_K:
        return f"k={spec.get('k')} > {MAX_K} (the argmax rounds are unrolled)"
    if spec.get("n_group", 1) > MAX_GROUPS:
        return f"{spec.get('n_group')} expert groups > {MAX_GROUPS}"
    return None


@triton.jit
def _argbest(rank, avail, idx, BIG: tl.constexpr):
    """Index (in ``idx``) of the best available entry of a 2-D tile: any NaN first, else the largest; the lower
    index among equals."""
    isn = avail & (rank != rank)
    any_nan = tl.max(tl.max(isn.to(tl.int32), 1), 0) > 0
    rv = tl.where(avail & (rank == rank), rank, float("-inf"))
    m = tl.max(tl.max(rv, 1), 0)
    cand = tl.where(any_nan, isn, avail & (rank == rank) & (rv == m))
    return tl.min(tl.min(tl.where(cand, idx, BIG), 1), 0)


@triton.jit
def _moe_routing_kernel(x_ptr, bias_ptr, w_ptr, ids_ptr, stride_x, stride_o, group_size, scale,
                        KIND: tl.constexpr, K: tl.constexpr, BLOCK_K: tl.constexpr, N_GROUP: tl.constexpr,
                        TOPK_GROUP: tl.constexpr, NG: tl.constexpr, BLOCK_G: tl.constexpr,
                        HAS_BIAS: tl.constexpr, RENORM: tl.constexpr, SCALE: tl.constexpr, EPS: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    BIG: tl.constexpr = 1 << 30
    g = tl.arange(0, NG)[:, None]
    j = tl.arange(0, BLOCK_G)[None, :]
    e = g * group_size + j
    valid = (g < N_GROUP) & (j < group_size)
    x = tl.load(x_ptr + row * stride_x + e, mask=valid, other=0.0).to(tl.float32)
    if KIND == 0:  # softmax over the row (a NaN anywhere makes it all NaN, as eager's amax/sum propagate it)
        row_nan = tl.max(tl.max((valid & (x != x)).to(tl.int32), 1), 0) > 0
        m = tl.max(tl.max(tl.where(valid & (x == x), x, float("-inf")), 1), 0)
        ex = tl.where(valid, tl.exp(x - m), 0.0)
        p = ex / tl.sum(tl.sum(ex, 1), 0)
        p = tl.where(row_nan, float("nan"), p)
        rank = p
        src = p
    elif KIND == 1:
        rank = x
        src = x
    else:
        s = 1.0 / (1.0 + tl.exp(-x))
        rank = s
        if HAS_BIAS:
            rank = s + tl.load(bias_ptr + e, mask=valid, other=0.0).to(tl.float32)
        src = s
        if TOPK_GROUP < N_GROUP:  # group score: the sum of each group's two best (NaN if it holds one)
            gnan = tl.max((valid & (rank != rank)).to(tl.int32), 1) > 0
            cv = tl.where(valid & (rank == rank), rank, float("-inf"))
            m1 = tl.max(cv, 1)
            j1 = tl.min(tl.where(valid & (rank == rank) & (cv == m1[:, None]), j, BIG), 1)
            m2 = tl.max(tl.where(j != j1[:, None], cv, float("-inf")), 1)
            gs = tl.where(gnan, float("nan"), m1 + m2)[:, None]
            gi = tl.arange(0, NG)[:, None]
            zero = tl.zeros([NG, 1], dtype=tl.int32)
            kept = gi < 0
            for _t in tl.static_range(TOPK_GROUP):
                best = _argbest(gs, (gi < N_GROUP) & ~kept, gi + zero, BIG)
                kept = kept | (gi == best)
            rank = tl.where(kept, rank, float("-inf"))  # HF: masked_fill(~score_mask, -inf)
    kk = tl.arange(0, BLOCK_K)
    wk = tl.zeros([BLOCK_K], dtype=tl.float32)
    ik = tl.zeros([BLOCK_K], dtype=tl.int32)
    taken = e < 0
    for t in tl.static_range(K):
        best = _argbest(rank, valid & ~taken, e, BIG)
        hit = e == best
        v = tl.sum(tl.sum(tl.where(hit, src, 0.0), 1), 0)
        taken = taken | hit
        wk = tl.where(kk == t, v, wk)
        ik = tl.where(kk == t, best, ik)
    kmask = kk < K
    if KIND == 1:  # softmax over the k chosen logits
        vm = tl.max(tl.where(kmask & (wk == wk), wk, float("-inf")), 0)
        ev = tl.where(kmask, tl.exp(wk - vm), 0.0)
        wk = ev / tl.sum(ev, 0)
    if RENORM:
        wk = wk / (tl.sum(tl.where(kmask, wk, 0.0), 0) + EPS)
    if SCALE:
        wk = wk * scale
    tl.store(w_ptr + row * stride_o + kk, wk, mask=kmask)
    tl.store(ids_ptr + row * stride_o + kk, ik.to(tl.int64), mask=kmask)


def _warps(block: int) -> int:
    # one warp per 256 padded experts, at most 4; not yet measured (benchmarks/ops/bench_moe_routing.py)
    return max(1, min(4, block // 256))


def moe_routing(router_logits: torch.Tensor, k: int, kind: str, renormalize: bool,
                correction_bias: torch.Tensor | None, n_group: int, topk_group: int, routed_scaling_factor: float,
                sorted_topk: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The router's top-k in one launch (see module docstring; arguments as ``rocm_fused::moe_routing``).

    Returns:
        ``(weights [T, k] float32, ids [T, k] int64)``, fresh and contiguous, largest first whatever
        ``sorted_topk`` says.

    Raises:
        ValueError: a kind the kernel does not know.
    """
    if kind not in _KIND_CODE:
        raise ValueError(f"triton moe_routing: unknown kind {kind!r}")
    x = router_logits if router_logits.stride(-1) == 1 else router_logits.contiguous()
    t, e = x.shape
    w = torch.empty((t, k), dtype=torch.float32, device=x.device)
    ids = torch.empty((t, k), dtype=torch.int64, device=x.device)
    if t == 0:
        return w, ids
    grouped = kind == "sigmoid_grouped" and topk_group < n_group
    ng = n_group if grouped else 1
    gsize = e // ng
    block_g = triton.next_power_of_2(gsize)
    npad = triton.next_power_of_2(ng)
    bias = correction_bias.contiguous() if correction_bias is not None else x
    _moe_routing_kernel[(t,)](
        x, bias, w, ids, x.stride(0), w.stride(0), gsize, float(routed_scaling_factor),
        KIND=_KIND_CODE[kind], K=k, BLOCK_K=triton.next_power_of_2(k), N_GROUP=ng, TOPK_GROUP=topk_group if grouped
        else 1, NG=npad, BLOCK_G=block_g, HAS_BIAS=correction_bias is not None, RENORM=bool(renormalize),
        SCALE=routed_scaling_factor != 1.0, EPS=RENORM_EPS, num_warps=_warps(npad * block_g))
    return w, ids


def aot_cases() -> list[dict]:
    """Compile cases (``providers/triton/_aot.py``): the Qwen3-MoE router (bf16 logits, 128 experts, top-8,
    renormalised) and the DeepSeek-V3 router (float32 logits, 256 experts in 8 groups, 4 kept, top-8, bias,
    scaling factor)."""
    sig = {"x_ptr": "*bf16", "bias_ptr": "*bf16", "w_ptr": "*fp32", "ids_ptr": "*i64", "stride_x": "i32",
           "stride_o": "i32", "group_size": "i32", "scale": "fp32", **{c: "constexpr" for c in (
               "KIND", "K", "BLOCK_K", "N_GROUP", "TOPK_GROUP", "NG", "BLOCK_G", "HAS_BIAS", "RENORM", "SCALE",
               "EPS")}}
    qwen = {"KIND": _KIND_CODE["softmax_topk"], "K": 8, "BLOCK_K": 8, "N_GROUP": 1, "TOPK_GROUP": 1, "NG": 1,
            "BLOCK_G": 128, "HAS_BIAS": False, "RENORM": True, "SCALE": False, "EPS": RENORM_EPS}
    dsv3 = {"KIND": _KIND_CODE["sigmoid_grouped"], "K": 8, "BLOCK_K": 8, "N_GROUP": 8, "TOPK_GROUP": 4, "NG": 8,
            "BLOCK_G": 32, "HAS_BIAS": True, "RENORM": True, "SCALE": True, "EPS": RENORM_EPS}
    fp32 = {**sig, "x_ptr": "*fp32", "bias_ptr": "*fp32"}
    return [{"name": "moe_routing softmax_topk E=128 k=8", "fn": _moe_routing_kernel, "signature": sig,
             "constexprs": qwen, "num_warps": _warps(128)},
            {"name": "moe_routing sigmoid_grouped E=256 g=8/4 k=8", "fn": _moe_routing_kernel, "signature": fp32,
             "constexprs": dsv3, "num_warps": _warps(256)}]
