"""Recognition census: every corpus spelling of every family through the passes, classified.

For each spelling of the corpus (``tests/*_spellings.py`` and the attention spellings of
``tests/test_attention_pass.py`` / ``tests/test_attention_einsum.py``), on CPU with the reference provider:

- ``full``: every instance rewritten (the op count the spelling expects), no near-miss of the family, and the
  rewritten graph meets the numerics contract (docs/ops.md) against eager and float64;
- ``partial``: some instances rewritten, not all;
- ``near-miss``: none rewritten, the report says why;
- ``silent``: none rewritten and nothing in the report (the failure issue 32 forbids);
- ``wrong``: rewritten but outside the numerics contract, or a negative (an activation, a near-RoPE) rewritten.
Negatives count as ``left alone`` when nothing was rewritten.

Cheap on purpose (the first version compiled every spelling through Inductor's C++ codegen: 124 s): the
compile stops right after our pass manager (a sentinel raised from a wrapped ``PassManager.__call__``, under
``strict``), and the rewritten post-grad graph is run by ``torch.fx`` on the example inputs Dynamo handed the
backend; eager and the float64 reference are plain calls. Sampling is checked by op count only (its numerics
are distributions: tests/test_spelling_corpus.py checks them).

Usage: ``python scripts/recognition_census.py [--family rope,gate] [--verbose] [--package DIR]``; prints a table
per family and the time taken (79 spellings: 71-87 s on the 2 shared cores under load, 26 s for 53 on a quieter
moment; the first version, through the whole Inductor compile: 124 s).
"""

from __future__ import annotations

import argparse
import atexit
import dataclasses
import logging
import os
import shutil
import sys
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("TRITON_INTERPRET", "1")
_ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(_ROOT), str(_ROOT / "tests")]

import torch  # noqa: E402
import torch.utils._pytree as pytree  # noqa: E402

#: family -> (pass name, the ops that count as its rewrite)
FAMILIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "rope": ("rope", ("rocm_fused.rope.default", "rocm_fused.rope_cached.default")),
    "norm": ("rms_norm", ("rocm_fused.rms_norm.default", "rocm_fused.fused_add_rms_norm.default")),
    "gate": ("sigmoid_gate", ("rocm_fused.sigmoid_gate.default",)),
    "sampling": ("sampling", ("rocm_fused.sample.default",)),
    "attention": ("attention", ("rocm_fused.decode_attention.default",)),
}
OUTCOMES = ("full", "partial", "near-miss", "silent", "wrong", "left alone")


@dataclasses.dataclass
class Case:
    """One spelling: ``build()`` -> (fn, args, ref64 outputs or None); ``n`` the ops expected (0: a negative)."""

    family: str
    name: str
    build: Callable[[], tuple[Callable, tuple, Any]]
    n: int = 1


@dataclasses.dataclass
class Result:
    case: Case
    outcome: str
    rewritten: int
    detail: str = ""


class _Stop(Exception):
    """Raised after our pass manager ran: the rest of Inductor's compile is not needed for the census."""


def _to64(a: Any) -> Any:
    if isinstance(a, torch.Tensor):
        return a.to(torch.complex128) if a.is_complex() else a.double() if a.is_floating_point() else a
    if isinstance(a, torch.nn.Module):
        import copy
        return copy.deepcopy(a).double()
    return a


def ref_by_float64(fn: Callable, args: tuple) -> Any:
    """The spelling itself on float64 copies of its inputs (the corpus tests' reference)."""
    with torch.no_grad():
        return fn(*[_to64(a) for a in args])


def _rel(a: torch.Tensor, ref: torch.Tensor) -> float:
    a, ref = a.detach(), ref.detach().to(torch.complex128 if ref.is_complex() else torch.float64)
    if not ref.numel():
        return 0.0
    return float((a.to(ref.dtype) - ref).abs().max() / ref.abs().max().clamp_min(1e-30))


def _contract(out: Any, eager: Any, ref: Any) -> str:
    """'' when each floating output is no further from float64 than eager plus one ulp (docs/ops.md)."""
    outs, eags, refs = (pytree.tree_leaves(t) for t in (out, eager, ref))
    if not (len(outs) == len(eags) == len(refs)):
        return f"{len(outs)} outputs against eager's {len(eags)}"
    for i, (o, e, r) in enumerate(zip(outs, eags, refs)):
        if not (isinstance(o, torch.Tensor) and o.is_floating_point()):
            continue
        if o.shape != e.shape or o.dtype != e.dtype:
            return f"output {i}: {o.dtype}{tuple(o.shape)} against eager's {e.dtype}{tuple(e.shape)}"
        eo, ee, ulp = _rel(o, r), _rel(e, r), torch.finfo(o.dtype).eps
        if not eo <= ee + ulp:
            return f"output {i}: rel err {eo:.3g} > eager {ee:.3g} + ulp {ulp:.3g}"
    return ""


def run_case(case: Case, options: dict | None = None) -> Result:
    """Compile one spelling up to the end of our passes, classify it (module docstring)."""
    from torch.fx import Graph, GraphModule

    from rocm_inductor.backend import rocm_fused
    from rocm_inductor.passes.manager import PassManager
    from rocm_inductor.report import last_report

    pass_name, ops = FAMILIES[case.family]
    fn, args, ref = case.build()
    seen: dict[str, Any] = {}
    orig = PassManager.__call__

    def wrapped(self, graph, **kw):
        seen["before"] = Counter(str(n.target) for n in graph.nodes if n.op == "call_function")
        orig(self, graph, **kw)
        g2 = Graph()
        g2.output(g2.graph_copy(graph, {}))
        seen["gm"] = GraphModule(graph.owning_module, g2)
        seen["after"] = Counter(str(n.target) for n in graph.nodes if n.op == "call_function")
        seen["report"] = last_report()
        raise _Stop

    def backend(gm, example_inputs):
        seen["inputs"] = list(example_inputs)
        return rocm_fused(gm, example_inputs, options={"provider": "reference", "strict": True, **(options or {})})

    torch._dynamo.reset()
    logging.getLogger("torch._inductor.utils").setLevel(logging.ERROR)  # "temporary cache dir kept": ours
    warnings.filterwarnings("ignore", message=".*force disabled by torch.compiler.config.force_disable_caches")
    PassManager.__call__ = wrapped
    try:
        with torch.no_grad(), torch._inductor.config.patch(force_disable_caches=True):
            torch.compile(fn, backend=backend, dynamic=False)(*args)
    except Exception as e:  # the sentinel arrives wrapped by Dynamo; anything else is the spelling's failure
        chain, cur = [], e
        while cur is not None:
            chain.append(cur)
            cur = cur.__cause__ or cur.__context__
        if not any(isinstance(c, _Stop) for c in chain):
            return Result(case, "silent", 0, f"compile failed: {type(e).__name__}: {str(e)[:200]}")
    finally:
        PassManager.__call__ = orig
    if "after" not in seen:
        return Result(case, "silent", 0, "no graph reached the pass manager")
    rewritten = sum(seen["after"][o] for o in ops)
    misses = [n for n in seen["report"].near_misses if n.pass_name == pass_name]
    reason = misses[0].reason if misses else ""
    if case.n == 0:
        return Result(case, "wrong" if rewritten else "left alone", rewritten, reason)
    if rewritten == 0:
        return Result(case, "near-miss" if misses else "silent", 0, reason)
    detail = ""
    if case.family != "sampling":
        with torch.no_grad():
            try:
                out = seen["gm"](*seen["inputs"])
            except Exception as e:
                return Result(case, "wrong", rewritten, f"rewritten graph failed to run: {type(e).__name__}: {e}")
            eager = fn(*args)
            want = ref if ref is not None else ref_by_float64(fn, args)
        out = out[0] if isinstance(out, (list, tuple)) and len(out) == 1 and not isinstance(eager, tuple) else out
        detail = _contract(tuple(out) if isinstance(out, list) else out, eager, want)
        if detail:
            return Result(case, "wrong", rewritten, detail)
    if rewritten < case.n or misses:
        return Result(case, "partial", rewritten, reason or f"{rewritten} of {case.n}")
    return Result(case, "full", rewritten, detail)


def cases(families: set[str] | None = None) -> list[Case]:
    """The corpus, per family (the spelling modules say each spelling's source)."""
    import census_corpus

    return [c for c in census_corpus.all_cases(Case) if families is None or c.family in families]


def summarize(results: list[Result]) -> dict[str, Counter]:
    """family -> Counter of outcomes (plus ``positives`` / ``negatives`` totals)."""
    out: dict[str, Counter] = {}
    for r in results:
        c = out.setdefault(r.case.family, Counter())
        c[r.outcome] += 1
        c["negatives" if r.case.n == 0 else "positives"] += 1
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--family", default=None, help="comma-separated families (default: all)")
    p.add_argument("--verbose", action="store_true", help="one line per spelling")
    p.add_argument("--package", default=None, help="directory holding another rocm_inductor to census (e.g. main's, "
                   "from `git archive main rocm_inductor`): the corpus stays this checkout's")
    a = p.parse_args(argv)
    if a.package:
        sys.path.insert(0, str(Path(a.package).resolve()))
    # a private Inductor cache dir, removed at exit: the sentinel makes Inductor keep its temporary dir "on error"
    cache = tempfile.mkdtemp(prefix="rocm_census_")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
    atexit.register(shutil.rmtree, cache, ignore_errors=True)
    fams = set(a.family.split(",")) if a.family else None
    t0 = time.perf_counter()
    results = []
    for c in cases(fams):
        r = run_case(c)
        results.append(r)
        if a.verbose or r.outcome in ("silent", "wrong", "partial"):
            print(f"  {c.family:9s} {c.name:34s} {r.outcome:10s} {r.rewritten}/{c.n} {r.detail[:300]}")
    print(f"{'family':10s} " + " ".join(f"{o:>10s}" for o in OUTCOMES) + "   positives negatives")
    for fam, cnt in summarize(results).items():
        print(f"{fam:10s} " + " ".join(f"{cnt[o]:10d}" for o in OUTCOMES)
              + f"   {cnt['positives']:9d} {cnt['negatives']:9d}")
    print(f"{len(results)} spellings in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
