"""Makes the FLAC streams test_flac.c decodes (committed; run by hand: needs numpy and the
`flac` tool, 1.4.2 made the committed files) and prints the C table of what libFLAC decodes
them to: frame count, channels, bits and the FNV-1a 64 hash of the samples as int32 left-aligned
to 32 bits, interleaved, little-endian (the form nrv_flac_read gives). The hashes come from
`flac -d` of the written files, so the test compares nerve's decoder with libFLAC's.

    python tests/native/data/make_flac_data.py
"""

import subprocess
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "python"))
from test_flac import flac_encode, signal  # noqa: E402  (the Python tests' signal and encoder)


def fnv1a64(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def libflac_ints(path: Path, channels: int, bits: int) -> np.ndarray:
    width = 4 if bits > 24 else (bits + 7) // 8
    raw = subprocess.run(["flac", "-s", "-d", "-c", "--force-raw-format", "--endian=little", "--sign=signed",
                          str(path)], capture_output=True, check=True).stdout
    if width == 3:
        b = np.frombuffer(raw, np.uint8).reshape(-1, 3).astype(np.int32)
        v = b[:, 0] | b[:, 1] << 8 | b[:, 2] << 16
        v = np.where(v & 0x800000, v - (1 << 24), v)
    else:
        v = np.frombuffer(raw, {1: "i1", 2: "<i2", 4: "<i4"}[width]).astype(np.int64)
    return v.reshape(-1, channels)


def main() -> None:
    mixed = np.concatenate([signal(1500, 1, 24, seed=11) // 16 * 16,      # wasted bits
                            signal(700, 1, 24, seed=12, kind="step"),      # constant subframes
                            signal(800, 1, 24, seed=13, kind="noise")])    # verbatim / escaped residuals
    cases = [("stereo16_lpc.flac", signal(4410, 2, 16, seed=10), 44100, 16, ["-8"]),
             ("mono24_mixed.flac", mixed, 48000, 24, ["--lax", "-b", "192", "-l", "32", "-r", "0,15", "-e"])]
    for name, v, rate, bits, opts in cases:
        path = HERE / name
        path.write_bytes(flac_encode(v, rate, bits, *opts))
        ints = libflac_ints(path, v.shape[1], bits)
        assert np.array_equal(ints, v), name
        left = (ints << (32 - bits)).astype("<i4").tobytes()
        print(f'    {{"{name}", {rate}, {v.shape[1]}, {bits}, {len(v)}, 0x{fnv1a64(left):016X}ull}},'
              f'  /* {path.stat().st_size} bytes */')


if __name__ == "__main__":
    main()
