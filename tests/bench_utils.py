"""Load a benchmark script (benchmarks/*.py, not a package) as a module for CPU tests."""

from __future__ import annotations

import importlib.util
import pathlib
import sys
from types import ModuleType

BENCH = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"


def load_bench(filename: str) -> ModuleType:
    """The module of ``benchmarks/<filename>``, imported by path (its own folder on ``sys.path`` meanwhile,
    for the scripts' ``hf_models`` / ``timing`` imports).

    Raises:
        FileNotFoundError: no such script.
    """
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location(f"_bench_{pathlib.Path(filename).stem}", BENCH / filename)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    finally:
        sys.path.remove(str(BENCH))
