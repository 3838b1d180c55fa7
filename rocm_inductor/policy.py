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
        # glu_gemm / rms_norm_glu_gemm: our Triton kernel only (the pass is off until measured).
        "glu_gemm": ("triton",),
        "rms_norm_glu_gemm": ("triton",),
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
        #   (tuning/shipped/nvidia_h200.json, the merged_gemm entries) says are faster than separate cuBLAS on this GPU.
        "merged_gemm": ("triton",),
        # rms_norm_gemm: the same kernel with the RMSNorm as its prologue (one launch where the GEMM's config is
        #   the full-K GEMV tile; else the norm kernel, then the GEMM).
        "rms_norm_gemm": ("triton",),
        # glu_gemm / rms_norm_glu_gemm: our Triton gate/up kernel with the gated activation in the epilogue. Not
        #   measured yet (benchmarks/e2e/decode_step.py --extra 'glu={"passes": {"glu_gemm": true}}').
        "glu_gemm": ("triton",),
        "rms_norm_glu_gemm": ("triton",),
    },
    "cpu": {},
}

# moe_experts: our Triton experts kernel only, on both GPU platforms (no vendor fused-MoE kernel is wrapped yet).
#   Measured on the H200 alone (runs/moe_experts.csv) and in the decode step (runs/moe_decode.csv); ROCm: CPU
#   interpreter and AOT compiles only.
for _kind in ("rocm", "cuda"):
    PROVIDER_ORDER[_kind]["moe_experts"] = ("triton",)

#: Passes enabled by default per platform (a user's ``options={"passes": {...}}`` wins; forcing a
#: provider turns every pass on). CPU: off (nothing to gain over Inductor's C++ code). These are the defaults
#: where nothing was measured; the measurements behind the CUDA choices are entries of
#: ``tuning/shipped/nvidia_h200.json`` (each with its results file and row) and the runs cited here.
PASS_DEFAULTS: dict[str, dict[str, bool]] = {
    # sigmoid_gate, cuda: OFF: slower than Inductor in context (shipped "sigmoid_gate" entries; runs/sigmoid_gate.csv,
    #   run 2026-11-29-gate, rows "ctx"): the extern op stops Inductor fusing the gate slice/transpose copies.
    # sigmoid_gate, rocm: on: one graph-safe Triton op under HIP graphs (no vendor has one); not measured there
    #   (benchmarks/ops/bench_sigmoid_gate.py).
    # sampling, cuda: ON (runs/sampling.csv; benchmarks/RESULTS.md "Sampling"); Inductor crashes compiling the HF
    #   chain for batch > 1 (torch 2.11 SplitScan codegen), which the rewrite avoids. rocm: on, not measured.
    # rope: OFF: the rewritten HF graph wins at 1 token and loses from 32 tokens up (shipped "rope" entries;
    #   runs/rope.csv, run 2026-11-29-rope, rows "inductor" / "pass[triton]"). ROCm: off until measured.
    # attention, cuda: ON: faster than Inductor at every measured shape (runs/attention_layer.csv, run 2026-12-01;
    #   decode step: runs/decode_attention.csv). rocm: OFF until measured (CPU interpreter and gfx942/gfx950 AOT
    #   compiles only).
    # all_reduce_norm: OFF everywhere: needs 2 GPUs to measure (benchmarks/ops/bench_tp.py).
    # gemm_merge, cuda: ON; only merges / singles whose entry wins are taken (shipped "merged_gemm" entries from
    #   runs/decode_gemm_layer.csv; decode steps runs/decode_gemm.csv); a GPU or shape without an entry is a
    #   near-miss ("not measured") unless ROCM_FUSED_GEMM_UNMEASURED=1. rocm: OFF (CPU stand-ins and AOT only).
    # norm_gemm, cuda: ON; folds only where a measured prologue tile beat the two launches (shipped
    #   "rms_norm_gemm" entries from runs/norm_gemm_pair.csv; decode steps runs/decode_step.csv). rocm: OFF.
    "rocm": {"rms_norm": True, "sigmoid_gate": True, "sampling": True, "rope": False, "attention": False,
             "all_reduce_norm": False, "gemm_merge": False, "norm_gemm": False},
    "cuda": {"rms_norm": True, "sigmoid_gate": False, "sampling": True, "rope": False, "attention": True,
             "all_reduce_norm": False, "gemm_merge": True, "norm_gemm": True},
    "cpu": {},
}

# glu_gemm: OFF on both GPU platforms until benchmarks/e2e/decode_step.py has A/B'd it on the H200 (the separate
#   SiLU * mul kernel is 18 us per Llama-3.2-1B step at B = 1, issue 31's profile; the kernel's tiles are not
#   measured). Enable with options={"passes": {"glu_gemm": True}}.
for _kind in ("rocm", "cuda"):
    PASS_DEFAULTS[_kind]["glu_gemm"] = False

# moe_experts + moe_routing, cuda: ON together: the decode step with both beats Inductor at every measured batch
#   (runs/moe_decode.csv, run 2026-12-05-0222-moe_decode, 4 layers, grouped_mm: Qwen3-MoE 1.41x / 1.51x / 1.89x,
#   GPT-OSS 1.23x / 1.44x / 1.72x at B = 1 / 8 / 32). rocm: OFF until measured there. Disable with
#   options={"passes": {"moe_experts": False, "moe_routing": False}}.
PASS_DEFAULTS["rocm"]["moe_experts"] = False
PASS_DEFAULTS["cuda"]["moe_experts"] = True

# rope_kv (q/k RoPE + the K/V cache writes in one launch, issue 31): OFF on both GPU platforms. A/B'd on an H100
#   at B = 1 (runs/decode_step.csv, run 2026-12-06-2341-decode_step, config "rope_kv"): Llama-3.2-1B 1.3% faster,
#   Qwen3-0.6B 2.2% slower (its RoPE follows the per-head q/k norms Inductor fuses it with); not measured on the
#   H200. Our Triton kernel is the only provider (no vendor op fuses the cache write with the model's cos/sin).
#   Enable with options={"passes": {"rope_kv": True}} (the rope pass may stay off: rope_kv runs its discovery on
#   the rotations written into caches).
for _kind in ("rocm", "cuda"):
    PROVIDER_ORDER[_kind]["rope_kv_write"] = ("triton",)
    PASS_DEFAULTS[_kind]["rope_kv"] = False

# qkv_rope_kv (RMSNorm + q/k/v GEMM + q/k RoPE + the K/V cache writes in one launch, issue 31): OFF on both GPU
#   platforms until benchmarks/e2e/decode_step.py has A/B'd it on the H200 (it removes rope_kv_write's launch per
#   layer; verified on CPU under the interpreter and AOT-compiled only). Our Triton kernel only (no vendor GEMM takes
#   a RoPE + cache-write epilogue). Enable with options={"passes": {"qkv_rope_kv": True, "rope_kv": True}} on top of
#   the gemm_merge / norm_gemm defaults.
for _kind in ("rocm", "cuda"):
    PROVIDER_ORDER[_kind]["qkv_rope_kv"] = ("triton",)
    PASS_DEFAULTS[_kind]["qkv_rope_kv"] = False

#: Smallest normalised size (the last dim) at which an RMSNorm is rewritten by default, per platform; a forced
#: provider rewrites every size.
#: - cuda: 512, so per-head q/k norms (head_dim 64-256: Qwen3, Gemma 3) stay with Inductor, which fuses them
#:   with the transpose and RoPE that follow (shipped "rms_norm" entry, hidden=128; runs/decode.csv, run
#:   2026-11-29-decode-qk-norms).
#: - rocm: 0 (every size, the vendor-kernel default, docs/vendors.md); not measured here.
NORM_MIN_HIDDEN: dict[str, int] = {"cuda": 512, "rocm": 0, "cpu": 0}

# moe_routing (the router's top-k of a mixture-of-experts layer, ops/moe_routing.py):
# - rocm: AITER first for the kinds it serves (topk_softmax for the softmax kinds, biased_grouped_topk_hip for
#   DeepSeek-V3's sigmoid groups with 1 or 8 groups; providers/_moe_routing_limits.py lists what it takes, read
#   from its source), then our Triton kernel. Not measured on ROCm: verified on CPU stand-ins only
#   (tests/test_moe_routing_pass.py); AITER never picks a NaN score where torch.topk ranks it first (docs/vendors.md).
# - cuda: our Triton kernel (no FlashInfer router top-k is wrapped). Measured inside the MoE decode step with
#   moe_experts (see moe_experts above; the op alone against Inductor's kernels is benchmarks/ops/bench_moe_routing.py,
#   not run yet).
# - the pass is ON for cuda (with moe_experts, same evidence) and OFF for rocm until measured there (enable with
#   options={"passes": {"moe_routing": True}}).
PROVIDER_ORDER["rocm"]["moe_routing"] = ("aiter", "triton")
PROVIDER_ORDER["cuda"]["moe_routing"] = ("triton",)
PASS_DEFAULTS["rocm"]["moe_routing"] = False
PASS_DEFAULTS["cuda"]["moe_routing"] = True
