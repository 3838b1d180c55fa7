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


GATES = {"qwen3_next": qwen3_next, "hy_v4": hy_v4, "inkling2": inkling2, "bailing_cast": bailing_cast,
         "upcast_product": upcast_product}


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


NEGATIVES = {"silu": silu, "swiglu": swiglu, "per_head_broadcast": per_head_broadcast}


def census_cases():
    """name -> (build, expected gate ops) for scripts/recognition_census.py; ``build()`` -> (fn, args, float64
    reference). A negative expects 0 ops."""
    import torch.nn as nn

    def make(fn, positive):
        def build():
            torch.manual_seed(0)
            o = nn.Linear(32, 16, bias=False).to(torch.bfloat16)
            a, g = torch.randn(2, 3, 32, dtype=torch.bfloat16), torch.randn(2, 3, 32, dtype=torch.bfloat16)
            ref = None
            if positive:
                with torch.no_grad():
                    ref = a.double() * torch.sigmoid(g.double()) @ o.weight.double().t()
            return fn, (a, g, o), ref
        return build

    out = {n: (make(f, True), 1) for n, f in GATES.items()}
    out.update({f"{n} (negative)": (make(f, False), 0) for n, f in NEGATIVES.items()})
    return out
