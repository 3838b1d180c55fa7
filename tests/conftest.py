"""Shared test setup: Triton's interpreter on CPU, GPU-marker skipping, longest tests first across pytest-xdist
workers, clean state per test, and caches that are private to each run (kernels) and to each test (FX graph /
AOTAutograd caches)."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

import torch

if not torch.cuda.is_available():
    # Run our Triton kernels on CPU tensors (must be set before triton.jit decorates anything).
    os.environ.setdefault("TRITON_INTERPRET", "1")
if os.environ.get("TRITON_INTERPRET") == "1":
    from triton_interp import skip_nested_lang_patching

    skip_nested_lang_patching()  # same interpreted semantics, no re-patching per device-function call

# One Inductor / Triton kernel cache dir per run, removed at exit: a run never reads a previous run's (as on CI's
# fresh clone). The process that first imports this file (pytest-xdist's controller, or the only pytest process)
# makes it; the workers it starts, and the processes tests start, inherit it through the environment, so the
# compiler's first-use work (the vector-ISA probe builds: six g++ runs before the first kernel) and a kernel that
# two workers compile (content-addressed, built under a file lock: Inductor's cache is multi-process safe) are
# built once per run, not once per worker. Graph-cache entries stay private to each test (``_fresh_state``). Set
# before anything compiles: Inductor reads TORCHINDUCTOR_CACHE_DIR at each use.
_CACHE = os.environ.get("ROCM_INDUCTOR_TEST_CACHE_DIR")
if not _CACHE:
    _CACHE = tempfile.mkdtemp(prefix="rocm_inductor_tests_")
    os.environ["ROCM_INDUCTOR_TEST_CACHE_DIR"] = _CACHE
    atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)
os.environ["TORCHINDUCTOR_CACHE_DIR"] = _CACHE
os.environ["TRITON_CACHE_DIR"] = os.path.join(_CACHE, "triton")

_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:  # N workers on C cores: C // N intra-op threads each, not C each (oversubscription)
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // _WORKERS))

import pytest  # noqa: E402

#: Seconds of the longest tests under ``pytest -q -n 2`` on this 2-core machine (``--durations`` of a 2026-12-03 run
#: of the longest files under load ~2.5, after the HF-model tests ran their graphs eagerly and the interpreter's
#: per-call patching was skipped), by node id with the parameter id, or without it for every case. They are
#: scheduled first (see :func:`pytest_collection_modifyitems`); the values only rank them.
_LONGEST = {
    "test_rms_norm_models.py::test_every_norm_rewritten_logits_and_greedy_tokens[qwen2]": 62,
    "test_all_reduce_norm.py::test_two_ranks_gloo": 59,
    "test_sampling_chain_adversarial.py::test_chain_adversarial_rows_draw_the_searchs_tokens[2]": 42,
    "test_rope_models.py::test_model_rope_rewritten[gpt_neox]": 34,
    "test_sampling_pass.py::test_hf_min_p_distribution[triton]": 34,
    "test_sampling_chain_adversarial.py::test_chain_adversarial_rows_draw_the_searchs_tokens[4]": 31,
    "test_rms_norm_models.py::test_every_norm_rewritten_logits_and_greedy_tokens": 20,
    "test_attention_sinks.py::test_tiny_gpt_oss_static_cache_decode[reference]": 26,
    "test_sampling_chain_adversarial.py::test_chain_adversarial_rows_draw_the_searchs_tokens[6]": 24,
    "test_sampling_pass.py::test_min_p_first_distribution[before_top_k_fused]": 21,
    "test_attention_models.py::test_hf_static_cache_decode": 19,
    "test_sampling_chain_adversarial.py::test_chain_adversarial_rows_draw_the_searchs_tokens[1]": 19,
    "test_moe_routing_models.py::test_moe_decode_triton[gpt_oss]": 17,
    "test_attention_sinks.py::test_tiny_gpt_oss_static_cache_decode[triton]": 16,
    "test_attention_single_launch.py::test_pass_turns_the_causal_mask_into_positions": 15,
    "test_sampling_pass.py::test_hf_min_p_distribution[reference]": 14,
    "test_backend.py::test_backend_by_name_in_fresh_process_and_fx_cache_hit": 13,
    "test_rope_models.py::test_model_rope_rewritten[gptj]": 13,
    "test_decode_bench.py::test_decode_bench_tiny_cpu": 13,
    "test_sampling_chain.py::test_chain_rejected_candidates_draw_the_searchs_tokens[64]": 12,
    # not in that run (earlier tables): unchanged by those cuts
    "test_triton_aot.py::test_kernels_compile_within_limits": 20,
    "test_attention_adversarial.py::test_batch_broadcast_kv_inside_the_repeat_expand": 15,
}
#: Rank of a ``slow``-marked test not in the table (they take seconds each; unmarked tests take less).
_SLOW_S = 10


def _expected_seconds(item) -> float:
    if "gpu" in item.keywords and not torch.cuda.is_available():
        return 0  # skipped below
    for nodeid in (item.nodeid, item.nodeid.split("[", 1)[0]):
        for key, secs in _LONGEST.items():
            if nodeid.endswith(key):
                return secs
    return _SLOW_S if "slow" in item.keywords else 0


def pytest_configure(config):
    # Longest first, one test at a time: with xdist's ``load`` scheduling and its default chunks each worker is
    # first sent a quarter of its share of consecutive tests, so the longest tests (sorted to the front) would all
    # land on one worker; one at a time, each free worker takes the next longest (greedy longest-processing-time
    # scheduling) and the two workers finish within about one short test of each other. (``--dist loadscope`` sends
    # whole modules: coarser units, one of them holding the 2-process test and its module's other tests.) Only
    # when the run did not set ``--maxschedchunk`` itself.
    if hasattr(config.option, "maxschedchunk") and config.option.maxschedchunk is None:
        config.option.maxschedchunk = 1


def pytest_collection_modifyitems(config, items):
    # Every worker sorts the same collection the same way (xdist requires equal collections); a stable sort keeps
    # the other tests in file order.
    items.sort(key=lambda item: -_expected_seconds(item))
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
    miss whichever tests ran before it; compiled kernels (content-addressed) stay shared within the run.
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
