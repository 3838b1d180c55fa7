"""Inspection (issue 7): depyf dumps around each pass (levels 1 and 2, with the torch 2.13 shim), explain(),
near-miss reasons, the report's JSON form, the CLI and TORCH_LOGS=+rocm_fused."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import subprocess
import sys
import types

import pytest
import torch
from graph_utils import compile_run

from rocm_inductor import Report, explain, policy
from rocm_inductor._compat import depyf_shim
from rocm_inductor.inspection import _no_graph_caches
from rocm_inductor.passes import all_passes
from rocm_inductor.platform import Platform, PlatformDispatch
from rocm_inductor.report import GraphReport, Match

REPO = pathlib.Path(__file__).resolve().parent.parent
depyf = pytest.importorskip("depyf")


def _tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32)
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg).eval(), torch.randint(0, 64, (1, 4))


def _dump_llama(tmp_path: pathlib.Path, options: dict) -> tuple[dict[str, str], Report]:
    """Compile the tiny Llama under depyf.prepare_debug; return {dump file name: text} and the reports."""
    from rocm_inductor import reports

    model, ids = _tiny_llama()
    dump = tmp_path / "depyf"
    start = len(reports())
    with torch.no_grad(), _no_graph_caches():
        compiled = torch.compile(model, backend="rocm_fused", options=options)
        with depyf.prepare_debug(str(dump)):
            compiled(ids)
            if options.get("level") == 2:
                # Inductor 2.13's autotuning call (select_algorithm / autotune_process): raised TypeError
                # under depyf before the shim, which our backend installed when it compiled above.
                from torch._inductor.codecache import PyCodeCache

                assert PyCodeCache.load("x = 7\n", set_sys_modules=False).x == 7
    files = {p.name: p.read_text() for p in dump.iterdir() if p.suffix == ".py"}
    return files, Report(reports()[start:])


def _check_before_after(files: dict[str, str], rep: Report) -> None:
    passes = {p.name: p for p in all_passes()}
    assert rep and rep.count() > 0, rep
    for g in rep:
        for name in g.passes_run:
            before = [t for f, t in files.items() if f".rocm_fused_before_{name}." in f]
            after = [t for f, t in files.items() if f".rocm_fused_after_{name}." in f]
            assert before and after, (name, sorted(files))
            ops = [f"torch.ops.rocm_fused.{op}." for op in passes[name].ops]
            assert not any(op in t for op in ops for t in before), name  # nothing of this pass yet
            if g.count(pass_name=name):
                assert any(op in t for op in ops for t in after), name
    # Before the first pass the graph holds no rocm_fused op at all; only "after" dumps and Inductor's
    # later files (post-grad graph, output code) do.
    first = rep[0].passes_run[0]
    assert all("rocm_fused." not in t for f, t in files.items() if f".rocm_fused_before_{first}." in f)
    assert any("torch.ops.rocm_fused.fused_add_rms_norm" in t for f, t in files.items() if "_after_" in f)
    assert any(".AFTER_POST_GRAD." in f or "kernel" in f for f in files)  # Inductor's own files are there


@pytest.mark.slow
def test_depyf_dump_before_after_each_pass(tmp_path):
    files, rep = _dump_llama(tmp_path, {"provider": "reference"})
    _check_before_after(files, rep)
    assert rep.count("fused_add_rms_norm") == 2 and rep.count("rms_norm") == 1


@pytest.mark.slow
def test_depyf_dump_level2_max_autotune(tmp_path):
    files, rep = _dump_llama(tmp_path, {"provider": "reference", "level": 2})
    _check_before_after(files, rep)


def test_depyf_shim_fixes_set_sys_modules(tmp_path):
    from depyf.explain import enable_debugging
    from torch._inductor.codecache import PyCodeCache

    with depyf.prepare_debug(str(tmp_path)):
        hook = PyCodeCache.__dict__["load_by_key_path"]
        if not getattr(hook, "_rocm_fused_depyf_shim", False):
            try:  # the breakage the shim exists for (skipped once depyf accepts **kwargs)
                PyCodeCache.load("y = 1\n", set_sys_modules=False)
            except TypeError as e:
                assert "set_sys_modules" in str(e)
        depyf_shim.apply()
        assert PyCodeCache.load("y = 2\n", set_sys_modules=False).y == 2
        assert PyCodeCache.load("y = 3\n").y == 3  # the keyword-free path still goes through depyf
    assert getattr(enable_debugging.patched_load_by_key_path, "_rocm_fused_depyf_shim", False)
    assert not depyf_shim.apply()  # idempotent
    assert any(p.name.endswith(".py") and "kernel" in p.name for p in tmp_path.iterdir())


class _RMSNorm(torch.nn.Module):
    """Weight applied in float32, then cast to the input dtype (OLMo2 / nn.RMSNorm style)."""

    def __init__(self, hidden: int, weight_dtype: torch.dtype) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.linspace(0.5, 1.5, hidden, dtype=weight_dtype))

    def forward(self, x):
        xf = x.float()
        return (self.weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6))).to(x.dtype)


class _ThreeNorms(torch.nn.Module):
    def __init__(self, hidden: int = 16) -> None:
        super().__init__()
        self.ok = _RMSNorm(hidden, torch.bfloat16)
        self.fp32_weight = _RMSNorm(hidden, torch.float32)
        self.ln = torch.nn.LayerNorm(hidden, dtype=torch.bfloat16)

    def forward(self, x):
        return self.ln(self.fp32_weight(self.ok(x)))


@pytest.fixture
def stand_in_flashinfer(monkeypatch):
    """A CUDA platform with a pure-torch `flashinfer` module, so FlashInfer's compile-time limits apply."""
    calls = []

    def rmsnorm(x, w, eps):
        calls.append(x.shape)
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)

    fi = types.ModuleType("flashinfer")
    fi.__version__ = "0.0+stand-in"
    fi.norm = types.SimpleNamespace(rmsnorm=rmsnorm, fused_add_rmsnorm=None, gemma_rmsnorm=None,
                                    gemma_fused_add_rmsnorm=None)
    monkeypatch.setitem(sys.modules, "flashinfer", fi)
    PlatformDispatch.reset_all()
    monkeypatch.setattr(PlatformDispatch, "_platform", Platform("cuda", "sm_90", "stand-in"))
    # the test's norms are 16 wide: below CUDA's per-head minimum (policy.NORM_MIN_HIDDEN), lift it
    monkeypatch.setitem(policy.NORM_MIN_HIDDEN, "cuda", 0)
    return calls


def test_explain_match_near_miss_and_layernorm(stand_in_flashinfer):
    m, x = _ThreeNorms().eval(), torch.randn(2, 4, 16, dtype=torch.bfloat16)
    rep = explain(m, x, options={"provider": "flashinfer"})
    assert len(rep) == 1
    (match,), (miss,) = rep.matches, rep.near_misses
    assert (match.pass_name, match.op, match.provider, match.dtype, match.shape) == \
        ("rms_norm", "rms_norm", "flashinfer", "bfloat16", "(2, 4, 16)")
    assert match.location.startswith("test_inspection.py:")
    assert miss.what == "RMSNorm" and "weight is float32, input bfloat16" in miss.reason
    assert "FlashInfer needs equal dtypes" in miss.reason
    assert not any("LayerNorm" in n.reason for n in rep.near_misses)  # LayerNorm: nothing to report
    assert stand_in_flashinfer, "the compiled graph did not call the (stand-in) FlashInfer kernel"
    table = str(rep)
    assert "flashinfer" in table and "weight is float32, input bfloat16" in table
    assert "op / found" in table.splitlines()[1]
    # explain() returns this compile's reports only, and compiles again when asked again
    again = explain(m, x, dry_run=True, options={"provider": "flashinfer"})
    assert len(again) == 1 and again[0].graph_id != rep[0].graph_id
    assert [(n.what, n.reason) for n in again.near_misses] == [(miss.what, miss.reason)]
    # Not forced: the platform order (flashinfer, then triton) takes both; the report says why not FlashInfer
    auto = explain(m, x, dry_run=True)
    assert sorted(mm.provider for mm in auto.matches) == ["flashinfer", "triton"] and not auto.near_misses
    (fallback,) = [mm for mm in auto.matches if mm.provider == "triton"]
    assert "flashinfer: weight is float32, input bfloat16" in fallback.note and fallback.note in str(auto)


def test_report_json_round_trip():
    rep = explain(_ThreeNorms().eval(), torch.randn(2, 4, 16, dtype=torch.bfloat16), dry_run=True,
                  options={"provider": "reference"})
    assert rep.count("rms_norm") == 2
    text = rep.to_json()
    back = Report.from_json(text)
    assert back == rep and back.to_json() == text and str(back) == str(rep)
    assert isinstance(back[0], GraphReport) and type(back[0].matches[0]) is type(rep[0].matches[0])
    d = {**rep[0].to_dict(), "added_in_a_later_version": 1}
    assert GraphReport.from_dict(d) == rep[0]  # unknown keys are ignored
    with pytest.raises(TypeError):
        Report.from_json(json.dumps({"graph_id": 0}))


def test_explain_rejects_other_backend():
    with pytest.raises(ValueError, match="rocm_fused"):
        explain(torch.sin, torch.ones(2), backend="inductor")


def _cli(extra_env: dict[str, str], *args: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "TORCH_LOGS"}
    # The repo root first: rocm_fused.py (what makes TORCH_LOGS=+rocm_fused valid) even without reinstalling.
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    env.update(extra_env)
    cmd = [sys.executable, "-m", "rocm_inductor", "explain",
           str(REPO / "examples" / "explain_tiny_llama.py") + ":mixed_norms", "--provider", "reference",
           "--dry-run", *args]
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_cli_table_json_and_torch_logs():
    """One CLI run per setting, in parallel: default (table on stdout, nothing logged) and with
    TORCH_LOGS=+rocm_fused (INFO summary + DEBUG per-match lines on stderr; --json on stdout)."""
    quiet = _cli({})
    loud = _cli({"TORCH_LOGS": "+rocm_fused"}, "--json")
    q_out, q_err = quiet.communicate(timeout=300)
    l_out, l_err = loud.communicate(timeout=300)
    assert quiet.returncode == 0, q_err
    assert loud.returncode == 0, l_err
    lines = q_out.splitlines()
    assert lines[0].startswith("rocm_fused graph 0") and "rms_norm[reference]x2" in lines[0]
    assert "op / found" in lines[1] and sum(ln.lstrip().startswith("match") for ln in lines) == 2
    assert "explain_tiny_llama.py:" in q_out
    assert "rocm_fused graph" not in q_err and "match rms_norm" not in q_err  # silent by default

    rep = Report.from_json(l_out)
    assert rep.count("rms_norm") == 2
    info = [ln for ln in l_err.splitlines() if ln.startswith("I") and "rocm_fused graph 0" in ln]
    debug = [ln for ln in l_err.splitlines() if ln.startswith("V") and "match rms_norm rms_norm" in ln]
    assert len(info) == 1 and len(debug) == 2, l_err[-3000:]


def test_location_is_the_models_line_not_torchs():
    """``torch.nn.RMSNorm`` runs its math in torch/nn/functional.py: the report names the model's line."""

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = torch.nn.RMSNorm(16, eps=1e-6)

        def forward(self, x):
            return self.norm(x)  # the line the report must name

    m, x = M().eval(), torch.randn(2, 16)
    rep = explain(m, x, options={"provider": "reference"})
    (match,) = rep.matches
    assert match.location.startswith("test_inspection.py:"), match.location


def _write_target(tmp_path, body: str) -> str:
    path = tmp_path / "target.py"
    path.write_text(body)
    return str(path)


@pytest.mark.parametrize("target,msg", [
    ("{dir}/nope.py:fn", "no such file"),
    ("{file}", "expected path/to/script.py:function"),
    ("{file}:missing", "has no function 'missing'"),
    ("{file}:needs_args", "must take no arguments"),
    ("{file}:bad_return", "must return (model_or_step_fn, example_inputs)"),
    ("{file}:bad_kwargs", "its third item is a str"),
])
def test_cli_bad_target_exits_2_with_one_line(tmp_path, capsys, target, msg):
    """Issue 17: a bad ``path:function`` exited 1, a function needing arguments gave a raw traceback."""
    from rocm_inductor.__main__ import main

    file = _write_target(tmp_path, "def needs_args(n):\n    return n\n\ndef bad_return():\n    return 1\n\n"
                                   "def bad_kwargs():\n    return print, (1,), 'max-autotune'\n")
    rc = main(["explain", target.format(dir=tmp_path, file=file)])
    err = capsys.readouterr().err
    assert rc == 2 and msg in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("args,msg", [
    (["--options", '{"bogus": 1}'], "unknown option(s) ['bogus']"),
    (["--provider", "nope"], "option provider='nope' is not one of"),
    (["--mode", "fast"], "unknown mode 'fast'"),
    (["--options", "{not json"], "--options is not JSON"),
])
def test_cli_bad_options_exit_2_with_one_line(tmp_path, capsys, args, msg):
    """An unknown option key, provider or mode gave a 50-line Dynamo traceback and exit status 1."""
    from rocm_inductor.__main__ import main

    file = _write_target(tmp_path, "import torch\n\ndef fn():\n    return torch.nn.RMSNorm(8), (torch.ones(2, 8),)\n")
    with pytest.raises(SystemExit) if "JSON" in msg else contextlib.nullcontext() as exit_:
        rc = main(["explain", f"{file}:fn", "--dry-run", *args])
    rc = exit_.value.code if exit_ is not None else rc
    err = capsys.readouterr().err
    assert rc == 2 and msg in err and "Traceback" not in err, err
    assert len([ln for ln in err.strip().splitlines() if "error:" in ln]) == 1, err


def test_explain_raises_bad_options_itself_and_names_the_backend():
    """explain() validates options/mode before compiling (a ValueError, not Dynamo's wrapped
    BackendCompilerFailed at the first call); the backend it hands Dynamo is named like ours."""
    from rocm_inductor.inspection import _dry_run_backend, _real_backend

    with pytest.raises(ValueError, match=r"unknown option\(s\) \['bogus'\]"):
        explain(torch.sin, torch.ones(2), options={"bogus": 1})
    with pytest.raises(ValueError, match="unknown mode"):
        explain(torch.sin, torch.ones(2), mode="fast")
    with pytest.raises(ValueError, match="pass mode or options, not both"):
        explain(torch.sin, torch.ones(2), mode="max-autotune", options={"level": 2})
    assert _real_backend(None, None).__name__ == "rocm_fused" == _dry_run_backend(None, None).__name__


def test_report_providers_over_graphs():
    """``explain()`` / ``reports()`` return a Report: ``providers()`` works on it as on one graph's report."""
    rep = explain(_ThreeNorms().eval(), torch.randn(2, 4, 16, dtype=torch.bfloat16), dry_run=True,
                  options={"provider": "reference"})
    assert rep.providers() == {"rms_norm": ["reference"]} == rep[0].providers()
    two = Report([rep[0], GraphReport(graph_id=9, matches=[Match("rope", "rope", "triton")])])
    assert two.providers() == {"rms_norm": ["reference"], "rope": ["triton"]}
    assert Report().providers() == {}


def test_report_groups_identical_gemm_lines_and_counts_them():
    """Issue 17: max-autotune's header said "no rewrites" above 15 identical GEMM lines."""
    from rocm_inductor.report import GemmChoice

    same = dict(op="mm", m="1", m_upper=1, aten_only=True, reason="M <= 32", offered=["aten_mm", "triton_mm"],
                kept=["aten_mm"])
    rep = GraphReport(0, "cpu", gemms=[GemmChoice(**same) for _ in range(15)]
                      + [GemmChoice(**{**same, "m": "512", "m_upper": 512, "aten_only": False,
                                       "kept": ["aten_mm", "triton_mm"]})])
    lines = str(rep).splitlines()
    assert lines[0].endswith("no rewrites; 16 GEMM(s): 15 ATen only, 1 tuned"), lines[0]
    assert len(lines) == 3 and lines[1].startswith("  15 x gemm mm M=1 -> ATen only") and "M=512" in lines[2]


def test_symbolic_sizes_print_as_inductor_names_them():
    from rocm_inductor.report import shape_str

    assert shape_str(["2", "4", "s81", "32"]) == "(2, 4, s81, 32)" and shape_str([7]) == "(7,)"

    def f(x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)

    _, seen = compile_run(f, torch.randn(3, 5, 16), dynamic=True)
    (m,) = seen[-1].report.matches
    assert m.shape.startswith("(s") and m.shape.count(", s") == 2 and "x" not in m.shape, m.shape
