"""The tuning store (``rocm_inductor/tuning``): device keys, signatures, where the store lives, atomic writes,
shipped entries matched by GPU model. CPU only: the device is faked with ``device.override`` and every store
root is a ``tmp_path``."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest
import torch

from rocm_inductor.tuning import device, store
from rocm_inductor.tuning.store import Decision, DecisionStore, signature

KEY = device.DeviceKey("FakeGPU 80GB", "sm_90", 132, "2.11.0+cu130", "3.6.0", (("flashinfer", "0.6.18"),))
SIG = signature("merged_gemm", {"dtype": torch.bfloat16, "k": 64, "ns": (64, 32), "m": 4, "m_upper": 4})
DEC = Decision("merged_gemm", SIG, "triton", {"block_m": 4}, {"triton": 2.0, "inductor": 5.0}, "measured")


def test_signature_is_stable_text_of_the_spec():
    assert SIG == "dtype=bfloat16,k=64,m=4,ns=64/32"  # m_upper is left out when M is static
    sym = signature("merged_gemm", {"dtype": torch.bfloat16, "k": 64, "ns": (64, 32), "m": None, "m_upper": 32})
    assert sym == "dtype=bfloat16,k=64,m_upper=32,ns=64/32"
    norm = {"dtype": torch.bfloat16, "weight_dtype": None, "hidden": 128, "ndim": 3, "offset": 0.0, "fused_add": True}
    assert signature("rms_norm", norm) == ("dtype=bfloat16,fused_add=1,hidden=128,ndim=3,offset=0,"
                                           "weight_dtype=?")
    assert signature("rms_norm", dict(reversed(list(norm.items())))) == signature("rms_norm", norm)
    assert store.parse_signature(SIG) == {"dtype": "bfloat16", "k": "64", "m": "4", "ns": "64/32"}


def test_record_then_lookup_is_a_store_hit(tmp_path):
    st = DecisionStore(tmp_path, shipped=None)
    assert st.lookup(KEY, "merged_gemm", SIG) is None
    st.record(KEY, DEC)
    got = st.lookup(KEY, "merged_gemm", SIG)
    assert got == dataclasses.replace(DEC, source="store")
    assert st.lookup(KEY, "merged_gemm", SIG.replace("m=4", "m=8")) is None
    assert st.lookup(KEY, "rms_norm_gemm", SIG) is None
    data = json.loads((tmp_path / f"{KEY.id()}.json").read_text())
    assert data["format"] == store.FORMAT and data["device"]["name"] == KEY.name
    # another instance (another process) reads the same file
    assert DecisionStore(tmp_path, shipped=None).lookup(KEY, "merged_gemm", SIG).winner == "triton"


@pytest.mark.parametrize("change", [
    {"name": "OtherGPU"}, {"arch": "sm_80"}, {"units": 114}, {"torch": "2.13.0+cu130"}, {"triton": "3.7.0"},
    {"providers": (("flashinfer", "0.6.19"),)}, {"providers": ()},
    {"providers": (("aiter", "0.1.17"), ("flashinfer", "0.6.18"))},
])
def test_another_device_or_version_is_a_miss(tmp_path, change):
    st = DecisionStore(tmp_path, shipped=None)
    st.record(KEY, DEC)
    other = dataclasses.replace(KEY, **change)
    assert other.id() != KEY.id()
    assert st.lookup(other, "merged_gemm", SIG) is None


def test_key_id_is_stable_and_short():
    same = device.DeviceKey(*dataclasses.astuple(KEY)[:5], providers=KEY.providers)
    assert same.id() == KEY.id() and len(KEY.id()) == 16
    assert KEY.id() == device.DeviceKey(**dataclasses.asdict(KEY)).id()


def test_record_is_atomic(tmp_path, monkeypatch):
    """A write that fails before the rename leaves the old file whole and no temporary file behind."""
    st = DecisionStore(tmp_path, shipped=None)
    st.record(KEY, DEC)
    before = (tmp_path / f"{KEY.id()}.json").read_bytes()

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(store.os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        st.record(KEY, dataclasses.replace(DEC, signature="dtype=bfloat16,k=64,m=8,ns=64/32"))
    assert (tmp_path / f"{KEY.id()}.json").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{KEY.id()}.json"]


def test_record_keeps_other_entries_and_replaces_the_same(tmp_path):
    st = DecisionStore(tmp_path, shipped=None)
    other = dataclasses.replace(DEC, signature=SIG.replace("m=4", "m=8"), winner="inductor")
    st.record(KEY, DEC)
    st.record(KEY, other)
    st.record(KEY, dataclasses.replace(DEC, times_us={"triton": 1.0, "inductor": 5.0}))
    assert st.lookup(KEY, "merged_gemm", SIG).times_us["triton"] == 1.0
    assert st.lookup(KEY, "merged_gemm", other.signature).winner == "inductor"
    assert len(st.entries(KEY, "merged_gemm")) == 2


def test_unreadable_or_foreign_file_reads_as_empty(tmp_path):
    st = DecisionStore(tmp_path, shipped=None)
    (tmp_path / f"{KEY.id()}.json").write_text("{not json")
    assert st.lookup(KEY, "merged_gemm", SIG) is None
    (tmp_path / f"{KEY.id()}.json").write_text(json.dumps({"format": 99, "entries": {}}))
    assert st.lookup(KEY, "merged_gemm", SIG) is None
    st.record(KEY, DEC)  # a bad file is replaced by a good one
    assert st.lookup(KEY, "merged_gemm", SIG) is not None


def _shipped(dirpath, name, arch, decisions):
    dirpath.mkdir(exist_ok=True)
    (dirpath / f"{name.replace(' ', '_')}.json").write_text(json.dumps(
        {"format": store.FORMAT, "device": {"name": name, "arch": arch},
         "entries": [d.to_json() for d in decisions]}))


def test_shipped_entries_match_by_device_name_and_arch(tmp_path):
    ship = dataclasses.replace(DEC, winner="inductor", source="shipped:FakeGPU 80GB", evidence="runs/x.csv, run r1")
    _shipped(tmp_path / "shipped", KEY.name, "sm_90", [ship])
    st = DecisionStore(tmp_path / "root", shipped=tmp_path / "shipped")
    # any versions and unit count of the same model
    for key in (KEY, dataclasses.replace(KEY, torch="9.9", triton="9.9", units=1, providers=())):
        assert st.lookup(key, "merged_gemm", SIG) == ship
    assert st.lookup(dataclasses.replace(KEY, name="OtherGPU"), "merged_gemm", SIG) is None
    assert st.lookup(dataclasses.replace(KEY, arch="sm_100"), "merged_gemm", SIG) is None
    # this device's own entry comes first
    st.record(KEY, DEC)
    assert st.lookup(KEY, "merged_gemm", SIG).source == "store"
    assert [d.source for d in st.entries(KEY, "merged_gemm")] == ["store"]


def test_packaged_h200_entries():
    h200 = device.DeviceKey("NVIDIA H200", "sm_90", 132, "x", "y")
    st = DecisionStore(None, shipped=store.SHIPPED_DIR)
    sig = signature("merged_gemm", {"dtype": torch.bfloat16, "k": 2048, "ns": (2048, 512, 512), "m": 1})
    d = st.lookup(h200, "merged_gemm", sig)
    assert d.source == "shipped:NVIDIA H200" and d.winner == "triton"
    assert d.times_us["triton"] == 5.37 and d.times_us["inductor"] == 18.02
    assert d.evidence.startswith("benchmarks/results/runs/decode_gemm_layer.csv, run 2026-12-01")
    assert st.lookup(dataclasses.replace(h200, name="NVIDIA A100-SXM4-80GB", arch="sm_80"), "merged_gemm",
                     sig) is None


def test_store_lives_in_inductors_cache_dir(tmp_path, monkeypatch):
    monkeypatch.delenv(store.ROOT_ENV, raising=False)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "ind"))
    assert store.default_root() == tmp_path / "ind" / "rocm_fused" / "tuning"
    assert store.default_store().root == tmp_path / "ind" / "rocm_fused" / "tuning"
    monkeypatch.setenv(store.ROOT_ENV, str(tmp_path / "mine"))
    assert store.default_store().root == tmp_path / "mine"


def test_override_fakes_the_device():
    real = device.current()
    with device.override(KEY):
        assert device.current() is KEY and device.current("cpu") is KEY
    assert device.current() == real
    cpu = device.current("cpu")
    assert (cpu.name, cpu.arch, cpu.units) == ("cpu", "cpu", 0) and cpu.torch == torch.__version__
    assert not os.path.exists(store.SHIPPED_DIR / f"{cpu.id()}.json")


def test_provider_versions_survive_a_module_without_a_spec(monkeypatch):
    """A provider module in ``sys.modules`` without ``__spec__`` (a test stand-in, a shim) made ``find_spec`` raise
    inside the device key, so the compile failed (test_inspection's FlashInfer stand-in, run alone)."""
    import sys
    import types

    from rocm_inductor.tuning import device as dev

    _, mod, _ = dev._PROVIDER_DISTS[0]
    stub = types.ModuleType(mod)
    stub.__spec__ = None
    monkeypatch.setitem(sys.modules, mod, stub)
    assert isinstance(dev._providers(), tuple)
