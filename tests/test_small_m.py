"""Level 2's M = 1 GEMM handling (``rocm_inductor/lowerings/small_m.py``): ``redecompose`` rewrites the M = 1 /
N = 1 GEMMs our passes left into Inductor's coordinate-descent form, and keeps outer products (K == 1) as GEMMs."""

from __future__ import annotations

import torch
from torch._inductor import config
from torch.fx import Graph

from rocm_inductor.lowerings import small_m

aten = torch.ops.aten


def _graph(op, a_shape, b_shape) -> Graph:
    """``op(a, b)`` with meta tensors as the nodes' values (a GPU-like device: the decomposition skips CPU)."""
    g = Graph()
    a, b = g.placeholder("a"), g.placeholder("b")
    a.meta["val"] = torch.empty(a_shape, device="meta")
    b.meta["val"] = torch.empty(b_shape, device="meta")
    out = g.call_function(op, (a, b))
    out.meta["val"] = op(a.meta["val"], b.meta["val"])
    g.output(out)
    return g


def _ops(g: Graph) -> set:
    return {n.target for n in g.nodes if n.op == "call_function"}


def test_m1_gemm_is_redecomposed_under_coordinate_descent():
    g = _graph(aten.mm.default, (1, 64), (64, 32))
    with config.patch(coordinate_descent_tuning=True):
        assert small_m.redecompose(g) == 1
    assert aten.mm.default not in _ops(g) and aten.sum.dim_IntList in _ops(g)


def test_outer_product_stays_a_gemm():
    # HF's RoPE table: inv_freq (B, 64, 1) @ position_ids (B, 1, 1), N == 1 and K == 1
    g = _graph(aten.bmm.default, (2, 64, 1), (2, 1, 1))
    with config.patch(coordinate_descent_tuning=True):
        assert small_m.redecompose(g) == 0
    assert _ops(g) == {aten.bmm.default}


def test_nothing_without_coordinate_descent():
    g = _graph(aten.mm.default, (1, 64), (64, 32))
    with config.patch(coordinate_descent_tuning=False):
        assert small_m.redecompose(g) == 0
    assert _ops(g) == {aten.mm.default}
