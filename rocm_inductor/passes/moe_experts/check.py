"""Compile-time verification of an experts region against ``moe_experts_ref`` (passes/discover.py).

Three things differ from the other families' verification, each for a reason the region itself imposes:

- Inputs (:func:`inputs`): expert ids are drawn distinct per token in ``[0, E)`` (the default integers in
  ``[0, 8)`` would index past a small stack and never reach a large one); each expert matrix is a window into
  one random buffer, shifted by :data:`EXPERT_SHIFT` elements per expert (an overlapping ``as_strided`` view),
  so a stack of E experts costs one expert's memory, yet every expert holds different values and a region
  that reads the wrong expert disagrees; matrices are scaled by ``1/sqrt(K)`` so activations stay O(1), where
  SiLU and the GPT-OSS clamp are not saturated.
- CPU stand-ins (:func:`with_cpu_standins`): the region runs on the CPU, where ``aten._grouped_mm`` takes no
  float64 and ``aten.histc`` no integers (the CUDA spelling of HF's offsets); the region's copy calls exact
  pure-torch equivalents instead (same math, float32 accumulation for 16-bit inputs as the GPU kernels do).
- A budget (:data:`MAX_ELEMENTS`): HF's ``batched_mm`` form gathers T * k expert matrices; at T = 32 tokens of a
  Qwen3-MoE-shaped layer that is 805M elements (6.4 GB in float64). Above the budget the region is rewritten
  on its structural match alone, and the report's note says so.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .. import discover
from ..fx import val
from ..verify import Region, is_sym, substitution
from .match import Experts, grouped_targets

aten = torch.ops.aten

#: Elements per expert between consecutive experts' windows (a prime, so no two experts line up).
EXPERT_SHIFT = 7
#: Largest region evaluated, in elements of its gathered weights (T * k experts' gate/up and down matrices):
#: 2^26 elements is 512 MB in float64, a few seconds on one core, once per distinct layer shape per process
#: (the signature cache). A 1-token Qwen3-MoE-shaped layer (k = 8, 2I = 1536, H = 2048) is 37.7M.
MAX_ELEMENTS = 1 << 26


def _grouped_mm_cpu(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
    """``aten._grouped_mm(a (S, K), b (E, K, N), offs (E,))`` in any float dtype: rows ``offs[e-1]:offs[e]`` of
    ``a`` times ``b[e]``, float32 accumulation for 16-bit inputs, rows past ``offs[-1]`` zero."""
    acc = torch.float64 if a.dtype == torch.float64 else torch.float32
    out = torch.zeros(a.shape[0], b.shape[2], dtype=acc)
    start = 0
    for e, end in enumerate(offs.tolist()):
        if end > start:
            out[start:end] = a[start:end].to(acc) @ b[e].to(acc)
        start = end
    return out.to(a.dtype)


def _histc_cpu(x: torch.Tensor, bins: int = 100, min: float = 0, max: float = 0) -> torch.Tensor:  # noqa: A002
    """``aten.histc`` of an integer tensor (CUDA takes ints, the CPU only floats): the float histogram of the
    same values (exact for ids below 2^24)."""
    return torch.histc(x.double() if not x.is_floating_point() else x, bins, min, max).to(
        torch.float32 if not x.is_floating_point() else x.dtype)


def with_cpu_standins(region: Region) -> Region:
    """``region`` with its ``_grouped_mm`` / grouped fallback / ``histc`` calls replaced by the CPU stand-ins
    (in place on the region's own copy of the graph; the main graph is untouched)."""
    grouped = grouped_targets()
    g = region.module.graph
    for n in g.nodes:
        if n.op == "call_function" and n.target in grouped:
            n.target = _grouped_mm_cpu
        elif n.op == "call_function" and n.target is aten.histc.default:
            n.target = _histc_cpu
    region.module.recompile()
    return region


def cost(e: Experts, tokens: int) -> int:
    """Elements of the T * k experts' gate/up and down matrices the region's evaluation touches."""
    k = val(e.topk_ids).shape[1]
    return tokens * int(k) * (val(e.up.weight)[0].numel() + val(e.down.weight)[0].numel())


def _concrete(shape: Any, subs: dict[Any, int]) -> list[int]:
    return [int(s.node.expr.subs(subs)) if is_sym(s) else int(s) for s in shape]


def _stack(shape: list[int], g: torch.Generator, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """An (E, a, b) stack of overlapping shifted windows of one N(0, 1/b) buffer: (graph dtype, float64)."""
    e, a, b = shape
    buf = torch.randn(a * b + e * EXPERT_SHIFT, generator=g, dtype=torch.float64) / math.sqrt(b)
    buf = buf.to(dtype).double()  # both sides see the same (rounded) values
    strides = (EXPERT_SHIFT, b, 1)
    return buf.to(dtype).as_strided(shape, strides), buf.as_strided(shape, strides)


def inputs(region: Region, seed: int) -> tuple[list[Any], list[Any], dict[Any, int]]:
    """Random region inputs (``verify.InputMaker``) in the order ``x, topk_weights, topk_ids, w_gate_up, w_down
    [, b_gate_up][, b_down]``, then the symbolic sizes (see the module docstring)."""
    subs = substitution(region)
    g = torch.Generator().manual_seed(seed)
    args, args64 = [], []
    n_experts = None
    for i, n in enumerate(region.inputs):
        v = val(n)
        if not isinstance(v, torch.Tensor):
            c = int(v.node.expr.subs(subs)) if is_sym(v) else v
            args.append(c)
            args64.append(c)
            continue
        shape = _concrete(v.shape, subs)
        if i in (3, 4):  # expert stacks: weights are (E, N, K) or (E, K, N); scale by the last dim either way
            n_experts = shape[0]
            lo, hi = _stack(shape, g, v.dtype)
        elif i == 2:
            e = n_experts if n_experts is not None else _concrete(val(region.inputs[3]).shape, subs)[0]
            rows = [torch.randperm(e, generator=g)[:shape[1]] for _ in range(shape[0])]
            lo = hi = (torch.stack(rows) if rows else torch.zeros(shape, dtype=torch.int64)).to(v.dtype)
        else:
            hi = torch.randn(shape, generator=g, dtype=torch.float64).to(v.dtype).double()
            lo = hi.to(v.dtype)
        args.append(lo)
        args64.append(hi)
    return args, args64, subs


def verify(e: Experts, region: Region, params: tuple) -> discover.Verdict:
    """Verify ``region`` computes ``moe_experts`` with ``params`` (activation, interleaved, transposed, alpha,
    limit) on :func:`inputs`, through ``discover.verify`` (cached by signature)."""
    from ...providers.reference_moe_experts import moe_experts_ref

    act, interleaved, transposed, alpha, limit = params
    has_b1, has_b2 = e.b_gate_up is not None, e.b_down is not None

    def ref(x, tw, ids, w1, w2, *biases):
        it = iter(biases)
        b1 = next(it) if has_b1 else None
        b2 = next(it) if has_b2 else None
        return (moe_experts_ref(x, tw, ids, w1, w2, b1, b2, act, interleaved, transposed, alpha, limit),)

    return discover.verify(with_cpu_standins(region), "moe_experts", params, ref, ref, inputs=inputs)
