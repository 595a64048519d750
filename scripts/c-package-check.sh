#!/usr/bin/env bash
# c-package-check.sh HOST_BUILD ARM_BUILD [WORK_DIR] — the C package, host against aarch64.
#
# HOST_BUILD and ARM_BUILD are configured CMake build dirs of this repository with libnerve
# already built (make test-aarch64 builds and passes build/host and build/aarch64); nothing
# is rebuilt here. This script:
#   1. installs each into WORK_DIR/<arch>/prefix (cmake --install) and checks the layout:
#      libnerve.so -> .so.MAJOR -> .so.VERSION, nerve.h, nerveConfig*.cmake, nerve.pc (version),
#      and that the aarch64 library really is an aarch64 ELF;
#   2. builds examples/c against each with find_package(nerve) (cross: the toolchain file and
#      nerve_DIR), and for aarch64 also with the pkg-config flags and the cross gcc;
#   3. on the host (.venv's Python, nerve from the source tree on the host library): compiles
#      the silero VAD plan twice — state carried by the session and sr fixed, as nerve.asr.vad
#      does; and plain, state and sr fed — and writes two 16 kHz s16 WAVs (an example recording
#      and the two-command one resampled); plans and WAVs are portable, so both sides read
#      the same files;
#   4. runs the example on each plan x WAV natively and under qemu-aarch64-static (default CPU,
#      and the ARMv8.0 cortex-a53 for one pair) and compares the outputs: the same frame count,
#      probabilities within 2e-5 (x86 AVX and aarch64 NEON kernels round differently; each
#      side is held within 1e-5 of onnxruntime by test_silero_vad.py; measured ~2e-6),
#      identical segments and an identical command frame.
# Tools: cmake + ninja (.venv, or CMAKE/NINJA), python (PY, default .venv/bin/python) with
# numpy and the silero-vad wheel, gcc-aarch64-linux-gnu, qemu-user-static.
set -euo pipefail

if [ $# -lt 2 ] || [ $# -gt 3 ]; then
  echo "usage: $0 HOST_BUILD ARM_BUILD [WORK_DIR (default build/c-package)]" >&2
  exit 2
fi
cd "$(dirname "$0")/.."
root=$PWD
abs() { case $1 in /*) echo "$1" ;; *) echo "$root/$1" ;; esac; }
host_build=$(abs "$1")
arm_build=$(abs "$2")
work=$(abs "${3:-build/c-package}")
start=$(date +%s)
say() { echo "c-package: $*"; }
die() { echo "c-package: error: $*" >&2; exit 1; }

# ---- tools
cmake_bin=${CMAKE:-}
[ -n "$cmake_bin" ] || { [ -x .venv/bin/cmake ] && cmake_bin=.venv/bin/cmake; } || cmake_bin=$(command -v cmake || true)
ninja_bin=${NINJA:-}
[ -n "$ninja_bin" ] || { [ -x .venv/bin/ninja ] && ninja_bin=.venv/bin/ninja; } || ninja_bin=$(command -v ninja || true)
py=${PY:-.venv/bin/python}
[ -n "$cmake_bin" ] || die "cmake not found (make venv installs it into .venv)"
[ -n "$ninja_bin" ] || die "ninja not found (make venv installs it into .venv)"
cmake_bin=$(abs "$cmake_bin")
ninja_bin=$(abs "$ninja_bin")
command -v "$py" >/dev/null || die "python not found at $py (make venv; or set PY)"
command -v aarch64-linux-gnu-gcc >/dev/null || die "aarch64-linux-gnu-gcc not found (apt-get install gcc-aarch64-linux-gnu)"
command -v qemu-aarch64-static >/dev/null || die "qemu-aarch64-static not found (apt-get install qemu-user-static)"
for b in "$host_build" "$arm_build"; do
  [ -f "$b/CMakeCache.txt" ] || die "$b is not a configured build dir (configure and build libnerve there first)"
done
version=$(tr -d ' \n' < VERSION)
major=${version%%.*}
qemu=(qemu-aarch64-static -L /usr/aarch64-linux-gnu)

# ---- 1. install, check the layout
rm -rf "$work"
declare -A prefix libdir
for arch in host aarch64; do
  if [ $arch = host ]; then b=$host_build; else b=$arm_build; fi
  prefix[$arch]=$work/$arch/prefix
  "$cmake_bin" --install "$b" --prefix "${prefix[$arch]}" >/dev/null
  libdir[$arch]=${prefix[$arch]}/$(sed -n 's/^CMAKE_INSTALL_LIBDIR:[A-Z]*=//p' "$b/CMakeCache.txt")
  l=${libdir[$arch]}
  [ "$(readlink "$l/libnerve.so")" = "libnerve.so.$major" ] || die "$arch: $l/libnerve.so is not a link to libnerve.so.$major"
  [ "$(readlink "$l/libnerve.so.$major")" = "libnerve.so.$version" ] || die "$arch: libnerve.so.$major is not a link to libnerve.so.$version"
  [ -f "$l/libnerve.so.$version" ] || die "$arch: $l/libnerve.so.$version missing"
  cmp -s native/include/nerve.h "${prefix[$arch]}/include/nerve.h" || die "$arch: installed nerve.h differs from native/include/nerve.h"
  for f in cmake/nerve/nerveConfig.cmake cmake/nerve/nerveConfigVersion.cmake cmake/nerve/nerveTargets.cmake pkgconfig/nerve.pc; do
    [ -f "$l/$f" ] || die "$arch: $l/$f missing"
  done
  grep -qx "Version: $version" "$l/pkgconfig/nerve.pc" || die "$arch: nerve.pc does not say Version: $version"
done
# ELF e_machine (2 bytes at offset 18): 183 is EM_AARCH64
machine=$(od -An -t u2 -j 18 -N 2 "${libdir[aarch64]}/libnerve.so.$version" | tr -d ' ')
[ "$machine" = 183 ] || die "the aarch64 build's libnerve is ELF machine $machine, not 183 (aarch64)"
say "installed $version for host and aarch64 under $work"

# ---- 2. build examples/c against each package
gen=(-G Ninja "-DCMAKE_MAKE_PROGRAM=$ninja_bin" -DCMAKE_C_FLAGS=-Werror)
"$cmake_bin" -S examples/c -B "$work/host/example" "${gen[@]}" "-DCMAKE_PREFIX_PATH=${prefix[host]}" >/dev/null
"$cmake_bin" --build "$work/host/example" >/dev/null
# the toolchain file roots package searches in the sysroot: name the package's directory itself
"$cmake_bin" -S examples/c -B "$work/aarch64/example" "${gen[@]}" \
  "-DCMAKE_TOOLCHAIN_FILE=$root/cmake/aarch64-linux-gnu.cmake" "-Dnerve_DIR=${libdir[aarch64]}/cmake/nerve" >/dev/null
"$cmake_bin" --build "$work/aarch64/example" >/dev/null
# the pkg-config line of examples/c/README.md with the cross compiler (pkg-config, else the file read here)
pc_dir=${libdir[aarch64]}/pkgconfig
if command -v pkg-config >/dev/null; then
  pc_flags=$(PKG_CONFIG_PATH=$pc_dir pkg-config --cflags --libs nerve)
else
  pc_flags=$("$py" - "$pc_dir/nerve.pc" <<'EOF'
import re, sys
from pathlib import Path
pc = Path(sys.argv[1]); v = {"pcfiledir": str(pc.parent)}; f = {}
for line in pc.read_text().splitlines():
    line = re.sub(r"\$\{(\w+)\}", lambda m: v[m.group(1)], line.strip())
    if re.match(r"^\w+=", line): k, val = line.split("=", 1); v[k] = val
    elif ":" in line and not line.startswith("#"): k, val = line.split(":", 1); f[k] = val.strip()
print(f["Cflags"], f["Libs"])
EOF
)
fi
# shellcheck disable=SC2086  # the flags are words
aarch64-linux-gnu-gcc -std=c11 -O2 -Wall -Wextra -Wshadow -Wstrict-prototypes -Werror examples/c/vad_robot.c \
  $pc_flags -o "$work/aarch64/vad_robot_pc"
say "examples/c built: find_package (host, aarch64), pkg-config + aarch64-linux-gnu-gcc"

# ---- 3. plans and WAVs, made on the host
data=$work/data
mkdir -p "$data"
PYTHONPATH=$root/sdk NERVE_LIBRARY=${libdir[host]}/libnerve.so NERVE_HEADER=${prefix[host]}/include/nerve.h \
NERVE_PLAN_CACHE=0 "$py" - "$data" <<'EOF'
import sys, wave
from pathlib import Path
import numpy as np
import nerve
from nerve.asr.vad import CONTEXT, FRAME, silero_vad_path

out = Path(sys.argv[1])
dims = {"batch": 1, "sequence": CONTEXT + FRAME}
model = silero_vad_path()
nerve.compile(model, dims=dims, state={"stateN": "state"},
              constants={"sr": np.array(16000, np.int64)}).save(out / "vad_bound.nrv")
nerve.compile(model, dims=dims).save(out / "vad_plain.nrv")
x = nerve.audio.load_audio("examples/audio/two_commands_11k025_s16.wav", target_rate=16000)
with wave.open(str(out / "two_commands_16k_s16.wav"), "wb") as w:
    w.setnchannels(1); w.setsampwidth(2); w.setframerate(16000)
    w.writeframes(np.clip(np.round(x * 32767), -32768, 32767).astype("<i2").tobytes())
EOF
cp examples/audio/turn_left_ninety_degrees_16k_s16.wav "$data/"
say "plans and WAVs written to $data"

# ---- 4. run both sides, compare
compare() {  # compare NAME HOST_OUT ARM_OUT
  "$py" - "$@" <<'EOF'
import sys
import numpy as np
name, a_path, b_path = sys.argv[1:]
def parse(path):
    probs, rest = [], []
    for line in open(path):
        f = line.split()
        if f and f[0] == "prob":
            probs.append(float(f[3]))
        elif f and f[0] in ("segment", "frame"):
            rest.append(line.rstrip("\n"))
    return np.array(probs), rest
(pa, ra), (pb, rb) = parse(a_path), parse(b_path)
if len(pa) == 0 or len(pa) != len(pb):
    sys.exit(f"c-package: error: {name}: {len(pa)} probabilities on the host, {len(pb)} on aarch64")
worst = float(np.max(np.abs(pa - pb)))
if worst > 2e-5:
    sys.exit(f"c-package: error: {name}: max |p_host - p_aarch64| = {worst:.3g} > 2e-5")
if ra != rb:
    sys.exit(f"c-package: error: {name}: segments or frame differ\n  host:    {ra}\n  aarch64: {rb}")
segs = sum(1 for r in ra if r.startswith("segment"))
print(f"c-package: {name}: {len(pa)} frames, max |p_host - p_aarch64| = {worst:.2g}, "
      f"{segs} segment(s) and the frame identical")
EOF
}
for wav in turn_left_ninety_degrees_16k_s16 two_commands_16k_s16; do
  for plan in bound plain; do
    name="$wav x vad_$plan"
    out=$work/out.$wav.$plan
    "$work/host/example/vad_robot" --probs "$data/vad_$plan.nrv" "$data/$wav.wav" > "$out.host" 2> "$out.host.err" \
      || die "$name: the host program failed: $(cat "$out.host.err")"
    "${qemu[@]}" "$work/aarch64/example/vad_robot" --probs "$data/vad_$plan.nrv" "$data/$wav.wav" > "$out.aarch64" \
      2> "$out.aarch64.err" || die "$name: the aarch64 program failed under qemu: $(cat "$out.aarch64.err")"
    compare "$name" "$out.host" "$out.aarch64"
  done
done
# the pkg-config build, and an ARMv8.0 core (no dotprod/fp16/i8mm): the same answers
out=$work/out.two_commands_16k_s16.bound
LD_LIBRARY_PATH=${libdir[aarch64]} "${qemu[@]}" -cpu cortex-a53 "$work/aarch64/vad_robot_pc" --probs \
  "$data/vad_bound.nrv" "$data/two_commands_16k_s16.wav" > "$out.a53" 2> "$out.a53.err" \
  || die "the pkg-config aarch64 program failed under qemu -cpu cortex-a53: $(cat "$out.a53.err")"
compare "two_commands_16k_s16 x vad_bound (pkg-config build, cortex-a53)" "$out.host" "$out.a53"
say "passed in $(( $(date +%s) - start )) s"
