"""Command line: ``python -m rocm_inductor explain path/to/script.py:function [options]`` and
``python -m rocm_inductor tune SCRIPT_OR_MODULE:function [--store DIR]`` (``rocm_inductor/tuning/cli.py``: measure
the function's level-2 decisions on this GPU ahead of time and print them; the same convention for the function).

``function`` is called with no arguments and returns ``(model_or_step_fn, example_inputs)`` or
``(model_or_step_fn, example_inputs, compile_kwargs)``: ``example_inputs`` is a tuple/list of positional
arguments (a single tensor is taken as one argument), ``compile_kwargs`` a dict of ``torch.compile``
keywords (``options=``, ``mode=``, ``dynamic=``). The script is imported as a module (its
``if __name__ == "__main__":`` block does not run). The report of that compile is printed as a table, or
as JSON with ``--json``. Command-line ``--options``/``--provider`` are merged over the function's options.
Exit status: 0 on success, 2 on bad arguments (a bad ``path:function``, a function that needs arguments or
returns something else, bad ``--options``: not JSON, an unknown option key, provider or mode), with a one-line
error on stderr.
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import json
import pathlib
import sys
from typing import Any


class UsageError(Exception):
    """A bad command line (target, options): printed as one line, exit status 2."""


def _load(target: str, modules: bool = False) -> Any:
    """Import ``path.py`` and return its attribute ``function`` (``path.py:function``); with ``modules``, a dotted
    module name in place of the path too (``package.module:function``).

    Raises:
        UsageError: no ``:``, no such file (or module), no such function, or a function that needs arguments.
    """
    path, sep, name = target.rpartition(":")
    if not sep or not path or not name:
        raise UsageError(f"expected path/to/script.py:function, got {target!r}")
    file = pathlib.Path(path).resolve()
    if modules and not file.is_file() and not path.endswith(".py"):
        try:
            mod = importlib.import_module(path)
        except ImportError as e:
            raise UsageError(f"no such file or module {path!r} ({e})") from None
    elif not file.is_file():
        raise UsageError(f"no such file {path!r}")
    else:
        sys.path.insert(0, str(file.parent))  # the script's own imports of its neighbours
        spec = importlib.util.spec_from_file_location(f"_rocm_fused_explain_{file.stem}", file)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
    fn = getattr(mod, name, None)
    if not callable(fn):
        raise UsageError(f"{path} has no function {name!r}")
    try:
        inspect.signature(fn).bind()
    except TypeError as e:
        raise UsageError(f"{path}:{name} must take no arguments ({e})") from None
    except ValueError:  # no signature (a builtin): let the call decide
        pass
    return fn


def _unpack(result: Any) -> tuple[Any, tuple, dict[str, Any]]:
    import torch

    shape = "(model_or_step_fn, example_inputs) or (model_or_step_fn, example_inputs, compile_kwargs: dict)"
    if not isinstance(result, (tuple, list)) or len(result) not in (2, 3):
        what = f"a {len(result)}-item {type(result).__name__}" if isinstance(result, (tuple, list)) else \
            type(result).__name__
        raise UsageError(f"the function must return {shape}, got {what}")
    if len(result) == 3 and not isinstance(result[2], dict):
        raise UsageError(f"the function must return {shape}; its third item is a {type(result[2]).__name__}")
    model, inputs = result[0], result[1]
    kwargs = dict(result[2]) if len(result) == 3 else {}
    if isinstance(inputs, torch.Tensor) or not isinstance(inputs, (tuple, list)):
        inputs = (inputs,)
    return model, tuple(inputs), kwargs


def main(argv: list[str] | None = None) -> int:
    """Entry point (see module docstring). Returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m rocm_inductor")
    sub = parser.add_subparsers(dest="command", required=True)
    ex = sub.add_parser("explain", help="compile a script's model with rocm_fused and print what it did")
    ex.add_argument("target", help="path/to/script.py:function; the function returns (model_or_step_fn, "
                                   "example_inputs[, compile_kwargs])")
    ex.add_argument("--options", default=None, help='JSON dict of rocm_fused options, e.g. \'{"level": 2}\'')
    ex.add_argument("--provider", default=None, help="force one provider (reference, triton, ...)")
    ex.add_argument("--mode", default=None, help="torch.compile mode (e.g. max-autotune)")
    ex.add_argument("--dry-run", action="store_true", help="stop after our passes (fast; no kernels built)")
    ex.add_argument("--json", action="store_true", help="print the report as JSON")
    tu = sub.add_parser("tune", help="measure a step function's level-2 decisions on this GPU and store them")
    tu.add_argument("target", help="path/to/script.py:function or package.module:function; the function returns "
                                   "(model_or_step_fn, example_inputs[, compile_kwargs])")
    tu.add_argument("--options", default=None, help="JSON dict of rocm_fused options (level is set to 2)")
    tu.add_argument("--store", default=None, help="decision store directory (default: in Inductor's cache dir)")
    tu.add_argument("--full-compile", action="store_true", help="the whole compile, not only our passes")
    args = parser.parse_args(argv)
    prog = f"python -m rocm_inductor {args.command}"
    tune = args.command == "tune"
    try:
        model, inputs, kwargs = _unpack(_load(args.target, modules=tune)())
    except UsageError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    options = dict(kwargs.pop("options", None) or {})
    if args.options:
        try:
            options.update(json.loads(args.options))
        except json.JSONDecodeError as e:
            parser.error(f"--options is not JSON: {e}")
    if not tune and args.provider:
        options["provider"] = args.provider
    if not tune and args.mode:
        kwargs["mode"] = args.mode
    try:
        if tune:
            from .tuning import cli

            text = cli.run(model, inputs, kwargs, options, args.store, args.full_compile)
        else:
            from . import explain

            rep = explain(model, *inputs, dry_run=args.dry_run, options=options or None, **kwargs)
            text = rep.to_json() if args.json else rep
    except (ValueError, TypeError) as e:
        if not str(e).startswith("rocm_fused"):  # the model's own error: its traceback is the user's to read
            raise
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
