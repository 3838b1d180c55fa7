"""The package's structure: no import circles, no file over its limit, every module importable on its own.

``scripts/check_structure.py`` does the static part (``ast``, nothing imported); this file runs it in CI so a new
circle or an oversized file fails the suite, and imports every module of ``rocm_inductor`` first in a fresh
process (an import that only works after some other module was imported is a hidden circle or a missing import).
"""

from __future__ import annotations

import importlib.util
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("check_structure", ROOT / "scripts" / "check_structure.py")
check_structure = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_structure)


def test_no_import_circles():
    assert check_structure.circles(check_structure.import_graph()) == []


def test_no_file_over_its_limit():
    assert check_structure.oversized() == []


def test_checker_finds_a_circle_and_an_oversized_file(tmp_path):
    """The checks themselves: a two-module circle (one side a function-level import) and a long pass file."""
    pkg = tmp_path / "rocm_inductor"
    (pkg / "passes").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("def f():\n    from rocm_inductor import a\n")
    (pkg / "passes" / "__init__.py").write_text("")
    (pkg / "passes" / "long.py").write_text("x = 1\n" * (check_structure.MAX_PASS_LINES + 1))
    mods = check_structure.modules(pkg)
    assert check_structure.circles(check_structure.import_graph(mods)) == [["rocm_inductor.a", "rocm_inductor.b"]]
    old_pkg = check_structure.PKG
    check_structure.PKG, check_structure.ROOT = pkg, tmp_path
    try:
        assert check_structure.oversized(mods) == [
            ("rocm_inductor/passes/long.py", check_structure.MAX_PASS_LINES + 1, check_structure.MAX_PASS_LINES)
        ]
    finally:
        check_structure.PKG, check_structure.ROOT = old_pkg, ROOT


@pytest.mark.slow
def test_every_module_imports_in_a_fresh_process():
    """Every module of the package imports in one fresh interpreter, in name order (a module that imports only
    after some other module was imported first shows up as a failure here, not in a user's process)."""
    names = sorted(check_structure.modules())
    code = (
        "import importlib, sys\n"
        "failed = []\n"
        "for name in sys.argv[1:]:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception as e:\n"
        "        failed.append(f'{name}: {type(e).__name__}: {e}')\n"
        "print('\\n'.join(failed))\n"
        "sys.exit(1 if failed else 0)\n"
    )
    r = subprocess.run([sys.executable, "-c", code, *names], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr[-4000:]
