"""``python -m rocm_inductor tune SCRIPT_OR_MODULE:FN``: measure a step function's decisions ahead of time.

``FN`` is called with no arguments and returns ``(step_fn, example_args)`` or ``(step_fn, example_args,
compile_kwargs)``, as for ``explain`` (one convention for both commands): ``step_fn`` is the ``nn.Module`` or
function a serving loop compiles, ``example_args`` a tuple of its positional arguments with the shapes it will
run (a decode step per batch bucket: call ``tune`` once per bucket, or return a function that runs every
bucket). ``SCRIPT_OR_MODULE`` is a ``path/to/script.py`` or an importable dotted module name.

The step is compiled with ``backend="rocm_fused"`` at level 2 (max-autotune) and stopped after our passes (no
kernels are generated for the graph itself; ``--full-compile`` does the whole compile): every candidate the
store has no decision for is measured on this GPU (``rocm_inductor.tuning.tuner``) and recorded in the store,
where later compiles (level 1 or 2) of the same shapes read it. A progress line per measurement (a tqdm bar when
tqdm is installed), then a table of the decisions: op, signature, every candidate's time, the winner.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def progress_display(stream: Any = None) -> Iterator[Any]:
    """A progress callback for the tuner: a tqdm bar on ``stream`` (stderr) when tqdm is installed, else one
    plain line per measurement."""
    stream = stream or sys.stderr
    try:
        from tqdm import tqdm
    except ImportError:
        tqdm = None
    if tqdm is not None:
        bar = tqdm(total=None, unit="region", desc="measuring", file=stream, dynamic_ncols=True)

        def step(text: str) -> None:
            bar.set_postfix_str(text[:60])
            bar.update(1)

        try:
            yield step
        finally:
            bar.close()
        return
    count = [0]

    def line(text: str) -> None:
        count[0] += 1
        print(f"[{count[0]}] measuring {text}", file=stream, flush=True)

    yield line


def table(measured: list[Any], skipped: list[tuple[str, str, str]]) -> str:
    """The decisions as a text table (one row per measurement, times fastest first), then what was not measured."""
    rows = [("op", "signature", "candidates (us per call)", "winner")]
    for m in measured:
        d = m.decision
        win = d.winner + (f" {d.config}" if d.config else "")
        refused = "; ".join(f"{k} refused ({v})" for k, v in m.refused.items())
        rows.append((d.op, d.signature, d.times_line() + (f"; {refused}" if refused else ""), win))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    out = ["  ".join(c.ljust(w) for c, w in zip(r[:3], widths, strict=True)) + "  " + r[3] for r in rows]
    seen = set()
    for op, sig, why in skipped:
        if (op, sig) not in seen:
            seen.add((op, sig))
            out.append(f"not measured: {op} {sig}: {why}")
    if not measured and not skipped:
        out.append("nothing to measure: every candidate already has a decision in the store, or no pass found one")
    return "\n".join(out)


def run(model: Any, inputs: tuple, kwargs: dict[str, Any], options: dict[str, Any], store: str | None,
        full: bool) -> str:
    """Compile ``model`` at level 2 on ``inputs`` with the tuner installed; return the decisions' table, or,
    where ``TUNER.available()`` says this process cannot time (no GPU), one line saying why, without compiling.

    Args:
        model / inputs / kwargs: what the target function returned; options: rocm_fused options merged over the
            function's (``level`` is set to 2); store: a store directory (``ROCM_FUSED_TUNING_DIR``) or None for
            the default; full: the whole compile, not only our passes.

    Raises:
        ValueError / TypeError: bad options (from the backend); what the model raises.
    """
    from .. import explain
    from . import store as store_mod
    from .tuner import TUNER

    if store:
        os.environ[store_mod.ROOT_ENV] = store
    why = TUNER.available()
    if why is not None:  # say so before compiling anything: no candidate could be measured
        return f"nothing measured: {why}; the defaults stay (level 1 reads the shipped entries where they exist)"
    opts = {**options, "level": 2}
    kwargs = {k: v for k, v in kwargs.items() if k != "mode"}
    start = len(TUNER.measured), len(TUNER.skipped)
    with progress_display() as step:
        TUNER.progress = step
        try:
            explain(model, *inputs, dry_run=not full, options=opts, **kwargs)
        finally:
            TUNER.progress = None
    return table(TUNER.measured[start[0]:], TUNER.skipped[start[1]:])
