"""Every Triton kernel of ours compiled ahead of time for gfx942, gfx950 (wave64) and sm_90, without a GPU.

The cases come from each kernel module's ``aot_cases()`` (``rocm_inductor.providers.triton._aot``): the
configs and specialisations its launcher picks at typical sizes (hidden 4096, head_dim 128, V = 128256 at
B = 1 and 64). Asserted per (case, target): it compiles; ``num_warps * warp size <= 1024`` (a 64-wide
wavefront config over 1024 threads builds but cannot launch); LDS within the arch's limit (64 KiB gfx942,
160 KiB gfx950) and shared memory within sm_90's 227 KiB; no scratch, VGPR/SGPR spill or sm_90 stack
(spill) bytes, except cases that carry ``known_spill`` (listed, not failed).

The compiles run in one subprocess without ``TRITON_INTERPRET`` (conftest turns the interpreter on, and
an interpreted function cannot be compiled), two compile processes, once per run (the ``records`` fixture
shares them between pytest-xdist workers). Results are cached by kernel-source hash (``_aot.cache_dir``, under
the home directory: a clean clone on a machine that ran the suite before starts warm). 2026-12-03, 2-core dev
machine (shared, load ~10-13), triton 3.9.0: 303 compiles (113 cases, most for all three targets); the compile
times recorded in the cache sum to 377 s (sampling 236 s, gemm_kernels 100 s), so a cold run takes about half
that in wall time on two processes; warm 21 s wall.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("triton")
_aot = importlib.import_module("rocm_inductor.providers.triton._aot")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    """Records of ``_aot.run_all()`` for every target, from a subprocess without the interpreter.

    Computed once per run: under pytest-xdist the tests of this module may go to different workers, so the
    first worker writes the records to the run's shared temporary root (under a file lock, the pattern of
    pytest-xdist's docs "Making session-scoped fixtures execute only once") and the others read them.
    """
    from filelock import FileLock  # a dependency of torch

    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    out = shared / "aot_records.json"
    with FileLock(str(out) + ".lock"):
        if not out.exists():
            env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
            env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
            tmp = shared / "aot_records.json.tmp"
            r = subprocess.run([sys.executable, "-m", "rocm_inductor.providers.triton._aot", "--json", str(tmp)],
                               cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
            assert r.returncode == 0, r.stderr[-4000:]
            print(r.stdout)
            tmp.replace(out)
    return json.loads(out.read_text())


def test_every_kernel_module_has_aot_cases():
    """A module of the package that defines a ``@triton.jit`` kernel must list its compile cases."""
    import triton

    kinds = tuple(c for c in (getattr(triton.runtime, "JITFunction", None),
                              getattr(getattr(triton.runtime, "interpreter", None), "InterpretedFunction", None))
                  if c is not None)
    missing = []
    for name in _aot.kernel_modules():
        mod = importlib.import_module(name)
        has_kernel = any(isinstance(v, kinds) for v in vars(mod).values())
        if has_kernel and not callable(getattr(mod, "aot_cases", None)):
            missing.append(name)
    assert not missing, f"kernel modules without aot_cases(): {missing}"


@pytest.mark.parametrize("target", list(_aot.TARGETS))
def test_kernels_compile_within_limits(records, target):
    recs = [r for r in records if r["target"] == target]
    assert recs, f"no case compiled for {target}"
    bad, known = [], []
    for r in recs:
        errs = _aot.problems(r, spills=not r.get("known_spill"))
        if errs:
            bad.append(f"{r['module']} / {r['case']}: {'; '.join(errs)}")
        if r.get("known_spill") and _aot.problems(r):
            known.append(f"{r['case']}: {r['known_spill']}")
    if known:
        print(f"{target}: known spills (not failed):\n  " + "\n  ".join(known))
    assert not bad, f"{target}:\n" + "\n".join(bad)


def test_sigmoid_gate_32_warps_is_nvidia_only(records):
    """The 32-warp config builds for 2048 threads at wave64: it must never be a ROCm case (it is pruned)."""
    wide = [r for r in records if r["module"] == "sigmoid_gate" and r["num_warps"] == 32]
    assert wide and {r["target"] for r in wide} == {"sm_90"}


def test_problems_flags_what_the_issue_found():
    """The checks themselves: 2048 threads, LDS over 64 KiB on gfx942, scratch, sm_90 stack."""
    base = {"target": "gfx942", "threads": 256, "max_threads": 256, "lds": 0, "scratch": 0, "vgpr_spill": 0,
            "sgpr_spill": 0}
    assert _aot.problems(base) == []
    assert "2048 threads" in _aot.problems({**base, "threads": 2048, "max_threads": 1024})[0]
    assert "LDS" in _aot.problems({**base, "lds": 65 * 1024})[0]
    assert _aot.problems({**base, "target": "gfx950", "lds": 65 * 1024}) == []
    assert _aot.problems({**base, "scratch": 112}) == ["scratch = 112"]
    assert _aot.problems({**base, "sgpr_spill": 3}, spills=False) == []
    nv = {"target": "sm_90", "threads": 512, "shared": 1024, "regs": 128, "stack": 888}
    assert _aot.problems(nv) == ["stack = 888"]
