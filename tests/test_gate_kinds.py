"""Issue 32, sigmoid gate: the new corpus gates are rewritten (op count, numerics against float64), activations
stay non-gates with no near-miss, and a gate the op can't take names the operands actually read.

Sources per spelling in gate_spellings.py; the KimiLinear form below is transformers 5.24
``KimiLinearRMSNormGated.forward`` (``hidden_states * ACT2FN["sigmoid"](gate.to(torch.float32))`` on the float32
norm, then ``.to(input_dtype)`` and o_proj).
"""

from __future__ import annotations

import sys
from pathlib import Path

import gate_spellings as G
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from recognition_census import Case, run_case  # noqa: E402

OTHERS_OFF = {"passes": {"rms_norm": False, "rope": False, "sampling": False}}
NEW = ["gate_before_head_view", "qwen3_next_chunk", "f32_value_upcast_gate"]
ACTIVATIONS = ["quick_gelu (negative)", "inkling2_softcapped_swiglu (negative)"]


def test_new_gates_rewritten():
    cases = G.census_cases()
    got = {n: run_case(Case("gate", n, *cases[n]), options=OTHERS_OFF) for n in NEW}
    assert all(r.outcome == "full" and r.rewritten == 1 for r in got.values()), got


def test_activations_are_never_gates():
    """QuickGELU and Inkling2's softcapped SwiGLU (the sigmoid's input reaches the other operand through tanh):
    nothing rewritten and nothing reported (they are not this kind)."""
    cases = G.census_cases()
    for n in ACTIVATIONS:
        r = run_case(Case("gate", n, *cases[n]), options=OTHERS_OFF)
        assert r.outcome == "left alone" and r.detail == "", (n, r)


def _case(fn, a_dtype, g_dtype):
    def build():
        torch.manual_seed(0)
        o = torch.nn.Linear(32, 16, bias=False).to(a_dtype)
        return fn, (torch.randn(2, 3, 32, dtype=a_dtype), torch.randn(2, 3, 32, dtype=g_dtype), o), None
    return build


def test_mixed_dtypes_name_the_operands_read():
    """A bf16 value times the sigmoid of a float16 gate (promoted to float32 by the multiply): no pair of the
    operands as read shares a dtype the op takes together with x; the text names what the sigmoid reads."""
    def f16_gate(attn, gate, o_proj):
        return o_proj((attn.float() * torch.sigmoid(gate)).to(attn.dtype))

    r = run_case(Case("gate", "f16_gate", _case(f16_gate, torch.bfloat16, torch.float16), 0), options=OTHERS_OFF)
    assert r.rewritten == 0 and "the gate the sigmoid reads" in r.detail and "float16" in r.detail, r


def test_kimi_linear_gated_norm_names_the_cast():
    """KimiLinear's gated RMSNorm: float32 norm times sigmoid(gate.float()), cast to bf16, then o_proj: taken with
    the float32 operands as read, but the product reaches the projection only through the cast (reported)."""
    def kimi(attn, gate, o_proj):
        h = attn.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        return o_proj((h * torch.sigmoid(gate.to(torch.float32))).to(attn.dtype))

    r = run_case(Case("gate", "kimi", _case(kimi, torch.bfloat16, torch.bfloat16), 0), options=OTHERS_OFF)
    assert r.rewritten == 0 and "only through a cast to bfloat16" in r.detail, r
