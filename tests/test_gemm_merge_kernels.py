"""Triton grouped small-M GEMM (``providers/triton/gemm_merge.py``) against separate GEMMs, on CPU.

Under ``TRITON_INTERPRET=1`` (tests/conftest.py): every config kind (tl.dot with M padded to 16/32, the FMA
variant, split-K through the workspace), float16/bfloat16/float32, M in 1..32, with and without bias, N and
K not multiples of any block. The contract (docs/ops.md): error vs float64 no worse than the separate eager
GEMMs' plus one ulp of the dtype (16-bit: the output rounding dominates). float32 outputs are not rounded
after the sum, so there the error is the sum's own: its order is each BLAS's choice (eager's too), and two
orders of a K-term float32 dot product differ by up to ~sqrt(K) ulp: the float32 bound is eager's error plus
sqrt(K) ulp (seen: numpy's and torch's CPU sgemm differ by 2x at K = 72, both correct).
"""

from __future__ import annotations

import pytest
import torch
from graph_utils import assert_contract, rel_err

from rocm_inductor.providers.reference import merged_gemm_ref
from rocm_inductor.providers.triton import gemm_configs as gc
from rocm_inductor.providers.triton import gemm_kernels as gk
from rocm_inductor.providers.triton import gemm_merge as gm
from rocm_inductor.providers.triton import gemm_tables as gt

DTYPES = (torch.bfloat16, torch.float16, torch.float32)
#: N not a multiple of 16 (the smallest BLOCK_N), K = 72 not a multiple of 32 (a BLOCK_K of these tests).
NS, K = (40, 23, 9), 72


def _inputs(m: int, dtype: torch.dtype, bias: bool, ns=NS, k=K, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(m, k, generator=g).to(dtype)
    ws = [torch.randn(n, k, generator=g).to(dtype) for n in ns]
    bs = [torch.randn(n, generator=g).to(dtype) if bias and i != 1 else None for i, n in enumerate(ns)]
    return x, ws, bs


def assert_gemm_contract(out: torch.Tensor, eager: torch.Tensor, ref64: torch.Tensor, k: int) -> None:
    """The contract for one GEMM output (see the module docstring for the float32 bound)."""
    if out.dtype != torch.float32:
        assert_contract(out, eager, ref64)
        return
    assert out.shape == eager.shape
    slack = torch.finfo(torch.float32).eps * max(1.0, k ** 0.5)
    assert rel_err(out, ref64) <= rel_err(eager, ref64) + slack


def _check(out, x, ws, bs):
    eager = merged_gemm_ref(x, ws, bs)
    ref64 = merged_gemm_ref(x.double(), [w.double() for w in ws], [None if b is None else b.double() for b in bs])
    assert len(out) == len(ws)
    for o, e, r in zip(out, eager, ref64, strict=True):
        assert o.is_contiguous()
        assert_gemm_contract(o, e, r, x.shape[1])


def _configs(m: int) -> list[gc.Config]:
    bm = 16 if m <= 16 else 32
    cfgs = [None, gc.Config(bm, 16, 32, 1), gc.Config(bm, 32, 32, 3)]  # None: the default (heuristic) config
    if m <= 8:
        cfgs.append(gc.Config(gc._pow2_at_least(m), 16, 32, 2, dot=False))
    return cfgs


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("m,bias", [(1, False), (5, True), (17, False), (32, True)])
def test_merged_equals_separate_gemms(dtype, m, bias):
    """Each dtype x M in 1..32 (each dtype with and without bias) x every config kind."""
    x, ws, bs = _inputs(m, dtype, bias)
    for cfg in _configs(m):
        _check(gm.merged_gemm(x, ws, bs, cfg), x, ws, bs)


def test_strided_activation_and_weight_rows():
    """x read through strides (a column slice), weights with a row stride > K (slices of a wider buffer)."""
    x_full = torch.randn(3, 2 * K, dtype=torch.bfloat16)
    x = x_full[:, ::2]
    big = torch.randn(80, K + 8, dtype=torch.bfloat16)
    ws = [big[:40, :K], big[40:63, :K]]
    bs = [None, torch.randn(23, dtype=torch.bfloat16)]
    assert ws[0].stride() == (K + 8, 1)
    _check(gm.merged_gemm(x, ws, bs, gc.Config(16, 16, 32, 2)), x, ws, bs)


def test_four_weights_and_one():
    x, ws, bs = _inputs(2, torch.float16, True, ns=(17, 33, 8, 50))
    _check(gm.merged_gemm(x, ws, bs), x, ws, bs)
    _check(gm.merged_gemm(x, ws[:1], bs[:1]), x, ws[:1], bs[:1])


def test_limits_raise():
    x, ws, bs = _inputs(33, torch.bfloat16, False)
    with pytest.raises(ValueError, match="M <= 32"):
        gm.merged_gemm(x, ws, bs)
    x, ws, bs = _inputs(2, torch.bfloat16, False, ns=(8,) * 5)
    with pytest.raises(ValueError, match="1-4 weights"):
        gm.merged_gemm(x, ws, bs)


def test_check_reasons():
    base = dict(dtype=torch.bfloat16, weight_dtypes=(torch.bfloat16,) * 2, bias_dtypes=(None, None), m=1,
                m_upper=1, k=64, ns=(64, 32), weight_k_contiguous=(True, True), count=2)
    assert gm.check(base) is None
    assert "decode buckets" in gm.check({**base, "m_upper": 64})
    assert "decode buckets" in gm.check({**base, "m": None, "m_upper": None})
    assert "contiguous along K" in gm.check({**base, "weight_k_contiguous": (True, False)})
    assert "another dtype" in gm.check({**base, "weight_dtypes": (torch.bfloat16, torch.float32)})
    assert "float16/bfloat16/float32" in gm.check({**base, "dtype": torch.float64})


def test_configs_pruned_for_wave64_and_default_fills_the_gpu():
    """No config over 1024 threads at wave64 (ROCm), every tl.dot tile within the register budget found
    spill-free on sm_90 and gfx942; the default gives >= 2 programs per SM for k/v-sized GEMMs (split-K)."""
    for m in (1, 4, 32):
        for warp in (32, 64):
            for dt in (torch.bfloat16, torch.float32):
                cfgs = gc.candidates(m, (2048, 512, 512), 2048, dt, 132, warp)
                assert cfgs and all(c.num_warps * warp <= 1024 for c in cfgs)
                budget = gc.TILE_BUDGET // (2 if dt == torch.float32 else 1)
                assert all(c.block_m * c.block_n * c.block_k <= budget * c.num_warps for c in cfgs if c.dot)
    d = gc.default_config(1, (512, 512), 2048, torch.bfloat16, sms=132)
    assert sum(-(-n // d.block_n) for n in (512, 512)) * d.split_k >= 2 * 132
    big = gc.default_config(1, (8192, 8192), 2048, torch.bfloat16, sms=132)
    assert big.split_k == 1 and big.block_n == 64


def test_aot_cases_are_complete():
    """Every case names each kernel parameter once (signature) and gives every constexpr a value."""
    import inspect

    cases = gk.aot_cases()
    assert len({c["name"] for c in cases}) == len(cases)
    for c in cases:
        params = list(inspect.signature(c["fn"].fn).parameters)
        assert list(c["signature"]) == params, c["name"]
        const = [p for p, t in c["signature"].items() if t == "constexpr"]
        assert sorted(const) == sorted(c["constexprs"]), c["name"]
        assert c["num_warps"] * 64 <= 1024


# ------------------------------------------------------------------------------------ the GEMV tile (issue 19)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("m,bias", [(1, True), (3, False), (8, True)])
def test_gemv_tile_equals_separate_gemms(dtype, m, bias):
    """The late-reduction GEMV tile, M 1..8 (8 = its boundary), direct store and split-K, N and K not
    multiples of the block (K = 72 masked), with and without bias."""
    x, ws, bs = _inputs(m, dtype, bias)
    bm = gc._pow2_at_least(m)
    for cfg in (gc.Config(bm, 16, 32, 1, 4, 3, False, True), gc.Config(bm, 8, 16, 3, 4, 3, False, True)):
        _check(gm.merged_gemm(x, ws, bs, cfg), x, ws, bs)


def test_gemv_configs_pruned_and_bounded():
    """GEMV configs: only M <= 8, BLOCK_M covers M, <= 1024 threads at wave64, products per thread bounded."""
    assert gc.gemv_configs(9, (512,), 2048, 132, 32) == []
    for m in (1, 2, 5, 8):
        for warp in (32, 64):
            cfgs = gc.gemv_configs(m, (2048, 512, 512), 2048, 132, warp)
            assert cfgs
            for c in cfgs:
                assert c.late and not c.dot and c.block_m >= m and c.num_warps * warp <= 1024
                assert c.block_m * c.block_n * c.block_k <= gc.GEMV_ELEMS[1] * c.num_warps * warp
    assert any(c.late for c in gc.candidates(1, (2048, 512, 512), 2048, torch.bfloat16, 132, 32))
    assert not any(c.late for c in gc.candidates(16, (2048, 512, 512), 2048, torch.bfloat16, 132, 32))


# ------------------------------------------------------------------------ the full-K GEMV tile (issue 19)


@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16), ids=str)
@pytest.mark.parametrize("m,bias", [(1, True), (5, False), (8, True)])
def test_full_k_gemv_tile_equals_separate_gemms(dtype, m, bias):
    """The full-K GEMV tile (one weight load per program, M rows in registers), 16-bit dtypes, M 1..8:
    BLOCK_K = K padded (72 -> 128, masked), a 3-way K split (BLOCK_K 32, masked tail), an even-K case
    (K = 64), evict_first on/off, N not a multiple of BLOCK_N, with and without bias."""
    x, ws, bs = _inputs(m, dtype, bias)
    bm = gc._pow2_at_least(m)
    for cfg in (gc.Config(bm, 4, 128, 1, 4, 1, False, False, True, True),
                gc.Config(bm, 16, 32, 3, 4, 1, False, False, True, False)):
        _check(gm.merged_gemm(x, ws, bs, cfg), x, ws, bs)
    x, ws, bs = _inputs(m, dtype, bias, ns=(24, 7), k=64)
    _check(gm.merged_gemm(x, ws, bs, gc.Config(bm, 8, 64, 1, 4, 1, False, False, True, True)), x, ws, bs)


def test_full_k_gemv_configs_pruned_and_bounded():
    """Full-K configs: M <= 8 only, BLOCK_K * split covers K, <= 1024 threads at wave64, elements per thread
    within GEMV_FULL_ELEMS, splits only where the column blocks do not fill the SMs; a too-short BLOCK_K is
    refused rather than silently dropping K; the tuner's candidates include one."""
    assert gc.gemv_full_configs(9, (512,), 2048, 132, 32) == []
    for m in (1, 3, 8):
        for warp in (32, 64):
            for ns, k in (((2048, 512, 512), 2048), ((512,), 2048), ((2048, 1024, 1024), 1024)):
                cfgs = gc.gemv_full_configs(m, ns, k, 132, warp)
                assert cfgs
                for c in cfgs:
                    assert c.full and not c.dot and c.block_m >= m and c.num_warps * warp <= 1024
                    assert c.block_k * c.split_k >= k
                    e = c.block_n * c.block_k / (c.num_warps * warp)
                    assert gc.GEMV_FULL_ELEMS[0] <= e <= gc.GEMV_FULL_ELEMS[1]
                    assert c.split_k == 1 or gc._blocks(ns, c.block_n) < 132
    assert any(c.split_k > 1 for c in gc.gemv_full_configs(1, (512,), 2048, 132, 32))
    assert not any(c.split_k > 1 for c in gc.gemv_full_configs(1, (8192, 8192), 2048, 132, 32))
    assert any(c.full for c in gc.candidates(1, (2048, 512, 512), 2048, torch.bfloat16, 132, 32))
    assert not any(c.full for c in gc.candidates(16, (2048, 512, 512), 2048, torch.bfloat16, 132, 32))
    assert not any(c.full for c in gc.sweep_configs(1, (512,), 2048, torch.float32, 132, 32))
    x, ws, bs = _inputs(1, torch.bfloat16, False)
    with pytest.raises(ValueError, match="BLOCK_K"):
        gm.merged_gemm(x, ws, bs, gc.Config(1, 4, 32, 2, 4, 1, False, False, True))


def test_deep_dot_configs_fit_lds_and_run():
    """Deep-pipeline dot configs: M 8..32 and 16-bit only, within the 64 KiB gfx942 LDS for their stages,
    <= 1024 threads at wave64; one of them (interpreter: the stages are a GPU schedule only) is correct."""
    assert gc.deep_dot_configs(4, (512,), 2048, torch.bfloat16, 132, 32) == []
    assert gc.deep_dot_configs(16, (512,), 2048, torch.float32, 132, 32) == []
    for m in (8, 16, 32):
        cfgs = gc.deep_dot_configs(m, (2048, 512, 512), 2048, torch.bfloat16, 132, 64)
        assert cfgs and any(c.split_k == 1 for c in cfgs)
        for c in cfgs:
            assert c.dot and c.block_m >= m and c.num_warps * 64 <= 1024
            assert (c.block_m + c.block_n) * c.block_k * 2 * c.num_stages <= gc.STAGE_LDS_BYTES
    x, ws, bs = _inputs(12, torch.bfloat16, True)
    _check(gm.merged_gemm(x, ws, bs, gc.Config(16, 16, 32, 1, 4, 5, True)), x, ws, bs)


def test_measured_table_picks_and_refuses(tmp_path, monkeypatch):
    """The sweep's table: its config is looked up by the smallest measured M >= m; a bucket where ours lost
    to separate cuBLAS is refused by check() with the numbers (symbolic M: any loss up to its bound); a shape
    absent on a measured GPU is refused unless ROCM_FUSED_GEMM_UNMEASURED=1."""
    import json

    dev = "FakeGPU"
    entries = [dict(device=dev, m=m, k=64, ns=[64, 32], dtype="bfloat16", ours_us=o, separate_us=s,
                    config=dataclasses_asdict(gc.Config(gc._pow2_at_least(m), 8, 64, 1, 4, 3, False, True)))
               for m, o, s in ((1, 2.0, 5.0), (4, 3.0, 5.0), (8, 6.0, 5.0))]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"entries": entries}))
    monkeypatch.setenv("ROCM_FUSED_GEMM_TABLE", str(path))
    assert gt.table_config(3, 64, (64, 32), torch.bfloat16, dev).block_m == 4
    assert gt.table_config(9, 64, (64, 32), torch.bfloat16, dev) is None
    # a dot entry whose BLOCK_M does not cover M is no config for it (launch() would refuse it at run time)
    dot = dict(entries[0], m=32, config=dataclasses_asdict(gc.Config(16, 16, 64, 1, 4, 3, True)))
    path2 = tmp_path / "t_dot.json"
    path2.write_text(json.dumps({"entries": [dot]}))
    monkeypatch.setenv("ROCM_FUSED_GEMM_TABLE", str(path2))
    assert gt.table_config(16, 64, (64, 32), torch.bfloat16, dev).block_m == 16
    assert gt.table_config(20, 64, (64, 32), torch.bfloat16, dev) is None
    monkeypatch.setenv("ROCM_FUSED_GEMM_TABLE", str(path))
    base = dict(dtype=torch.bfloat16, k=64, ns=(64, 32), m=2, m_upper=2)
    assert gt.measured_loss(base, dev) is None
    assert "slower than separate cuBLAS" in gt.measured_loss({**base, "m": 7, "m_upper": 7}, dev)
    assert gt.measured_loss({**base, "m": None, "m_upper": 4}, dev) is None
    assert "M=8" in gt.measured_loss({**base, "m": None, "m_upper": 8}, dev)
    assert "shape not measured" in gt.measured_loss({**base, "ns": (64, 16)}, dev)
    assert "GPU not measured" in gt.measured_loss(base, "OtherGPU")  # a GPU absent from the table
    assert gt.measured_loss(base, None) is None  # CPU / interpreter
    monkeypatch.setenv("ROCM_FUSED_GEMM_UNMEASURED", "1")
    assert gt.measured_loss({**base, "ns": (64, 16)}, dev) is None


def dataclasses_asdict(c):
    import dataclasses

    return dataclasses.asdict(c)


def test_shipped_table_measures_qwen3_and_still_refuses_losses():
    """The shipped H200 table: Qwen3-0.6B q/k/v and gate/up are measured and taken at M = 1, 8, 32 (the
    full-K GEMV tile at M = 1); a Llama-3.2-1B merge it measured slower (gate/up at M = 4: 25.92 vs 23.27 us)
    is still refused, gate/up at M = 32 (session 4: 22.03 vs 24.36 us) is taken. Single GEMMs (session 4):
    Llama o_proj taken at M = 1 (4.27 vs 6.57 us), refused at M = 8 (6.98 vs 6.38) with the numbers; lm_head
    at M = 8 (131.69 vs 132.62: within SINGLE_MIN_GAIN) refused."""
    from rocm_inductor.ops.gemm_merge import SINGLE_SLOWER

    dev = "NVIDIA H200"
    if not gt.table_entries(2048, (2048,), torch.bfloat16, dev):
        pytest.skip("table without the H200 session-4 entries")
    for ns in ((2048, 1024, 1024), (3072, 3072)):
        for m in (1, 8, 32):
            spec = dict(dtype=torch.bfloat16, k=1024, ns=ns, m=m, m_upper=m)
            assert gt.measured_loss(spec, dev) is None, (ns, m)
        cfg = gt.table_config(1, 1024, ns, torch.bfloat16, dev)
        assert cfg.full and not cfg.dot and cfg.block_k * cfg.split_k >= 1024
    spec = dict(dtype=torch.bfloat16, k=2048, ns=(8192, 8192), m=4, m_upper=4)
    assert "slower than separate cuBLAS" in gt.measured_loss(spec, dev)
    assert gt.measured_loss(dict(spec, m=32, m_upper=32), dev) is None
    single = dict(dtype=torch.bfloat16, k=2048, ns=(2048,), count=1)
    assert gt.measured_single(dict(single, m=1, m_upper=1), dev) is None
    assert "6.98 vs cuBLAS 6.38" in gt.measured_single(dict(single, m=8, m_upper=8), dev)
    lm = dict(single, ns=(128256,), m=8, m_upper=8)
    assert gt.measured_single(lm, dev).startswith(SINGLE_SLOWER)
    assert gt.measured_single(dict(lm, m=1, m_upper=1), dev) is None
