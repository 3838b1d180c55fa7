"""Where a Triton launch runs: Triton launches on the current CUDA device, not on its tensors' device."""

from __future__ import annotations

import contextlib
from typing import Any

import torch


def on_device(t: torch.Tensor) -> Any:
    """The context to launch a kernel on ``t`` in: ``torch.cuda.device(t.device)`` when ``t`` is on a CUDA device
    that is not the current one, else a no-op context (CPU tensors under the interpreter, the current device)."""
    if t.is_cuda and t.device.index != torch.cuda.current_device():
        return torch.cuda.device(t.device)
    return contextlib.nullcontext()
