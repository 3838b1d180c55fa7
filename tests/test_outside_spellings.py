"""Spellings outside the corpus (issue 32): decode attention (``attention_spellings.py``) and RMSNorm
(``norm_spellings.OUTSIDE``), several spellings per compile, each on its own inputs (a compile's fixed cost
shared keeps the suite's time). Per spelling, told apart by the report's ``file.py:line``: the ops it
was rewritten to, or the near-miss and the phrase its reason must name; numerics per docs/ops.md against the
spelling in float64. Negatives left alone: MLA's two-product scores, F.normalize, a spelled-out LayerNorm.
"""

from __future__ import annotations

import copy
import inspect

import attention_spellings as A
import norm_spellings as N
import pytest
import torch
import torch.nn as nn
from graph_utils import assert_contract, compile_run

ATT = "rocm_fused.decode_attention.default"
RMS, FUSED = "rocm_fused.rms_norm.default", "rocm_fused.fused_add_rms_norm.default"


def _lines(obj) -> range:
    src, start = inspect.getsourcelines(obj)
    return range(start, start + len(src))


def _owner(location: str, spans: dict[str, range]) -> str | None:
    """The spelling whose source lines hold ``location`` (``file.py:line``)."""
    if ":" not in location:
        return None
    line = int(location.rsplit(":", 1)[1])
    return next((name for name, span in spans.items() if line in span), None)


def _records(seen, pass_name: str, spans: dict[str, range]) -> tuple[dict, dict]:
    """The pass's matched ops and near-miss reasons per spelling (key None: a record no spelling's lines hold)."""
    got: dict[str, list] = {name: [] for name in spans}
    missed: dict[str, list] = {name: [] for name in spans}
    for c in seen:
        for m in c.report.matches:
            if m.pass_name == pass_name:
                got.setdefault(_owner(m.location, spans), []).append(m.op)
        for n in c.report.near_misses:
            if n.pass_name == pass_name:
                missed.setdefault(_owner(n.location, spans), []).append(n.reason)
    return got, missed


@pytest.mark.slow  # 3 compiles: about 13 s of CPU after the process's first compile (getrusage, CPU dev machine)
def test_attention_outside_spellings():
    """Four spellings per compile (one compile's fixed cost shared; measured: 4 in one graph about 1 s of CPU,
    4 graphs about 2.3 s, after the process's first compile)."""
    names = list(A.SPELLINGS)
    for group in (names[0:4], names[4:8], names[8:]):
        ins = {name: A.inputs(name, torch.bfloat16, seed=i) for i, name in enumerate(group)}

        def every(*flat, group=group):
            return tuple(A.SPELLINGS[name][0](*flat[4 * i:4 * i + 4]) for i, name in enumerate(group))

        out, seen = compile_run(every, *[t for name in group for t in ins[name][:4]])
        got, missed = _records(seen, "attention", {name: _lines(A.SPELLINGS[name][0]) for name in group})
        assert not missed.get(None), missed.get(None)
        unplaced = got.pop(None, [])  # a node Inductor's own SDPA pattern made carries no stack trace (Falcon)
        bare = [name for name in group if A.SPELLINGS[name][4] == "full" and not got[name]]
        assert len(unplaced) <= len(bare) <= 1, (unplaced, bare)
        for name in bare:
            got[name] = unplaced
        for i, name in enumerate(group):
            fn, _, _, _, expect, phrase = A.SPELLINGS[name]
            if expect == "full":
                assert got[name] == ["decode_attention"] and not missed[name], (name, got[name], missed[name])
                q, k, v, m, keep = ins[name]
                assert_contract(out[i], fn(q, k, v, m), A.reference64(name, q, k, v, keep))
            else:  # left alone, with the real cause named
                assert not got[name] and len(missed[name]) == 1 and phrase in missed[name][0], (name, missed[name])
        n_full = sum(A.SPELLINGS[name][4] == "full" for name in group)
        assert sum(c.after[ATT] for c in seen) == n_full
        bmm = sum(c.after["aten.bmm.default"] + c.after["aten.baddbmm.default"] for c in seen)
        assert bmm == 2 * (len(group) - n_full) + ("deepseek_v3_mla" in group), bmm  # MLA: three products


class _Every(nn.Module):
    """Every outside RMSNorm spelling and the LayerNorm negative, each on its own (x, r)."""

    def __init__(self):
        super().__init__()
        self.names = [*N.OUTSIDE, "layernorm"]
        self.mods = nn.ModuleList(
            [N.TwoInput(c()) if hasattr(c, "forward2") else N.Single(c()) for c, *_ in N.OUTSIDE.values()]
            + [N.ManualLayerNorm()])

    def forward(self, *flat):
        return tuple(m(flat[2 * i], flat[2 * i + 1]) for i, m in enumerate(self.mods))


def _spans(every: _Every) -> dict[str, range]:
    spans = {}
    for name, m in zip(every.names, every.mods, strict=True):
        target = m.n if hasattr(m, "n") else m
        spans[name] = _lines(type(target))
    return spans


@pytest.mark.slow  # 1 compile, 10 regions verified: about 10 s of CPU after the process's first compile
def test_rms_norm_outside_spellings():
    torch.manual_seed(0)
    dtype = torch.bfloat16
    every = _Every().to(dtype)
    flat = [torch.randn(5, N.H, dtype=dtype) * (3 if i % 2 == 0 else 1) for i in range(2 * len(every.names))]
    out, seen = compile_run(every, *flat)
    got, missed = _records(seen, "rms_norm", _spans(every))
    assert not got.get(None), got.get(None)
    with torch.no_grad():
        eager = every(*flat)
        ref = copy.deepcopy(every).double()(*[t.double() for t in flat])
    for i, name in enumerate(every.names):
        if name == "layernorm":  # negative: left alone and named
            assert not got[name] and any("LayerNorm" in r for r in missed[name]), (got[name], missed[name])
            continue
        _, (n_rms, n_fused), expect, phrase = N.OUTSIDE[name]
        if expect == "full":
            want = sorted(["rms_norm"] * n_rms + ["fused_add_rms_norm"] * n_fused)
            assert sorted(got[name]) == want and not missed[name], (name, got[name], missed[name])
        else:
            assert not got[name] and missed[name] and all(phrase in r for r in missed[name]), (name, missed[name])
        outs, eags, refs = ((o,) if isinstance(o, torch.Tensor) else o for o in (out[i], eager[i], ref[i]))
        for o, e, r in zip(outs, eags, refs, strict=True):
            assert_contract(o, e, r)
    left = sum(c.after["aten.rsqrt.default"] + c.after["aten.sqrt.default"] for c in seen)
    assert left == 1, left  # the LayerNorm's rsqrt only (F.normalize's root is a pow(0.5))
