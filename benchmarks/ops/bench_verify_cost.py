"""Compile-time cost of issue 15's compile-time verification (passes/discover.py), on CPU.

Compiles (fresh Dynamo/Inductor caches each time, reference provider) a tiny HF Llama (transformers config,
random weights) and gpt-fast's Transformer (tests/gpt_fast_model.py, gpt-fast's model.py condensed), each
with 2 and 32 layers, three ways: level 0 (plain Inductor), rewrites with verification, rewrites with it
switched off (``discover.ENABLED``). Prints a markdown table: first-call seconds (compile + one run), regions
verified, signature-cache hits, seconds spent verifying. HF Llama's spellings are all on the fast path (no
verification runs); gpt-fast's RoPE is found by discovery, so its layers exercise the cache.

    PYTHONPATH=$PWD python benchmarks/ops/bench_verify_cost.py [--layers 2 32] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tests"))


def hf_llama(layers: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                      num_hidden_layers=layers, vocab_size=128, max_position_embeddings=64)
    m = LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    ids = torch.randint(0, 128, (1, 4))
    return (lambda ids: m(input_ids=ids, use_cache=False).logits), (ids,)


def gpt_fast(layers: int):
    import gpt_fast_model as G

    m = G.Transformer(G.ModelArgs(n_layer=layers)).to(torch.bfloat16)
    m.setup_caches(1, 64)
    x, pos = torch.randint(0, 128, (1, 1)), torch.tensor([3])
    return (lambda x, pos: G.decode_one_token(m, x, pos, temperature=0.8, top_k=10)), (x, pos)


def first_call_seconds(fn, args, options) -> float:
    torch._dynamo.reset()
    with torch._inductor.config.patch(force_disable_caches=True), torch.no_grad():
        t0 = time.perf_counter()
        torch.compile(fn, backend="rocm_fused", options=options)(*args)
        return time.perf_counter() - t0


def main() -> None:
    from rocm_inductor.passes import discover

    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, nargs="+", default=[2, 32])
    ap.add_argument("--out", default="benchmarks/results")
    a = ap.parse_args()
    rows = ["| model | layers | level 0 (s) | rewrites, verified (s) | rewrites, unverified (s) | regions verified "
            "| cache hits | verifying (s) |", "|---|---|---|---|---|---|---|---|"]
    for name, build in (("HF Llama", hf_llama), ("gpt-fast", gpt_fast)):
        for n in a.layers:
            fn, args = build(n)
            first_call_seconds(fn, args, {"provider": "reference"})  # warm-up: imports, pattern registration
            t0 = first_call_seconds(fn, args, {"level": 0})
            discover.reset()
            t_on = first_call_seconds(fn, args, {"provider": "reference"})
            st = discover.stats()
            discover.ENABLED[0] = False
            try:
                t_off = first_call_seconds(fn, args, {"provider": "reference"})
            finally:
                discover.ENABLED[0] = True
            rows.append(f"| {name} | {n} | {t0:.1f} | {t_on:.1f} | {t_off:.1f} | {st['verified']} | "
                        f"{st['cache_hits']} | {st['seconds']:.3f} |")
            print(rows[-1], flush=True)
    text = "\n".join(rows)
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "verify_cost.md").write_text(
        f"torch {torch.__version__}, CPU ({torch.get_num_threads()} threads), {time.strftime('%Y-%m-%d')}\n\n"
        + text + "\n")
    print(text)


if __name__ == "__main__":
    main()
