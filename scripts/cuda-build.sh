#!/usr/bin/env bash
# cuda-build.sh BUILD_DIR [extra cmake args...] — the CI compile leg of the CUDA backend.
#
# Configures the repository with -DNERVE_CUDA=ON -DNERVE_BUILD_TESTS=ON (Ninja), builds
# everything, runs test_cuda (the loader must find the backend it just built; without a
# GPU it checks the no-device path), nrvc_pool_selftest (the device pool's bookkeeping
# on a host arena) and nrvc_w4_selftest (the W4 kernel's decoding, on the CPU), checks that only nrvc_* symbols are exported, then lists the SASS
# inside libnerve_cuda.so with
# cuobjdump and fails unless it holds exactly the expected architectures:
#   nerve's default  sm_75 sm_80 sm_86 sm_87 sm_89 sm_90 (+ sm_70 when nvcc < 13), PTX 90
#   or the user's    CMAKE_CUDA_ARCHITECTURES (extra arg -DCMAKE_CUDA_ARCHITECTURES=...,
#                    or that name / CUDAARCHS in the environment)
# The expected list comes from the build itself (BUILD_DIR/nerve_cuda_archs.txt, written
# by cuda/CMakeLists.txt), so this script and CMake cannot disagree.
# No GPU is needed. nvcc ships no cuobjdump here; the PyPI package nvidia-cuda-cuobjdump
# does, and is installed into .venv when no cuobjdump is found.
set -euo pipefail

if [ $# -lt 1 ]; then
  echo "usage: $0 BUILD_DIR [extra cmake args...]" >&2
  exit 2
fi
build_dir=$1
shift
cd "$(dirname "$0")/.."
root=$PWD
start=$(date +%s)
say() { echo "cuda-build: $*"; }
die() { echo "cuda-build: error: $*" >&2; exit 1; }

# ---- compiler
nvcc_bin=${CUDACXX:-$(command -v nvcc || true)}
if [ -z "$nvcc_bin" ] || [ ! -x "$nvcc_bin" ]; then
  die "nvcc not found: install the CUDA toolkit and put its bin/ on PATH (or set CUDACXX); the CUDA backend cannot be built without it"
fi
nvcc_version=$("$nvcc_bin" --version | sed -n 's/.*release \([0-9][0-9]*\.[0-9][0-9]*\).*/\1/p')
say "nvcc $nvcc_version ($nvcc_bin)"

# ---- tools: the venv's cmake/ninja when `make venv` made them
if [ -x .venv/bin/cmake ]; then cmake_bin=.venv/bin/cmake; else cmake_bin=$(command -v cmake || true); fi
[ -n "$cmake_bin" ] || die "cmake not found (run 'make venv' or install cmake)"
if [ -x .venv/bin/ctest ]; then ctest_bin=$root/.venv/bin/ctest; else ctest_bin=$(command -v ctest || true); fi
[ -n "$ctest_bin" ] || die "ctest not found (run 'make venv' or install cmake)"
generator=(-G Ninja)
if [ -x .venv/bin/ninja ]; then
  generator+=(-DCMAKE_MAKE_PROGRAM="$root/.venv/bin/ninja")
elif ! command -v ninja >/dev/null 2>&1; then
  die "ninja not found (run 'make venv' or install ninja)"
fi

arch_args=()
if [ -n "${CMAKE_CUDA_ARCHITECTURES:-}" ]; then
  arch_args+=(-DCMAKE_CUDA_ARCHITECTURES="$CMAKE_CUDA_ARCHITECTURES")
fi

# ---- configure + build
"$cmake_bin" -S . -B "$build_dir" "${generator[@]}" -DNERVE_CUDA=ON -DNERVE_BUILD_TESTS=ON \
  "${arch_args[@]}" "$@"
t_build=$(date +%s)
"$cmake_bin" --build "$build_dir" -j "${JOBS:-$(nproc 2>/dev/null || echo 2)}"
say "build took $(( $(date +%s) - t_build )) s"

lib=$build_dir/libnerve_cuda.so
[ -f "$lib" ] || die "$lib was not built"
archs_file=$build_dir/nerve_cuda_archs.txt
[ -f "$archs_file" ] || die "$archs_file missing (cuda/CMakeLists.txt writes it at configure time)"

# ---- exports: only the nrvc_* entry points (cudart_static stays hidden)
if command -v nm >/dev/null 2>&1; then
  exports=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBRV]$/ {print $3}' | sort)
  stray=$(printf '%s\n' "$exports" | grep -v '^nrvc_' | grep -v '^_init$' | grep -v '^_fini$' || true)
  say "exported: $(printf '%s ' $exports)"
  [ -z "$stray" ] || die "libnerve_cuda.so exports symbols besides nrvc_*: $(printf '%s ' $stray)"
fi

# ---- the loader finds what was just built (no GPU needed: test_cuda checks the
# no-device path), the device pool's bookkeeping holds (on a host arena) and the W4
# kernel's per-lane arithmetic matches the reference (on the CPU)
(cd "$build_dir" && "$ctest_bin" --output-on-failure -R '^(test_cuda|nrvc_pool_selftest|nrvc_w4_selftest)$')

# ---- cuobjdump: PATH, next to nvcc, else the PyPI package in .venv
cuobjdump_bin=$(command -v cuobjdump || true)
if [ -z "$cuobjdump_bin" ] && [ -x "$(dirname "$(readlink -f "$nvcc_bin")")/cuobjdump" ]; then
  cuobjdump_bin=$(dirname "$(readlink -f "$nvcc_bin")")/cuobjdump
fi
find_pip_cuobjdump() {
  .venv/bin/python - <<'EOF'
import importlib.metadata as md
try:
    dist = md.distribution("nvidia-cuda-cuobjdump")
except md.PackageNotFoundError:
    raise SystemExit(0)
for f in dist.files or []:
    if f.name == "cuobjdump":
        print(f.locate())
        break
EOF
}
if [ -z "$cuobjdump_bin" ]; then
  [ -x .venv/bin/python ] || die "no cuobjdump on PATH or next to nvcc, and no .venv to install nvidia-cuda-cuobjdump into (run 'make venv')"
  cuobjdump_bin=$(find_pip_cuobjdump)
  if [ -z "$cuobjdump_bin" ]; then
    say "installing nvidia-cuda-cuobjdump into .venv (nvcc ships no cuobjdump)"
    .venv/bin/python -m pip install --quiet nvidia-cuda-cuobjdump ||
      die "pip install nvidia-cuda-cuobjdump failed"
    cuobjdump_bin=$(find_pip_cuobjdump)
  fi
  [ -n "$cuobjdump_bin" ] || die "nvidia-cuda-cuobjdump is installed but holds no cuobjdump binary"
  chmod +x "$cuobjdump_bin" 2>/dev/null || true
fi
say "cuobjdump: $cuobjdump_bin"

# ---- the check
expected_sass=$(sed -n 's/^sass=//p' "$archs_file")
expected_ptx=$(sed -n 's/^ptx=//p' "$archs_file")
say "architectures: $(sed -n 's/^architectures=//p' "$archs_file") ($(sed -n 's/^origin=//p' "$archs_file"))"
elf_list=$("$cuobjdump_bin" --list-elf "$lib")
echo "---- cuobjdump --list-elf $lib"
echo "$elf_list"
ptx_list=$("$cuobjdump_bin" --list-ptx "$lib" || true)
echo "---- cuobjdump --list-ptx $lib"
echo "$ptx_list"
echo "----"

# Architectures named by the listings: "libnerve_cuda.1.sm_87.cubin" -> sm_87.
found_sass=$(printf '%s\n' "$elf_list" | grep -o 'sm_[0-9]\+[a-z]\?' | sort -u | tr '\n' ' ')
found_ptx=$(printf '%s\n' "$ptx_list" | grep -o 'sm_[0-9]\+[a-z]\?' | sort -u | tr '\n' ' ')
norm() { printf '%s\n' $1 | sed '/^$/d' | sort -u | tr '\n' ' '; }
fail=0
exact=1
for a in $expected_sass; do
  case $a in
    sm_*) ;;
    *) say "architecture '$a' cannot be resolved without a GPU: requiring at least one SASS image"
       [ -n "$found_sass" ] || fail=1
       exact=0
       continue ;;
  esac
  if ! printf '%s\n' $found_sass | grep -qx "$a"; then
    echo "cuda-build: MISSING SASS for $a" >&2
    fail=1
  fi
done
if [ "$exact" -eq 1 ]; then
  for a in $found_sass; do
    if ! printf '%s\n' $expected_sass | grep -qx "$a"; then
      echo "cuda-build: UNEXPECTED SASS for $a (not in CMAKE_CUDA_ARCHITECTURES)" >&2
      fail=1
    fi
  done
fi
for a in $expected_ptx; do
  if ! printf '%s\n' $found_ptx | grep -qx "$a"; then
    echo "cuda-build: MISSING PTX for $a" >&2
    fail=1
  fi
done
say "SASS expected: $(norm "$expected_sass")| found: $found_sass"
say "PTX  expected: $(norm "$expected_ptx")| found: $found_ptx"
say "library: $(du -h "$lib" | cut -f1), wall time $(( $(date +%s) - start )) s"
[ "$fail" -eq 0 ] || die "libnerve_cuda.so does not hold the expected architectures"
say "OK"
