"""Generate ``benchmarks/RESULTS.md``, the fixed-column result CSVs and the charts from the long results files.

Inputs: ``benchmarks/results/runs/*.csv`` (one long file per topic, every row tagged with its run; see
``benchmarks/run_log.py``) and the prose of ``benchmarks/results/notes/*.md`` (one file per section, in file
name order). A notes file is Markdown with directive lines, each on a line of its own:

``{{table TOPIC VIEW [where=COL:V1|V2;COL2:V] [since=DATE] [before=DATE] [columns=C1,C2,...]
[rows=C1,C2 cols=C value=C [order=V1,V2]] [sort=C1,C2] [round=C:N;C2:N]}}``
    A table of TOPIC's rows (quote an argument that holds spaces: ``"where=case:norm ours|floor"``).
    VIEW is ``current`` (per configuration and GPU, the rows of the latest run that measured it: a run on
    another GPU never supersedes a measurement; add ``gpu`` to ``columns`` where two GPUs share a table),
    ``history`` (every measured row that is not current, one table per run, oldest first) or ``run:RUN_ID``
    (that run's rows).
    ``since`` / ``before`` keep rows whose run's date is on or after / before DATE (``YYYY-MM-DD``): a current
    configuration nobody re-measured since the code changed is shown apart. ``columns`` prints those columns;
    ``rows``/``cols``/``value`` print a pivot (one line per distinct ``rows`` tuple, one column per distinct
    ``cols`` value, cells from ``value``; ``order`` puts those column values first). ``sort`` orders the rows
    (numbers numerically; default: the long file's order); ``round`` shows those columns with N decimals (the
    data keeps every digit). Each table is preceded by the run(s) its numbers come from.
``{{chart NAME}}``
    An image link to ``results/charts/NAME.png``, drawn from the current rows (:data:`CHARTS`).

A notes file's text above a line ``<!-- history -->`` goes into RESULTS.md's "Current numbers" part, the rest
into its "History" part, each under the file's first heading; the index of every run comes last.

The fixed-column CSVs (:data:`VIEWS`: ``results/decode_attention.csv``, ``sampling.csv``, ``decode_gemm.csv``)
are written as views of the current rows measured on :data:`VIEW_GPU` (the GPU the issues' numbers name; other
GPUs' rows stay in the long files and the notes' tables); their names and columns are read by outside checks and
never change.

    python benchmarks/results_report.py            # write RESULTS.md, the views and the charts
    python benchmarks/results_report.py --check    # exit 1 if RESULTS.md or a view is not what the data gives
    python benchmarks/results_report.py --no-charts

Charts need matplotlib (``pip install -e ".[bench]"``); without it they are skipped with a warning (RESULTS.md
and the views do not depend on them).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import io
import pathlib
import re
import shlex
import sys
from collections.abc import Callable, Iterable

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))  # run_log.py next to this file
import run_log  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
RESULTS = HERE / "results"
NOTES = RESULTS / "notes"
CHART_DIR = RESULTS / "charts"
OUT_MD = HERE / "RESULTS.md"
#: The GPU whose current rows the fixed-column views hold (the long files' ``gpu``; rows without a GPU, e.g. the
#: CPU's, are not measurements of a view).
VIEW_GPU = "NVIDIA H200"


@dataclasses.dataclass(frozen=True)
class Topic:
    """A long results file: the columns that name a configuration (``key``) and the column(s) whose value makes a
    row a measurement (``value``: a row with all of them empty, e.g. a run skipped by its time budget, is not
    one and never supersedes an earlier measurement)."""

    key: tuple[str, ...]
    value: tuple[str, ...]


TOPICS: dict[str, Topic] = {
    "decode": Topic(("model", "bucket", "max_cache_len", "config"), ("step_us", "sample_step_us")),
    "clients": Topic(("client", "batch", "config"), ("value",)),
    "decode_step": Topic(("model", "batch", "max_cache_len", "sampler", "config"), ("step_us",)),
    "tuning": Topic(("model", "batch", "config"), ("step_us",)),
    "tuning_cost": Topic(("model",), ("compile_s_level2", "compile_s_level2_tuning", "compile_s_level1_warm_store")),
    "moe_decode": Topic(("model", "batch", "config", "experts"), ("step_us",)),
    "moe_experts": Topic(("model", "T", "impl"), ("us",)),
    "decode_attention": Topic(("model", "max_cache_len", "batch", "config"), ("step_us",)),
    "attention_layer": Topic(("model", "max_cache_len", "batch", "heuristic"), ("inductor_us", "ours_us")),
    "attention_sweep": Topic(("model", "max_cache_len", "batch", "block_n", "num_splits"), ("us",)),
    "decode_gemm": Topic(("model", "batch", "config"), ("step_us",)),
    "decode_gemm_layer": Topic(("model", "group", "M"), ("ours_us", "separate_cublas_us")),
    "decode_gemm_sweep": Topic(("model", "group", "M", "config"), ("us",)),
    "read_floor": Topic(("bytes_name", "method", "config"), ("us",)),
    "pdl_floor": Topic(("bytes_name", "method", "config", "pdl"), ("us",)),
    "pdl_gemm": Topic(("case", "producer", "pdl"), ("us", "note")),
    "ipdl_pair": Topic(("case", "inductor_pdl", "our_pdl"), ("us", "note")),
    "pdl_step": Topic(("model", "batch", "config"), ("step_us",)),
    "norm_gemm_pair": Topic(("model", "group", "m", "case"), ("us", "note")),
    "sampling": Topic(("vocab", "batch", "filters", "config"), ("us",)),
    "rms_norm": Topic(("op", "M", "H", "variant"), ("us",)),
    "rope": Topic(("H_q", "H_kv", "D", "tokens", "impl"), ("us",)),
    "sigmoid_gate": Topic(("kind", "tokens", "width", "impl"), ("us",)),
    "gemm_levels": Topic(("config", "bucket"), ("step_us",)),
    "verify_cost": Topic(("model", "layers"), ("level0_s",)),
}


@dataclasses.dataclass(frozen=True)
class View:
    """A fixed-column CSV written from a topic's current rows: ``columns`` in this order, rows where ``where``
    holds, sorted by ``sort`` (``(column, int)`` sorts numerically; empty: the long file's order), lines ending
    in ``newline`` (the file's own: ``decode_attention.csv`` was first written with ``csv``'s ``\r\n``)."""

    topic: str
    columns: tuple[str, ...]
    where: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    sort: tuple[tuple[str, type], ...] = ()
    newline: str = "\n"


VIEWS: dict[str, View] = {
    "decode_attention.csv": View("decode_attention", ("model", "max_cache_len", "batch", "config", "step_us"),
                                 newline="\r\n"),
    "sampling.csv": View("sampling", ("vocab", "batch", "filters", "config", "us"),
                         {"config": ("ours", "eager", "inductor", "flashinfer_0.5.3", "flashinfer_0.6.18.post1"),
                          "batch": ("1", "8", "32", "64")},
                         (("vocab", int), ("batch", int), ("filters", str), ("config", str))),
    "decode_step.csv": View("decode_step", ("model", "batch", "max_cache_len", "sampler", "config", "step_us",
                                            "kernels"),
                            {"config": ("inductor", "rocm_fused"), "sampler": ("none", "hf")},
                            (("model", str), ("batch", int), ("max_cache_len", int), ("sampler", str),
                             ("config", str))),
    "decode_gemm.csv": View("decode_gemm", ("model", "batch", "config", "step_us"), {},
                            (("model", str), ("batch", int), ("config", str))),
    "tuning.csv": View("tuning", ("model", "batch", "config", "step_us"),
                       {"config": ("inductor", "shipped", "tuned_from_empty"), "layers": ("8",)},
                       (("batch", int), ("model", str), ("config", str))),
    "tuning_cost.csv": View("tuning_cost", ("model", "compile_s_level2", "compile_s_level2_tuning",
                                            "compile_s_level1_warm_store"), {}, (("model", str),)),
    "moe_decode.csv": View("moe_decode", ("model", "batch", "config", "step_us"), {"experts": ("grouped_mm",)},
                           newline="\r\n"),
}


class Data:
    """Every long file, read once: runs in order, rows per topic, and which rows are current."""

    def __init__(self, runs_dir: pathlib.Path = run_log.RUNS_DIR) -> None:
        self.runs = run_log.read_runs(runs_dir)
        self.order = {r["run_id"]: i for i, r in enumerate(self.runs)}
        self.run = {r["run_id"]: r for r in self.runs}
        self.rows: dict[str, list[dict[str, str]]] = {}
        self.header: dict[str, list[str]] = {}
        for name in TOPICS:
            self.header[name], rows = run_log.read_topic(name, runs_dir)
            unknown = {r["run_id"] for r in rows} - set(self.order)
            if unknown:
                raise ValueError(f"{name}.csv names runs missing from runs.csv: {sorted(unknown)}")
            self.rows[name] = rows
        self._current = {name: self._latest(name) for name in TOPICS}

    def measured(self, topic: str) -> list[dict[str, str]]:
        """The topic's rows that are measurements (some value column non-empty), in file order."""
        cols = TOPICS[topic].value
        return [r for r in self.rows[topic] if any(r.get(c, "") for c in cols)]

    def _latest(self, topic: str) -> set[int]:
        key = ("gpu", *TOPICS[topic].key)  # per GPU: an H100 run must not hide the H200's numbers
        best: dict[tuple, int] = {}
        rows = self.measured(topic)
        for r in rows:
            k, o = tuple(r.get(c, "") for c in key), self.order[r["run_id"]]
            best[k] = max(best.get(k, -1), o)
        return {id(r) for r in rows if self.order[r["run_id"]] == best[tuple(r.get(c, "") for c in key)]}

    def is_current(self, topic: str, row: dict[str, str]) -> bool:
        """Whether ``row`` is a current row (from the latest run that measured its configuration)."""
        return id(row) in self._current[topic]

    def select(self, topic: str, view: str, where: dict[str, tuple[str, ...]]) -> list[dict[str, str]]:
        """Measured rows of ``topic`` for ``view`` (``current`` / ``history`` / ``run:ID``) matching ``where``."""
        rows = [r for r in self.measured(topic) if all(r.get(c, "") in vals for c, vals in where.items())]
        if view == "current":
            return [r for r in rows if self.is_current(topic, r)]
        if view == "history":
            return [r for r in rows if not self.is_current(topic, r)]
        if view.startswith("run:"):
            rid = view[4:]
            if rid not in self.order:
                raise ValueError(f"unknown run {rid!r}")
            return [r for r in rows if r["run_id"] == rid]
        raise ValueError(f"unknown view {view!r} (current, history or run:ID)")


# -- Markdown ----------------------------------------------------------------------------------------------------

def _cell(v: object) -> str:
    return str(v).replace("|", "\\|")


def md_table(header: list[str], lines: Iterable[Iterable[object]]) -> str:
    """A GitHub Markdown table."""
    out = ["| " + " | ".join(_cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(_cell(c) for c in line) + " |" for line in lines]
    return "\n".join(out)


def _run_caption(data: Data, ids: list[str]) -> str:
    def one(rid: str) -> str:
        r = data.run[rid]
        fi = f", FlashInfer {r['flashinfer']}" if r["flashinfer"] not in ("", "none") else ""
        return (f"`{rid}` ({r['date']}, {r['gpu']}, torch {r['torch']}, triton {r['triton']}{fi}): {r['what']}")
    return "Run: " + one(ids[0]) if len(ids) == 1 else "Runs: " + "; ".join(one(i) for i in ids)


def _uniq(values: Iterable[str]) -> list[str]:
    seen: dict[str, None] = {}
    for v in values:
        seen.setdefault(v, None)
    return list(seen)


def _sort_key(v: str) -> tuple:
    try:
        return (0, float(v), "")
    except ValueError:
        return (1, 0.0, v)


def _rounded(row: dict[str, str], digits: dict[str, int]) -> dict[str, str]:
    out = dict(row)
    for c, n in digits.items():
        try:
            out[c] = f"{float(out[c]):.{n}f}"
        except (KeyError, ValueError):
            pass
    return out


def render_rows(data: Data, rows: list[dict[str, str]], args: dict[str, str]) -> str:
    """One table (pivot or columns) of ``rows``, captioned with the runs they come from."""
    ids = sorted(_uniq(r["run_id"] for r in rows), key=data.order.get)
    if "sort" in args:
        cols = args["sort"].split(",")
        rows = sorted(rows, key=lambda r: tuple(_sort_key(r.get(c, "")) for c in cols))
    if "round" in args:
        digits = {c: int(n) for c, n in (x.split(":") for x in args["round"].split(";"))}
        rows = [_rounded(r, digits) for r in rows]
    if "cols" in args:
        rk, ck, vk = args["rows"].split(","), args["cols"], args["value"]
        heads = _uniq(r[ck] for r in rows)
        if "order" in args:  # the listed column values first, in that order
            first = [h for h in args["order"].split(",") if h in heads]
            heads = first + [h for h in heads if h not in first]
        cells: dict[tuple, dict[str, str]] = {}
        for r in rows:
            line = cells.setdefault(tuple(r[c] for c in rk), {})
            prev = line.get(r[ck])
            line[r[ck]] = r[vk] if prev is None else f"{prev}; {r[vk]}"
        table = md_table([*rk, *heads], [[*k, *(line.get(h, "") for h in heads)] for k, line in cells.items()])
    else:
        cols = args["columns"].split(",")
        table = md_table(cols, [[r.get(c, "") for c in cols] for r in rows])
    return _run_caption(data, ids) + "\n\n" + table


def render_table(data: Data, spec: str) -> str:
    """A ``{{table ...}}`` directive's Markdown (see module docstring)."""
    parts = shlex.split(spec)
    topic, view, args = parts[0], parts[1], dict(p.split("=", 1) for p in parts[2:])
    if topic not in TOPICS:
        raise ValueError(f"unknown topic {topic!r}")
    where = {c: tuple(v.split("|")) for c, v in (w.split(":", 1) for w in args.get("where", "").split(";") if w)}
    rows = data.select(topic, view, where)
    if "since" in args:
        rows = [r for r in rows if data.run[r["run_id"]]["date"][:10] >= args["since"]]
    if "before" in args:
        rows = [r for r in rows if data.run[r["run_id"]]["date"][:10] < args["before"]]
    if not rows:
        return "(no rows)" if view != "history" else "(no earlier runs)"
    if view != "history":
        return render_rows(data, rows, args)
    groups: dict[str, list[dict[str, str]]] = {}
    for r in rows:
        groups.setdefault(r["run_id"], []).append(r)
    return "\n\n".join(render_rows(data, groups[rid], args) for rid in sorted(groups, key=data.order.get))


def render_runs(data: Data) -> str:
    """The index of every run."""
    return md_table(["run", "date", "GPU", "torch", "triton", "transformers", "FlashInfer", "script", "what"],
                    [[f"`{r['run_id']}`", r["date"], r["gpu"], r["torch"], r["triton"], r["transformers"],
                      r["flashinfer"], r["script"], r["what"]] for r in data.runs])


_DIRECTIVE = re.compile(r"^\{\{(table|chart)\s*(.*?)\}\}$")


def render_notes(data: Data, text: str) -> str:
    """Expand every directive line of a notes file."""
    out = []
    for line in text.splitlines():
        m = _DIRECTIVE.match(line.strip())
        if not m:
            out.append(line)
        elif m.group(1) == "table":
            out.append(render_table(data, m.group(2)))
        else:
            name = m.group(2).strip()
            if name not in CHARTS:
                raise ValueError(f"unknown chart {name!r}")
            out.append(f"![{CHARTS[name][0]}](results/charts/{name}.png)")
    return "\n".join(out)


HEADER = """<!-- Generated by benchmarks/results_report.py from benchmarks/results/runs/*.csv and
benchmarks/results/notes/*.md: edit those and regenerate; do not edit this file. -->
"""


def build_markdown(data: Data, notes_dir: pathlib.Path = NOTES) -> str:
    """RESULTS.md: the intro, every section's current part, then every section's history part."""
    files = sorted(notes_dir.glob("*.md"))
    current, history = [], []
    for f in files:
        text = f.read_text()
        now, _, old = text.partition("<!-- history -->")
        current.append(render_notes(data, now).strip())
        if old.strip():
            title = next((ln for ln in now.splitlines() if ln.startswith("#")), f"## {f.stem}")
            history.append(title.replace("## ", "## History: ", 1) + "\n\n" + render_notes(data, old).strip())
    return (HEADER + "\n" + "\n\n".join(current) + "\n\n# History\n\n" + "\n\n".join(history)
            + "\n\n# Runs\n\nEvery run the tables above come from, oldest first (`results/runs/runs.csv`).\n\n"
            + render_runs(data) + "\n")


# -- views -------------------------------------------------------------------------------------------------------

def build_view(data: Data, view: View) -> str:
    """The CSV text of a fixed-column view."""
    rows = data.select(view.topic, "current", {"gpu": (VIEW_GPU,), **view.where})
    if view.sort:
        rows.sort(key=lambda r: tuple(t(r[c]) for c, t in view.sort))
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator=view.newline)
    w.writerows([view.columns, *([r[c] for c in view.columns] for r in rows)])
    return buf.getvalue()


# -- charts ------------------------------------------------------------------------------------------------------

def _speedups(data: Data, topic: str, label: Callable[[dict[str, str]], str], base: str, ours: str,
              value: str = "step_us") -> list[tuple[str, float]]:
    """(label, base us / ours us) per configuration where one run measured both, from the current rows of the
    newest date that has such pairs (older pairs measured code that has changed since)."""
    by: dict[tuple[str, str], dict[str, float]] = {}
    for r in data.select(topic, "current", {"config": (base, ours)}):
        if r.get(value):
            by.setdefault((r["run_id"], label(r)), {})[r["config"]] = float(r[value])
    pairs = {k: v for k, v in by.items() if base in v and ours in v}
    newest = max((data.run[rid]["date"][:10] for rid, _ in pairs), default="")
    return [(lab, v[base] / v[ours]) for (rid, lab), v in pairs.items() if data.run[rid]["date"][:10] == newest]


def _chart_decode(data: Data) -> list[tuple[str, float]]:
    def label(r: dict[str, str]) -> str:
        return f"{r['model']} {r['bucket'].replace('decode ', '')} {r['max_cache_len']}"
    return _speedups(data, "decode", label, "inductor", "rocm_fused_l1", "sample_step_us")


def _chart_step(data: Data) -> list[tuple[str, float]]:
    return _speedups(data, "decode_step", lambda r: f"{r['model']} B={r['batch']}", "inductor",
                     "rocm_fused_all_norm_gemm")


def _chart_attention(data: Data) -> list[tuple[str, float]]:
    return _speedups(data, "decode_attention", lambda r: f"{r['model']} {r['max_cache_len']} B={r['batch']}",
                     "inductor", "rocm_fused")


def _chart_sampling(data: Data) -> list[tuple[str, float]]:
    """Fastest FlashInfer us / ours us per (filters, V, B)."""
    by: dict[str, dict[str, float]] = {}
    for r in data.select("sampling", "current", VIEWS["sampling.csv"].where):
        if r["config"] != "eager" and r["config"] != "inductor" and r["us"] not in ("", "nan"):
            by.setdefault(f"{r['filters']} V={r['vocab']} B={r['batch']}", {})[r["config"]] = float(r["us"])
    out = []
    for k, v in by.items():
        fi = [u for c, u in v.items() if c.startswith("flashinfer")]
        if "ours" in v and fi:
            out.append((k, min(fi) / v["ours"]))
    return out


#: name -> (title, data function giving (label, speed-up) bars).
CHARTS: dict[str, tuple[str, Callable[[Data], list[tuple[str, float]]]]] = {
    "decode": ("decode step + HF sampler: Inductor us / rocm_fused us (shipped defaults)", _chart_decode),
    "decode_step": ("decode step without sampler: Inductor us / rocm_fused us (shipped defaults)", _chart_step),
    "decode_attention": ("decode step, attention pass: Inductor us / rocm_fused us", _chart_attention),
    "sampling": ("sampler op: fastest FlashInfer us / ours us", _chart_sampling),
}


def draw_charts(data: Data, out_dir: pathlib.Path = CHART_DIR) -> list[pathlib.Path]:
    """Draw every chart of :data:`CHARTS` as a horizontal bar chart (speed-up, 1.0 marked).

    Raises:
        ImportError: matplotlib is not installed.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, (title, fn) in CHARTS.items():
        bars = fn(data)
        fig, ax = plt.subplots(figsize=(8, 0.32 * len(bars) + 1.2))
        ax.barh([b[0] for b in bars][::-1], [b[1] for b in bars][::-1], color="#3b7dd8")
        ax.axvline(1.0, color="black", linewidth=0.8)
        for y, (_, v) in enumerate(bars[::-1]):
            ax.text(v, y, f" {v:.2f}x", va="center", fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.tick_params(labelsize=8)
        fig.tight_layout()
        path = out_dir / f"{name}.png"
        fig.savefig(path, dpi=110, metadata={"Software": None})
        plt.close(fig)
        paths.append(path)
    return paths


def _read(path: pathlib.Path) -> str:
    with open(path, newline="") as f:
        return f.read()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--check", action="store_true", help="compare with the committed files, write nothing")
    p.add_argument("--no-charts", action="store_true")
    args = p.parse_args(argv)
    data = Data()
    outputs = {OUT_MD: build_markdown(data)}
    outputs.update({RESULTS / name: build_view(data, v) for name, v in VIEWS.items()})
    if args.check:
        stale = [str(path.relative_to(HERE.parent)) for path, text in outputs.items()
                 if not path.exists() or _read(path) != text]
        for s in stale:
            print(f"results_report: {s} differs from what the data gives (run benchmarks/results_report.py)")
        if not stale:
            print(f"results_report: {', '.join(str(p.relative_to(HERE.parent)) for p in outputs)} are up to date")
        return 1 if stale else 0
    for path, text in outputs.items():
        with open(path, "w", newline="") as f:  # the text's own line ends, untranslated
            f.write(text)
        print(f"wrote {path.relative_to(HERE.parent)}")
    if not args.no_charts:
        try:
            for path in draw_charts(data):
                print(f"wrote {path.relative_to(HERE.parent)}")
        except ImportError:
            print("results_report: matplotlib is not installed (pip install -e '.[bench]'): charts skipped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
