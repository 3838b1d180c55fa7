"""RMSNorm spellings from real model code (docs/spellings.md), as small test modules.

Each module's ``forward(x, r)`` returns its outputs; ``KIND`` says what the pass must find. Written from the
corpus descriptions; the real HF models are tested in test_rms_norm_models.py.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

H = 64


class Norm(nn.Module):
    """Base: a weight of the model dtype (or None) and an eps."""

    def __init__(self, eps: float = 1e-5, weight: bool = True, init: float = 1.0):
        super().__init__()
        self.weight = nn.Parameter(init + 0.1 * torch.randn(H)) if weight else None
        self.eps = eps


class HFLlama(Norm):  # 1: up -> pow.mean -> * rsqrt -> down -> weight * x
    def norm(self, x):
        dt = x.dtype
        h = x.to(torch.float32)
        var = h.pow(2).mean(-1, keepdim=True)
        h = h * torch.rsqrt(var + self.eps)
        return self.weight * h.to(dt)


class Olmo2(Norm):  # 2: weight multiplied in float32, cast last
    def norm(self, x):
        dt = x.dtype
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return (self.weight.float() * h).to(dt)


class GptFast(Norm):  # 3: _norm(x.float()).type_as(x) * weight, mean(x * x)
    def _norm(self, x):
        return x * torch.rsqrt(torch.mean(x * x, dim=-1, keepdim=True) + self.eps)

    def norm(self, x):
        return self._norm(x.float()).type_as(x) * self.weight


class Gemma(Norm):  # 4: * (1.0 + weight.float()), weight zero-initialised
    def __init__(self, eps=1e-6):
        super().__init__(eps, init=0.0)

    def norm(self, x):
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return (h * (1.0 + self.weight.float())).type_as(x)


class T5(Norm):  # 5: variance from up(x), x * rsqrt with the un-cast x, cast to half weight
    def norm(self, x):
        var = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
        h = x * torch.rsqrt(var + self.eps)
        if self.weight.dtype in (torch.float16, torch.bfloat16):
            h = h.to(self.weight.dtype)
        return self.weight * h


class Weightless(Norm):  # 6: _norm(x.float()).type_as(x)
    def __init__(self, eps=1e-6):
        super().__init__(eps, weight=False)

    def norm(self, x):
        h = x.float()
        return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x)


class TorchRMSNorm(nn.Module):  # 7: nn.RMSNorm with eps=None (float32 machine eps)
    def __init__(self, eps=None):
        super().__init__()
        self.n = nn.RMSNorm(H, eps=eps)
        with torch.no_grad():
            self.n.weight.add_(0.1 * torch.randn(H))

    def norm(self, x):
        return self.n(x)


class FunctionalRMSNorm(Norm):  # 7b: F.rms_norm with an explicit eps
    def norm(self, x):
        return F.rms_norm(x, (H,), self.weight, self.eps)


class DivSqrt(Norm):  # the kind: x / sqrt(sum(x^2)/H + eps)
    def norm(self, x):
        h = x.float()
        var = h.square().sum(-1, keepdim=True) / H
        return self.weight * (h / torch.sqrt(self.eps + var)).to(x.dtype)  # scalar first: canonicalized last


class ImageGPT(Norm):  # transformers ImageGPTLayerNorm (an RMSNorm): division form, no upcast, weight in dtype
    def norm(self, x):
        t = x / torch.sqrt(torch.mean(torch.square(x), axis=-1, keepdim=True) + self.eps)
        return t * self.weight


class DeepseekV4Unweighted(Norm):  # transformers 5.24 DeepseekV4UnweightedRMSNorm (also Glm5NextTextUnweighted)
    def __init__(self, eps=1e-6):
        super().__init__(eps, weight=False)

    def norm(self, x):  # the final multiply happens in the input dtype
        return x * torch.rsqrt(x.float().square().mean(-1, keepdim=True) + self.eps).to(x.dtype)


class FlaNoUpcast(Norm):  # fla/modules/layernorm.py rms_norm_ref(upcast=False), mamba_ssm layer_norm.py alike
    def norm(self, x):
        rstd = 1 / torch.sqrt((x.square()).mean(dim=-1, keepdim=True) + self.eps)
        return (x * rstd * self.weight).to(x.dtype)


class MambaUpcast(Norm):  # mamba_ssm/ops/triton/layer_norm.py rms_norm_ref(upcast=True)
    def norm(self, x):
        dtype = x.dtype
        weight, xf = self.weight.float(), x.float()
        rstd = 1 / torch.sqrt((xf.square()).mean(dim=-1, keepdim=True) + self.eps)
        return (xf * rstd * weight).to(dtype)


class MetaLlama(Norm):  # meta-llama/llama model.py RMSNorm: _norm(x.float()).type_as(x) * weight, pow(2).mean
    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def norm(self, x):
        return self._norm(x.float()).type_as(x) * self.weight


class NanoChat(nn.Module):  # karpathy/nanochat gpt.py: def norm(x): return F.rms_norm(x, (x.size(-1),))
    def norm(self, x):
        return F.rms_norm(x, (x.size(-1),))


class VllmNative(Norm):  # vllm RMSNorm.forward_native: up, variance, * rsqrt, down, then x * weight
    def norm(self, x):
        orig = x.dtype
        x = x.to(torch.float32)
        variance = x.pow(2).mean(dim=-1, keepdim=True)
        x = x * torch.rsqrt(variance + self.eps)
        x = x.to(orig)
        return x * self.weight


#: Spellings outside the pattern family, found by discovery + verification (issue 15); with their source.
DISCOVERED = {
    "imagegpt_div": ImageGPT, "deepseek_v4_unweighted": DeepseekV4Unweighted, "fla_no_upcast": FlaNoUpcast,
    "mamba_upcast": MambaUpcast,
}
#: Further public spellings the pattern family already covers (kept in the corpus all the same).
MORE = {"meta_llama": MetaLlama, "nanochat": NanoChat, "vllm_native": VllmNative}

SPELLINGS = {
    "hf_llama": HFLlama, "olmo2": Olmo2, "gpt_fast": GptFast, "gemma": Gemma, "t5": T5,
    "weightless": Weightless, "nn_rmsnorm_eps_none": TorchRMSNorm, "f_rms_norm": FunctionalRMSNorm,
    "div_sqrt": DivSqrt,
}
#: expected weight offset per spelling (1.0 for Gemma's 1 + w)
OFFSET = {"gemma": 1.0}


class Single(nn.Module):
    """One norm of ``x``; ``r`` unused."""

    def __init__(self, norm: nn.Module):
        super().__init__()
        self.n = norm

    def forward(self, x, r):
        return self.n.norm(x)


class PreNorm(nn.Module):
    """Residual 1 (HF pre-norm): residual = h; h = norm(h); h = f(h); h = residual + h; norm again."""

    def __init__(self, make):
        super().__init__()
        self.n1, self.n2, self.n3 = make(), make(), make()
        self.proj = nn.Linear(H, H, bias=False)

    def forward(self, x, r):
        residual = x
        h = self.proj(self.n1.norm(x))
        h = residual + h
        residual = h
        h = self.proj(self.n2.norm(h))
        h = residual + h
        return self.n3.norm(h)


class Functional(nn.Module):
    """Residual 2 (meta / gpt-fast): h = x + f(norm(x)); out = h + g(norm(h))."""

    def __init__(self, make):
        super().__init__()
        self.n1, self.n2 = make(), make()
        self.f, self.g = nn.Linear(H, H, bias=False), nn.Linear(H, H, bias=False)

    def forward(self, x, r):
        h = x + self.f(self.n1.norm(x))
        return h + self.g(self.n2.norm(h))


class Sandwich(nn.Module):
    """Residual 3 (Gemma2/3): norms before and after the sub-block, the add between two norms."""

    def __init__(self, make):
        super().__init__()
        self.pre, self.post, self.pre_ff = make(), make(), make()
        self.f = nn.Linear(H, H, bias=False)

    def forward(self, x, r):
        h = self.post.norm(self.f(self.pre.norm(x)))
        h = x + h
        return self.pre_ff.norm(h), h


class Granite(nn.Module):
    """Residual 4 (scaled): residual + h * m is not a plain add: only the plain norm is rewritten."""

    def __init__(self, make):
        super().__init__()
        self.n = make()

    def forward(self, x, r):
        h = r + x * 0.22
        return self.n.norm(h), h


class ManualLayerNorm(nn.Module):
    """LayerNorm spelled out: the mean is subtracted, so it is not RMSNorm."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(H))

    def forward(self, x, r):
        h = x.float()
        h = h - h.mean(-1, keepdim=True)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-5)
        return self.weight * h.to(x.dtype)


def rms_norm_64(x: torch.Tensor, w: torch.Tensor | None, eps: float, offset: float = 0.0) -> torch.Tensor:
    """Float64 ground truth of RMSNorm."""
    x = x.double()
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y if w is None else y * (w.double() + offset)


# --- Outside the corpus (issue 32): each class names the file it paraphrases. ``OUTSIDE`` below. ---------------


class VllmFp32Residual(Norm):  # vllm model_executor/layers/layernorm.py RMSNorm.forward_static(x, residual)
    def forward2(self, x, r):  # up-cast x, the residual promoted to float32 by the add, residual = sum rounded
        orig = x.dtype
        h = x.to(torch.float32)
        h = h + r
        residual = h.to(orig)
        h = h * torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return h.to(orig) * self.weight, residual


class PolyNorm(nn.Module):  # Motif-Technologies modeling_motif.py PolyNorm (arXiv 2411.03884): 3 norms of x^k
    def __init__(self, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(3) / 3 + 0.1 * torch.randn(3))
        self.bias = nn.Parameter(torch.zeros(1) + 0.1)
        self.eps = eps

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def norm(self, x):
        return (self.weight[0] * self._norm(x ** 3) + self.weight[1] * self._norm(x ** 2)
                + self.weight[2] * self._norm(x) + self.bias)


class XTransformersNormalize(nn.Module):  # lucidrains/x-transformers x_transformers.py RMSNorm
    def __init__(self):
        super().__init__()
        self.scale = H ** 0.5
        self.g = nn.Parameter(1.0 + 0.1 * torch.randn(H))

    def norm(self, x):  # F.normalize clamps ||x|| at 1e-12 where RMSNorm adds eps under the root
        return F.normalize(x, dim=-1) * self.scale * self.g


class T5LayerNorm(Norm):  # transformers models/t5/modeling_t5.py T5LayerNorm (an RMSNorm, "no mean")
    def norm(self, x):
        variance = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
        h = x * torch.rsqrt(variance + self.eps)
        if self.weight.dtype in (torch.float16, torch.bfloat16):
            h = h.to(self.weight.dtype)
        return self.weight * h


class MambaGated(Norm):  # transformers models/mamba2/modeling_mamba2.py MambaRMSNormGated(x, gate)
    def forward2(self, x, gate):  # the norm of x * silu(gate) in float32: an RMSNorm of a gated tensor
        dt = x.dtype
        h = x.to(torch.float32)
        h = h * F.silu(gate.to(torch.float32))
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dt)


class OlmoRMSLayerNorm(Norm):  # allenai/OLMo olmo/model.py RMSLayerNorm with bias (weight * x + bias)
    def __init__(self, eps=1e-5):
        super().__init__(eps)
        self.bias = nn.Parameter(0.1 * torch.randn(H))

    def norm(self, x):
        og = x.dtype
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(og) + self.bias


class InternLM2(Norm):  # internlm/internlm2 modeling_internlm2.py InternLM2RMSNorm
    def norm(self, x):
        input_dtype = x.dtype
        h = x.to(torch.float32)
        variance = h.pow(2).mean(-1, keepdim=True)
        h = h * torch.rsqrt(variance + self.eps)
        return self.weight * h.to(input_dtype)


class ChatGLM(Norm):  # THUDM/chatglm3-6b modeling_chatglm.py RMSNorm: the product in float32, cast last
    def norm(self, x):
        input_dtype = x.dtype
        variance = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
        h = x * torch.rsqrt(variance + self.eps)
        return (self.weight * h).to(input_dtype)


class MistralRef(Norm):  # mistralai/mistral-inference one_file_ref.py RMSNorm
    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def norm(self, x):
        return self._norm(x.float()).type_as(x) * self.weight


class DivSqrtVar(Norm):  # x / sqrt(var + eps), var = pow(2).mean: NVIDIA/Megatron-LM / apex-style reference
    def norm(self, x):
        h = x.float()
        var = h.pow(2).mean(-1, keepdim=True)
        return (self.weight * (h / torch.sqrt(var + self.eps))).to(x.dtype)


class TwoInput(nn.Module):
    """A norm whose forward takes a second tensor (a residual or a gate): ``forward2(x, r)``."""

    def __init__(self, norm: nn.Module):
        super().__init__()
        self.n = norm

    def forward(self, x, r):
        return self.n.forward2(x, r)


#: name -> (module class, the op counts a full rewrite leaves: (rms_norm, fused_add_rms_norm), expectation,
#: a phrase of the near-miss reason). "full": every RMSNorm in it rewritten, numerics per docs/ops.md.
OUTSIDE = {
    "vllm_fp32_residual": (VllmFp32Residual, (0, 1), "full", None),
    "polynorm": (PolyNorm, (3, 0), "full", None),
    "xtransformers_normalize": (XTransformersNormalize, (0, 0), "near-miss", "F.normalize"),
    "t5_layernorm": (T5LayerNorm, (1, 0), "full", None),
    "mamba2_gated": (MambaGated, (1, 0), "full", None),
    "olmo_bias": (OlmoRMSLayerNorm, (1, 0), "full", None),
    "internlm2": (InternLM2, (1, 0), "full", None),
    "chatglm": (ChatGLM, (1, 0), "full", None),
    "mistral_ref": (MistralRef, (1, 0), "full", None),
    "div_sqrt_var": (DivSqrtVar, (1, 0), "full", None),
}
