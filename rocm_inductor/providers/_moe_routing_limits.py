"""AITER's router top-k kernels as data: what ``aiter.topk_softmax`` and ``aiter.biased_grouped_topk_hip`` take.

Read from ROCm/aiter at e4048607 (2026-08-22): ``aiter/ops/moe_op.py`` (``topk_softmax``), ``aiter/ops/topk.py``
(``biased_grouped_topk_hip``, ``biased_grouped_topk``), ``csrc/kernels/topk_softmax_kernels.cu`` and
``csrc/kernels/topk_softmax_kernels_group.cu``; the Python signatures are the same in v0.1.5, v0.1.10 and v0.1.17
(``topk_softmax`` gained two trailing keyword parameters in v0.1.17, which we leave at their defaults). Written
against the source and checked on CPU stand-ins (tests/vendor_standins.py) only: nobody here has run them.

- ``topk_softmax(topk_weights, topk_indices, token_expert_indices, gating_output, need_renorm)`` fills
  float32 weights and int32 ids / token_expert_indices [T, k] in place; gating float32/float16/bfloat16
  (``VLLM_DISPATCH_FLOATING_TYPES``). It selects on the logits and writes ``exp(v - rowmax)`` divided by the
  full softmax sum, or by the k numerators' sum with ``need_renorm`` -- which is exactly our ``topk_softmax``
  (a softmax over the k chosen logits; the top logit is the row's max). Ties: the lower index (its arg_max
  compares keys on equal values). No routed scaling factor: the provider multiplies after.
- ``biased_grouped_topk_hip(gating_output, correction_bias, topk_weights, topk_ids, num_expert_group,
  topk_grp, need_renorm, routed_scaling_factor)``: sigmoid + bias choice, DeepSeek-V3's two-best group score,
  weights the unbiased sigmoid; ``w * (scale / sum)`` (no 1e-20, a reciprocal instead of our divide: within 2
  ulp of float32). The bias is read as the gating dtype (``scalar_t*``); ids int32, weights float32, one thread
  per output slot of one wavefront (k <= 32 on every wave size). ``num_expert_group`` must be 1, 2, 4 or 8
  (else ``AITER_CHECK`` aborts); for 2 and 4 the group score's cross-lane step is skipped (``lane_steps`` is 0
  for 32 or 16 lanes per group), so only 1 and 8 are taken here. The Python wrapper ``biased_grouped_topk``
  sends large token counts to ``moe_fused_gate``, which asserts ``need_renorm``: we call the HIP kernel.
- NaN: both kernels compare with ``>``, so a NaN score is never chosen (torch.topk ranks NaN first): a NaN
  router row differs from eager. Nothing at compile time can see it; docs/vendors.md says so.
"""

from __future__ import annotations

from typing import Any

import torch

#: Gating (logit) dtypes both kernels dispatch on.
AITER_ROUTING_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
#: ``num_expert_group`` values whose group score is computed across all of a group's lanes (see module docstring).
AITER_GROUPS = (1, 8)
#: Largest k of ``biased_grouped_topk_hip`` (one lane per output slot of a 32- or 64-wide wavefront).
AITER_GROUPED_MAX_K = 32


def check_aiter_routing(spec: dict[str, Any], lib: Any) -> str | None:
    """AITER's limits for a ``moe_routing`` spec (keys of ``ops.moe_routing.routing_spec``).

    Args:
        spec: the compile-time spec; lib: the imported ``aiter`` module (its entry points are looked up).

    Returns:
        ``None`` if AITER takes it, else the reason in plain words.
    """
    if spec.get("dtype") not in AITER_ROUTING_DTYPES:
        return f"aiter's router kernels take float32/float16/bfloat16 logits, not {spec.get('dtype')}"
    if not spec.get("row_contiguous", False):
        return "aiter's router kernels read rows with unit stride; the logits' last dim is strided"
    kind = spec.get("kind")
    if kind in ("softmax_topk", "topk_softmax"):
        if getattr(lib, "topk_softmax", None) is None:
            return "this aiter has no topk_softmax"
        if kind == "topk_softmax" and spec.get("renormalize"):
            return "aiter's topk_softmax renormalises once; a second renormalisation is ours only"
        return None
    if kind != "sigmoid_grouped":
        return f"aiter has no router kernel for {kind}"
    if getattr(lib, "biased_grouped_topk_hip", None) is None and getattr(lib, "biased_grouped_topk", None) is None:
        return "this aiter has no biased_grouped_topk"
    if spec.get("n_group") not in AITER_GROUPS:
        return (f"{spec.get('n_group')} expert groups: aiter's grouped kernel computes the group score over every "
                f"lane only for {AITER_GROUPS} groups (topk_softmax_kernels_group.cu)")
    if spec.get("k", 0) > AITER_GROUPED_MAX_K:
        return f"k={spec.get('k')} > {AITER_GROUPED_MAX_K} (one wavefront lane per chosen expert)"
    bias = spec.get("bias_dtype")
    if bias is not None and bias != spec.get("dtype") and spec.get("dtype") != torch.float32:
        return (f"aiter reads the correction bias in the logits' dtype ({spec.get('dtype')}); a {bias} bias would "
                "be rounded")
    return None


def aiter_moe_routing(lib: Any, router_logits: torch.Tensor, k: int, kind: str, renormalize: bool,
                      correction_bias: torch.Tensor | None, n_group: int, topk_group: int,
                      routed_scaling_factor: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Call AITER's kernel for ``kind`` on fresh outputs (``check_aiter_routing`` took the spec).

    Args:
        lib: the ``aiter`` module; the rest as ``rocm_fused::moe_routing`` (a ``topk_softmax`` never
            renormalises twice: refused at compile time).

    Returns:
        ``(weights [T, k] float32, ids [T, k] int64)``, largest first.
    """
    x = router_logits if router_logits.stride(-1) == 1 else router_logits.contiguous()
    t = x.shape[0]
    w = torch.empty((t, k), dtype=torch.float32, device=x.device)
    ids = torch.empty((t, k), dtype=torch.int32, device=x.device)
    if t == 0:
        return w, ids.long()
    if kind == "sigmoid_grouped":
        bias = correction_bias if correction_bias is not None else torch.zeros(x.shape[1], device=x.device)
        bias = bias.to(x.dtype).contiguous()  # exact: check() takes a narrower bias only with float32 logits
        fn = getattr(lib, "biased_grouped_topk_hip", None) or lib.biased_grouped_topk
        fn(x, bias, w, ids, n_group, topk_group, bool(renormalize), float(routed_scaling_factor))
        return w, ids.long()
    token_expert = torch.empty((t, k), dtype=torch.int32, device=x.device)
    lib.topk_softmax(w, ids, token_expert, x, bool(renormalize or kind == "topk_softmax"))
    if routed_scaling_factor != 1.0:
        w = w * routed_scaling_factor
    return w, ids.long()
