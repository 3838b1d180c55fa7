"""The ``rocm_fused`` torch.compile backend.

``torch.compile(model, backend="rocm_fused", options={...})`` (found through the
``torch_dynamo_backends`` entry point, no import needed) or ``mode=...``: resolve the options and level,
install our :class:`~rocm_inductor.passes.manager.PassManager` as Inductor's post-grad custom pass, and
call Inductor's ``compile_fx``. Levels (``mode=`` maps onto them):

=====================================  =====  =========================================================
mode / options                         level  what runs
=====================================  =====  =========================================================
``options={"level": 0}``               0      plain Inductor (A/B baseline)
default / ``"reduce-overhead"``        1      rewrites, Inductor defaults (+ CUDA graphs for reduce-overhead)
``"max-autotune"`` / ``level: 2``      2      rewrites + max-autotune (+ CUDA graphs) + ATen GEMMs for
                                              small-M buckets
``"max-autotune-no-cudagraphs"``       2      the same without CUDA graphs
=====================================  =====  =========================================================
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch

from . import ops  # noqa: F401  (registers the rocm_fused custom ops)
from .options import PASS_HOOK, Options, parse_options
from .passes.manager import PassManager

log = logging.getLogger("rocm_inductor")

#: mode -> (level, CUDA graphs) for modes Inductor knows.
MODE_LEVELS: dict[str, tuple[int, bool]] = {
    "default": (1, False),
    "reduce-overhead": (1, True),
    "max-autotune": (2, True),
    "max-autotune-no-cudagraphs": (2, False),
}


_RESTART = getattr(torch._dynamo.exc, "RestartAnalysis", ())


def resolve(mode: str | None, options: dict[str, Any] | Options | None) -> tuple[Options, dict[str, Any]]:
    """Turn ``mode``/``options`` into validated options and Inductor config patches.

    Args:
        mode: an Inductor mode name or None.
        options: the user's options dict (keys of :class:`~rocm_inductor.options.Options`).

    Returns:
        ``(options, config_patches)`` for ``compile_fx``; ``options.inductor_config`` is applied last.

    Raises:
        ValueError: unknown mode, unknown option key or bad value.
    """
    opts = parse_options(options)
    if mode is not None and mode not in MODE_LEVELS:
        raise ValueError(f"rocm_fused: unknown mode {mode!r}; valid modes are {list(MODE_LEVELS)}")
    level, graphs = (opts.level, opts.level == 2) if mode is None else MODE_LEVELS[mode]
    if mode is not None and level != opts.level:
        opts = dataclasses.replace(opts, level=level)
    if opts.cudagraphs is not None:
        graphs = opts.cudagraphs
    patches: dict[str, Any] = {}
    if level == 2:
        patches.update(torch._inductor.list_mode_options("max-autotune-no-cudagraphs"))
    if graphs:
        patches["triton.cudagraphs"] = True
    if level > 0:
        # a user's own pre-pass (set in Inductor's config before compiling) is chained, not replaced
        user = getattr(torch._inductor.config, PASS_HOOK, None)
        if isinstance(user, PassManager):  # ours, from an enclosing rocm_fused compile: never run twice
            user = user.user_pass
        patches[PASS_HOOK] = PassManager(opts, user_pass=user if callable(user) else None)
    if level == 2:
        from .lowerings import gemm_config_patches
        from .tuning import tuner  # noqa: F401  (installs the measure hook: level 2 measures what the store lacks)

        patches.update(gemm_config_patches(opts))
    patches.update(opts.inductor_config)  # the user's own Inductor patches win over the level's
    return opts, patches


def rocm_fused(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], mode: str | None = None,
               options: dict[str, Any] | Options | None = None) -> Callable[..., Any]:
    """The ``rocm_fused`` backend (Dynamo calls it with the captured graph).

    Args:
        gm: the FX graph Dynamo captured; example_inputs: its example inputs (fake or real tensors).
        mode: Inductor mode (``"reduce-overhead"``, ``"max-autotune"``, ...), mapped onto a level.
        options: dict of :class:`~rocm_inductor.options.Options` fields.

    Returns:
        The compiled callable from Inductor's ``compile_fx``.

    Raises:
        ValueError / TypeError: invalid mode or options (always raised: it is the user's input).
        Whatever Inductor raises on a graph it cannot compile even without our rewrites. An error caused by
        our rewrites is logged and the graph is compiled again without them; at level 2, if that fails too,
        once more without the small-M GEMM override (``strict=True`` re-raises the first error).
    """
    from torch._inductor.compile_fx import compile_fx

    from ._compat import depyf_shim, fx_cache
    from .lowerings import gemm_fallback_patches, gemm_override, small_m

    depyf_shim.apply()  # no-op unless depyf.prepare_debug is in use (max-autotune under depyf, torch 2.13)
    fx_cache.install()  # a graph served from the FX graph cache reports what its cold compile did
    opts, patches = resolve(mode, options)
    # level 2: M = 1 GEMMs stay GEMMs until our passes have seen them (lowerings/small_m.py)
    kept = small_m.gemms_kept if opts.level == 2 else contextlib.nullcontext
    try:
        with gemm_override(opts), kept():  # level 2: small-M GEMMs on ATen, for this compile only
            return compile_fx(gm, example_inputs, config_patches=patches)
    except Exception as e:
        # Dynamo's restart signals are control flow, not failures: let them through untouched.
        if opts.strict or PASS_HOOK not in patches or isinstance(e, _RESTART):
            raise
        log.warning("rocm_fused: compiling with our rewrites failed (%s: %s); compiling without them",
                    type(e).__name__, e)
        user = patches.pop(PASS_HOOK).user_pass
        if user is not None:
            patches[PASS_HOOK] = user  # the user's pass stays: only ours is dropped
        plain = dict(patches)
        patches.update(gemm_fallback_patches(opts, user))  # keep the GEMM override in the cache key
    try:
        with gemm_override(opts):
            return compile_fx(gm, example_inputs, config_patches=patches)
    except Exception as e:
        if opts.level != 2 or isinstance(e, _RESTART):
            raise
        # level 2: the override itself may be what failed; the graph as plain max-autotune compiles it
        log.warning("rocm_fused: compiling with the small-M GEMM override failed too (%s: %s); compiling "
                    "without it", type(e).__name__, e)
        plain.pop("inductor_choices_class", None)
        return compile_fx(gm, example_inputs, config_patches=plain)
