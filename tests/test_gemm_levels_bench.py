"""benchmarks/e2e/bench_gemm_levels.py without a GPU: the run plan, the per-bucket summary and --merge."""

from __future__ import annotations

import csv

from bench_utils import load_bench

bench = load_bench("e2e/bench_gemm_levels.py")


def _row(config, bucket, step, compile_s, status="ok"):
    return dict(config=config, bucket=bucket, status=status, step_us=step, compile_s=compile_s, spread_us=1.0,
                autotuned=0, aten_only=0, gemms_seen=0)


def test_plan_runs_restricted_configs_only_on_their_buckets():
    args = bench.parse_args(["--buckets", "1,8", "--autotune-buckets", "8", "--nocdt-buckets", "1",
                             "--prefill", "512", "--configs", "inductor,rocm_fused_l2,rocm_fused_l2_nocdt,inductor_ma"])
    assert bench.plan(args) == [
        ("inductor", "decode M=1", 1, 1), ("rocm_fused_l2", "decode M=1", 1, 1),
        ("rocm_fused_l2_nocdt", "decode M=1", 1, 1),
        ("inductor", "decode M=8", 8, 1), ("rocm_fused_l2", "decode M=8", 8, 1), ("inductor_ma", "decode M=8", 8, 1),
        ("inductor", "prefill M=512", 1, 512), ("rocm_fused_l2", "prefill M=512", 1, 512)]
    prefill_only = bench.parse_args(["--buckets", ",", "--prefill", "512", "--autotune-prefill",
                                     "--configs", "inductor,inductor_ma"])
    assert bench.plan(prefill_only) == [("inductor", "prefill M=512", 1, 512), ("inductor_ma", "prefill M=512", 1, 512)]


def test_summary_ratios_use_the_mean_of_repeated_runs():
    rows = [_row("inductor", "decode M=1", 1500.0, 20.0), _row("rocm_fused_l2", "decode M=1", 1200.0, 40.0),
            _row("rocm_fused_l2", "decode M=1", 1300.0, 60.0), _row("inductor_ma", "decode M=1", 1250.0, 100.0),
            _row("inductor_ma", "decode M=2", None, None, status="skipped (budget)")]
    lines = bench.summary(rows)
    (m1,) = [line for line in lines if line.startswith("| decode M=1")]
    assert "1200 / 40.0; 1300 / 60.0" in m1
    assert "1.00x, 2.00x" in m1  # max-autotune vs mean L2: step 1250 / 1250, compile 100 / 50
    assert m1.endswith("| 1.20x |")  # Inductor 1500 / mean L2 1250
    assert not [line for line in lines if "M=2" in line]  # a skipped run has no cells


def test_merge_writes_one_table_with_run_tags(tmp_path):
    for tag, rows in (("a", [_row("inductor", "decode M=4", 1800.0, 20.0)]),
                      ("b", [_row("rocm_fused_l2", "decode M=4", 1790.0, 30.0)])):
        bench.write(rows, bench.parse_args(["--out", str(tmp_path), "--tag", tag]), quiet=True)
    assert bench.main(["--merge", str(tmp_path / "gemm_levels_a.csv"), str(tmp_path / "gemm_levels_b.csv"),
                       "--out", str(tmp_path / "m")]) == 0
    with open(tmp_path / "m" / "gemm_levels.csv", newline="") as f:
        merged = list(csv.DictReader(f))
    assert [(r["run"], r["config"]) for r in merged] == [("a", "inductor"), ("b", "rocm_fused_l2")]
    text = (tmp_path / "m" / "gemm_levels.md").read_text()
    assert "| decode M=4 | 1800 / 20.0 | 1790 / 30.0 | – | 1.01x |" in text
