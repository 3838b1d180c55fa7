#!/bin/bash
# issue 19 session 3 device run (one call, <= 360 s): sweep (Qwen3 then Llama, M = 1, 8, 32; q/k/v and
# gate/up) -> table -> GPU tests -> Qwen3-0.6B decode step at B=1 (inductor, rocm_fused). Run from .devwork/gemv3.
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/benchmarks
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee $OUT/gpu.txt
python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__)" | tee -a $OUT/gpu.txt
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . >/dev/null 2>&1 || echo "editable install failed"
echo "=== sweep $(date +%T) at $(el) s"
timeout 118 python3 benchmarks/sweep_decode_gemm.py --out $OUT --budget-s 100 --models qwen3,llama \
  --buckets 1,8,32 --order 1,8,32 --groups qkv,gate_up \
  --table rocm_inductor/providers/triton/gemm_merge_tuned.json > $OUT/sweep.log 2>&1
echo "sweep rc=$? at $(el) s"
cp rocm_inductor/providers/triton/gemm_merge_tuned.json $OUT/gemm_merge_tuned_table.json
echo "=== gpu tests $(date +%T)"
timeout 40 python3 -m pytest -q -m gpu -x -p no:cacheprovider tests/test_gemm_merge_gpu.py > $OUT/gpu_tests.log 2>&1
echo "tests rc=$? at $(el) s"; tail -3 $OUT/gpu_tests.log
LEFT=$(( 352 - $(el) ))
echo "=== qwen3 step $(date +%T), ${LEFT} s left"
mkdir -p $OUT/step
timeout $(( LEFT - 4 )) python3 benchmarks/bench_decode_gemm.py --out $OUT/step --no-layer --models qwen3 --buckets 1 \
  --configs inductor,rocm_fused --budget-s $(( LEFT - 6 )) > $OUT/step.log 2>&1
echo "step rc=$? at $(el) s"
grep -v -i warn $OUT/step.log | grep "step " | cut -c1-400 | tail -4
echo "=== sweep best per shape"; grep -v -i warn $OUT/sweep.log | grep "^\[" | tail -14
echo "=== steps"; cat $OUT/step/decode_gemm.csv 2>/dev/null
echo "=== done $(el) s"
