"""Sigmoid output-gate spellings from public model code (the spelling corpus, docs/spellings.md), as functions of
(attn (b, s, H*D), gate (b, s, H*D), o_proj) that end in the output projection, as the models do."""

from __future__ import annotations

import torch


def qwen3_next(attn, gate, o_proj):
    """transformers Qwen3-Next / Qwen3.5 attention: ``attn_output * torch.sigmoid(gate)`` in the model dtype."""
    return o_proj(attn * torch.sigmoid(gate))


def hy_v4(attn, gate, o_proj):
    """HY-V4 (MLA): the gate multiplied in (b, s, H, Dv) layout, ``sigmoid(g) * attn``, then reshape."""
    b, s, _ = attn.shape
    a4, g4 = attn.view(b, s, 4, -1), gate.view(b, s, 4, -1)
    return o_proj((torch.sigmoid(g4) * a4).reshape(b, s, -1))


def inkling2(attn, gate, o_proj):
    """transformers 5.24 Inkling2 attention: ``gate = sigmoid(gate_proj(h).float())``,
    ``(attn_output.float() * gate).to(attn_output.dtype)`` (gate and product upcast)."""
    g = torch.sigmoid(gate.float())
    return o_proj((attn.float() * g).to(attn.dtype))


def bailing_cast(attn, gate, o_proj):
    """transformers 5.24 BailingHybrid's cast spelling ``sigmoid(g.float()).to(h.dtype)`` on a full-width gate
    (Bailing itself multiplies a per-head gate, ``gate.unsqueeze(-1)``: a broadcast, not this op)."""
    g = torch.sigmoid(gate.float()).to(attn.dtype)
    return o_proj(attn * g)


def upcast_product(attn, gate, o_proj):
    """transformers 5.24 (a gated MLP head, ``(y * torch.sigmoid(self.mlp(y).float())).to(y.dtype)``) applied to
    an output gate: the gate upcast, the product promoted to float32 and cast back."""
    return o_proj((attn * torch.sigmoid(gate.float())).to(attn.dtype))


def gate_before_head_view(attn, gate, o_proj):
    """Gated attention (Qiu et al. 2025, arXiv:2505.06708, elementwise SDPA-output gate) as its reference code
    orders it: the sigmoid taken on the flat gate projection, then viewed (b, s, H, D) like the attention output."""
    b, s, _ = attn.shape
    g = torch.sigmoid(gate).view(b, s, 4, -1)
    return o_proj((attn.view(b, s, 4, -1) * g).reshape(b, s, -1))


def qwen3_next_chunk(attn, gate, o_proj):
    """transformers Qwen3-Next ``Qwen3NextAttention.forward``: ``query_states, gate = torch.chunk(q_proj(h).view(b,
    s, -1, head_dim * 2), 2, dim=-1)``; ``gate = gate.reshape(b, s, -1)``; ``attn_output * torch.sigmoid(gate)``
    (the q_proj output stands in as cat(query, gate) per head; the query half goes to attention, unused here)."""
    b, s, _ = attn.shape
    q_and_gate = torch.cat([gate.view(b, s, 4, -1) * 0.5, gate.view(b, s, 4, -1)], -1)
    _, g = torch.chunk(q_and_gate, 2, dim=-1)
    return o_proj(attn * torch.sigmoid(g.reshape(b, s, -1)))


def gate_sigmoid_method_f32_value(attn, gate, o_proj):
    """A float32 value gated by the sigmoid of a bf16 gate the sigmoid reads upcast, ``x_f32 *
    gate.float().sigmoid()`` (KimiLinear's ``RMSNormGated`` operand order: the value is computed in float32, the
    gate ``.to(torch.float32)``), the product fed to a float32 projection: the op takes the operands as read."""
    x = attn.float() * 2.0
    return torch.nn.functional.linear(x * gate.to(torch.float32).sigmoid(), o_proj.weight.float()).to(attn.dtype)


GATES = {"qwen3_next": qwen3_next, "hy_v4": hy_v4, "inkling2": inkling2, "bailing_cast": bailing_cast,
         "upcast_product": upcast_product}
#: issue 32's gates (tests/test_gate_kinds.py; the census reads both tables)
MORE_GATES = {"gate_before_head_view": gate_before_head_view, "qwen3_next_chunk": qwen3_next_chunk,
              "f32_value_upcast_gate": gate_sigmoid_method_f32_value}


def silu(attn, gate, o_proj):
    """Negative: SiLU written out (``x * sigmoid(x)``)."""
    return o_proj(attn * torch.sigmoid(attn))


def swiglu(attn, gate, o_proj):
    """Negative: F.silu(gate) * up (SwiGLU MLP, gpt-fast FeedForward): no sigmoid gate."""
    return o_proj(torch.nn.functional.silu(gate) * attn)


def per_head_broadcast(attn, gate, o_proj):
    """Negative: BailingHybrid's per-head gate ``attn (b, s, H, D) * sigmoid(g)(b, s, H, 1)``: a broadcast."""
    b, s, _ = attn.shape
    g = torch.sigmoid(gate[..., :4].float()).to(attn.dtype)
    return o_proj((attn.view(b, s, 4, -1) * g.unsqueeze(-1)).reshape(b, s, -1))


def quick_gelu(attn, gate, o_proj):
    """Negative: CLIP's QuickGELU (transformers ``activations.py`` ``QuickGELUActivation``:
    ``x * torch.sigmoid(1.702 * x)``): an activation of one tensor."""
    return o_proj(gate * torch.sigmoid(1.702 * gate))


def inkling2_softcapped_swiglu(attn, gate, o_proj):
    """Negative: transformers 5.24 Inkling2 ``Inkling2SoftcappedSwiGLU``: ``(gate_softcap(gate) * torch.sigmoid(gate)
    * up_softcap(up)).to(input_dtype)`` with softcap ``c * tanh(x / c)``: the sigmoid multiplies a function of its
    own input (an activation), whatever follows."""
    def softcap(x, c=15.0):
        return c * torch.tanh(x / c)

    g, up = gate.float(), attn.float()
    return o_proj((softcap(g) * torch.sigmoid(g) * softcap(up)).to(gate.dtype))


NEGATIVES = {"silu": silu, "swiglu": swiglu, "per_head_broadcast": per_head_broadcast}
#: issue 32's activation negatives (tests/test_gate_kinds.py; the census reads both tables)
MORE_NEGATIVES = {"quick_gelu": quick_gelu, "inkling2_softcapped_swiglu": inkling2_softcapped_swiglu}


def census_cases():
    """name -> (build, expected gate ops) for scripts/recognition_census.py; ``build()`` -> (fn, args, float64
    reference). A negative expects 0 ops."""
    import torch.nn as nn

    def make(fn):
        def build():
            torch.manual_seed(0)
            o = nn.Linear(32, 16, bias=False).to(torch.bfloat16)
            a, g = torch.randn(2, 3, 32, dtype=torch.bfloat16), torch.randn(2, 3, 32, dtype=torch.bfloat16)
            return fn, (a, g, o), None  # the reference: the spelling on float64 copies (o_proj too)
        return build

    out = {n: (make(f), 1) for n, f in {**GATES, **MORE_GATES}.items()}
    out.update({f"{n} (negative)": (make(f), 0) for n, f in {**NEGATIVES, **MORE_NEGATIVES}.items()})
    return out
