"""Our Triton RMSNorm kernels (``rocm_inductor.providers.triton.rms_norm``) against the float64 truth.

On CPU the kernels run under Triton's interpreter (``TRITON_INTERPRET=1``, set below before Triton is
imported when no GPU is present); with a GPU the same tests run compiled on it.
"""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

pytest.importorskip("triton")

from rocm_inductor.providers.reference import fused_add_rms_norm_ref, rms_norm_ref  # noqa: E402
from rocm_inductor.providers.triton import rms_norm as K  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"
DTYPES = [torch.float16, torch.bfloat16, torch.float32]
MANTISSA = {torch.float16: 10, torch.bfloat16: 7, torch.float32: 23}
# Extra ulps of the output dtype we allow beyond the reference's own error: one for fp16/bf16 (docs/ops.md
# numerics contract); fp32 output keeps the fp32 sum-of-squares rounding, whose order differs from torch's
# reduction (seen: <= 2 ulp at H = 4100 on CPU), so 4.
EXTRA_ULPS = {torch.float16: 1, torch.bfloat16: 1, torch.float32: 4}
EPS = 1e-6


def _ulp(t64: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Spacing of ``dtype`` at |t64| (float64), floored at the smallest normal's spacing."""
    fi = torch.finfo(dtype)
    _, e = torch.frexp(t64.abs().clamp_min(fi.tiny))
    return torch.ldexp(torch.ones_like(t64), e - 1 - MANTISSA[dtype])


def _norm64(x: torch.Tensor, w: torch.Tensor | None, offset: float) -> torch.Tensor:
    x = x.double()
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS)
    return y if w is None else y * (w.double() + offset)


def _assert_close_to_truth(got: torch.Tensor, ref: torch.Tensor, truth: torch.Tensor) -> None:
    """|got - truth| <= |ref - truth| + EXTRA_ULPS ulp(truth), elementwise (docs/ops.md numerics contract)."""
    assert got.dtype == ref.dtype and got.shape == ref.shape and got.is_contiguous()
    err = (got.double() - truth).abs()
    bound = (ref.double() - truth).abs() + EXTRA_ULPS[got.dtype] * _ulp(truth, got.dtype)
    bad = err > bound
    assert not bad.any(), f"{int(bad.sum())} elements off, worst {float((err - bound).max())}"


def _inputs(shape, dtype, wdtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g).to(dtype).to(DEV)
    r = torch.randn(shape, generator=g).to(dtype).to(DEV)
    w = None if wdtype is None else (1 + 0.1 * torch.randn(shape[-1], generator=g)).to(wdtype).to(DEV)
    return x, r, w


def _check_rms(x, w, offset):
    y = K.rms_norm(x, w, EPS, offset)
    _assert_close_to_truth(y, rms_norm_ref(x, w, EPS, offset), _norm64(x, w, offset))


def _check_fused(x, r, w, offset):
    x0, r0 = x.clone(), r.clone()
    y, s = K.fused_add_rms_norm(x, r, w, EPS, offset)
    y_ref, s_ref = fused_add_rms_norm_ref(x, r, w, EPS, offset)
    assert torch.equal(x, x0) and torch.equal(r, r0), "inputs were written"
    # Both add in float32 and round once to nearest even: bit-equal sums.
    assert s.is_contiguous() and torch.equal(s, s_ref)
    _assert_close_to_truth(y, y_ref, _norm64(s_ref, w, offset))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("hidden", [64, 769, 4100])
@pytest.mark.parametrize("m", [0, 1, 3])
def test_against_float64(dtype, hidden, m):
    x, r, w = _inputs((m, hidden), dtype, dtype, seed=hidden + m)
    _check_rms(x, w, 0.0)
    _check_fused(x, r, w, 0.0)
    if m == 0:
        assert K.rms_norm(x, w, EPS, 0.0).shape == (0, hidden)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_weightless_and_gemma_offset(dtype):
    x, r, w = _inputs((2, 3, 769), dtype, dtype, seed=1)
    _check_rms(x, None, 0.0)
    _check_fused(x, r, None, 0.0)
    _check_rms(x, w, 1.0)
    _check_fused(x, r, w, 1.0)


@pytest.mark.parametrize("wdtype", [torch.float32, torch.float64, torch.float16], ids=str)
def test_weight_dtype_differs_from_input(wdtype):
    x, r, w = _inputs((3, 1000), torch.bfloat16, wdtype, seed=2)
    _check_rms(x, w, 0.0)
    _check_fused(x, r, w, 1.0)


def test_non_contiguous_inputs():
    g = torch.Generator().manual_seed(3)
    base = torch.randn(1000, 4, generator=g).to(torch.bfloat16).to(DEV)
    wide = torch.randn(4, 1024, generator=g).to(torch.bfloat16).to(DEV)
    seq_major = torch.randn(5, 2, 64, generator=g).to(torch.bfloat16).to(DEV)
    w = (1 + 0.1 * torch.randn(1000, generator=g)).to(torch.bfloat16).to(DEV)
    xt = base.t()  # (4, 1000), last-dim stride 4: copied
    xs = wide[:, 12:1012]  # (4, 1000), row stride 1024: read in place
    assert xt.stride(-1) != 1 and xs.stride(0) == 1024 and xs.stride(-1) == 1
    for x in (xt, xs):
        _check_rms(x, w, 0.0)
        _check_fused(x, xs if x is xt else xt, w, 0.0)
    xb = seq_major.transpose(0, 1)  # (2, 5, 64): batch dims don't flatten to a view
    _check_rms(xb, None, 0.0)
    _check_fused(xb, xb.contiguous().flip(0), None, 0.0)
    # A broadcast row (stride 0) is read in place, every output row the same.
    xe = wide[:1, :64].expand(3, 64)
    assert xe.stride(0) == 0
    _check_rms(xe, None, 0.0)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # eps = 0: the interpreter divides by 0 in padded rows
def test_bf16_store_rounds_to_nearest_even():
    # Rows of +-1 with eps = 0 give rstd = 1 exactly, so y = x * w exactly in float32; the weights sit
    # exactly halfway between two bf16 values (ties -> even mantissa) or just above half (-> up).
    # Truncation (the interpreter's own fp32->bf16 cast, AITER's store) would give 1, 1 + 2**-7, 1, ...
    tie_even_down, tie_even_up, above_half = 1 + 2**-8, 1 + 3 * 2**-8, 1 + 0.75 * 2**-7
    w = torch.tensor([tie_even_down, tie_even_up, above_half, tie_even_up], device=DEV)
    x = torch.tensor([[1.0, 1.0, 1.0, -1.0]], dtype=torch.bfloat16, device=DEV)
    y = K.rms_norm(x, w, 0.0, 0.0).float().cpu()
    assert y.tolist() == [[1.0, 1 + 2**-6, 1 + 2**-7, -(1 + 2**-6)]]
    assert torch.equal(y, (x.float().cpu() * w.cpu()).to(torch.bfloat16).float())  # torch's RTNE cast
    # The residual sum s = x + r: 1 + 2**-8 ties to 1, 1 + 3 * 2**-8 ties to 1 + 2**-6.
    xa = torch.tensor([[1.0, 1.0, -1.0, 1.0]], dtype=torch.bfloat16, device=DEV)
    ra = torch.tensor([[2**-8, 3 * 2**-8, -3 * 2**-8, 2**-6]], dtype=torch.bfloat16, device=DEV)
    _, s = K.fused_add_rms_norm(xa, ra, None, 0.0, 0.0)
    assert s.float().cpu().tolist() == [[1.0, 1 + 2**-6, -(1 + 2**-6), 1 + 2**-6]]
    assert torch.equal(s, xa + ra)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # eps = 0: the interpreter divides by 0 in padded rows
def test_bf16_store_special_values():
    # NaN with a full payload (0x7FFFFFFF) must not carry into the sign (-> -0); finite fp32 above the
    # bf16 range rounds to inf as torch does.
    nan_payload = torch.tensor([0x7FFFFFFF], dtype=torch.int32).view(torch.float32)
    w = torch.cat([nan_payload, torch.tensor([float("inf"), -float("inf"), torch.finfo(torch.float32).max])])
    x = torch.tensor([[1.0, 1.0, 1.0, -1.0]], dtype=torch.bfloat16)
    y = K.rms_norm(x.to(DEV), w.to(DEV), 0.0, 0.0).float().cpu()[0]
    assert torch.isnan(y[0]) and y[1:].tolist() == [float("inf"), -float("inf"), -float("inf")]


def _truncate_bf16(t: torch.Tensor) -> torch.Tensor:
    """float32 -> bfloat16 rounded toward zero (the faulty store this suite must catch)."""
    return (t.float().contiguous().view(torch.int32) & -65536).view(torch.float32).to(torch.bfloat16)


def _chain(fused, dtype, layers, hidden, rows=4):
    """``layers`` pre-norm blocks: s <- s + 0.3 * c_l * norm(s) (one fused add + norm each); final s."""
    g = torch.Generator().manual_seed(7)
    s = torch.randn(rows, hidden, generator=g).to(torch.bfloat16)
    ws = [(1 + 0.02 * torch.randn(hidden, generator=g)).to(torch.bfloat16) for _ in range(layers)]
    cs = [(0.3 * torch.rand(hidden, generator=g)).to(torch.bfloat16) for _ in range(layers)]
    s = s.to(dtype).to(DEV)
    y = rms_norm_ref(s, ws[0].to(dtype).to(DEV), EPS, 0.0)
    for w, c in zip(ws, cs, strict=True):
        y, s = fused(y * c.to(dtype).to(DEV), s, w.to(dtype).to(DEV), EPS, 0.0)
    return s.float().cpu()


def _truncating_ref(x, r, w, eps, offset):
    s = _truncate_bf16(x.float() + r.float())
    return rms_norm_ref(s, w, eps, offset), s


@pytest.mark.slow
def test_drift_64_layers_bf16():
    """The residual's RMS after 64 bf16 fused add+norm layers drifts from fp32's no more than eager's does."""
    layers, hidden = 64, 4096
    rms = lambda t: float(t.double().pow(2).mean().sqrt())
    s32 = rms(_chain(fused_add_rms_norm_ref, torch.float32, layers, hidden))
    drift = lambda fused: abs(rms(_chain(fused, torch.bfloat16, layers, hidden)) / s32 - 1)
    eager, ours, trunc = drift(fused_add_rms_norm_ref), drift(K.fused_add_rms_norm), drift(_truncating_ref)
    slack = 2e-3  # different but equally rounded fp32 reductions may move a few values one ulp
    assert ours <= eager + slack, f"triton drift {ours:.4f} vs eager {eager:.4f}"
    # The bound has teeth: a truncating store fails it by a wide margin.
    assert trunc > eager + 10 * slack, f"truncating drift {trunc:.4f} vs eager {eager:.4f}"


def test_check_limits():
    ok = {"dtype": torch.bfloat16, "weight_dtype": torch.float32, "hidden": 4100, "offset": 1.0,
          "fused_add": True, "ndim": 3}
    assert K.check(ok) is None
    assert K.check({**ok, "weight_dtype": None, "hidden": 769}) is None
    assert K.check({**ok, "hidden": K.MAX_HIDDEN}) is None
    assert "symbolic" in K.check({**ok, "hidden": None})
    assert str(K.MAX_HIDDEN) in K.check({**ok, "hidden": K.MAX_HIDDEN + 1})
    assert "float64" in K.check({**ok, "dtype": torch.float64})
    assert "float8" in K.check({**ok, "weight_dtype": torch.float8_e4m3fn})


def test_launch_config_rule():
    for hidden in [1, 64, 128, 769, 1024, 2048, 4100, 8192, 16384, K.MAX_HIDDEN]:
        block_n, rows, warps = K.launch_config(hidden)
        assert block_n >= hidden > block_n // 2 and rows * block_n >= min(block_n, 1024)
        assert warps * 64 <= 1024, "a 64-wide ROCm wavefront config must stay within 1024 threads"
    assert K.launch_config(128) == (128, 8, 4) and K.launch_config(4096) == (4096, 1, 8)
    assert K.launch_config(K.MAX_HIDDEN) == (K.MAX_HIDDEN, 1, 16)
    # NVIDIA's 32-wide warps go to 32 warps (1024 threads) for the longest rows (16 spilled on sm_90)
    assert K.launch_config(K.MAX_HIDDEN, 32) == (K.MAX_HIDDEN, 1, 32)
    assert K.launch_config(4096, 32) == K.launch_config(4096, 64)
    assert K.early_weight(4096, 1, 8, 64) and not K.early_weight(K.MAX_HIDDEN, 1, 32, 32)
    with pytest.raises(ValueError):
        K.launch_config(K.MAX_HIDDEN + 1)


def test_bad_input_raises():
    x = torch.randn(2, 64, device=DEV)
    with pytest.raises(ValueError, match="weight shape"):
        K.rms_norm(x, torch.ones(32, device=DEV), EPS, 0.0)
    with pytest.raises(ValueError, match="residual"):
        K.fused_add_rms_norm(x, torch.randn(2, 64, device=DEV).half(), None, EPS, 0.0)
    with pytest.raises(ValueError, match="float64"):
        K.rms_norm(x.double(), None, EPS, 0.0)


def test_opaque_in_custom_op_under_compile():
    """Called from a torch.library custom op, the launcher runs under torch.compile (aot_eager: no C++)."""
    lib = "rocm_inductor_test_triton_rms"

    @torch.library.custom_op(f"{lib}::norm", mutates_args=())
    def norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return K.rms_norm(x, w, EPS, 0.0)

    @norm.register_fake
    def _(x, w):
        return torch.empty_like(x, memory_format=torch.contiguous_format)

    x, _, w = _inputs((3, 769), torch.bfloat16, torch.bfloat16, seed=4)
    got = torch.compile(lambda a, b: norm(a * 2, b), backend="aot_eager", fullgraph=True)(x, w)
    assert torch.equal(got, K.rms_norm(x * 2, w, EPS, 0.0))


def test_through_triton_provider():
    from rocm_inductor.providers import get_provider

    prov = get_provider("triton")
    spec = {"dtype": torch.bfloat16, "weight_dtype": torch.bfloat16, "hidden": 769, "offset": 0.0,
            "fused_add": True, "ndim": 2}
    assert prov.check("fused_add_rms_norm", spec) is None
    assert "symbolic" in prov.check("rms_norm", {**spec, "hidden": None})
    x, r, w = _inputs((3, 769), torch.bfloat16, torch.bfloat16, seed=5)
    assert torch.equal(prov.rms_norm(x, w, EPS, 0.0), K.rms_norm(x, w, EPS, 0.0))
    for a, b in zip(prov.fused_add_rms_norm(x, r, w, EPS, 1.0), K.fused_add_rms_norm(x, r, w, EPS, 1.0),
                    strict=True):
        assert torch.equal(a, b)
