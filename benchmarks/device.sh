#!/usr/bin/env bash
# Device runs in one call: bash benchmarks/device.sh STEP... (carry .whl with FlashInfer 0.5.3, DEVICE.md).
# Steps: tests (every gpu-marked test), example, norm, rope, gate, sampling, gemm. Results land in $OUT.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD:$PWD/benchmarks || exit 1
# the entry point (backend="rocm_fused" by name) needs the distribution's metadata installed
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . >/dev/null 2>&1 || echo "editable install failed"
export FLASHINFER_WORKSPACE_BASE=/tmp PYTHONUNBUFFERED=1 OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
python3 -c "import torch, triton, transformers, flashinfer; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__, 'flashinfer', flashinfer.__version__, torch.cuda.get_device_name())"
for step in "$@"; do
  echo "=== $step $(date +%T)"
  case $step in
    tests) timeout 420 python3 -m pytest -q -p no:cacheprovider -p no:logging -m gpu tests/ -rfE --tb=short 2>&1 \
             | tee "$OUT/gpu_tests.log" | tail -40 ;;
    tests:*) timeout 420 python3 -m pytest -q -p no:cacheprovider -p no:logging -m gpu -rfE --tb=short \
             $(echo "${step#tests:}" | tr , ' ') 2>&1 | tee "$OUT/gpu_tests.log" | tail -60 ;;
    example) timeout 120 python3 examples/compile_llama.py --steps 3 2>&1 | grep -v Warning | tail -6 ;;
    norm) timeout 300 python3 benchmarks/bench_rms_norm.py --out "$OUT" 2>&1 | grep -v "^rms_norm \|^fused_add" | tail -40 ;;
    rope) timeout 300 python3 benchmarks/bench_rope.py --out "$OUT" 2>&1 | tail -45 ;;
    gate) timeout 240 python3 benchmarks/bench_sigmoid_gate.py --out "$OUT" 2>&1 | tail -30 ;;
    sampling) timeout ${SAMPLING_TIMEOUT:-420} python3 benchmarks/bench_sampling.py --out "$OUT" 2>&1 | tail -40 ;;
    gemm) timeout ${GEMM_TIMEOUT:-560} python3 benchmarks/bench_gemm_levels.py --out "$OUT" --budget-s ${GEMM_BUDGET:-420} 2>&1 | tail -30 ;;
  esac
done
echo "=== done $(date +%T)"
