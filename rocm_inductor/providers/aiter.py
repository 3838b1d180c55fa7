"""AITER norm kernels on ROCm (pip ``amd-aiter`` from AMD's index; imports as ``aiter``).

Never a default for norms: ``rmsnorm2d_fwd_with_add`` truncates bf16 stores of residual_out toward zero on
gfx942 (ROCm/aiter#5151; a residual shrank ~9% over 64 layers), and the plain ``rms_norm`` output truncates
too: its ``module_rmsnorm`` is built with ``-DCK_TILE_FLOAT_TO_BFLOAT16_DEFAULT=2`` (ck_tile's truncating
bf16 conversion; ``aiter/jit/optCompilerConfig.json``, v0.1.17), not round-to-nearest as the numerics
contract asks (docs/ops.md); ``rms_norm`` also corrupted rows for odd hidden sizes (ROCm/aiter#5044). Used only when a
user forces ``provider="aiter"``. The positional order of ``rmsnorm2d_fwd_with_add`` changed between
releases (v0.1.17 inserted ``gemma_norm`` before ``use_model_sensitive_rmsnorm``), so everything after
``weight`` goes by keyword.

Gemma's ``(1 + w)``: ``rmsnorm2d_fwd_with_add(..., gemma_norm=True)`` from v0.1.17 (used when the signature
has it). v0.1.17 sends hidden sizes > 8192 to the CK kernel without passing ``gemma_norm`` on
(``aiter/ops/rmsnorm.py``: the ``input.shape[-1] > 8192`` branch), so Gemma is taken up to 8192 only (v0.1.18+
pass it to the opus kernel there too; not told apart). ``rms_norm`` has no Gemma form in v0.1.5-v0.1.20.
Sampling: ``aiter.ops.sampling.top_k_top_p_sampling_from_probs`` (see ``_vendor_sampling``). Checked
against ROCm/aiter v0.1.5, v0.1.10, v0.1.16, v0.1.17, v0.1.20; verified on CPU stand-ins only.

All-reduce + residual add + RMSNorm (``all_reduce_add_rms_norm``): AITER's entry point is
``aiter.dist.communication_op.tensor_model_parallel_fused_allreduce_rmsnorm(input_, residual_inp_, weight_,
eps, prefill_support=False, x_pad_to_multiple=0, gemma_norm=False) -> (out, residual_out)`` (read from
ROCm/aiter main, 2026-08: ``aiter/dist/communication_op.py``; it dispatches to ``CudaCommunicator.
fused_allreduce_rmsnorm`` in ``aiter/dist/device_communicators/communicator_cuda.py``, whose fused kernel is
``aiter/ops/custom_all_reduce.py:fused_allreduce_rmsnorm``). It works on AITER's own TP group, whose custom
all-reduce registers its IPC buffers once (``init_distributed_environment`` +
``ensure_model_parallel_initialized``); outside AITER's ``graph_capture()`` a captured call copies the input
into that registered buffer (capture-safe). So ``check`` accepts a match only when AITER's TP group exists and
has exactly the graph's group's ranks. A stand-in-verified wrapper: never run on an AMD GPU.
"""

from __future__ import annotations

from typing import Any

import torch

from ._ar_norm_limits import AITER_MAX_BYTES, AITER_MAX_HIDDEN, AITER_WORLD_SIZES, check_ar_norm
from ._norm_limits import check_half_same_dtype_weight
from ._rope_limits import check_vendor_rope, token_major
from .base import Provider

#: Largest hidden size for which v0.1.17's ``rmsnorm2d_fwd_with_add`` honours ``gemma_norm`` (its HIP path;
#: the CK path above it drops the flag: ``aiter/ops/rmsnorm.py`` v0.1.17).
GEMMA_MAX_HIDDEN = 8192

#: AITER's cached-position RoPE (``rope_cached_positions_2c_fwd``): [s, b, h, d] layout, int64 positions
#: [s, b], cos/sin [max_pos, 1, 1, rd/2] with ``reuse_freqs_front_part``. Head dims: not documented as
#: restricted; we keep FlashInfer's list until measured on gfx942.
AITER_ROPE_HEAD_DIMS = (64, 128, 256, 512)


class AiterProvider(Provider):
    """RMSNorm / fused_add_rms_norm through AITER (ROCm)."""

    name = "aiter"
    library = "aiter"
    ops = frozenset({"rms_norm", "fused_add_rms_norm", "sample", "rope", "rope_cached",
                     "all_reduce_add_rms_norm"})
    ops = ops | {"moe_routing"}  # the router's top-k (_moe_routing_limits.py)

    def platform_ok(self, platform: Any) -> str | None:
        if platform.kind != "rocm":
            return f"{self.name} runs on ROCm only (platform is {platform.kind})"
        return None

    def check(self, op: str, spec: dict[str, Any]) -> str | None:
        reason = super().check(op, spec)
        if reason is not None:
            return reason
        if op == "sample":
            from ._vendor_sampling import aiter_sampler, check_aiter_sample

            return check_aiter_sample(aiter_sampler(self.lib()), spec)
        if op in ("rope", "rope_cached"):
            return check_vendor_rope("aiter", op, spec, AITER_ROPE_HEAD_DIMS)
        if op == "all_reduce_add_rms_norm":
            return self._check_ar_norm(spec)
        if op == "moe_routing":
            from ._moe_routing_limits import check_aiter_routing

            return check_aiter_routing(spec, self.lib())
        reason = check_half_same_dtype_weight("aiter", spec)
        if reason is not None:
            return reason
        hidden = spec.get("hidden")
        offset = spec.get("offset", 0.0)
        if offset != 0.0:
            if offset != 1.0 or not spec.get("fused_add"):
                return (f"aiter has no Gemma / weight offset {offset} form of this op (only "
                        "rmsnorm2d_fwd_with_add's gemma_norm, v0.1.17+)")
            if not self._has_gemma():
                return "this aiter's rmsnorm2d_fwd_with_add has no gemma_norm for Gemma (added in v0.1.17)"
            if not isinstance(hidden, int) or hidden > GEMMA_MAX_HIDDEN:
                return (f"hidden size {hidden} > {GEMMA_MAX_HIDDEN}: aiter v0.1.17's CK path drops gemma_norm "
                        "there")
        if not isinstance(hidden, int) or hidden % 8:
            return f"hidden size {hidden} is not a static multiple of 8 (ROCm/aiter#5044 corrupted rows)"
        return None

    def _check_ar_norm(self, spec: dict[str, Any]) -> str | None:
        """Limits of AITER's fused all-reduce + RMSNorm (``_ar_norm_limits``) and its TP-group state."""
        reason = check_ar_norm("aiter", spec, AITER_WORLD_SIZES, None, AITER_MAX_BYTES, 8, AITER_MAX_HIDDEN)
        if reason is not None:
            return reason
        import importlib

        from ._vendor_sampling import takes

        try:
            self.lib()
            comm = importlib.import_module("aiter.dist.communication_op")
            state = importlib.import_module("aiter.dist.parallel_state")
        except Exception as e:  # an older AITER without aiter.dist
            return f"aiter has no aiter.dist.communication_op ({type(e).__name__}: {e})"
        fn = getattr(comm, "tensor_model_parallel_fused_allreduce_rmsnorm", None)
        if fn is None:
            return "this aiter release has no tensor_model_parallel_fused_allreduce_rmsnorm"
        if spec.get("offset", 0.0) != 0.0 and not takes(fn, "gemma_norm"):
            return "this aiter release's fused all-reduce + RMSNorm has no gemma_norm"
        if not state.model_parallel_is_initialized():
            return ("AITER's TP group is not initialised (call aiter.dist.parallel_state."
                    "init_distributed_environment and ensure_model_parallel_initialized(tp, 1) before "
                    "compiling: its IPC buffers are registered there, once)")
        ranks = tuple(state.get_tp_group().ranks)
        if spec.get("group_ranks") != ranks:
            return f"the graph's group has ranks {spec.get('group_ranks')}, AITER's TP group {ranks}"
        return None

    def all_reduce_add_rms_norm(self, x, residual, weight, eps, offset, group_name):
        """AITER's ``tensor_model_parallel_fused_allreduce_rmsnorm`` on (tokens, H) views, over AITER's TP
        group (``check`` verified at compile time that it has ``group_name``'s ranks). Arguments after
        ``eps`` go by keyword. Returns fresh ``(y, x_reduced + residual)``. Stand-in verified only."""
        import importlib

        self.lib()
        fn = importlib.import_module("aiter.dist.communication_op").tensor_model_parallel_fused_allreduce_rmsnorm
        shape, h = x.shape, x.shape[-1]
        x2 = x.reshape(-1, h).contiguous()
        r2 = residual.reshape(-1, h).contiguous()
        if x2.shape[0] == 0:
            return torch.empty_like(x2).view(shape), torch.empty_like(r2).view(shape)
        kw = {"gemma_norm": True} if offset == 1.0 else {}
        out, res_out = fn(x2, r2, weight, float(eps), **kw)
        return out.view(shape), res_out.view(shape)

    def _has_gemma(self) -> bool:
        from ._vendor_sampling import takes

        return takes(getattr(self.lib(), "rmsnorm2d_fwd_with_add", None), "gemma_norm")

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float, offset: float) -> torch.Tensor:
        """(..., H) -> (..., H) via ``aiter.rms_norm`` on a 2D view (no Gemma form: ``check`` refuses it)."""
        x2 = x.reshape(-1, x.shape[-1]).contiguous()
        if x2.numel() == 0:
            return torch.empty_like(x2).view(x.shape)
        return self.lib().rms_norm(x2, weight, eps).view(x.shape)

    def fused_add_rms_norm(self, x, residual, weight, eps, offset):
        """``rmsnorm2d_fwd_with_add`` writes ``out`` and ``residual_out``; inputs are left alone.

        ``offset`` 1.0 (Gemma) passes ``gemma_norm=True`` (v0.1.17+; ``check`` refuses it otherwise).
        """
        if offset not in (0.0, 1.0) or (offset == 1.0 and not self._has_gemma()):
            raise ValueError(f"aiter: weight offset {offset} not supported here (check() refuses it)")
        kw = {"gemma_norm": True} if offset == 1.0 else {}
        shape = x.shape
        x2 = x.reshape(-1, shape[-1]).contiguous()
        r2 = residual.reshape(-1, shape[-1]).contiguous()
        out, res_out = torch.empty_like(x2), torch.empty_like(r2)
        if x2.numel():
            self.lib().rmsnorm2d_fwd_with_add(out, x2, r2, res_out, weight, epsilon=eps, **kw)
        return out.view(shape), res_out.view(shape)

    def sample(self, scores, seed, temperature, temperature_value, top_k, top_k_value, top_p, top_p_value,
               min_p, min_p_value, ban, is_probs, top_k_first):
        """AITER's ``top_k_top_p_sampling_from_probs`` behind our op's semantics (no seed: never under
        capture; ``seed`` is ignored). Only when forced; unverified on hardware."""
        from ._vendor_sampling import aiter_sample, aiter_sampler

        if (min_p is not None or min_p_value > 0.0) or not top_k_first:
            raise ValueError("aiter: min-p and top-p-first are not supported (check() refuses them)")
        return aiter_sample(aiter_sampler(self.lib()), scores, temperature, temperature_value, top_k,
                            top_k_value, top_p, top_p_value, ban, is_probs)

    def rope(self, q, k, cos, sin, rotary_dim, interleaved, half_table):
        """Never chosen (``check`` refuses: AITER's cached kernel takes no model-computed cos/sin)."""
        raise NotImplementedError("aiter has no kernel for model-computed cos/sin")

    def rope_cached(self, q, k, positions, cos_sin_cache, rotary_dim, interleaved):
        """``aiter.rope_cached_positions_2c_fwd`` on [s, b=1, h, d] views (tokens as s), int64 positions [s, 1].

        Partial rotary: cos/sin are rd/2 wide with ``reuse_freqs_front_part=True`` and ``nope_first=False``
        (rotated part first, as HF). Returns fresh tensors of q/k's shape. Not run here (no AMD GPU).
        """
        q3, pos, q_back = token_major(q, positions)
        k3, _, k_back = token_major(k, positions)
        if q3.shape[0] == 0:
            return q.clone(), k.clone()
        h = rotary_dim // 2
        cos = cos_sin_cache[:, :h].contiguous().view(-1, 1, 1, h)
        sin = cos_sin_cache[:, h:].contiguous().view(-1, 1, 1, h)
        qo, ko = self.lib().rope_cached_positions_2c_fwd(
            q3.unsqueeze(1).contiguous(), k3.unsqueeze(1).contiguous(), cos, sin,
            pos.to(torch.int64).view(-1, 1), 1 if interleaved else 0, True, False)
        return q_back(qo.view(q3.shape)), k_back(ko.view(k3.shape))

    def moe_routing(self, router_logits, k, kind, renormalize, correction_bias, n_group, topk_group,
                    routed_scaling_factor, sorted_topk):
        """AITER's ``topk_softmax`` (softmax kinds) or ``biased_grouped_topk_hip`` (sigmoid_grouped) on fresh
        outputs, ids widened to int64; largest first for either ``sorted_topk``
        (``_moe_routing_limits.aiter_moe_routing``). Stand-in verified only."""
        from ._moe_routing_limits import aiter_moe_routing

        return aiter_moe_routing(self.lib(), router_logits, k, kind, renormalize, correction_bias, n_group,
                                 topk_group, routed_scaling_factor)
