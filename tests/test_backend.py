"""The backend: found by name in a fresh process, options validated, FX graph cache hits, fail-safe."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from graph_utils import compile_run
from norm_spellings import SPELLINGS, Single

import rocm_inductor.passes.rms_norm as rms_norm_pass
from rocm_inductor.backend import resolve

FRESH = textwrap.dedent("""
    import json, sys, torch
    from torch._dynamo.utils import counters
    assert "rocm_inductor" not in sys.modules
    torch.manual_seed(0)  # seeded: the same inputs in both processes and every run
    w = torch.randn(64, dtype=torch.bfloat16)
    def f(x):
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-5)
        return w * h.to(x.dtype)
    x = torch.randn(4, 64, dtype=torch.bfloat16)
    with torch.no_grad():
        y = torch.compile(f, backend="rocm_fused", options={"provider": "reference"})(x)
    import rocm_inductor
    rep = rocm_inductor.reports()
    ref = f(x).float()
    # error in bf16 ulps of the eager value (one ulp at |x| in [8, 16) is 0.0625: an absolute bound can't hold)
    ulp = torch.finfo(torch.bfloat16).eps * torch.exp2(torch.floor(torch.log2(ref.abs().clamp_min(1e-30))))
    print(json.dumps({"hit": counters["inductor"]["fxgraph_cache_hit"],
                      "miss": counters["inductor"]["fxgraph_cache_miss"],
                      "matches": rep.count("rms_norm"), "ulps": float(((y.float() - ref).abs() / ulp).max()),
                      "cached": [g.cached for g in rep], "table": [str(g).splitlines()[1:] for g in rep]}))
""")


def _fresh(cache_dir) -> dict:
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache_dir), "TORCHINDUCTOR_FX_GRAPH_CACHE": "1"}
    env.pop("TORCHINDUCTOR_FORCE_DISABLE_CACHES", None)
    out = subprocess.run([sys.executable, "-c", FRESH], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_backend_by_name_in_fresh_process_and_fx_cache_hit(tmp_path):
    first = _fresh(tmp_path)
    assert first["miss"] >= 1 and first["hit"] == 0 and first["matches"] == 1 and first["ulps"] <= 1
    second = _fresh(tmp_path)
    # served from Inductor's FX graph cache: our pass did not run, the result is right, and the report is
    # the cold compile's, marked cached (issue 17)
    assert second["hit"] >= 1 and second["miss"] == 0 and second["ulps"] <= 1
    assert second["matches"] == 1 and second["cached"] == [True] and first["cached"] == [False]
    assert second["table"] == first["table"]


def test_providers_keys_are_validated_and_a_pass_name_covers_its_ops():
    """Issue 17: an unknown op name raised nothing; ``{"rms_norm": ...}`` did not reach fused add + norm."""
    for bad in ("rmsnorm", "sample_op"):
        with pytest.raises(ValueError, match=r"unknown op name\(s\) .*valid names are \[.*'fused_add_rms_norm'"):
            resolve(None, {"providers": {bad: "reference"}})
    opts = resolve(None, {"providers": {"rms_norm": "reference", "sampling": "triton"}})[0]
    assert opts.provider_for("fused_add_rms_norm") == "reference" and opts.provider_for("rms_norm") == "reference"
    assert opts.provider_for("sample") == "triton" and opts.provider_for("rope") is None
    opts = resolve(None, {"providers": {"rms_norm": "reference", "fused_add_rms_norm": "triton"}})[0]
    assert opts.provider_for("fused_add_rms_norm") == "triton"  # an op named itself wins over its pass


def test_rms_norm_provider_setting_keeps_the_fused_add():
    def f(x, r, w):
        h = x + r
        return w * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)), h

    x, r, w = torch.randn(4, 64), torch.randn(4, 64), torch.randn(64)
    _, seen = compile_run(f, x, r, w, options={"provider": None, "providers": {"rms_norm": "reference"}})
    rep = seen[-1].report
    assert rep.count("fused_add_rms_norm") == 1 and rep.count("rms_norm") == 0, rep


def test_cpu_off_hint_names_a_provider_that_works_there():
    from rocm_inductor.options import parse_options
    from rocm_inductor.passes.manager import PassManager

    _, skipped = PassManager(parse_options(None)).enabled("cpu")
    assert "'providers': {'rms_norm': 'reference'}" in skipped["rms_norm"], skipped
    assert "'passes': {'rms_norm': True}" not in skipped["rms_norm"]
    _, skipped = PassManager(parse_options(None)).enabled("cuda")  # a default provider exists there
    assert "'passes': {'rope': True}" in skipped["rope"]


def test_unknown_option_lists_valid_ones():
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['levle'\]; valid options are \['level'"):
        resolve(None, {"levle": 2})
    with pytest.raises(ValueError, match="provider='cuda'"):
        resolve(None, {"provider": "cuda"})
    with pytest.raises(ValueError, match="unknown mode"):
        resolve("fastest", None)
    for bad in (True, 2.0, "2"):
        with pytest.raises(ValueError, match="level="):
            resolve(None, {"level": bad})


def test_modes_map_onto_levels():
    assert resolve(None, None)[0].level == 1
    assert resolve("reduce-overhead", None)[1].get("triton.cudagraphs") is True
    opts, patches = resolve("max-autotune", None)
    assert opts.level == 2 and patches.get("max_autotune") is True
    assert resolve(None, {"level": 0})[1].get("post_grad_custom_pre_pass") is None


def test_inductor_config_patches_win_over_the_level():
    opts, patches = resolve("max-autotune", {"inductor_config": {"coordinate_descent_tuning": False,
                                                                 "triton.cudagraphs": False}})
    assert patches["coordinate_descent_tuning"] is False and patches["triton.cudagraphs"] is False
    assert patches["max_autotune"] is True  # the rest of the level stays
    assert opts.inductor_config == (("coordinate_descent_tuning", False), ("triton.cudagraphs", False))
    hash(opts)  # still usable as a cache-key part
    assert "coordinate_descent_tuning" not in resolve(None, None)[1]


@pytest.mark.parametrize("bad,match", [
    ({"coordinate_descent_tunning": False}, r"unknown Inductor config name\(s\) \['coordinate_descent_tunning'\]"),
    ({"post_grad_custom_pre_pass": None}, "may not set"),
    ({"max_autotune_gemm_backends": ["ATEN"]}, "must be hashable"),
    (["coordinate_descent_tuning"], "must be a dict"),
])
def test_inductor_config_rejects_bad_patches(bad, match):
    with pytest.raises(ValueError, match=match):
        resolve(None, {"inductor_config": bad})


@pytest.mark.slow
def test_inductor_config_reaches_the_compile():
    from torch._inductor import config as inductor_config

    seen = {}

    def user_pass(graph):  # runs inside compile_fx, under the config patches
        seen["cdt"] = inductor_config.coordinate_descent_tuning

    with inductor_config.patch(post_grad_custom_pre_pass=user_pass):
        torch.compile(lambda x: x.sin() + 1, backend="rocm_fused",
                      options={"inductor_config": {"coordinate_descent_tuning": True}})(torch.randn(8))
    assert seen == {"cdt": True}


def test_cache_key_covers_options():
    a = resolve(None, {"provider": "reference"})[1]["post_grad_custom_pre_pass"].uuid()
    b = resolve(None, {"provider": "triton"})[1]["post_grad_custom_pre_pass"].uuid()
    c = resolve(None, {"provider": "reference"})[1]["post_grad_custom_pre_pass"].uuid()
    assert a != b and a == c


def test_cache_key_covers_the_measured_tables():
    """The shipped decisions decide which merges and folds are taken: an edit must not reuse a cached graph."""
    from rocm_inductor.passes.manager import source_files

    names = {p.name for p in source_files()}
    assert {"nvidia_h200.json", "manager.py"} <= names


def _boom(*a, **k):
    raise RuntimeError("pass exploded")


def test_failing_pass_warns_and_compiles_untouched(monkeypatch, caplog):
    monkeypatch.setattr(rms_norm_pass.RMSNormPass, "__call__", lambda self, g, ctx: _boom())
    m = Single(SPELLINGS["hf_llama"]().to(torch.bfloat16))
    x = torch.randn(3, 64, dtype=torch.bfloat16)
    with caplog.at_level("WARNING", logger="rocm_inductor"):
        out, (g,) = compile_run(m, x, x, options={"strict": False})
    assert g.after == g.before
    assert "pass exploded" in g.report.error
    assert any("compiling this graph without our rewrites" in r.message for r in caplog.records)
    torch.testing.assert_close(out, m(x, x))


def test_failing_pass_raises_under_strict(monkeypatch):
    monkeypatch.setattr(rms_norm_pass.RMSNormPass, "__call__", lambda self, g, ctx: _boom())
    m = Single(SPELLINGS["hf_llama"]().to(torch.bfloat16))
    x = torch.randn(3, 64, dtype=torch.bfloat16)
    with pytest.raises(Exception, match="pass exploded"):
        compile_run(m, x, x, options={"strict": True})


def test_level_0_is_plain_inductor():
    m = Single(SPELLINGS["hf_llama"]().to(torch.bfloat16))
    x = torch.randn(3, 64, dtype=torch.bfloat16)
    out, seen = compile_run(m, x, x, options={"level": 0})
    assert seen == []  # no pass manager installed at all
    torch.testing.assert_close(out, m(x, x))


def test_user_post_grad_pre_pass_is_chained_not_replaced():
    """A ``post_grad_custom_pre_pass`` the user set runs first on every graph, then ours; its uuid joins
    the cache key, and one without a uuid turns caching off (Inductor's own rule)."""
    from torch._inductor.custom_graph_pass import CustomGraphPass

    from rocm_inductor.backend import PASS_HOOK, resolve

    seen = []

    class UserPass(CustomGraphPass):
        def __call__(self, graph):
            seen.append(sum(1 for n in graph.nodes if n.op == "call_function"))

        def uuid(self):
            return "user-pass-v1"

    norm = SPELLINGS["hf_llama"]().to(torch.bfloat16)
    x = torch.randn(3, 64, dtype=torch.bfloat16)
    with torch._inductor.config.patch({PASS_HOOK: UserPass()}):
        _, (g,) = compile_run(Single(norm), x, x)
        _, patches = resolve(None, {"provider": "reference"})
        mine = patches[PASS_HOOK]
        assert isinstance(mine.user_pass, UserPass) and mine.uuid() is not None
    assert seen, "the user's pass did not run"
    assert g.after["rocm_fused.rms_norm.default"] == 1  # ours still ran after it
    with torch._inductor.config.patch({PASS_HOOK: lambda graph: None}):
        _, patches = resolve(None, {"provider": "reference"})
        assert patches[PASS_HOOK].uuid() is None
    _, patches = resolve(None, {"provider": "reference"})
    assert patches[PASS_HOOK].user_pass is None and patches[PASS_HOOK].uuid() is not None
