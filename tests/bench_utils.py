"""Load a benchmark script (benchmarks/<kind>/*.py, not a package) as a module for CPU tests."""

from __future__ import annotations

import importlib.util
import pathlib
import sys
from types import ModuleType

BENCH = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"


def load_bench(filename: str) -> ModuleType:
    """The module of ``benchmarks/<filename>`` (e.g. ``"ops/bench_attention.py"``), imported by path, with
    ``benchmarks/`` (the shared ``hf_models`` / ``timing`` / ``cli``) and the script's own folder (its sibling
    scripts) on ``sys.path`` meanwhile.

    Raises:
        FileNotFoundError: no such script.
    """
    path = BENCH / filename
    dirs = [str(BENCH), str(path.parent)]
    sys.path[:0] = dirs
    try:
        spec = importlib.util.spec_from_file_location(f"_bench_{path.stem}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    finally:
        for d in dirs:
            sys.path.remove(d)
