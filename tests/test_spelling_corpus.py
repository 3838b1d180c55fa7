"""The spelling corpus (docs/spellings.md): public spellings of RMSNorm, RoPE, the sigmoid gate and the sampler, each
rewritten (op counts) and checked numerically (docs/ops.md contract; sampling: distributions), negatives left
alone, near-misses named. Sources are named in norm_spellings.py / rope_spellings.py / gate_spellings.py /
sampling_spellings.py. Reference provider on CPU."""

from __future__ import annotations

import pytest
import rope_spellings as R
import sampling_spellings as S
import torch
import torch.nn as nn
from gate_spellings import GATES, NEGATIVES
from graph_utils import assert_contract, compile_run, rel_err
from norm_spellings import DISCOVERED, MORE, Single, rms_norm_64

from rocm_inductor.passes import discover

RMS = "rocm_fused.rms_norm.default"
ROPE = "rocm_fused.rope.default"
GATE = "rocm_fused.sigmoid_gate.default"
SAMPLE = "rocm_fused.sample.default"


# -- RMSNorm ---------------------------------------------------------------------------------------------
def _norm_case(name, dtype):
    return {**DISCOVERED, **MORE}[name]


@pytest.mark.parametrize("name,dtype", [(n, torch.bfloat16) for n in {**DISCOVERED, **MORE}]
                         + [("fla_no_upcast", torch.float16), ("imagegpt_div", torch.float32)])
def test_norm_spelling_rewritten(name, dtype):
    torch.manual_seed(0)
    norm = _norm_case(name, dtype)().to(dtype)
    m = Single(norm)
    x = torch.randn(5, 64, dtype=dtype) * 3
    out, (g,) = compile_run(m, x, x, options={"passes": {"rope": False, "sigmoid_gate": False, "sampling": False}})
    assert g.after[RMS] == 1 and g.after["aten.rsqrt.default"] == 0 and g.after["aten.sqrt.default"] == 0, g.after
    assert g.report.count("rms_norm") == 1 and not g.report.near_misses
    w = getattr(norm, "weight", None)
    eps = getattr(norm, "eps", None) or torch.finfo(dtype).eps  # NanoChat: F.rms_norm's eps=None
    with torch.no_grad():
        assert_contract(out, m(x, x), rms_norm_64(x, w, eps))


def test_norm_discovery_notes_and_cache():
    """A discovered norm says so in the report; 3 identical norms are verified once (signature cache)."""
    discover.reset()

    class Three(nn.Module):
        def __init__(self):
            super().__init__()
            self.ns = nn.ModuleList(DISCOVERED["fla_no_upcast"]() for _ in range(3))

        def forward(self, x):
            for n in self.ns:
                x = n.norm(x) * 2
            return x

    m = Three().to(torch.bfloat16)
    x = torch.randn(4, 64, dtype=torch.bfloat16)
    _, (g,) = compile_run(m, x)
    assert g.after[RMS] == 3
    notes = [mm.note for mm in g.report.matches]
    assert all("found by discovery, verified" in n for n in notes), notes
    assert sum("(cached)" in n for n in notes) == 2
    assert discover.stats()["verified"] == 1 and discover.stats()["cache_hits"] == 2


def test_scaled_norm_not_taken_for_a_weight():
    """``norm * 2.0``: the number is not a weight (the pattern family once traced it as one and crashed); the
    candidate is reported, the graph computes what eager does."""

    def f(x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6) * 2.0).to(x.dtype)

    x = torch.randn(4, 64, dtype=torch.bfloat16)
    out, (g,) = compile_run(f, x)
    # the float32 norm of the upcast x is rewritten (a weightless norm in float32), the * 2 and the cast stay
    assert g.after[RMS] == 1 and g.after["aten.mul.Tensor"] >= 1
    assert_contract(out, f(x), rms_norm_64(x, None, 1e-6) * 2)


def test_layernorm_left_alone():
    def ln(x):
        h = x.float()
        h = h - h.mean(-1, keepdim=True)
        return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-5)).to(x.dtype)

    _, (g,) = compile_run(ln, torch.randn(4, 64, dtype=torch.bfloat16))
    assert g.after[RMS] == 0
    assert any("LayerNorm" in n.reason for n in g.report.near_misses)


# -- RoPE ------------------------------------------------------------------------------------------------
B, HQ, SQ, D = 2, 4, 3, 16


def _tables(dt, half=False):
    c, s = R.hf_tables(B, SQ, D, torch.float32)
    if half:
        c, s = c[..., : D // 2], s[..., : D // 2]
    return c.to(dt), s.to(dt)


def _rope_cases():
    torch.manual_seed(0)
    q = torch.randn(B, HQ, SQ, D, dtype=torch.bfloat16)
    k = torch.randn(B, 2, SQ, D, dtype=torch.bfloat16)
    ch, sh = _tables(torch.bfloat16, half=True)
    cf, sf = _tables(torch.float32)
    cases = {
        "gpt_oss": (R.gpt_oss_rope, (q, k, ch, sh), 1),
        "flex_olmo": (R.flex_olmo_rope, (q, k, cf, sf), 1),
    }
    qs, ks = q.transpose(1, 2).contiguous(), k.transpose(1, 2).contiguous()  # (b, s, h, d)
    ang = torch.outer(torch.arange(SQ).float(), 1.0 / 10000 ** (torch.arange(0, D, 2).float() / D))
    fc = torch.stack([ang.cos(), ang.sin()], -1).to(torch.bfloat16)  # (s, d/2, 2)
    cases["gpt_fast"] = (R.gpt_fast_rope, (qs, ks, fc), 1)
    xs, kx = q.permute(2, 0, 1, 3).contiguous(), k.permute(2, 0, 1, 3).contiguous()  # (sq, b, np, hn)
    rc = torch.stack([ang[:, :4].cos(), ang[:, :4].sin()], -1)[:, None].expand(SQ, B, 4, 2).to(torch.bfloat16)
    cases["chatglm_partial"] = (R.chatglm_rope, (xs, kx, rc), 1)
    pos = torch.tensor([0, 3, 5, 7, 2])
    cache = torch.cat([torch.outer(torch.arange(16).float(), 1.0 / 10000 ** (torch.arange(0, 8, 2).float() / 8))
                       .cos(), torch.outer(torch.arange(16).float(),
                                           1.0 / 10000 ** (torch.arange(0, 8, 2).float() / 8)).sin()], -1)
    qv, kv = torch.randn(5, 4 * D, dtype=torch.bfloat16), torch.randn(5, 2 * D, dtype=torch.bfloat16)
    cases["vllm_native_neox_partial"] = (R.vllm_forward_native(True, rotary_dim=8), (pos, qv, kv, cache), 1)
    cache16 = torch.cat([torch.outer(torch.arange(16).float(), 1.0 / 10000 ** (torch.arange(0, D, 2).float() / D))
                         .cos(), torch.outer(torch.arange(16).float(),
                                             1.0 / 10000 ** (torch.arange(0, D, 2).float() / D)).sin()], -1)
    cases["vllm_native_gptj"] = (R.vllm_forward_native(False), (pos, qv, kv, cache16), 1)
    return cases


def _to64(a):
    return a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a


@pytest.mark.parametrize("name", ["gpt_oss", "flex_olmo", "gpt_fast", "chatglm_partial",
                                  "vllm_native_neox_partial", "vllm_native_gptj"])
def test_rope_spelling_rewritten(name):
    fn, args, n_ops = _rope_cases()[name]
    out, (g,) = compile_run(fn, *args, options={"passes": {"rms_norm": False, "sigmoid_gate": False,
                                                           "sampling": False}})
    assert g.after[ROPE] == n_ops, (g.after, g.report.near_misses)
    assert g.report.count("rope") == n_ops and not g.report.near_misses
    assert all("found by discovery, verified" in m.note for m in g.report.matches)
    with torch.no_grad():
        eager, ref = fn(*args), fn(*[_to64(a) for a in args])
    for o, e, r in zip(out, eager, ref, strict=True):
        assert_contract(o, e, r)


def test_near_rope_left_alone_with_reason():
    q = torch.randn(B, HQ, SQ, D, dtype=torch.bfloat16)
    ch, sh = _tables(torch.bfloat16, half=True)
    out, (g,) = compile_run(R.near_rope, q, q, ch, sh)
    assert g.after[ROPE] == 0
    reasons = [n.reason for n in g.report.near_misses if n.pass_name == "rope"]
    assert reasons and all("verification failed" in r and "not the same function" in r for r in reasons)
    torch.testing.assert_close(out[0], R.near_rope(q, q, ch, sh)[0], atol=2e-2, rtol=2e-2)  # Inductor: fp32 inside


# -- sigmoid gate ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(GATES))
def test_gate_spelling_rewritten(name):
    torch.manual_seed(0)
    o = nn.Linear(32, 16, bias=False).to(torch.bfloat16)
    a, gt = torch.randn(2, 3, 32, dtype=torch.bfloat16), torch.randn(2, 3, 32, dtype=torch.bfloat16)
    fn = GATES[name]
    out, (g,) = compile_run(fn, a, gt, o, options={"passes": {"rms_norm": False, "rope": False, "sampling": False}})
    assert g.after[GATE] == 1 and g.after["aten.sigmoid.default"] == 0, (g.after, g.report.near_misses)
    assert not g.report.near_misses
    with torch.no_grad():
        o64 = nn.Linear(32, 16, bias=False).double()
        o64.weight.copy_(o.weight.double())
        gated = o(fn(a, gt, nn.Identity()))  # eager
        ref = o64(a.double() * torch.sigmoid(gt.double()))
    assert rel_err(out, ref) <= rel_err(gated, ref) + torch.finfo(torch.bfloat16).eps


@pytest.mark.parametrize("name", sorted(NEGATIVES))
def test_gate_negatives_left_alone(name):
    o = nn.Linear(32, 16, bias=False).to(torch.bfloat16)
    a, gt = torch.randn(2, 3, 32, dtype=torch.bfloat16), torch.randn(2, 3, 32, dtype=torch.bfloat16)
    _, (g,) = compile_run(NEGATIVES[name], a, gt, o)
    assert g.after[GATE] == 0


# -- sampling --------------------------------------------------------------------------------------------
LOGITS = torch.tensor([2.0, 1.5, 1.0, 0.6, 0.2, -0.5, -1.0, -1.5])
N_ROWS = 4000  # 4000 draws per call: a frequency's std is <= 0.008, the 0.04 bound is 5 sigma of a difference


def _freq(tok):
    return torch.bincount(tok.reshape(-1).long(), minlength=LOGITS.numel()).double() / tok.numel()


SAMPLERS = {
    "hf_topk_topp": S.hf_sampler(temperature=0.7, top_k=5, top_p=0.9),
    "gpt_fast": S.gpt_fast_sampler(temperature=0.8, top_k=5),
    "nanogpt": S.nanogpt_sampler(temperature=0.8, top_k=5),
    "meta_llama_top_p": S.meta_llama_sampler(temperature=0.6, top_p=0.9),
    "vllm_random_sample": S.vllm_random_sample(),
    "gumbel_max": S.gumbel_max_sampler(temperature=0.7),
    "gpt_fast_returns_probs": S.gpt_fast_sample_with_probs(temperature=0.8, top_k=5),
}


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_sampler_spelling_rewritten(name):
    fn = SAMPLERS[name]
    logits = LOGITS.expand(N_ROWS, 1, -1).contiguous()
    torch.manual_seed(0)
    out, (g,) = compile_run(fn, logits.clone(), options={"passes": {"rms_norm": False, "rope": False,
                                                                    "sigmoid_gate": False}})
    assert g.after[SAMPLE] == 1, (g.after, g.report.near_misses)
    torch.manual_seed(1)
    with torch.no_grad():
        eager = fn(logits.clone())
    tok, etok = (out[0], eager[0]) if isinstance(out, tuple) else (out, eager)
    if isinstance(out, tuple):  # the escaping probs are still Inductor's, identical to eager's
        torch.testing.assert_close(out[1], eager[1])
        assert "escapes" in g.report.matches[0].note
    f, fe = _freq(tok), _freq(etok)
    assert float((f - fe).abs().max()) < 0.04, (f, fe)
    assert bool(((fe == 0) <= (f == 0)).all()) or float(f[fe == 0].max()) < 0.002  # filtered tokens stay out


def test_greedy_left_alone():
    _, (g,) = compile_run(S.greedy, torch.randn(4, 1, 8))
    assert g.after[SAMPLE] == 0 and not [n for n in g.report.near_misses if n.pass_name == "sampling"]


def test_discovery_with_symbolic_sizes():
    """Discovered RoPE and RMSNorm under a dynamic sequence / batch: verification replaces the symbols by small
    concrete sizes and the rewrite holds."""
    q = torch.randn(2, 4, 5, 16, dtype=torch.bfloat16)
    c, s = R.hf_tables(2, 5, 16, torch.bfloat16)
    c, s = c[..., :8].contiguous(), s[..., :8].contiguous()
    for t, d in ((q, 2), (c, 1), (s, 1)):
        torch._dynamo.maybe_mark_dynamic(t, d)
    out, (g,) = compile_run(R.gpt_oss_rope, q, q, c, s, dynamic=None)
    assert g.after[ROPE] == 1 and not g.report.near_misses
    assert_contract(out[0], R.gpt_oss_rope(q, q, c, s)[0], R.gpt_oss_rope(q.double(), q, c.double(), s.double())[0])
    x = torch.randn(6, 64, dtype=torch.bfloat16)
    torch._dynamo.maybe_mark_dynamic(x, 0)
    m = Single(DISCOVERED["fla_no_upcast"]().to(torch.bfloat16))
    out, (g,) = compile_run(m, x, x, dynamic=None)
    assert g.after[RMS] == 1 and not g.report.near_misses
    with torch.no_grad():
        assert_contract(out, m(x, x), rms_norm_64(x, m.n.weight, m.n.eps))


def test_discovered_norm_fuses_the_residual_add():
    """A discovered spelling (FLA's no-upcast reference) in HF's pre-norm block: the residual add whose sum is
    also used becomes fused_add_rms_norm, like the pattern family's spellings."""
    from norm_spellings import PreNorm

    torch.manual_seed(0)
    m = PreNorm(DISCOVERED["fla_no_upcast"]).to(torch.bfloat16)
    x = torch.randn(4, 64, dtype=torch.bfloat16)
    out, (g,) = compile_run(m, x, x)
    assert (g.after["rocm_fused.fused_add_rms_norm.default"], g.after[RMS]) == (2, 1), g.after
    assert g.after["aten.sqrt.default"] == g.after["aten.rsqrt.default"] == 0
    with torch.no_grad():
        ref = PreNorm(DISCOVERED["fla_no_upcast"]).double()
        ref.load_state_dict({k: v.double() for k, v in m.state_dict().items()})
        assert_contract(out, m(x, x), ref(x.double(), x.double()))


@pytest.mark.slow
def test_tiny_flex_olmo_rope_found():
    """transformers 5.24 FlexOlmo (float32 cos/sin against bf16 q/k, cast back): both RoPEs of each layer are
    rewritten (before issue 15: none, and no near-miss), logits as eager's up to bf16 rounding."""
    transformers = pytest.importorskip("transformers")
    if not hasattr(transformers, "FlexOlmoConfig"):
        pytest.skip("transformers without FlexOlmo")
    cfg = transformers.FlexOlmoConfig(
        hidden_size=64, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2,
        vocab_size=128, num_experts=2, num_experts_per_tok=1, max_position_embeddings=64, pad_token_id=0,
        bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    m = transformers.FlexOlmoForCausalLM(cfg).to(torch.bfloat16).eval()
    ids = torch.randint(0, 128, (1, 5))
    out, (g,) = compile_run(lambda ids: m(input_ids=ids, use_cache=False).logits, ids)
    assert g.after[ROPE] == cfg.num_hidden_layers and not [n for n in g.report.near_misses if n.pass_name == "rope"]
    with torch.no_grad():
        eager = m(input_ids=ids, use_cache=False).logits
    assert rel_err(out, eager) < 3e-2  # bf16 logits of a 2-layer model: rounding differences only
