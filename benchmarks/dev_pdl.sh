# Issue 19, PDL for the decode GEMV: one device call, <= 220 s wall (a) read floor + launch cost, PDL off/on;
# (b, c, d) merged q/k/v M = 1 back to back, after a producer, numerics, graph edges; (e) the Llama B = 1 step.
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/benchmarks TRITON_CACHE_DIR=/tmp/pdl_triton
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
timeout 25 python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . > $OUT/pip.log 2>&1 \
  || echo "pip -e failed rc=$? (PYTHONPATH carries the tree)"; tail -2 $OUT/pip.log
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name(), 'cc', torch.cuda.get_device_capability(), 'cuda', torch.version.cuda)"
mkdir -p $OUT/a $OUT/b $OUT/e
echo "=== (a) read floor + launch cost, PDL off/on, at $(el) s"
timeout 45 python3 benchmarks/bench_read_floor.py --pdl-only --out $OUT/a > $OUT/a.log 2>&1; echo "rc=$?"
grep -E "^\|" $OUT/a.log; grep -iE "error|Traceback" $OUT/a.log | head -5
echo "=== (b,c,d) merged q/k/v, at $(el) s"
timeout 75 python3 benchmarks/bench_pdl_gemm.py --out $OUT/b > $OUT/b.log 2>&1; echo "rc=$?"
grep -vE "^\|" $OUT/b.log | tail -25; grep -E "^\|" $OUT/b.log
LEFT=$(( 212 - $(el) ))
CONF=rocm_fused,rocm_fused_pdl; [ $LEFT -gt 125 ] && CONF=inductor,rocm_fused,rocm_fused_pdl
echo "=== (e) llama B=1 step, $LEFT s left, configs $CONF, at $(el) s"
if [ $LEFT -gt 75 ]; then
  timeout $LEFT python3 benchmarks/bench_decode_gemm.py --no-layer --models llama --buckets 1 --configs $CONF \
    --budget-s $(( LEFT - 8 )) --out $OUT/e > $OUT/e.log 2>&1; echo "rc=$?"
  grep -E "step llama|^llama|skipped|error" $OUT/e.log | cut -c1-900
else echo "skipped: not enough time"; fi
echo "=== done $(el) s"
