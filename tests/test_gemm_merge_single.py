"""Single small-M GEMMs (issue 19): the gemm_merge pass hands a lone GEMM of its activation to the Triton
provider only where the measured table says ours beats cuBLAS (``measured_single``); otherwise nothing changes.

CPU: the table is passed in through ``ROCM_FUSED_GEMM_TABLE`` with device ``"cpu"`` (as the sweep's
``--device cpu`` writes it); the Triton provider runs under the interpreter, the reference provider is the
numerics oracle and never takes a single GEMM.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from graph_utils import compile_run, needs_interpreter
from test_gemm_merge_kernels import assert_gemm_contract

from rocm_inductor.ops.gemm_merge import SINGLE_SLOWER, SINGLE_UNMEASURED
from rocm_inductor.providers.triton import gemm_configs as gc
from rocm_inductor.providers.triton import gemm_merge as gm
from rocm_inductor.providers.triton import gemm_tables as gt

#: CPU tests: Triton under the interpreter and CPU-device tables (on a GPU host the gpu-marked tests cover it).
pytestmark = needs_interpreter

MM, MERGED = "aten.mm.default", "rocm_fused.merged_gemm.default"
H, N = 64, 40  # N not a multiple of any block


class Proj(torch.nn.Module):
    """One projection of its activation (an o_proj / down_proj / lm_head) next to a q/k/v-like merge."""

    def __init__(self, dtype, bias=False):
        super().__init__()
        self.o_proj = torch.nn.Linear(H, N, bias=bias, dtype=dtype)
        self.a = torch.nn.Linear(H, 24, bias=False, dtype=dtype)
        self.b = torch.nn.Linear(H, 24, bias=False, dtype=dtype)

    def forward(self, x, y):
        return self.o_proj(x), self.a(y) + self.b(y)


def _table(tmp_path, monkeypatch, entries):
    path = tmp_path / f"table{len(list(tmp_path.iterdir()))}.json"  # a new path: load_table caches per path
    path.write_text(json.dumps({"entries": entries}))
    monkeypatch.setenv("ROCM_FUSED_GEMM_TABLE", str(path))


def _entry(m, ours, sep, dtype="float32", k=H, n=N, device="cpu"):
    cfg = dataclasses.asdict(gc.Config(16, 16, 64, 1, 4, 3, True))
    return dict(device=device, m=m, k=k, ns=[n], dtype=dtype, config=cfg, ours_us=ours, separate_us=sep)


def _run(mod, x, y, provider="triton"):
    return compile_run(mod, x, y, options={"passes": {"gemm_merge": True}, "provider": provider})


@pytest.mark.parametrize("dtype,bias", [(torch.float32, True), (torch.bfloat16, False)])
def test_measured_single_is_taken_and_within_contract(tmp_path, monkeypatch, dtype, bias):
    torch.manual_seed(0)
    _table(tmp_path, monkeypatch, [_entry(8, 2.0, 5.0, str(dtype).replace("torch.", ""))])
    mod = Proj(dtype, bias).eval()
    x, y = torch.randn(2, 3, H, dtype=dtype), torch.randn(2, 3, H, dtype=dtype)
    out, seen = _run(mod, x, y)
    (c,) = seen
    assert c.before[MM if not bias else "aten.addmm.default"] >= 1 and c.after[MERGED] == 2
    assert c.after.get(MM, 0) + c.after.get("aten.addmm.default", 0) == 0
    single = [m for m in c.report.matches if m.note.startswith("single GEMM")]
    assert len(single) == 1 and single[0].provider == "triton" and single[0].shape == f"6x{H}->{N}"
    assert single[0].note.startswith(f"single GEMM, N {N}, bucket M=6")
    with torch.no_grad():
        eager = mod.o_proj(x)
        ref = torch.nn.functional.linear(x.double(), mod.o_proj.weight.double(),
                                         None if mod.o_proj.bias is None else mod.o_proj.bias.double())
    assert_gemm_contract(out[0].reshape(6, N), eager.reshape(6, N), ref.reshape(6, N), H)


def test_unmeasured_or_reference_single_is_left_silently(tmp_path, monkeypatch):
    """No table entry (or another device's, another N): unchanged, no near-miss; the reference provider never
    takes a single GEMM, even with a measured win."""
    mod = Proj(torch.float32).eval()
    x, y = torch.randn(1, 1, H), torch.randn(1, 1, H)
    for entries in ([], [_entry(8, 2.0, 5.0, device="NVIDIA H200")], [_entry(8, 2.0, 5.0, n=N + 8)]):
        _table(tmp_path, monkeypatch, entries)
        _, seen = _run(mod, x, y)
        (c,) = seen
        assert c.after[MM] == 1 and c.after[MERGED] == 1 and not c.report.near_misses, entries
    _table(tmp_path, monkeypatch, [_entry(8, 2.0, 5.0)])
    _, seen = _run(mod, x, y, provider="reference")
    assert seen[0].after[MM] == 1 and not seen[0].report.near_misses


def test_measured_slower_single_is_a_near_miss_with_the_numbers(tmp_path, monkeypatch):
    _table(tmp_path, monkeypatch, [_entry(1, 4.95, 5.0)])  # faster, but by less than SINGLE_MIN_GAIN
    _, seen = _run(Proj(torch.float32).eval(), torch.randn(1, 1, H), torch.randn(1, 1, H))
    (c,) = seen
    assert c.after[MM] == 1
    (miss,) = c.report.near_misses
    assert miss.what == "a single small-M GEMM" and SINGLE_SLOWER in miss.reason
    assert "4.95 vs cuBLAS 5.00 us" in miss.reason and "M=1" in miss.reason


def test_measured_single_buckets(tmp_path, monkeypatch):
    """Static M: the smallest measured M >= m; symbolic M: every entry up to the one covering the bound;
    beyond the largest measured M: unmeasured (silent)."""
    _table(tmp_path, monkeypatch, [_entry(1, 2.0, 5.0), _entry(8, 6.0, 5.0), _entry(32, 3.0, 5.0)])
    spec = dict(dtype=torch.float32, k=H, ns=(N,), count=1)
    assert gt.measured_single({**spec, "m": 1, "m_upper": 1}) is None
    assert SINGLE_SLOWER in gt.measured_single({**spec, "m": 2, "m_upper": 2})
    assert gt.measured_single({**spec, "m": 16, "m_upper": 16}) is None
    assert SINGLE_SLOWER in gt.measured_single({**spec, "m": None, "m_upper": 32})  # M = 8 loses
    assert gt.measured_single({**spec, "m": None, "m_upper": 1}) is None
    _table(tmp_path, monkeypatch, [_entry(8, 2.0, 5.0)])
    assert gt.measured_single({**spec, "m": 16, "m_upper": 16}).startswith(SINGLE_UNMEASURED)
    monkeypatch.setenv("ROCM_FUSED_GEMM_UNMEASURED", "1")  # applies to merges only
    assert gt.measured_single({**spec, "m": 1, "m_upper": 1, "ns": (8,)}).startswith(SINGLE_UNMEASURED)


@pytest.mark.slow
def test_hf_llama_singles_taken_with_a_table(tmp_path, monkeypatch):
    """Tiny HF Llama (Triton under the interpreter): with wins measured for o_proj (K 64 -> 64), down_proj
    (96 -> 64) and lm_head (64 -> 128), every GEMM of the model is a ``merged_gemm``; logits match eager."""
    from test_gemm_merge_models import _assert_close, _hf, _run

    _table(tmp_path, monkeypatch, [_entry(8, 1.0, 2.0, k=k, n=n) for k, n in ((64, 64), (96, 64), (64, 128))])
    torch.manual_seed(0)
    model = _hf("llama").eval()
    ids = torch.randint(0, 128, (2, 3))
    fn = lambda ids: model(input_ids=ids, use_cache=False).logits  # noqa: E731
    out, seen = _run(fn, ids, provider="triton")
    (c,) = seen
    layers = model.config.num_hidden_layers
    assert c.after.get(MM, 0) == 0 and c.after[MERGED] == 4 * layers + 1
    singles = sorted(m.note.split(",")[1] for m in c.report.matches if m.note.startswith("single GEMM"))
    assert singles == [" N 128"] + [" N 64"] * (2 * layers)
    with torch.no_grad():
        eager = fn(ids)
    _assert_close(out, eager, 1e-5)


def test_cpu_compile_on_a_gpu_host_follows_the_cpu_rules(tmp_path, monkeypatch):
    """A GPU host compiling CPU tensors: the spec's ``device_type`` picks the table's device, not the host's GPU,
    and without the interpreter the Triton provider refuses CPU tensors with that reason (it used to refuse them
    only by accident, as "not measured" on the GPU)."""
    from rocm_inductor.ops.gemm_merge import merged_gemm_spec
    from rocm_inductor.ops.norm_gemm import norm_gemm_spec
    from rocm_inductor.providers.triton import norm_gemm as ng

    monkeypatch.setattr(gt, "_device_name", lambda: "NVIDIA H200")
    monkeypatch.delenv("ROCM_FUSED_GEMM_UNMEASURED", raising=False)
    _table(tmp_path, monkeypatch, [_entry(8, 2.0, 5.0)])
    x, w = torch.randn(6, H), torch.randn(N, H)
    single = merged_gemm_spec(x, [w], [None], 6)
    assert single["device_type"] == "cpu" and gt.measured_single(single) is None
    assert gt.measured_single({**single, "device_type": "cuda"}).startswith(SINGLE_UNMEASURED)
    merge = merged_gemm_spec(x, [w, w], [None, None], 6)
    assert gt.measured_loss(merge) is None
    assert "not measured" in gt.measured_loss({**merge, "device_type": "cuda"})
    fold = norm_gemm_spec(x, None, torch.ones(H), 0.0, [w, w], [None, None], 6)
    monkeypatch.setattr(gm, "_interpreting", lambda: True)
    assert gm.check(merge) is None and ng.check(fold) is None
    assert ng.check({**fold, "device_type": "cuda"}) is not None
    monkeypatch.setattr(gm, "_interpreting", lambda: False)  # no interpreter: Triton cannot read CPU tensors
    assert gm.check(merge).startswith("CPU tensors") and ng.check(fold).startswith("CPU tensors")
