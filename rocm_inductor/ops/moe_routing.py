"""``rocm_fused::moe_routing``: a mixture-of-experts router's top-k, from the router logits to the chosen experts.

Meaning (pure-torch reference: ``rocm_inductor.providers.reference_moe.moe_routing_ref``), per token row of
``router_logits`` [T, E], with ``k`` experts chosen:

- ``softmax_topk`` (HF Qwen3-MoE, Mixtral, OLMoE): ``p = softmax(float32(logits))``; ``w, ids = topk(p, k)``;
- ``topk_softmax`` (HF GPT-OSS): ``v, ids = topk(logits, k)``; ``w = softmax(float32(v))``;
- ``sigmoid_grouped`` (HF DeepSeek-V3, GLM4-MoE): ``s = sigmoid(float32(logits))``; ``c = s + correction_bias``
  (the bias steers the choice only); each of ``n_group`` contiguous groups scores the sum of its two best ``c``;
  the ``topk_group`` best groups are kept, the others' experts masked to -inf; ``ids = topk(c, k)``;
  ``w = s[ids]`` (the unbiased sigmoid scores);

then, for every kind, ``w = w / (sum(w) + 1e-20)`` when ``renormalize`` (HF's ``norm_topk_prob``; the 1e-20 is
DeepSeek-V3's and is below half an ulp of any softmax sum, so exact there), and ``w = w * routed_scaling_factor``.
Returns ``(topk_weights [T, k] float32, topk_ids [T, k] int64)``; a model that keeps its weights in its own
dtype casts after the op (the pass leaves that cast in the graph: one rounding, as eager rounds). The top-k is
torch.topk's: largest first when ``sorted_topk`` (the order eager's ``sorted=True`` gives), NaN ranked above
every number; ``sorted_topk=False`` is DeepSeek-V3's ``topk(..., sorted=False)``, whose order torch leaves to the
device. Among exactly equal scores the reference picks as torch.topk does on the device; our Triton kernel picks
the lower expert index first (what CUDA/ROCm torch.topk does at the k-th place, docs/ops.md "moe_routing").
Functional (``mutates_args=()``).

Compile-time spec keys read by providers' ``check`` (built by :func:`routing_spec`):
    kind, dtype (the logits'), bias_dtype (None without a bias), tokens (int, or None if symbolic), experts
    (int or None), k, renormalize, n_group, topk_group, scale (routed_scaling_factor), sorted, row_contiguous
    (last dim statically of stride 1).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.fx.experimental.symbolic_shapes import statically_known_true

from ..providers import get_provider

#: The router kinds the op computes (see module docstring).
KINDS = ("softmax_topk", "topk_softmax", "sigmoid_grouped")
#: Logit dtypes the op takes (the math runs in float32).
DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def validate(router_logits: torch.Tensor, k: int, kind: str, correction_bias: torch.Tensor | None, n_group: int,
             topk_group: int) -> None:
    """Check the op's arguments (shapes are compared only where they are concrete ints).

    Raises:
        ValueError: logits not 2-D float16/bfloat16/float32; ``kind`` unknown; ``k`` outside [1, E]; a bias for
            a softmax kind, or a bias not (E,) float on the logits' device; groups that do not split E into
            groups of at least 2 (the two best of each group are summed), or ``topk_group`` outside [1, n_group];
            groups for a softmax kind.
    """
    if router_logits.ndim != 2 or router_logits.dtype not in DTYPES:
        raise ValueError(f"moe_routing takes [T, E] float16/bfloat16/float32 logits, got {router_logits.dtype} "
                         f"{tuple(router_logits.shape)}")
    if kind not in KINDS:
        raise ValueError(f"moe_routing: unknown kind {kind!r}; kinds are {list(KINDS)}")
    e = router_logits.shape[1]
    if k < 1 or (isinstance(e, int) and k > e):
        raise ValueError(f"moe_routing: k={k} outside [1, {e}]")
    if kind != "sigmoid_grouped":
        if correction_bias is not None or n_group != 1 or topk_group != 1:
            raise ValueError(f"moe_routing: {kind} takes no correction bias and no groups (n_group = topk_group = 1)")
        return
    if correction_bias is not None:
        if correction_bias.ndim != 1 or not correction_bias.dtype.is_floating_point or (
                isinstance(e, int) and isinstance(correction_bias.shape[0], int) and correction_bias.shape[0] != e):
            raise ValueError(f"moe_routing: correction_bias must be ({e},) float, got {correction_bias.dtype} "
                             f"{tuple(correction_bias.shape)}")
        if correction_bias.device != router_logits.device:
            raise ValueError(f"moe_routing: correction_bias on {correction_bias.device}, logits on "
                             f"{router_logits.device}")
    if not 1 <= topk_group <= n_group:
        raise ValueError(f"moe_routing: topk_group={topk_group} outside [1, n_group={n_group}]")
    if n_group > 1 and isinstance(e, int) and (e % n_group or e // n_group < 2):
        raise ValueError(f"moe_routing: {e} experts do not split into {n_group} groups of at least 2")


@torch.library.custom_op("rocm_fused::moe_routing", mutates_args=())
def moe_routing(router_logits: torch.Tensor, k: int, kind: str, renormalize: bool,
                correction_bias: torch.Tensor | None, n_group: int, topk_group: int, routed_scaling_factor: float,
                sorted_topk: bool, provider: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The router's top-k (see module docstring) by ``provider``.

    Args:
        router_logits: [T, E] float16/bfloat16/float32, the router GEMM's output.
        k: experts per token (1 <= k <= E).
        kind: ``"softmax_topk"``, ``"topk_softmax"`` or ``"sigmoid_grouped"``.
        renormalize: divide the k weights by their sum (+ 1e-20).
        correction_bias: (E,) float (``e_score_correction_bias``), ``sigmoid_grouped`` only, or None.
        n_group, topk_group: expert groups and how many are kept (1, 1 when ungrouped).
        routed_scaling_factor: multiplies the final weights (1.0 for none).
        sorted_topk: largest first (eager's ``sorted=True``); False: the order is the device's.
        provider: provider name chosen at compile time (``"reference"``, ``"triton"``, ``"aiter"``).

    Returns:
        ``(topk_weights [T, k] float32, topk_ids [T, k] int64)``, contiguous.

    Raises:
        ValueError: see :func:`validate`. KeyError: unknown provider. ProviderUnavailable: its library cannot be
        imported here.
    """
    validate(router_logits, k, kind, correction_bias, n_group, topk_group)
    w, ids = get_provider(provider).moe_routing(router_logits, k, kind, renormalize, correction_bias, n_group,
                                                topk_group, routed_scaling_factor, sorted_topk)
    return w.contiguous(), ids.contiguous()


@moe_routing.register_fake
def _moe_routing_fake(router_logits, k, kind, renormalize, correction_bias, n_group, topk_group,
                      routed_scaling_factor, sorted_topk, provider):
    validate(router_logits, k, kind, correction_bias, n_group, topk_group)
    t = router_logits.shape[0]
    dev = router_logits.device
    return (torch.empty((t, k), dtype=torch.float32, device=dev), torch.empty((t, k), dtype=torch.int64, device=dev))


def _static(v: Any) -> int | None:
    return v if isinstance(v, int) else None


def routing_spec(logits: Any, k: int, kind: str, renormalize: bool, bias: Any, n_group: int, topk_group: int,
                 scale: float, sorted_topk: bool) -> dict[str, Any]:
    """Build the compile-time spec of a router match from fake tensors (``node.meta["val"]``).

    Args:
        logits: the router logits' fake tensor [T, E]; bias: the correction bias's fake tensor or None; the rest
            as the op's arguments.

    Returns:
        dict with the keys listed in the module docstring.
    """
    return {
        "kind": kind,
        "dtype": logits.dtype,
        "bias_dtype": None if bias is None else bias.dtype,
        "tokens": _static(logits.shape[0]),
        "experts": _static(logits.shape[1]),
        "k": k,
        "renormalize": renormalize,
        "n_group": n_group,
        "topk_group": topk_group,
        "scale": scale,
        "sorted": sorted_topk,
        "row_contiguous": bool(statically_known_true(logits.stride(1) == 1)),
    }
