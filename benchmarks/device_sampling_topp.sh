#!/usr/bin/env bash
# One device call for issue 14 (session topp2): the sampler without top-k before (_base: commit fe725db) and
# after this branch, V=128256, B=1/8/32/64, top-p / min-p / HF chain in CUDA graphs, CUPTI breakdowns at
# B=8/64, chain-vs-search token check, three constant variants, then the sampler GPU tests. Run from a copy
# of the worktree with the old package under _base/ (cd into it first).
set -u
export PYTHONUNBUFFERED=1 OUT=${OUT:-/tmp/out} PYTHONPATH=$PWD
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())" | tee "$OUT/versions.txt"
CSV=$OUT/sampling_topp_session3.csv
echo "vocab,batch,filters,config,us" > "$CSV"
B=benchmarks/device_sampling_topp.py
el base
timeout 55 python3 $B --tree _base --label base --prof --csv "$CSV" > "$OUT/base.log" 2>&1
el ours
timeout 75 python3 $B --tree . --label ours --prof --check --csv "$CSV" > "$OUT/ours.log" 2>&1
el variants
timeout 40 python3 $B --tree . --label ours --filters top_p0.9 --batches 32,64 --variants \
  '{"np_large16": {"NPIV_LARGE": 16}, "tp_large528": {"TARGET_PROGRAMS_LARGE": 528}, "warps8": {"STEP_WARPS": 8}}' \
  --csv "$CSV" > "$OUT/var.log" 2>&1
timeout 25 python3 $B --tree . --label ours --filters top_p0.9 --batches 1,8 --variants \
  '{"np_small64": {"NPIV_SMALL": 64}, "tp_small1056": {"TARGET_PROGRAMS": 1056}}' --csv "$CSV" >> "$OUT/var.log" 2>&1
el tests
timeout 65 python3 -m pytest -q -p no:cacheprovider -rfE --tb=short tests/test_sampling_winner.py tests/test_sampling_gpu.py \
  -k "winner_draws or rejected or winner_chi or chi_square_on_device or topk_path_draws" --durations=4 > "$OUT/gpu_tests.log" 2>&1
tail -8 "$OUT/gpu_tests.log"
el done
grep -h "PROF\|CHECK\|FAIL\|Error" "$OUT"/base.log "$OUT"/ours.log "$OUT"/var.log | cut -c1-700
python3 - "$CSV" <<'PY'
import collections, sys
t = collections.defaultdict(dict)
for line in open(sys.argv[1]).read().split("\n")[1:]:
    if line:
        v, b, f, c, us = line.split(",")
        t[(f, c)][int(b)] = us
for (f, c), d in sorted(t.items()):
    print(f"{f:12s} {c:24s} " + " ".join(f"B={b}:{d.get(b, '-'):>7s}" for b in (1, 8, 32, 64)))
PY
