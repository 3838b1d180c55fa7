"""Vendor sampler wrappers on CPU stand-ins: signature detection, capture refusal, bad-row handling."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from rocm_inductor.ops.sampling import sample_spec
from rocm_inductor.providers import get_provider


def _stub(seeded: bool):
    calls = []

    if seeded:
        def fn(logits, top_k, top_p, indices=None, filter_apply_order="top_k_first", deterministic=True,
               generator=None, check_nan=False, seed=None, offset=None):
            calls.append(dict(seed=seed, offset=offset, order=filter_apply_order, k=top_k, p=top_p))
            return logits.argmax(-1).to(torch.int32)
    else:
        def fn(logits, top_k, top_p, indices=None, filter_apply_order="top_k_first", deterministic=True,
               generator=None, check_nan=False):
            calls.append(dict(generator=generator, k=top_k, p=top_p))
            return logits.argmax(-1).to(torch.int32)

    mod = types.ModuleType("flashinfer")
    mod.sampling = types.SimpleNamespace(top_k_top_p_sampling_from_logits=fn)
    mod.__version__ = "0.6.5" if seeded else "0.5.3"
    return mod, calls


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


def test_aiter_never_under_capture(monkeypatch):
    mod = types.ModuleType("aiter")
    mod.top_k_top_p_sampling_from_probs = lambda probs, top_k=None, top_p=None: probs.argmax(-1)
    monkeypatch.setitem(sys.modules, "aiter", mod)
    prov = get_provider("aiter")
    prov.reset()
    spec = sample_spec(torch.empty(2, 5), is_probs=False, top_k_first=True, per_row=set(), has_min_p=False,
                       has_ban=False, greedy=False, cudagraphs=True)
    assert "never under graph capture" in prov.check("sample", spec)
    assert prov.check("sample", {**spec, "cudagraphs": False}) is None
    assert "min-p" in prov.check("sample", {**spec, "cudagraphs": False, "has_min_p": True,
                                            "per_row": frozenset({"min_p"})})
    x = torch.tensor([[0.0, 5.0, 1.0, 0.0, 0.0], [float("nan")] * 5])
    out = torch.ops.rocm_fused.sample(x, torch.tensor([1]), None, 1.0, None, 2, None, 0.9, None, 0.0, None,
                                      False, True, True, "aiter")
    assert out.flatten().tolist() == [1, 0]
    prov.reset()


def test_seed_detected_by_type_not_name():
    """FlashInfer 0.6.0-0.6.3 take ``seed: Optional[int]``: not a device seed; >= 0.6.4 a Tensor union (as a
    string under ``from __future__ import annotations`` or as a typing object)."""
    import typing

    from rocm_inductor.providers._vendor_sampling import takes_seed_tensor

    def int_seed(logits, top_k, top_p, seed: int | None = None, offset: int | None = None):
        return None

    def tensor_seed(logits, top_k, top_p, seed: int | torch.Tensor | None = None, offset=None):
        return None

    def typed_seed(logits, top_k, top_p, seed=None, offset=None):
        return None

    typed_seed.__annotations__["seed"] = typing.Optional[typing.Union[int, torch.Tensor]]  # noqa: UP007, UP045
    assert not takes_seed_tensor(int_seed)
    assert takes_seed_tensor(tensor_seed) and takes_seed_tensor(typed_seed)
    assert not takes_seed_tensor(lambda logits, seed=None: None)  # no offset
