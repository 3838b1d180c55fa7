#!/usr/bin/env bash
# One device call for issue 14 at B=1 (session topk1): variants of the top-k path's launch 2, run from a copy of
# the worktree (cd into it first). In parallel: every variant's kernels compiled in its own process (Triton's
# on-disk cache) and the GPU tests of the top-k path; then (tests finished, or at t = TEST_WAIT_S) the timing
# run: CUDA graphs, tokens vs the pivot-search tail, CUPTI breakdown at B=1 (benchmarks/bench_topk_launch2.py).
# Logs under $OUT; the table is printed last.
set -u
export PYTHONUNBUFFERED=1 OUT=${OUT:-/tmp/out}
export PYTHONPATH=$PWD:$PWD/benchmarks
mkdir -p "$OUT"
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())" | tee "$OUT/versions.txt"
# 2026-12-01: three of the eight warm processes hit WARM_TIMEOUT=55 (so the timing compiled them and ran out
# of budget before B=32): warm fewer variants or give them longer.
VARS=${VARS:-"base default"}
el "warm + tests"
(timeout ${TEST_TIMEOUT:-150} python3 -m pytest -q -p no:cacheprovider -rfE --tb=short tests/test_sampling_gpu.py \
  -k "topk_path or chi_square_on_device" --durations=6 > "$OUT/gpu_tests.log" 2>&1; echo "rc=$?" >> "$OUT/gpu_tests.log") &
TEST_PID=$!
WPIDS=""
for n in $VARS; do
  timeout ${WARM_TIMEOUT:-80} python3 benchmarks/bench_topk_launch2.py --warm "$n" > "$OUT/warm_$n.log" 2>&1 &
  WPIDS="$WPIDS $!"
done
wait $WPIDS
for n in $VARS; do echo "  $n: $(tail -1 $OUT/warm_$n.log | cut -c1-200)"; done
el "warm done; waiting for tests (until t=${TEST_WAIT_S:-100} s)"
while kill -0 $TEST_PID 2>/dev/null && [ $(( $(date +%s) - T0 )) -lt ${TEST_WAIT_S:-100} ]; do sleep 1; done
kill -0 $TEST_PID 2>/dev/null && el "tests STILL RUNNING during the timing (timings may be disturbed)"
el "bench"
timeout ${BENCH_TIMEOUT:-75} python3 benchmarks/bench_topk_launch2.py --out "$OUT" --budget-s ${BENCH_BUDGET:-40} \
  > "$OUT/bench.log" 2>&1
echo "bench rc=$?"; grep -E "FAIL|budget" "$OUT/bench.log" | head -5
wait $TEST_PID
el "tests:"; tail -14 "$OUT/gpu_tests.log"
grep -E "^tokens|^cupti" "$OUT/bench.log" | cut -c1-330
sed -n '/^variant |/,$p' "$OUT/bench.log"
el "done"
