"""The sigmoid output gate pass: op counts, numerics, layouts, negatives, near-misses, policy, a tiny Qwen3-Next.

Each compile goes through the real backend (``backend="rocm_fused"``) with a forced provider
(``reference``, or ``triton`` under ``TRITON_INTERPRET=1`` on CPU). Modules are kept tiny: compiles
dominate the runtime.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from graph_utils import assert_contract, compile_run, rel_err

from rocm_inductor.options import parse_options
from rocm_inductor.passes.manager import PassManager
from rocm_inductor.policy import PASS_DEFAULTS, PROVIDER_ORDER

OP = "rocm_fused.sigmoid_gate.default"
SIG = "aten.sigmoid.default"
#: Passes owned by others, off in these tests so a count here only reflects this pass.
OTHERS_OFF = {"rms_norm": False, "rope": False, "sampling": False}


def _opts(**kw):
    return {"passes": dict(OTHERS_OFF), **kw}


class QwenNextGate(nn.Module):
    """Qwen3-Next / Qwen3.5 attention's gate (SPELLINGS.md gate 1), from modeling_qwen3_next.py.

    q_proj emits 2*H*D per token, viewed (b, s, H, 2D) and chunked into query and gate; the gate is
    reshaped to (b, s, H*D) and multiplied into the attention output before o_proj.
    """

    def __init__(self, hidden=32, heads=2, head_dim=16):
        super().__init__()
        self.heads, self.head_dim = heads, head_dim
        self.q_proj = nn.Linear(hidden, 2 * heads * head_dim, bias=False)
        self.o_proj = nn.Linear(heads * head_dim, hidden, bias=False)

    def forward(self, h):
        b, s, _ = h.shape
        q, gate = torch.chunk(self.q_proj(h).view(b, s, -1, 2 * self.head_dim), 2, dim=-1)
        gate = gate.reshape(b, s, -1)
        q = q.transpose(1, 2)
        attn = F.scaled_dot_product_attention(q, q, q, is_causal=True).transpose(1, 2).contiguous()
        attn = attn.reshape(b, s, -1).contiguous()
        attn = attn * torch.sigmoid(gate)
        return self.o_proj(attn)


class HYV4Gate(nn.Module):
    """HY-V4's gate (SPELLINGS.md gate 2): gate_proj(hidden) viewed (b, s, H, Dv), multiplied into the
    attention output in (b, s, H, Dv) layout before the reshape; written ``sigmoid(g) * attn`` (the other
    operand order)."""

    def __init__(self, hidden=32, heads=2, v_head_dim=16):
        super().__init__()
        self.heads, self.dv = heads, v_head_dim
        self.v_proj = nn.Linear(hidden, heads * v_head_dim, bias=False)
        self.gate_proj = nn.Linear(hidden, heads * v_head_dim, bias=False)
        self.o_proj = nn.Linear(heads * v_head_dim, hidden, bias=False)

    def forward(self, h):
        b, s, _ = h.shape
        v = self.v_proj(h).view(b, s, self.heads, self.dv).transpose(1, 2)
        attn = F.scaled_dot_product_attention(v, v, v, is_causal=True).transpose(1, 2).contiguous()
        gate = self.gate_proj(h).view(b, s, self.heads, self.dv)
        attn = torch.sigmoid(gate) * attn
        return self.o_proj(attn.reshape(b, s, -1))


def _model(cls, dtype, seed=0):
    torch.manual_seed(seed)
    return cls().to(dtype).eval()


def _ref64(m, h):
    m64 = type(m)().double()
    m64.load_state_dict({k: v.double() for k, v in m.state_dict().items()})
    with torch.no_grad():
        return m64(h.double().cpu())


def _check_rewrite(seen, n=1):
    (cap,) = seen
    assert cap.before[SIG] == n and cap.before[OP] == 0
    assert cap.after[OP] == n and cap.after[SIG] == 0, cap.after
    assert cap.report.count("sigmoid_gate") == n
    return cap


# -- rewrites -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype,dynamic", [(torch.bfloat16, False), (torch.float16, False),
                                           (torch.float32, False), (torch.bfloat16, True)],
                         ids=["bf16", "fp16", "fp32", "bf16-dynamic"])
def test_qwen3_next_layout(dtype, dynamic):
    m = _model(QwenNextGate, dtype)
    h = torch.randn(2, 5, 32).to(dtype)
    out, seen = compile_run(m, h, options=_opts(), dynamic=dynamic)
    cap = _check_rewrite(seen)
    (match,) = cap.report.matches
    assert match.provider == "reference" and match.dtype == str(dtype).replace("torch.", "")
    assert ("s" in match.shape) == dynamic  # symbolic token count under dynamic=True
    with torch.no_grad():
        eager = m(h)
    assert_contract(out, eager, _ref64(m, h))


def test_hyv4_layout_gate_first():
    m = _model(HYV4Gate, torch.bfloat16)
    h = torch.randn(2, 3, 32).to(torch.bfloat16)
    out, seen = compile_run(m, h, options=_opts())
    cap = _check_rewrite(seen)
    assert cap.report.matches[0].shape == "(2, 3, 2, 16)"  # (b, s, H, Dv) layout
    with torch.no_grad():
        eager = m(h)
    assert_contract(out, eager, _ref64(m, h))


def test_triton_provider_end_to_end():
    """Forced Triton provider (interpreter on CPU, the GPU when there is one): rewritten, and the compiled
    graph runs our kernel."""
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    m = _model(QwenNextGate, torch.bfloat16).to(dev)
    h = torch.randn(2, 5, 32).to(torch.bfloat16).to(dev)
    out, seen = compile_run(m, h, options=_opts(provider="triton"))
    cap = _check_rewrite(seen)
    assert cap.report.providers() == {"sigmoid_gate": ["triton"]}
    with torch.no_grad():
        eager = m(h)
    assert_contract(out.cpu(), eager.cpu(), _ref64(m, h))


# -- negatives: not this op (left alone, no near-miss) ----------------------------------------------------------
class NotGates(nn.Module):
    """Things that contain ``* sigmoid`` but are not an output gate; each feeds a projection."""

    def __init__(self, hidden=32, inter=64):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.gate_up = nn.Linear(hidden, 2 * inter, bias=False)
        self.down = nn.Linear(inter, hidden, bias=False)
        self.router = nn.Linear(hidden, 1, bias=False)
        self.o = nn.Linear(hidden, hidden, bias=False)

    def forward(self, h):
        a = self.gate_proj(h)
        silu_written = self.down(a * torch.sigmoid(a))                                 # SiLU by hand
        silu_mlp = self.down(F.silu(self.gate_proj(h)) * self.up_proj(h))              # SwiGLU MLP
        glu_mlp = self.down(torch.sigmoid(self.gate_proj(h)) * self.up_proj(h))        # sigmoid-GLU MLP
        g, u = self.gate_up(h).chunk(2, dim=-1)
        fused_glu = self.down(u * torch.sigmoid(g))                                    # fused gate_up GLU
        f_glu = self.down(F.glu(self.gate_up(h), dim=-1))                              # F.glu
        router = self.o(torch.sigmoid(self.router(h)) * h)                             # (T, 1) broadcast
        return silu_written + silu_mlp + glu_mlp + fused_glu + f_glu + router


@pytest.mark.slow
def test_negatives_left_alone():
    torch.manual_seed(0)
    m = NotGates().to(torch.bfloat16).eval()
    h = torch.randn(6, 32).to(torch.bfloat16)
    out, seen = compile_run(m, h, options=_opts())
    (cap,) = seen
    assert cap.before[SIG] >= 4
    assert cap.after[OP] == 0 and cap.after[SIG] == cap.before[SIG]
    assert cap.report.count() == 0 and not cap.report.near_misses
    with torch.no_grad():
        torch.testing.assert_close(out, m(h), rtol=2e-2, atol=2e-2)


# -- near-misses: gates we do not rewrite, with the reason ---------------------------------------------------------
def test_near_misses_say_why():
    """Under the Triton provider: an fp32 gate and a width-24 gate miss with the kernel's reasons; a gate
    whose product is returned (no projection) misses for every provider. The graph stays correct."""
    torch.manual_seed(0)
    o32 = nn.Linear(64, 8, bias=False)
    o24 = nn.Linear(24, 8, bias=False).to(torch.bfloat16)

    def f(a32, g32, a24, g24, a, g):
        return o32(a32 * torch.sigmoid(g32)), o24(a24 * torch.sigmoid(g24)), a * torch.sigmoid(g)

    args = (torch.randn(3, 64), torch.randn(3, 64), torch.randn(3, 24).bfloat16(), torch.randn(3, 24).bfloat16(),
            torch.randn(3, 64).bfloat16(), torch.randn(3, 64).bfloat16())
    out, seen = compile_run(f, *args, options=_opts(provider="triton"))
    (cap,) = seen
    assert cap.after[OP] == 0 and cap.after[SIG] == 3
    reasons = sorted(n.reason for n in cap.report.near_misses)
    assert len(reasons) == 3, reasons
    assert any("float16/bfloat16, input is float32" in r for r in reasons)
    assert any("not a multiple of 16" in r for r in reasons)
    assert any("does not feed a projection" in r for r in reasons)
    with torch.no_grad():
        for got, want in zip(out, f(*args), strict=True):
            torch.testing.assert_close(got, want, rtol=2e-2, atol=2e-2)


def test_training_graph_is_reported_not_rewritten():
    """With parameters requiring grad the sigmoid is kept for backward: nothing matches, a near-miss says so."""
    from graph_utils import capture

    torch.manual_seed(0)
    m = QwenNextGate()
    h = torch.randn(2, 3, 32)
    torch._dynamo.reset()
    with capture() as seen:
        torch.compile(m, backend="rocm_fused", options={"provider": "reference", "strict": True,
                                                         "passes": dict(OTHERS_OFF)})(h).sum().backward()
    fwd = seen[0]
    assert fwd.after[OP] == 0
    assert any("used elsewhere" in n.reason for n in fwd.report.near_misses)


# -- the op itself ----------------------------------------------------------------------------------------------
def test_op_rejects_broadcast_and_mixed_dtypes():
    x = torch.randn(4, 32, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="does not broadcast"):
        torch.ops.rocm_fused.sigmoid_gate(x, x[:, :1], "reference")
    with pytest.raises(ValueError, match="dtype"):
        torch.ops.rocm_fused.sigmoid_gate(x, x.float(), "reference")
    with pytest.raises(ValueError, match="float16/bfloat16/float32"):
        torch.ops.rocm_fused.sigmoid_gate(x.double(), x.double(), "reference")


def test_op_fake_and_reference():
    from torch._subclasses.fake_tensor import FakeTensorMode

    from rocm_inductor.ops.sigmoid_gate import gate_spec

    x, g = torch.randn(3, 4, 32, dtype=torch.bfloat16), torch.randn(3, 4, 32, dtype=torch.bfloat16)
    y = torch.ops.rocm_fused.sigmoid_gate(x, g, "reference")
    assert rel_err(y, x.double() * torch.sigmoid(g.double())) <= torch.finfo(torch.bfloat16).eps
    with FakeTensorMode() as mode:
        fx, fg = mode.from_tensor(x), mode.from_tensor(g)
        fy = torch.ops.rocm_fused.sigmoid_gate(fx, fg, "reference")
        assert fy.shape == x.shape and fy.dtype == x.dtype
        spec = gate_spec(fx, fg.transpose(0, 1))
    assert spec["width"] == 32 and spec["x_contiguous"] and not spec["gate_contiguous"]


# -- policy ------------------------------------------------------------------------------------------------------
def test_policy_entries():
    assert PROVIDER_ORDER["rocm"]["sigmoid_gate"] == ("triton",)
    assert PROVIDER_ORDER["cuda"]["sigmoid_gate"] == ("triton",)
    assert PASS_DEFAULTS["rocm"]["sigmoid_gate"] is True
    assert PASS_DEFAULTS["cuda"]["sigmoid_gate"] is False  # until the H200 benchmark says otherwise


@pytest.mark.parametrize("options,platform,runs", [
    ({}, "rocm", True), ({}, "cuda", False), ({}, "cpu", False),
    ({"passes": {"sigmoid_gate": True}}, "cuda", True),
    ({"providers": {"sigmoid_gate": "triton"}}, "cuda", True),
    ({"provider": "reference", "passes": {"sigmoid_gate": False}}, "rocm", False),
])
def test_pass_enabled_per_platform(options, platform, runs):
    run, skipped = PassManager(parse_options(options)).enabled(platform)
    assert ("sigmoid_gate" in [p.name for p in run]) == runs
    assert ("sigmoid_gate" in skipped) != runs


# -- a real model ---------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_tiny_qwen3_next_every_gate_rewritten():
    """Tiny Qwen3-Next from transformers (random weights): its pure-torch path runs on CPU. Two full-attention
    layers (two gates), layer 1 a MoE block whose shared-expert gate is a broadcast (T, 1) sigmoid that must
    stay. Linear-attention (Gated DeltaNet) layers are left out: their chunked scan unrolls into a graph that
    takes minutes to compile on CPU and contains no output gate."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.Qwen3NextConfig(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, layer_types=["full_attention", "full_attention"],
        num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=32,
        mlp_only_layers=[0], max_position_embeddings=64)
    torch.manual_seed(0)
    model = transformers.Qwen3NextForCausalLM(cfg).to(torch.bfloat16).eval()
    ids = torch.randint(0, 128, (2, 8))
    with torch.no_grad():
        # float32 truth from the same (bf16-rounded) weights: the MoE's grouped_mm has no float64 kernel.
        ref32 = copy.deepcopy(model).float()(ids, use_cache=False).logits
        eager = model(ids, use_cache=False).logits

    def f(ids):
        return model(ids, use_cache=False).logits

    out, seen = compile_run(f, ids, options=_opts())
    assert sum(c.after[OP] for c in seen) == 2
    assert sum(c.report.count("sigmoid_gate") for c in seen) == 2
    assert sum(c.after[SIG] for c in seen) == 1  # the shared expert's broadcast gate
    # Whole-model tolerance: Inductor also reorders every other op; the gate's own error is one bf16 ulp.
    assert rel_err(out, ref32) <= 2 * rel_err(eager, ref32) + 1e-2
