"""The C API as an installed package (issue 8): `cmake --install` of a fresh libnerve build
(library with its SONAME links, nerve.h, CMake package, pkg-config file), examples/c built
against it with find_package and with pkg-config + plain cc, and the example's VAD run on a
WAV checked against the Python SDK on the same plan: the same probabilities, the segments of
nerve.asr.vad.Segmenter on them, and a command frame that nerve.serial decodes.

The package is configured, built and installed once per session (a module fixture), in a
temporary directory: one libnerve build, 1-2 minutes on two cores. The aarch64 twin of these
checks (cross-built, run under qemu) is scripts/c-package-check.sh, run by `make test-aarch64`.
"""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import wave
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import nerve
import nerve.serial
from helpers import REPO
from nerve.asr.vad import CONTEXT, FRAME, SAMPLE_RATE, Segmenter, VoiceActivity, silero_vad_path

VERSION = (REPO / "VERSION").read_text().strip()
MAJOR = VERSION.split(".")[0]
EXAMPLE = REPO / "examples" / "c"
STOP = {"action": "stop"}


# ---------------------------------------------------------------------------------- helpers

def _tool(name: str, install: str) -> str:
    """A build tool: the venv's (next to this Python, or the repository's .venv), else PATH."""
    for cand in (Path(sys.executable).parent / name, REPO / ".venv" / "bin" / name):
        if cand.is_file() and os.access(cand, os.X_OK):
            return str(cand)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is needed to build the C package ({install})")
    return found


def _run(cmd, timeout: float = 300, env=None, check: bool = True, **kw) -> subprocess.CompletedProcess:
    res = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout,
                         env=env, check=False, **kw)
    if check and res.returncode != 0:
        pytest.fail(f"`{shlex.join(str(c) for c in cmd)}` exited {res.returncode}\n"
                    f"--- stdout\n{res.stdout[-4000:]}\n--- stderr\n{res.stderr[-4000:]}")
    return res


def _pc_fields(pc: Path) -> dict:
    """The fields of a .pc file (Version, Libs, Cflags, ...) with variables expanded, the way
    pkg-config reads it (pcfiledir = the file's directory)."""
    variables = {"pcfiledir": str(pc.parent)}
    fields = {}

    def expand(text: str) -> str:
        return re.sub(r"\$\{(\w+)\}", lambda m: variables[m.group(1)], text)

    for line in pc.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        var = re.match(r"^([A-Za-z_][\w.]*)\s*=(.*)$", line)
        if var:
            variables[var.group(1)] = expand(var.group(2).strip())
        elif ":" in line:
            key, value = line.split(":", 1)
            fields[key.strip()] = expand(value.strip())
    return fields


def _dynamic(elf: Path) -> str:
    readelf = shutil.which("readelf")
    if readelf is None:
        pytest.fail("readelf is needed to inspect the installed library (apt-get install binutils)")
    return _run([readelf, "-d", elf]).stdout


def _cmake_example(pkg, build: Path, *args: str) -> Path:
    """Configures and builds examples/c in `build` with find_package; returns the program."""
    _run([pkg.cmake, "-S", EXAMPLE, "-B", build, "-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={pkg.ninja}",
          "-DCMAKE_C_FLAGS=-Werror", *args])
    _run([pkg.cmake, "--build", build])
    exe = build / "vad_robot"
    assert exe.is_file()
    return exe


def _vad_run(exe: Path, plan: Path, wav, env=None, stdin: bytes | None = None) -> SimpleNamespace:
    """Runs the example with --probs and parses its output."""
    feed = {"input": stdin} if stdin is not None else {"stdin": subprocess.DEVNULL}
    res = subprocess.run([str(exe), "--probs", str(plan), str(wav)], capture_output=True, timeout=120, env=env,
                         check=False, **feed)
    out, err = res.stdout.decode(), res.stderr.decode()
    assert res.returncode == 0, f"vad_robot exited {res.returncode}\n{out[-2000:]}\n{err[-2000:]}"
    probs, segments, frames, version = [], [], [], None
    for line in out.splitlines():
        f = line.split()
        if line.startswith("# nerve "):
            version = f[2].rstrip(",")
        elif f and f[0] == "prob":
            assert int(f[1]) == len(probs) and f[2] == f"{len(probs) * FRAME / SAMPLE_RATE:.3f}", line
            probs.append(np.float32(f[3]))  # %.9g: a float32 round-trips exactly
        elif f and f[0] == "segment":
            start, end = int(f[3]), int(f[4])
            assert f[1:3] == [f"{start / SAMPLE_RATE:.3f}", f"{end / SAMPLE_RATE:.3f}"], line
            segments.append((start, end))
        elif f and f[0] == "frame":
            frames.append(bytes.fromhex(f[1]))
    return SimpleNamespace(probs=np.array(probs, np.float32), segments=segments, frames=frames, version=version,
                           stdout=out, stderr=err)


def _write_wav(path: Path, pcm: np.ndarray, rate: int = SAMPLE_RATE, channels: int = 1, width: int = 2) -> Path:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(width)
        w.setframerate(rate)
        w.writeframes(np.ascontiguousarray(pcm).tobytes())
    return path


def _read_pcm(path: Path) -> np.ndarray:
    with wave.open(str(path)) as w:
        assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (SAMPLE_RATE, 1, 2)
        return np.frombuffer(w.readframes(w.getnframes()), np.int16)


def _say(text: str) -> np.ndarray:
    if shutil.which("espeak-ng") is None:
        pytest.fail("espeak-ng is needed to synthesise the test speech (apt-get install espeak-ng; CI installs it)")
    raw = subprocess.run(["espeak-ng", "-v", "en-us", "-s", "150", "--stdout", text], check=True,
                         capture_output=True, timeout=60).stdout
    return nerve.audio.load_audio(raw, target_rate=SAMPLE_RATE)


# ---------------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def pkg(tmp_path_factory):
    """libnerve configured, built and installed from this source tree into a fresh prefix."""
    root = tmp_path_factory.mktemp("c_package")
    cmake = _tool("cmake", "make venv installs it: pip install cmake")
    ninja = _tool("ninja", "make venv installs it: pip install ninja")
    build, prefix = root / "build", root / "prefix"
    _run([cmake, "-S", REPO, "-B", build, "-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}",
          "-DCMAKE_BUILD_TYPE=Release", "-DNERVE_CUDA=OFF"])
    _run([cmake, "--build", build, "--target", "nerve", "-j", str(os.cpu_count() or 2)], timeout=1800)
    _run([cmake, "--install", build, "--prefix", prefix])
    cache = (build / "CMakeCache.txt").read_text()
    libdir = re.search(r"^CMAKE_INSTALL_LIBDIR:\w+=(.*)$", cache, re.MULTILINE).group(1)
    return SimpleNamespace(root=root, build=build, prefix=prefix, lib=prefix / libdir, cmake=cmake, ninja=ninja)


@pytest.fixture(scope="module")
def example(pkg):
    """examples/c built with find_package(nerve) against the installed prefix."""
    return _cmake_example(pkg, pkg.root / "example", f"-DCMAKE_PREFIX_PATH={pkg.prefix}")


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    """The silero VAD compiled two ways: as nerve.asr.vad makes it (state carried by the
    session, sr fixed at 16 kHz) and plain (state and sr fed on every run)."""
    model = silero_vad_path()
    out = tmp_path_factory.mktemp("vad_plans")
    dims = {"batch": 1, "sequence": CONTEXT + FRAME}
    bound = nerve.compile(model, dims=dims, state={"stateN": "state"},
                          constants={"sr": np.array(SAMPLE_RATE, np.int64)})
    plain = nerve.compile(model, dims=dims)
    return {"bound": bound.save(out / "vad_bound.nrv"), "plain": plain.save(out / "vad_plain.nrv")}


@pytest.fixture(scope="module")
def speech_wav(tmp_path_factory):
    """~12 s at 16 kHz, s16 mono: three synthesized commands apart by >= 1 s of near silence."""
    rng = np.random.default_rng(8)
    parts = [np.zeros(int(0.6 * SAMPLE_RATE), np.float32)]
    for text, gap in [("Turn left ninety degrees.", 1.3), ("Robot, stop. Open the gripper.", 1.1),
                      ("Go forward two meters and then lights on.", 0.9)]:
        parts += [_say(text) * 0.8, np.zeros(int(gap * SAMPLE_RATE), np.float32)]
    x = np.concatenate(parts)
    x += rng.normal(0, 0.002, x.shape).astype(np.float32)  # a little room noise, not digital silence
    pcm = np.clip(np.round(x * 32767), -32768, 32767).astype(np.int16)
    return _write_wav(tmp_path_factory.mktemp("speech") / "commands_16k_s16.wav", pcm)


def _python_probs(kind: str, plan: Path, pcm: np.ndarray) -> np.ndarray:
    """The Python SDK's probabilities on the same plan and feed."""
    if kind == "bound":  # the SDK's own streaming path
        return VoiceActivity(nerve.Plan.load(plan)).accept(pcm)
    sess = nerve.Session(str(plan))
    x = pcm.astype(np.float32) * np.float32(1 / 32768)
    row = np.zeros((1, CONTEXT + FRAME), np.float32)
    state = np.zeros((2, 1, 128), np.float32)
    sr = np.array(SAMPLE_RATE, np.int64)
    probs = []
    for start in range(0, len(x) - FRAME + 1, FRAME):
        row[0, CONTEXT:] = x[start:start + FRAME]
        out = sess.run({"input": row, "state": state, "sr": sr})
        probs.append(out["output"][0, 0])
        state = out["stateN"].copy()
        row[0, :CONTEXT] = row[0, FRAME:]
    return np.array(probs, np.float32)


def _python_segments(probs: np.ndarray, n_samples: int):
    """nerve.asr.vad.Segmenter's segments with its defaults; max_segment_s out of reach, since
    the example does not split long segments."""
    seg = Segmenter(max_segment_s=3600)
    events = seg.push(probs) + seg.flush(n_samples)
    assert [e.kind for e in events] == ["start", "end"] * (len(events) // 2)
    return [(events[i].sample, events[i + 1].sample) for i in range(0, len(events), 2)]


# ---------------------------------------------------------------------------------- the package

def test_installed_layout(pkg):
    lib = pkg.lib
    # libnerve.so -> libnerve.so.MAJOR -> libnerve.so.VERSION, the SONAME being the middle one
    assert os.readlink(lib / "libnerve.so") == f"libnerve.so.{MAJOR}"
    assert os.readlink(lib / f"libnerve.so.{MAJOR}") == f"libnerve.so.{VERSION}"
    real = lib / f"libnerve.so.{VERSION}"
    assert real.is_file() and not real.is_symlink()
    assert f"Library soname: [libnerve.so.{MAJOR}]" in _dynamic(real)
    assert (pkg.prefix / "include" / "nerve.h").read_bytes() == (REPO / "native" / "include" / "nerve.h").read_bytes()

    cmake_dir = lib / "cmake" / "nerve"
    for name in ("nerveConfig.cmake", "nerveConfigVersion.cmake", "nerveTargets.cmake"):
        assert (cmake_dir / name).is_file(), name
    assert "nerve::nerve" in (cmake_dir / "nerveTargets.cmake").read_text()
    assert f'set(PACKAGE_VERSION "{VERSION}")' in (cmake_dir / "nerveConfigVersion.cmake").read_text()

    pc = _pc_fields(lib / "pkgconfig" / "nerve.pc")
    assert pc["Name"] == "nerve" and pc["Version"] == VERSION
    libs, cflags = shlex.split(pc["Libs"]), shlex.split(pc["Cflags"])
    assert "-lnerve" in libs
    assert [Path(f[2:]).resolve() for f in libs if f.startswith("-L")] == [lib.resolve()]
    assert [Path(f[2:]).resolve() for f in cflags if f.startswith("-I")] == [(pkg.prefix / "include").resolve()]

    # relocatable: no text file of the package names the prefix, the build or the source tree
    for f in list(cmake_dir.iterdir()) + [lib / "pkgconfig" / "nerve.pc"]:
        text = f.read_text()
        for path in (pkg.prefix, pkg.build, REPO):
            assert str(path) not in text, f"{f.name} names {path}"


def test_find_package_build_links_the_installed_library(pkg, example):
    dyn = _dynamic(example)
    assert f"Shared library: [libnerve.so.{MAJOR}]" in dyn
    assert str(pkg.lib) in dyn  # the build RPATH CMake gives an imported library: the installed one
    res = _run([example], check=False)
    assert res.returncode == 2 and "usage: vad_robot" in res.stderr


def test_find_package_version_check(pkg, tmp_path):
    """nerveConfigVersion.cmake follows the SONAME: any 0.x satisfies 0.1, a 1.0 request fails."""
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.21)\nproject(probe LANGUAGES C)\n"
        "find_package(nerve ${WANT} REQUIRED)\n"
        "get_target_property(inc nerve::nerve INTERFACE_INCLUDE_DIRECTORIES)\n"
        'message(STATUS "nerve=${nerve_VERSION} inc=${inc}")\n')
    gen = ["-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={pkg.ninja}", f"-DCMAKE_PREFIX_PATH={pkg.prefix}"]
    ok = _run([pkg.cmake, "-S", probe, "-B", tmp_path / "ok", *gen, f"-DWANT={MAJOR}.0"])
    found = re.search(r"nerve=(\S+) inc=(\S+)", ok.stdout)
    assert found and found.group(1) == VERSION, ok.stdout
    assert Path(found.group(2)).resolve() == (pkg.prefix / "include").resolve()
    bad = _run([pkg.cmake, "-S", probe, "-B", tmp_path / "bad", *gen, f"-DWANT={int(MAJOR) + 1}.0"], check=False)
    assert bad.returncode != 0 and "nerve" in bad.stderr


def test_moved_prefix_with_find_package_and_pkg_config(pkg, tmp_path, plans):
    """The installed tree copied elsewhere still works both ways (the dist tarball relies on it),
    and the one-line pkg-config build of README.md gives the same program."""
    moved = tmp_path / "elsewhere"
    shutil.copytree(pkg.prefix, moved, symlinks=True)
    lib = moved / pkg.lib.relative_to(pkg.prefix)

    exe = _cmake_example(pkg, tmp_path / "example", f"-DCMAKE_PREFIX_PATH={moved}")
    dyn = _dynamic(exe)
    assert str(lib) in dyn and str(pkg.prefix) not in dyn

    pc_dir = lib / "pkgconfig"
    pkg_config = shutil.which("pkg-config") or shutil.which("pkgconf")
    if pkg_config:
        env = dict(os.environ, PKG_CONFIG_PATH=str(pc_dir))
        flags = shlex.split(_run([pkg_config, "--cflags", "--libs", "nerve"], env=env).stdout)
        assert _run([pkg_config, "--modversion", "nerve"], env=env).stdout.strip() == VERSION
    else:  # no pkg-config here: read the file as it would
        pc = _pc_fields(pc_dir / "nerve.pc")
        flags = shlex.split(pc["Cflags"]) + shlex.split(pc["Libs"])
    assert any(f.startswith("-I") and Path(f[2:]).resolve() == (moved / "include").resolve() for f in flags), flags
    cc = shutil.which("cc")
    if cc is None:
        pytest.fail("a C compiler `cc` is needed (apt-get install build-essential)")
    exe_pc = tmp_path / "vad_robot_pc"
    _run([cc, "-std=c11", "-O2", "-Wall", "-Wextra", "-Wshadow", "-Wstrict-prototypes", "-Werror",
          EXAMPLE / "vad_robot.c", *flags, "-o", exe_pc])
    env = dict(os.environ, LD_LIBRARY_PATH=str(lib))  # no RPATH from a plain cc line
    wav = REPO / "examples" / "audio" / "turn_left_ninety_degrees_16k_s16.wav"
    a, b = _vad_run(exe, plans["bound"], wav), _vad_run(exe_pc, plans["bound"], wav, env=env)
    assert a.stdout == b.stdout
    assert len(a.segments) == 1 and a.version == VERSION


# ---------------------------------------------------------------------------------- the program

@pytest.mark.parametrize("kind", ["bound", "plain"])
def test_vad_matches_python(example, plans, speech_wav, kind):
    pcm = _read_pcm(speech_wav)
    c = _vad_run(example, plans[kind], speech_wav)
    assert c.version == VERSION  # nrv_version() of the installed library
    assert ("carried by the session" if kind == "bound" else "fed back") in c.stdout

    ref = _python_probs(kind, plans[kind], pcm)
    assert len(c.probs) == len(ref) == len(pcm) // FRAME
    worst = float(np.max(np.abs(c.probs - ref)))
    # one source tree, one CPU, the same kernels: bit-identical in practice; 1e-6 allows a
    # build with other compiler flags
    assert worst <= 1e-6, f"max |p_C - p_Python| = {worst:.3g} ({np.sum(c.probs != ref)} of {len(ref)} differ)"
    # the material means something: speech and non-speech both present
    assert (ref > 0.5).mean() > 0.2 and (ref < 0.2).mean() > 0.2

    assert c.segments == _python_segments(c.probs, len(pcm))
    assert c.segments == _python_segments(ref, len(pcm))
    assert len(c.segments) == 3, c.segments  # one per command: the pauses exceed 600 ms
    assert all(0 <= a < b <= len(pcm) for a, b in c.segments)


def test_command_frame_decodes_in_python(example, plans, speech_wav):
    c = _vad_run(example, plans["bound"], speech_wav)
    assert len(c.frames) == 1
    wire = c.frames[0]
    payload = json.dumps(STOP, separators=(",", ":")).encode()
    assert wire == nerve.serial.encode_frame(nerve.serial.COMMAND, 1, payload, flags=1)  # flags: SYN
    items = nerve.serial.Decoder().feed(wire)
    assert len(items) == 1 and isinstance(items[0], nerve.serial.Frame), items
    frame = items[0]
    assert (frame.type, frame.seq) == (nerve.serial.COMMAND, 1)
    assert json.loads(frame.payload) == STOP


def test_streamed_wav_on_stdin(example, plans, speech_wav):
    """A WAV whose sizes are placeholders (what a recorder writes into a pipe), read from stdin,
    gives what the file gives."""
    data = bytearray(speech_wav.read_bytes())
    assert data[36:40] == b"data"  # the wave module writes a 44-byte header
    data[4:8] = (0x7FFFF000 + 36).to_bytes(4, "little")
    data[40:44] = (0x7FFFF000).to_bytes(4, "little")
    a = _vad_run(example, plans["bound"], speech_wav)
    b = _vad_run(example, plans["bound"], "-", stdin=bytes(data))
    assert a.stdout == b.stdout


def _wav_bytes(**kw) -> bytes:
    buf = io.BytesIO()
    rate, channels, width = kw.get("rate", SAMPLE_RATE), kw.get("channels", 1), kw.get("width", 2)
    with wave.open(buf, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(width)
        w.setframerate(rate)
        w.writeframes(bytes(width * channels * rate // 10))
    return buf.getvalue()


@pytest.mark.parametrize("case, expect", [
    ("8k", "8000 Hz, 16-bit: this example reads 16 kHz mono 16-bit PCM only"),
    ("stereo", "2 channel(s)"),
    ("8bit", "8-bit"),
    ("truncated", "truncated"),
    ("not_wav", "not a RIFF/WAVE file"),
    ("no_data", "no \"data\" chunk"),
    ("huge_fmt", "\"fmt \" chunk of an impossible size"),
    ("missing_plan", "nrv_session_create_from_file failed: NRV_ERR_IO: "),
    ("wav_as_plan", "nrv_session_create_from_file failed: NRV_ERR_FORMAT: "),
])
def test_errors_are_reported(example, plans, tmp_path, case, expect):
    good = _wav_bytes()
    data = {
        "8k": _wav_bytes(rate=8000),
        "stereo": _wav_bytes(channels=2),
        "8bit": _wav_bytes(width=1),
        "truncated": good[:-100],
        "not_wav": b"hello, not a wav file at all",
        "no_data": good[:36],
        "huge_fmt": good[:16] + (1 << 20).to_bytes(4, "little") + good[20:],
    }.get(case, good)
    wav = tmp_path / "in.wav"
    wav.write_bytes(data)
    plan = {"missing_plan": tmp_path / "nope.nrv", "wav_as_plan": wav}.get(case, plans["bound"])
    res = _run([example, plan, wav], check=False)
    assert res.returncode == 1, res
    assert expect in res.stderr, res.stderr
    assert "frame" not in res.stdout  # nothing is sent after a failure
    if case == "missing_plan":
        assert str(plan) in res.stderr  # nrv_last_error() names the file


def test_not_a_vad_plan_is_refused(example, tmp_path, speech_wav):
    """A valid plan of another model: refused by name, before any audio is read."""
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, tmp_path / "relu.onnx")
    plan = nerve.compile(tmp_path / "relu.onnx").save(tmp_path / "relu.nrv")
    res = _run([example, plan, speech_wav], check=False)
    assert res.returncode == 1 and "is not a silero VAD plan" in res.stderr, res.stderr
