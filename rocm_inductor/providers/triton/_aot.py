"""Ahead-of-time compiles of our Triton kernels for AMD (gfx942, gfx950) and NVIDIA (sm_90) without a GPU.

Each kernel module under ``rocm_inductor.providers.triton`` defines ``aot_cases() -> list[dict]``: the
configs and specialisations its launcher picks at typical sizes, each ``{"name", "fn", "signature",
"constexprs", "num_warps"}`` plus optional keys

- ``"targets"``: target names (keys of :data:`TARGETS`) the case is compiled for (default: all). A config
  the launcher prunes on ROCm (``num_warps * 64 > 1024``) names only ``"sm_90"``.
- ``"known_spill"``: a sentence; the spill checks report the case instead of failing on it.
- ``"options"``: extra compile options the launcher passes (e.g. ``{"enable_fp_fusion": False}``).
- ``"attrs"``: ``{param: [["tt.divisibility", 16]]}``; by default every pointer gets divisibility 16
  (torch allocations are 16-byte aligned, as Triton's launcher specialises them).

:func:`compile_case` calls ``triton.compile(ASTSource(fn, signature, constexprs, attrs),
target=GPUTarget(...))``, which works on a CPU-only machine (docs/vendors.md "Triton on AMD": lld is inside
libtriton) with triton 3.6 (torch 2.11), 3.7 (torch 2.13) and 3.9: their ``ASTSource`` takes a name-keyed
signature that includes the constexpr parameters as ``"constexpr"``, name-keyed constexprs and index-keyed
attrs. Resources read back:

- AMD: the AMDGCN text's metadata note (``.vgpr_count``, ``.sgpr_count``, ``.vgpr_spill_count``,
  ``.sgpr_spill_count``, ``.private_segment_fixed_size`` = scratch bytes per lane,
  ``.group_segment_fixed_size`` = LDS bytes, ``.max_flat_workgroup_size``).
- sm_90: ``metadata.shared`` (bytes), and ``cuobjdump --dump-resource-usage`` of the cubin (``REG``,
  ``STACK`` = local-memory bytes per thread: spills); Triton ships cuobjdump in its NVIDIA backend.
  (``metadata.n_regs`` / ``n_spills`` are filled only when a driver loads the kernel; the bundled ptxas
  may not read the PTX version Triton emits, so the cubin is read instead.)

Results are cached as JSON under :func:`cache_dir`, keyed by the hash of the kernel module's source (a
package's: all its files), the case and the Triton version, so a second run compiles only what changed; misses
compile in :func:`jobs` processes. Run ``python -m rocm_inductor.providers.triton._aot`` (or
``scripts/aot_report.py``) for the table. This must run with
``TRITON_INTERPRET`` unset (an interpreted function cannot be compiled): the CI test starts a subprocess.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import inspect
import json
import os
import pkgutil
import re
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

#: name -> (backend, arch, warp size, LDS / shared-memory bytes a work-group may use). LDS: 64 KiB on
#: gfx942 (MI300), 160 KiB on gfx950 (MI355) (docs/vendors.md "Triton on AMD"); sm_90: 227 KiB opt-in shared
#: memory per block (the 228 KiB per SM less 1 KiB the driver reserves; CUDA programming guide, H100).
TARGETS: dict[str, tuple[str, Any, int, int]] = {
    "gfx942": ("hip", "gfx942", 64, 64 * 1024),
    "gfx950": ("hip", "gfx950", 64, 160 * 1024),
    "sm_90": ("cuda", 90, 32, 227 * 1024),
}
#: Threads per work-group (block) both vendors launch at most.
MAX_THREADS = 1024
_PKG = "rocm_inductor.providers.triton"


def kernel_modules() -> list[str]:
    """Names of the modules of this package (not starting with ``_``), sorted."""
    pkg = importlib.import_module(_PKG)
    return sorted(f"{_PKG}.{m.name}" for m in pkgutil.iter_modules(pkg.__path__) if not m.name.startswith("_"))


def discover() -> list[tuple[str, dict[str, Any]]]:
    """``(module name, case)`` for every case of every module that defines ``aot_cases()``."""
    out = []
    for name in kernel_modules():
        mod = importlib.import_module(name)
        fn = getattr(mod, "aot_cases", None)
        if callable(fn):
            out.extend((name, case) for case in fn())
    return out


def cache_dir() -> str:
    """``$ROCM_INDUCTOR_AOT_CACHE``, else ``$XDG_CACHE_HOME/rocm_inductor/aot`` (``~/.cache`` default)."""
    d = os.environ.get("ROCM_INDUCTOR_AOT_CACHE")
    if not d:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        d = os.path.join(base, "rocm_inductor", "aot")
    return d


def _jit_fn(fn: Any) -> Any:
    """The ``JITFunction`` to compile (an autotuner or heuristics wrapper is unwrapped)."""
    while not hasattr(fn, "arg_names") and hasattr(fn, "fn"):
        fn = fn.fn
    return fn


def _module_source(module: str) -> str:
    """The module's source; for a package (``sampling/``), that of every ``.py`` file under it, by path, so an edit
    to a kernel in a submodule changes :func:`case_key`."""
    mod = sys.modules[module]
    if not hasattr(mod, "__path__"):
        return inspect.getsource(mod)
    root = mod.__path__[0]
    paths = sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f.endswith(".py"))
    parts = []
    for path in paths:
        with open(path) as fh:
            parts.append(f"# {os.path.relpath(path, root)}\n{fh.read()}")
    return "\n".join(parts)


def case_key(module: str, case: dict[str, Any], target: str) -> str:
    """sha256 of the module's source (a package's: every file of it), the case's compile inputs, the target and the
    Triton version."""
    import triton

    src = _module_source(module)
    desc = {k: case.get(k) for k in ("name", "signature", "constexprs", "num_warps", "attrs", "options")}
    desc["fn"] = _jit_fn(case["fn"]).__name__
    blob = json.dumps([src, desc, target, triton.__version__], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def _source(fn, signature, constexprs, attrs):
    from triton.compiler import ASTSource

    names = list(fn.arg_names)
    if sorted(signature) != sorted(names):
        raise ValueError(f"{fn.__name__}: signature keys {sorted(set(signature) ^ set(names))} differ from its "
                         "parameters")
    signature = {k: signature[k] for k in names}  # in parameter order
    params = inspect.signature(ASTSource.__init__).parameters
    if "constexprs" in params:  # triton >= 3.2 (3.6, 3.7, 3.9 seen): name-keyed signature with constexprs
        return ASTSource(fn, signature, constexprs, attrs)
    # older releases: index-keyed signature without the constexprs, index-keyed constants
    sig = {names.index(k): v for k, v in signature.items() if v != "constexpr"}
    consts = {names.index(k): v for k, v in constexprs.items()}
    return ASTSource(fn, sig, consts)


def _attrs(fn, case: dict[str, Any]) -> dict:
    names = fn.arg_names
    given = case.get("attrs")
    if given is None:
        given = {k: [["tt.divisibility", 16]] for k, v in case["signature"].items() if v.startswith("*")}
    return {(names.index(k),): v for k, v in given.items()}


def _amd_resources(text: str) -> dict[str, Any]:
    def field(key: str) -> int | None:
        m = re.search(rf"\.{key}:\s+(\d+)", text)
        return int(m.group(1)) if m else None

    return {"vgpr": field("vgpr_count"), "sgpr": field("sgpr_count"), "vgpr_spill": field("vgpr_spill_count"),
            "sgpr_spill": field("sgpr_spill_count"), "scratch": field("private_segment_fixed_size"),
            "lds": field("group_segment_fixed_size"), "max_threads": field("max_flat_workgroup_size")}


def _cuobjdump() -> str | None:
    """Triton's bundled ``cuobjdump`` (NVIDIA backend ``bin/``), else one on PATH or in /usr/local/cuda."""
    try:
        import triton.backends.nvidia as nv

        cand = os.path.join(os.path.dirname(nv.__file__), "bin", "cuobjdump")
        if os.access(cand, os.X_OK):
            return cand
    except ImportError:
        pass
    for cand in (shutil.which("cuobjdump"), "/usr/local/cuda/bin/cuobjdump"):
        if cand and os.access(cand, os.X_OK):
            return cand
    return None


def _nvidia_resources(cubin: bytes) -> dict[str, Any]:
    """``cuobjdump --dump-resource-usage`` of the cubin: registers and stack bytes (spills / local arrays).

    Without cuobjdump both stay ``None`` (the spill check is then skipped for sm_90, and says so).
    """
    out: dict[str, Any] = {"regs": None, "stack": None}
    exe = _cuobjdump()
    if exe is None:
        return out
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "k.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        r = subprocess.run([exe, "--dump-resource-usage", path], capture_output=True, text=True)
    m = re.search(r"REG:(\d+) STACK:(\d+)", r.stdout)
    if m:
        out["regs"], out["stack"] = int(m.group(1)), int(m.group(2))
    return out


def compile_case(case: dict[str, Any], target: str) -> dict[str, Any]:
    """Compile one case for ``target`` (a key of :data:`TARGETS`); returns its resources.

    Returns:
        dict with ``threads`` (num_warps * warp size), ``seconds`` (compile wall time), and per vendor the
        fields described in the module docstring (AMD: vgpr, sgpr, vgpr_spill, sgpr_spill, scratch, lds,
        max_threads; sm_90: regs, stack, shared).

    Raises:
        Whatever ``triton.compile`` raises (a kernel that does not build for the target).
    """
    import triton
    from triton.backends.compiler import GPUTarget

    backend, arch, warp, _ = TARGETS[target]
    fn = _jit_fn(case["fn"])
    src = _source(fn, case["signature"], case.get("constexprs", {}), _attrs(fn, case))
    t0 = time.perf_counter()
    k = triton.compile(src, target=GPUTarget(backend, arch, warp),
                       options={"num_warps": case["num_warps"], "num_stages": case.get("num_stages", 1),
                                **case.get("options", {})})
    res: dict[str, Any] = {"threads": case["num_warps"] * warp}
    if backend == "hip":
        res.update(_amd_resources(k.asm["amdgcn"]))
    else:
        res.update(_nvidia_resources(k.asm["cubin"]))
        res["shared"] = int(getattr(k.metadata, "shared", 0) or 0)
    res["seconds"] = round(time.perf_counter() - t0, 2)
    return res


@functools.cache
def _cases() -> tuple[tuple[str, dict[str, Any]], ...]:
    return tuple(discover())


def _compile_indexed(job: tuple[int, str]) -> dict[str, Any]:
    """Worker: compile case number ``job[0]`` of :func:`discover` for target ``job[1]``."""
    _, case = _cases()[job[0]]
    try:
        return compile_case(case, job[1])
    except Exception as e:  # reported, the test fails on it
        return {"error": f"{type(e).__name__}: {e}"[:2000]}


def jobs() -> int:
    """Compile processes: ``$ROCM_INDUCTOR_AOT_JOBS``, else min(2, CPUs) (CI has 2 cores)."""
    return max(1, int(os.environ.get("ROCM_INDUCTOR_AOT_JOBS") or min(2, os.cpu_count() or 1)))


def run_all(targets: list[str] | None = None, use_cache: bool = True) -> list[dict[str, Any]]:
    """Compile every discovered case for ``targets`` (default all); one record per (case, target).

    A record holds ``module``, ``case``, ``target``, ``num_warps``, ``known_spill``, ``cached`` (served
    from the cache) and either the resources of :func:`compile_case` or ``error`` (the exception text).
    Cache misses compile in :func:`jobs` processes.
    """
    targets = targets or list(TARGETS)
    cdir = cache_dir()
    records, todo = [], []
    for i, (module, case) in enumerate(_cases()):
        for target in targets:
            if target not in case.get("targets", TARGETS):
                continue
            rec = {"module": module.rsplit(".", 1)[-1], "case": case["name"], "target": target,
                   "num_warps": case["num_warps"], "known_spill": case.get("known_spill")}
            path = os.path.join(cdir, case_key(module, case, target) + ".json")
            if use_cache and os.path.exists(path):
                with open(path) as f:
                    rec.update(json.load(f), cached=True)
            else:
                todo.append((len(records), (i, target), path))
            records.append(rec)
    n = jobs()
    if n > 1 and len(todo) > 1:
        import multiprocessing

        with multiprocessing.get_context("spawn").Pool(n) as pool:
            results = pool.map(_compile_indexed, [job for _, job, _ in todo], chunksize=1)
    else:
        results = [_compile_indexed(job) for _, job, _ in todo]
    for (idx, _, path), res in zip(todo, results):
        records[idx].update(res, cached=False)
        if use_cache and "error" not in res:
            os.makedirs(cdir, exist_ok=True)
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "w") as f:
                json.dump(res, f)
            os.replace(tmp, path)
    return records


def problems(rec: dict[str, Any], spills: bool = True) -> list[str]:
    """What is wrong with one record: build error, > 1024 threads, LDS/shared over the limit, spills.

    ``spills=False`` leaves out the spill/scratch checks (cases with ``known_spill``).
    """
    if "error" in rec:
        return [f"does not compile: {rec['error']}"]
    _, _, _, lds_limit = TARGETS[rec["target"]]
    out = []
    if rec["threads"] > MAX_THREADS:
        out.append(f"{rec['threads']} threads per work-group > {MAX_THREADS}")
    if rec.get("max_threads") is not None and rec["threads"] > rec["max_threads"]:
        out.append(f"binary allows {rec['max_threads']} threads, launch needs {rec['threads']}")
    used = rec.get("lds", rec.get("shared")) or 0
    if used > lds_limit:
        out.append(f"{used} B LDS/shared > {lds_limit} B")
    if spills:
        for key in ("scratch", "vgpr_spill", "sgpr_spill", "stack"):
            if rec.get(key):
                out.append(f"{key} = {rec[key]}")
    return out


def table(records: list[dict[str, Any]]) -> str:
    """A Markdown table: one row per (kernel case, target)."""
    head = ("| module | case | target | warps | regs (VGPR/SGPR; sm_90 REG) | spills (VGPR/SGPR) "
            "| scratch or stack B | LDS/shared B | compile s |")
    lines = [head, "|" + "---|" * 9]
    for r in records:
        if "error" in r:
            lines.append(f"| {r['module']} | {r['case']} | {r['target']} | {r['num_warps']} | error | | | | |")
            continue
        if r["target"].startswith("gfx"):
            regs = f"{r['vgpr']}/{r['sgpr']}"
            spill = f"v{r['vgpr_spill']} s{r['sgpr_spill']}"
            scratch, mem = r["scratch"], r["lds"]
        else:
            regs = "n/a" if r["regs"] is None else str(r["regs"])
            spill = "-"
            scratch, mem = "n/a" if r["stack"] is None else r["stack"], r["shared"]
        secs = "cached" if r.get("cached") else r["seconds"]
        lines.append(f"| {r['module']} | {r['case']} | {r['target']} | {r['num_warps']} | {regs} | {spill} | "
                     f"{scratch} | {mem} | {secs} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """CLI: ``[--json PATH] [--no-cache] [--targets gfx942,gfx950,sm_90]``; prints the table."""
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--json", help="write the records here")
    ap.add_argument("--no-cache", action="store_true")
    ap.add_argument("--targets", default=",".join(TARGETS))
    a = ap.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET", "0") == "1":
        print("TRITON_INTERPRET=1: interpreted kernels cannot be compiled; unset it", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    recs = run_all(a.targets.split(","), use_cache=not a.no_cache)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(recs, f, indent=1)
    print(table(recs))
    print(f"\n{len(recs)} compiles in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
