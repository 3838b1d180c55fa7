"""Level 2 measures every tuned pass (issue 30): RMSNorm, RoPE, decode attention, the sigmoid gate and the GEMM
merge, with a fake timer and a fake device on CPU (``explain(dry_run=True)``: our passes only).

The CPU has no default provider and every pass is off by default there, so these tests give the ops the
reference provider and lean on the rules under test: a pass off by default runs as a candidate when the compile
measures, and stays off unless a decision says otherwise; a size policy (``NORM_MIN_HIDDEN``) is measured instead
of applied; a "not measured" refusal reaches the measurement; level 1 never measures.
"""

from __future__ import annotations

import gpt_fast_model as G
import pytest
import torch
from gate_spellings import qwen3_next
from test_gemm_merge_pass import QKV
from test_tuning_tuner import FAKE, _fake, fresh_tuner

from rocm_inductor import explain, policy
from rocm_inductor.providers.reference import ReferenceProvider
from rocm_inductor.refusal import NOT_MEASURED, Refusal
from rocm_inductor.tuning import decide, device, measure, store, tuner, worker

OPS = ("rms_norm", "fused_add_rms_norm", "rope", "rope_cached", "decode_attention", "sigmoid_gate")


@pytest.fixture
def cpu_gpu(monkeypatch, tmp_path):
    """The reference provider for the tuned ops on CPU, an empty store in ``tmp_path``, no shipped entries, a fake
    device, fresh tuner and worker state."""
    for op in OPS:
        monkeypatch.setitem(policy.PROVIDER_ORDER["cpu"], op, ("reference",))
    monkeypatch.setitem(policy.NORM_MIN_HIDDEN, "cpu", 128)  # gpt-fast's norms (64) are "per-head sized" here
    monkeypatch.setenv(store.ROOT_ENV, str(tmp_path / "store"))
    monkeypatch.setenv(store.SHIPPED_ENV, "0")
    with fresh_tuner(tmp_path) as s:
        yield s


def _gpt_fast(layers: int = 2):
    torch.manual_seed(0)
    model = G.Transformer(G.ModelArgs(n_layer=layers))
    model.setup_caches(1, 64)
    for c in model.layers:
        c.attention.kv_cache.float()
    return model, torch.full((1, 1), 7, dtype=torch.int64), torch.tensor([5])


def _compile(level: int, model, x, pos):
    (rep,) = explain(lambda a, b: model(a, b), x, pos, dry_run=True,
                     options={"level": level, "strict": True, "provider": None})
    return rep


def _ops(rep) -> dict[str, list]:
    out: dict[str, list] = {}
    for m in rep.matches:
        out.setdefault(m.op, []).append(m)
    return out


def test_level2_measures_each_pass_and_losers_come_out_off(monkeypatch, cpu_gpu):
    """RMSNorm (below the size policy) and decode attention measured faster: on; RoPE measured slower: off. Each
    distinct region measured once (identical layers share the measurement); each decision's provenance reported."""
    _fake(monkeypatch, "inductor=10,reference=5,rope/reference=20,rope_cached/reference=20")
    model, x, pos = _gpt_fast(2)
    rep = _compile(2, model, x, pos)
    measured = [(m.decision.op, m.decision.signature) for m in tuner.TUNER.measured]
    assert len(measured) == len(set(measured))  # identical layers: one measurement each
    ops = {op for op, _ in measured}
    assert {"decode_attention"} <= ops and ops & {"rope", "rope_cached"} and ops & {"rms_norm", "fused_add_rms_norm"}
    got = _ops(rep)
    norms = got.get("rms_norm", []) + got.get("fused_add_rms_norm", [])
    assert len(norms) == 2 * 2 + 1 and len(got["decode_attention"]) == 2  # every norm, both layers' attention
    assert "rope" not in got and "rope_cached" not in got
    assert any(n.pass_name == "rope" and "measured slower than Inductor" in n.reason for n in rep.near_misses)
    assert all(m.provenance.startswith("measured now on Fake GPU") for m in norms + got["decode_attention"])
    assert "decision decode_attention" in str(rep)
    sigs = [d.signature for d in cpu_gpu.entries(FAKE, "decode_attention")]
    assert sigs and all("batch=1" in s for s in sigs)
    assert all("rows=1" in d.signature for d in cpu_gpu.entries(FAKE, "fused_add_rms_norm"))


@pytest.mark.slow
def test_level1_never_measures_and_applies_the_store(monkeypatch, cpu_gpu):
    """Level 1: no measurement, passes off by default stay off and the size policy holds; once a level-2 compile
    has filled the store, level 1 applies its decisions (RoPE on where it was measured faster)."""
    _fake(monkeypatch, "inductor=10,reference=5")
    model, x, pos = _gpt_fast(1)
    monkeypatch.setattr(decide, "measure_hook", lambda *a: (_ for _ in ()).throw(AssertionError("measured")))
    rep = _compile(1, model, x, pos)
    assert "rope" in rep.passes_skipped and not [m for m in rep.matches if m.op != "decode_attention"]
    monkeypatch.setattr(decide, "measure_hook", tuner.TUNER)
    _compile(2, model, x, pos)  # RoPE and the norms measured faster: recorded
    monkeypatch.setattr(decide, "measure_hook", lambda *a: (_ for _ in ()).throw(AssertionError("measured")))
    rep = _compile(1, model, x, pos)
    got = _ops(rep)
    assert got.get("rope") or got.get("rope_cached")
    assert all(m.provenance.startswith("store (measured on this device earlier)") for ms in got.values() for m in ms)


def test_decode_attention_launch_configs_measured_and_the_winner_stored(monkeypatch, cpu_gpu):
    """With the Triton provider, every split-KV launch config of the sweep grid is a candidate of its own
    (forced in turn, numerics checked); the fastest is stored with its config, which the kernel's launcher then
    reads from the store."""
    from rocm_inductor.providers.triton import attention
    from rocm_inductor.providers.triton.attention import config as attn_config

    monkeypatch.setitem(policy.PROVIDER_ORDER["cpu"], "decode_attention", ("reference", "triton"))
    forced = []
    real = attention.decode_attention

    def spy(*a, **k):
        forced.append((attention.FORCE_SPLITS, attention.FORCE_BLOCK_N))
        return real(*a, **k)

    monkeypatch.setattr(attention, "decode_attention", spy)
    _fake(monkeypatch, "inductor=10,reference=8,decode_attention/triton:2x32=3")
    model, x, pos = _gpt_fast(1)
    rep = _compile(2, model, x, pos)
    (meas,) = [m for m in tuner.TUNER.measured if m.decision.op == "decode_attention"]
    grid = attn_config.sweep_points(64)  # the gpt-fast cache: 64 slots
    assert {k for k in meas.decision.times_us if k.startswith("triton:")} == {
        f"triton:{c['num_splits']}x{c['block_n']}" for c in grid}
    assert {(c["num_splits"], c["block_n"]) for c in grid} <= set(forced)  # each forced when it ran
    assert (attention.FORCE_SPLITS, attention.FORCE_BLOCK_N) == (None, None)  # restored
    assert meas.decision.winner == "triton" and meas.decision.config == {"num_splits": 2, "block_n": 32}
    assert [m.provider for m in rep.matches if m.op == "decode_attention"] == ["triton"]
    d = meas.decision
    f = store.parse_signature(d.signature)
    cfg = attn_config.pick(int(f["batch"]), int(f["num_q_heads"]), int(f["num_kv_heads"]), int(f["q_len"]),
                           int(f["kv_len"]), int(f["head_dim"]), int(f["v_head_dim"]), torch.float32, 1)
    assert (cfg["NSPLIT"], cfg["BLOCK_N"]) == (2, 32) and cfg["source"] == f"store: {d.signature}"


def test_sigmoid_gate_measured_and_wrong_numerics_refused(monkeypatch, cpu_gpu):
    """The gate (off by default) is a candidate at level 2; a provider whose output breaks the numerics contract
    is refused with the reason and the gate stays with Inductor."""
    _fake(monkeypatch, "inductor=10,reference=1")  # the wrong kernel would be the fastest
    orig = ReferenceProvider.sigmoid_gate
    monkeypatch.setattr(ReferenceProvider, "sigmoid_gate", lambda self, x, g: orig(self, x, g) * 1.5)
    torch.manual_seed(0)
    o_proj = torch.nn.Linear(32, 16, bias=False).to(torch.bfloat16)
    attn, gate = (torch.randn(2, 4, 32, dtype=torch.bfloat16) for _ in range(2))
    (rep,) = explain(lambda a, g: qwen3_next(a, g, o_proj), attn, gate, dry_run=True,
                     options={"level": 2, "strict": True, "provider": None})
    (meas,) = [m for m in tuner.TUNER.measured if m.decision.op == "sigmoid_gate"]
    assert "numerics contract" in meas.refused["reference"] and meas.decision.winner == "inductor"
    assert not [m for m in rep.matches if m.op == "sigmoid_gate"]
    assert any(n.pass_name == "sigmoid_gate" and "measured slower" in n.reason for n in rep.near_misses)


def test_not_measured_refusal_is_measured_at_level2(monkeypatch, cpu_gpu):
    """A GEMM merge its provider refuses as "not measured": a near-miss at level 1, measured and taken at level 2;
    ``ROCM_FUSED_TUNING_SHIPPED=0`` hides the shipped entries."""
    monkeypatch.setitem(policy.PROVIDER_ORDER["cpu"], "merged_gemm", ("reference",))
    orig = ReferenceProvider.check

    def check(self, op, spec):
        return Refusal("shape not measured (test)", NOT_MEASURED) if op == "merged_gemm" else orig(self, op, spec)

    monkeypatch.setattr(ReferenceProvider, "check", check)
    _fake(monkeypatch, "inductor=10,reference=5")
    torch.manual_seed(0)
    mod, x = QKV().eval(), torch.randn(2, 3, 64)
    opts = {"provider": None, "passes": {"gemm_merge": True}, "strict": True}
    (rep,) = explain(mod, x, dry_run=True, options={**opts, "level": 1})
    assert not [m for m in rep.matches if m.op == "merged_gemm"]
    assert any("shape not measured (test)" in n.reason for n in rep.near_misses)
    (rep,) = explain(mod, x, dry_run=True, options={**opts, "level": 2})
    (m,) = [m for m in rep.matches if m.op == "merged_gemm"]
    assert m.provenance.startswith("measured now on Fake GPU")
    assert store.DecisionStore(shipped=store.SHIPPED_DIR).shipped(device.DeviceKey("NVIDIA H200", "sm_90", 132,
                                                                                   "t", "t")) == []
    monkeypatch.setenv(store.SHIPPED_ENV, "1")
    assert store.DecisionStore(shipped=store.SHIPPED_DIR).shipped(device.DeviceKey("NVIDIA H200", "sm_90", 132,
                                                                                   "t", "t"))


@pytest.mark.gpu
def test_gpu_level2_measures_every_tuned_op(monkeypatch, tmp_path):
    """On a GPU, from an empty store without shipped entries: the gpt-fast step's norms, RoPE and decode attention
    are measured in their windows by the worker process (each distinct region once) and every rewrite says
    "measured now"."""
    monkeypatch.setenv(store.ROOT_ENV, str(tmp_path / "store"))
    monkeypatch.setenv(store.SHIPPED_ENV, "0")
    monkeypatch.delenv(measure.FAKE_ENV, raising=False)
    tuner.TUNER.reset()
    worker.reset()
    torch.manual_seed(0)
    model = G.Transformer(G.ModelArgs(n_layer=2)).to("cuda", torch.bfloat16)
    with torch.device("cuda"):  # as gpt-fast's generate.py: freqs_cis and the mask are plain attributes
        model.setup_caches(1, 64)
    x, pos = torch.full((1, 1), 7, dtype=torch.int64, device="cuda"), torch.tensor([5], device="cuda")
    (rep,) = explain(lambda a, b: model(a, b), x, pos, dry_run=True, options={"level": 2, "strict": True})
    ops = {m.decision.op for m in tuner.TUNER.measured}
    assert {"decode_attention"} <= ops and ops & {"rope", "rope_cached"}, tuner.TUNER.skipped
    sigs = [(m.decision.op, m.decision.signature) for m in tuner.TUNER.measured]
    assert len(sigs) == len(set(sigs))
    tuned = [m for m in rep.matches if m.op in OPS]
    assert tuned and all(m.provenance.startswith("measured now on") for m in tuned), str(rep)
    worker.reset()
