"""Compiling and timing windows in a persistent worker process.

A level-2 compile measures while Inductor is inside our post-grad pass, and an Inductor compile there is not
re-entrant (its virtualized graph state, the compile context and the FX graph cache are per process). So the
windows are compiled and timed by a worker subprocess, started once per process on the first measurement and
kept for the next ones (a torch import and CUDA context each time would cost seconds). The parent sends a
:class:`Job` (the window's modules, pickled: a ``GraphModule`` pickles as its Python code, plus the input specs)
and gets a :class:`Result` back; a job whose :attr:`Job.key` was measured before in this process is answered
from memory (the identical layers of a model are measured once).

In the worker, per job (:func:`run_job`):

1. the baseline: the window compiled by Inductor (``compile_fx``, none of our passes; GEMMs stay ATen's
   cuBLAS/hipBLASLt calls, the level-2 small-M override's choice), or run eagerly when Inductor cannot
   compile it (labelled ``"eager"``);
2. each candidate: the rewritten window compiled the same way; for ``merged_gemm`` / ``rms_norm_gemm`` and
   ``decode_attention`` with the Triton provider, each kernel config of :attr:`Job.configs` forced in turn
   (labelled ``"triton:..."``);
3. numerics of each candidate against the baseline (``measure.check_numerics``; truth: the baseline window in
   float64): a wrong candidate is refused with the reason and not timed;
4. times of the baseline and every candidate kept (``measure.Timer``).

Test mode: with the fake timer (``measure.FAKE_ENV``) windows run eagerly (no Inductor compile) in this process
(:class:`InProcessWorker`) unless ``ROCM_FUSED_TUNE_WORKER=subprocess``; ``ROCM_FUSED_TUNE_COMPILE=inductor``
compiles them anyway.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import os
import pathlib
import pickle
import struct
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.fx import GraphModule

from . import measure
from .window import InputSpec

#: Env var: ``"subprocess"`` runs the worker in a subprocess even with the fake timer.
WORKER_ENV = "ROCM_FUSED_TUNE_WORKER"
#: Env var: ``"inductor"`` compiles windows with Inductor even with the fake timer; ``"eager"`` never.
COMPILE_ENV = "ROCM_FUSED_TUNE_COMPILE"
#: The label of the baseline (the window compiled by Inductor); ``"eager"`` when Inductor could not compile it.
BASELINE = "inductor"


@dataclasses.dataclass
class Job:
    """One window to measure.

    Attributes:
        key: the window's key (``Window.key``) plus the configs: identical jobs are measured once;
        op: the op; base: the window without our rewrite; ours: provider -> the rewritten window;
        inputs: the input specs; configs: provider -> kernel configs to force (``Config`` fields for the
            merged GEMM kernels, ``num_splits`` / ``block_n`` for decode attention).
    """

    key: str
    op: str
    base: GraphModule
    ours: dict[str, GraphModule]
    inputs: list[InputSpec]
    configs: dict[str, list[dict[str, Any]]] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Result:
    """What the worker measured for a :class:`Job`.

    Attributes:
        key: the job's key; times: label -> microseconds per call (the baseline and every candidate timed);
        refused: label -> why the candidate was not timed (wrong numerics, does not compile or run);
        configs: label -> the forced kernel config; error: why nothing could be measured (the baseline
            failed, the worker died), else ``None``; copies: input sets per replay (L2 rotation).
    """

    key: str
    times: dict[str, float] = dataclasses.field(default_factory=dict)
    refused: dict[str, str] = dataclasses.field(default_factory=dict)
    configs: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    error: str | None = None
    copies: int = 1


def config_label(provider: str, cfg: dict[str, Any]) -> str:
    """A forced kernel config's label: ``"triton:m16 n64 k256 s1 w8 st3 dot"`` (a merged GEMM tile),
    ``"triton:4x128"`` (decode attention: splits x BLOCK_N, as the shipped entries' times name them)."""
    if "num_splits" in cfg:
        return f"{provider}:{cfg['num_splits']}x{cfg['block_n']}"
    kind = "dot" if cfg.get("dot", True) else "full" if cfg.get("full") else "gemv" if cfg.get("late") else "fma"
    ev = " evict" if cfg.get("evict") else ""
    return (f"{provider}:m{cfg['block_m']} n{cfg['block_n']} k{cfg['block_k']} s{cfg.get('split_k', 1)} "
            f"w{cfg.get('num_warps', 4)} st{cfg.get('num_stages', 3)} {kind}{ev}")


@contextlib.contextmanager
def forced_config(cfg: dict[str, Any] | None) -> Iterator[None]:
    """Make the merged GEMM kernels (``merged_gemm``, ``rms_norm_gemm``) run ``cfg`` inside the block, or the
    decode attention kernel its ``num_splits`` / ``block_n`` (a ``cfg`` with ``num_splits``)."""
    if cfg is None:
        yield
        return
    if "num_splits" in cfg:
        from ..providers.triton import attention

        saved_attn = attention.FORCE_SPLITS, attention.FORCE_BLOCK_N
        attention.FORCE_SPLITS, attention.FORCE_BLOCK_N = cfg["num_splits"], cfg["block_n"]
        try:
            yield
        finally:
            attention.FORCE_SPLITS, attention.FORCE_BLOCK_N = saved_attn
        return
    from ..providers.triton import gemm_merge, norm_gemm
    from ..providers.triton.gemm_configs import Config

    c = Config(**cfg)
    saved = gemm_merge.pick_config, norm_gemm.pick_config
    gemm_merge.pick_config = norm_gemm.pick_config = lambda *a, **k: c
    try:
        yield
    finally:
        gemm_merge.pick_config, norm_gemm.pick_config = saved


def _compile_mode() -> str:
    mode = os.environ.get(COMPILE_ENV)
    if mode in ("inductor", "eager"):
        return mode
    return "eager" if os.environ.get(measure.FAKE_ENV) else "inductor"


def compile_window(gm: GraphModule, example: list[Any], mode: str) -> Callable[..., Any]:
    """``gm`` compiled by Inductor (``mode="inductor"``: ``compile_fx``, no custom post-grad pass, no CUDA
    graphs: the timer captures its own) or ``gm`` itself (``"eager"``). Raises what Inductor raises."""
    if mode == "eager":
        return gm
    from torch._inductor.compile_fx import compile_fx

    patches = {"post_grad_custom_pre_pass": None, "post_grad_custom_post_pass": None, "triton.cudagraphs": False}
    return compile_fx(gm, example, config_patches=patches)


def _widened(gm: GraphModule) -> GraphModule:
    """The window with every float cast in float64 and our ops on the pure-torch reference provider."""
    from ..passes.verify import widened

    wide = widened(gm)
    for n in wide.graph.nodes:
        t = n.target
        if n.op == "call_function" and getattr(t, "namespace", None) == "rocm_fused" and n.args \
                and isinstance(n.args[-1], str):
            n.args = (*n.args[:-1], "reference")
    wide.recompile()
    return wide


def _truth(gm: GraphModule, args: list[Any]) -> list[Any] | None:
    """The window evaluated in float64 on ``args`` (None when it cannot be: an op without float64)."""
    try:
        wide = _widened(gm)
        a64 = [a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]
        with torch.no_grad():
            return list(wide(*a64))
    except Exception:
        return None


def _outs(fn: Callable[..., Any], args: list[Any]) -> list[Any]:
    with torch.no_grad():
        out = fn(*args)
    out = list(out) if isinstance(out, (tuple, list)) else [out]
    return [o.clone() if isinstance(o, torch.Tensor) else o for o in out]


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {(text[0] if text else '')[:160]}"


def run_job(job: Job, timer: measure.Timer, mode: str | None = None) -> Result:
    """Measure ``job`` (see module docstring) with ``timer``; ``mode``: ``"inductor"`` / ``"eager"`` compile
    (default from the environment). Never raises: failures are in :attr:`Result.error` / :attr:`Result.refused`."""
    mode = mode or _compile_mode()
    res = Result(job.key)
    if hasattr(timer, "op"):  # the fake timer's per-op times
        timer.op = job.op
    device = "cuda" if torch.cuda.is_available() and any(s.device == "cuda" for s in job.inputs) else "cpu"
    try:
        ref_args = measure.make_inputs(job.inputs, 1, device, seed=1)[0]
        nbytes = sum(s.nbytes for s in job.inputs)
        res.copies = measure.copies_for(nbytes, measure.l2_bytes()) if timer.name != "fake" else 1
        sets = measure.make_inputs(job.inputs, res.copies, device, seed=2)
    except Exception as e:
        res.error = f"inputs: {_first_line(e)}"
        return res
    label = BASELINE
    try:
        base = compile_window(job.base, ref_args, mode)
        base_out = _outs(base, ref_args)
    except Exception as e:
        try:  # eager where Inductor cannot compile the region
            base, label = job.base, "eager"
            base_out = _outs(base, ref_args)
        except Exception:
            res.error = f"the baseline window does not run: {_first_line(e)}"
            return res
    truth = _truth(job.base, ref_args)
    try:
        res.times[label] = timer.time_us(base, sets, label)
    except Exception as e:
        res.error = f"the baseline window cannot be timed: {_first_line(e)}"
        return res
    for prov, gm in job.ours.items():
        try:
            fn = compile_window(gm, ref_args, mode)
        except Exception as e:
            res.refused[prov] = f"does not compile: {_first_line(e)}"
            continue
        for cfg in job.configs.get(prov) or [None]:
            lab = prov if cfg is None else config_label(prov, cfg)
            try:
                with forced_config(cfg):
                    why = measure.check_numerics(job.op, _outs(fn, ref_args), base_out, truth)
                    if why is None:
                        res.times[lab] = timer.time_us(fn, sets, lab)
            except Exception as e:
                why = f"does not run: {_first_line(e)}"
            if why is not None:
                res.refused[lab] = why
            elif cfg is not None:
                res.configs[lab] = dict(cfg)
    return res


class InProcessWorker:
    """Runs jobs in this process (the fake timer's test mode: windows run eagerly, nothing re-enters Inductor)."""

    def __init__(self, timer: measure.Timer | None = None) -> None:
        self.timer = timer or measure.timer()

    def run(self, job: Job) -> Result:
        """:func:`run_job` here (outside any fake tensor mode the compile has active)."""
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        with unset_fake_temporarily():
            return run_job(job, self.timer)

    def close(self) -> None:
        """Nothing to stop."""


def _send(f: Any, obj: Any) -> None:
    data = pickle.dumps(obj)
    f.write(struct.pack(">Q", len(data)) + data)
    f.flush()


def _recv(f: Any) -> Any:
    head = f.read(8)
    if len(head) < 8:
        return None
    (n,) = struct.unpack(">Q", head)
    return pickle.loads(f.read(n))


class SubprocessWorker:
    """The worker process (``python -m rocm_inductor.tuning.worker``), started at the first job."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None

    def _start(self) -> subprocess.Popen:
        if self.proc is None or self.proc.poll() is not None:
            root = str(pathlib.Path(__file__).resolve().parents[2])
            env = dict(os.environ)
            env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
            self.proc = subprocess.Popen([sys.executable, "-m", "rocm_inductor.tuning.worker"], env=env,
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        return self.proc

    def run(self, job: Job) -> Result:
        """Send ``job``, wait for its :class:`Result` (an error result when the worker died)."""
        proc = self._start()
        try:
            _send(proc.stdin, job)
            res = _recv(proc.stdout)
        except Exception as e:  # a broken pipe, a result that does not unpickle: never the compile's failure
            res = Result(job.key, error=f"the tuning worker failed: {_first_line(e)}")
            self.close()
        if res is None:
            code = proc.wait()
            res = Result(job.key, error=f"the tuning worker exited ({code})")
        return res

    def close(self) -> None:
        """Stop the worker (end of its input)."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)
        self.proc = None


class Client:
    """The per-process front of the worker: answers a job measured before from memory."""

    def __init__(self, backend: InProcessWorker | SubprocessWorker) -> None:
        self.backend = backend
        self.results: dict[str, Result] = {}
        self.measured = 0

    def run(self, job: Job) -> Result:
        """The job's result (measured once per key and process)."""
        if job.key not in self.results:
            self.results[job.key] = self.backend.run(job)
            self.measured += 1
        return self.results[job.key]


_CLIENT: list[Client] = []


def client() -> Client:
    """The process's worker client, started once (in-process with the fake timer, see module docstring)."""
    if not _CLIENT:
        fake = bool(os.environ.get(measure.FAKE_ENV))
        backend = (InProcessWorker() if fake and os.environ.get(WORKER_ENV) != "subprocess"
                   else SubprocessWorker())
        _CLIENT.append(Client(backend))
        atexit.register(backend.close)
    return _CLIENT[0]


def reset() -> None:
    """Stop the worker and forget its results (tests)."""
    while _CLIENT:
        _CLIENT.pop().backend.close()


def serve() -> int:
    """The worker loop: read jobs on stdin, write results on the original stdout (prints go to stderr)."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    from .. import ops  # noqa: F401  (registers the rocm_fused ops the windows call)

    timer = measure.timer()
    while True:
        job = _recv(sys.stdin.buffer)
        if job is None:
            return 0
        _send(out, run_job(job, timer))


if __name__ == "__main__":
    # run the loop of the importable module, so results pickle as rocm_inductor.tuning.worker.Result
    from rocm_inductor.tuning import worker as _worker

    sys.exit(_worker.serve())
