"""The GEMM bucket override: ATen (vendor BLAS) for small-M GEMMs under level 2.

Under max-autotune Inductor benchmarks Triton GEMM templates for every GEMM shape. For a decode bucket of a
few tokens (M = batch * new tokens <= 32) the vendor BLAS (hipBLASLt on ROCm, cuBLAS on NVIDIA) is rarely
beaten, and tuning costs about a minute per bucket (H200, torch 2.11, Llama-3.2-1B shape: decode buckets
M = 2-32 compiled in 73-85 s under max-autotune vs 25-34 s with this override, and the override's steps were
1.02-1.13x faster; ``benchmarks/RESULTS.md``). So under level 2 this override keeps only the
ATen choice of ``mm`` / ``addmm`` / ``bmm`` / ``baddbmm`` whose M is small, and nothing is autotuned for
them; larger M (prefill) keeps every choice and is tuned as before.

Decision (:func:`decide`, pure): M is the row count of one matrix product, ``mat1.shape[-2]`` (bmm batch
dims do not count: each batch element is still a skinny GEMM). Keep ATen only when

- M is a static value ``<= aten_gemm_max_m``, or
- M is symbolic and its upper bound from the ShapeEnv's value ranges is ``<= aten_gemm_max_m`` (e.g.
  ``torch._dynamo.mark_dynamic(x, 0, min=1, max=32)``); a symbolic M without a finite bound keeps every
  choice, since the same compiled kernel may serve a large M.

``aten_gemm_max_m=0`` turns the override off; if ATen is not among ``max_autotune_gemm_backends`` every
choice is kept (dropping all of them would raise ``NoValidChoicesError``).

Mechanism: :class:`GemmBucketChoices` subclasses Inductor's ``InductorChoices`` and overrides
``_finalize_template_configs(template_choices, kernel_inputs, templates, op_name, kwarg_overrides=None)``
(the same signature in torch 2.11 and 2.13): for a small-M GEMM it keeps the first ``ExternKernelChoice``
of that GEMM and drops the templates before any of them is generated, so Inductor's selector sees one
choice and returns it without benchmarking. It is installed per compile, :func:`gemm_override` setting
``V.set_choices_handler`` around ``compile_fx`` and restoring the previous handler afterwards (Inductor
resolves ``config.inductor_choices_class`` only once per thread, so that config alone would leak into later
compiles). A handler already in place (a user's ``InductorChoices`` subclass, the lookup table) is kept: our
class is mixed into its class. FX graph cache key: where ``config.inductor_choices_class`` enters the key
(torch >= 2.12, ``_cache_config_factory_keys``), :func:`config_patches` sets it to a factory whose
``uuid()`` hashes this file and ``aten_gemm_max_m`` (the handlers it makes are inert: a thread without a
handler, e.g. the autograd engine's compiling a backward, makes its default handler from that factory); on
older torch (2.11) the key carries the override through the pass manager's ``uuid()`` (options incl.
``level``/``aten_gemm_max_m`` and every package source); when our rewrites are dropped after a failure,
:class:`GemmKeyPass` takes the pass manager's place.

Where Inductor bypasses the hook (documented, not hidden):

- M == 1 (and N == 1) with ``coordinate_descent_tuning`` (on under max-autotune, so under level 2) on a
  GPU: Inductor's ``mm``/``bmm`` decompositions turn the GEMM into mul + sum before lowering; it becomes a
  Triton reduction (coordinate-descent tuned), never reaches the hook and never runs on ATen. We leave it so:
  on the H200 that reduction beat cuBLAS's GEMV (Llama-3.2-1B shape, M=1 step 1241-1302 us vs 1592 us with
  ``options={"inductor_config": {"coordinate_descent_tuning": False}}``, which sends M=1 to the hook and
  cuBLAS; ``benchmarks/RESULTS.md``).
- K == 1: ``mm``/``addmm`` decompose into a pointwise outer product (no GEMM at all); a bmm with
  ``[B, M, 1] x [B, 1, N]`` likewise.
- CUTLASS, CK / CK-tile, C++ (CPU) GEMM templates and ``config.external_matmul`` choices are appended by
  Inductor outside this hook and still get autotuned when those backends are enabled (CPP is on by
  default for CPU tensors under max-autotune).
- Backward graphs of training compiles are lowered lazily, after ``compile_fx`` returned: they see
  Inductor's default handler (rewrites target inference graphs anyway).
- ``_int_mm``, ``mm_plus_mm``, scaled / grouped GEMMs are not overridden.

Each GEMM the hook sees is recorded (:class:`~rocm_inductor.report.GemmChoice`: op, M, its bound, what was
kept) in the compile's graph report, and logged at DEBUG level (``TORCH_LOGS="+rocm_fused"``).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import pathlib
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch._inductor.choices import InductorChoices
from torch._inductor.custom_graph_pass import CustomGraphPass

from .. import buckets
from .. import report as report_mod
from ..buckets import GEMM_OPS, Decision, decide, gemm_m, m_upper_bound  # noqa: F401  (re-exported)
from ..options import PASS_HOOK

log = logging.getLogger("rocm_inductor")

#: This file's and the bucket rule's sources, in the choices factory's cache key.
_SOURCE_HASH = hashlib.sha256(pathlib.Path(__file__).read_bytes()
                              + pathlib.Path(buckets.__file__).read_bytes()).hexdigest()[:16]


_op_family = buckets._op_family


def _name(template: Any) -> str:
    return str(getattr(template, "uid", None) or getattr(template, "name", None) or type(template).__name__)


def _is_extern(template: Any) -> bool:
    from torch._inductor.select_algorithm import ExternKernelChoice

    return isinstance(template, ExternKernelChoice)


def _var_ranges() -> Mapping[Any, Any] | None:
    try:
        from torch._inductor.virtualized import V

        return V.graph.sizevars.shape_env.var_to_range
    except Exception:  # no graph being lowered (unit tests of the hook)
        return None


def _aten_allowed() -> bool:
    try:
        from torch._inductor.utils import use_aten_gemm_kernels

        return bool(use_aten_gemm_kernels())
    except Exception:
        return True


def _gemm_key(op_name: str, kernel_inputs: Any) -> tuple:
    """Identify one GEMM across the several ``get_template_configs`` calls Inductor makes for it (addmm).

    The key is the FX node being lowered (in the graph being lowered) plus the operands' buffer names: the
    names alone do not tell GEMMs apart when their operands are views of one buffer (a chunked QKV weight,
    row slices of one activation) or when one product gets two biases (two ``addmm``).
    """
    try:
        mats = kernel_inputs.mat1mat2() if hasattr(kernel_inputs, "mat1mat2") else kernel_inputs.nodes()[-2:]
        names = tuple(n.get_name() for n in mats)
    except Exception:
        names = (id(kernel_inputs),)
    try:
        from torch._inductor.virtualized import V

        graph = V.graph
        node = getattr(graph, "current_node", None)
    except Exception:  # no graph being lowered (unit tests of the hook)
        graph = node = None
    # the graph object itself (not its id): held by the key, so no later graph can reuse its id
    where = (graph, node) if node is not None else ()
    return (_op_family(op_name), *where, names)


class _GemmBucketMixin:
    """The override, mixed into an ``InductorChoices`` class (see :func:`make_choices`)."""

    aten_gemm_max_m: int = 32
    _base_uuid: str | None = None
    _gemm_active: bool = True

    def _gemm_init(self, max_m: int, base_uuid: str | None = None, active: bool = True) -> None:
        self.aten_gemm_max_m = max_m
        self._base_uuid = base_uuid
        #: False: only carries the cache key (see :func:`_factory`); the hook changes nothing
        self._gemm_active = active
        #: one record per GEMM, in lowering order
        self.gemm_records: dict[tuple, report_mod.GemmChoice] = {}

    def uuid(self) -> str:
        """Cache-key identity: this file's hash, ``aten_gemm_max_m`` and the mixed-in handler's uuid."""
        return f"rocm_fused.gemm_buckets:{_SOURCE_HASH}:max_m={self.aten_gemm_max_m}:base={self._base_uuid}"

    def _finalize_template_configs(self, template_choices, kernel_inputs, templates, op_name,
                                   kwarg_overrides=None):
        """Inductor's hook (signature of torch 2.11 and 2.13): the choices, ATen only for small M."""
        choices = super()._finalize_template_configs(  # type: ignore[misc]
            template_choices, kernel_inputs, templates, op_name, kwarg_overrides)
        if (not self._gemm_active or _op_family(op_name) not in GEMM_OPS
                or not hasattr(kernel_inputs, "mnk_symbolic")):
            return choices
        m = kernel_inputs.mnk_symbolic()[0]
        d = decide(op_name, m, self.aten_gemm_max_m, _var_ranges(), _aten_allowed())
        key = _gemm_key(op_name, kernel_inputs)
        rec = self.gemm_records.get(key)
        if rec is None:
            rec = report_mod.GemmChoice(op=_op_family(op_name), m=d.m, m_upper=d.m_upper,
                                        aten_only=d.aten_only, reason=d.reason)
            self.gemm_records[key] = rec
        offered = [_name(c.template) for c in choices]
        if d.aten_only:
            # one extern choice per GEMM (addmm may offer aten_addmm and aten_bias_addmm): nothing to tune
            have_extern = bool(rec.kept)
            kept = []
            for c in choices:
                if not have_extern and _is_extern(c.template):
                    kept.append(c)
                    have_extern = True
            choices = kept
        rec.offered.extend(offered)
        rec.kept.extend(_name(c.template) for c in choices)
        return choices


class GemmBucketChoices(_GemmBucketMixin, InductorChoices):
    """``InductorChoices`` with the small-M ATen override (on Inductor's default heuristics).

    Args:
        aten_gemm_max_m: largest M kept on ATen (int >= 0; 0 = off).
        active: False = only a carrier of the cache key (``uuid()``), the hook changes nothing.
    """

    def __init__(self, aten_gemm_max_m: int = 32, active: bool = True) -> None:
        super().__init__()
        self._gemm_init(aten_gemm_max_m, active=active)


def make_choices(max_m: int, base: InductorChoices | None = None, active: bool = True) -> InductorChoices:
    """The override on top of ``base`` (the handler in place), keeping ``base``'s other heuristics.

    Args:
        max_m: ``aten_gemm_max_m``.
        base: the current ``InductorChoices`` (None or the plain class -> :class:`GemmBucketChoices`).
        active: False makes a handler that only carries the override's cache key (``uuid()``) and
            otherwise behaves as ``base``.

    Returns:
        An ``InductorChoices`` instance with a ``uuid()`` and ``gemm_records``.
    """
    if base is None or not isinstance(base, InductorChoices):
        return GemmBucketChoices(max_m, active)
    # a handler that is already ours (nested level-2 compile): re-base on the class it was mixed into
    base_cls = next(c for c in type(base).__mro__
                    if issubclass(c, InductorChoices) and not issubclass(c, _GemmBucketMixin))
    if base_cls is InductorChoices:
        return GemmBucketChoices(max_m, active)
    obj = _mixed_class(base_cls).__new__(_mixed_class(base_cls))
    obj.__dict__.update({k: v for k, v in vars(base).items() if k not in ("gemm_records", "_base_uuid",
                                                                          "aten_gemm_max_m", "_gemm_active")})
    if isinstance(base, _GemmBucketMixin):
        base_uuid = base._base_uuid
    else:
        base_uuid = base.uuid() if callable(getattr(base, "uuid", None)) else None
    obj._gemm_init(max_m, str(base_uuid) if base_uuid is not None else
                   f"{base_cls.__module__}.{base_cls.__qualname__}", active)
    return obj


@functools.cache
def _mixed_class(base_cls: type) -> type:
    return type(f"GemmBucket{base_cls.__name__}", (_GemmBucketMixin, base_cls), {})


def _factory(max_m: int, user_factory: Any = None) -> InductorChoices:
    """``config.inductor_choices_class`` value: the override's cache key over the user's own factory.

    The handler it makes is inert (``active=False``): Inductor also calls this factory to make the default
    handler of a thread that has none, e.g. the autograd engine's thread compiling a backward lazily, and
    keeps that handler for every later compile of the thread. The override itself is only the handler
    :func:`gemm_override` installs around one compile.
    """
    return make_choices(max_m, user_factory() if user_factory is not None else None, active=False)


def choices_class_in_cache_key() -> bool:
    """Whether ``config.inductor_choices_class`` exists and enters the FX graph cache key (torch >= 2.12)."""
    cfg = torch._inductor.config
    return hasattr(cfg, "inductor_choices_class") and "inductor_choices_class" in getattr(
        cfg, "_cache_config_factory_keys", ())


def config_patches(options: Any) -> dict[str, Any]:
    """Inductor config patches for level 2: ``inductor_choices_class`` where it is part of the cache key.

    Args:
        options: the compile's :class:`~rocm_inductor.options.Options`.

    Returns:
        ``{"inductor_choices_class": factory}`` on torch >= 2.12, else ``{}`` (the pass manager's uuid
        carries the override there).
    """
    if options.level != 2 or not choices_class_in_cache_key():
        return {}
    user = torch._inductor.config.inductor_choices_class
    if isinstance(user, functools.partial) and user.func is _factory:  # already ours (nested compile)
        user = user.args[1] if len(user.args) > 1 else None
    return {"inductor_choices_class": functools.partial(_factory, options.aten_gemm_max_m, user)}


class GemmKeyPass(CustomGraphPass):
    """A post-grad pass whose ``uuid()`` keys the override (used when our rewrites are dropped).

    Args:
        options: the compile's options.
        user_pass: the user's own pre-pass, if any: run as before and part of the key.
    """

    def __init__(self, options: Any, user_pass: Any = None) -> None:
        self.options = options
        self.user_pass = user_pass

    def __call__(self, graph: torch.fx.Graph) -> None:
        if self.user_pass is not None:
            self.user_pass(graph)

    def uuid(self) -> str:
        """The override's identity, the options and the user's pass's ``uuid()`` (if it has one)."""
        user = self.user_pass
        user_id = user.uuid() if callable(getattr(user, "uuid", None)) else (None if user is None else "no-uuid")
        return f"rocm_fused.gemm_key:{_SOURCE_HASH}:{self.options.key()}:user={user_id}"


def fallback_patches(options: Any, user_pass: Any = None) -> dict[str, Any]:
    """Patches that keep the override in the cache key once the pass manager is removed (torch < 2.12).

    Args:
        options: the compile's options.
        user_pass: the user's own pre-pass that takes the pass manager's slot, chained in the key pass.

    Returns:
        ``{<the backend's pass hook>: GemmKeyPass(options, user_pass)}`` (the slot the pass manager left), or
        ``{}`` where the choices class carries the key (or below level 2).
    """
    if options.level != 2 or choices_class_in_cache_key():
        return {}
    return {PASS_HOOK: GemmKeyPass(options, user_pass)}


def _current_handler() -> Any:
    from torch._inductor import virtualized

    try:
        return virtualized._choices._get_handler(False)
    except Exception:
        return virtualized.V.choices


@contextlib.contextmanager
def gemm_override(options: Any) -> Iterator[InductorChoices | None]:
    """Install the override for the compile inside the block (level 2 only; else a no-op yielding None).

    The previous handler is restored on exit (also when the compile raises); after a compile that
    succeeded, each GEMM's decision goes into its graph report (the newest one made during the block; a
    new one when no pass manager ran) and the DEBUG log.
    """
    if options.level != 2:
        yield None
        return
    if not hasattr(InductorChoices, "_finalize_template_configs"):  # a torch without the hook
        log.warning("rocm_fused: this torch's InductorChoices has no _finalize_template_configs; "
                    "level 2 runs without the small-M ATen GEMM override")
        yield None
        return
    from torch._inductor.virtualized import V

    handler = make_choices(options.aten_gemm_max_m, _current_handler())
    start = len(report_mod.reports())
    with V.set_choices_handler(handler):
        yield handler
    _attach(handler, start)  # a compile that raised reports nothing (its retry does)


def attach_records_now(start: int) -> None:
    """Move the GEMM decisions recorded so far into the newest report made since ``start`` (then forget them).

    Called when Inductor has finished one graph, before it saves the graph to its FX graph cache (so the
    cached report holds the decisions: ``rocm_inductor._compat.fx_cache``); a no-op below level 2.
    """
    handler = _current_handler()
    if getattr(handler, "gemm_records", None):
        _attach(handler, start)
        handler.gemm_records.clear()


def _attach(handler: Any, start: int) -> None:
    records = list(getattr(handler, "gemm_records", {}).values())
    if not records:
        return
    reps = report_mod.reports()
    if len(reps) > start:
        rep = reps[-1]
    else:
        from ..platform import PlatformDispatch

        rep = report_mod.new_graph_report(str(PlatformDispatch.platform()))
    rep.gemms.extend(records)
    for r in records:
        log.debug("rocm_fused graph %s: %s", rep.graph_id, r.line())
