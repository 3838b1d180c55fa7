"""Checks shared by the tests of the passes that fold K/V cache writes (``rope_kv``, ``qkv_rope_kv``): a tiny
HF decode against eager, the graph Inductor lowers counted by target, the fail-safe of a pass whose ``emit``
raises, and the op called on the cache inputs themselves in the code Inductor writes."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
import torch
from bench_utils import greedy_equal, hf_models

import rocm_inductor


class OpCounter:
    """A ``post_grad_custom_post_pass``: the graph Inductor lowers, counted by target name."""

    def __init__(self):
        self.graphs = []

    def __call__(self, graph):
        names = {}
        for n in graph.nodes:
            if n.op == "call_function":
                names[str(n.target)] = names.get(str(n.target), 0) + 1
        self.graphs.append(names)

    def count(self, *subs):
        """Calls, over every graph, of targets whose name contains one of ``subs``."""
        return sum(c for g in self.graphs for t, c in g.items() if any(s in t for s in subs))


def run_against_eager(fn: Callable, args: list, opts: dict, caches: tuple[int, int]):
    """``fn`` eager and compiled with ``opts`` on clones of ``args``: outputs equal (1e-5) and the two caches
    (``args[caches[0]]``, ``args[caches[1]]``, mutated in place by ``fn``) equal after the call.

    Returns:
        ``rocm_inductor.reports()`` of the compile.
    """
    ea, ca = [a.clone() for a in args], [a.clone() for a in args]
    rocm_inductor.clear_reports()
    torch._dynamo.reset()
    with torch.no_grad(), torch._inductor.config.patch(force_disable_caches=True):
        ref = fn(*ea)
        out = torch.compile(fn, backend="rocm_fused", options=opts, fullgraph=True)(*ca)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    for i in caches:
        torch.testing.assert_close(ca[i], ea[i], rtol=1e-5, atol=1e-5)
    return rocm_inductor.reports()


def assert_fail_safe(monkeypatch, pass_cls: type, run: Callable, opts: dict, op: str) -> None:
    """``pass_cls.emit`` raising: with ``strict=False`` the compile still runs (``run(opts)`` checks eager's outputs
    and caches), the op is not emitted and the report carries the error; with ``strict=True`` it re-raises."""
    def boom(*a, **k):
        raise RuntimeError("boom")

    monkeypatch.setattr(pass_cls, "emit", boom)
    rep = run({**opts, "strict": False})
    assert rep.count(op) == 0 and "boom" in (rep[0].error or "")
    with pytest.raises(Exception, match="boom"):
        run({**opts, "strict": True})


def assert_caches_in_place(fn: Callable, args: list, opts: dict, op: str, cache_shape: tuple) -> str:
    """The code Inductor writes for ``fn`` calls ``rocm_fused::<op>`` once, on the two cache inputs of shape
    ``cache_shape`` themselves (no copy of a cache, no ``aten.copy_`` back); returns the ``call`` function's code."""
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    with torch.no_grad(), torch._inductor.config.patch(force_disable_caches=True):
        comp = torch.compile(fn, backend="rocm_fused", options=opts, fullgraph=True)
        _, codes = run_and_get_code(comp, *args)
    call = codes[0][codes[0].index("def call("):]
    calls = re.findall(rf"{op}\.default\((.*)\)", call)
    assert len(calls) == 1, call
    shape = re.escape(str(tuple(cache_shape)))
    caches = re.findall(rf"assert_size_stride\((arg\d+_1), {shape}", call)
    assert len(caches) == 2 and all(c in calls[0] for c in caches), (caches, calls[0])
    assert "aten.copy_" not in call, call
    return call


def decode_hf(family: str, opts: dict, steps: int = 3, b: int = 2, pos: int = 6, max_len: int = 16):
    """A tiny HF ``family`` model (float32, CPU) over its own ``StaticCache``, eager and compiled with ``opts``:
    ``steps`` greedy decode steps from ``pos`` equal (``bench_utils.greedy_equal``), then both caches equal.

    Returns:
        ``(config, OpCounter of the graphs Inductor lowered)``.
    """
    hm = hf_models()
    model, cfg = hm.build_model(family, "cpu", torch.float32, tiny=True)
    step_e, (tok, _, _), cache_e = hm.decode_step(model, cfg, b, 1, 0, max_len, "cpu", torch.float32)
    step_c, _, cache_c = hm.decode_step(model, cfg, b, 1, 0, max_len, "cpu", torch.float32)
    counter = OpCounter()
    rocm_inductor.clear_reports()
    torch._dynamo.reset()
    with torch.no_grad(), torch._inductor.config.patch(force_disable_caches=True,
                                                       post_grad_custom_post_pass=counter):
        comp = torch.compile(step_c, backend="rocm_fused", options=opts, fullgraph=True)
        greedy_equal(step_e, comp, tok, pos, b, steps)
    for le, lc in zip(cache_e.layers, cache_c.layers):  # the in-place writes landed where eager's did
        torch.testing.assert_close(lc.keys, le.keys, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(lc.values, le.values, rtol=1e-5, atol=1e-5)
    return cfg, counter
