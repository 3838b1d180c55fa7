"""Vendor sampler wrappers on CPU stand-ins: signature detection, capture refusal, bad-row handling."""

from __future__ import annotations

import sys

import pytest
import torch
import vendor_standins

from rocm_inductor.ops.sampling import sample_spec
from rocm_inductor.providers import get_provider


def _stub(seeded: bool):
    """FlashInfer 0.6.4+ (tensor seed/offset) or 0.5.3 (generator only), real signatures (vendor_standins)."""
    calls: list = []
    return vendor_standins.flashinfer("0.6.4" if seeded else "0.5.3", calls)["flashinfer"], calls


@pytest.mark.parametrize("seeded", [True, False])
def test_flashinfer_signature_decides_capture_safety(seeded, monkeypatch):
    mod, calls = _stub(seeded)
    monkeypatch.setitem(sys.modules, "flashinfer", mod)
    prov = get_provider("flashinfer")
    prov.reset()
    spec = sample_spec(torch.empty(4, 10), is_probs=False, top_k_first=True, per_row=set(), has_min_p=False,
                       has_ban=False, greedy=False, cudagraphs=True)
    reason = prov.check("sample", spec)
    assert (reason is None) == seeded
    assert prov.check("sample", {**spec, "cudagraphs": False}) is None
    assert "top-p first" in prov.check("sample", {**spec, "top_k_first": False})
    # a lifted (dynamic=True) or per-row min_p tensor: refused at compile time, the dispatch falls back
    assert "min-p" in prov.check("sample", {**spec, "has_min_p": True, "per_row": frozenset({"min_p"})})
    x = torch.randn(4, 10)
    x[1] = -float("inf")
    x[2, 3] = float("inf")
    out = torch.ops.rocm_fused.sample(x, torch.tensor([7]), None, 0.5, None, 0, None, 0.9, None, 0.0, None,
                                      False, True, False, "flashinfer")
    assert out[1] == 0 and out[2] == 3 and out.dtype == torch.int64
    assert calls[0]["k"].tolist() == [10] * 4  # top_k off -> V, never a huge k
    if seeded:
        assert calls[0]["seed"].tolist() == [7, 8, 9, 10] and calls[0]["order"] == "top_k_first"
    prov.reset()


def _spec(b=4, v=10, **kw):
    base = dict(is_probs=False, top_k_first=True, per_row=set(), has_min_p=False, has_ban=False, greedy=False,
                cudagraphs=True)
    return sample_spec(torch.empty(b, v), **{**base, **kw})


@pytest.mark.parametrize(("lib", "line", "device_seed"), [
    ("flashinfer", "0.5.3", False), ("flashinfer", "0.6.0", False), ("flashinfer", "0.6.4", True),
    ("amd_flashinfer", "0.5.3+amd", False), ("amd_flashinfer", "0.6.18+amd", True)])
def test_seed_detection_by_type_on_real_signatures(lib, line, device_seed, monkeypatch):
    """0.6.0-0.6.3 take ``seed: Optional[int]``: not a device seed (a tensor failed at run time there and the
    compile accepted it under capture). Tensor seed/offset from 0.6.4 (and the fork's 0.6.18+amd)."""
    calls: list = []
    vendor_standins.install(monkeypatch, getattr(vendor_standins, lib)(line, calls))
    name = "flashinfer" if lib == "flashinfer" else "amd_flashinfer"
    prov = get_provider(name)
    prov.reset()
    reason = prov.check("sample", _spec())
    assert (reason is None) == device_seed, reason
    assert prov.check("sample", _spec(cudagraphs=False)) is None
    x = torch.randn(4, 10)
    out = torch.ops.rocm_fused.sample(x, torch.tensor([7]), None, 0.5, None, 0, None, 0.9, None, 0.0, None,
                                      False, True, False, name)
    assert out.dtype == torch.int64 and out.shape == (4,)
    call = calls[-1]
    if device_seed:
        assert call["seed"].dtype == torch.int64 and call["seed"].tolist() == [7, 8, 9, 10]
        assert call["offset"].tolist() == [0] * 4
    else:
        assert call.get("seed") is None
    prov.reset()


def test_aiter_sampler_real_module_and_signature(monkeypatch):
    """``aiter.ops.sampling`` (not imported by ``aiter/__init__``), called positionally; never under capture;
    top-k and top-p together refused (AITER applies top-p to the un-renormalised top-k mass)."""
    calls: list = []
    vendor_standins.install(monkeypatch, vendor_standins.aiter("0.1.5", calls))
    prov = get_provider("aiter")
    prov.reset()
    assert "never under graph capture" in prov.check("sample", _spec(b=2, v=5))
    both = _spec(b=2, v=5, cudagraphs=False, has_top_k=True, has_top_p=True)
    assert "un-renormalised" in prov.check("sample", both)
    assert "un-renormalised" in prov.check("sample", _spec(b=2, v=5, cudagraphs=False))  # unknown = on
    assert prov.check("sample", {**both, "has_top_k": False}) is None
    assert prov.check("sample", {**both, "has_top_p": False}) is None
    assert "min-p" in prov.check("sample", {**both, "has_top_k": False, "has_min_p": True,
                                            "per_row": frozenset({"min_p"})})
    x = torch.tensor([[0.0, 5.0, 1.0, 0.0, 0.0], [float("nan")] * 5])
    out = torch.ops.rocm_fused.sample(x, torch.tensor([1]), None, 1.0, None, 0, None, 0.9, None, 0.0, None,
                                      False, True, True, "aiter")
    assert out.flatten().tolist() == [1, 0]
    name, indices, k_arr, k_val, p_arr, p_val = calls[-1]
    assert name == "top_k_top_p_sampling_from_probs" and indices is None
    assert k_arr.tolist() == [5, 5] and k_val == 5 and p_arr.dtype == torch.float32 and p_val == 1.0
    prov.reset()


def test_aiter_sampler_missing_module_is_a_reason(monkeypatch):
    mods = vendor_standins.aiter("0.1.5", [])
    mods["aiter.ops.sampling"] = None  # import fails
    vendor_standins.install(monkeypatch, mods)
    prov = get_provider("aiter")
    prov.reset()
    assert "no top_k_top_p sampler" in prov.check("sample", _spec(cudagraphs=False, has_top_k=False))
    prov.reset()


def test_seed_detected_by_type_not_name():
    """FlashInfer 0.6.0-0.6.3 take ``seed: Optional[int]``: not a device seed; >= 0.6.4 a Tensor union (as a
    string under ``from __future__ import annotations`` or as a typing object)."""
    import typing

    from rocm_inductor.providers._vendor_sampling import device_seed

    def int_seed(logits, top_k, top_p, seed: int | None = None, offset: int | None = None):
        return None

    def tensor_seed(logits, top_k, top_p, seed: int | torch.Tensor | None = None,
                    offset: int | torch.Tensor | None = None):
        return None

    def typed_seed(logits, top_k, top_p, seed=None, offset=None):
        return None

    for name in ("seed", "offset"):  # 0.6.4+ annotates both
        typed_seed.__annotations__[name] = typing.Optional[typing.Union[int, torch.Tensor]]  # noqa: UP007, UP045
    assert not device_seed(int_seed)
    assert device_seed(tensor_seed) and device_seed(typed_seed)
    assert not device_seed(lambda logits, seed=None: None)  # no offset
