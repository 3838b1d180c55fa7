#!/usr/bin/env bash
# One device call for issue 14 (session topp3): the restricted-winner chain's per-launch schedules
# (chain_schedule knobs), LANE_ARGMAX and the looping tail, top-p alone at V in {32000, 128256, 151936} x B in
# {1, 8, 32, 64} plus min-p / HF chain at B=64 V=128256 in CUDA graphs; the best per (V, B), CUPTI breakdowns,
# token equality of every variant with the plain search; then the sampler's winner GPU tests. Run from a copy
# of the worktree (cd into it first). Everything under `timeout`: the call must end within 280 s.
set -u
export PYTHONUNBUFFERED=1 OUT=${OUT:-/tmp/out} PYTHONPATH=$PWD
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())" | tee "$OUT/versions.txt"
CSV=$OUT/sampling_topp_session4.csv
echo "vocab,batch,filters,config,us" > "$CSV"
P=benchmarks/device_sampling_topp3.py
VARFILE=${VARFILE:-benchmarks/topp3_variants.json}
VARS=$(cat "$VARFILE")
el warm
for name in $(python3 -c "import json,sys; print(' '.join(json.load(open(sys.argv[1]))))" "$VARFILE"); do
  timeout 95 python3 $P --mode warm --only "$name" --variants "$VARS" --csv "$CSV" > "$OUT/warm_$name.log" 2>&1 &
done
wait
grep -L "done" "$OUT"/warm_*.log | sed 's/^/WARM FAILED: /'
el time
timeout 75 python3 $P --mode time --variants "$VARS" --csv "$CSV" > "$OUT/time.log" 2>&1
el best
timeout 45 python3 $P --mode best --variants "$VARS" --csv "$CSV" > "$OUT/best.log" 2>&1
el tests
left=$(( 270 - ($(date +%s) - T0) ))
if [ "$left" -gt 25 ] && [ -z "${SKIP_TESTS:-}" ]; then
  timeout $(( left - 5 )) python3 -m pytest -q -p no:cacheprovider -rfE --tb=short tests/test_sampling_winner.py tests/test_sampling_schedule.py \
    --durations=4 > "$OUT/gpu_tests.log" 2>&1
  tail -6 "$OUT/gpu_tests.log"
fi
el done
grep -h "FAIL\|Error\|CHECK\|PROF" "$OUT"/time.log "$OUT"/best.log | grep -v "CHECK .* 0 different" | cut -c1-900
grep -h "CHECK" "$OUT"/best.log | awk '{s+=$6} END {print "CHECK total different tokens:", s, "over", NR, "checks"}'
grep -h "TIME HF" "$OUT"/time.log
grep -h "^BEST" "$OUT"/best.log | cut -c1-200
