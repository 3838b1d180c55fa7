"""Tuning decisions in the pass contract (``tuning/decide.py`` through ``passes/contract.py:run_pass``) and the
shipped H200 entries that replaced the measured GEMM tables.

CPU: the merged GEMM pass on a tiny q/k/v, its provider order given the reference provider (the CPU order is
empty), the device faked with ``device.override`` and the store rooted in ``tmp_path``.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from graph_utils import compile_run
from test_gemm_merge_pass import QKV

from rocm_inductor import policy
from rocm_inductor.platform import PlatformDispatch
from rocm_inductor.providers.triton import gemm_tables as gt
from rocm_inductor.providers.triton.gemm_configs import Config
from rocm_inductor.tuning import (
    decide,
    device,
    store,
    tables,
    tuner,  # noqa: F401  (imported first: a level-2 compile importing it would replace the hook the tests set)
)
from rocm_inductor.tuning.store import Decision, signature

MERGED = "rocm_fused.merged_gemm.default"
KEY = device.DeviceKey("FakeGPU", "sm_90", 132, "2.11.0+cu130", "3.6.0")
#: The q/k/v of QKV on x (2, 3, 64): M = 6, K = 64, N 40/20/20, float32.
SIG = signature("merged_gemm", {"dtype": torch.float32, "k": 64, "ns": (40, 20, 20), "m": 6})


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """A fake GPU, an empty store under tmp_path, no shipped entries, and the reference provider in the CPU
    order of merged_gemm (so the store, not a forced provider, decides)."""
    monkeypatch.setenv(store.ROOT_ENV, str(tmp_path / "store"))
    monkeypatch.setattr(store, "SHIPPED_DIR", tmp_path / "shipped")
    monkeypatch.setitem(policy.PROVIDER_ORDER["cpu"], "merged_gemm", ("reference",))
    monkeypatch.setattr(decide, "measure_hook", None)
    PlatformDispatch.reset_all()
    with device.override(KEY):
        yield store.default_store()
    PlatformDispatch.reset_all()


def _compile(level=1):
    torch.manual_seed(0)
    mod = QKV().eval()
    x = torch.randn(2, 3, 64)
    out, seen = compile_run(mod, x, options={"provider": None, "level": level, "passes": {"gemm_merge": True}})
    with torch.no_grad():
        for o, e in zip(out, mod(x), strict=True):
            torch.testing.assert_close(o, e, rtol=1e-4, atol=1e-4)
    (c,) = seen
    return c


def _raise(*a, **k):
    raise AssertionError("level 1 measured")


def test_level1_never_measures_and_reports_default(fake, monkeypatch):
    monkeypatch.setattr(decide, "measure_hook", _raise)
    c = _compile(level=1)
    assert c.after[MERGED] == 1
    (m,) = c.report.matches
    assert m.provenance == decide.DEFAULT_WHY
    assert "decision merged_gemm 6x64->40/20/20 [reference]: default (not measured on this device" in str(c.report)
    assert not list(fake.root.glob("*.json"))  # nothing recorded


@pytest.mark.slow
def test_level2_measures_a_missing_entry_once(fake, monkeypatch):
    calls = []

    def hook(ctx, pass_, graph, cand, params, choice):
        calls.append(pass_.name)
        return Decision("merged_gemm", SIG, "reference", None, {"reference": 3.0, "inductor": 4.0}, "measured")

    monkeypatch.setattr(decide, "measure_hook", hook)
    c = _compile(level=2)
    assert calls == ["gemm_merge"] and c.after[MERGED] == 1
    assert c.report.matches[0].provenance == "measured now on FakeGPU: reference 3.0us, inductor 4.0us"
    assert fake.lookup(KEY, "merged_gemm", SIG).winner == "reference"
    c = _compile(level=2)  # the store has it now
    assert calls == ["gemm_merge"]
    assert c.report.matches[0].provenance.startswith("store (measured on this device earlier): reference 3.0us")


def test_stored_inductor_winner_is_a_near_miss(fake):
    fake.record(KEY, Decision("merged_gemm", SIG, "inductor", None, {"reference": 7.1, "inductor": 6.6},
                              "measured"))
    c = _compile(level=1)
    assert c.after.get(MERGED, 0) == 0 and not c.report.matches
    (n,) = [n for n in c.report.near_misses if n.pass_name == "gemm_merge"]
    assert n.reason == "measured slower than Inductor on FakeGPU (store: 7.1us vs 6.6us)"


def test_shipped_entry_provenance_names_gpu_and_evidence(fake):
    fake_ship = Decision("merged_gemm", SIG, "reference", None, {"reference": 2.0, "inductor": 4.0},
                         "shipped:FakeGPU", "benchmarks/results/runs/x.csv, run r1")
    store.SHIPPED_DIR.mkdir()
    (store.SHIPPED_DIR / "fake.json").write_text(json.dumps(
        {"format": store.FORMAT, "device": {"name": "FakeGPU", "arch": "sm_90"}, "entries": [fake_ship.to_json()]}))
    c = _compile(level=1)
    assert c.report.matches[0].provenance == ("shipped:FakeGPU (benchmarks/results/runs/x.csv, run r1): "
                                              "reference 2.0us, inductor 4.0us")


def test_a_forced_provider_is_not_overruled_by_the_store(fake):
    fake.record(KEY, Decision("merged_gemm", SIG, "inductor", None, {"inductor": 1.0}, "measured"))
    torch.manual_seed(0)
    _, seen = compile_run(QKV().eval(), torch.randn(2, 3, 64), options={"passes": {"gemm_merge": True}})
    assert seen[0].after[MERGED] == 1 and seen[0].report.matches[0].provenance == ""


# -- the shipped H200 entries reproduce the old tables' choices ------------------------------------------------

H200 = "NVIDIA H200"
BF = torch.bfloat16


def test_shipped_h200_reproduces_todays_gemm_choices():
    """Values of the removed gemm_merge_tuned.json / norm_gemm_tuned.json (H200, 2026-12-01/02) and the choices
    the provider made from them."""
    assert gt.table_config(1, 2048, (2048, 512, 512), BF, H200) is not None
    assert gt.table_config(3, 2048, (2048, 512, 512), BF, H200) == Config(16, 64, 128, 8, 8, 3, True, False)
    spec = {"dtype": BF, "k": 2048, "ns": (8192, 8192)}
    assert gt.measured_loss({**spec, "m": 1, "m_upper": 1}, H200) is None  # gate/up at M = 1: 18.52 vs 23.41
    assert "M=4: 25.9 vs 23.3 us" in gt.measured_loss({**spec, "m": 4, "m_upper": 4}, H200)
    assert gt.measured_loss({**spec, "m": None, "m_upper": 8}, H200) is not None  # the M = 4 loss is in the bucket
    assert "shape not measured" in gt.measured_loss({**spec, "ns": (8192, 4096), "m": 1}, H200)
    assert "GPU not measured" in gt.measured_loss({**spec, "m": 1}, "NVIDIA A100-SXM4-80GB")
    o_proj = {"dtype": BF, "k": 2048, "ns": (2048,), "count": 1}
    assert gt.measured_single({**o_proj, "m": 1}, H200) is None  # 4.27 vs 6.57
    assert "6.98 vs cuBLAS 6.38" in gt.measured_single({**o_proj, "m": 8}, H200)
    lm = {"dtype": BF, "k": 2048, "ns": (128256,), "count": 1, "m": 8}
    assert "131.69 vs cuBLAS 132.62" in gt.measured_single(lm, H200)  # faster, but by < 3%
    tile = gt.prologue_config(1, 1024, (2048, 1024, 1024), BF, H200)
    assert (tile.block_n, tile.num_warps, tile.full) == (4, 2, True)  # Qwen3 q/k/v re-measured n4 w2
    assert gt.prologue_config(8, 1024, (2048, 1024, 1024), BF, H200) is None  # M = 1 only


def test_store_winners_agree_with_the_table_rules():
    """Each shipped merged-GEMM decision's winner is what measured_loss / measured_single decide for its row."""
    h200 = device.DeviceKey(H200, "sm_90", 132, "x", "y")
    for d in store.DecisionStore(None).entries(h200, "merged_gemm"):
        r = tables.row(d, H200)
        spec = {"dtype": getattr(torch, r["dtype"]), "k": r["k"], "ns": tuple(r["ns"]), "m": r["m"],
                "m_upper": r["m"], "count": len(r["ns"])}
        why = gt.measured_single(spec, H200) if len(r["ns"]) == 1 else gt.measured_loss(spec, H200)
        assert (why is None) == (d.winner == "triton"), (d.signature, why)


def test_own_store_rows_join_the_table(fake):
    """A level-2 merged-GEMM decision recorded for this device is a row of the table the provider reads."""
    d = tables.gemm_decision({"m": 2, "k": 64, "ns": [64, 32], "dtype": "bfloat16", "config": {"block_m": 2},
                              "ours_us": 1.0, "separate_us": 2.0}, "measured")
    fake.record(KEY, d)
    (row,) = gt.table_entries(64, (64, 32), BF, "FakeGPU")
    assert (row["m"], row["ours_us"], row["separate_us"]) == (2, 1.0, 2.0)


def test_converter_round_trips_the_tables(tmp_path, monkeypatch):
    """shipped entries -> rows (the old tables' form) -> scripts/convert_tuned_tables.py -> the same entries."""
    import pathlib

    monkeypatch.syspath_prepend(str(pathlib.Path(__file__).parent.parent / "scripts"))
    import convert_tuned_tables as conv

    shipped = json.loads((store.SHIPPED_DIR / "nvidia_h200.json").read_text())
    decisions = [Decision.from_json(e) for e in shipped["entries"]]
    gemm = {"source": shipped["about"][0],
            "entries": tables.rows([d for d in decisions if d.op == tables.GEMM_OP], H200)}
    norm = {"about": shipped["about"][1],
            "entries": tables.rows([d for d in decisions if d.op == tables.NORM_OP], H200)}
    assert len(gemm["entries"]) == 38 and len(norm["entries"]) == 4
    (tmp_path / "g.json").write_text(json.dumps(gemm))
    (tmp_path / "n.json").write_text(json.dumps(norm))
    conv.main(["--gemm", str(tmp_path / "g.json"), "--norm", str(tmp_path / "n.json"), "--out",
               str(tmp_path / "out.json")])
    assert json.loads((tmp_path / "out.json").read_text()) == shipped
    row = next(r for r in gemm["entries"] if r["group"] == "llama k_proj" and r["m"] == 1)
    assert row == {"device": H200, "m": 1, "k": 2048, "ns": [512], "dtype": "bfloat16",
                   "config": {"block_m": 1, "block_n": 8, "block_k": 512, "split_k": 4, "num_warps": 4,
                              "num_stages": 3, "dot": False, "late": True},
                   "ours_us": 4.45, "separate_us": 5.9, "concat_us": "", "floor_us": 0.5, "group": "llama k_proj",
                   "winner": "triton"}
    assert dataclasses.asdict(decisions[0])["source"] == "shipped:NVIDIA H200"
