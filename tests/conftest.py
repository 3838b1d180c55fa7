"""Shared test setup: Triton's interpreter on CPU, GPU-marker skipping, clean dispatch state per test."""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    # Run our Triton kernels on CPU tensors (must be set before triton.jit decorates anything).
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _fresh_state():
    """Each test gets its own provider choices, reports and Dynamo caches."""
    from rocm_inductor import PlatformDispatch, clear_reports

    PlatformDispatch.reset_all()
    clear_reports()
    torch._dynamo.reset()
    yield
    PlatformDispatch.reset_all()
