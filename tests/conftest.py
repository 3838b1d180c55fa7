"""Shared test setup: Triton's interpreter on CPU, GPU-marker skipping, clean state per test, and caches that
are private to each pytest-xdist worker (kernels) and to each test (FX graph / AOTAutograd caches)."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

import torch

if not torch.cuda.is_available():
    # Run our Triton kernels on CPU tensors (must be set before triton.jit decorates anything).
    os.environ.setdefault("TRITON_INTERPRET", "1")

# One Inductor / Triton cache dir per test process (each xdist worker is one), removed at exit: workers never
# share compiled kernels or graph-cache entries, and a run never reads a previous run's (as on CI's fresh
# clone). Set before anything compiles: Inductor reads TORCHINDUCTOR_CACHE_DIR at each use.
_CACHE = tempfile.mkdtemp(prefix=f"rocm_inductor_tests_{os.environ.get('PYTEST_XDIST_WORKER', 'main')}_")
os.environ["TORCHINDUCTOR_CACHE_DIR"] = _CACHE
os.environ["TRITON_CACHE_DIR"] = os.path.join(_CACHE, "triton")
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)

_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:  # N workers on C cores: C // N intra-op threads each, not C each (oversubscription)
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // _WORKERS))

import pytest  # noqa: E402


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _fresh_state(tmp_path_factory, monkeypatch):
    """Each test gets its own provider choices, reports, Dynamo caches and FX graph / AOTAutograd cache dirs.

    The graph caches (whose hits skip our passes) are per test, so a test's first compile of a graph is a
    miss whichever tests ran before it in its worker; compiled kernels (content-addressed) stay shared
    within the worker.
    """
    from torch._inductor import codecache

    from rocm_inductor import PlatformDispatch, clear_reports

    graphs = str(tmp_path_factory.mktemp("graph_cache"))
    if callable(getattr(codecache.FxGraphCache, "_get_tmp_dir", None)):
        monkeypatch.setattr(codecache.FxGraphCache, "_get_tmp_dir",
                            staticmethod(lambda: os.path.join(graphs, "fxgraph")))
    try:
        from torch._functorch._aot_autograd import autograd_cache
    except ImportError:
        autograd_cache = None
    aot = getattr(autograd_cache, "AOTAutogradCache", None)
    if callable(getattr(aot, "_get_tmp_dir", None)):
        monkeypatch.setattr(aot, "_get_tmp_dir", staticmethod(lambda: os.path.join(graphs, "aotautograd")))
    PlatformDispatch.reset_all()
    clear_reports()
    torch._dynamo.reset()
    yield
    PlatformDispatch.reset_all()


@pytest.fixture
def sampler_knobs():
    """``sampler_knobs(**changes)``: the Triton sampler's knobs changed (``sampling.knobs.override``) until the test
    ends; later calls stack on earlier ones, as repeated ``monkeypatch.setattr`` calls did. Returns the knobs set."""
    import contextlib

    from rocm_inductor.providers.triton.sampling import knobs

    with contextlib.ExitStack() as stack:
        yield lambda **changes: stack.enter_context(knobs.override(**changes))
