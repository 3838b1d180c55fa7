#!/usr/bin/env bash
# Create .venv with CPU PyTorch 2.13.0 and this package with its test extras. Idempotent; safe to re-run.
# A bare `torch` requirement would pull a multi-GB CUDA build, so CPU torch is pinned here first.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  .venv/bin/pip install -q --disable-pip-version-check "torch==2.13.0"
fi
.venv/bin/pip install -q --disable-pip-version-check -e ".[test]"
