"""Argument normalisation shared by every provider's sampler: per-row parameters as (B,) tensors, ban masks as
(B, V) rows. The ``rocm_fused::sample`` op and each provider call these; a leaf (no package imports).
"""

from __future__ import annotations

import torch


def per_row(t: torch.Tensor | None, b: int, dtype: torch.dtype,
            device: torch.device | str | None = None) -> torch.Tensor | None:
    """A per-row parameter as a contiguous (B,) tensor of ``dtype`` on ``device`` (None stays None).

    ``device`` moves it to the kernel's device: with ``dynamic=True`` Dynamo lifts a Python float (a
    temperature, a top_p) into a 0-d CPU float64 graph input, which a GPU kernel cannot read.
    """
    if t is None:
        return None
    return t.reshape(-1).to(device=device, dtype=dtype).expand(b).contiguous()


def ban_rows(ban: torch.Tensor | None, b: int, v: int) -> tuple[torch.Tensor | None, int]:
    """``ban`` as a bool tensor, unit-stride last dim, and its row stride (0 when shared by all rows)."""
    if ban is None:
        return None, 0
    t = ban.to(torch.bool)
    if t.dim() == 2 and t.shape[0] == b and b > 1:
        t = t.expand(b, v).contiguous()
        return t, t.stride(0)
    return t.reshape(-1).expand(v).contiguous(), 0
