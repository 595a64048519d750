#!/usr/bin/env bash
# dist-aarch64.sh [BUILD_DIR] — the Jetson tarball, cross-built on this machine.
#
# Writes dist/nerve-<version>-linux-aarch64.tar.gz, one directory inside:
#   lib/libnerve.so -> libnerve.so.MAJOR -> libnerve.so.VERSION   (aarch64, ARMv8.0 baseline,
#       NEON variants picked at run time; no CUDA backend: that is built on the board)
#   lib/cmake/nerve/   find_package(nerve) -> nerve::nerve       (relocatable)
#   lib/pkgconfig/nerve.pc                                       (relocatable: ${pcfiledir})
#   include/nerve.h
#   python/nerve/      the Python package's sources (no tests, no compiled files), with
#                      links to ../../lib/libnerve.so.MAJOR and ../../include where a wheel
#                      keeps them, so PYTHONPATH=<dir>/python is all it needs
#   examples/c/        the C example and its CMakeLists.txt
#   JETSON.md          docs/JETSON.md;  README.md  how to use this directory
# The library comes from a Release build in BUILD_DIR (default build/dist-aarch64) with
# cmake/aarch64-linux-gnu.cmake, installed with `cmake --install --prefix`. Needs
# gcc-aarch64-linux-gnu, and cmake + ninja (.venv, or CMAKE / NINJA).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=${1:-build/dist-aarch64}
say() { echo "dist-aarch64: $*"; }
die() { echo "dist-aarch64: error: $*" >&2; exit 1; }

cmake_bin=${CMAKE:-}
[ -n "$cmake_bin" ] || { [ -x .venv/bin/cmake ] && cmake_bin=.venv/bin/cmake; } || cmake_bin=$(command -v cmake || true)
ninja_bin=${NINJA:-}
[ -n "$ninja_bin" ] || { [ -x .venv/bin/ninja ] && ninja_bin=.venv/bin/ninja; } || ninja_bin=$(command -v ninja || true)
[ -n "$cmake_bin" ] || die "cmake not found (make venv installs it into .venv)"
[ -n "$ninja_bin" ] || die "ninja not found (make venv installs it into .venv)"
case $ninja_bin in /*) ;; *) ninja_bin=$root/$ninja_bin ;; esac
command -v aarch64-linux-gnu-gcc >/dev/null || die "aarch64-linux-gnu-gcc not found (apt-get install gcc-aarch64-linux-gnu)"

version=$(tr -d ' \n' < VERSION)
major=${version%%.*}
name=nerve-$version-linux-aarch64
stage=$build/stage
top=$stage/$name

# ---- the library, installed into the tarball's directory
"$cmake_bin" -S . -B "$build" -G Ninja "-DCMAKE_MAKE_PROGRAM=$ninja_bin" -DCMAKE_BUILD_TYPE=Release \
  -DNERVE_CUDA=OFF -DNERVE_BUILD_TESTS=OFF -DCMAKE_INSTALL_LIBDIR=lib \
  "-DCMAKE_TOOLCHAIN_FILE=$root/cmake/aarch64-linux-gnu.cmake" >/dev/null
"$cmake_bin" --build "$build" --target nerve
rm -rf "$stage"
mkdir -p "$top"
"$cmake_bin" --install "$build" --prefix "$top" >/dev/null

# ---- Python package, example, notes
mkdir -p "$top/python" "$top/examples"
tar -C sdk --exclude=__pycache__ --exclude='*.pyc' --exclude='*.so' --exclude='*.so.*' --exclude=tests \
  --exclude='*.egg-info' -cf - nerve | tar -C "$top/python" -xf -
# the places where an installed wheel keeps them, so that PYTHONPATH alone finds the library
ln -s "../../lib/libnerve.so.$major" "$top/python/nerve/libnerve.so.$major"
ln -s ../../include "$top/python/nerve/include"
cp -r examples/c "$top/examples/c"
cp docs/JETSON.md "$top/JETSON.md"
cat > "$top/README.md" <<EOF
# nerve $version for aarch64 Linux (Jetson)

Cross-built from the nerve sources with \`make dist-aarch64\`. CPU only (NEON); the CUDA
backend is not in here. Unpack anywhere, e.g. \`tar -C \$HOME/opt -xzf $name.tar.gz\`;
every path below is relative to this directory (the CMake and pkg-config files locate it
from their own place, so it may be moved).

| path | what |
|---|---|
| \`lib/libnerve.so.$version\` (+ \`libnerve.so.$major\`, \`libnerve.so\`) | the C library |
| \`include/nerve.h\` | its one header |
| \`lib/cmake/nerve/\` | \`find_package(nerve $major.0 REQUIRED)\` gives \`nerve::nerve\` |
| \`lib/pkgconfig/nerve.pc\` | \`pkg-config --cflags --libs nerve\` |
| \`python/nerve/\` | the Python SDK's sources |
| \`examples/c/\` | a C program: VAD on a WAV, a serial command frame |
| \`JETSON.md\` | prerequisites, native build, examples, troubleshooting |

## C

    NERVE=\$HOME/opt/$name
    cmake -S \$NERVE/examples/c -B build -DCMAKE_PREFIX_PATH=\$NERVE && cmake --build build
    # or: PKG_CONFIG_PATH=\$NERVE/lib/pkgconfig cc app.c \$(pkg-config --cflags --libs nerve)
    # a program built without an RPATH finds the library with LD_LIBRARY_PATH=\$NERVE/lib

## Python (3.9+)

The package here is the sources, with links to the library and header above (where an
installed wheel keeps them), so it needs only its dependencies and PYTHONPATH:

    sudo apt-get install python3-venv
    python3 -m venv ~/nerve-venv && . ~/nerve-venv/bin/activate
    pip install "numpy>=1.22" "cffi>=1.15" "onnx>=1.14" "pyserial>=3.5"
    export PYTHONPATH=\$NERVE/python
    python3 -m nerve info

To use another libnerve (say one built on the board), point NERVE_LIBRARY at it (and
NERVE_HEADER at its nerve.h).

Alternatively build and install everything on the board from a checkout of the sources
(\`pip install .\`, or \`make test\`): that also builds the CUDA backend when nvcc is there.
See JETSON.md.
EOF

# ---- checks: an aarch64 library, nothing that names this machine's paths
lib=$top/lib/libnerve.so.$version
[ -f "$lib" ] && [ "$(readlink "$top/lib/libnerve.so.$major")" = "libnerve.so.$version" ] \
  || die "the install did not produce lib/libnerve.so.$version with its links"
[ -f "$top/python/nerve/libnerve.so.$major" ] && [ -f "$top/python/nerve/include/nerve.h" ] \
  || die "the Python package's links to the library and header do not resolve"
machine=$(od -An -t u2 -j 18 -N 2 "$lib" | tr -d ' ')
[ "$machine" = 183 ] || die "$lib is ELF machine $machine, not 183 (aarch64)"
if grep -rIl -e "$root" "$top" >/dev/null; then
  die "files in the tarball name the build machine's paths: $(grep -rIl -e "$root" "$top" | tr '\n' ' ')"
fi

# ---- the tarball (entries sorted, owned by root: the same inputs give the same listing)
mkdir -p dist
out=dist/$name.tar.gz
tar -C "$stage" --sort=name --owner=0 --group=0 --numeric-owner -czf "$out" "$name"
say "$out: $(du -h "$out" | cut -f1), $(tar -tzf "$out" | wc -l) entries, sha256 $(sha256sum "$out" | cut -c1-16)…"
