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
        # Neither the fork nor AITER has a sigmoid gate (KERNELS.md): our Triton kernel only.
        "sigmoid_gate": ("triton",),
    },
    "cuda": {
        "rms_norm": ("flashinfer", "triton"),
        "fused_add_rms_norm": ("flashinfer", "triton"),
        # FlashInfer has no sigmoid gate: our Triton kernel only.
        "sigmoid_gate": ("triton",),
    },
    "cpu": {},
}

#: Passes enabled by default per platform (a user's ``options={"passes": {...}}`` wins; forcing a
#: provider turns every pass on). CPU: off (nothing to gain over Inductor's C++ code).
PASS_DEFAULTS: dict[str, dict[str, bool]] = {
    # sigmoid_gate, rocm: on. Reason: issue 4 (one graph-safe Triton op under HIP graph capture/padding);
    #   not yet measured on MI300X/MI355X: the benchmark (benchmarks/bench_sigmoid_gate.py) must confirm.
    # sigmoid_gate, cuda: OFF until benchmarks/bench_sigmoid_gate.py on the H200 shows the op beating
    #   Inductor's fused elementwise kernel at (1|32|2048 tokens x 4096|8192) bf16; an extern op also blocks
    #   Inductor from fusing the gate's producers (the reshape copies) into it.
    "rocm": {"rms_norm": True, "sigmoid_gate": True},
    "cuda": {"rms_norm": True, "sigmoid_gate": False},
    "cpu": {},
}
