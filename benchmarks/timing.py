"""Shared GPU timing for the kernel benchmarks: CUDA-graph replay timing and the copy-bandwidth ceiling."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch


def capture_graph(fn: Callable[[], object], inner: int = 1, warmup: int = 3) -> tuple[torch.cuda.CUDAGraph, object]:
    """``fn`` called ``inner`` times inside one captured ``torch.cuda.CUDAGraph``, after ``warmup`` calls on a
    side stream (lazy initialisation, allocator pools); returns the graph and the last call's output, whose
    storage each replay rewrites. Raises whatever capture raises (e.g. a host sync inside ``fn``)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    out = None
    with torch.cuda.graph(graph):
        for _ in range(inner):
            out = fn()
    return graph, out


def capture(fn, cuda: bool):
    """``fn`` (no args) captured in a ``torch.cuda.CUDAGraph`` -> ``(replay, None)``; ``(fn, reason)`` when
    capture fails or there is no GPU (the caller then times an eager loop and says so)."""
    if not cuda:
        return fn, "no CUDA graphs on CPU"
    try:
        graph, out = capture_graph(fn, warmup=2)
        torch.cuda.synchronize()
        replay = lambda: (graph.replay(), out)[1]
        replay.graph = graph  # keep it alive with the callable
        return replay, None
    except Exception as e:
        torch.cuda.synchronize()
        return fn, f"capture failed: {type(e).__name__}: {str(e).splitlines()[0][:80]}"


def graph_time_us(fn: Callable[[], object], inner: int, reps: int) -> float:
    """Median microseconds per call of ``fn``, captured ``inner`` times in one CUDA graph (after a warm-up on
    a side stream) and replayed ``reps`` times, timed with CUDA events. Python and launch overhead are out."""
    graph, _ = capture_graph(fn, inner)
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        graph.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / inner)
    return statistics.median(times)


def copy_bandwidth_gbs(inner: int = 5, reps: int = 10, nbytes: int = 1 << 30) -> float:
    """Device-to-device bandwidth ceiling in GB/s (read + write counted): the best of a ``copy_`` and an
    elementwise ``mul(out=)`` over ``nbytes`` buffers (either alone has undershot the other on some stacks)."""
    src = torch.empty(nbytes // 4, dtype=torch.float32, device="cuda").normal_()
    dst = torch.empty_like(src)
    best = min(graph_time_us(lambda: dst.copy_(src), inner, reps),
               graph_time_us(lambda: torch.mul(src, 1.0, out=dst), inner, reps))
    return 2 * nbytes / (best * 1e-6) / 1e9


def write_results(rows: list[dict], out: str, stem: str, title: str, extra: list[str] = ()) -> str:
    """Write ``rows`` (dicts with the same keys) as ``<out>/<stem>.csv`` and a markdown table
    ``<out>/<stem>.md`` under ``# title`` (plus ``extra`` lines after the table); return the table text."""
    import csv
    import os

    os.makedirs(out, exist_ok=True)
    cols = list(rows[0])
    with open(os.path.join(out, f"{stem}.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        w.writerows(rows)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r[c]) for c in cols) + " |" for r in rows]
    text = "\n".join([*lines, *extra]) + "\n"
    with open(os.path.join(out, f"{stem}.md"), "w") as f:
        f.write(f"# {title}\n\n" + text)
    return text


def time_call(call: Callable[[], object], reps: int, rounds: int, cuda: bool, queued: bool = False) -> list[float]:
    """Microseconds per call of ``call()``, one value per round of ``reps`` calls, after 3 warm-up calls
    (cudagraph trees record on the 2nd/3rd call). CUDA events around the loop on a GPU, wall clock on CPU.
    For whole compiled steps, whose own CUDA-graph replay is the thing timed.

    ``queued`` (GPU only): each round starts behind a ``torch.cuda._sleep`` longer than the host takes to enqueue
    the round, so the events time the device executing the queued replays back to back and the host's per-call
    work (Dynamo guards, cudagraph-tree bookkeeping, the same for every config of one step) and its jitter are
    out of the number. Without it a step whose host path is near its GPU time reads host noise. A round whose sleep
    ended before the host had queued it is timed again behind a sleep twice as long (three times at most; the
    last try is kept either way)."""
    import time

    for _ in range(3):
        call()
    sleep_cycles = 0
    if cuda and queued:
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(reps):
            call()
        host_s = time.perf_counter() - t  # the host's enqueue time of one round (no sync inside the loop)
        torch.cuda.synchronize()
        sleep_cycles = int(2 * host_s * 2.5e9)  # twice the host time at a 2.5 GHz upper bound of the SM clock
    out = []
    for _ in range(rounds):
        if not cuda:
            t = time.perf_counter()
            for _ in range(reps):
                call()
            out.append((time.perf_counter() - t) * 1e6 / reps)
            continue
        for _attempt in range(4):
            torch.cuda.synchronize()
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            if sleep_cycles:
                torch.cuda._sleep(sleep_cycles)
            a.record()
            for _ in range(reps):
                call()
            late = bool(sleep_cycles) and a.query()  # the sleep ended before the host had queued the round
            b.record()
            torch.cuda.synchronize()
            if not late:
                break
            sleep_cycles *= 2  # the host slowed down (or blocked): time the round again behind a longer sleep
        out.append(a.elapsed_time(b) * 1e3 / reps)
    return out


def versions() -> str:
    """One line: date, device, torch / triton / transformers / FlashInfer versions ("none" when absent)."""
    import transformers

    def version_of(name: str) -> str:
        try:
            return __import__(name).__version__
        except Exception:
            return "none"

    dev = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    return (f"{time.strftime('%Y-%m-%d')}, {dev}, torch {torch.__version__}, triton {version_of('triton')}, "
            f"transformers {transformers.__version__}, flashinfer {version_of('flashinfer')}")


def kernel_breakdown(fn: Callable[[], object], n: int = 10) -> list[tuple[str, float]]:
    """GPU kernels of one ``fn()`` call in launch order: ``(kernel name, median CUPTI duration in us)`` over
    ``n`` calls (torch.profiler, CUDA activity; launch gaps excluded). Needs a CUDA device."""
    from collections import defaultdict

    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
    evs = sorted((e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA),
                 key=lambda e: e.time_range.start)
    per = len(evs) // n
    seq: dict[int, list[tuple[str, float]]] = defaultdict(list)
    for i, e in enumerate(evs[: per * n]):
        seq[i % per].append((e.name, e.time_range.end - e.time_range.start))
    return [(seq[i][0][0], statistics.median(d for _, d in seq[i])) for i in range(per)]

