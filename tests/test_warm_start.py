"""Warm starts (issue 17): a graph served from Inductor's FX graph cache reports what its cold compile did,
marked cached, in ``reports()`` / ``last_report()`` and the ``rocm_fused`` log. The cross-process case (a
serving restart) is ``test_backend.py::test_backend_by_name_in_fresh_process_and_fx_cache_hit``."""

from __future__ import annotations

import contextlib
import logging

import torch
import torch._inductor.utils as ind_utils

import rocm_inductor


def _fresh_cache():
    """A private Inductor cache dir for this test (``fresh_cache`` on torch 2.13, ``fresh_inductor_cache``
    before)."""
    make = getattr(ind_utils, "fresh_cache", None) or getattr(ind_utils, "fresh_inductor_cache", None)
    return make() if make is not None else contextlib.nullcontext()


def _norm(x, w):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))


def test_fx_graph_cache_hit_restores_the_report(caplog):
    x, w = torch.randn(4, 64), torch.randn(64)
    caches = {"fx_graph_cache": True, "force_disable_caches": False}
    with _fresh_cache(), torch._inductor.config.patch(caches), torch.no_grad():
        cold_out = torch.compile(_norm, backend="rocm_fused", options={"provider": "reference"})(x, w)
        cold = rocm_inductor.last_report()
        torch._dynamo.reset()  # a new process would start here: only the on-disk caches are left
        with caplog.at_level(logging.INFO, logger="rocm_inductor"):
            warm_out = torch.compile(_norm, backend="rocm_fused", options={"provider": "reference"})(x, w)
        warm = rocm_inductor.last_report()
    assert torch.equal(cold_out, warm_out)
    assert cold is not None and not cold.cached and cold.count("rms_norm") == 1
    assert warm is not cold and warm.cached and len(rocm_inductor.reports()) == 2
    same = {k: v for k, v in warm.to_dict().items() if k not in ("graph_id", "cached")}
    assert same == {k: v for k, v in cold.to_dict().items() if k not in ("graph_id", "cached")}
    assert "[cached" in warm.summary() and str(warm).split("\n")[1:] == str(cold).split("\n")[1:]
    assert any("rms_norm[reference]x1" in r.getMessage() and "[cached" in r.getMessage() for r in caplog.records)
