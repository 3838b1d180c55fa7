#!/usr/bin/env bash
# One device call for the norm family: GPU tests, the example with real kernels, the kernel benchmark.
# Usage on the device machine (carry .whl): bash benchmarks/device_norm.sh
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site:$PWD || exit 1
# the entry point (backend="rocm_fused" by name) needs the distribution's metadata installed
python3 -m pip install -q --no-deps --no-build-isolation --no-index -e . >/dev/null 2>&1 || echo "editable install failed"
export FLASHINFER_WORKSPACE_BASE=/tmp PYTHONUNBUFFERED=1 OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
python3 -c "import torch, triton, transformers, flashinfer; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__, 'flashinfer', flashinfer.__version__, torch.cuda.get_device_name())"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
timeout 300 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_norm_providers.py tests/test_triton_rms_norm.py 2>&1 | tail -25
timeout 120 python3 examples/compile_llama.py --steps 3 2>&1 | grep -v Warning | tail -15
timeout 300 python3 benchmarks/bench_rms_norm.py --out "$OUT" 2>&1 | tail -45
