"""Norm providers through PlatformDispatch: CPU stand-ins for flashinfer / the AMD fork / aiter, drift, GPU.

The stand-in modules record their calls and compute the reference, so the tests check which provider is
chosen on each platform, with which arguments it is called, and what happens when an import fails. ROCm
providers are verified on these CPU stand-ins only.
"""

from __future__ import annotations

import sys
import types

import pytest
import torch
import vendor_standins
from graph_utils import compile_run, needs_interpreter
from norm_spellings import SPELLINGS, FunctionalRMSNorm, PreNorm, Single

import rocm_inductor.platform as platform_mod
from rocm_inductor import Platform, PlatformDispatch, policy
from rocm_inductor.ops.rms_norm import norm_spec
from rocm_inductor.providers.reference import fused_add_rms_norm_ref, rms_norm_ref

RMS = "rocm_fused.rms_norm.default"
FUSED = "rocm_fused.fused_add_rms_norm.default"


def _flashinfer_standin(calls: list, with_backend: bool = False) -> types.ModuleType:
    """FlashInfer 0.5.3 (or, ``with_backend``, AMD's fork 0.6.18+amd) with the real norm signatures; its
    fused add + norm normalises the unrounded float32 sum, as the real kernel does (``vendor_standins``)."""
    mods = vendor_standins.amd_flashinfer("0.6.18+amd", calls) if with_backend else \
        vendor_standins.flashinfer("0.5.3", calls)
    return mods["flashinfer"]


def _aiter_standin(calls: list, line: str = "0.1.5") -> types.ModuleType:
    return vendor_standins.aiter(line, calls)["aiter"]


@pytest.fixture
def on(monkeypatch):
    """``on("cuda", "sm_90")`` makes PlatformDispatch see that platform (tensors stay on CPU)."""

    def set_platform(kind, arch=None):
        monkeypatch.setattr(platform_mod, "detect_platform", lambda: Platform(kind, arch, "stand-in"))
        # these norms are 64 wide, under CUDA's per-head minimum (policy.NORM_MIN_HIDDEN, tested in
        # test_rms_norm_pass.py): lift it so the provider order is what is tested here
        monkeypatch.setitem(policy.NORM_MIN_HIDDEN, kind, 0)
        PlatformDispatch.reset_all()

    return set_platform


def _spec(dtype=torch.bfloat16, wdtype=torch.bfloat16, h=64, fused=False, offset=0.0):
    x, w = torch.empty(2, h, dtype=dtype), torch.empty(h, dtype=wdtype)
    return norm_spec(x, w, offset, fused)


def test_cpu_has_no_default_provider_and_pass_is_off():
    assert PlatformDispatch.platform().kind == "cpu" or torch.cuda.is_available()
    if torch.cuda.is_available():
        pytest.skip("CPU-only behaviour")
    assert PlatformDispatch.choose("rms_norm", _spec()).provider is None
    m = Single(SPELLINGS["hf_llama"]().to(torch.bfloat16))
    x = torch.randn(3, 64, dtype=torch.bfloat16)
    _, (g,) = compile_run(m, x, x, options={"provider": None})
    assert g.after[RMS] == 0 and "rms_norm" in g.report.passes_skipped


def _prenorm_on_cuda_standin(on, monkeypatch, spelling: str, provider: str | None):
    """A bf16 PreNorm of ``spelling`` compiled as on an sm_90 GPU with the FlashInfer stand-in installed.

    Returns ``(out, eager_out, captured, calls)``; ``calls`` lists the stand-in kernels' calls.
    """
    calls: list = []
    monkeypatch.setitem(sys.modules, "flashinfer", _flashinfer_standin(calls))
    on("cuda", "sm_90")
    m = PreNorm(SPELLINGS[spelling]).to(torch.bfloat16)
    x = torch.randn(3, 64, dtype=torch.bfloat16)
    out, (g,) = compile_run(m, x, x, options={"provider": provider})
    return out, m(x, x), g, calls


@needs_interpreter
def test_cuda_policy_picks_flashinfer_norm_and_triton_fused_add(on, monkeypatch):
    """CUDA policy (measured, benchmarks/RESULTS.md): rms_norm -> FlashInfer, fused add + norm -> Triton."""
    out, eager, g, calls = _prenorm_on_cuda_standin(on, monkeypatch, "hf_llama", None)
    assert PlatformDispatch.choose("rms_norm", _spec()).provider == "flashinfer"
    assert PlatformDispatch.choose("fused_add_rms_norm", _spec(fused=True)).provider == "triton"
    assert (g.after[FUSED], g.after[RMS]) == (2, 1)
    assert g.report.providers() == {"fused_add_rms_norm": ["triton"], "rms_norm": ["flashinfer"]}
    assert [c[0] for c in calls] == ["rmsnorm"]
    torch.testing.assert_close(out, eager, rtol=2e-2, atol=2e-2)


def test_flashinfer_forced_calls_its_kernels_with_the_right_arguments(on, monkeypatch):
    out, eager, g, calls = _prenorm_on_cuda_standin(on, monkeypatch, "hf_llama", "flashinfer")
    assert g.report.providers() == {"fused_add_rms_norm": ["flashinfer"], "rms_norm": ["flashinfer"]}
    names = sorted(c[0] for c in calls)
    assert names == ["fused_add_rmsnorm", "fused_add_rmsnorm", "rmsnorm"]
    assert all(c[1] == (3, 64) and c[2] == torch.bfloat16 and c[3] == pytest.approx(1e-5) for c in calls)
    torch.testing.assert_close(out, eager, rtol=2e-2, atol=2e-2)


def test_gemma_goes_to_gemma_kernels(on, monkeypatch):
    *_, calls = _prenorm_on_cuda_standin(on, monkeypatch, "gemma", "flashinfer")
    assert sorted(c[0] for c in calls) == ["gemma_fused_add_rmsnorm", "gemma_fused_add_rmsnorm", "gemma_rmsnorm"]


def test_flashinfer_rejects_fp32_weight_with_reason(on, monkeypatch):
    """F.rms_norm with an fp32 weight on bf16 input: FlashInfer would read the weight as bf16 (garbage)."""
    monkeypatch.setitem(sys.modules, "flashinfer", _flashinfer_standin([]))
    on("cuda", "sm_90")
    m = Single(FunctionalRMSNorm()).to(torch.bfloat16)
    m.n.weight.data = m.n.weight.data.float()
    x = torch.randn(3, 64, dtype=torch.bfloat16)
    out, (g,) = compile_run(m, x, x, options={"provider": "flashinfer", "strict": True})
    assert g.after[RMS] == 0
    (miss,) = g.report.near_misses
    assert "weight is float32, input bfloat16; FlashInfer needs equal dtypes" in miss.reason
    # without forcing, the next provider (Triton) takes it
    choice = PlatformDispatch.choose("rms_norm", _spec(wdtype=torch.float32))
    assert choice.provider == "triton" and "FlashInfer needs equal dtypes" in choice.why_not


def test_missing_flashinfer_falls_back_to_triton(on, monkeypatch):
    monkeypatch.setitem(sys.modules, "flashinfer", None)  # import raises ImportError
    on("cuda", "sm_90")
    choice = PlatformDispatch.choose("fused_add_rms_norm", _spec(fused=True))
    assert choice.provider == "triton"
    assert "import flashinfer failed" in choice.why_not


def test_rocm_gfx942_picks_the_fork_with_native_backend(on, monkeypatch):
    calls: list = []
    monkeypatch.setitem(sys.modules, "flashinfer", _flashinfer_standin(calls, with_backend=True))
    on("rocm", "gfx942")
    assert PlatformDispatch.choose("rms_norm", _spec()).provider == "amd_flashinfer"
    m = PreNorm(SPELLINGS["hf_llama"]).to(torch.bfloat16)
    x = torch.randn(3, 64, dtype=torch.bfloat16)
    _, (g,) = compile_run(m, x, x, options={"provider": None})
    assert g.report.providers() == {"fused_add_rms_norm": ["amd_flashinfer"], "rms_norm": ["amd_flashinfer"]}
    # the fork's rmsnorm takes backend= (bound to "native"); its fused_add_rmsnorm has no backend parameter
    assert [c[-1] for c in calls if c[0] == "rmsnorm"] == ["native"]
    assert {c[-1] for c in calls if c[0] == "fused_add_rmsnorm"} == {None}


def test_rocm_fork_import_error_on_other_arch_falls_back(on, monkeypatch, tmp_path):
    """The fork raises RuntimeError at import on an unsupported arch: treated as unavailable."""
    pkg = tmp_path / "flashinfer"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise RuntimeError('amd-flashinfer supports gfx942/gfx950 only')\n")
    monkeypatch.delitem(sys.modules, "flashinfer", raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    on("rocm", "gfx942")
    choice = PlatformDispatch.choose("rms_norm", _spec())
    assert choice.provider == "triton"
    assert "RuntimeError" in choice.why_not
    on("rocm", "gfx1100")
    assert "supports ('gfx942', 'gfx950') only" in PlatformDispatch.choose("rms_norm", _spec()).why_not


def test_aiter_is_never_the_default_but_can_be_forced(on, monkeypatch):
    calls: list = []
    monkeypatch.setitem(sys.modules, "flashinfer", None)
    monkeypatch.setitem(sys.modules, "aiter", _aiter_standin(calls))
    on("rocm", "gfx942")
    assert PlatformDispatch.choose("fused_add_rms_norm", _spec(fused=True)).provider == "triton"
    m = PreNorm(SPELLINGS["hf_llama"]).to(torch.bfloat16)
    x = torch.randn(3, 64, dtype=torch.bfloat16)
    out, (g,) = compile_run(m, x, x, options={"provider": "aiter"})
    assert (g.after[FUSED], g.after[RMS]) == (2, 1)
    assert sorted(c[0] for c in calls) == ["rms_norm", "rmsnorm2d_fwd_with_add", "rmsnorm2d_fwd_with_add"]
    assert all(c[2] == pytest.approx(1e-5) for c in calls)
    torch.testing.assert_close(out, m(x, x), rtol=2e-2, atol=2e-2)
    # documented limits: odd hidden sizes and Gemma are refused
    assert "multiple of 8" in PlatformDispatch.choose("rms_norm", _spec(h=769), "aiter").why_not
    assert "Gemma" in PlatformDispatch.choose("rms_norm", _spec(offset=1.0), "aiter").why_not


def _ulps(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest |a - b| in units of the last place of b's dtype at b's magnitude (b exact in its dtype)."""
    eps = torch.finfo(b.dtype).eps
    ulp = torch.exp2(torch.floor(torch.log2(b.double().abs().clamp_min(torch.finfo(b.dtype).tiny)))) * eps
    return float(((a.double() - b.double()).abs() / ulp).max())


def test_flashinfer_fused_add_normalises_the_unrounded_sum_within_one_ulp(monkeypatch):
    """The op means norm(rounded s) (eager); FlashInfer normalises the fp32 sum: within 1 ulp, s bit-equal,
    and inside the numerics contract (docs/ops.md) (error vs float64 <= eager's + 1 ulp)."""
    calls: list = []
    monkeypatch.setitem(sys.modules, "flashinfer", _flashinfer_standin(calls))
    from rocm_inductor.providers import get_provider

    get_provider("flashinfer").reset()
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(64, 4096, generator=g) * 3).to(torch.bfloat16)
    r = (torch.randn(64, 4096, generator=g) * 50).to(torch.bfloat16)  # large residual: the sum rounds
    w = (1 + 0.1 * torch.randn(4096, generator=g)).to(torch.bfloat16)
    y, s = torch.ops.rocm_fused.fused_add_rms_norm(x, r, w, 1e-6, 0.0, "flashinfer")
    ye, se = fused_add_rms_norm_ref(x, r, w, 1e-6, 0.0)
    assert calls and calls[0][0] == "fused_add_rmsnorm"
    assert torch.equal(s, se)
    assert not torch.equal(y, ye), "the stand-in should differ from the rounded-sum definition somewhere"
    assert _ulps(y, ye) <= 1.0
    s64 = x.double() + r.double()
    ref64 = s64 * torch.rsqrt(s64.pow(2).mean(-1, keepdim=True) + 1e-6) * w.double()
    err = lambda a: float((a.double() - ref64).abs().max() / ref64.abs().max())  # noqa: E731
    assert err(y) <= err(ye) + torch.finfo(torch.bfloat16).eps
    get_provider("flashinfer").reset()


def test_aiter_gemma_fused_add_uses_gemma_norm_from_0_1_17(on, monkeypatch):
    """v0.1.17 added ``gemma_norm`` to ``rmsnorm2d_fwd_with_add``: Gemma's fused add + norm goes there (up to
    hidden 8192, where v0.1.17's CK path drops the flag); v0.1.5-0.1.16 and the plain norm still refuse."""
    calls: list = []
    monkeypatch.setitem(sys.modules, "flashinfer", None)
    monkeypatch.setitem(sys.modules, "aiter", _aiter_standin(calls, "0.1.17"))
    on("rocm", "gfx942")
    assert PlatformDispatch.choose("fused_add_rms_norm", _spec(fused=True, offset=1.0), "aiter").provider == "aiter"
    why = PlatformDispatch.choose("fused_add_rms_norm", _spec(h=16384, fused=True, offset=1.0), "aiter").why_not
    assert "drops gemma_norm" in why
    assert "Gemma" in PlatformDispatch.choose("rms_norm", _spec(offset=1.0), "aiter").why_not
    x, r = torch.randn(3, 64, dtype=torch.bfloat16), torch.randn(3, 64, dtype=torch.bfloat16)
    w = (0.1 * torch.randn(64)).to(torch.bfloat16)
    y, s = torch.ops.rocm_fused.fused_add_rms_norm(x, r, w, 1e-6, 1.0, "aiter")
    ye, se = fused_add_rms_norm_ref(x, r, w, 1e-6, 1.0)
    assert calls[-1][0] == "rmsnorm2d_fwd_with_add" and calls[-1][3] is True
    assert torch.equal(y, ye) and torch.equal(s, se)
    monkeypatch.setitem(sys.modules, "aiter", _aiter_standin([], "0.1.5"))
    PlatformDispatch.reset_all()
    why = PlatformDispatch.choose("fused_add_rms_norm", _spec(fused=True, offset=1.0), "aiter").why_not
    assert "no gemma_norm" in why


def test_reset_all_forgets_cached_choices(on, monkeypatch):
    monkeypatch.setitem(sys.modules, "flashinfer", None)
    on("cuda", "sm_90")
    assert PlatformDispatch.choose("rms_norm", _spec()).provider == "triton"
    monkeypatch.setitem(sys.modules, "flashinfer", _flashinfer_standin([]))
    assert PlatformDispatch.choose("rms_norm", _spec()).provider == "triton"  # cached
    PlatformDispatch.reset_all()
    assert PlatformDispatch.choose("rms_norm", _spec()).provider == "flashinfer"


def test_provider_failing_at_runtime_is_not_hidden(on, monkeypatch):
    """A kernel that raises at run time surfaces to the caller (no silent wrong values)."""
    fi = _flashinfer_standin([])

    def broken(*a, **k):
        raise RuntimeError("kernel exploded")

    fi.norm.rmsnorm = broken
    monkeypatch.setitem(sys.modules, "flashinfer", fi)
    on("cuda", "sm_90")
    x, w = torch.randn(2, 64, dtype=torch.bfloat16), torch.ones(64, dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="kernel exploded"):
        torch.ops.rocm_fused.rms_norm(x, w, 1e-6, 0.0, "flashinfer")


def _drift(provider: str, device: str, layers: int = 64, hidden: int = 4096, rows: int = 4) -> tuple[float, float]:
    """Relative change of the residual's RMS after ``layers`` fused add+norm layers: (ours, eager bf16),
    each measured against the same chain in float32."""
    g = torch.Generator().manual_seed(0)
    x0 = torch.randn(rows, hidden, generator=g).to(device)
    ws = [(1 + 0.01 * torch.randn(hidden, generator=g)).to(device) for _ in range(layers)]
    deltas = [0.1 * torch.randn(rows, hidden, generator=g).to(device) for _ in range(layers)]

    def chain(dtype, step):
        h, r = deltas[0].to(dtype), x0.to(dtype)
        for i in range(layers):
            y, r = step(h, r, ws[i].to(dtype))
            h = (deltas[i] + 0.01 * y.float()).to(dtype)
        return r.double()

    def eager(h, r, w):
        s = h + r
        return rms_norm_ref(s, w, 1e-6, 0.0), s

    def ours(h, r, w):
        return torch.ops.rocm_fused.fused_add_rms_norm(h, r, w, 1e-6, 0.0, provider)

    rms = lambda t: float(t.pow(2).mean().sqrt())
    ref = rms(chain(torch.float32, eager))
    return rms(chain(torch.bfloat16, ours)) / ref - 1, rms(chain(torch.bfloat16, eager)) / ref - 1


@pytest.mark.slow
@pytest.mark.parametrize("provider", ["reference", pytest.param("triton", marks=needs_interpreter)])
def test_drift_64_layers_cpu(provider):
    ours, eager = _drift(provider, "cpu", hidden=4096 if provider == "reference" else 1024)
    assert abs(ours) <= abs(eager) + 1e-4, (ours, eager)


@pytest.mark.gpu
@pytest.mark.parametrize("provider", ["triton", "flashinfer"])
def test_drift_64_layers_gpu(provider):
    if provider == "flashinfer":
        pytest.importorskip("flashinfer")
    ours, eager = _drift(provider, "cuda")
    assert abs(ours) <= abs(eager) + 1e-4, (ours, eager)


@pytest.mark.gpu
@pytest.mark.parametrize("provider", ["triton", "flashinfer"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(1, 2048), (33, 4096), (512, 8192), (7, 769)])
@pytest.mark.parametrize("offset", [0.0, 1.0])
def test_gpu_provider_matches_reference(provider, dtype, shape, offset):
    if provider == "flashinfer":
        pytest.importorskip("flashinfer")
    torch.manual_seed(0)
    x = torch.randn(shape, dtype=dtype, device="cuda") * 2
    r = torch.randn(shape, dtype=dtype, device="cuda")
    w = (1 + 0.1 * torch.randn(shape[-1], device="cuda")).to(dtype)
    ref64 = x.double() * torch.rsqrt(x.double().pow(2).mean(-1, keepdim=True) + 1e-6) * (w.double() + offset)
    eager = rms_norm_ref(x, w, 1e-6, offset)
    y = torch.ops.rocm_fused.rms_norm(x, w, 1e-6, offset, provider)
    ulp = torch.finfo(dtype).eps
    err = lambda a: float((a.double() - ref64).abs().max() / ref64.abs().max())
    assert err(y) <= err(eager) + ulp
    y2, s2 = torch.ops.rocm_fused.fused_add_rms_norm(x, r, w, 1e-6, offset, provider)
    ye, se = fused_add_rms_norm_ref(x, r, w, 1e-6, offset)
    torch.testing.assert_close(s2, se, rtol=0, atol=0)
    torch.testing.assert_close(y2, ye, rtol=2 * ulp, atol=2 * ulp)


@pytest.mark.gpu
def test_gpu_hf_llama_compiled_with_real_kernels():
    """The tiny-Llama path on the GPU with the platform's default provider (FlashInfer if installed)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    # hidden 512: CUDA's policy leaves narrower (per-head) norms to Inductor (policy.NORM_MIN_HIDDEN)
    cfg = LlamaConfig(vocab_size=256, hidden_size=512, intermediate_size=1024, num_hidden_layers=2,
                      num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=128)
    model = LlamaForCausalLM(cfg).to("cuda", torch.bfloat16).eval()
    ids = torch.randint(0, 256, (2, 16), device="cuda")
    out, seen = compile_run(lambda i: model(i).logits, ids, options={"provider": None})
    assert sum(g.after[FUSED] for g in seen) == 4 and sum(g.after[RMS] for g in seen) == 1
    with torch.no_grad():
        eager = model(ids).logits
    assert float((out - eager).abs().max()) < 0.1
