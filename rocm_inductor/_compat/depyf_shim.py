"""depyf compatibility: keep ``depyf.prepare_debug`` working under max-autotune on torch >= 2.13.

depyf (0.20, the current release) replaces ``PyCodeCache.load_by_key_path`` inside ``prepare_debug`` with
``patched_load_by_key_path(key, path, linemap=None, attrs=None)``, which has no ``**kwargs``. Inductor 2.13
calls ``load_by_key_path(key, path, set_sys_modules=False)`` when it compiles autotuning candidates
(``select_algorithm.py``, ``autotune_process.py``), so max-autotune (our level 2) under ``prepare_debug``
raises ``TypeError: patched_load_by_key_path() got an unexpected keyword argument 'set_sys_modules'``
(docs/vendors.md, "Inductor hooks").

The shim wraps depyf's hook in a function that takes the extra keyword arguments: it copies the kernel
source into depyf's dump dir exactly as depyf does (``<fn>.kernel_<n>.py``) and forwards every argument,
keywords included, to the original ``load_by_key_path``.

Why it is applied automatically: depyf is a debugging tool the user turned on; failing the compile under
it is never wanted. :func:`apply` is called each time the ``rocm_fused`` backend compiles a graph. It
patches two places: depyf's module attribute (so later ``prepare_debug`` blocks install the shim) and the
hook currently installed on ``PyCodeCache`` (``prepare_debug`` is usually entered *before* the lazy compile,
so its unshimmed hook is already in place when our backend runs; depyf restores the original on exit).
It does nothing when depyf is not imported or its hook already takes ``**kwargs`` (a fixed depyf); called
without keyword arguments (older Inductor) the shim just calls depyf's hook. Users of plain
``torch.compile(backend="inductor")`` can call :func:`apply` themselves.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
from collections.abc import Callable
from typing import Any

_SHIM_ATTR = "_rocm_fused_depyf_shim"


def _takes_var_kwargs(fn: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return True  # cannot tell: leave it alone
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def _wrap(depyf_hook: Callable[..., Any]) -> Callable[..., Any]:
    """depyf's hook, taking and forwarding Inductor's extra keyword arguments."""

    @functools.wraps(depyf_hook)
    def load_by_key_path(key: str, path: str, linemap: Any = None, attrs: Any = None, **kwargs: Any) -> Any:
        if not kwargs:
            return depyf_hook(key, path, linemap, attrs)
        from depyf.explain.global_variables import data
        from depyf.explain.utils import get_current_compiled_fn_name, write_code_to_file_template

        # The same copy into the dump dir as depyf's hook, then the original loader with every argument.
        with open(path) as f:
            src = f.read()
        new_path = write_code_to_file_template(src, os.path.join(
            data["dump_src_dir"], get_current_compiled_fn_name() + ".kernel_%s.py"))
        return data["unpatched_load_by_key_path"](key, new_path, linemap, attrs, **kwargs)

    setattr(load_by_key_path, _SHIM_ATTR, True)
    return load_by_key_path


def needed() -> bool:
    """True when depyf is imported and its hook lacks ``**kwargs``.

    Whether this Inductor passes keywords is not checked: without keywords the shim calls depyf's hook
    unchanged, so it is harmless where Inductor passes none.
    """
    mod = sys.modules.get("depyf.explain.enable_debugging")
    if mod is None:
        return False
    hook = getattr(mod, "patched_load_by_key_path", None)
    return hook is not None and not getattr(hook, _SHIM_ATTR, False) and not _takes_var_kwargs(hook)


def apply() -> bool:
    """Install the shim where depyf's hook is (see module docstring). Idempotent; never raises.

    Returns:
        True when something was patched by this call.
    """
    try:
        mod = sys.modules.get("depyf.explain.enable_debugging")
        if mod is None:
            return False
        from torch._inductor.codecache import PyCodeCache

        hook = getattr(mod, "patched_load_by_key_path", None)
        patched = False
        if needed():
            mod.patched_load_by_key_path = _wrap(hook)
            patched = True
        # A prepare_debug block entered before this call installed depyf's unshimmed hook on the class.
        live = PyCodeCache.__dict__.get("load_by_key_path")
        if (inspect.isfunction(live) and live.__name__ == "patched_load_by_key_path"
                and not getattr(live, _SHIM_ATTR, False) and not _takes_var_kwargs(live)):
            PyCodeCache.load_by_key_path = _wrap(live)
            patched = True
        return patched
    except Exception:  # a debugging aid must never break a compile
        return False
