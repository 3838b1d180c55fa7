#!/usr/bin/env bash
# Device runs in one call: bash benchmarks/device.sh STEP... (carry .whl with FlashInfer 0.5.3: docs/gpu.md).
# Steps: tests (every gpu-marked test), example, norm, rope, gate, sampling, attention, gemm, tp (2 GPUs),
# decode:MODEL[:CONFIGS]
# (one model family per device call, e.g. decode:llama or decode:qwen3:rocm_fused_l2), decode-attn
# (e2e/bench_decode_attention.py, flags from $DATTN_ARGS), tuning (e2e/tuning.py, flags from $TUNING_ARGS), step
# (e2e/decode_step.py, $STEP_ARGS), moe (e2e/moe_decode.py, $MOE_ARGS), moe-experts (ops/bench_moe_experts.py,
# $MOE_EXPERTS_ARGS); step, moe and tuning also copy the run-log rows they appended to $OUT/runs_*.csv; tests:FILES
# runs the gpu-marked tests of those files (comma-separated); gemm takes its e2e/bench_gemm_levels.py flags from
# $GEMM_ARGS; decode-gemm (ops/bench_decode_gemm.py) its flags from $DGEMM_ARGS. Results land in $OUT; record
# them with benchmarks/run_log.py and regenerate RESULTS.md (benchmarks/README.md).
# Two GPUs (nvidia-h200-x2): install once (no steps), then run two instances with SKIP_INSTALL=1 and
# CUDA_VISIBLE_DEVICES=0 / 1 in the background; tar $OUT at the end (8 files come back at most).
set -u
if [ -z "${SKIP_INSTALL:-}" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  # the entry point (backend="rocm_fused" by name) needs the distribution's metadata installed
  python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . >/dev/null 2>&1 || echo "editable install failed"
fi
export PYTHONPATH=/tmp/site:$PWD:$PWD/benchmarks
export FLASHINFER_WORKSPACE_BASE=/tmp PYTHONUNBUFFERED=1 OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
# mark TOPIC... before a run, bring TOPIC... after it: the rows the run appended to results/runs/TOPIC.csv (with the
# header) go to $OUT/runs_TOPIC.csv; a run that logged nothing brings nothing back
declare -A LINES
nlines() { if [ -f "$1" ]; then wc -l < "$1"; else echo 0; fi; }
mark() { for t in "$@"; do LINES[$t]=$(nlines "benchmarks/results/runs/$t.csv"); done; }
bring() {
  for t in "$@"; do
    local f=benchmarks/results/runs/$t.csv n=${LINES[$t]:-0} m
    m=$(nlines "$f")
    if [ "$m" -gt "$n" ]; then { head -1 "$f"; tail -n +$((n + 1)) "$f"; } > "$OUT/runs_$t.csv"; fi
  done
}
python3 -c "import torch, triton, transformers, flashinfer; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__, 'flashinfer', flashinfer.__version__, torch.cuda.get_device_name())"
for step in "$@"; do
  echo "=== $step $(date +%T)"
  case $step in
    tests) timeout 420 python3 -m pytest -q -p no:cacheprovider -p no:logging -m gpu tests/ -rfE --tb=short 2>&1 \
             | tee "$OUT/gpu_tests.log" | tail -40 ;;
    tests:*) timeout 420 python3 -m pytest -q -p no:cacheprovider -p no:logging -m gpu -rfE --tb=short \
             $(echo "${step#tests:}" | tr , ' ') 2>&1 | tee "$OUT/gpu_tests.log" | tail -60 ;;
    example) timeout 120 python3 examples/compile_llama.py --steps 3 2>&1 | grep -v Warning | tail -6 ;;
    norm) timeout 300 python3 benchmarks/ops/bench_rms_norm.py --out "$OUT" 2>&1 | grep -v "^rms_norm \|^fused_add" | tail -40 ;;
    rope) timeout 300 python3 benchmarks/ops/bench_rope.py --out "$OUT" 2>&1 | tail -45 ;;
    gate) timeout 240 python3 benchmarks/ops/bench_sigmoid_gate.py --out "$OUT" 2>&1 | tail -30 ;;
    sampling) timeout ${SAMPLING_TIMEOUT:-420} python3 benchmarks/ops/bench_sampling.py --out "$OUT" 2>&1 | tail -40 ;;
    attention) timeout 300 python3 benchmarks/ops/bench_attention.py --out "$OUT" --sweep 2>&1 | tee "$OUT/attention.log" | grep -v -i warn | tail -25 ;;
    decode:*) m=${step#decode:}; c=${m#*:}; [ "$c" = "$m" ] && c=eager,inductor,rocm_fused_l1,rocm_fused_l2
             timeout ${DECODE_TIMEOUT:-560} python3 benchmarks/e2e/decode.py --models "${m%%:*}" --configs "$c" \
             --out "$OUT" --budget-s ${DECODE_BUDGET:-470} 2>&1 | tee "$OUT/decode_${m%%:*}.log" | grep -v -i "warn" | tail -40 ;;
    decode-attn) timeout ${DATTN_TIMEOUT:-560} python3 benchmarks/e2e/bench_decode_attention.py --out "$OUT" \
             --budget-s ${DATTN_BUDGET:-470} ${DATTN_ARGS:-} 2>&1 | tee "$OUT/decode_attention.log" | grep -v -i warn | tail -45 ;;
    tp) TORCH_SYMM_MEM_DISABLE_MULTICAST=1 timeout ${TP_TIMEOUT:-560} torchrun --nproc-per-node 2 \
             benchmarks/ops/bench_tp.py --out "$OUT" 2>&1 | tee "$OUT/tp.log" | grep -v -i "warn" | tail -60 ;;  # 2 GPUs
    decode-gemm) timeout ${DGEMM_TIMEOUT:-290} python3 benchmarks/ops/bench_decode_gemm.py --out "$OUT" ${DGEMM_ARGS:-} 2>&1 \
             | tee "$OUT/decode_gemm.log" | grep -v -i "warn" | tail -60 ;;
    tuning) mark tuning tuning_cost; timeout ${TUNING_TIMEOUT:-540} python3 benchmarks/e2e/tuning.py --out "$OUT" --budget-s ${TUNING_BUDGET:-470} \
             ${TUNING_ARGS:-} 2>&1 | tee "$OUT/tuning.log" | grep -v -i "warn" | tail -80
             bring tuning tuning_cost ;;  # runs_*: the views in $OUT share the names tuning.csv / tuning_cost.csv
    step) mark decode_step; timeout ${STEP_TIMEOUT:-560} python3 benchmarks/e2e/decode_step.py --out "$OUT" --budget-s ${STEP_BUDGET:-470} \
             ${STEP_ARGS:-} 2>&1 | tee "$OUT/decode_step.log" | grep -v -i "warn" | tail -60
             bring decode_step ;;
    moe) mark moe_decode; timeout ${MOE_TIMEOUT:-560} python3 benchmarks/e2e/moe_decode.py --out "$OUT" --budget-s ${MOE_BUDGET:-470} \
             ${MOE_ARGS:-} 2>&1 | tee "$OUT/moe_decode.log" | grep -v -i "warn" | tail -60
             bring moe_decode ;;
    moe-experts) timeout 240 python3 benchmarks/ops/bench_moe_experts.py --out "$OUT" ${MOE_EXPERTS_ARGS:-} 2>&1 \
             | tee "$OUT/moe_experts.log" | tail -20 ;;
    gemm) timeout ${GEMM_TIMEOUT:-560} python3 benchmarks/e2e/bench_gemm_levels.py --out "$OUT" --budget-s ${GEMM_BUDGET:-420} ${GEMM_ARGS:-} 2>&1 | tail -30 ;;
    *) echo "unknown step $step (see this script's header)"; exit 2 ;;
  esac
done
echo "=== done $(date +%T)"
