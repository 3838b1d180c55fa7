"""Decode loop of a tiny HF Llama with model + top-k/top-p sampler compiled together by ``rocm_fused``.

Random weights, no download. On CPU the reference provider is forced (the sampling pass is off on CPU by
default); on a GPU the platform picks our Triton kernel (CUDA) or the AMD fork (ROCm), and the step runs with CUDA/HIP
graphs (reduce-overhead's setting: the sampler's seed is drawn inside the graph, so every replay draws fresh
tokens). Prints the tokens and the match report.

    python examples/decode_sampling.py [--steps 8] [--batch 2]
"""

from __future__ import annotations

import argparse

import torch
from transformers import LlamaConfig, LlamaForCausalLM

import rocm_inductor


def hf_sample(logits: torch.Tensor, temperature: float = 0.7, top_k: int = 50, top_p: float = 0.9):
    """HF generate's sampling step (TemperatureLogitsWarper -> TopK -> TopP -> multinomial)."""
    scores = logits[:, -1].float() / temperature
    scores = scores.masked_fill(scores < torch.topk(scores, top_k)[0][..., -1, None], -float("inf"))
    sorted_logits, sorted_indices = torch.sort(scores, descending=False)
    remove = sorted_logits.softmax(-1).cumsum(-1) <= (1 - top_p)
    remove[..., -1:] = 0
    scores = scores.masked_fill(remove.scatter(1, sorted_indices, remove), -float("inf"))
    return torch.multinomial(torch.softmax(scores, -1), 1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--batch", type=int, default=2)
    args = ap.parse_args()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    cfg = LlamaConfig(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)
    model = LlamaForCausalLM(cfg).to(dev).eval()

    def step(ids: torch.Tensor) -> torch.Tensor:
        return hf_sample(model(ids, use_cache=False).logits)

    # GPU: reduce-overhead's pieces as options (CUDA graphs); the sampling pass is on by default there.
    kw = ({"options": {"cudagraphs": True}} if dev == "cuda"
          else {"options": {"provider": "reference"}})
    compiled = torch.compile(step, backend="rocm_fused", **kw)
    ids = torch.randint(0, cfg.vocab_size, (args.batch, 4), device=dev)
    rocm_inductor.clear_reports()
    with torch.no_grad():
        for _ in range(args.steps):
            ids = torch.cat([ids, compiled(ids)], dim=1)  # each length compiles once (no KV cache: a demo)
    print(ids.tolist())
    print(rocm_inductor.reports())


if __name__ == "__main__":
    main()
