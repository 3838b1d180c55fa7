"""gemm_merge on real model code: tiny HF Llama / Qwen3 / Gemma (transformers configs, random weights, 2 layers)
and a gpt-fast style decoder, compiled with backend="rocm_fused" on CPU.

Per layer q/k/v (3 GEMMs) and gate/up (2) become one ``merged_gemm`` each; o_proj, down_proj and lm_head stay
(single GEMMs of their activation, unmeasured on CPU: see test_gemm_merge_single.py for measured ones). gpt-fast's
``wqkv`` is already one GEMM: unchanged (no table entry for it: a provider choice, never a merge); its ``w1``/``w3``
merge.
Logits within tolerance of eager. Qwen3's per-head q/k RMSNorm after the projections reads the merged outputs.
The rewritten graphs run eagerly (``graph_run_eagerly``: the passes and counts are a real compile's; every family's
end-to-end compile is elsewhere: test_attention_models, test_glu_gemm).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from graph_utils import capture, graph_run_eagerly
from tiny_hf import LAYERS, tiny_causal_lm

transformers = pytest.importorskip("transformers")

MM, ADDMM, MERGED = "aten.mm.default", "aten.addmm.default", "rocm_fused.merged_gemm.default"


def _hf(name: str):
    return tiny_causal_lm(name, intermediate_size=96)  # gate/up N 96: not q's 64


def _run(fn, *args, provider="reference"):
    torch._dynamo.reset()
    with graph_run_eagerly(), capture() as seen, torch.no_grad():
        out = torch.compile(fn, backend="rocm_fused", options={"provider": provider, "strict": True,
                                                                "passes": {"gemm_merge": True}})(*args)
    return out, seen


def _assert_close(out, eager, tol):
    err = float((out.float() - eager.float()).abs().max() / eager.float().abs().max())
    assert err <= tol, err


@pytest.mark.slow
@pytest.mark.parametrize("name,provider", [("llama", "reference"), ("qwen3", "reference"), ("gemma", "reference"),
                                           ("llama", "triton")])
def test_hf_projections_merged(name, provider):
    torch.manual_seed(0)
    model = _hf(name).eval()
    ids = torch.randint(0, 128, (2, 3))  # M = 6 tokens: a decode-sized bucket
    fn = lambda ids: model(input_ids=ids, use_cache=False).logits  # noqa: E731
    out, seen = _run(fn, ids, provider=provider)
    (c,) = seen
    assert c.after[MERGED] == 2 * LAYERS
    assert c.after.get(MM, 0) + c.after.get(ADDMM, 0) == 2 * LAYERS + 1  # o_proj, down_proj, lm_head
    notes = sorted(m.note.split(",")[0] + m.note.split(",")[1] for m in c.report.matches if m.op == "merged_gemm")
    assert notes == ["2 GEMMs merged N 96/96"] * LAYERS + ["3 GEMMs merged N 64/32/32"] * LAYERS
    with torch.no_grad():
        eager = fn(ids)
    _assert_close(out, eager, 1e-5)


# ---------------------------------------------------------------------------------------------- gpt-fast


class _RMSNorm(torch.nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps, self.weight = eps, torch.nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(torch.mean(x * x, dim=-1, keepdim=True) + self.eps) * self.weight


class _Attention(torch.nn.Module):
    """gpt-fast ``Attention``: one fused ``wqkv`` projection split into q, k, v."""

    def __init__(self, dim, n_head, n_local_heads, head_dim):
        super().__init__()
        self.n_head, self.n_local_heads, self.head_dim = n_head, n_local_heads, head_dim
        self.wqkv = torch.nn.Linear(dim, (n_head + 2 * n_local_heads) * head_dim, bias=False)
        self.wo = torch.nn.Linear(n_head * head_dim, dim, bias=False)

    def forward(self, x):
        bsz, seqlen, _ = x.shape
        kv_size = self.n_local_heads * self.head_dim
        q, k, v = self.wqkv(x).split([self.n_head * self.head_dim, kv_size, kv_size], dim=-1)
        q = q.view(bsz, seqlen, self.n_head, self.head_dim).transpose(1, 2)
        k = k.view(bsz, seqlen, self.n_local_heads, self.head_dim).transpose(1, 2)
        v = v.view(bsz, seqlen, self.n_local_heads, self.head_dim).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return self.wo(y.transpose(1, 2).contiguous().view(bsz, seqlen, -1))


class _FeedForward(torch.nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.w1 = torch.nn.Linear(dim, hidden, bias=False)
        self.w3 = torch.nn.Linear(dim, hidden, bias=False)
        self.w2 = torch.nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class GptFast(torch.nn.Module):
    """A gpt-fast style decoder (functional pre-norm residuals), 2 layers, no KV cache."""

    def __init__(self, vocab=128, dim=64, n_head=4, n_local_heads=2, hidden=96, layers=LAYERS):
        super().__init__()
        self.tok_embeddings = torch.nn.Embedding(vocab, dim)
        self.layers = torch.nn.ModuleList()
        for _ in range(layers):
            blk = torch.nn.Module()
            blk.attention = _Attention(dim, n_head, n_local_heads, dim // n_head)
            blk.feed_forward = _FeedForward(dim, hidden)
            blk.attention_norm, blk.ffn_norm = _RMSNorm(dim), _RMSNorm(dim)
            self.layers.append(blk)
        self.norm = _RMSNorm(dim)
        self.output = torch.nn.Linear(dim, vocab, bias=False)

    def forward(self, idx):
        x = self.tok_embeddings(idx)
        for blk in self.layers:
            h = x + blk.attention(blk.attention_norm(x))
            x = h + blk.feed_forward(blk.ffn_norm(h))
        return self.output(self.norm(x))


@pytest.mark.slow
def test_gpt_fast_w1_w3_merged_wqkv_unchanged():
    torch.manual_seed(0)
    model = GptFast().eval()
    ids = torch.randint(0, 128, (2, 3))
    out, seen = _run(model, ids)
    (c,) = seen
    assert c.before.get(MM, 0) == 5 * LAYERS + 1  # wqkv, wo, w1, w3, w2 per layer; output
    assert c.after[MERGED] == LAYERS  # w1/w3 only
    assert c.after[MM] == 3 * LAYERS + 1  # wqkv (already one GEMM), wo, w2 per layer; output
    assert all(m.note.startswith("2 GEMMs merged, N 96/96") for m in c.report.matches if m.op == "merged_gemm")
    with torch.no_grad():
        eager = model(ids)
    _assert_close(out, eager, 1e-5)

