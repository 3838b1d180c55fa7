"""Platform policy: which provider serves each op, and which passes run by default, per platform.

One table, read by ``PlatformDispatch`` and the pass manager. Each entry cites the measurement or the
documented fact behind it; ROCm entries follow vendor evidence (docs/vendors.md) and are not measured here.
"""

from __future__ import annotations

#: Provider preference per platform and op; the first available provider whose limits take the match wins.
#: - rocm norm: the fork's round-to-nearest kernel (1.05% drift over 64 layers, docs/ops.md), then Triton.
#:   AITER is never a default for norms (truncating bf16 stores, ROCm/aiter#5151): only when forced.
#: - cuda rms_norm: FlashInfer, then Triton. H200, bf16, CUDA-graph timing (benchmarks/RESULTS.md,
#:   2026-11-29): at decode sizes (M <= 32) FlashInfer 0.5.3 is 1.00-1.19x Inductor's kernel, ours (Triton)
#:   0.96-1.09x; at M >= 4096 Triton leads for H <= 4096 (1.07-1.14x) and both trail Inductor at H = 8192.
#: - cuda fused_add_rms_norm: Triton first: 1.04-1.41x Inductor's kernel over most shapes (0.96x worst);
#:   FlashInfer's kernel is in place, so our functional op must clone both inputs first: 2x slower.
#: - cpu: empty: Inductor's C++ code is already right for CPU; force ``provider="reference"`` to rewrite.
PROVIDER_ORDER: dict[str, dict[str, tuple[str, ...]]] = {
    "rocm": {
        "rms_norm": ("amd_flashinfer", "triton"),
        "fused_add_rms_norm": ("amd_flashinfer", "triton"),
        # Neither the fork nor AITER has a sigmoid gate (docs/vendors.md): our Triton kernel only.
        "sigmoid_gate": ("triton",),
        # sample: the fork's sampler when it takes device seed/offset (0.6.18+amd) or outside capture, then
        # our capture-safe Triton kernel. AITER's samplers take no seed: never a default (docs/vendors.md).
        "sample": ("amd_flashinfer", "triton"),
        # rope (model's cos/sin): no vendor kernel takes them (docs/vendors.md): our Triton kernel only.
        # rope_cached: the fork's apply_rope_with_cos_sin_cache (head dims 64/128/256/512, no fallback),
        #   then Triton. AITER's rope_cached_positions_2c_fwd only when forced (not measured here).
        "rope": ("triton",),
        "rope_cached": ("amd_flashinfer", "triton"),
        # decode_attention: our Triton split-KV kernel only; not measured on ROCm (verified on CPU stand-ins
        #   and gfx942/gfx950 AOT compiles: no spills, LDS <= 32 KiB). AITER's paged-attention decode kernels
        #   take per-row context lengths and a block table, not an arbitrary mask: they can serve only masks
        #   proven to be causal-from-position, which the op's contract does not promise. Not a default.
        "decode_attention": ("triton",),
        # all_reduce_add_rms_norm: AITER's fused all-reduce + RMSNorm (custom all-reduce, IPC buffers
        #   registered once by its own TP group). Written against its source, verified on CPU stand-ins only;
        #   its bf16 rounding is not measured (its norm module truncates on gfx942, ROCm/aiter#5151), and the
        #   pass is off (PASS_DEFAULTS): measure on 2 GPUs first.
        "all_reduce_add_rms_norm": ("aiter",),
        # merged_gemm: our Triton grouped small-M GEMM only (no vendor grouped GEMM is wrapped here);
        #   verified on CPU stand-ins only.
        "merged_gemm": ("triton",),
        # rms_norm_gemm: our merged GEMM kernel with an RMSNorm prologue; verified on CPU stand-ins only.
        "rms_norm_gemm": ("triton",),
    },
    "cuda": {
        "rms_norm": ("flashinfer", "triton"),
        "fused_add_rms_norm": ("triton", "flashinfer"),
        # FlashInfer has no sigmoid gate: our Triton kernel only.
        "sigmoid_gate": ("triton",),
        # sample: our capture-safe Triton kernel first. H200, op alone in CUDA graphs (benchmarks/RESULTS.md,
        #   2026-12-01): HF chain T=0.7 k=50 p=0.9 at V=128256, 31.6 / 32.2 / 34.7 / 37.8 us at B = 1 / 8 / 32 /
        #   64 (top-k path) vs FlashInfer 0.6.18 (device seed, graph) 115.7 / 139.6 / 165.0 / 235.8 us and 0.5.3
        #   (eager calls) 223.7 / 241.5 / 346.8 / 322.0 us. Top-p alone (our general path) loses to FlashInfer
        #   0.6.18 from B = 8 (179.9 vs 65.8 us); the order is per op, so Triton stays first. FlashInfer 0.5.3
        #   reads host RNG state (no seed/offset tensors before 0.6.4): refused under CUDA graphs.
        "sample": ("triton", "flashinfer"),
        # rope: Triton only (FlashInfer needs a position-indexed float32 table). rope_cached: FlashInfer
        #   (head dims 64/128/256/512), then Triton. Not yet measured: benchmarks/ops/bench_rope.py.
        "rope": ("triton",),
        "rope_cached": ("flashinfer", "triton"),
        # decode_attention: our Triton split-KV kernel. H200, per layer, CUDA graphs (benchmarks/results/runs/
        #   attention_layer.csv, 2026-12-01): Llama-3.2-1B at 1024 slots 5.5 / 7.6 / 17.2 us at B = 1 / 8 / 32
        #   vs Inductor's HF attention 15.7 / 48.5 / 165.5 us and flex_attention 6.8 / 13.2 / 23.4 us (2.2x the
        #   HBM floor at B = 32); faster than Inductor at all 18 measured shapes (1.3-24x). FlashInfer 0.5.3 is
        #   no provider: single_decode_with_kv_cache serves one request and takes no mask; the batch decode
        #   wrapper's plan() copies indptr / lengths to the host (a sync, and lengths fixed at plan time) and
        #   its decode kernels take no custom mask (read from flashinfer/decode.py, not run).
        "decode_attention": ("triton",),
        # all_reduce_add_rms_norm: FlashInfer's TRT-LLM all-reduce fusion (IPC workspace, never its multicast
        #   backend). Not yet measured: benchmarks/ops/bench_tp.py on 2 GPUs; the pass is off until then.
        "all_reduce_add_rms_norm": ("flashinfer",),
        # merged_gemm: our Triton grouped small-M GEMM only. H200, CUDA graphs, weights from HBM
        #   (benchmarks/results/runs/decode_gemm_layer.csv, 2026-12-01): Llama-3.2-1B q/k/v 5.4-9.4 us vs 18.0-18.4
        #   us as separate cuBLAS GEMMs at M = 1-32; gate/up 18.5 / 22.4 vs 23.4 / 23.3 us at M = 1 / 8,
        #   slower at M = 4 and 32; Qwen3-0.6B q/k/v and gate/up faster at M = 1, 8, 32.
        #   The provider's check() takes only shapes/M buckets its measured table
        #   (providers/triton/gemm_merge_tuned.json) says are faster than separate cuBLAS on this GPU.
        "merged_gemm": ("triton",),
        # rms_norm_gemm: the same kernel with the RMSNorm as its prologue (one launch where the GEMM's config is
        #   the full-K GEMV tile; else the norm kernel, then the GEMM).
        "rms_norm_gemm": ("triton",),
    },
    "cpu": {},
}

# moe_experts: our Triton grouped GEMV only, on both GPU platforms (no vendor fused-MoE kernel is wrapped yet).
#   Verified on CPU (interpreter) only; not measured: benchmarks/e2e/moe_decode.py.
for _kind in ("rocm", "cuda"):
    PROVIDER_ORDER[_kind]["moe_experts"] = ("triton",)

#: Passes enabled by default per platform (a user's ``options={"passes": {...}}`` wins; forcing a
#: provider turns every pass on). CPU: off (nothing to gain over Inductor's C++ code).
PASS_DEFAULTS: dict[str, dict[str, bool]] = {
    # sigmoid_gate, rocm: on. Reason: one graph-safe Triton op under HIP graph capture/padding (no vendor has
    #   one); not yet measured on MI300X/MI355X: the benchmark (benchmarks/ops/bench_sigmoid_gate.py) must confirm.
    # sigmoid_gate, cuda: OFF. Measured on the H200 (2026-11-29, benchmarks/RESULTS.md): the op alone is
    #   0.94x / 0.99x / 1.00x Inductor's fused kernel at (1, 4096) / (32, 4096) / (2048, 8192) bf16, and in
    #   context (Qwen3-Next's strided gate slice + o_proj) 0.87x / 0.87x / 0.85x, because the extern op stops
    #   Inductor from fusing the slice/transpose copies into the gate.
    # sampling, cuda: ON. Measured on the H200 (2026-11-29, benchmarks/RESULTS.md): the split-row Triton
    #   sampler is 2.3-3.0x Inductor's compiled HF chain at B = 1 and 1.2-1.5x eager at B = 16; Inductor
    #   crashes compiling that chain for any batch > 1 (torch 2.11 SplitScan codegen), which the rewrite
    #   avoids. At B = 64 it is level with eager (0.95x at V=32000, 1.04x at V=128256).
    # sampling, rocm: on (the fork's sampler takes device seed/offset, docs/vendors.md); not measured here.
    # rope: OFF. Measured on the H200 (2026-11-29, benchmarks/RESULTS.md): the rewritten HF graph
    #   (pass[triton]) is 1.25-1.29x Inductor at 1 token for (32|64, 8, 128) heads but 0.33-0.6x from 32
    #   tokens up (the extern op needs its own q/k/cos/sin layouts, copies Inductor fuses away); the op alone
    #   is 0.85-1.24x.
    #   ROCm: off too until measured there. Enable with options={"passes": {"rope": True}}.
    # attention, cuda: ON. Measured on the H200 (2026-12-01, benchmarks/RESULTS.md "Decode attention"): the whole
    #   decode step with every layer's attention on our split-KV kernel runs 1.09x / 1.39x / 2.15x Inductor at
    #   B = 1 / 8 / 32 (Llama-3.2-1B, 1024 slots), 1.26x / 2.16x / 3.70x at 4096 slots, gemma-2b 1.02x / 1.14x /
    #   1.41x, Qwen3-0.6B B=1 1.08x; never below 1.00x where measured.
    # attention, rocm: OFF until measured on MI300X/MI355X: the kernel is verified on CPU (interpreter) and in
    #   gfx942/gfx950 AOT compiles only (no scratch; SGPRs spill to VGPR lanes in the split-KV variant). Enable
    #   with options={"passes": {"attention": True}}.
    # all_reduce_norm: OFF everywhere. Not measured: it needs 2 GPUs (benchmarks/ops/bench_tp.py); the
    #   CPU gloo tests show only that it matches and is exact. Enable with options={"passes":
    #   {"all_reduce_norm": True}} (it rewrites what the rms_norm pass left, so keep that pass on).
    # gemm_merge, cuda: ON. Measured on the H200 (2026-12-01, benchmarks/results/decode_gemm.csv, torch 2.11):
    #   Llama-3.2-1B decode step 1.197x / 1.101x / 1.042x Inductor at B = 1 / 8 / 32 (1300.6 vs 1556.4,
    #   1940.4 vs 2136.2, 3862.1 vs 4025.7 us; Inductor freezing 1506.2 us at B = 1), Qwen3-0.6B 1.234x at
    #   B = 1. Only merges the measured table (providers/triton/gemm_merge_tuned.json) says win are taken
    #   (Llama: q/k/v at every M, gate/up at M = 1 and 8); on a GPU with table entries, unmeasured shapes are
    #   refused ("not measured", a near-miss) unless ROCM_FUSED_GEMM_UNMEASURED=1.
    #   Singles (H200, 2026-12-01 15:33 UTC, benchmarks/results/decode_gemm.csv, runs/decode_gemm_layer.csv): single
    #   GEMMs are taken only where the table has ours > 3% faster than cuBLAS (measured_single; unmeasured: silent).
    #   Taken: M=1 Llama o_proj 4.27 vs 6.57 us, down_proj 10.45 vs 14.58, lm_head 120.26 vs 129.02; Qwen3
    #   o_proj 3.16 vs 12.84, down_proj 3.83 vs 7.42, lm_head 72.96 vs 80.97; M=8 Qwen3 o_proj 5.66 vs 6.02,
    #   down_proj 6.29 vs 7.75; M=32 Qwen3 down_proj 7.34 vs 8.08. Refused (near-misses with the numbers): M=8
    #   Llama o_proj 6.98 vs 6.38, down_proj 15.79 vs 14.76, lm_head 131.69 vs 132.62 (< 3%), Qwen3 lm_head
    #   84.81 vs 82.88; M=32 Llama o_proj 7.10 vs 6.58, down_proj 15.16 vs 15.02, lm_head 145.44 vs 138.30, Qwen3
    #   o_proj 6.60 vs 5.95, lm_head 88.18 vs 87.05. Llama gate/up at M=32 re-swept: 22.03 vs 24.36 (now taken),
    #   q/k/v 8.64 vs 18.42. Step, only gemm_merge on: Llama 1.373x / 1.090x / 1.057x Inductor at B = 1 / 8 / 32
    #   (1151.9 vs 1581.1, 1949.5 vs 2125.4, 3800.9 vs 4015.7 us; Inductor freezing 1521.8 / 2052.1 / 3936.3),
    #   Qwen3 1.105x / 1.032x at B = 8 / 32 (2787.9 vs 3079.6, 6382.8 vs 6588.5); Qwen3 B=1 with singles and
    #   Qwen3 freezing not run (budget).
    # gemm_merge, rocm: OFF: verified on CPU stand-ins and gfx942/gfx950 AOT compiles only.
    # norm_gemm, cuda: ON (it only folds what rms_norm and gemm_merge rewrote). Measured on the H200 (2026-12-01,
    #   torch 2.11.0+cu130, triton 3.6.0, benchmarks/results/runs/norm_gemm_pair.csv, runs/decode_step.csv): the
    #   (add + RMSNorm, merged GEMM) pair at M = 1 in one launch with the measured prologue tiles vs our norm
    #   kernel + the GEMM: Llama-3.2-1B q/k/v 6.14 vs 6.80 us, gate/up 18.65 vs 19.00; Qwen3-0.6B q/k/v 4.91 vs
    #   5.81, gate/up 6.05 vs 6.63. Decode step at B = 1 with the platform defaults + gemm_merge: Llama 1026.2 ->
    #   1001.0 us, Qwen3 1137.1 -> 1085.7 (logits bitwise equal to the unfolded graph in the Llama rms_norm +
    #   gemm_merge run); with only rms_norm + gemm_merge on, Llama 1163.6 -> 1166.3 (within the 14 us spread).
    #   Taken only where a measured prologue tile won (providers/triton/norm_gemm_tuned.json: M = 1 today); other
    #   shapes and M are near-misses. The measured steps also folded the final norm into lm_head on the GEMM's own
    #   tile, which the shipped check refuses (never measured as a pair). The shipped build, 2026-12-02
    #   (runs/decode_step.csv): Llama B = 1 1027.4 -> 994.4 us, Qwen3 B = 1 1128.1 -> 1064.4 (Qwen3 q/k/v on
    #   its re-measured n4 w2 tile); B = 8 / 32 unchanged (refused: no M > 1 tile).
    # norm_gemm, rocm: OFF with gemm_merge (verified on CPU stand-ins and gfx942/gfx950 AOT compiles only).
    "rocm": {"rms_norm": True, "sigmoid_gate": True, "sampling": True, "rope": False, "attention": False,
             "all_reduce_norm": False, "gemm_merge": False, "norm_gemm": False},
    "cuda": {"rms_norm": True, "sigmoid_gate": False, "sampling": True, "rope": False, "attention": True,
             "all_reduce_norm": False, "gemm_merge": True, "norm_gemm": True},
    "cpu": {},
}

# moe_experts: OFF on both GPU platforms until benchmarks/e2e/moe_decode.py has measured the decode step on the
#   H200 (the kernel's tiles are not tuned). Enable with options={"passes": {"moe_experts": True}}.
for _kind in ("rocm", "cuda"):
    PASS_DEFAULTS[_kind]["moe_experts"] = False

#: Smallest normalised size (the last dim) at which an RMSNorm is rewritten by default, per platform; a forced
#: provider rewrites every size.
#: - cuda: 512, so per-head q/k norms (head_dim 64-256: Qwen3, Gemma 3) stay with Inductor. Measured on the
#:   H200 (2026-11-29, benchmarks/RESULTS.md, decode benchmark): Qwen3-0.6B with its q/k norms rewritten ran
#:   0.93x / 0.96x / 0.99x Inductor at B = 1 / 8 / 32: Inductor fuses the q/k norm with the transpose and
#:   RoPE that follow (one kernel), our extern op splits that into two kernels per norm, 56 more per step.
#: - rocm: 0 (every size, the vendor-kernel default, docs/vendors.md); not measured here, and the same fusion argument
#:   says to measure q/k norms on MI300X before trusting it.
NORM_MIN_HIDDEN: dict[str, int] = {"cuda": 512, "rocm": 0, "cpu": 0}
