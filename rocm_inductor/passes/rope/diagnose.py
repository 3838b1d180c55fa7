"""What a near-RoPE computes, in words, for its near-miss: the region that failed verification is evaluated in
float64 on x = one part set to 1 (the other 0) and random tables, and each output part's coefficient is named
as cos, sin, their negatives or 0.

RoPE (``rope_ref``) is, per pair of features (x0, x1) -- halves for NeoX, even/odd for GPT-J:

    out0 = cos * x0 - sin * x1        out1 = sin * x0 + cos * x1

so a flipped sign reads "a rotation by -theta", swapped output halves or swapped input halves read as such,
and anything else names the coefficients it found ("not a rotation"), or says the output is no per-feature
combination of x's parts with cos and sin (other halves, other features, a non-linear region).
"""

from __future__ import annotations

import torch

from ..verify import Region, _run, random_inputs, widened
from .rotation import Rotation

#: The op's coefficient matrix [[out0 of x0, out0 of x1], [out1 of x0, out1 of x1]].
ROPE = (("cos", "-sin"), ("sin", "cos"))
_KNOWN = {
    (("cos", "sin"), ("-sin", "cos")): "a rotation by -theta (the sign of sin is flipped)",
    (("sin", "cos"), ("cos", "-sin")): "the two output halves are swapped",
    (("-sin", "cos"), ("cos", "sin")): "x's two halves are swapped",
}


def _parts(t: torch.Tensor, rd: int, interleaved: bool) -> tuple[torch.Tensor, torch.Tensor]:
    if interleaved:
        return t[..., 0:rd:2], t[..., 1:rd:2]
    return t[..., : rd // 2], t[..., rd // 2: rd]


def _tables(r: Rotation, tabs: list[torch.Tensor], shape: torch.Size) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per output part: (cos, sin) broadcast to the part's shape."""
    if len(tabs) == 1:  # complex: f = cos + i sin, one per pair
        c, s = tabs[0].real.double(), tabs[0].imag.double()
    else:
        c, s = tabs[0].double(), tabs[1].double()
    if r.half_table:
        return [(c.expand(shape), s.expand(shape))] * 2
    (c0, c1), (s0, s1) = _parts(c, r.rotary_dim, r.interleaved), _parts(s, r.rotary_dim, r.interleaved)
    return [(c0.expand(shape), s0.expand(shape)), (c1.expand(shape), s1.expand(shape))]


#: The coefficients a near-RoPE's entries are named by: a * cos + b * sin for a, b in {-1, 0, 1}.
_LABELS = {(1, 0): "cos", (-1, 0): "-cos", (0, 1): "sin", (0, -1): "-sin", (0, 0): "0", (1, 1): "(cos+sin)",
           (1, -1): "(cos-sin)", (-1, 1): "(sin-cos)", (-1, -1): "-(cos+sin)"}


def _name(m: torch.Tensor, c: torch.Tensor, s: torch.Tensor) -> str:
    for (a, b), label in _LABELS.items():
        if torch.allclose(m, a * c + b * s, rtol=1e-9, atol=1e-12):
            return label
    return "?"


def _matrix(p: list, tabs: list, swap: bool) -> tuple:
    """The named coefficient matrix; ``swap``: the tables' roles exchanged (a discovered near-RoPE reads cos off
    the part-0 product of its first output, which is sin when its outputs are swapped)."""
    return tuple(tuple(_name(p[i][o], *(tabs[o][::-1] if swap else tabs[o])) for i in (0, 1)) for o in (0, 1))


def cause(region: Region, r: Rotation) -> str:
    """The near-RoPE's cause in words ('' when it can't be read: evaluation failed, tables not per feature)."""
    try:
        args, subs = random_inputs(region, 0)
        wide = widened(region.module)
        args = [a.to(torch.complex128) if isinstance(a, torch.Tensor) and a.is_complex() else
                a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]
        x = args[0]
        rd = r.rotary_dim
        outs = []
        for which in (0, 1):
            xe = torch.zeros_like(x)
            _parts(xe, rd, r.interleaved)[which].fill_(1.0)
            outs.append(_run(wide, [xe, *args[1:]], subs)[0].double())
            twice = _run(wide, [2 * xe, *args[1:]], subs)[0].double()
            if not torch.allclose(twice, 2 * outs[-1], rtol=1e-9, atol=1e-12):
                return "the region is not linear in x: not a rotation"
        p = [_parts(o, rd, r.interleaved) for o in outs]  # p[which input part][which output part]
        tabs = _tables(r, [a for a in args[1: region.n_tensor_inputs]], p[0][0].shape)
        mat = _matrix(p, tabs, False)
        if mat not in _KNOWN and _matrix(p, tabs, True) in _KNOWN:
            mat = _matrix(p, tabs, True)
    except Exception:  # the diagnosis is a courtesy: the verification's own reason stands
        return ""
    if "?" in sum(mat, ()):
        return ("the output is not a per-feature combination of x's two "
                f"{'even/odd features' if r.interleaved else 'halves'} with cos and sin (other halves or features)")
    found = _KNOWN.get(mat)
    text = (f"it computes out0 = {mat[0][0]}*x0 + {mat[0][1]}*x1, out1 = {mat[1][0]}*x0 + {mat[1][1]}*x1, "
            "RoPE: out0 = cos*x0 - sin*x1, out1 = sin*x0 + cos*x1")
    return f"{found}: {text}" if found else f"not a rotation: {text}"
