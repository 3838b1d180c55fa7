"""Level 2's measurements: the :data:`rocm_inductor.tuning.decide.measure_hook` that times a candidate on the device.

Importing this module installs :data:`TUNER` as ``decide.measure_hook`` (the backend imports it at level 2). For
a candidate the store has no decision for, :meth:`Tuner.__call__`:

1. lists the candidates: each provider of ``policy.PROVIDER_ORDER`` available here whose ``check`` takes the spec
   (a "not measured" refusal is no refusal here: measuring is the point), the gate's choice first; for the
   merged GEMM ops with the Triton provider, each kernel config of ``gemm_configs.short_configs`` (every config
   of ``sweep_configs`` with ``ROCM_FUSED_TUNE_GEMM_CONFIGS=sweep``), for decode attention each split-KV launch
   config of ``attention.config.sweep_points``;
2. cuts the window (``window.cut``: the region plus the neighbours Inductor would fuse with it);
3. has the worker (``worker.client``) compile and time the baseline and every candidate, numerics checked;
4. returns a :class:`~rocm_inductor.tuning.store.Decision` with ``source="measured"``, every candidate's time,
   the winner (a provider, or ``"inductor"`` unless ours is faster by more than :data:`MIN_GAIN`) and its config.

Without a GPU (or for CPU tensors) nothing is measured: the hook returns ``None``, the default stays, and
:attr:`Tuner.skipped` says ``"not measured: no GPU"``. The fake timer (``measure.FAKE_ENV``) stands in for tests.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable
from typing import Any

from ..platform import PlatformDispatch
from ..policy import NORM_MIN_HIDDEN
from ..providers import get_provider
from ..refusal import NOT_MEASURED, kind_of
from . import decide, measure, tables, worker
from .store import Decision, signature
from .window import WindowError, cut

log = logging.getLogger("rocm_inductor")

#: Ops whose Triton kernel takes a launch config (the merged GEMM and its RMSNorm-prologue form).
GEMM_OPS = frozenset({"merged_gemm", "rms_norm_gemm"})
#: The decode attention op, whose Triton kernel takes a split-KV launch config.
ATTENTION_OP = "decode_attention"
#: Env var: ``"sweep"`` times every config of ``gemm_configs.sweep_configs`` (default: ``short_configs``).
CONFIGS_ENV = "ROCM_FUSED_TUNE_GEMM_CONFIGS"
#: How much faster than the baseline ours must be to win: within it the default (no extern op, Inductor free to
#: fuse) is kept. A margin for the timer's noise, not a measured threshold. It is also the tie rule: a candidate
#: within ``MIN_GAIN`` of the baseline either way is a tie, and a tie goes to Inductor (said so in the evidence,
#: "tie") except where :func:`tie_band` gives the rewrite the tie (RMSNorms: the level-1 default; merges: Inductor
#: never merges GEMMs and the window cannot split their tie). The
#: shipped entries are deliberately not consulted on a tie: with them enabled the store returns them before
#: anything is measured, and with ``ROCM_FUSED_TUNING_SHIPPED=0`` (the from-empty run, the stand-in for a GPU
#: without shipped entries) a tie broken by the H200 tables would overstate what such a GPU gets.
MIN_GAIN = 0.01


@dataclasses.dataclass
class Measured:
    """One measurement of this process: the decision and what the window held (for the CLI's table)."""

    decision: Decision
    window_nodes: int
    refused: dict[str, str]


class Tuner:
    """The measure hook (see module docstring).

    Attributes:
        measured: every measurement made in this process, in order; skipped: ``(op, signature, reason)`` of
            every candidate not measured; progress: called with a one-line description before each measurement
            (the CLI's progress bar), or None.
    """

    def __init__(self) -> None:
        self.measured: list[Measured] = []
        self.skipped: list[tuple[str, str, str]] = []
        self.progress: Callable[[str], None] | None = None

    def available(self) -> str | None:
        """None when this process can time windows (a GPU, or the fake timer), else why not (``"no GPU"``)."""
        return measure.timer().available()

    def reset(self) -> None:
        """Forget this process's measurements (tests; the worker's cache is ``worker.reset``)."""
        self.measured.clear()
        self.skipped.clear()

    def _skip(self, op: str, sig: str, why: str) -> None:
        if not any(s[:2] == (op, sig) for s in self.skipped):
            log.info("rocm_fused tuning: %s %s %s; keeping the default", op, sig, why)
        self.skipped.append((op, sig, why))

    def __call__(self, ctx: Any, pass_: Any, graph: Any, cand: Any, params: Any, choice: Any) -> Decision | None:
        """Measure one candidate (the pass contract's arguments between ``gate`` and ``emit``).

        Returns:
            The measured :class:`Decision`, or None (not measured: no GPU, the window cannot be cut, the
            baseline does not compile; the reason is in :attr:`skipped`).
        """
        target = _target(ctx, pass_, graph, cand, params, choice)
        if target is None:
            return None
        op, spec = target
        sig = signature(op, spec)
        t = measure.timer()
        why = t.available()
        if why is None and spec.get("device_type") == "cpu" and t.name != "fake":
            why = "CPU tensors"
        if why is not None:
            self._skip(op, sig, f"not measured: {why}")
            return None
        providers = usable_providers(ctx, op, spec, getattr(choice, "provider", None))
        if not providers:
            self._skip(op, sig, "not measured: no provider takes it")
            return None
        try:
            win = cut(graph, pass_, ctx, cand, params, providers, op)
        except WindowError as e:
            self._skip(op, sig, f"not measured: {e}")
            return None
        configs = {p: launch_configs(op, spec) for p in providers if p == "triton"}
        configs = {p: c for p, c in configs.items() if c}
        job = worker.Job(win.key() + repr(sorted(configs.items())), op, win.base, win.ours, win.inputs, configs)
        if self.progress is not None:
            self.progress(f"{op} {sig}")
        res = worker.client().run(job)
        if res.error is not None:
            self._skip(op, sig, f"not measured: {res.error}")
            return None
        band = tie_band(op, spec, PlatformDispatch.platform().kind)
        margin = tables.SINGLE_MIN_GAIN if is_single(op, spec) else MIN_GAIN
        d = decision_of(op, sig, res, len(win.region), len(win.neighbours), tie_band=band, margin=margin)
        self.measured.append(Measured(d, len(win.region) + len(win.neighbours) + len(win.views), dict(res.refused)))
        return d


def _target(ctx: Any, pass_: Any, graph: Any, cand: Any, params: Any, choice: Any) -> tuple[str, dict] | None:
    """(op, spec) of the candidate: the store's own rule (``decide.tuning_target``) where it has one, else the
    spec the gate last chose a provider for."""
    rule = getattr(decide, "tuning_target", None)
    if rule is not None:
        return rule(ctx, pass_, graph, cand, params, choice)
    last = getattr(ctx, "last_spec", None)
    return tuple(last) if last is not None else None


def usable_providers(ctx: Any, op: str, spec: dict[str, Any], chosen: str | None) -> list[str]:
    """The providers to measure for ``op``: ``chosen`` (the gate's) first, then every other provider of the
    platform's order that is available and whose ``check`` takes ``spec`` (a "not measured" refusal counts as
    taking it)."""
    names, _ = PlatformDispatch.candidates(op, ctx.options.provider_for(op))
    out = [chosen] if chosen else []
    for name in names:
        if name in out:
            continue
        why = get_provider(name).check(op, spec)
        if why is None or kind_of(why) == NOT_MEASURED:
            out.append(name)
    return out


def launch_configs(op: str, spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The Triton kernel's launch configs to force for ``op`` (each timed as a candidate of its own):
    :func:`gemm_configs` for the merged GEMM ops, :func:`attention_configs` for decode attention, else none."""
    if op in GEMM_OPS:
        return gemm_configs(spec)
    if op == ATTENTION_OP:
        return attention_configs(spec)
    return []


def attention_configs(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Decode attention's (``num_splits``, ``block_n``) grid for a static batch, query and KV length
    (``attention.config``'s ``sweep_points``, the grid behind the shipped H200 entries); none for a symbolic one
    (the launcher reads measured configs of static shapes only: the heuristic or a shipped entry runs). The
    heuristic alone lost 14% in context: Qwen3-0.6B B = 32, 1024 slots, 4 splits + combine 46.8 us per layer
    against the shipped entry's one split, 40.9 us (H200, run 2026-12-03-1744-tuning)."""
    lkv = spec.get("kv_len")
    if not isinstance(lkv, int) or lkv <= 0 or not all(isinstance(spec.get(k), int) for k in ("batch", "q_len")):
        return []  # a symbolic size: the launcher reads measured configs of static shapes only (config._lookup)
    from ..providers.triton.attention import config as attn_config

    return attn_config.sweep_points(lkv)


def gemm_configs(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The Triton merged GEMM's configs to force for ``spec`` (static M, K and Ns; else none: the launcher's own
    pick runs), as ``Config`` field dicts."""
    m, k, ns, dtype = spec.get("m"), spec.get("k"), spec.get("ns"), spec.get("dtype")
    if m is None and spec.get("m_upper") is not None:
        m = spec["m_upper"]
    if not isinstance(m, int) or not isinstance(k, int) or not ns or None in ns or dtype is None:
        return []
    from ..providers.triton import gemm_configs as gc

    if m > gc.MAX_M:
        return []
    make = gc.sweep_configs if os.environ.get(CONFIGS_ENV) == "sweep" else gc.short_configs
    return [dataclasses.asdict(c) for c in make(m, tuple(ns), k, dtype, gc._sms(), gc.warp_size())]


def is_merge(op: str, spec: dict[str, Any]) -> bool:
    """True for a ``merged_gemm`` of two or more GEMMs (``spec["ns"]``: their N)."""
    return op == "merged_gemm" and len(spec.get("ns") or ()) > 1


def is_single(op: str, spec: dict[str, Any]) -> bool:
    """True for a ``merged_gemm`` of one GEMM, which must beat cuBLAS by ``tables.SINGLE_MIN_GAIN`` (the shipped
    singles' margin, which says why) rather than :data:`MIN_GAIN`: a store row's winner decides it
    (``providers/triton/gemm_tables.py:lost``), so the measured and the shipped decisions mean the same."""
    return op == "merged_gemm" and len(spec.get("ns") or ()) == 1


#: The RMSNorm ops, whose tie goes to our kernel at or above ``policy.NORM_MIN_HIDDEN`` (:func:`tie_band`).
NORM_OPS = frozenset({"rms_norm", "fused_add_rms_norm"})
#: How much slower than Inductor's add + RMSNorm in its window ours may measure and still win (a fraction of
#: Inductor's time): the one-layer window understates what Inductor's kernel costs in a residual chain
#: (:func:`tie_band`). The smallest step / window ratio seen for it: 3.0 / 2.1 us = 1.43 (H200, Llama-3.2-1B-shaped
#: step at B = 8, run 2026-12-04-1838-tuning), rounded down. Not a measured threshold at other shapes. With it that
#: step's tuned build ran 738.5 vs the shipped 721.8 us (0.977x; 0.90x before; run 2026-12-04-2053-tuning).
RESIDUAL_BAND = 0.4


def tie_band(op: str, spec: dict[str, Any], kind: str) -> float:
    """How much slower than the baseline (a fraction of its time) ours may measure in ``op``'s window on platform
    ``kind`` (``"cuda"``, ``"rocm"``) and still win; 0: a tie (:data:`MIN_GAIN`) goes to Inductor.

    - :data:`MIN_GAIN` (a tie goes to the rewrite) for an RMSNorm at or above ``policy.NORM_MIN_HIDDEN``: our
      kernel is the level-1 default a GPU without entries gets. :data:`RESIDUAL_BAND` for the add + RMSNorm
      (``fused_add_rms_norm``) at that size: its window's Inductor time does not hold in the step. H200,
      Llama-3.2-1B-shaped step at B = 8 (run 2026-12-04-1838-tuning): it tied in its window (Inductor 2.1 vs
      Triton 2.1 us), and the Inductor kernels it got back ran 3.0-9.8 us each in the step (15 launches,
      107.7 us) where ours ran 1.7-2.1 us (17 launches, 30.7 us in the shipped build): 825.1 vs 743.8 us a step
      (0.90x). The likely cause is one the window cannot see: Inductor does not store the residual stream but
      recomputes each sum from the embedding and every earlier layer's o_proj / down outputs until its realize
      thresholds cut the chain (on CPU its add + RMSNorm kernels of a tiny HF Llama read more inputs layer by
      layer, with or without our revert; the H200 times rise and fall in that sawtooth), where the window holds
      one layer's x and r.
    - :data:`MIN_GAIN` for a merge of two or more GEMMs (:func:`is_merge`): Inductor never merges GEMMs, and the
      window, which times the region alone with inputs rotated past L2, cannot split a tie; the layer bench behind
      the shipped H200 entries timed the B = 8 gate/up merge (k=2048, ns=8192/8192) at 22.43 vs cuBLAS 23.25 us
      where the window tied (Inductor 26.8-27.3 vs Triton 27.1-27.3 us).
    - 0 for every other op (single GEMMs, folds, RoPE, the gate, attention) and for norms below
      ``policy.NORM_MIN_HIDDEN`` or of a symbolic size.
    """
    if op in NORM_OPS:
        h = spec.get("hidden")
        if not isinstance(h, int) or h < NORM_MIN_HIDDEN.get(kind, 0):
            return 0.0
        return RESIDUAL_BAND if op == "fused_add_rms_norm" else MIN_GAIN
    return MIN_GAIN if is_merge(op, spec) else 0.0


def decision_of(op: str, sig: str, res: worker.Result, region: int, neighbours: int, *,
                tie_band: float = 0.0, margin: float = MIN_GAIN) -> Decision:
    """The :class:`Decision` of a worker result: the fastest candidate wins if it beats the baseline by more than
    ``margin`` (a fraction of the baseline's time), or if it is at most ``tie_band`` slower (:func:`tie_band`),
    else ``"inductor"``; the evidence names the window, a tie (within :data:`MIN_GAIN` either way, or inside the
    band) and how it went, and every refusal."""
    base_label = worker.BASELINE if worker.BASELINE in res.times else "eager"
    base = res.times[base_label]
    ours = {k: v for k, v in res.times.items() if k != base_label}
    best = min(ours, key=ours.get, default=None)
    clear = best is not None and ours[best] < base * (1 - margin)
    banded = best is not None and not clear and tie_band > 0 and ours[best] <= base * (1 + tie_band)
    tie = best is not None and not clear and (banded or abs(ours[best] - base) <= base * MIN_GAIN)
    if clear or banded:
        winner, config = best.split(":")[0], res.configs.get(best)
    else:
        winner, config = "inductor", None
    times = dict(res.times)
    tiles = {k: v for k, v in ours.items() if k.startswith("triton:")}
    if op in GEMM_OPS and tiles:
        # the GEMM tables read a decision back as a row (tuning/tables.py:row): ours = the best tile, with its
        # config, next to the baseline, whoever won
        tile = min(tiles, key=tiles.get)
        times.setdefault("triton", tiles[tile])
        times.setdefault("unfolded" if op == "rms_norm_gemm" else "inductor", base)
        config = config if winner != "inductor" else res.configs.get(tile)
    parts = [f"window: region of {region} nodes + {neighbours} fusible neighbours, {res.copies} input sets per "
             f"replay; baseline {base_label}"]
    if tie:
        within = f"within {MIN_GAIN:.0%} of" if abs(ours[best] - base) <= base * MIN_GAIN else \
            f"at most {tie_band:.0%} slower than"
        kept = "the rewrite taken (tuner.tie_band)" if banded else "Inductor kept"
        parts.append(f"tie: {best} {ours[best]:.1f}us {within} {base_label} {base:.1f}us, {kept}")
    elif best is not None and not clear and ours[best] < base:
        parts.append(f"{best} faster by {1 - ours[best] / base:.1%}, less than the {margin:.0%} margin it needs")
    parts += [f"refused {k}: {v}" for k, v in res.refused.items()]
    return Decision(op, sig, winner, config, times, "measured", "; ".join(parts))


#: The process's tuner, installed as ``decide.measure_hook``.
TUNER = Tuner()
decide.measure_hook = TUNER
