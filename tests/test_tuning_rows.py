"""The GEMM provider reads the tuning store's merged GEMM decisions back (``providers/triton/gemm_tables.py``,
issue 30): a store row's winner decides it (``lost``), a single GEMM also needs ``SINGLE_MIN_GAIN`` on its times
(a store written before the measured singles needed it), and a symbolic-M bucket, which has no row, is decided by
this device's own decision for it, so level 1 applies what level 2 measured."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from test_tuning_tuner import FAKE

from rocm_inductor.providers.triton import gemm_configs as gc
from rocm_inductor.providers.triton import gemm_tables as gt
from rocm_inductor.tuning import device, store, tables, tuner, worker
from rocm_inductor.tuning.store import Decision

CFG = dataclasses.asdict(gc.Config(16, 16, 64, 1, 4, 3, True))


@pytest.fixture
def own(monkeypatch, tmp_path):
    """An empty store without shipped entries on the fake device; yields it."""
    monkeypatch.setenv(store.ROOT_ENV, str(tmp_path / "store"))
    monkeypatch.setenv(store.SHIPPED_ENV, "0")
    monkeypatch.delenv("ROCM_FUSED_GEMM_TABLE", raising=False)
    with device.override(FAKE):
        yield store.default_store()


def _measured(spec, times, **kw):
    res = worker.Result("k", times, configs={k: CFG for k in times if k.startswith("triton")})
    return tuner.decision_of("merged_gemm", store.signature("merged_gemm", spec), res, 3, 0, **kw)


def test_a_store_rows_winner_decides_it_and_a_raw_rows_times_do():
    """A tied merge measured 0.2% slower but recorded as the winner is not refused when read back; a winner
    other than Triton (the reference provider of the CPU tests) is Triton's loss; a table file's raw row (no
    winner) is compared by time; a single's margin applies to its times too."""
    d = Decision("merged_gemm", "dtype=bfloat16,k=2048,m=8,ns=8192/8192", "triton", {"block_m": 16},
                 {"triton": 27.35, "inductor": 27.3}, "measured", "tie")
    row = tables.row(d, "GPU")
    assert row["winner"] == "triton" and not gt.lost(row, "ours_us", "separate_us")
    for w in ("inductor", "reference"):
        assert gt.lost(tables.row(dataclasses.replace(d, winner=w, times_us={"triton": 12.0, "inductor": 10.0}),
                                  "GPU"), "ours_us", "separate_us")
    raw = {k: v for k, v in row.items() if k != "winner"}
    assert gt.lost(raw, "ours_us", "separate_us")
    assert not gt.lost({**raw, "ours_us": 27.0}, "ours_us", "separate_us")
    assert gt.lost({**raw, "ours_us": 27.0}, "ours_us", "separate_us", tables.SINGLE_MIN_GAIN)


def test_a_single_won_by_two_percent_in_an_older_store_is_still_refused(own):
    """Before the measured singles needed ``SINGLE_MIN_GAIN`` (3%) the tuner stored a 2% win as the winner; read
    back, it is refused as the shipped singles are."""
    spec = dict(dtype=torch.float32, k=64, ns=(40,), count=1, m=8, m_upper=8)
    own.record(FAKE, Decision("merged_gemm", store.signature("merged_gemm", spec), "triton", CFG,
                              {"triton": 4.9, "inductor": 5.0}, "measured", "window"))
    assert _measured(spec, {"inductor": 5.0, "triton:x": 4.9}, margin=tables.SINGLE_MIN_GAIN).winner == "inductor"
    assert gt.measured_single(spec, device=FAKE.name) is not None
    own.record(FAKE, Decision("merged_gemm", store.signature("merged_gemm", spec), "triton", CFG,
                              {"triton": 4.5, "inductor": 5.0}, "measured", "window"))
    gt._TABLE_CACHE.clear()
    assert gt.measured_single(spec, device=FAKE.name) is None  # 10% faster: taken


def test_a_symbolic_m_bucket_is_decided_by_its_own_store_decision(own):
    """A symbolic-M bucket has no row: without a decision it is "not measured"; with this device's level-2
    decision (a tie, which goes to the merge) it is taken, and with a loss it is refused, so a later level-1
    compile applies what level 2 measured."""
    spec = dict(dtype=torch.bfloat16, k=64, ns=(64, 32), m=None, m_upper=8, count=2)
    assert "not measured" in str(gt.measured_loss(spec, device=FAKE.name))
    d = _measured(spec, {"inductor": 10.0, "triton:x": 10.05}, tie_band=tuner.MIN_GAIN)
    assert d.winner == "triton"
    own.record(FAKE, d)
    assert gt.measured_loss(spec, device=FAKE.name) is None
    own.record(FAKE, _measured(spec, {"inductor": 10.0, "triton:x": 12.0}, tie_band=tuner.MIN_GAIN))
    assert "measured slower" in str(gt.measured_loss(spec, device=FAKE.name))
    single = dict(dtype=torch.bfloat16, k=64, ns=(64,), m=None, m_upper=8, count=1)
    assert "not measured" in str(gt.measured_single(single, device=FAKE.name))
    own.record(FAKE, _measured(single, {"inductor": 10.0, "triton:x": 9.0}, margin=tables.SINGLE_MIN_GAIN))
    assert gt.measured_single(single, device=FAKE.name) is None


def test_a_single_short_of_its_margin_says_so():
    """A single GEMM faster than cuBLAS by less than ``SINGLE_MIN_GAIN`` stays with cuBLAS, and the evidence says
    why (not "slower")."""
    d = tuner.decision_of("merged_gemm", "s", worker.Result("k", {"inductor": 10.0, "triton": 9.75}), 3, 0,
                          margin=tables.SINGLE_MIN_GAIN)
    assert d.winner == "inductor" and "faster by 2.5%, less than the 3% margin" in d.evidence


def test_a_symbolic_m_merge_measured_at_level2_is_applied_at_level1(monkeypatch, own):
    """End to end through ``decide``: level 2 takes the measured (tied) symbolic-M merge with Triton; a later
    level-1 compile reading the same store chooses Triton too instead of refusing it as "not measured"."""
    from rocm_inductor import policy
    from rocm_inductor.options import parse_options
    from rocm_inductor.passes.context import PassContext
    from rocm_inductor.platform import PlatformDispatch
    from rocm_inductor.tuning import decide

    class Pass:
        tuning_op, ops = "merged_gemm", ("merged_gemm",)

        def tuning_spec(self, *a):
            return spec

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setitem(policy.PROVIDER_ORDER["cpu"], "merged_gemm", ("triton",))
    monkeypatch.setattr(gt, "_device_name", lambda: FAKE.name)  # the GPU the spec's tensors live on
    spec = dict(dtype=torch.bfloat16, k=64, ns=(64, 32), m=None, m_upper=8, count=2,
                weight_k_contiguous=(True, True), device_type="cuda")
    measured = _measured(spec, {"inductor": 27.0, "triton:x": 27.1}, tie_band=tuner.tie_band("merged_gemm", spec,
                                                                                             "cuda"))
    monkeypatch.setattr(decide, "measure_hook", lambda *a: measured)
    PlatformDispatch.reset_all()
    try:
        ctx2 = PassContext(parse_options({"level": 2}), report=None)
        ctx2.measuring = True
        choice = ctx2.choose("merged_gemm", spec)
        new, d = decide.decide(ctx2, Pass(), None, None, None, choice)
        assert new is not None and new.provider == "triton" and d.source == "measured"
        c1 = PassContext(parse_options({"level": 1}), report=None).choose("merged_gemm", spec)
        assert c1.provider == "triton", c1.why_not
    finally:
        PlatformDispatch.reset_all()
