"""FlashInfer norm kernels on NVIDIA (pip ``flashinfer-python``).

Library limits (KERNELS.md, flashinfer 0.5.3-0.6.x): ``flashinfer.norm.rmsnorm(input, weight, eps)`` and
``gemma_rmsnorm`` take fp16/bf16 2D (or 3D per-head) input with a contiguous last dim; the weight is
reinterpreted as the input dtype. ``fused_add_rmsnorm(input, residual, weight, eps)`` (and the gemma form)
mutates both arguments: residual <- input + residual, input <- norm(sum) * weight; 2D only. FlashInfer's
functions are not torch ops, so they are only ever called from inside our custom ops.
"""

from __future__ import annotations

from typing import Any

import torch

from . import Provider
from ._norm_limits import check_half_same_dtype_weight
from ._rope_limits import check_vendor_rope, token_major


class FlashInferProvider(Provider):
    """RMSNorm / fused_add_rms_norm through FlashInfer (NVIDIA CUDA)."""

    name = "flashinfer"
    library = "flashinfer"
    ops = frozenset({"rms_norm", "fused_add_rms_norm", "sample", "rope", "rope_cached"})
    label = "FlashInfer"

    def platform_ok(self, platform: Any) -> str | None:
        if platform.kind != "cuda":
            return f"{self.name} runs on NVIDIA CUDA only (platform is {platform.kind})"
        return None

    def check(self, op: str, spec: dict[str, Any]) -> str | None:
        reason = super().check(op, spec)
        if reason is None and op in ("rms_norm", "fused_add_rms_norm"):
            reason = check_half_same_dtype_weight(self.label, spec)
        if reason is None and op == "sample":
            from ._vendor_sampling import check_sample, takes_seed_tensor

            fn = getattr(getattr(self.lib(), "sampling", None), "top_k_top_p_sampling_from_logits", None)
            reason = check_sample(self.label, fn, spec, seeded=takes_seed_tensor(fn))
        if reason is None and op in ("rope", "rope_cached"):
            reason = check_vendor_rope(self.label, op, spec)
        return reason

    def sample(self, scores, seed, temperature, temperature_value, top_k, top_k_value, top_p, top_p_value,
               min_p, min_p_value, ban, is_probs, top_k_first):
        """``top_k_top_p_sampling_from_logits`` (top_k_first) behind our op's semantics; see
        ``rocm_inductor.providers._vendor_sampling`` (seed/offset tensors when the release takes them)."""
        from ._vendor_sampling import flashinfer_sample

        if (min_p is not None or min_p_value > 0.0) or not top_k_first:
            raise ValueError(f"{self.name}: min-p and top-p-first are not supported (check() refuses them)")
        return flashinfer_sample(self.lib().sampling, scores, seed, temperature, temperature_value, top_k,
                                 top_k_value, top_p, top_p_value, ban, is_probs, self.label)

    def _norm_fns(self, offset: float):
        norm = self.lib().norm
        if offset == 0.0:
            return norm.rmsnorm, norm.fused_add_rmsnorm
        if offset == 1.0:
            return norm.gemma_rmsnorm, norm.gemma_fused_add_rmsnorm
        raise ValueError(f"{self.name}: weight offset {offset} not supported (0.0 or 1.0)")

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float, offset: float) -> torch.Tensor:
        """(..., H) fp16/bf16 -> (..., H) contiguous; flattened to 2D for the kernel."""
        fn, _ = self._norm_fns(offset)
        x2 = x.reshape(-1, x.shape[-1])
        if x2.numel() == 0:
            return torch.empty_like(x2).view(x.shape)
        return fn(x2.contiguous(), weight, eps).view(x.shape)

    def fused_add_rms_norm(self, x, residual, weight, eps, offset):
        """Functional wrapper of the in-place kernel: works on fresh 2D copies, returns ``(y, x + residual)``."""
        _, fn = self._norm_fns(offset)
        shape = x.shape
        y = x.reshape(-1, shape[-1]).clone(memory_format=torch.contiguous_format)
        s = residual.reshape(-1, shape[-1]).clone(memory_format=torch.contiguous_format)
        if y.numel():
            fn(y, s, weight, eps)
        return y.view(shape), s.view(shape)

    def rope(self, q, k, cos, sin, rotary_dim, interleaved, half_table):
        """Never chosen (``check`` refuses: FlashInfer takes no model-computed cos/sin)."""
        raise NotImplementedError(f"{self.name} has no kernel for model-computed cos/sin")

    def rope_cached(self, q, k, positions, cos_sin_cache, rotary_dim, interleaved):
        """``flashinfer.rope.apply_rope_with_cos_sin_cache`` on token-major (T, H, D) views of q and k.

        q/k (..., D) fp16/bf16 with positions broadcastable to their leading dims; rotary_dim is the table
        width (FlashInfer reads it from ``cos_sin_cache.shape[-1]``). Returns fresh tensors of q/k's shape.
        """
        if cos_sin_cache.shape[-1] != rotary_dim:
            raise ValueError(f"cos_sin_cache width {cos_sin_cache.shape[-1]} != rotary_dim {rotary_dim}")
        q3, pos, q_back = token_major(q, positions)
        k3, _, k_back = token_major(k, positions)
        if q3.shape[0] == 0:
            return q.clone(), k.clone()
        qo, ko = self.lib().rope.apply_rope_with_cos_sin_cache(
            positions=pos.to(torch.int64), query=q3.contiguous(), key=k3.contiguous(), head_size=q.shape[-1],
            cos_sin_cache=cos_sin_cache.float().contiguous(), is_neox=not interleaved)
        return q_back(qo.view(q3.shape)), k_back(ko.view(k3.shape))
