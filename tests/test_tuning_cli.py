"""``python -m rocm_inductor tune SCRIPT_OR_MODULE:FN`` on a tiny model, with the fake timer (``measure.FAKE_ENV``)
and the RMSNorm pass tuned (``test_tuning_tuner.tuned``)."""

from __future__ import annotations

import sys
import textwrap

from test_tuning_tuner import _fake, tuned  # noqa: F401  (the fixture)

from rocm_inductor.__main__ import main

SCRIPT = """
import torch

def _norm(x, w):
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w

class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w1, self.w2 = torch.nn.Parameter(torch.randn(64)), torch.nn.Parameter(torch.randn(64))
        self.proj = torch.nn.Linear(64, 64, bias=False)

    def forward(self, x):
        return _norm(self.proj(torch.sigmoid(_norm(x, self.w1))), self.w2)

def step():
    torch.manual_seed(0)
    return Tiny(), (torch.randn(2, 64),), {"options": {"passes": {"rms_norm": True}}}
"""


def test_tune_prints_the_decisions(monkeypatch, tmp_path, capsys, tuned):  # noqa: F811
    _fake(monkeypatch, "inductor=10,reference=5,triton=7")
    path = tmp_path / "tiny_step.py"
    path.write_text(textwrap.dedent(SCRIPT))
    assert main(["tune", f"{path}:step", "--store", str(tmp_path / "store")]) == 0
    out = capsys.readouterr()
    lines = out.out.strip().splitlines()
    assert lines[0].split()[:2] == ["op", "signature"]
    (row,) = [ln for ln in lines[1:] if ln.startswith("rms_norm")]  # two identical norms: one measurement
    assert "hidden=64" in row and "reference 5.0us, triton 7.0us, inductor 10.0us" in row
    assert row.rstrip().endswith("reference")
    assert "measuring" in out.err and "rms_norm dtype=float32" in out.err  # progress: a tqdm bar or plain lines
    # a module:function target, run again: the store has the decision, nothing is measured
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["tune", "tiny_step:step"]) == 0
    assert "nothing to measure" in capsys.readouterr().out
    sys.modules.pop("tiny_step", None)


def test_tune_bad_target_is_a_usage_error(capsys):
    assert main(["tune", "no_such_module_xyz:step"]) == 2
    assert "no such file or module" in capsys.readouterr().err
    assert main(["tune", "nocolon"]) == 2


def test_tune_without_a_gpu_says_so_before_compiling(monkeypatch, tmp_path, capsys):
    """No GPU (and no fake timer): one line says nothing was measured and why, no progress bar, no store."""
    from rocm_inductor.tuning import measure

    monkeypatch.delenv(measure.FAKE_ENV, raising=False)
    path = tmp_path / "tiny_step.py"
    path.write_text(textwrap.dedent(SCRIPT))
    assert main(["tune", f"{path}:step", "--store", str(tmp_path / "store")]) == 0
    out = capsys.readouterr()
    assert out.out.startswith("nothing measured: no GPU") and "measuring" not in out.err
    assert not (tmp_path / "store").exists()
