# Issue 19 session 4 (single small-M GEMMs + the missing measurements): one device call, <= 590 s.
# (a) short sweep of the singles (o_proj, down_proj, lm_head at M = 1, 8, 32) and Llama q/k/v, gate/up at
# M = 32 into the table + the streaming-read floor; (b) decode steps with the NEW table, Llama then Qwen3.
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/benchmarks TRITON_CACHE_DIR=/tmp/s1_triton
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__, torch.cuda.get_device_name())"
mkdir -p $OUT/sweep $OUT/floor $OUT/step_llama $OUT/step_qwen3
TABLE=rocm_inductor/providers/triton/gemm_merge_tuned.json
J=""
for m in 1 8; do for g in llama/o_proj llama/down_proj qwen3/o_proj qwen3/down_proj llama/lm_head qwen3/lm_head; do J="$J,$g/$m"; done; done
J="$J,llama/qkv/32,llama/gate_up/32"
for g in llama/o_proj llama/down_proj qwen3/o_proj qwen3/down_proj llama/lm_head qwen3/lm_head; do J="$J,$g/32"; done
echo "=== sweep $(date +%T)"
timeout 112 python3 benchmarks/sweep_decode_gemm.py --out $OUT/sweep --budget-s 95 --short --jobs "${J#,}" \
  --table $TABLE > $OUT/sweep.log 2>&1
echo "sweep rc=$? at $(el) s"; cp $TABLE $OUT/
grep "^\[" $OUT/sweep.log | tail -30
echo "=== read floor $(date +%T)"
timeout 30 python3 benchmarks/bench_read_floor.py --out $OUT/floor > $OUT/floor.log 2>&1
echo "floor rc=$? at $(el) s"; grep -E "^(qkv|gate)" $OUT/floor.log
LEFT=$(( 572 - $(el) )); LB=$(( LEFT * 58 / 100 ))
echo "=== llama step $(date +%T), $LEFT s left, llama budget $LB s"
timeout $(( LB + 12 )) python3 benchmarks/bench_decode_gemm.py --out $OUT/step_llama --no-layer --models llama \
  --buckets 1,8,32 --configs inductor,rocm_fused,inductor_freezing --budget-s $LB > $OUT/step_llama.log 2>&1
echo "llama rc=$? at $(el) s"
LEFT=$(( 572 - $(el) ))
echo "=== qwen3 step $(date +%T), $LEFT s left"
timeout $(( LEFT )) python3 benchmarks/bench_decode_gemm.py --out $OUT/step_qwen3 --no-layer --models qwen3 \
  --buckets 8,32,1 --freezing-last --configs inductor,rocm_fused,inductor_freezing --budget-s $(( LEFT - 14 )) \
  > $OUT/step_qwen3.log 2>&1
echo "qwen3 rc=$? at $(el) s"
for m in llama qwen3; do grep -E "^\| $m" $OUT/step_$m/decode_gemm_steps.md 2>/dev/null | cut -d'|' -f2-10; done
echo "=== done $(el) s"
