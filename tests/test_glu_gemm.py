"""``rocm_fused::glu_gemm`` / ``rms_norm_glu_gemm`` (issue 31): the ops, the Triton kernel (interpreter) and the
glu_gemm pass (the gated activation moved into the gate/up GEMM's epilogue), plus the ``features`` option that asks
for the RMSNorm fold's dot tile at M >= 2.

Numerics: the op rounds once from float32 accumulators, so it is held to the numerics contract (docs/ops.md) against
the *unfused* eager chain (g, u rounded, act(g) rounded, the product rounded) and float64.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from graph_utils import assert_contract, compile_run, graph_run_eagerly

from rocm_inductor.providers.reference import rms_norm_glu_gemm_ref
from rocm_inductor.providers.reference_glu import activate, glu_gemm_ref

GLU, NGLU = "rocm_fused.glu_gemm.default", "rocm_fused.rms_norm_glu_gemm.default"
MERGED, FOLD = "rocm_fused.merged_gemm.default", "rocm_fused.rms_norm_gemm.default"
OPTS = {"passes": {"gemm_merge": True, "norm_gemm": True, "glu_gemm": True}}


def _eager(x, wg, wu, bg, bu, act):
    """The unfused chain in x's dtype: two GEMMs rounded, the activation rounded, the product rounded."""
    g = x @ wg.t() + (0 if bg is None else bg)
    u = x @ wu.t() + (0 if bu is None else bu)
    return activate(g, act) * u


def test_triton_kernel_meets_the_contract():
    """Full-K GEMV tile (M <= 8) and dot tile, the three activations, biases, masked K, every dtype; the norm form
    (one launch and, fp16 at M >= 2, two) with the residual sum bitwise."""
    from rocm_inductor.providers.triton import glu_gemm as tg

    g = torch.Generator().manual_seed(0)
    for dtype, m, k, n, act, bias in [
        (torch.bfloat16, 1, 64, 40, "silu", False),      # GEMV tile, N not a multiple of BLOCK_N
        (torch.float16, 3, 96, 24, "gelu_tanh", True),   # masked K, biases
        (torch.bfloat16, 20, 64, 16, "gelu", False),     # dot tile, BLOCK_M 32
        (torch.float32, 8, 48, 8, "silu", True),         # fp32: the IEEE dot tile
    ]:
        x = torch.randn(m, k, generator=g).to(dtype)
        wg, wu = ((torch.randn(n, k, generator=g) / 8).to(dtype) for _ in range(2))
        bg, bu = ((torch.randn(n, generator=g).to(dtype) if bias else None) for _ in range(2))
        cfg = tg.glu_config(m, k, n, dtype)
        assert cfg.full == (m <= 8 and dtype != torch.float32) and cfg.split_k == 1
        f64 = [None if t is None else t.double() for t in (x, wg, wu, bg, bu)]
        ref64 = glu_gemm_ref(*f64, act)
        assert_contract(tg.glu_gemm(x, wg, wu, bg, bu, act), _eager(x, wg, wu, bg, bu, act), ref64)
        r, gw = torch.randn(m, k, generator=g).to(dtype), (torch.rand(k, generator=g) + 0.5).to(dtype)
        outs = tg.rms_norm_glu_gemm(x, r, gw, 1e-6, 0.0, wg, wu, bg, bu, act)
        want = rms_norm_glu_gemm_ref(x, r, gw, 1e-6, 0.0, wg, wu, bg, bu, act)
        want64 = rms_norm_glu_gemm_ref(f64[0], r.double(), gw.double(), 1e-6, 0.0, *f64[1:], act)
        assert torch.equal(outs[1], want[1])
        assert_contract(outs[0], want[0], want64[0])


def test_ops_validate_and_fake():
    x, w = torch.randn(2, 16), torch.randn(8, 16)
    op = torch.ops.rocm_fused.glu_gemm
    with pytest.raises(ValueError, match="activation"):
        op(x, w, w, None, None, "relu", "reference")
    with pytest.raises(ValueError, match="differ"):
        op(x, w, w[:4], None, None, "silu", "reference")
    out = torch.ops.rocm_fused.rms_norm_glu_gemm(x.view(1, 2, 16), None, None, 1e-6, 0.0, w, w, None, None,
                                                 "gelu", "reference")
    assert len(out) == 1 and out[0].shape == (2, 8)


class _MLP(torch.nn.Module):
    """A gated MLP behind an RMSNorm (after a residual add when ``residual``), in the spellings of HF LlamaMLP /
    Qwen3 (``act(gate(x)) * up(x)``), gpt-fast (``F.silu(w1(x)) * w3(x)``, the same graph), Gemma (GELU-tanh),
    the operands swapped, and two that are no gated activation of ours: ReGLU and a product returned twice."""

    def __init__(self, spelling, h=32, i=48):
        super().__init__()
        self.spelling = spelling
        self.gw = torch.nn.Parameter(torch.rand(h) + 0.5)
        self.gate, self.up, self.down = (torch.nn.Linear(a, b, bias=False) for a, b in ((h, i), (h, i), (i, h)))

    def forward(self, x, res):
        s = x + res
        y = (self.gw * (s.float() * torch.rsqrt(s.float().pow(2).mean(-1, keepdim=True) + 1e-6))).to(x.dtype)
        g, u = self.gate(y), self.up(y)
        if self.spelling == "silu":
            h = F.silu(g) * u
        elif self.spelling == "gelu_tanh_swapped":
            h = u * F.gelu(g, approximate="tanh")
        elif self.spelling == "relu":
            h = F.relu(g) * u
        else:  # "read_twice": the activation is also an output
            a = F.silu(g)
            return self.down(a * u), a, s
        return self.down(h), s


class _Chain(torch.nn.Module):
    """Two :class:`_MLP` of different spellings one after the other (one compile checks both)."""

    def __init__(self, first, second):
        super().__init__()
        self.a, self.b = _MLP(first), _MLP(second)

    def forward(self, x, res):
        first = self.a(x, res)
        return first + self.b(first[0], first[-1])


def test_pass_spellings_counts_numerics_and_near_misses():
    """Two compiles (reference provider, M = 3): SwiGLU and swapped GELU-tanh (bf16) each become one
    ``rms_norm_glu_gemm`` (no merged_gemm / rms_norm_gemm left), within the contract of eager; ReGLU and a shared
    activation (float32: the unfused leftovers are C++ Inductor kernels, slow to build in bf16) stay as they were,
    each a near-miss with its reason."""
    for (first, second), dtype, folded in [(("silu", "gelu_tanh_swapped"), torch.bfloat16, True),
                                           (("relu", "read_twice"), torch.float32, False)]:
        torch.manual_seed(0)
        mod = _Chain(first, second).to(dtype).eval()
        x, res = torch.randn(1, 3, 32, dtype=dtype), torch.randn(1, 3, 32, dtype=dtype)
        out, seen = compile_run(mod, x, res, options=OPTS)
        (c,) = seen
        with torch.no_grad():
            eager = mod(x, res)
            ref64 = mod.double()(x.double(), res.double())
        for o, e, f in zip(out, eager, ref64, strict=True):
            assert_contract(o, e, f)
        if folded:
            assert c.after[NGLU] == 2 and not c.after.get(FOLD) and not c.after.get(MERGED)
            notes = sorted(m.note.split(", bucket")[0] for m in c.report.matches if m.pass_name == "glu_gemm")
            assert notes == [f"{act}(gate) * up in the epilogue of RMSNorm + gate/up GEMMs (N 48/48)"
                             for act in ("gelu_tanh", "silu")]
        else:
            assert c.after[FOLD] == 2 and not c.after.get(NGLU)
            reasons = sorted(n.reason for n in c.report.near_misses if n.pass_name == "glu_gemm")
            assert len(reasons) == 2 and all(r.startswith("RMSNorm + gate/up GEMMs (N 48/48): ") for r in reasons)
            assert any("is also used outside the region" in r for r in reasons), reasons
            assert any("not act(gate) * up for silu / gelu_tanh / gelu" in r for r in reasons), reasons


def test_pass_with_the_triton_kernel_and_without_the_fold():
    """glu_gemm (no norm fold) through the Triton provider (interpreter), Inductor's ``x / (1 + exp(-x))``."""
    torch.manual_seed(0)
    mod = _MLP("silu").eval()
    x, res = torch.randn(1, 2, 32), torch.randn(1, 2, 32)
    out, seen = compile_run(mod, x, res, options={"passes": {"gemm_merge": True, "glu_gemm": True},
                                                  "providers": {"glu_gemm": "triton"}})
    (c,) = seen
    assert c.after[GLU] == 1 and not c.after.get(MERGED)
    assert [m.provider for m in c.report.matches if m.pass_name == "glu_gemm"] == ["triton"]
    with torch.no_grad():
        for o, e in zip(out, mod(x, res), strict=True):
            torch.testing.assert_close(o, e, rtol=1e-5, atol=1e-5)


def test_off_by_default_and_the_features_option():
    from rocm_inductor.options import parse_options
    from rocm_inductor.passes.glu_gemm import GluGemmPass
    from rocm_inductor.policy import PASS_DEFAULTS

    assert all(PASS_DEFAULTS[p]["glu_gemm"] is False for p in ("cuda", "rocm")) and not GluGemmPass.enabled_by_provider
    opts = parse_options({"features": {"norm_gemm_dot": True}})
    assert opts.feature("norm_gemm_dot") and not parse_options({}).feature("norm_gemm_dot")
    assert opts.key() != parse_options({}).key()  # a new FX-cache key
    with pytest.raises(ValueError, match="features key"):
        parse_options({"features": {"norm_dot": True}})
    with pytest.raises(ValueError, match="True or False"):
        parse_options({"features": {"norm_gemm_dot": 1}})


def test_features_option_reaches_the_fold_spec(monkeypatch):
    """``features.norm_gemm_dot`` sets the fold's ``dot_prologue`` spec key (read by the Triton GPU check)."""
    from rocm_inductor.passes.context import PassContext

    seen, orig = [], PassContext.choose

    def choose(self, op, spec, forced=None):
        seen.append((op, spec.get("dot_prologue")))
        return orig(self, op, spec, forced)

    monkeypatch.setattr(PassContext, "choose", choose)
    mod = _MLP("silu").eval()
    compile_run(mod, torch.randn(1, 2, 32), torch.randn(1, 2, 32),
                options={**OPTS, "features": {"norm_gemm_dot": True}})  # glu_gemm too: no C++ kernel left to build
    assert ("rms_norm_gemm", True) in seen


@pytest.mark.slow
@pytest.mark.parametrize("name,act", [("llama", "silu"), ("gemma", "gelu_tanh")])
def test_hf_mlps_fold_to_one_op_per_layer(name, act):
    """Tiny HF Llama (SwiGLU) and Gemma (``gelu_pytorch_tanh``), 2 layers, reference provider: each layer's
    post_attention_layernorm -> gate/up -> act * up is one ``rms_norm_glu_gemm``; logits within 1e-5 of eager.
    Gemma compiles end to end (the suite's end-to-end Gemma compile); Llama's rewritten graph runs eagerly
    (``graph_run_eagerly``; Llama compiles end to end in test_attention_models)."""
    pytest.importorskip("transformers")
    from tiny_hf import LAYERS, tiny_causal_lm

    torch.manual_seed(0)
    model = tiny_causal_lm(name, intermediate_size=96, perturb_norms=name == "gemma").eval()
    ids = torch.randint(0, 128, (2, 3))
    fn = lambda ids: model(input_ids=ids, use_cache=False).logits  # noqa: E731
    with graph_run_eagerly(enabled=name != "gemma"):
        out, seen = compile_run(fn, ids, options=OPTS)
    (c,) = seen
    assert c.after[NGLU] == LAYERS and c.after[FOLD] == LAYERS  # gate/up + act folded; q/k/v keep their fold
    assert {m.note.split("(gate)")[0] for m in c.report.matches if m.pass_name == "glu_gemm"} == {act}
    with torch.no_grad():
        eager = fn(ids)
    assert float((out - eager).abs().max() / eager.abs().max()) <= 1e-5
