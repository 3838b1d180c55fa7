"""Programmatic dependent launch of the merged GEMM (``gemm_knobs.Knobs.pdl``, issue 19), on CPU.

The launcher passes ``launch_pdl=True`` and the kernel's ``PDL`` form only where PDL exists (CUDA sm_90+, not
HIP, not the interpreter, a Triton with ``gdc_wait`` / ``gdc_launch_dependents`` and the ``launch_pdl``
option), the switch (or ``ROCM_FUSED_GEMM_PDL``) is on, and every weight is an ``nn.Parameter``. Checked with
a recording stand-in for the kernel (no GPU here) and, under the interpreter, a real launch that must not
take the PDL form. The PDL kernel's sm_90 compile is an ``aot_cases()`` entry (tests/test_triton_aot.py).
"""

from __future__ import annotations

import types

import pytest
import torch

from rocm_inductor.providers.triton import gemm_configs as gc
from rocm_inductor.providers.triton import gemm_kernels as gk
from rocm_inductor.providers.triton import gemm_knobs as knobs
from rocm_inductor.providers.triton import gemm_merge as gm


class _Recorder:
    """Stands in for ``_merged_gemm_kernel``: ``[grid](*args, **kwargs)`` records the keyword arguments."""

    def __init__(self, real=None):
        self.calls, self.real = [], real

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.calls.append(kwargs)
            if self.real is not None:
                self.real[grid](*args, **kwargs)
        return launch


def _params(ns=(8, 4), k=32, dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, k, generator=g, dtype=dtype)
    ws = [torch.nn.Parameter(torch.randn(n, k, generator=g, dtype=dtype), requires_grad=False) for n in ns]
    return x, ws


def test_interpreter_never_takes_pdl(monkeypatch):
    """PDL switched on under the interpreter: a real launch, no ``launch_pdl``, the plain kernel, right result."""
    monkeypatch.delenv("ROCM_FUSED_GEMM_PDL", raising=False)
    rec = _Recorder(gk._merged_gemm_kernel)
    monkeypatch.setattr(gk, "_merged_gemm_kernel", rec)
    x, ws = _params()
    with knobs.override(pdl=True):
        outs = gm.merged_gemm(x, ws, [None, None], config=gc.Config(1, 4, 32, 1, 4, 1, False, False, True, True))
    assert len(rec.calls) == 1 and "launch_pdl" not in rec.calls[0] and rec.calls[0]["PDL"] is False
    for o, w in zip(outs, ws):
        torch.testing.assert_close(o, x @ w.T, rtol=1e-5, atol=1e-5)


def _fake_cuda(monkeypatch, capability=(9, 0), hip=None, has=True, interp=False):
    monkeypatch.setattr(gm, "_interpreting", lambda: interp)
    monkeypatch.setattr(gm, "triton_has_pdl", lambda: has)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.version, "hip", hip)
    return types.SimpleNamespace(is_cuda=True, device="cuda:0")


@pytest.mark.parametrize("kw,want", [({}, True), ({"capability": (8, 0)}, False), ({"hip": "6.4"}, False),
                                     ({"has": False}, False), ({"interp": True}, False)])
def test_pdl_available_guards_by_feature(monkeypatch, kw, want):
    """Only sm_90+ CUDA with the Triton feature, never HIP or the interpreter (stand-in device, no GPU)."""
    assert gm.pdl_available(_fake_cuda(monkeypatch, **kw)) is want
    assert gm.pdl_available(torch.zeros(1)) is False  # a CPU tensor


def test_use_pdl_switch_env_and_parameters(monkeypatch):
    """Off by default (measured slower in a decode step); the switch or the environment turns it on, for
    parameters only."""
    x = _fake_cuda(monkeypatch)
    _, ws = _params()
    monkeypatch.delenv("ROCM_FUSED_GEMM_PDL", raising=False)
    with knobs.override(pdl=False):
        assert not gm.use_pdl(x, ws)
    for switch in (True, None):
        with knobs.override(pdl=switch):
            assert gm.use_pdl(x, ws)
            assert not gm.use_pdl(x, [w.detach().clone() for w in ws])  # plain tensors: maybe written just before
    monkeypatch.setenv("ROCM_FUSED_GEMM_PDL", "0")
    with knobs.override(pdl=None):
        assert not gm.use_pdl(x, ws)
    monkeypatch.setenv("ROCM_FUSED_GEMM_PDL", "1")
    with knobs.override(pdl=False):
        assert gm.use_pdl(x, ws)


@pytest.mark.parametrize("on", [False, True])
def test_launcher_passes_launch_pdl_only_when_used(monkeypatch, on):
    """The launch's keywords: ``PDL`` and ``launch_pdl`` together, or neither (recorded, not run)."""
    monkeypatch.setattr(gm, "use_pdl", lambda x, weights: on)
    rec = _Recorder()
    monkeypatch.setattr(gk, "_merged_gemm_kernel", rec)
    x, ws = _params()
    gm.launch(x, ws, [None, None], gc.Config(1, 4, 32, 1, 4, 1, False, False, True, True))
    (kw,) = rec.calls
    assert kw["PDL"] is on and kw.get("launch_pdl", False) is on and ("launch_pdl" in kw) is on


def test_triton_has_pdl_matches_installed_triton():
    """The feature probe reads the installed Triton (3.6 and 3.9 have it), without a version string."""
    import triton.backends.nvidia.compiler as nvc

    has_fields = "launch_pdl" in getattr(nvc.CUDAOptions, "__dataclass_fields__", {})
    assert gm.triton_has_pdl() is (gk.HAS_GDC and has_fields)


def test_pdl_aot_cases_are_sm90_only():
    """The PDL kernels' compile cases exist and name only sm_90 (griddepcontrol is Hopper PTX)."""
    cases = [c for c in gk.aot_cases() if c["constexprs"].get("PDL")]
    if not gk.HAS_GDC:
        pytest.skip("this Triton has no gdc_wait")
    assert {c["name"] for c in cases} == {"qkv_gemvfull_pdl_m1_bf16", "qkv_dot_pdl_m8_bf16"}
    assert all(c["targets"] == ["sm_90"] for c in cases)
    assert all(c["constexprs"]["PDL"] is False for c in gk.aot_cases() if c["fn"] is gk._merged_gemm_kernel
               and c not in cases)
