"""Timing and numerics of a measured window: the :class:`Timer` protocol, the CUDA-graph timer, a fake timer for
tests, the inputs (rotated past L2) and the numerics check.

The real timer (:class:`GraphTimer`) times a callable on CUDA/HIP as ``benchmarks/timing.py`` does: the calls
captured in one CUDA (HIP) graph after a warm-up on a side stream, the graph replayed ``repeats`` times between
CUDA events, the median per call in microseconds. Each replay calls the window once per input set of
:func:`make_inputs`, and there are enough sets that one replay reads more bytes than the L2 cache holds
(:func:`copies_for`), so every call reads its inputs from HBM, as a decode step reads each layer's weights.

:class:`FakeTimer` returns times from a table (``ROCM_FUSED_TUNE_FAKE_TIMER="inductor=10,triton=4"``, for the
tests and the CLI's test mode only) and needs no GPU. :func:`timer` picks one.

:func:`check_numerics` is the op's contract of ``docs/ops.md``: against the window evaluated in float64 (every
cast widened), ours may be no further from that truth than the baseline (the window compiled by Inductor), plus
one ulp of the output dtype. Sampling's contract is statistical (docs/ops.md, "sample"): its draws are compared
for shape and dtype only.
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch

from .window import InputSpec

#: Env var naming fake times per label (``"inductor=10,triton=4"``; a label ``"triton:<config>"`` also matches
#: ``"triton"``; ``"rope/triton=9"`` applies to the windows of one op). Tests and ``python -m rocm_inductor tune``
#: in tests only: the times are made up.
FAKE_ENV = "ROCM_FUSED_TUNE_FAKE_TIMER"
#: Most input sets one replay cycles through (graph size and capture time stay small for tiny windows, which then
#: partly stay in L2: a norm of one token reads 12 KiB a call, 4096 sets = 48 MiB).
MAX_COPIES = 4096
#: L2 size assumed when the device does not report one (the H200's is 60 MiB; MI300X's 4 MiB per XCD, 256 MiB
#: Infinity Cache).
DEFAULT_L2 = 64 << 20
#: Ops whose contract is statistical, not elementwise (docs/ops.md): outputs compared for shape and dtype only.
STATISTICAL_OPS = frozenset({"sample"})


class Timer(Protocol):
    """Times a callable over input sets.

    ``available()``: ``None`` when it can time here, else the reason (``"no GPU"``).
    ``time_us(fn, input_sets, label)``: microseconds per call of ``fn(*inputs)``, ``label`` the candidate's name
    (``"inductor"``, ``"triton"``, ``"triton:m1 n8 k512 s1 w4 st1 full"``); raises what ``fn`` raises.
    """

    name: str

    def available(self) -> str | None: ...

    def time_us(self, fn: Callable[..., Any], input_sets: Sequence[Sequence[Any]], label: str) -> float: ...


class GraphTimer:
    """The real timer (see module docstring): CUDA/HIP graph, inputs rotated past L2, median of ``repeats``.

    Args:
        repeats: timed replays (the median is kept); warmup: calls per input set before capture.
    """

    name = "cuda-graph"

    def __init__(self, repeats: int = 15, warmup: int = 2) -> None:
        self.repeats = repeats
        self.warmup = warmup

    def available(self) -> str | None:
        """``None`` on a CUDA/HIP device, else ``"no GPU"``."""
        return None if torch.cuda.is_available() else "no GPU"

    def time_us(self, fn: Callable[..., Any], input_sets: Sequence[Sequence[Any]], label: str) -> float:
        """Median microseconds per call (one replay calls ``fn`` once per input set).

        Raises:
            RuntimeError: no GPU; whatever capture or ``fn`` raises (a host sync inside ``fn``).
        """
        if self.available():
            raise RuntimeError(f"GraphTimer: {self.available()}")
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(self.warmup):
                for args in input_sets:
                    fn(*args)
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for args in input_sets:
                fn(*args)
        graph.replay()
        torch.cuda.synchronize()
        times = []
        for _ in range(self.repeats):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            graph.replay()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) * 1e3 / len(input_sets))
        del graph
        return statistics.median(times)


class FakeTimer:
    """Times from a table, for tests (no GPU): ``times["<op>/<label>"]`` (:attr:`op`: the window's op, set by the
    worker per job), else ``times[label]``, else ``times[label before ":"]``, else ``default``. Calls ``fn`` once
    on the first input set, so a candidate that raises still raises.

    Args:
        times: label -> microseconds; default: the time of a label not in the table.
    """

    name = "fake"

    def __init__(self, times: dict[str, float], default: float = 100.0) -> None:
        self.times = dict(times)
        self.default = default
        self.calls: list[str] = []
        self.op = ""

    @classmethod
    def parse(cls, text: str) -> FakeTimer:
        """From ``"inductor=10,triton=4"`` (:data:`FAKE_ENV`'s format).

        Raises:
            ValueError: an item is not ``label=number``.
        """
        times = {}
        for item in filter(None, (t.strip() for t in text.split(","))):
            label, sep, us = item.partition("=")
            if not sep:
                raise ValueError(f"{FAKE_ENV}: expected label=microseconds, got {item!r}")
            times[label.strip()] = float(us)
        return cls(times)

    def available(self) -> str | None:
        """Always available."""
        return None

    def time_us(self, fn: Callable[..., Any], input_sets: Sequence[Sequence[Any]], label: str) -> float:
        """The table's time for ``label`` (after one call of ``fn``)."""
        fn(*input_sets[0])
        self.calls.append(label)
        for key in (f"{self.op}/{label}", f"{self.op}/{label.split(':')[0]}", label, label.split(":")[0]):
            if key in self.times:
                return self.times[key]
        return self.default


def timer() -> Timer:
    """The fake timer when :data:`FAKE_ENV` is set (tests), else the CUDA-graph timer."""
    fake = os.environ.get(FAKE_ENV)
    return FakeTimer.parse(fake) if fake else GraphTimer()


def l2_bytes() -> int:
    """The device's L2 cache size in bytes (:data:`DEFAULT_L2` when unknown or without a GPU)."""
    if torch.cuda.is_available():
        size = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "L2_cache_size", 0)
        if size:
            return int(size)
    return DEFAULT_L2


def copies_for(bytes_per_set: int, l2: int) -> int:
    """Input sets per replay so that one replay reads twice the L2 size (1 to :data:`MAX_COPIES`)."""
    return max(1, min(MAX_COPIES, math.ceil(2 * l2 / max(bytes_per_set, 1))))


def _one(spec: InputSpec, device: str | None, gen: torch.Generator) -> Any:
    if spec.kind != "tensor":
        return spec.value
    dtype = getattr(torch, spec.dtype)
    dev = device or spec.device
    span = 1 + sum((s - 1) * st for s, st in zip(spec.shape, spec.stride, strict=True)) if 0 not in spec.shape else 0
    if dtype.is_floating_point:
        flat = torch.randn(span, generator=gen, dtype=torch.float32).to(dtype)
    elif dtype is torch.bool:
        flat = torch.ones(span, dtype=torch.bool)  # masks: every slot valid
    else:
        flat = torch.zeros(span, dtype=dtype)  # indices and positions: 0 is in range of any non-empty dim
    return flat.to(dev).as_strided(spec.shape, spec.stride)


def make_inputs(specs: Sequence[InputSpec], copies: int = 1, device: str | None = None, seed: int = 0
                ) -> list[list[Any]]:
    """``copies`` input sets for a window: floats ~ N(0, 1), integers 0, bools True, with each spec's strides;
    scalars as given. ``device`` overrides the specs' device type (``None``: theirs)."""
    gen = torch.Generator().manual_seed(seed)
    return [[_one(s, device, gen) for s in specs] for _ in range(copies)]


def _rel_err(a: torch.Tensor, ref: torch.Tensor) -> float:
    from ..passes.verify import rel_err

    return rel_err(a.detach().cpu(), ref.detach().cpu())


def check_numerics(op: str, ours: Sequence[Any], base: Sequence[Any], truth: Sequence[Any] | None) -> str | None:
    """Why ``ours`` breaks the op's contract against the baseline (``None``: it keeps it).

    Args:
        op: the op (sampling is compared for shape and dtype only); ours / base: the window's outputs, ours
            and the baseline's, in the same order; truth: the baseline window evaluated in float64 (``None``
            when it cannot be: then ours must be within 2 ulp of the output dtype of the baseline, relative to
            its largest magnitude).

    Returns:
        The reason in plain words, or ``None``.
    """
    if len(ours) != len(base):
        return f"{len(ours)} outputs, the baseline has {len(base)}"
    for i, (o, b) in enumerate(zip(ours, base, strict=True)):
        if not isinstance(b, torch.Tensor):
            if o != b:
                return f"output {i} is {o!r}, the baseline's {b!r}"
            continue
        if not isinstance(o, torch.Tensor) or tuple(o.shape) != tuple(b.shape) or o.dtype != b.dtype:
            got = f"{o.dtype} {tuple(o.shape)}" if isinstance(o, torch.Tensor) else type(o).__name__
            return f"output {i} is {got}, the baseline's {b.dtype} {tuple(b.shape)}"
        if op in STATISTICAL_OPS:
            continue
        if not b.is_floating_point():
            if not torch.equal(o.cpu(), b.cpu()):
                return f"output {i} ({b.dtype}) differs from the baseline"
            continue
        ulp = torch.finfo(b.dtype).eps
        t = truth[i] if truth is not None else None
        if isinstance(t, torch.Tensor) and tuple(t.shape) == tuple(b.shape):
            eo, eb = _rel_err(o, t), _rel_err(b, t)
            if not eo <= eb + ulp:
                return (f"output {i}: error vs float64 {eo:.3g} exceeds the baseline's {eb:.3g} + 1 ulp of {b.dtype} "
                        "(numerics contract, docs/ops.md)")
        else:
            e = _rel_err(o, b)
            if not e <= 2 * ulp:
                return f"output {i}: differs from the baseline by {e:.3g} relative (> 2 ulp of {b.dtype})"
    return None
