"""Test-only: Triton's interpreter (``TRITON_INTERPRET=1``) without its repeated ``triton.language`` patching.

Under the interpreter a launch (``GridExecutor.__call__``) patches ``triton.language`` (its builtins become
interpreter calls, ``tl.range`` a Python range, ...) and restores it when the grid is done; every call of a
``@triton.jit`` device function inside the kernel (``InterpretedFunction.__call__``) patches it again, which finds
every builtin already patched and changes nothing, but costs an ``inspect.getmembers`` of ``tl``, ``tl.tensor``,
``tl.math`` and ``tl.core.tensor_descriptor_base`` (about 1.2 ms; triton 3.9 ``runtime/interpreter.py``,
``_patch_lang`` / ``_patch_builtin``). Our sampler's kernels call device functions tens of thousands of times per
test: a cProfile of ``test_sampling_chain_adversarial.py`` case 2 spent 49 s of its 123 s there.

:func:`skip_nested_lang_patching` makes a device function's patch a no-op while a launch whose own patch covers the
device function's language modules (the ``triton.language`` / ``triton.language.core`` objects in its globals: what
``_patch_lang`` patches) is running. A device function that patches a module the launch did not (``tl.max``,
``tl.zeros``: triton's standard library sees ``triton.language.core``) patches as before, once per launch: its patch
is never restored (the interpreter drops that scope), so it holds for the rest of the launch. The interpreted
semantics are unchanged.
"""

from __future__ import annotations

import inspect
from typing import Any


def skip_nested_lang_patching() -> bool:
    """Install the skip (idempotent). Returns False, changing nothing, where this Triton lacks the internals used
    (``triton.runtime.interpreter._patch_lang``, ``_LangPatchScope``, ``GridExecutor``)."""
    try:
        import triton.language as tl
        from triton.runtime import interpreter as interp
    except ImportError:
        return False
    grid = getattr(interp, "GridExecutor", None)
    if not (callable(getattr(interp, "_patch_lang", None)) and callable(getattr(interp, "_LangPatchScope", None))
            and isinstance(grid, type) and "__call__" in vars(grid)):
        return False
    if getattr(interp._patch_lang, "_skips_nested", False):
        return True
    orig_patch, orig_call = interp._patch_lang, grid.__call__
    launches: list[list[Any]] = []  # per launch in progress: [kernel fn, its language modules, patched yet]
    lang_ids: dict[Any, frozenset] = {}

    def langs(fn: Any) -> frozenset:
        if fn not in lang_ids:
            lang_ids[fn] = frozenset(id(v) for v in fn.__globals__.values()
                                     if inspect.ismodule(v) and (v is tl or v is tl.core))
        return lang_ids[fn]

    def patch_lang(fn: Any) -> Any:
        top = launches[-1] if launches else None
        if top is not None and top[2] and langs(fn) <= top[1]:
            return interp._LangPatchScope()  # already patched by the launch: nothing to change or restore
        scope = orig_patch(fn)
        if top is not None and fn is top[0]:
            top[2] = True
        elif top is not None:  # a device function's patch is never restored: it holds until the launch ends
            top[1] = top[1] | langs(fn)
        return scope

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        launches.append([self.fn, langs(self.fn), False])
        try:
            return orig_call(self, *args, **kwargs)
        finally:
            launches.pop()

    patch_lang._skips_nested = True  # type: ignore[attr-defined]
    interp._patch_lang = patch_lang
    grid.__call__ = call
    return True
