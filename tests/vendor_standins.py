# ruff: noqa: UP007, UP045  (annotations spelled as the libraries spell them: Optional[...] / Union[...])
"""CPU stand-ins of the vendor libraries, one per version line we claim, with the real signatures.

Each factory returns ``{module name: module}`` to put into ``sys.modules``; the functions carry the real
parameter names, order and defaults (read in the libraries' sources, cited per factory), read their
arguments in the dtypes the real kernels read, record their calls in ``calls`` and compute the math on CPU.
A call that would fail (or silently misread) on the real library fails (or misreads) here too.

- FlashInfer (flashinfer-ai/flashinfer ``flashinfer/{norm,rope,sampling}.py``): 0.5.3 (generator only),
  0.6.0-0.6.3 (``seed: Optional[int]``), 0.6.4+ (tensor seed/offset, ``_validate_and_convert_seed_offset``).
- AMD's fork (ROCm/flashinfer): 0.5.3+amd (release/0.5.3+amd.1/.2: RoPE reads positions as int32, no
  ``backend``), 0.6.18+amd (``rmsnorm(..., backend="auto")``, ``apply_rope_with_cos_sin_cache(...,
  backend="auto")`` whose "auto" takes AITER's path for fp16 with >= 2048 tokens, upstream 0.6.4+ sampling).
- AITER (ROCm/aiter ``aiter/ops/rmsnorm.py``, ``aiter/ops/sampling.py``): v0.1.5-v0.1.16 (no
  ``gemma_norm``), v0.1.17+ (``gemma_norm``; hidden > 8192 goes to the CK kernel, which ignores it).
  ``aiter.ops.sampling`` is a separate module that ``aiter/__init__`` does not import.
"""

from __future__ import annotations

import types
from typing import Optional, Union

import torch

from rocm_inductor.providers.reference import rms_norm_ref, rope_cached_ref


def _module(name: str, **attrs) -> types.ModuleType:
    mod = types.ModuleType(name)
    for k, v in attrs.items():
        if callable(v) and not isinstance(v, types.ModuleType):
            v.__module__ = name
        setattr(mod, k, v)
    return mod


def _fused_add_fp32_sum(input, residual, weight, eps, offset):
    """FlashInfer's fused_add_rmsnorm: residual <- round(x + r); input <- norm of the *unrounded* fp32 sum."""
    s32 = input.float() + residual.float()
    y = s32 * torch.rsqrt(s32.pow(2).mean(-1, keepdim=True) + eps) * (weight.float() + offset)
    residual.copy_(s32.to(residual.dtype))
    input.copy_(y.to(input.dtype))


def _fi_norm(name: str, calls: list, backend: bool) -> types.ModuleType:
    """``flashinfer.norm`` (v0.5.3 signatures; ``backend`` on ``rmsnorm`` only in the fork's 0.6.18+amd)."""

    def plain(fn_name, offset):
        if backend:
            def rmsnorm(input, weight, eps=1e-6, out=None, enable_pdl=None, backend="auto"):
                calls.append((fn_name, tuple(input.shape), weight.dtype, eps, backend))
                assert input.dim() == 2, "the fork's norm kernels are 2D only"
                return rms_norm_ref(input, weight.to(input.dtype), eps, offset)
        else:
            def rmsnorm(input, weight, eps=1e-6, out=None, enable_pdl=None):
                calls.append((fn_name, tuple(input.shape), weight.dtype, eps, None))
                return rms_norm_ref(input, weight.to(input.dtype), eps, offset)  # weight read as input dtype
        return rmsnorm

    def fused(fn_name, offset):
        def fused_add_rmsnorm(input, residual, weight, eps=1e-6, enable_pdl=None):
            calls.append((fn_name, tuple(input.shape), weight.dtype, eps, None))
            _fused_add_fp32_sum(input, residual, weight.to(input.dtype), eps, offset)
        return fused_add_rmsnorm

    return _module(f"{name}.norm", rmsnorm=plain("rmsnorm", 0.0), gemma_rmsnorm=plain("gemma_rmsnorm", 1.0),
                   fused_add_rmsnorm=fused("fused_add_rmsnorm", 0.0),
                   gemma_fused_add_rmsnorm=fused("gemma_fused_add_rmsnorm", 1.0))


def _fi_rope(name: str, calls: list, positions_int32_only: bool, backend: bool) -> types.ModuleType:
    """``flashinfer.rope.apply_rope_with_cos_sin_cache``; q/k (nnz, H * D) or (nnz, H, D)."""

    def run(positions, query, key, head_size, cos_sin_cache, is_neox, used):
        if cos_sin_cache.dtype != torch.float32:
            raise ValueError("cos_sin_cache should be float32")
        nnz = query.shape[0]
        if positions_int32_only:
            # release/0.5.3+amd.x csrc_rocm/rope.cu: static_cast<int32_t*>(pos_ids.data_ptr()), any dtype
            pos = positions.contiguous().view(-1).view(torch.int32)[:nnz] if positions.dtype == torch.int64 \
                else positions.to(torch.int32)
        else:
            if positions.dtype not in (torch.int32, torch.int64):
                raise TypeError(f"positions must be int32/int64, got {positions.dtype}")
            pos = positions
        calls.append(("apply_rope_with_cos_sin_cache", positions.dtype, used))
        q3, k3 = query.view(nnz, -1, head_size), key.view(nnz, -1, head_size)
        rd = cos_sin_cache.shape[-1]
        tab = cos_sin_cache
        if used == "aiter":  # AITER's kernel: cos/sin converted to the query dtype
            tab = cos_sin_cache.to(query.dtype).float()
        qo, ko = rope_cached_ref(q3, k3, pos.long()[:, None], tab, rd, not is_neox)
        return qo.view(query.shape), ko.view(key.shape)

    if backend:
        def apply_rope_with_cos_sin_cache(positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor,
                                          head_size: int, cos_sin_cache: torch.Tensor, is_neox: bool = True,
                                          backend: str = "auto"):
            used = backend
            if backend == "auto":  # 0.6.18+amd _auto_select_rope_backend (AITER importable)
                used = "aiter" if query.dtype == torch.float16 and query.shape[0] >= 2048 else "native"
            if used not in ("native", "aiter"):
                raise ValueError(f"Unknown backend {backend!r}; expected one of 'auto', 'native', 'aiter'.")
            return run(positions, query, key, head_size, cos_sin_cache, is_neox, used)
    else:
        def apply_rope_with_cos_sin_cache(positions: torch.Tensor, query: torch.Tensor, key: torch.Tensor,
                                          head_size: int, cos_sin_cache: torch.Tensor, is_neox: bool = True):
            return run(positions, query, key, head_size, cos_sin_cache, is_neox, "native")

    return _module(f"{name}.rope", apply_rope_with_cos_sin_cache=apply_rope_with_cos_sin_cache)


def _draw(logits, top_k, top_p, calls, **kw):
    calls.append(dict(k=top_k, p=top_p, **kw))
    return logits.argmax(-1).to(torch.int32)


def _fi_sampling(name: str, calls: list, seed_kind: str | None) -> types.ModuleType:
    """``flashinfer.sampling.top_k_top_p_sampling_from_logits``; ``seed_kind`` None / "int" / "tensor"."""
    attrs = {}
    if seed_kind is None:  # v0.5.3
        def top_k_top_p_sampling_from_logits(logits, top_k, top_p, indices=None,
                                             filter_apply_order="top_k_first", deterministic=True,
                                             generator=None, check_nan=False):
            return _draw(logits, top_k, top_p, calls, order=filter_apply_order, generator=generator)
    elif seed_kind == "int":  # v0.6.0-v0.6.3: seed: Optional[int], passed on to the C++ op as an int64
        def top_k_top_p_sampling_from_logits(logits: torch.Tensor, top_k: Union[torch.Tensor, int],
                                             top_p: Union[torch.Tensor, float],
                                             indices: Optional[torch.Tensor] = None,
                                             filter_apply_order: str = "top_k_first", deterministic: bool = True,
                                             generator: Optional[torch.Generator] = None, check_nan: bool = False,
                                             seed: Optional[int] = None, offset: Optional[int] = None):
            for v in (seed, offset):
                if v is not None and not isinstance(v, int):
                    raise TypeError(f"expected int for seed/offset, got {type(v).__name__}")
            return _draw(logits, top_k, top_p, calls, order=filter_apply_order, generator=generator, seed=seed,
                         offset=offset)
    else:  # v0.6.4+ (and the fork's 0.6.18+amd)
        def _validate_and_convert_seed_offset(seed, offset, device, batch_size):
            if isinstance(seed, torch.Tensor) != isinstance(offset, torch.Tensor):
                raise ValueError("seed and offset must both be tensors or both be scalars")
            for t in (seed, offset):
                if isinstance(t, torch.Tensor):
                    if t.dtype not in (torch.int64, torch.uint64) or t.ndim != 1 or t.size(0) not in (1, batch_size):
                        raise ValueError("seed/offset tensor must be int64/uint64, 1D, of length 1 or batch")
            return seed, offset

        def top_k_top_p_sampling_from_logits(logits: torch.Tensor, top_k: Union[torch.Tensor, int],
                                             top_p: Union[torch.Tensor, float],
                                             indices: Optional[torch.Tensor] = None,
                                             filter_apply_order: str = "top_k_first", deterministic: bool = True,
                                             generator: Optional[torch.Generator] = None, check_nan: bool = False,
                                             seed: Optional[Union[int, torch.Tensor]] = None,
                                             offset: Optional[Union[int, torch.Tensor]] = None):
            if seed is not None or offset is not None:
                _validate_and_convert_seed_offset(seed, offset, logits.device, logits.shape[0])
            return _draw(logits, top_k, top_p, calls, order=filter_apply_order, generator=generator, seed=seed,
                         offset=offset)

        attrs["_validate_and_convert_seed_offset"] = _validate_and_convert_seed_offset
    return _module(f"{name}.sampling", top_k_top_p_sampling_from_logits=top_k_top_p_sampling_from_logits,
                   **attrs)


def flashinfer(line: str, calls: list) -> dict[str, types.ModuleType]:
    """Upstream FlashInfer of one version line: ``"0.5.3"``, ``"0.6.0"`` (0.6.0-0.6.3) or ``"0.6.4"`` (0.6.4+)."""
    seed = {"0.5.3": None, "0.6.0": "int", "0.6.4": "tensor"}[line]
    subs = {"norm": _fi_norm("flashinfer", calls, backend=False),
            "rope": _fi_rope("flashinfer", calls, positions_int32_only=False, backend=False),
            "sampling": _fi_sampling("flashinfer", calls, seed)}
    fi = _module("flashinfer", __version__=f"{line}+standin", **subs)
    return {"flashinfer": fi, **{f"flashinfer.{k}": v for k, v in subs.items()}}


def amd_flashinfer(line: str, calls: list) -> dict[str, types.ModuleType]:
    """AMD's fork (imports as ``flashinfer``): ``"0.5.3+amd"`` or ``"0.6.18+amd"``."""
    new = {"0.5.3+amd": False, "0.6.18+amd": True}[line]
    subs = {"norm": _fi_norm("flashinfer", calls, backend=new),
            "rope": _fi_rope("flashinfer", calls, positions_int32_only=not new, backend=new),
            "sampling": _fi_sampling("flashinfer", calls, "tensor" if new else None)}
    fi = _module("flashinfer", __version__=f"{line}.standin", **subs)
    return {"flashinfer": fi, **{f"flashinfer.{k}": v for k, v in subs.items()}}


def aiter(line: str, calls: list) -> dict[str, types.ModuleType]:
    """AITER ``"0.1.5"`` (v0.1.5-v0.1.16) or ``"0.1.17"`` (v0.1.17+, ``gemma_norm``)."""
    gemma = line != "0.1.5"

    def rms_norm(input, weight, epsilon, use_model_sensitive_rmsnorm=0):
        calls.append(("rms_norm", tuple(input.shape), epsilon))
        return rms_norm_ref(input, weight, epsilon, 0.0)

    def run(out, input, residual_in, residual_out, weight, epsilon, offset):
        s = (input + residual_in)
        out.copy_(rms_norm_ref(s, weight, epsilon, offset))
        residual_out.copy_(s)

    if gemma:
        def rmsnorm2d_fwd_with_add(out, input, residual_in, residual_out, weight, epsilon, gemma_norm=False,
                                   use_model_sensitive_rmsnorm=0):
            calls.append(("rmsnorm2d_fwd_with_add", tuple(input.shape), epsilon, gemma_norm))
            ck = use_model_sensitive_rmsnorm > 0 or input.shape[-1] > 8192  # v0.1.17: CK drops gemma_norm
            run(out, input, residual_in, residual_out, weight, epsilon, 1.0 if gemma_norm and not ck else 0.0)
    else:
        def rmsnorm2d_fwd_with_add(out, input, residual_in, residual_out, weight, epsilon,
                                   use_model_sensitive_rmsnorm=0):
            calls.append(("rmsnorm2d_fwd_with_add", tuple(input.shape), epsilon, None))
            run(out, input, residual_in, residual_out, weight, epsilon, 0.0)

    def top_k_top_p_sampling_from_probs(probs: torch.Tensor, indices: torch.Tensor,
                                        maybe_top_k_arr: Optional[torch.Tensor], top_k_val: int,
                                        maybe_top_p_arr: Optional[torch.Tensor], top_p_val: float,
                                        deterministic: bool = False) -> torch.Tensor:
        probs = probs.float()  # csrc/cpp_itfs/sampling: probs.float(), top-k .int(), top-p .float()
        calls.append(("top_k_top_p_sampling_from_probs", indices,
                      None if maybe_top_k_arr is None else maybe_top_k_arr.int(), int(top_k_val),
                      None if maybe_top_p_arr is None else maybe_top_p_arr.float(), float(top_p_val)))
        return probs.argmax(-1).to(torch.int32)

    def rope_cached_positions_2c_fwd(input_x, input_y, cos, sin, positions, rotate_style, reuse_freqs_front_part,
                                     nope_first, transpose_output=False):
        """aiter/ops/rope.py (v0.1.5-v0.1.20): [s, b, h, d] x/y, cos/sin [max_pos, 1, 1, rd/2] (any of
        fp32/fp16/bf16, rope_common.h dispatch), int64 positions [s, b] (default build), nope_first=False
        rotates [0, rd) and copies the rest (rope_common.h)."""
        if positions.dtype != torch.int64:
            raise RuntimeError(f"rope_cached_positions_2c_fwd does not support positions dtype {positions.dtype}")
        s_, b_, _, d = input_x.shape
        assert positions.shape == (s_, b_) and reuse_freqs_front_part and not nope_first
        calls.append(("rope_cached_positions_2c_fwd", positions.dtype, cos.dtype, rotate_style))
        h = cos.shape[-1]
        table = torch.cat([cos.reshape(-1, h), sin.reshape(-1, h)], -1).float()
        outs = []
        for t in (input_x, input_y):
            o, _ = rope_cached_ref(t, None, positions[..., None], table, 2 * h, rotate_style == 1)
            outs.append(o)
        return outs[0], outs[1]

    sampling = _module("aiter.ops.sampling", top_k_top_p_sampling_from_probs=top_k_top_p_sampling_from_probs)
    ai = _module("aiter", __version__=f"{line}+standin", rms_norm=rms_norm,
                 rmsnorm2d_fwd_with_add=rmsnorm2d_fwd_with_add,
                 rope_cached_positions_2c_fwd=rope_cached_positions_2c_fwd)
    ops = _module("aiter.ops")  # not an attribute of ``aiter``: its __init__ does not import ops.sampling
    return {"aiter": ai, "aiter.ops": ops, "aiter.ops.sampling": sampling}


def install(monkeypatch, modules: dict[str, types.ModuleType]) -> None:
    """Put ``modules`` into ``sys.modules`` for one test (and nothing left of an earlier stand-in)."""
    import sys

    root = next(iter(modules)).split(".")[0]
    for name in [n for n in sys.modules if n == root or n.startswith(root + ".")]:
        monkeypatch.delitem(sys.modules, name, raising=False)
    for name, mod in modules.items():
        monkeypatch.setitem(sys.modules, name, mod)


def add_aiter_routing(ai: types.ModuleType, calls: list) -> types.ModuleType:
    """Add AITER's router top-k entry points to an ``aiter`` stand-in (ROCm/aiter e4048607, also v0.1.5-v0.1.17
    by signature: ``aiter/ops/moe_op.py:topk_softmax``, ``aiter/ops/topk.py:biased_grouped_topk_hip`` /
    ``biased_grouped_topk``; math from ``csrc/kernels/topk_softmax_kernels{,_group}.cu``). In place outputs:
    float32 weights, int32 ids; the group kernel reads the bias as the gating dtype and aborts (here: raises) on
    other group counts than 1/2/4/8; neither kernel ever picks a NaN (its comparisons are ``>``)."""

    def _argsort(choice: torch.Tensor, k: int) -> torch.Tensor:
        # the lower index on equal values; NaN never chosen (ranked below -inf)
        c = torch.where(torch.isnan(choice), torch.full_like(choice, float("-inf")), choice)
        order = torch.sort(c, dim=-1, descending=True, stable=True)[1]
        return order[:, :k]

    def topk_softmax(topk_weights: torch.Tensor, topk_indices: torch.Tensor, token_expert_indices: torch.Tensor,
                     gating_output: torch.Tensor, need_renorm: bool, num_shared_experts: int = 0,
                     shared_expert_scoring_func: str = "") -> None:
        assert topk_weights.dtype == torch.float32 and topk_indices.dtype == torch.int32
        assert token_expert_indices.dtype == torch.int32
        assert gating_output.dtype in (torch.float32, torch.float16, torch.bfloat16)
        calls.append(("topk_softmax", tuple(gating_output.shape), gating_output.dtype, need_renorm))
        x = gating_output.float()
        k = topk_indices.shape[1]
        ids = _argsort(x, k)
        numer = torch.exp(x.gather(1, ids) - x.amax(-1, keepdim=True))
        den = numer.sum(-1, keepdim=True) if need_renorm else torch.exp(x - x.amax(-1, keepdim=True)).sum(-1, True)
        topk_weights.copy_(numer / den)
        topk_indices.copy_(ids.int())

    def biased_grouped_topk_hip(gating_output: torch.Tensor, correction_bias: torch.Tensor,
                                topk_weights: torch.Tensor, topk_ids: torch.Tensor, num_expert_group: int,
                                topk_grp: int, need_renorm: bool, routed_scaling_factor: float = 1.0) -> None:
        if num_expert_group not in (1, 2, 4, 8):
            raise RuntimeError(f"Unsupported num_expert_group: {num_expert_group}")
        if not 1 <= topk_grp <= num_expert_group:
            raise RuntimeError("topk_grp must be in [1, num_expert_group]")
        assert correction_bias.dtype == gating_output.dtype, "the kernel reads the bias as scalar_t"
        assert topk_weights.dtype == torch.float32 and topk_ids.dtype == torch.int32
        calls.append(("biased_grouped_topk_hip", tuple(gating_output.shape), gating_output.dtype,
                      num_expert_group, topk_grp, need_renorm, routed_scaling_factor))
        s = gating_output.float().sigmoid()
        c = s + correction_bias.float()
        t, e = c.shape
        if num_expert_group > 1:
            gs = c.view(t, num_expert_group, -1).topk(2, dim=-1)[0].sum(-1)
            keep = torch.zeros_like(gs).scatter_(1, _argsort(gs, topk_grp), 1).bool()
            c = c.masked_fill(~keep.repeat_interleave(e // num_expert_group, 1), float("-inf"))
        ids = _argsort(c, topk_ids.shape[1])
        w = s.gather(1, ids)
        mult = routed_scaling_factor / w.sum(-1, keepdim=True) if need_renorm else routed_scaling_factor
        topk_weights.copy_(w * mult)
        topk_ids.copy_(ids.int())

    def biased_grouped_topk(gating_output, correction_bias, topk_weights, topk_ids, num_expert_group, topk_group,
                            need_renorm, routed_scaling_factor=1.0):
        return biased_grouped_topk_hip(gating_output, correction_bias, topk_weights, topk_ids, num_expert_group,
                                       topk_group, need_renorm, routed_scaling_factor)

    for name, fn in (("topk_softmax", topk_softmax), ("biased_grouped_topk_hip", biased_grouped_topk_hip),
                     ("biased_grouped_topk", biased_grouped_topk)):
        fn.__module__ = ai.__name__
        setattr(ai, name, fn)
    return ai
