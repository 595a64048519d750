#!/usr/bin/env bash
# gpu-check.sh — the GPU leg, for a machine with an NVIDIA GPU (CI has none): builds the CUDA
# backend for this GPU, runs the native and Python GPU tests, then bench/cuda_bench.py
# --quick, and prints the device and a short table. Meant to finish within 5 minutes.
#
#   bash scripts/gpu-check.sh [BUILD_DIR]        (default build/gpu-check)
#
# Uses .venv's cmake/ninja/python when `make venv` made them, else the system's. The Python
# part needs numpy, cffi and pytest importable; without them it says so and stops after
# the native tests (non-zero exit: the check is incomplete). Output: stdout, plus
# $OUT/gpu-check.txt when OUT is set (the device tool's fetch folder).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build_dir=${1:-build/gpu-check}
start=$(date +%s)
say() { echo "gpu-check: $*"; }
die() { echo "gpu-check: error: $*" >&2; exit 1; }
log=${OUT:+$OUT/gpu-check.txt}
if [ -n "$log" ]; then exec > >(tee "$log") 2>&1; fi

command -v nvidia-smi >/dev/null 2>&1 || die "nvidia-smi not found: no NVIDIA driver on this machine"
nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv,noheader
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d ' .')
nvcc_bin=${CUDACXX:-$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || true)}
[ -n "$nvcc_bin" ] || die "nvcc not found (put the CUDA toolkit's bin/ on PATH or set CUDACXX)"
export CUDACXX=$nvcc_bin

if [ -x .venv/bin/cmake ]; then cmake_bin=.venv/bin/cmake; else cmake_bin=$(command -v cmake || true); fi
[ -n "$cmake_bin" ] || die "cmake not found"
if [ -x .venv/bin/ctest ]; then ctest_bin=$root/.venv/bin/ctest; else ctest_bin=$(command -v ctest); fi
gen=()
if [ -x .venv/bin/ninja ]; then gen=(-G Ninja -DCMAKE_MAKE_PROGRAM="$root/.venv/bin/ninja");
elif command -v ninja >/dev/null 2>&1; then gen=(-G Ninja); fi
if [ -x .venv/bin/python ]; then py=$root/.venv/bin/python; else py=$(command -v python3); fi

say "building for sm_$cc with $nvcc_bin"
"$cmake_bin" -S . -B "$build_dir" "${gen[@]}" -DNERVE_CUDA=ON -DNERVE_BUILD_TESTS=ON \
  -DCMAKE_CUDA_ARCHITECTURES="$cc" -DCMAKE_BUILD_TYPE=Release >/dev/null
"$cmake_bin" --build "$build_dir" -j "$(nproc)" >/dev/null
say "built in $(( $(date +%s) - start )) s"

say "native tests (test_cuda: device info, pools, embedding parity; host self-tests)"
(cd "$build_dir" && "$ctest_bin" --output-on-failure -R '^(test_cuda|nrvc_pool_selftest|nrvc_w4_selftest)$')

if ! "$py" -c "import numpy, cffi, pytest" 2>/dev/null; then
  die "$py lacks numpy/cffi/pytest: Python GPU tests and benchmarks not run"
fi
export NERVE_LIBRARY=$root/$build_dir/libnerve.so NERVE_HEADER=$root/native/include/nerve.h
export PYTHONPATH=$root/sdk${PYTHONPATH:+:$PYTHONPATH}
say "Python GPU tests"
"$py" -m pytest -q -p no:cacheprovider tests/python/test_cuda_kernels.py tests/python/test_cuda_select.py
say "selection on this device"
"$py" -m nerve cuda-select 0
say "benchmarks"
"$py" bench/cuda_bench.py --quick --repeat 15
say "done in $(( $(date +%s) - start )) s"
