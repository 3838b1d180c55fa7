#!/usr/bin/env bash
# One device call for the sampler constants sweep, run from a copy of the worktree (cd into it
# first): (a) benchmarks/sweeps/sweep_sampling.py (general-path and top-k-path constants, V=128256, B=1/8/32/64),
# (b) with the picked constants: the sampler GPU tests (the ones that reach the changed kernels first) while
# bench_sampling.py --warm-only compiles every benchmark shape, then bench_sampling.py --configs ours.
# Everything comes back as $OUT/sweep_out.tgz; the summary is printed last.
set -u
export PYTHONUNBUFFERED=1 OUT=${OUT:-/tmp/out}
mkdir -p "$OUT/res"
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
# the backend's entry point (torch.compile(backend="rocm_fused") tests); the 2026-12-01 call lacked it
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . >/dev/null 2>&1 || echo "editable install failed"
export PYTHONPATH=$PWD:$PWD/benchmarks
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())" | tee "$OUT/versions.txt"
el "sweep"
timeout ${SWEEP_TIMEOUT:-165} python3 benchmarks/sweeps/sweep_sampling.py --out "$OUT" --budget-s ${SWEEP_BUDGET:-125} > "$OUT/sweep.log" 2>&1
tail -4 "$OUT/sweep.log"
PICK=$(cat "$OUT/sampling_pick.json" 2>/dev/null || echo '{}')
el "pick $PICK"
(timeout 100 python3 benchmarks/ops/bench_sampling.py --warm-only --configs ours --set "$PICK" --out /tmp/warm > "$OUT/warm.log" 2>&1) &
WARM_PID=$!
el "tests"
timeout ${TEST_TIMEOUT1:-90} python3 -m pytest -q -p no:cacheprovider -rfE --tb=short tests/test_sampling_winner.py \
  tests/test_sampling_gpu.py -k "winner or chi_square_on_device or split_rows" --durations=4 2>&1 | tail -25 > "$OUT/gpu_tests1.log"
tail -6 "$OUT/gpu_tests1.log"
timeout ${TEST_TIMEOUT2:-45} python3 -m pytest -q -p no:cacheprovider -rfE --tb=short -m gpu tests/test_sampling_gpu.py \
  -k "not (chi_square_on_device or split_rows)" --durations=4 2>&1 | tail -25 > "$OUT/gpu_tests2.log"
tail -6 "$OUT/gpu_tests2.log"
wait $WARM_PID 2>/dev/null; el "warm: $(tail -1 $OUT/warm.log)"
el "bench ours"
timeout ${BENCH_TIMEOUT:-110} python3 benchmarks/ops/bench_sampling.py --out "$OUT/res" --budget-s ${BENCH_BUDGET:-95} \
  --configs ours --set "$PICK" > "$OUT/bench_main.log" 2>&1; tail -3 "$OUT/bench_main.log"
el "done"
grep "pick\|general\|fast" "$OUT/sweep.log" | cut -c1-400
head -40 "$OUT/res/sampling.md" 2>/dev/null
(cd "$OUT" && tar czf /tmp/sweep_out.tgz --exclude='*.tgz' . && find . -mindepth 1 -delete && mv /tmp/sweep_out.tgz .)
