"""The sigmoid gate's kind on spellings outside the corpus: activations are never gates, a gate taken before the
head view is one, and a near-miss for a sigmoid also used elsewhere names the graph's real kind.

Sources: CLIP's QuickGELU (transformers ``models/clip/modeling_clip.py``, ``ACT2FN["quick_gelu"]``:
``x * torch.sigmoid(1.702 * x)``); a gated attention whose gate is activated on the projection's output before
it is viewed into heads (the Qwen3-Next layout with the sigmoid moved before the view, as gated-attention
reference code writes it).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from graph_utils import capture, compile_run

OP = "rocm_fused.sigmoid_gate.default"
SIG = "aten.sigmoid.default"
OTHERS_OFF = {"rms_norm": False, "rope": False, "sampling": False}


class QuickGELUMLP(nn.Module):
    """CLIP's MLP: fc1, QuickGELU, fc2."""

    def __init__(self, hidden=32, inter=64):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(hidden, inter), nn.Linear(inter, hidden)

    def forward(self, h):
        x = self.fc1(h)
        return self.fc2(x * torch.sigmoid(1.702 * x))


class ScaledCastSiLU(nn.Module):
    """An activation through a cast and a scale: ``x * sigmoid(x.float() / 2).to(x.dtype)``."""

    def __init__(self, hidden=32):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)

    def forward(self, h):
        x = self.fc1(h)
        return self.fc2(x * torch.sigmoid(x.float() / 2).to(x.dtype))


class GateBeforeHeadView(nn.Module):
    """A gated attention output whose sigmoid is taken on the flat projection, then viewed (b, s, H, D)."""

    def __init__(self, hidden=32, heads=2, head_dim=16):
        super().__init__()
        self.heads, self.hd = heads, head_dim
        self.v_proj = nn.Linear(hidden, heads * head_dim, bias=False)
        self.g_proj = nn.Linear(hidden, heads * head_dim, bias=False)
        self.o_proj = nn.Linear(heads * head_dim, hidden, bias=False)

    def forward(self, h):
        b, s, _ = h.shape
        v = self.v_proj(h).view(b, s, self.heads, self.hd).transpose(1, 2)
        attn = F.scaled_dot_product_attention(v, v, v, is_causal=True).transpose(1, 2)
        gate = torch.sigmoid(self.g_proj(h)).view(b, s, self.heads, self.hd)
        return self.o_proj((attn * gate).reshape(b, s, -1))


def _run(m, *args):
    with torch.no_grad():
        return compile_run(m, *args, options={"passes": dict(OTHERS_OFF)})


def test_quick_gelu_is_an_activation_not_a_gate():
    torch.manual_seed(0)
    m = QuickGELUMLP().eval()
    h = torch.randn(2, 3, 32)
    out, (g,) = _run(m, h)
    assert g.after[OP] == 0 and g.after[SIG] == 1
    assert not [n for n in g.report.near_misses if n.pass_name == "sigmoid_gate"]  # not this kind: no near-miss noise
    torch.testing.assert_close(out, m(h))


def test_scaled_cast_activation_is_not_a_gate():
    torch.manual_seed(0)
    m = ScaledCastSiLU().to(torch.bfloat16).eval()
    h = torch.randn(2, 3, 32, dtype=torch.bfloat16)
    out, (g,) = _run(m, h)
    assert g.after[OP] == 0
    with torch.no_grad():  # Inductor's bf16 code against eager's: rounding only, our pass took nothing
        torch.testing.assert_close(out, m(h), rtol=2e-2, atol=2e-2)


def test_gate_taken_before_the_head_view_is_rewritten():
    torch.manual_seed(0)
    m = GateBeforeHeadView().to(torch.bfloat16).eval()
    h = torch.randn(2, 3, 32, dtype=torch.bfloat16)
    out, (g,) = _run(m, h)
    assert g.before[SIG] == 1 and g.after[OP] == 1 and g.after[SIG] == 0
    with torch.no_grad():
        torch.testing.assert_close(out, m(h), rtol=2e-2, atol=2e-2)


class _SigmoidReturned(nn.Module):
    """A gate whose sigmoid the model also returns: kept as a graph output in an inference graph."""

    def __init__(self, hidden=32):
        super().__init__()
        self.v, self.g, self.o = (nn.Linear(hidden, hidden, bias=False) for _ in range(3))

    def forward(self, h, e):  # the gate from another activation than the value (else it is a GLU MLP)
        s = torch.sigmoid(self.g(e))
        return self.o(self.v(h) * s), s


def test_inference_graph_is_not_called_a_training_graph():
    torch.manual_seed(0)
    m = _SigmoidReturned().eval()
    h = torch.randn(4, 32)
    torch._dynamo.reset()
    with torch.no_grad(), capture() as seen:
        torch.compile(m, backend="rocm_fused", options={"provider": "reference", "strict": True,
                                                         "passes": dict(OTHERS_OFF)})(h, h + 1)
    (g,) = seen
    reasons = [n.reason for n in g.report.near_misses if n.pass_name == "sigmoid_gate"]
    assert reasons and all("training" not in r for r in reasons), reasons
    assert any("the graph returns it" in r for r in reasons), reasons


def test_training_graph_still_named_as_such():
    torch.manual_seed(0)
    m = _SigmoidReturned()
    h = torch.randn(4, 32)
    torch._dynamo.reset()
    with capture() as seen:
        out, s = torch.compile(m, backend="rocm_fused", options={"provider": "reference", "strict": True,
                                                                  "passes": dict(OTHERS_OFF)})(h, h + 1)
        out.sum().backward()
    reasons = [n.reason for n in seen[0].report.near_misses if n.pass_name == "sigmoid_gate"]
    assert any("training graph saves it for backward" in r for r in reasons), reasons
