"""The moe_routing pass and op: the HF routers' top-k (Qwen3-MoE / Mixtral, GPT-OSS, DeepSeek-V3 / GLM4-MoE)
rewritten to ``rocm_fused::moe_routing``; ties, NaN, renormalisation on/off, near-misses, providers (reference,
Triton through the interpreter, AITER's stand-in) against eager.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import vendor_standins
from graph_utils import compile_run, needs_interpreter

from rocm_inductor import platform as platform_mod
from rocm_inductor.ops.moe_routing import routing_spec
from rocm_inductor.platform import Platform, PlatformDispatch
from rocm_inductor.policy import PASS_DEFAULTS, PROVIDER_ORDER
from rocm_inductor.providers import get_provider
from rocm_inductor.providers.reference_moe import moe_routing_ref

OP = "rocm_fused.moe_routing.default"
E, H = 16, 32


class Router(torch.nn.Module):
    """The routers as HF transformers 5.24 writes them (``*TopKRouter.forward``), over one linear."""

    def __init__(self, style: str, k: int = 2, norm: bool = True, n_group: int = 4, topk_group: int = 2,
                 scale: float = 2.5, group_score: str = "top2", fill: float = float("-inf")):
        super().__init__()
        self.style, self.k, self.norm, self.ng, self.tg, self.scale = style, k, norm, n_group, topk_group, scale
        self.group_score, self.fill = group_score, fill
        self.weight = torch.nn.Parameter(torch.randn(E, H))
        self.bias = torch.nn.Parameter(torch.randn(E))
        self.register_buffer("e_score_correction_bias", torch.randn(E) * 0.1)

    def forward(self, h):
        if self.style == "qwen3":  # Qwen3MoeTopKRouter
            logits = F.linear(h, self.weight)
            v, i = torch.topk(F.softmax(logits, dtype=torch.float, dim=-1), self.k, dim=-1)
            if self.norm:
                v /= v.sum(dim=-1, keepdim=True)
            return v.to(logits.dtype), i
        if self.style == "mixtral":  # MixtralTopKRouter
            v, i = torch.topk(F.softmax(F.linear(h, self.weight).float(), dim=-1), self.k, dim=-1)
            v /= v.sum(dim=-1, keepdim=True)
            return v, i
        if self.style == "gpt_oss":  # GptOssTopKRouter
            v, i = torch.topk(F.linear(h, self.weight, self.bias), self.k, dim=-1)
            return F.softmax(v, dim=1, dtype=v.dtype), i
        # DeepseekV3TopkRouter / Glm4MoeTopkRouter
        logits = F.linear(h.type(torch.float32), self.weight.type(torch.float32))
        scores = logits.sigmoid()
        choice = scores + self.e_score_correction_bias
        grouped = choice.view(-1, self.ng, E // self.ng)
        gs = grouped.topk(2, dim=-1)[0].sum(dim=-1) if self.group_score == "top2" else grouped.amax(dim=-1)
        gi = torch.topk(gs, k=self.tg, dim=-1, sorted=False)[1]
        gm = torch.zeros_like(gs)
        gm.scatter_(1, gi, 1)
        sm = gm.unsqueeze(-1).expand(-1, self.ng, E // self.ng).reshape(-1, E)
        choice = choice.masked_fill(~sm.bool(), self.fill)
        i = torch.topk(choice, k=self.k, dim=-1, sorted=False)[1]
        w = scores.gather(1, i)
        if self.norm:
            w /= w.sum(dim=-1, keepdim=True) + 1e-20
        return w * self.scale, i


CASES = {  # name: (router kwargs, input dtype)
    "qwen3_norm": (dict(style="qwen3", norm=True), torch.bfloat16),
    "qwen3_no_norm": (dict(style="qwen3", norm=False, k=4), torch.bfloat16),
    "mixtral": (dict(style="mixtral"), torch.float32),
    "gpt_oss": (dict(style="gpt_oss", k=4), torch.bfloat16),
    "deepseek_v3": (dict(style="deepseek", k=3), torch.float32),
    "deepseek_one_group": (dict(style="deepseek", k=4, n_group=1, topk_group=1, norm=False, scale=1.0),
                           torch.float32),
}


def _router(name: str, **over):
    kw, dt = CASES[name]
    torch.manual_seed(0)
    return Router(**{**kw, **over}).to(dt).eval(), torch.randn(5, H, dtype=dt)


def _by_id(w, ids):
    """(weights, ids) sorted by expert id per row: an order-free view of the routing (``sorted=False``)."""
    order = ids.argsort(-1)
    return w.gather(-1, order), ids.gather(-1, order)


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_router_rewritten_and_eager_exact(name):
    """Every top-k of the router (DeepSeek: the group top-2, the group choice, the final top-k) is gone, one op
    is left, and the reference gives eager's bits (it runs eager's ops)."""
    m, h = _router(name)
    (w, ids), (g,) = compile_run(m, h)
    we, ie = m(h)
    assert g.after[OP] == 1 and g.after["aten.topk.default"] == 0, g.report
    assert g.before["aten.topk.default"] == (3 if CASES[name][0]["style"] == "deepseek" else 1)
    assert not g.report.near_misses, g.report
    assert w.dtype == we.dtype and ids.dtype == torch.int64
    assert torch.equal(ids, ie) and torch.equal(w, we)
    note = g.report.matches[0].note
    assert note.startswith({"qwen3": "softmax_topk", "mixtral": "softmax_topk", "gpt_oss": "topk_softmax",
                            "deepseek": "sigmoid_grouped"}[CASES[name][0]["style"]]), note
    assert ("renormalised" in note) == (name not in ("qwen3_no_norm", "gpt_oss", "deepseek_one_group")), note


@needs_interpreter
@pytest.mark.parametrize("name", ["qwen3_norm", "gpt_oss", "deepseek_v3"])
def test_triton_provider_through_the_interpreter(name):
    m, h = _router(name)
    (w, ids), (g,) = compile_run(m, h, options={"provider": "triton"})
    we, ie = m(h)
    assert g.after[OP] == 1 and g.report.providers() == {"moe_routing": ["triton"]}
    w, ids = _by_id(w, ids)
    we, ie = _by_id(we, ie)
    assert torch.equal(ids, ie)
    torch.testing.assert_close(w.float(), we.float(), rtol=2 ** -8 if we.dtype == torch.bfloat16 else 1e-6,
                               atol=1e-7)


@needs_interpreter
@pytest.mark.parametrize("kind,dtype,renorm", [("softmax_topk", torch.bfloat16, True),
                                               ("softmax_topk", torch.float16, False),
                                               ("topk_softmax", torch.float32, False),
                                               ("sigmoid_grouped", torch.bfloat16, True)])
@pytest.mark.parametrize("e,k,groups", [(8, 2, (1, 1)), (128, 8, (8, 4)), (160, 6, (1, 1)), (24, 4, (3, 2))])
def test_triton_matches_reference_grid(kind, dtype, renorm, e, k, groups):
    if kind != "sigmoid_grouped":
        groups = (1, 1)
    gen = torch.Generator().manual_seed(e + k)
    # distinct logits, exact in every dtype (multiples of 1/32 below 8): no ties, whose order differs by design
    x = torch.stack([torch.randperm(e, generator=gen) for _ in range(7)]).sub(e / 2).div(32).to(dtype)
    bias = torch.randn(e, generator=gen) * 0.1 if kind == "sigmoid_grouped" else None
    args = (k, kind, renorm, bias, *groups, 1.5 if kind == "sigmoid_grouped" else 1.0)
    w0, i0 = moe_routing_ref(x, *args, True)
    w1, i1 = get_provider("triton").moe_routing(x, *args, True)
    assert torch.equal(i0, i1)
    torch.testing.assert_close(w1, w0, rtol=1e-6, atol=1e-7)


@needs_interpreter
def test_ties_lower_index_first_in_triton_and_torch_topk_order_in_reference():
    """Ties: the reference is eager's torch.topk (CPU picks among equals in its partial sort's order); the Triton
    kernel takes the lower index, as CUDA/ROCm torch.topk does at the k-th place. The weights are equal."""
    x = torch.tensor([[1., 3, 3, 2, 3, 0, 3, 1], [0, 0, 0, 0, 0, 0, 0, 0]])
    for kind in ("softmax_topk", "topk_softmax", "sigmoid_grouped"):
        w0, i0 = moe_routing_ref(x, 3, kind, False, None, 1, 1, 1.0, True)
        if kind == "topk_softmax":
            v, ie = torch.topk(x, 3)
            assert torch.equal(i0, ie) and torch.equal(w0, torch.softmax(v, -1))
        w1, i1 = get_provider("triton").moe_routing(x, 3, kind, False, None, 1, 1, 1.0, True)
        assert i1.tolist() == [[1, 2, 4], [0, 1, 2]], (kind, i1)
        torch.testing.assert_close(w1, w0, rtol=1e-6, atol=0)


@needs_interpreter
def test_nan_ranked_first_as_torch_topk():
    """A NaN logit: torch.topk ranks it first; softmax rows turn all NaN; the sigmoid's NaN is chosen first and the
    renormalised weights are all NaN. The reference is eager; Triton gives the same."""
    x = torch.tensor([[0.5, -1., 2., float("nan"), 1., 0.]])
    for kind, renorm in (("softmax_topk", False), ("topk_softmax", False), ("sigmoid_grouped", True),
                         ("sigmoid_grouped", False)):
        w0, i0 = moe_routing_ref(x, 2, kind, renorm, None, 1, 1, 1.0, True)
        w1, i1 = get_provider("triton").moe_routing(x, 2, kind, renorm, None, 1, 1, 1.0, True)
        assert torch.equal(torch.isnan(w0), torch.isnan(w1)), (kind, w0, w1)
        if kind != "softmax_topk":  # an all-NaN row: eager's order among NaNs is the CPU sort's
            assert i0[0, 0] == i1[0, 0] == 3, (kind, i0, i1)
            torch.testing.assert_close(w1, w0, equal_nan=True)
    p = torch.softmax(x, -1)
    assert torch.isnan(p).all() and torch.isnan(moe_routing_ref(x, 2, "softmax_topk", True, None, 1, 1, 1.0,
                                                                True)[0]).all()


def _miss_reason(fn, *args, **kw):
    _, (g,) = compile_run(fn, *args, **kw)
    misses = [n for n in g.report.near_misses if n.pass_name == "moe_routing"]
    assert g.after[OP] == 0 and len(misses) == 1, g.report
    return misses[0].reason


def _probs_bf16(m, h):
    v, i = torch.topk(F.softmax(F.linear(h, m.weight), dim=-1), 2, dim=-1)  # softmax in bf16: rounded probs
    return v, i


def _probs_escape(m, h):
    p = F.softmax(F.linear(h, m.weight), dim=-1, dtype=torch.float)
    v, i = torch.topk(p, 2, dim=-1)
    return v, i, p.mean()


@pytest.mark.parametrize("case,want", [
    ("group_max", "best expert (DeepSeek-V2"),
    ("fill_zero", "filled with 0"),
    ("bf16_probs", "rounded to bfloat16"),
    ("escape", "also used outside"),
])
def test_near_misses(case, want):
    if case in ("group_max", "fill_zero"):
        m, h = _router("deepseek_v3", **({"group_score": "max"} if case == "group_max" else {"fill": 0.0}))
        fn = m
    else:
        m, h = _router("qwen3_norm")
        fn = (lambda x: _probs_bf16(m, x)) if case == "bf16_probs" else (lambda x: _probs_escape(m, x))
    assert want in _miss_reason(fn, h)


def test_dynamic_k_is_a_near_miss():
    m, h = _router("mixtral")

    def fn(x, n):
        return torch.topk(F.softmax(F.linear(x, m.weight), dim=-1), n.shape[0], dim=-1)

    n = torch.zeros(3)
    torch._dynamo.mark_dynamic(n, 0)
    assert "dynamic k" in _miss_reason(fn, h, n)


def test_op_validates_its_arguments():
    x = torch.randn(2, 8)
    op = torch.ops.rocm_fused.moe_routing
    with pytest.raises(ValueError, match="unknown kind"):
        op(x, 2, "softmax", False, None, 1, 1, 1.0, True, "reference")
    with pytest.raises(ValueError, match="outside"):
        op(x, 9, "softmax_topk", False, None, 1, 1, 1.0, True, "reference")
    with pytest.raises(ValueError, match="no correction bias"):
        op(x, 2, "softmax_topk", False, torch.zeros(8), 1, 1, 1.0, True, "reference")
    with pytest.raises(ValueError, match="groups of at least 2"):
        op(x, 2, "sigmoid_grouped", False, None, 8, 2, 1.0, True, "reference")
    with pytest.raises(ValueError, match="topk_group"):
        op(x, 2, "sigmoid_grouped", False, None, 2, 3, 1.0, True, "reference")
    with pytest.raises(ValueError, match="float16/bfloat16/float32"):
        op(x.long(), 2, "softmax_topk", False, None, 1, 1, 1.0, True, "reference")


def test_policy_entries():
    assert PROVIDER_ORDER["rocm"]["moe_routing"] == ("aiter", "triton")
    assert PROVIDER_ORDER["cuda"]["moe_routing"] == ("triton",)
    assert PASS_DEFAULTS["rocm"]["moe_routing"] is False and PASS_DEFAULTS["cuda"]["moe_routing"] is True
    assert PASS_DEFAULTS["rocm"]["moe_experts"] is False and PASS_DEFAULTS["cuda"]["moe_experts"] is True


@pytest.fixture
def aiter_on_rocm(monkeypatch):
    calls: list = []
    mods = vendor_standins.aiter("0.1.17", calls)
    vendor_standins.add_aiter_routing(mods["aiter"], calls)
    vendor_standins.install(monkeypatch, mods)
    monkeypatch.setattr(platform_mod, "detect_platform", lambda: Platform("rocm", "gfx942", "stand-in"))
    PlatformDispatch.reset_all()
    yield calls
    PlatformDispatch.reset_all()


@pytest.mark.parametrize("kind,renorm,groups,dtype", [("softmax_topk", True, (1, 1), torch.bfloat16),
                                                      ("softmax_topk", False, (1, 1), torch.float32),
                                                      ("topk_softmax", False, (1, 1), torch.bfloat16),
                                                      ("sigmoid_grouped", True, (8, 4), torch.float32),
                                                      ("sigmoid_grouped", False, (1, 1), torch.bfloat16)])
def test_aiter_standin_matches_reference(aiter_on_rocm, kind, renorm, groups, dtype):
    e, k = (256, 8) if groups[0] == 8 else (64, 4)
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(6, e, generator=gen).to(dtype)
    bias = (torch.randn(e, generator=gen) * 0.1).to(dtype) if kind == "sigmoid_grouped" else None
    scale = 2.5 if kind == "sigmoid_grouped" else 1.0
    spec = routing_spec(x, k, kind, renorm, bias, *groups, scale, False)
    assert PlatformDispatch.choose("moe_routing", spec).provider == "aiter"
    w0, i0 = moe_routing_ref(x, k, kind, renorm, bias, *groups, scale, False)
    w1, i1 = get_provider("aiter").moe_routing(x, k, kind, renorm, bias, *groups, scale, False)
    assert i1.dtype == torch.int64 and w1.dtype == torch.float32
    (w0, i0), (w1, i1) = _by_id(w0, i0), _by_id(w1, i1)
    assert torch.equal(i0, i1)
    torch.testing.assert_close(w1, w0, rtol=1e-6, atol=1e-7)
    assert aiter_on_rocm[-1][0] == ("biased_grouped_topk_hip" if kind == "sigmoid_grouped" else "topk_softmax")


def test_aiter_refusals_fall_back_to_triton(aiter_on_rocm):
    x = torch.empty(4, 256)
    four = PlatformDispatch.choose("moe_routing", routing_spec(x, 8, "sigmoid_grouped", True, torch.empty(256),
                                                               4, 2, 1.0, False))
    assert four.provider == "triton" and "4 expert groups" in four.why_not
    xb = torch.empty(4, 256, dtype=torch.bfloat16)
    f32_bias = PlatformDispatch.choose("moe_routing", routing_spec(xb, 8, "sigmoid_grouped", True,
                                                                   torch.empty(256), 8, 4, 1.0, False))
    assert f32_bias.provider == "triton" and "would be rounded" in f32_bias.why_not
    twice = PlatformDispatch.choose("moe_routing", routing_spec(x, 4, "topk_softmax", True, None, 1, 1, 1.0, True))
    assert twice.provider == "triton" and "renormalises once" in twice.why_not


def test_aiter_chosen_by_the_pass_on_rocm(aiter_on_rocm):
    """On ROCm with the pass turned on, DeepSeek-V3's router goes to AITER's grouped kernel (E=16: 4 groups is
    refused there, so this router uses 1 group: its choice is ungrouped)."""
    m, h = _router("deepseek_one_group")
    (w, ids), (g,) = compile_run(m, h, options={"provider": None, "passes": {"moe_routing": True}})
    assert g.report.providers() == {"moe_routing": ["aiter"]}, g.report
    (w, ids), (we, ie) = _by_id(w, ids), _by_id(*m(h))
    assert torch.equal(ids, ie)
    torch.testing.assert_close(w, we, rtol=1e-6, atol=1e-7)
