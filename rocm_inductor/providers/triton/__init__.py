"""Our portable Triton kernels (NVIDIA, ROCm, and CPU under ``TRITON_INTERPRET=1``).

Kernel modules are imported lazily so that importing ``rocm_inductor`` never imports Triton.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

from ..base import Provider


def interpreting() -> bool:
    """True when Triton's interpreter runs kernels on CPU tensors (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


class TritonProvider(Provider):
    """Our Triton kernels; the portable fallback on every GPU platform."""

    name = "triton"
    library = "triton"
    ops = frozenset({"rms_norm", "fused_add_rms_norm", "sigmoid_gate", "rope", "rope_cached", "sample",
                     "decode_attention", "merged_gemm", "rms_norm_gemm"})
    ops = ops | {"moe_routing", "moe_experts"}  # the router's top-k, the routed experts (GEMV / grouped tl.dot)
    ops = ops | {"glu_gemm", "rms_norm_glu_gemm"}  # gate/up with the gated activation in the epilogue
    ops = ops | {"rope_kv_write"}  # q/k RoPE + the K/V cache writes in one launch
    ops = ops | {"qkv_rope_kv"}  # RMSNorm + q/k/v GEMMs + q/k RoPE + the K/V cache writes in one launch
    #: ``rope_cached`` clamps positions to the table inside the kernel (``rocm_fused::rope_cached``'s contract).
    clamps_rope_positions = True

    def platform_ok(self, platform: Any) -> str | None:
        if platform.kind == "cpu" and not interpreting():
            return "Triton needs a GPU (or TRITON_INTERPRET=1 on CPU)"
        return None

    def kernels(self, name: str):
        """The kernel module ``rocm_inductor.providers.triton.<name>`` (imported on first use)."""
        self.lib()
        return importlib.import_module(f"{__name__}.{name}")

    def check(self, op: str, spec: dict[str, Any]) -> str | None:
        reason = super().check(op, spec)
        if reason is None and op in ("rms_norm", "fused_add_rms_norm"):
            reason = self.kernels("rms_norm").check(spec)
        if reason is None and op == "sigmoid_gate":
            reason = self.kernels("sigmoid_gate").check(spec)
        if reason is None and op in ("rope", "rope_cached"):
            reason = self.kernels("rope").check(spec)
        if reason is None and op == "rope_kv_write":
            reason = self.kernels("rope_kv").check(spec)
        if reason is None and op == "qkv_rope_kv":
            reason = self.kernels("qkv_rope_kv").check(spec)
        if reason is None and op == "sample":
            reason = self.kernels("sampling").check(spec)
        if reason is None and op == "decode_attention":
            reason = self.kernels("attention").check(spec)  # also reserves the one-launch counters on a GPU
        if reason is None and op == "merged_gemm":
            reason = self.kernels("gemm_merge").check(spec)
        if reason is None and op == "rms_norm_gemm":
            reason = self.kernels("norm_gemm").check(spec)
        if reason is None and op in ("glu_gemm", "rms_norm_glu_gemm"):
            reason = self.kernels("glu_gemm").check(spec, norm=op == "rms_norm_glu_gemm")
        if reason is None and op == "moe_routing":
            reason = self.kernels("moe_routing").check(spec)
        if reason is None and op == "moe_experts":
            reason = self.kernels("moe_experts").check(spec)
        return reason

    def moe_experts(self, x, topk_weights, topk_ids, w_gate_up, w_down, b_gate_up, b_down, activation,
                    interleaved, transposed, alpha, limit):
        """See ``rocm_inductor.providers.triton.moe_experts.moe_experts`` (GEMV at one token, grouped ``tl.dot``
        above; weights read in place)."""
        return self.kernels("moe_experts").moe_experts(x, topk_weights, topk_ids, w_gate_up, w_down, b_gate_up,
                                                       b_down, activation, interleaved, transposed, alpha, limit)

    def rms_norm_gemm(self, x, residual, norm_weight, eps, offset, weights, biases):
        """See ``rocm_inductor.providers.triton.norm_gemm.rms_norm_gemm`` (one launch with the full-K GEMV
        tile, else the norm kernel then the merged GEMM)."""
        return self.kernels("norm_gemm").rms_norm_gemm(x, residual, norm_weight, eps, offset, weights, biases)

    def glu_gemm(self, x, w_gate, w_up, b_gate, b_up, activation):
        """See ``rocm_inductor.providers.triton.glu_gemm.glu_gemm`` (one launch, the activation in the epilogue)."""
        return self.kernels("glu_gemm").glu_gemm(x, w_gate, w_up, b_gate, b_up, activation)

    def rms_norm_glu_gemm(self, x, residual, norm_weight, eps, offset, w_gate, w_up, b_gate, b_up, activation):
        """See ``rocm_inductor.providers.triton.glu_gemm.rms_norm_glu_gemm``."""
        return self.kernels("glu_gemm").rms_norm_glu_gemm(x, residual, norm_weight, eps, offset, w_gate, w_up,
                                                          b_gate, b_up, activation)

    def rope_kv_write(self, q, k, v, cos, sin, k_cache, v_cache, positions, rotary_dim, interleaved, half_table):
        """See ``rocm_inductor.providers.triton.rope_kv.rope_kv_write`` (one launch, caches written in place)."""
        return self.kernels("rope_kv").rope_kv_write(q, k, v, cos, sin, k_cache, v_cache, positions, rotary_dim,
                                                      interleaved, half_table)

    def qkv_rope_kv(self, x, residual, norm_weight, eps, offset, weights, biases, cos, sin, k_cache, v_cache, positions,
                    rotary_dim, interleaved, half_table):
        """See ``rocm_inductor.providers.triton.qkv_rope_kv.qkv_rope_kv`` (one launch: the GEMM's epilogue rotates
        q and k and writes the caches)."""
        return self.kernels("qkv_rope_kv").qkv_rope_kv(x, residual, norm_weight, eps, offset, weights, biases, cos,
                                                       sin, k_cache, v_cache, positions, rotary_dim, interleaved,
                                                       half_table)

    def merged_gemm(self, x, weights, biases):
        """See ``rocm_inductor.providers.triton.gemm_merge.merged_gemm`` (one launch, weights read in place)."""
        return self.kernels("gemm_merge").merged_gemm(x, weights, biases)

    def rms_norm(self, x, weight, eps, offset):
        """See ``rocm_inductor.providers.triton.rms_norm.rms_norm``."""
        return self.kernels("rms_norm").rms_norm(x, weight, eps, offset)

    def fused_add_rms_norm(self, x, residual, weight, eps, offset):
        """See ``rocm_inductor.providers.triton.rms_norm.fused_add_rms_norm``."""
        return self.kernels("rms_norm").fused_add_rms_norm(x, residual, weight, eps, offset)

    def sigmoid_gate(self, x, gate):
        """See ``rocm_inductor.providers.triton.sigmoid_gate.sigmoid_gate``."""
        return self.kernels("sigmoid_gate").sigmoid_gate(x, gate)

    def rope(self, q, k, cos, sin, rotary_dim, interleaved, half_table):
        """See ``rocm_inductor.providers.triton.rope.rope``."""
        return self.kernels("rope").rope(q, k, cos, sin, rotary_dim, interleaved, half_table)

    def rope_cached(self, q, k, positions, cos_sin_cache, rotary_dim, interleaved):
        """See ``rocm_inductor.providers.triton.rope.rope_cached``."""
        return self.kernels("rope").rope_cached(q, k, positions, cos_sin_cache, rotary_dim, interleaved)

    def sample(self, scores, seed, temperature, temperature_value, top_k, top_k_value, top_p, top_p_value,
               min_p, min_p_value, ban, is_probs, top_k_first):
        """See ``rocm_inductor.providers.triton.sampling.sample`` (capture-safe: seed read on device)."""
        return self.kernels("sampling").sample(scores, seed, temperature, temperature_value, top_k, top_k_value,
                                               top_p, top_p_value, min_p, min_p_value, ban, is_probs,
                                               top_k_first)

    def decode_attention(self, q, k, v, mask, scale, sinks=None, positions=None, window=0, softcap=0.0):
        """See ``rocm_inductor.providers.triton.attention.decode_attention`` (split-KV, capture-safe)."""
        return self.kernels("attention").decode_attention(q, k, v, mask, scale, sinks=sinks, positions=positions,
                                                          window=window, softcap=softcap)

    def moe_routing(self, router_logits, k, kind, renormalize, correction_bias, n_group, topk_group,
                    routed_scaling_factor, sorted_topk):
        """See ``rocm_inductor.providers.triton.moe_routing.moe_routing`` (one program per token)."""
        return self.kernels("moe_routing").moe_routing(router_logits, k, kind, renormalize, correction_bias,
                                                       n_group, topk_group, routed_scaling_factor, sorted_topk)
