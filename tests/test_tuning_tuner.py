"""The level-2 measure hook (``rocm_inductor/tuning/tuner.py``) with a fake timer and a fake device, on CPU.

The RMSNorm pass is made a tuned pass for these tests (``tuning_op``), so its candidates go through
``tuning.decide`` (the store's entry, else a measurement recorded in the store; the winner forced, or the
candidate left to Inductor), with the reference and Triton providers as the platform's candidates."""

from __future__ import annotations

import contextlib

import pytest
import torch

from rocm_inductor import explain, policy
from rocm_inductor.passes.rms_norm import RMSNormPass
from rocm_inductor.platform import PlatformDispatch
from rocm_inductor.providers.triton import TritonProvider
from rocm_inductor.tuning import device, measure, store, tuner, worker

FAKE = device.DeviceKey("Fake GPU", "sm_00", 4, "torch-x", "triton-y")


@pytest.fixture
def tuned(monkeypatch, tmp_path):
    """Reference and Triton as the CPU's RMSNorm providers, the RMSNorm pass tuned (``tuning_op``: the contract
    then calls ``tuning.decide`` between its gate and emit), a fake device, the decision store in ``tmp_path``,
    fresh tuner and worker state. Yields the store (read back by the tests)."""
    monkeypatch.setitem(policy.PROVIDER_ORDER, "cpu", {"rms_norm": ("reference", "triton")})
    monkeypatch.setenv(store.ROOT_ENV, str(tmp_path / "store"))
    monkeypatch.setattr(RMSNormPass, "tuning_op", "rms_norm", raising=False)
    monkeypatch.setattr(RMSNormPass, "prepare", lambda self, graph, ctx: None)  # every norm through the gate
    with fresh_tuner(tmp_path) as s:
        yield s


@contextlib.contextmanager
def fresh_tuner(tmp_path):
    """Fresh dispatch, tuner and worker state around the fake device ``FAKE`` (and again after); yields the
    decision store in ``tmp_path / "store"`` without shipped entries. The tuning fixtures' common frame."""
    PlatformDispatch.reset_all()
    tuner.TUNER.reset()
    worker.reset()
    with device.override(FAKE):
        yield store.DecisionStore(tmp_path / "store", shipped=None)
    worker.reset()
    tuner.TUNER.reset()
    PlatformDispatch.reset_all()


def _fake(monkeypatch, times: str) -> None:
    monkeypatch.setenv(measure.FAKE_ENV, times)
    worker.reset()


def _norm(x, w):
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


class Layers(torch.nn.Module):
    """``n`` identical norm + GEMM layers at hidden 64, then one norm at hidden 32 (another signature)."""

    def __init__(self, n: int = 4) -> None:
        super().__init__()
        self.ws = torch.nn.ParameterList([torch.nn.Parameter(torch.randn(64)) for _ in range(n)])
        self.gemm = torch.nn.Linear(64, 64, bias=False)
        self.down = torch.nn.Linear(64, 32, bias=False)
        self.w_last = torch.nn.Parameter(torch.randn(32))

    def forward(self, x):
        for w in self.ws:
            x = self.gemm(torch.sigmoid(_norm(x, w)))
        return _norm(self.down(x), self.w_last)


def _compile(model, x):
    return explain(model, x, dry_run=True, options={"level": 2, "strict": True, "passes": {"rms_norm": True}})


def _providers(rep) -> list[str]:
    return [m.provider for m in rep.matches if m.op == "rms_norm"]


def test_level2_fills_the_store_once_per_distinct_region(monkeypatch, tuned):
    _fake(monkeypatch, "inductor=10,reference=5,triton=7")
    torch.manual_seed(0)
    m, x = Layers(4), torch.randn(2, 64)
    rep = _compile(m, x)
    assert _providers(rep) == ["reference"] * 5  # every norm rewritten with the measured winner
    sigs = sorted(d.decision.signature for d in tuner.TUNER.measured)
    assert len(sigs) == 2 and any("hidden=64" in s for s in sigs) and any("hidden=32" in s for s in sigs)
    assert worker.client().measured == 2  # four identical layers: one measurement
    (d,) = [e for e in tuned.entries(FAKE, "rms_norm") if "hidden=64" in e.signature]
    assert d.winner == "reference" and d.times_us == {"inductor": 10.0, "reference": 5.0, "triton": 7.0}
    assert "fusible neighbours" in d.evidence
    tuner.TUNER.reset()
    rep = _compile(m, x)  # the store has both: nothing is measured again
    assert tuner.TUNER.measured == [] and _providers(rep) == ["reference"] * 5
    with device.override(dataclasses_replace(FAKE, triton="triton-z")):  # other versions: measured again
        _compile(m, x)
    assert len(tuner.TUNER.measured) == 2


def dataclasses_replace(key, **kw):
    import dataclasses

    return dataclasses.replace(key, **kw)


def test_wrong_numerics_are_refused_with_the_reason(monkeypatch, tuned):
    _fake(monkeypatch, "inductor=10,reference=5,triton=1")  # the wrong kernel would be the fastest
    orig = TritonProvider.rms_norm
    monkeypatch.setattr(TritonProvider, "rms_norm", lambda self, x, *a, **k: orig(self, x, *a, **k) * 1.5)
    torch.manual_seed(0)
    rep = _compile(Layers(1), torch.randn(2, 64))
    assert _providers(rep) == ["reference", "reference"]
    meas = tuner.TUNER.measured[0]
    assert "triton" not in meas.decision.times_us and "numerics contract" in meas.refused["triton"]
    assert "refused triton" in meas.decision.evidence and meas.decision.winner == "reference"


def test_the_winner_is_forced_in_the_emitted_op(monkeypatch, tuned):
    _fake(monkeypatch, "inductor=10,reference=6,triton=3")  # triton wins though the policy lists reference first
    torch.manual_seed(0)
    m, x = Layers(2), torch.randn(2, 64)
    rep = _compile(m, x)
    assert _providers(rep) == ["triton"] * 3
    assert {d.decision.winner for d in tuner.TUNER.measured} == {"triton"}


def test_inductor_winning_leaves_the_region_alone(monkeypatch, tuned):
    _fake(monkeypatch, "inductor=5,reference=5.2,triton=9")  # ours slower by more than MIN_GAIN
    torch.manual_seed(0)
    rep = _compile(Layers(1), torch.randn(2, 64))
    assert _providers(rep) == []
    assert any("measured slower than Inductor" in n.reason for n in rep.near_misses)
    assert all(d.winner == "inductor" for d in tuned.entries(FAKE, "rms_norm"))


def test_a_norm_tie_goes_to_our_kernel_above_the_size_policy(monkeypatch, tuned):
    """Within MIN_GAIN (a tie) an RMSNorm at or above ``policy.NORM_MIN_HIDDEN`` keeps our kernel, the level-1
    default (``tuner.tie_band``); below it (per-head sized) the tie goes to Inductor."""
    monkeypatch.setitem(policy.NORM_MIN_HIDDEN, "cpu", 48)  # Layers: hidden 64 above, the last norm (32) below
    _fake(monkeypatch, "inductor=5,reference=5.01,triton=9")
    torch.manual_seed(0)
    rep = _compile(Layers(1), torch.randn(2, 64))
    assert _providers(rep) == ["reference"]
    by_hidden = {store.parse_signature(d.signature)["hidden"]: d for d in tuned.entries(FAKE, "rms_norm")}
    assert by_hidden["64"].winner == "reference" and "the rewrite taken" in by_hidden["64"].evidence
    assert by_hidden["32"].winner == "inductor" and "Inductor kept" in by_hidden["32"].evidence


def test_without_a_gpu_nothing_is_measured(monkeypatch, tuned):
    monkeypatch.delenv(measure.FAKE_ENV, raising=False)
    worker.reset()
    torch.manual_seed(0)
    rep = _compile(Layers(1), torch.randn(2, 64))
    assert _providers(rep) == ["reference", "reference"]  # the default (the policy's first provider) stays
    assert tuner.TUNER.measured == [] and tuned.entries(FAKE, "rms_norm") == []
    assert {s[2] for s in tuner.TUNER.skipped} == {"not measured: no GPU"}


@pytest.mark.slow
def test_the_subprocess_worker_measures_the_same(monkeypatch, tuned):
    """The worker process (pickled modules, Inductor compiles of both windows) gives the in-process decision."""
    _fake(monkeypatch, "inductor=10,reference=5,triton=7")
    monkeypatch.setenv(worker.WORKER_ENV, "subprocess")
    monkeypatch.setenv(worker.COMPILE_ENV, "inductor")
    worker.reset()
    torch.manual_seed(0)
    rep = _compile(Layers(1), torch.randn(2, 64))
    assert isinstance(worker.client().backend, worker.SubprocessWorker)
    assert _providers(rep) == ["reference", "reference"]
    assert {d.decision.winner for d in tuner.TUNER.measured} == {"reference"}
    assert all(d.refused == {} for d in tuner.TUNER.measured)
