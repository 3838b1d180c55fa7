#!/usr/bin/env bash
# One device call for the sigmoid gate: GPU tests (kernel, capture, CUDA-graph compile) and the benchmark
# whose speed-up lines decide policy.PASS_DEFAULTS["cuda"]["sigmoid_gate"].
# Usage on the device machine (carry .whl): bash benchmarks/device_sigmoid_gate.sh
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
# the entry point (backend="rocm_fused" by name) needs the distribution's metadata installed
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . >/dev/null 2>&1 || echo "editable install failed"
export PYTHONUNBUFFERED=1 OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
timeout 300 python3 -m pytest -q -p no:cacheprovider tests/test_triton_sigmoid_gate.py tests/test_sigmoid_gate_pass.py \
  -k "gpu or triton_provider_end_to_end" 2>&1 | tail -25
timeout 300 python3 benchmarks/bench_sigmoid_gate.py --out "$OUT" 2>&1 | tail -40
