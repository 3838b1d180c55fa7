"""FlashInfer norm kernels on NVIDIA (pip ``flashinfer-python``).

Library limits (docs/vendors.md, flashinfer 0.5.3-0.6.x): ``flashinfer.norm.rmsnorm(input, weight, eps)`` and
``gemma_rmsnorm`` take fp16/bf16 2D (or 3D per-head) input with a contiguous last dim; the weight is
reinterpreted as the input dtype. ``fused_add_rmsnorm(input, residual, weight, eps)`` (and the gemma form)
mutates both arguments: residual <- input + residual, input <- norm(sum) * weight; 2D only. FlashInfer's
functions are not torch ops, so they are only ever called from inside our custom ops.
"""

from __future__ import annotations

from typing import Any

import torch

from ._ar_norm_limits import (
    FLASHINFER_HIDDEN_MULTIPLE,
    FLASHINFER_MAX_TOKENS,
    FLASHINFER_WORLD_SIZES,
    check_ar_norm,
)
from ._norm_limits import check_half_same_dtype_weight
from ._rope_limits import check_vendor_rope, token_major
from .base import Provider


class FlashInferProvider(Provider):
    """RMSNorm / fused_add_rms_norm through FlashInfer (NVIDIA CUDA)."""

    name = "flashinfer"
    library = "flashinfer"
    ops = frozenset({"rms_norm", "fused_add_rms_norm", "sample", "rope", "rope_cached",
                     "all_reduce_add_rms_norm"})
    label = "FlashInfer"

    def __init__(self) -> None:
        super().__init__()
        #: (group name, hidden, dtype) -> (ipc handles, workspace pointer tensor): allocated once, at the
        #: first call outside capture, then reused by every call and every graph replay.
        self._ar_workspaces: dict[tuple[str, int, torch.dtype], tuple[Any, torch.Tensor]] = {}

    def platform_ok(self, platform: Any) -> str | None:
        if platform.kind != "cuda":
            return f"{self.name} runs on NVIDIA CUDA only (platform is {platform.kind})"
        return None

    def check(self, op: str, spec: dict[str, Any]) -> str | None:
        reason = super().check(op, spec)
        if reason is None and op in ("rms_norm", "fused_add_rms_norm"):
            reason = check_half_same_dtype_weight(self.label, spec)
        if reason is None and op == "sample":
            from ._vendor_sampling import check_sample, device_seed

            fn = getattr(getattr(self.lib(), "sampling", None), "top_k_top_p_sampling_from_logits", None)
            reason = check_sample(self.label, fn, spec, seeded=device_seed(fn))
        if reason is None and op in ("rope", "rope_cached"):
            reason = check_vendor_rope(self.label, op, spec)
        if reason is None and op == "all_reduce_add_rms_norm":
            reason = check_ar_norm(self.label, spec, FLASHINFER_WORLD_SIZES, FLASHINFER_MAX_TOKENS, None,
                                   FLASHINFER_HIDDEN_MULTIPLE)
            comm, fusion = None, None
            if reason is None:
                try:
                    comm = self._comm()
                except Exception as e:  # flashinfer.comm loads libcudart through ctypes at import
                    reason = f"import flashinfer.comm failed: {type(e).__name__}: {e}"
            fusion = getattr(comm, "trtllm_allreduce_fusion", None)
            if reason is None and fusion is None:
                reason = f"this {self.label} release has no flashinfer.comm.trtllm_allreduce_fusion"
            if reason is None and spec.get("offset", 0.0) != 0.0:
                from ._vendor_sampling import takes

                if not takes(fusion, "weight_bias"):
                    reason = f"this {self.label} release's all-reduce fusion has no Gemma weight_bias (0.6+)"
        return reason

    def _comm(self) -> Any:
        """``flashinfer.comm`` (``import flashinfer`` does not import it)."""
        import importlib

        lib = self.lib()
        comm = getattr(lib, "comm", None)
        return comm if comm is not None else importlib.import_module(f"{lib.__name__}.comm")

    def _ar_workspace(self, comm: Any, group_name: str, hidden: int, dtype: torch.dtype) -> torch.Tensor:
        """The IPC workspace of ``group_name`` for ``hidden`` (collective on first use; cached after).

        Raises:
            RuntimeError: the first use is inside a CUDA graph capture (allocation and the IPC handle
                exchange cannot be captured: run one eager step, or Inductor's warm-up, first).
        """
        key = (group_name, hidden, dtype)
        if key not in self._ar_workspaces:
            if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
                raise RuntimeError("rocm_fused: FlashInfer's all-reduce workspace must be created before graph "
                                   "capture (run one step eagerly first)")
            import torch.distributed as dist
            from torch.distributed.distributed_c10d import _resolve_process_group

            pg = _resolve_process_group(group_name)
            made = comm.trtllm_create_ipc_workspace_for_all_reduce_fusion(
                dist.get_rank(pg), pg.size(), FLASHINFER_MAX_TOKENS, hidden,
                use_fp32_lamport=dtype == torch.float32, group=pg)
            self._ar_workspaces[key] = (made[0], made[1])
        return self._ar_workspaces[key][1]

    def all_reduce_add_rms_norm(self, x, residual, weight, eps, offset, group_name):
        """``trtllm_allreduce_fusion(kARResidualRMSNorm)``: sum over ranks in float32 (``fp32_acc``), add the
        residual, write the rounded sum to ``residual_out`` and the norm to ``norm_out`` (fresh tensors).

        x, residual: (..., H) fp16/bf16 of one shape (flattened to (tokens, H)); tokens <=
        ``FLASHINFER_MAX_TOKENS`` (``check`` refuses more). ``use_oneshot=None`` lets FlashInfer's own
        size heuristic pick one-shot or two-shot.
        """
        import torch.distributed as dist
        from torch.distributed.distributed_c10d import _resolve_process_group

        comm = self._comm()
        shape, h = x.shape, x.shape[-1]
        x2 = x.reshape(-1, h).contiguous()
        r2 = residual.reshape(-1, h).contiguous()
        norm_out, res_out = torch.empty_like(x2), torch.empty_like(r2)
        if x2.shape[0] == 0:
            return norm_out.view(shape), res_out.view(shape)
        pg = _resolve_process_group(group_name)
        kw: dict[str, Any] = {}
        if offset != 0.0:
            kw["weight_bias"] = float(offset)
        comm.trtllm_allreduce_fusion(
            allreduce_in=x2, world_size=pg.size(), world_rank=dist.get_rank(pg), token_num=x2.shape[0],
            hidden_dim=h, workspace_ptrs=self._ar_workspace(comm, group_name, h, x.dtype),
            launch_with_pdl=False, trigger_completion_at_end=True, fp32_acc=True,
            pattern_code=comm.AllReduceFusionPattern.kARResidualRMSNorm, use_oneshot=None,
            allreduce_out=None, residual_in=r2, residual_out=res_out, norm_out=norm_out, quant_out=None,
            scale_out=None, rms_gamma=weight, rms_eps=float(eps), scale_factor=None, layout_code=None, **kw)
        return norm_out.view(shape), res_out.view(shape)

    def sample(self, scores, seed, temperature, temperature_value, top_k, top_k_value, top_p, top_p_value,
               min_p, min_p_value, ban, is_probs, top_k_first):
        """``top_k_top_p_sampling_from_logits`` (top_k_first) behind our op's semantics; see
        ``rocm_inductor.providers._vendor_sampling`` (seed/offset tensors when the release takes them as
        tensors: FlashInfer >= 0.6.4, the fork's 0.6.18+amd)."""
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

    def _rope_fn(self):
        return self.lib().rope.apply_rope_with_cos_sin_cache

    def rope_cached(self, q, k, positions, cos_sin_cache, rotary_dim, interleaved):
        """``flashinfer.rope.apply_rope_with_cos_sin_cache`` on token-major (T, H, D) views of q and k.

        q/k (..., D) fp16/bf16 with positions broadcastable to their leading dims; rotary_dim is the table
        width (FlashInfer reads it from ``cos_sin_cache.shape[-1]``). Returns fresh tensors of q/k's shape.
        Positions go as int32: AMD's fork 0.5.3+amd.1/.2 reads them as ``int32_t*`` whatever their dtype
        (``flashinfer/csrc_rocm/rope.cu``: ``static_cast<int32_t*>(pos_ids.data_ptr())``), so int64 gave
        token i the position ``pos[i/2]`` (even i) or 0 (odd i); upstream and later fork builds dispatch
        int32 and int64. int32 holds every position a cos/sin table has (max_pos < 2**31).
        """
        if cos_sin_cache.shape[-1] != rotary_dim:
            raise ValueError(f"cos_sin_cache width {cos_sin_cache.shape[-1]} != rotary_dim {rotary_dim}")
        q3, pos, q_back = token_major(q, positions)
        k3, _, k_back = token_major(k, positions)
        if q3.shape[0] == 0:
            return q.clone(), k.clone()
        qo, ko = self._rope_fn()(
            positions=pos.to(torch.int32).contiguous(), query=q3.contiguous(), key=k3.contiguous(),
            head_size=q.shape[-1], cos_sin_cache=cos_sin_cache.float().contiguous(), is_neox=not interleaved)
        return q_back(qo.view(q3.shape)), k_back(ko.view(k3.shape))
