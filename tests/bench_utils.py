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


def hf_models():
    """``benchmarks/hf_models.py`` imported by name (its dataclasses need their module in ``sys.modules``)."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    return importlib.import_module("hf_models")


def greedy_equal(step_e, comp, first, pos: int, batch: int, steps: int, tol: float = 1e-4) -> None:
    """Greedy decode ``steps`` tokens from ``first`` (B, 1) at positions ``pos, pos + 1, ...`` with the eager step
    ``step_e`` and the compiled ``comp`` (both ``hf_models.decode_step`` steps over their own caches): logits within
    ``tol`` of eager's (relative to their max) and equal tokens at every step.

    Raises:
        AssertionError: the step and the error or the differing tokens.
    """
    import torch

    tok_e = tok_c = first
    for i in range(steps):
        p = torch.tensor([pos + i])
        ref = step_e(tok_e, p.expand(batch, 1), p)
        out = comp(tok_c, p.expand(batch, 1), p)
        err = float((out - ref).abs().max() / ref.abs().max())
        assert err < tol, (i, err)
        tok_e, tok_c = ref.argmax(-1), out.argmax(-1)
        assert torch.equal(tok_e, tok_c), (i, tok_e, tok_c)
