"""Structure checks of the package: no import circles, no oversized files.

Reads every module of ``rocm_inductor/`` with ``ast`` (nothing is imported), builds the graph of imports between
the package's own modules (module-level and function-level imports alike: an import inside a function that only
hides a circle is still a circle), and reports

- every strongly connected component of more than one module (an import circle);
- every file over ``MAX_LINES`` lines, and every pass file (``passes/``) over ``MAX_PASS_LINES``.

Usage: ``python scripts/check_structure.py`` (exit status 1 when something is found). ``tests/test_structure.py``
runs the same checks in CI.
"""

from __future__ import annotations

import ast
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
PKG = ROOT / "rocm_inductor"
#: Largest file in the package, and largest pass file (issue: "a house a newcomer can carry on").
MAX_LINES = 500
MAX_PASS_LINES = 300


def modules(pkg: pathlib.Path = PKG) -> dict[str, pathlib.Path]:
    """Dotted module name -> file, for every ``.py`` under ``pkg`` (``__init__`` named as its package)."""
    out = {}
    for p in sorted(pkg.rglob("*.py")):
        parts = list(p.relative_to(pkg.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _target(mod: str, is_pkg: bool, node: ast.ImportFrom) -> str | None:
    if not node.level:
        return node.module
    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph(mods: dict[str, pathlib.Path] | None = None) -> dict[str, set[str]]:
    """Module -> the package modules it imports (``from . import x`` counts as importing ``x``)."""
    mods = modules() if mods is None else mods
    top = PKG.name
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                name = _target(mod, is_pkg, node)
                if not name or not (name == top or name.startswith(top + ".")):
                    continue
                for alias in node.names:
                    full = f"{name}.{alias.name}"
                    graph[mod].add(full if full in mods else name)
            elif isinstance(node, ast.Import):
                graph[mod].update(a.name for a in node.names if a.name == top or a.name.startswith(top + "."))
    return {m: {t for t in ts if t in mods and t != m} for m, ts in graph.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(max(10000, sys.getrecursionlimit()))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def oversized(mods: dict[str, pathlib.Path] | None = None) -> list[tuple[str, int, int]]:
    """``(path, lines, limit)`` of every file over its limit."""
    mods = modules() if mods is None else mods
    out = []
    for path in mods.values():
        n = len(path.read_text().splitlines())
        limit = MAX_PASS_LINES if "passes" in path.relative_to(PKG).parts[:-1] else MAX_LINES
        if n > limit:
            out.append((str(path.relative_to(ROOT)), n, limit))
    return out


def main() -> int:
    mods = modules()
    found = False
    for comp in circles(import_graph(mods)):
        found = True
        print(f"import circle ({len(comp)} modules): {' <-> '.join(comp)}")
    for path, n, limit in oversized(mods):
        found = True
        print(f"{path}: {n} lines (limit {limit})")
    if not found:
        print(f"{len(mods)} modules: no import circles, no file over its limit")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
