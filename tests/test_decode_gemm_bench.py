"""CPU smoke test of benchmarks/ops/bench_decode_gemm.py: both parts run and write their files."""

from __future__ import annotations

import csv

import pytest
from bench_utils import load_bench


@pytest.mark.slow
def test_bench_decode_gemm_tiny_cpu(tmp_path):
    """Tiny shapes, our kernel under the interpreter, a 1-layer Llama step compiled once with gemm_merge on:
    the per-layer table has every group, the step CSV exactly the four columns, and the step merged q/k/v and
    gate/up."""
    bench = load_bench("ops/bench_decode_gemm.py")
    rc = bench.main(["--tiny", "--device", "cpu", "--models", "llama", "--buckets", "2", "--configs", "rocm_fused",
                     "--reps", "1", "--rounds", "1", "--out", str(tmp_path)])
    assert rc == 0
    with open(tmp_path / "decode_gemm_layer.csv", newline="") as f:
        layer = list(csv.DictReader(f))
    assert [r["group"] for r in layer] == ["qkv", "gate_up", "k_proj", "lm_head"]
    assert all(float(r["ours_us"]) > 0 and float(r["max_abs_diff"]) < 1e-4 for r in layer)
    assert layer[0]["concat_cublas_us"] and not layer[2]["concat_cublas_us"]
    with open(tmp_path / "decode_gemm.csv", newline="") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
    assert tuple(reader.fieldnames) == ("model", "batch", "config", "step_us")
    assert [(r["model"], r["batch"], r["config"]) for r in rows] == [("llama", "2", "rocm_fused")]
    steps = (tmp_path / "decode_gemm_steps.md").read_text()
    assert "3 GEMMs merged x1" in steps and "2 GEMMs merged x1" in steps


def test_plan_puts_batch_one_first_and_freezing_last():
    bench = load_bench("ops/bench_decode_gemm.py")
    args = bench.parse_args(["--models", "llama,qwen3", "--buckets", "1,8"])
    assert bench.plan(args) == [
        ("llama", 1, "inductor"), ("llama", 1, "rocm_fused"), ("llama", 1, "inductor_freezing"),
        ("qwen3", 1, "inductor"), ("qwen3", 1, "rocm_fused"), ("qwen3", 1, "inductor_freezing"),
        ("llama", 8, "inductor"), ("llama", 8, "rocm_fused"), ("qwen3", 8, "inductor"), ("qwen3", 8, "rocm_fused"),
        ("llama", 8, "inductor_freezing"), ("qwen3", 8, "inductor_freezing")]
    with pytest.raises(SystemExit):
        bench.plan(bench.parse_args(["--configs", "inductr"]))


def test_read_floor_tiny_cpu(tmp_path):
    """benchmarks/ops/bench_read_floor.py on CPU (interpreter): the pure-load kernel's per-program sums add up to
    the buffer's int64 sum (checked inside), every method has a row."""
    bench = load_bench("ops/bench_read_floor.py")
    assert bench.main(["--device", "cpu", "--tiny", "--out", str(tmp_path)]) == 0
    with open(tmp_path / "decode_gemm_read_floor.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert {r["method"] for r in rows} == {"floor (copy bandwidth)", "triton", "torch_sum", "half_copy"}
    assert all(float(r["us"]) > 0 for r in rows)
    with open(tmp_path / "decode_gemm_pdl_floor.csv", newline="") as f:  # the PDL table: "off" only on CPU
        pdl = list(csv.DictReader(f))
    assert {r["method"] for r in pdl} == {"empty kernel", "one-element read", "triton"}
    assert {r["pdl"] for r in pdl} == {"off"}


def test_plan_orders_the_pdl_configs():
    """Inductor's own PDL configs: rocm_fused_pdl_all right after rocm_fused, inductor_pdl after it."""
    bench = load_bench("ops/bench_decode_gemm.py")
    args = bench.parse_args(["--models", "llama", "--buckets", "1",
                             "--configs", "inductor_pdl,rocm_fused_pdl_all,rocm_fused,inductor"])
    assert bench.plan(args) == [("llama", 1, "inductor"), ("llama", 1, "rocm_fused"),
                                ("llama", 1, "rocm_fused_pdl_all"), ("llama", 1, "inductor_pdl")]


def test_inductor_has_pdl_reads_the_config_field():
    """The PDL configs are skipped where Inductor's config has no ``triton.enable_pdl``."""
    from types import SimpleNamespace

    bench = load_bench("ops/bench_decode_gemm.py")
    assert bench.inductor_has_pdl(SimpleNamespace(triton=SimpleNamespace(enable_pdl=False)))
    assert not bench.inductor_has_pdl(SimpleNamespace(triton=SimpleNamespace()))
    assert not bench.inductor_has_pdl(SimpleNamespace())


@pytest.mark.slow
def test_ipdl_pair_tiny_cpu(tmp_path):
    """benchmarks/ops/bench_ipdl_pair.py on CPU (interpreter, tiny shape): every row is written; PDL is unavailable
    there, so the numerics row (Inductor's PDL codegen is a no-op off CUDA) says bitwise equal."""
    bench = load_bench("ops/bench_ipdl_pair.py")
    assert bench.main(["--device", "cpu", "--tiny", "--out", str(tmp_path)]) == 0
    with open(tmp_path / "decode_gemm_ipdl.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    cases = [r["case"] for r in rows]
    assert cases.count("b2b") == 2 and "norm alone" in cases and "pair" in cases
    if bench.inductor_has_pdl():
        assert cases.count("pair") == 4 and "bitwise equal to PDL off: True" in rows[0]["note"]


@pytest.mark.parametrize("config,norm_gemm", [("rocm_fused_all", False), ("rocm_fused_all_norm_gemm", True)])
def test_all_configs_differ_only_by_the_norm_gemm_fold(config, norm_gemm, monkeypatch):
    """``rocm_fused_all`` is the baseline of ``rocm_fused_all_norm_gemm``: with norm_gemm on by default on CUDA
    (policy.PASS_DEFAULTS) the baseline must switch it off by name, or the two configs compile the same step."""
    import torch

    bench = load_bench("ops/bench_decode_gemm.py")
    seen = {}
    monkeypatch.setattr(torch, "compile", lambda step, **kw: seen.update(kw))
    bench.compile_step(config, None, cuda=True, tiny=True)
    assert seen["options"]["passes"] == {"gemm_merge": True, "norm_gemm": norm_gemm}  # the rest: platform defaults
