"""Platform policy: which provider serves each op, and which passes run by default, per platform.

One table, read by ``PlatformDispatch`` and the pass manager. Each entry cites the measurement or the
documented fact behind it; ROCm entries follow vendor evidence (DESIGN.md) and are not measured here.
"""

from __future__ import annotations

#: Provider preference per platform and op; the first available provider whose limits take the match wins.
#: - rocm norm: the fork's round-to-nearest kernel (1.05% drift over 64 layers, DESIGN.md), then Triton.
#:   AITER is never a default for norms (truncating bf16 stores, ROCm/aiter#5151): only when forced.
#: - cuda norm: FlashInfer, then Triton (see benchmarks/RESULTS.md for the measured comparison).
#: - cpu: empty: Inductor's C++ code is already right for CPU; force ``provider="reference"`` to rewrite.
PROVIDER_ORDER: dict[str, dict[str, tuple[str, ...]]] = {
    "rocm": {
        "rms_norm": ("amd_flashinfer", "triton"),
        "fused_add_rms_norm": ("amd_flashinfer", "triton"),
    },
    "cuda": {
        "rms_norm": ("flashinfer", "triton"),
        "fused_add_rms_norm": ("flashinfer", "triton"),
    },
    "cpu": {},
}

#: Passes enabled by default per platform (a user's ``options={"passes": {...}}`` wins; forcing a
#: provider turns every pass on). CPU: off (nothing to gain over Inductor's C++ code).
PASS_DEFAULTS: dict[str, dict[str, bool]] = {
    "rocm": {"rms_norm": True},
    "cuda": {"rms_norm": True},
    "cpu": {},
}
