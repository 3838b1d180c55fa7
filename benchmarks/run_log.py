"""The long results files: one CSV per topic under ``benchmarks/results/runs/``, every row tagged with its run.

``runs/runs.csv`` lists every run once, oldest first (``run_id,date,gpu,torch,triton,transformers,flashinfer,
script,what``); ``runs/<topic>.csv`` holds the topic's rows of every run, each row starting with the run's
``run_id,date,gpu,torch,triton,transformers,flashinfer`` and then the topic's own columns. A later run of the
same configuration supersedes an earlier one in the "current" tables of ``benchmarks/RESULTS.md``
(``benchmarks/results_report.py``); the earlier rows stay as history.

A benchmark records a run with :func:`append_run` (after writing its own ``--out`` files), e.g.::

    import run_log  # benchmarks/ is on the path of every benchmark script
    run_log.append_run("rms_norm", rows, script="benchmarks/ops/bench_rms_norm.py", what="RMSNorm kernels")

Values are stored as the strings the benchmark wrote (no reformatting), so a table regenerated from the long
file shows exactly the measured digits.
"""

from __future__ import annotations

import csv
import datetime
import pathlib
from collections.abc import Iterable, Mapping

#: Where the long files live.
RUNS_DIR = pathlib.Path(__file__).resolve().parent / "results" / "runs"
#: Columns every row of a topic file starts with (the run's identity and versions).
META = ("run_id", "date", "gpu", "torch", "triton", "transformers", "flashinfer")
#: Columns of ``runs.csv``.
RUN_COLUMNS = (*META, "script", "what")


def read_csv(path: pathlib.Path) -> tuple[list[str], list[dict[str, str]]]:
    """``(header, rows)`` of a CSV file (rows as str -> str dicts); ``([], [])`` when it does not exist."""
    if not path.exists():
        return [], []
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def write_csv(path: pathlib.Path, header: Iterable[str], rows: Iterable[Mapping[str, object]]) -> None:
    """Write ``rows`` under ``header`` (missing cells empty, ``\\n`` line ends)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, list(header), lineterminator="\n", restval="")
        w.writeheader()
        w.writerows(rows)


def read_runs(runs_dir: pathlib.Path = RUNS_DIR) -> list[dict[str, str]]:
    """Every run of ``runs.csv``, oldest first."""
    return read_csv(runs_dir / "runs.csv")[1]


def read_topic(topic: str, runs_dir: pathlib.Path = RUNS_DIR) -> tuple[list[str], list[dict[str, str]]]:
    """``(header, rows)`` of ``runs/<topic>.csv``."""
    return read_csv(runs_dir / f"{topic}.csv")


def versions() -> dict[str, str]:
    """``gpu`` / ``torch`` / ``triton`` / ``transformers`` / ``flashinfer`` of this process (``"none"`` when a
    library is not importable; ``gpu`` is the CUDA/ROCm device name, or ``"cpu"``)."""
    import importlib

    out: dict[str, str] = {}
    for name in ("torch", "triton", "transformers", "flashinfer"):
        try:
            out[name] = str(importlib.import_module(name).__version__)
        except Exception:  # absent, or fails to import on this machine (the AMD fork on another arch)
            out[name] = "none"
    try:
        import torch

        out["gpu"] = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    except Exception:
        out["gpu"] = "cpu"
    return out


def append_run(topic: str, rows: Iterable[Mapping[str, object]], *, script: str, what: str,
               run_id: str | None = None, date: str | None = None, meta: Mapping[str, str] | None = None,
               runs_dir: pathlib.Path = RUNS_DIR) -> str:
    """Record one run: a line in ``runs.csv`` (unless the id is there already) and its rows in ``<topic>.csv``.

    Args:
        topic: the long file's name (``"sampling"``, ``"decode_gemm"``, ...; see ``results_report.TOPICS``).
        rows: the topic's own columns per row (values are written as ``str``); a column the file lacks is added
            (older rows get it empty).
        script: the command that produced the rows; what: one line saying what the run measured.
        run_id: default ``<UTC date>-<HHMM>-<topic>``; date: default the current UTC time (``YYYY-MM-DD HH:MM``).
        meta: ``gpu`` / ``torch`` / ``triton`` / ``transformers`` / ``flashinfer`` (default :func:`versions`).

    Returns:
        The run id.

    Raises:
        ValueError: a row names a column of :data:`META` (the run supplies those).
    """
    now = datetime.datetime.now(datetime.timezone.utc)
    date = date or now.strftime("%Y-%m-%d %H:%M")
    run_id = run_id or f"{now:%Y-%m-%d-%H%M}-{topic}"
    info = {"run_id": run_id, "date": date, **(dict(meta) if meta is not None else versions())}
    run_head, runs = read_csv(runs_dir / "runs.csv")
    if all(r["run_id"] != run_id for r in runs):
        runs.append({**{k: info.get(k, "") for k in META}, "script": script, "what": what})
        write_csv(runs_dir / "runs.csv", run_head or RUN_COLUMNS, runs)
    head, old = read_topic(topic, runs_dir)
    head = head or list(META)
    new = []
    for row in rows:
        if any(k in META for k in row):
            raise ValueError(f"run_log: rows may not set {[k for k in row if k in META]} (the run supplies them)")
        for k in row:
            if k not in head:
                head.append(k)
        new.append({**{k: info.get(k, "") for k in META}, **{k: str(v) for k, v in row.items()}})
    write_csv(runs_dir / f"{topic}.csv", head, [*old, *new])
    return run_id
