"""benchmarks/results_report.py and run_log.py: RESULTS.md and the fixed-column CSVs regenerate from the long files."""

from __future__ import annotations

import csv
import importlib
import shutil
import sys

from bench_utils import BENCH

# imported by name (their dataclasses need their modules in sys.modules), as results_report imports run_log
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))
report = importlib.import_module("results_report")
run_log = importlib.import_module("run_log")

#: The fixed-column CSVs outside checks read: name -> exact header.
FIXED = {"decode_attention.csv": ["model", "max_cache_len", "batch", "config", "step_us"],
         "sampling.csv": ["vocab", "batch", "filters", "config", "us"],
         "decode_gemm.csv": ["model", "batch", "config", "step_us"]}


def test_committed_files_are_what_the_data_gives():
    assert report.main(["--check"]) == 0


def test_fixed_csvs_keep_their_columns():
    for name, header in FIXED.items():
        with open(BENCH / "results" / name, newline="") as f:
            assert next(csv.reader(f)) == header, name
        assert list(report.VIEWS[name].columns) == header


def test_every_topic_file_starts_with_the_run_columns():
    data = report.Data()
    for topic in report.TOPICS:
        assert data.header[topic][:len(run_log.META)] == list(run_log.META), topic
        assert data.rows[topic], topic


def test_a_new_run_supersedes_and_keeps_history(tmp_path):
    runs = tmp_path / "runs"
    shutil.copytree(BENCH / "results" / "runs", runs)
    meta = {"gpu": report.VIEW_GPU, "torch": "t", "triton": "tr", "transformers": "tf", "flashinfer": "none"}
    rid = run_log.append_run("decode_gemm", [{"model": "llama", "batch": 1, "config": "inductor", "step_us": "1.5"}],
                             script="s", what="w", run_id="9999-new", date="9999-01-01", meta=meta, runs_dir=runs)
    data = report.Data(runs)
    cur = [r for r in data.select("decode_gemm", "current", {"model": ("llama",), "batch": ("1",),
                                                             "config": ("inductor",)})]
    assert [(r["run_id"], r["step_us"]) for r in cur] == [(rid, "1.5")]
    old = data.select("decode_gemm", "history", {"model": ("llama",), "batch": ("1",), "config": ("inductor",)})
    assert "1581.1" in {r["step_us"] for r in old}
    view = report.build_view(data, report.VIEWS["decode_gemm.csv"])
    assert "llama,1,inductor,1.5\n" in view and "llama,1,inductor,1581.1\n" not in view


def test_a_run_on_another_gpu_supersedes_nothing(tmp_path):
    """An H100 run of a configuration is current for the H100 only: the H200's row stays current and stays the
    view's, and both GPUs' rows reach a notes table."""
    runs = tmp_path / "runs"
    shutil.copytree(BENCH / "results" / "runs", runs)
    meta = {"gpu": "NVIDIA H100 80GB HBM3", "torch": "t", "triton": "tr", "transformers": "tf", "flashinfer": "none"}
    rid = run_log.append_run("decode_gemm", [{"model": "llama", "batch": 1, "config": "inductor", "step_us": "2.5"}],
                             script="s", what="w", run_id="9999-h100", date="9999-01-01", meta=meta, runs_dir=runs)
    data = report.Data(runs)
    key = {"model": ("llama",), "batch": ("1",), "config": ("inductor",)}
    cur = data.select("decode_gemm", "current", key)
    assert sorted(r["gpu"] for r in cur) == sorted(["NVIDIA H100 80GB HBM3", report.VIEW_GPU])
    assert rid in {r["run_id"] for r in cur}
    before = report.build_view(report.Data(), report.VIEWS["decode_gemm.csv"])
    assert report.build_view(data, report.VIEWS["decode_gemm.csv"]) == before
    assert "llama,1,inductor,2.5" not in before
