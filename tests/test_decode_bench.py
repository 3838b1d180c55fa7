"""CPU smoke test of benchmarks/e2e/decode.py: the end-to-end script runs and writes its CSV rows.

Its compiles (Inductor's and ours) run their post-grad graphs eagerly (``graph_run_eagerly``: the passes, rewrites
and tokens are a real compile's; the step times it checks are only > 0; Llama compiles end to end in
test_attention_models)."""

from __future__ import annotations

import csv

import pytest
from bench_utils import load_bench
from graph_utils import graph_run_eagerly


@pytest.mark.slow
def test_decode_bench_tiny_cpu(tmp_path, capsys):
    """One tiny Llama, one decode bucket, one timed step, no CUDA graphs: every planned row is written, with
    step times, the compiled sampler and eager-equal greedy tokens (fp32 on CPU)."""
    decode = load_bench("e2e/decode.py")
    with graph_run_eagerly():
        rc = decode.main(["--tiny", "--device", "cpu", "--models", "llama", "--buckets", "2", "--prefill", "0",
                          "--configs", "eager,rocm_fused_l1", "--layers", "1", "--rounds", "1", "--reps", "1",
                          "--greedy-steps", "2", "--provider", "reference", "--out", str(tmp_path)])
    assert rc == 0
    with open(tmp_path / "decode_llama.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["model"], r["bucket"], r["config"]) for r in rows] == [
        ("llama", "decode B=2", c) for c in ("eager", "inductor", "rocm_fused_l1")]
    for r in rows:
        assert r["status"] == "ok", r
        assert float(r["step_us"]) > 0 and float(r["sample_step_us"]) > 0
        assert r["greedy_equal"] == "2/2" and r["argmax_equal"] == "4/4" and r["logits_ok"] == "True", r
    l1 = next(r for r in rows if r["config"] == "rocm_fused_l1")
    assert "fused_add_rms_norm[reference]" in l1["rewrites"] and l1["sampler"] == "compiled: rocm_fused::sample"
    assert float(next(r for r in rows if r["config"] == "inductor")["vs_inductor"]) == 1.0
    assert next(r for r in rows if r["config"] == "inductor")["sampler"] == "compiled"
    assert (tmp_path / "decode_llama.md").exists()
    assert "| llama | decode B=2 | rocm_fused_l1 |" in capsys.readouterr().out


def test_decode_plan_orders_level2_last_and_always_runs_inductor():
    """The budget guard drops the tail: level 2 (slowest compiles) comes after every other run."""
    decode = load_bench("e2e/decode.py")
    args = decode.parse_args(["--models", "llama", "--buckets", "1,8", "--prefill", "512",
                              "--configs", "rocm_fused_l2,eager"])
    runs = [(c, b) for _, c, b, _, _ in decode.plan(args)]
    assert runs == [("eager", "decode B=1"), ("inductor", "decode B=1"), ("eager", "decode B=8"),
                    ("inductor", "decode B=8"), ("eager", "prefill 512"), ("inductor", "prefill 512"),
                    ("rocm_fused_l2", "decode B=1"), ("rocm_fused_l2", "decode B=8"),
                    ("rocm_fused_l2", "prefill 512")]
    with pytest.raises(SystemExit):
        decode.plan(decode.parse_args(["--configs", "inductr"]))


def test_decode_step_bench_cells():
    """benchmarks/e2e/decode_step.py's cells follow --models / --batches / --cache-lens, then the --also cells of
    the listed models (the script itself is smoke-run with ``--tiny --device cpu`` before a device call)."""
    bench = load_bench("e2e/decode_step.py")
    args = bench.parse_args(["--models", "llama,qwen3", "--batches", "1,8", "--also", "llama:32:4096,gemma:1:64"])
    assert bench.cells(args) == [("llama", 1, 1024), ("llama", 8, 1024), ("qwen3", 1, 1024), ("qwen3", 8, 1024),
                                 ("llama", 32, 4096)]
    assert bench.options_of("x", {"x": {"passes": {"rope": False}}}, True) == {
        "level": 1, "cudagraphs": True, "passes": {"rope": False}}
    assert bench.options_of("inductor", {}, True) is None
    # "env" is not an option: the config's environment (a launch-time kernel switch), set around its run
    one = {"x": {"env": {"ROCM_FUSED_ATTN_ONE_LAUNCH": "1"}}}
    assert bench.options_of("x", one, True) == {"level": 1, "cudagraphs": True}
    import os

    os.environ.pop("ROCM_FUSED_TEST_ENV", None)
    with bench.env_set({"ROCM_FUSED_TEST_ENV": "1"}):
        assert os.environ["ROCM_FUSED_TEST_ENV"] == "1"
    assert "ROCM_FUSED_TEST_ENV" not in os.environ
