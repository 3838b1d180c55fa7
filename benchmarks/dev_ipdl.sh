# Issue 19, Inductor's own PDL + our PDL GEMV: one device call, <= 235 s wall. (a) versions and whether
# torch._inductor.config.triton.enable_pdl exists; (b) the q/k/v pair table (bench_ipdl_pair.py); (c) the Llama
# B = 1 step with inductor / rocm_fused / rocm_fused_pdl_all / inductor_pdl in one process; (d) B = 8 then 32,
# rocm_fused vs rocm_fused_pdl_all, if time remains. Everything goes to stdout (logs under $OUT too).
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD:$PWD/benchmarks TRITON_CACHE_DIR=/tmp/ipdl_triton
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
# (the call's command line runs `python3 -m pip install -q --no-deps --no-build-isolation --no-index -e .` first;
# PYTHONPATH carries the tree either way)
python3 -c "import torch, triton, torch._inductor.config as c; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name(), 'cc', torch.cuda.get_device_capability(), 'cuda', torch.version.cuda, '| triton.enable_pdl exists:', hasattr(c.triton, 'enable_pdl'))"
mkdir -p $OUT/b $OUT/c $OUT/d8 $OUT/d32
echo "=== (b) pair table, at $(el) s"
timeout 60 python3 benchmarks/bench_ipdl_pair.py --tiles --out $OUT/b > $OUT/b.log 2>&1; echo "rc=$?"
grep -vE "^\|" $OUT/b.log | grep -v Warning | tail -30; grep -E "^\|" $OUT/b.log
step() {  # buckets configs budget outdir
  timeout $3 python3 benchmarks/bench_decode_gemm.py --no-layer --models llama --buckets $1 --configs $2 \
    --budget-s $(( $3 - 6 )) --out $4 > $4.log 2>&1; echo "rc=$?"
  grep -E "step llama|^llama|skipped|rror" $4.log | cut -c1-1200
}
LEFT=$(( 232 - $(el) ))
echo "=== (c) llama B=1 step, $LEFT s left, at $(el) s"
step 1 inductor,rocm_fused,rocm_fused_pdl_all,inductor_pdl $LEFT $OUT/c
for B in 8 32; do
  LEFT=$(( 232 - $(el) ))
  echo "=== (d) llama B=$B step, $LEFT s left, at $(el) s"
  if [ $LEFT -gt 80 ]; then step $B rocm_fused,rocm_fused_pdl_all $LEFT $OUT/d$B; else echo "skipped: not enough time"; fi
done
echo "=== done $(el) s"
