"""CPU smoke test of benchmarks/e2e/bench_decode_attention.py: plan order, CSV columns, rewrite check.

The tiny run's compiles (Inductor's and ours) run their post-grad graphs eagerly (``graph_run_eagerly``: the
passes and rewrites are a real compile's; the step times it checks are only > 0; Llama compiles end to end in
test_attention_models)."""

from __future__ import annotations

import csv

import pytest
from bench_utils import load_bench
from graph_utils import graph_run_eagerly


def test_plan_priority():
    """Llama at the first cache length (B = 1, 8, 32) first, then Llama at 4096, then the other models."""
    bench = load_bench("e2e/bench_decode_attention.py")
    runs = bench.plan(bench.parse_args([]))
    assert runs[:6] == [("llama", 1024, b, c) for b in (1, 8, 32) for c in ("inductor", "rocm_fused")]
    assert [r[:2] for r in runs[6::6]] == [("llama", 4096), ("qwen3", 1024), ("gemma", 1024), ("qwen3", 4096),
                                           ("gemma", 4096)]
    assert len(runs) == 36
    with pytest.raises(SystemExit):
        bench.plan(bench.parse_args(["--configs", "inductr"]))


@pytest.mark.slow
def test_bench_tiny_cpu(tmp_path, capsys):
    """One 1-layer tiny Llama bucket: both configs timed, the CSV has exactly the issue's columns, the
    attention pass rewrote the layer (reference provider), and the exit code is 0."""
    bench = load_bench("e2e/bench_decode_attention.py")
    with graph_run_eagerly():
        rc = bench.main(["--tiny", "--device", "cpu", "--models", "llama", "--max-cache-len", "32", "--batches",
                         "2", "--layers", "1", "--provider", "reference", "--rounds", "1", "--reps", "1",
                         "--out", str(tmp_path)])
    assert rc == 0
    with open(tmp_path / "decode_attention.csv", newline="") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
    assert reader.fieldnames == ["model", "max_cache_len", "batch", "config", "step_us"]
    assert [(r["model"], r["max_cache_len"], r["batch"], r["config"]) for r in rows] == [
        ("llama", "32", "2", "inductor"), ("llama", "32", "2", "rocm_fused")]
    assert all(float(r["step_us"]) > 0 for r in rows)
    md = (tmp_path / "decode_attention.md").read_text()
    assert "| 1/1[reference] |" in md and "ATTENTION NOT" not in md
    assert "| llama | 32 | 2 | rocm_fused |" in capsys.readouterr().out
