#!/usr/bin/env bash
# Session 4's last device call (<= 590 s): the sampler + gemm_merge GPU tests while the chain variants compile;
# Qwen3-0.6B decode step at B=1 (inductor, rocm_fused with singles, inductor_freezing); the looping chain tail
# variants (benchmarks/final4_variants.json), one process each; then bench_sampling's "ours" rows.
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/benchmarks TOPP_BS=32,64
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__, torch.cuda.get_device_name())" | tee $OUT/versions.txt
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . >/dev/null 2>&1 || echo "editable install failed"
mkdir -p $OUT/step $OUT/res
P=benchmarks/device_sampling_topp3.py; VF=benchmarks/final4_variants.json; VARS=$(cat $VF)
CSV=$OUT/sampling_final4_variants.csv; echo "vocab,batch,filters,config,us" > $CSV
NAMES=$(python3 -c "import json,sys; print(' '.join(json.load(open(sys.argv[1]))))" $VF)
echo "=== gpu tests + warm $(date +%T)"
for n in $NAMES; do timeout 120 python3 $P --mode warm --only $n --variants "$VARS" --csv $CSV > $OUT/warm_$n.log 2>&1 & done
timeout 135 python3 -m pytest -q -p no:cacheprovider -rfE --tb=short -m gpu tests/test_sampling_gpu.py \
  tests/test_sampling_winner.py tests/test_sampling_schedule.py tests/test_sampling_chain.py tests/test_sampling_fast.py \
  tests/test_gemm_merge_gpu.py tests/test_gemm_merge_single.py --durations=5 > $OUT/gpu_tests.log 2>&1
echo "tests rc=$? at $(el) s"; grep -E "passed|failed|error" $OUT/gpu_tests.log | tail -2; grep -E "^(FAILED|ERROR)" $OUT/gpu_tests.log | head -8
wait; grep -L "done" $OUT/warm_*.log | sed 's/^/WARM FAILED: /'
echo "=== qwen3 B=1 step $(date +%T) at $(el) s"
LEFT=$(( 400 - $(el) ))
timeout $(( LEFT )) python3 benchmarks/bench_decode_gemm.py --out $OUT/step --no-layer --models qwen3 --buckets 1 \
  --freezing-last --configs inductor,rocm_fused,inductor_freezing --budget-s $(( LEFT - 12 )) > $OUT/step.log 2>&1
echo "qwen3 rc=$? at $(el) s"; grep -E "^\| qwen3" $OUT/step/decode_gemm_steps.md 2>/dev/null | cut -d'|' -f2-10
echo "=== chain variants $(date +%T) at $(el) s"
for n in $NAMES; do
  ONE=$(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps({sys.argv[2]: d[sys.argv[2]]}))" $VF $n)
  timeout 30 python3 $P --mode time --variants "$ONE" --csv $CSV > $OUT/time_$n.log 2>&1; echo "$n rc=$?"
done
grep -h "TIME\|FAIL" $OUT/time_*.log | cut -c1-200
timeout 45 python3 $P --mode best --variants "$VARS" --csv $CSV > $OUT/best.log 2>&1
grep -h "FAIL\|Error\|PROF\|CHECK\|^BEST" $OUT/best.log | cut -c1-300
LEFT=$(( 575 - $(el) ))
echo "=== bench_sampling ours $(date +%T), $LEFT s left"
if [ $LEFT -gt 30 ]; then
  timeout $(( LEFT )) python3 benchmarks/bench_sampling.py --out $OUT/res --budget-s $(( LEFT - 10 )) --configs ours > $OUT/bench.log 2>&1
  echo "bench rc=$?"; grep -c . $OUT/res/sampling.csv
fi
echo "=== done $(el) s"
