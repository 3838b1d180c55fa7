#!/usr/bin/env bash
# Build FlashInfer 0.6.18.post1's sampling and topk modules ahead of time on a machine without a GPU (nvcc 13
# installed), so a device call loads them instead of JIT-compiling (> 6 minutes there, docs/gpu.md).
# Done once on 2026-12-01 (2 shared cores: sampling ~9 min, topk ~30 min); outputs sampling.so (2.2 MB) and
# topk.so (5.8 MB), to be carried and copied to <site>/flashinfer/data/aot/<name>/<name>.so on the device,
# with FLASHINFER_DISABLE_JIT=1 (benchmarks/device_sampling.sh does this from .fi_aot/).
# The site must be installed at the same path on both machines (/tmp/fi0618): the sources are referenced there.
# Needs: the flashinfer and apache-tvm-ffi wheels (docs/gpu.md), nvidia-curand's headers (pip download
# nvidia-curand==10.4.4.72; only include/ is used), nvcc 13.0 (cuda_home /usr/local).
set -eu
WHL=${WHL:-$PWD/.whl}  # .whl/fi0618 (flashinfer 0.6.18.post1) and .whl/fi053 (apache-tvm-ffi), fetched as docs/gpu.md says
OUTDIR=${1:-.fi_aot}
mkdir -p /tmp/fi0618 /tmp/curand /tmp/cudastub "$OUTDIR"
(cd /tmp/fi0618 && unzip -o -q "$WHL"/fi0618/flashinfer_python-*.whl && unzip -o -q "$WHL"/fi053/apache_tvm_ffi-*.whl)
(cd /tmp/curand && unzip -o -q /tmp/curandwhl/nvidia_curand-*.whl 'nvidia/*/include/*')
echo "" | gcc -shared -x c - -o /tmp/cudastub/libcuda.so -Wl,-soname,libcuda.so.1  # link-time stand-in only
export FLASHINFER_WORKSPACE_BASE=/tmp/fiws618 FLASHINFER_CUDA_ARCH_LIST=9.0a
# write the build.ninja files with flashinfer's own JIT specs, without importing its CUDA-side package
python3 - <<'PY'
import importlib.util, sys, types
root = "/tmp/fi0618"
sys.path.insert(0, root)
t = types.ModuleType("tvm_ffi"); t.__path__ = [root + "/tvm_ffi"]; sys.modules["tvm_ffi"] = t
spec = importlib.util.spec_from_file_location("tvm_ffi.libinfo", root + "/tvm_ffi/libinfo.py")
li = importlib.util.module_from_spec(spec); sys.modules["tvm_ffi.libinfo"] = li; spec.loader.exec_module(li)
t.libinfo = li
f = types.ModuleType("flashinfer"); f.__path__ = [root + "/flashinfer"]; sys.modules["flashinfer"] = f
from flashinfer.jit.sampling import gen_sampling_module
from flashinfer.jit.topk import gen_topk_module
for s in (gen_sampling_module(), gen_topk_module()):
    s.write_ninja()
    print(s.ninja_path)
PY
D=/tmp/fiws618/.cache/flashinfer/0.6.18.post1/90a/cached_ops
for m in sampling topk; do
  sed -i 's#^common_cflags = #common_cflags = -isystem /tmp/curand/nvidia/cu13/include #' $D/$m/build.ninja
  sed -i 's#-L\$cuda_home/lib64 \$#-L/usr/local/cuda/lib64 -L/tmp/cudastub $#' $D/$m/build.ninja
  (cd $D/$m && nice -n 15 ninja -j2) && cp $D/$m/$m.so "$OUTDIR/"
done
ls -la "$OUTDIR"
