#!/bin/bash
# issue 19 device run (one call): sweep -> table -> GPU tests -> Llama decode step. Run from .devwork/gemv.
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/benchmarks
T0=$(date +%s)
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee $OUT/gpu.txt
python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__)" | tee -a $OUT/gpu.txt
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . >/dev/null 2>&1 || echo "editable install failed"
echo "=== sweep $(date +%T)"
timeout 140 python3 benchmarks/sweep_decode_gemm.py --out $OUT --budget-s 112 \
  --table rocm_inductor/providers/triton/gemm_merge_tuned.json > $OUT/sweep.log 2>&1
echo "sweep rc=$? $(( $(date +%s) - T0 )) s"; grep -v -i warn $OUT/sweep.log | grep "^\[" | tail -60
echo "=== gpu tests $(date +%T)"
timeout 50 python3 -m pytest -q -m gpu -x -p no:cacheprovider tests/test_gemm_merge_gpu.py > $OUT/gpu_tests.log 2>&1
echo "tests rc=$? $(( $(date +%s) - T0 )) s"; tail -5 $OUT/gpu_tests.log
LEFT=$(( 405 - ($(date +%s) - T0) ))
echo "=== step $(date +%T), ${LEFT} s left"
timeout $(( LEFT - 5 )) python3 benchmarks/bench_decode_gemm.py --out $OUT --no-layer --models llama --buckets 1,8,32 \
  --configs inductor,rocm_fused --budget-s $(( LEFT - 12 )) > $OUT/step.log 2>&1
echo "step rc=$?"
grep -v -i warn $OUT/step.log | tail -12
LEFT=$(( 405 - ($(date +%s) - T0) ))
if [ $LEFT -gt 50 ]; then mkdir -p $OUT/freezing; timeout $(( LEFT - 3 )) python3 benchmarks/bench_decode_gemm.py \
  --out $OUT/freezing --no-layer --models llama --buckets 1 --configs inductor_freezing --budget-s 400 > $OUT/freezing/step.log 2>&1;
  grep -v -i warn $OUT/freezing/step.log | tail -4; fi
echo "=== layer table"; cat $OUT/decode_gemm_layer.md 2>/dev/null | grep "^| llama" | cut -c1-170
echo "=== done $(( $(date +%s) - T0 )) s"
