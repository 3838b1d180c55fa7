"""Example for ``python -m rocm_inductor explain``: a tiny random-weight HF Llama (no download).

    python -m rocm_inductor explain examples/explain_tiny_llama.py:tiny_llama
    python -m rocm_inductor explain examples/explain_tiny_llama.py:mixed_norms --provider reference

Each function returns ``(model, example_inputs)``; the CLI compiles the model with ``backend="rocm_fused"``,
runs it once and prints what our passes rewrote and what they left alone (and why). On a machine without
a GPU nothing is rewritten by default (Inductor's C++ code is already right for CPU): ``tiny_llama`` forces
the pure-torch ``reference`` provider there so that the passes run.
"""

from __future__ import annotations

import torch


def tiny_llama():
    """2-layer Llama, hidden 64, bf16 on the GPU (fp32 on CPU); input: 1 x 16 token ids."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    torch.manual_seed(0)
    gpu = torch.cuda.is_available()
    device, dtype = ("cuda", torch.bfloat16) if gpu else ("cpu", torch.float32)
    model = LlamaForCausalLM(cfg).to(device, dtype).eval()
    ids = torch.randint(0, cfg.vocab_size, (1, 16), device=device)
    kwargs = {} if gpu else {"options": {"provider": "reference"}}
    return model, (ids,), kwargs


class _RMSNorm(torch.nn.Module):
    """RMSNorm with the weight applied in float32 before the cast (OLMo2 / ``nn.RMSNorm`` style)."""

    def __init__(self, hidden: int, weight_dtype: torch.dtype) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(hidden, dtype=weight_dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (self.weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6))).to(x.dtype)


class MixedNorms(torch.nn.Module):
    """Three norms on a bf16 input: bf16-weight RMSNorm, fp32-weight RMSNorm, LayerNorm."""

    def __init__(self, hidden: int = 64) -> None:
        super().__init__()
        self.norm_bf16 = _RMSNorm(hidden, torch.bfloat16)
        self.norm_fp32_weight = _RMSNorm(hidden, torch.float32)  # kept in fp32, as some checkpoints do
        self.layer_norm = torch.nn.LayerNorm(hidden, dtype=torch.bfloat16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer_norm(self.norm_fp32_weight(self.norm_bf16(x)))


def mixed_norms():
    """MixedNorms on a (2, 8, 64) bf16 input: one norm matches, one is a near-miss with FlashInfer/AMD
    FlashInfer (they need weight dtype == input dtype), the LayerNorm is left to Inductor."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    return MixedNorms().to(device).eval(), (torch.randn(2, 8, 64, dtype=torch.bfloat16, device=device),)


if __name__ == "__main__":
    import rocm_inductor

    model, inputs, kwargs = tiny_llama()
    print(rocm_inductor.explain(model, *inputs, **kwargs))
