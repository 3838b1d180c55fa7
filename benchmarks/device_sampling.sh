#!/usr/bin/env bash
# One device call for the sampler benchmark (run from the repo copy's root; carry ${WHL:-.whl}/fi053 [${WHL:-.whl}/fi0618 .fi_aot]):
# sampler GPU tests, then bench_sampling.py for ours/eager/inductor and each FlashInfer release in its own
# process (0.5.3: JIT warmed in the background from the start; 0.6.18: prebuilt AOT .so files from .fi_aot
# when carried (built on a CPU machine by benchmarks/flashinfer_aot.sh), else its JIT is started in the
# background and its cache tarred into $OUT). Everything comes back as $OUT/sampling_out.tgz.
set -u
export PYTHONUNBUFFERED=1 OUT=${OUT:-/tmp/out} MAX_JOBS=16
mkdir -p "$OUT/res"
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
pip_t() { python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$1" "${@:2}"; }
pip_t /tmp/fi053 ${WHL:-.whl}/fi053/*.whl || echo "fi053 install failed"
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . >/dev/null 2>&1 || echo "editable install failed"
WARM='import torch, flashinfer.sampling as S
x = torch.randn(2, 32000, device="cuda"); p = torch.softmax(x, -1)
S.softmax(x, temperature=0.7); S.top_k_top_p_sampling_from_logits(x, 50, 0.9); S.top_p_sampling_from_probs(p, 0.9)
S.top_k_sampling_from_probs(p, 50); S.min_p_sampling_from_probs(p, 0.1); torch.cuda.synchronize(); print("warm ok")'
(PYTHONPATH=/tmp/fi053 FLASHINFER_WORKSPACE_BASE=/tmp/fiws053 timeout 200 python3 -c "$WARM" > "$OUT/fi053_jit.log" 2>&1; echo "rc $?" >> "$OUT/fi053_jit.log") &
FI053_PID=$!
HAVE618=0
if [ -d ${WHL:-.whl}/fi0618 ]; then
  pip_t /tmp/fi0618 ${WHL:-.whl}/fi0618/*.whl ${WHL:-.whl}/fi053/apache_tvm_ffi*.whl || echo "fi0618 install failed"
  if [ -f .fi_aot/sampling.so ]; then
    for m in sampling topk; do [ -f .fi_aot/$m.so ] && mkdir -p /tmp/fi0618/flashinfer/data/aot/$m && cp .fi_aot/$m.so /tmp/fi0618/flashinfer/data/aot/$m/; done
  fi
  if [ -f .fi_aot/sampling.so ]; then
    echo "warm ok (AOT .so carried: $(ls .fi_aot))" > "$OUT/fi0618_jit.log"; export FI618_ENV="FLASHINFER_DISABLE_JIT=1"
    [ -f .fi_aot/topk.so ] || export FI618_ENV="FLASHINFER_DISABLE_JIT=1 FI_TOPK_TENSOR=1"
  else
    (PYTHONPATH=/tmp/fi0618 FLASHINFER_WORKSPACE_BASE=/tmp/fiws618 timeout 280 python3 -c "$WARM" > "$OUT/fi0618_jit.log" 2>&1; echo "rc $?" >> "$OUT/fi0618_jit.log") &
  fi
  HAVE618=1
fi
export PYTHONPATH=$PWD:$PWD/benchmarks
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())" | tee "$OUT/versions.txt"
# compile our kernels for every benchmark shape in the background (on-disk Triton cache) while the tests run
(timeout 150 python3 benchmarks/ops/bench_sampling.py --warm-only --out /tmp/warm > "$OUT/warm.log" 2>&1) &
el "tests"
timeout ${TEST_TIMEOUT1:-50} python3 -m pytest -q -p no:cacheprovider -rfE --tb=short -m gpu tests/test_sampling_gpu.py \
  -k "topk_path or split_rows or chi_square_on_device" --durations=5 2>&1 | tail -30 > "$OUT/gpu_tests1.log"
tail -8 "$OUT/gpu_tests1.log"
timeout ${TEST_TIMEOUT2:-50} python3 -m pytest -q -p no:cacheprovider -rfE --tb=short -m gpu tests/test_sampling*.py \
  -k "not (topk_path or split_rows or chi_square_on_device)" --durations=5 2>&1 | tail -30 > "$OUT/gpu_tests2.log"
tail -8 "$OUT/gpu_tests2.log"; el "warm: $(tail -1 $OUT/warm.log)"
el "bench ours/eager/inductor"
timeout ${BENCH_TIMEOUT:-130} python3 benchmarks/ops/bench_sampling.py --out "$OUT/res" --budget-s ${BENCH_BUDGET:-110} \
  --configs ${CONFIGS:-ours,eager,inductor} ${BENCH_ARGS:-} > "$OUT/bench_main.log" 2>&1; tail -3 "$OUT/bench_main.log"
wait $FI053_PID 2>/dev/null; el "fi053 jit: $(tail -1 $OUT/fi053_jit.log)"
FLASHINFER_WORKSPACE_BASE=/tmp/fiws053 PYTHONPATH=/tmp/fi053:$PYTHONPATH timeout 40 python3 benchmarks/ops/bench_sampling.py \
  --out "$OUT/res" --append --flashinfer --budget-s 30 > "$OUT/bench_fi053.log" 2>&1; tail -2 "$OUT/bench_fi053.log"
if [ $HAVE618 = 1 ]; then
  el "fi0618 jit: $(tail -1 $OUT/fi0618_jit.log)"
  if grep -q "warm ok" "$OUT/fi0618_jit.log"; then
    env ${FI618_ENV:-FI_NOOP=1} FLASHINFER_WORKSPACE_BASE=/tmp/fiws618 PYTHONPATH=/tmp/fi0618:$PYTHONPATH timeout 40 python3 benchmarks/ops/bench_sampling.py \
      --out "$OUT/res" --append --flashinfer --budget-s 30 > "$OUT/bench_fi0618.log" 2>&1; tail -2 "$OUT/bench_fi0618.log"
  else
    tar czf "$OUT/fiws618.tgz" -C /tmp fiws618 2>/dev/null; ls -la "$OUT/fiws618.tgz"
  fi
fi
el "done"
cat "$OUT/res/sampling.md" | head -80
# at most 8 files come back from a device call: one archive
(cd "$OUT" && tar czf /tmp/sampling_out.tgz --exclude='*.tgz' . && find . -mindepth 1 -delete && mv /tmp/sampling_out.tgz .)
