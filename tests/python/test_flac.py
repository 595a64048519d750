"""libnerve's FLAC decoder (nrv_flac_*, nerve.audio.read_flac / iter_flac / read_audio) against
two independent implementations: libFLAC through the `flac` command-line tool (every encoder
setting that changes the stream's structure: predictor orders, block sizes, stereo codings,
Rice parameters, bit depths 4-32, up to 8 channels) and libsndfile through the soundfile
wheel. Samples are compared as integers, exactly; then corrupted and truncated streams must
raise InputError, never return wrong samples or crash."""

from __future__ import annotations

import io
import shutil
import struct
import subprocess
import wave

import numpy as np
import pytest

import nerve
from nerve import audio
from nerve._native import ffi, lib

FLAC_CLI = shutil.which("flac")
needs_flac_cli = pytest.mark.skipif(FLAC_CLI is None, reason="the `flac` tool (apt install flac) is the reference "
                                    "encoder for these cases; .ci/run installs it")


def decode_ints(data: bytes, chunk: int = 1000):
    """(int32 samples [frames, channels] as nrv_flac_read gives them, info) through the C API,
    read in chunks of `chunk` frames."""
    buf = ffi.from_buffer("uint8_t[]", data)
    out = ffi.new("nrv_flac_t **")
    assert lib.nrv_flac_open(buf, len(data), out) == 0, nerve._native.last_error()
    dec = ffi.gc(out[0], lib.nrv_flac_free)
    info = ffi.new("nrv_flac_info *")
    assert lib.nrv_flac_info_get(dec, info) == 0
    parts = []
    got = ffi.new("size_t *")
    while True:
        block = np.empty((chunk, info.channels), np.int32)
        status = lib.nrv_flac_read(dec, ffi.from_buffer("int32_t[]", block), chunk, got)
        assert status == 0, nerve._native.last_error()
        if got[0] == 0:
            break
        parts.append(block[: got[0]])
    return np.concatenate(parts), info


def signal(frames: int, channels: int, bits: int, seed: int, kind: str = "music") -> np.ndarray:
    """int64 samples [frames, channels] of a `bits`-bit signal: tones plus noise (what LPC
    predicts well), white full-scale noise (verbatim subframes), or silence with a step
    (constant subframes)."""
    rng = np.random.default_rng(seed)
    top = 2 ** (bits - 1)
    t = np.arange(frames)[:, None]
    if kind == "music":
        f = rng.uniform(0.001, 0.05, channels)
        x = 0.45 * np.sin(2 * np.pi * f * t) + 0.2 * np.sin(2 * np.pi * 3.1 * f * t + 1) \
            + 0.02 * rng.standard_normal((frames, channels))
        v = np.round(x * top)
    elif kind == "noise":
        v = rng.integers(-top, top, (frames, channels))
    else:
        v = np.zeros((frames, channels))
        v[frames // 2:] = top // 3
    return np.clip(v, -top, top - 1).astype(np.int64)


def wav_bytes(v: np.ndarray, rate: int, width: int) -> bytes:
    """A PCM WAV of int samples v [frames, channels] at `width` bytes per sample."""
    b = io.BytesIO()
    with wave.open(b, "wb") as w:
        w.setnchannels(v.shape[1])
        w.setsampwidth(width)
        w.setframerate(rate)
        if width == 1:
            raw = (v + 128).astype(np.uint8).tobytes()
        elif width == 3:
            u = (v.astype(np.int64) & 0xFFFFFF).astype(np.uint32).reshape(-1)
            raw = np.stack([u & 0xFF, (u >> 8) & 0xFF, u >> 16], 1).astype(np.uint8).tobytes()
        else:
            raw = v.astype({2: "<i2", 4: "<i4"}[width]).tobytes()
        w.writeframes(raw)
    return b.getvalue()


def wav_extensible(v: np.ndarray, rate: int, bits: int) -> bytes:
    """WAVE_FORMAT_EXTENSIBLE with `bits` valid bits in a container of whole bytes, samples
    left-justified in it (how the flac tool takes 4-, 12- or 20-bit audio)."""
    width = (bits + 7) // 8
    u = (v.astype(np.int64) << (8 * width - bits)).reshape(-1) + (128 if width == 1 else 0)  # 8-bit WAV is unsigned
    raw = np.stack([(u >> (8 * i)) & 0xFF for i in range(width)], 1).astype(np.uint8).tobytes()
    ch = v.shape[1]
    fmt = struct.pack("<HHIIHHHHI", 0xFFFE, ch, rate, rate * ch * width, ch * width, 8 * width, 22, bits,
                      (1 << ch) - 1) + struct.pack("<H", 1) + bytes.fromhex("000000001000800000aa00389b71")
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(raw)) + raw
    return b"RIFF" + struct.pack("<I", len(body)) + body


def flac_encode(v: np.ndarray, rate: int, bits: int, *options: str) -> bytes:
    """v [frames, channels] of `bits`-bit samples encoded by the flac tool."""
    plain = bits in (8, 16, 24) and v.shape[1] <= 2
    wav = wav_bytes(v, rate, bits // 8) if plain else wav_extensible(v, rate, bits)
    layout = ["--channel-map=none"] if v.shape[1] > 2 else []
    return subprocess.run([FLAC_CLI, "-s", "-f", *layout, *options, "-c", "-"], input=wav, capture_output=True,
                          check=True).stdout


def expect_ints(v: np.ndarray, bits: int) -> np.ndarray:
    return (v << (32 - bits)).astype(np.int32)


# ---------------------------------------------------------------- against libFLAC

CLI_CASES = [
    # (bits, channels, frames, kind, options)
    (16, 1, 1, "music", ["-5"]),
    (16, 1, 4097, "music", ["-0"]),
    (16, 2, 48001, "music", ["-5"]),
    (16, 2, 30000, "music", ["-8", "-e", "-p"]),
    (16, 2, 20000, "music", ["-8", "--lax", "-l", "32", "-r", "0,15"]),
    (16, 2, 9001, "music", ["--lax", "-b", "192", "-l", "12"]),
    (16, 2, 70001, "music", ["--lax", "-b", "16384"]),
    (16, 2, 12345, "music", ["-b", "1000"]),           # a block size given in the header's 16-bit field
    (16, 2, 12000, "music", ["--no-mid-side", "-3"]),
    (16, 2, 12000, "music", ["-M", "-6"]),              # adaptive mid-side
    (16, 2, 8000, "noise", ["-5"]),                     # verbatim subframes
    (16, 2, 8000, "step", ["-5"]),                      # constant subframes
    (8, 1, 5000, "music", ["-8"]),
    (12, 1, 5000, "music", ["-5"]),
    (20, 2, 5000, "music", ["-5"]),
    (24, 2, 15000, "music", ["-8", "-e"]),
    (24, 6, 6000, "music", ["-5"]),
    (16, 8, 3000, "music", ["-5"]),
    (32, 2, 6000, "music", ["-5"]),                     # side channel of 33 bits
    (32, 1, 3000, "noise", ["-8"]),
    (4, 1, 3000, "music", ["-5", "--lax"]),   # below the subset's 8 bits
]


@needs_flac_cli
@pytest.mark.parametrize("bits,channels,frames,kind,options", CLI_CASES,
                         ids=[f"{c[0]}b-{c[1]}ch-{c[2]}-{c[3]}-{''.join(c[4])}" for c in CLI_CASES])
def test_decodes_libflac_streams_exactly(bits, channels, frames, kind, options):
    rate = [44100, 16000, 48000, 11025][frames % 4]
    v = signal(frames, channels, bits, seed=frames + bits, kind=kind)
    data = flac_encode(v, rate, bits, *options)
    got, info = decode_ints(data, chunk=[1, 1000, 4096][frames % 3])
    assert (info.sample_rate, info.channels, info.bits_per_sample, info.total_frames) == (rate, channels, bits, frames)
    np.testing.assert_array_equal(got, expect_ints(v, bits))
    # and as float mono: the mean of the channels at full scale 2^(bits-1)
    x, r = audio.read_flac(data)
    assert r == rate and x.dtype == np.float32
    np.testing.assert_array_equal(x, (v.sum(1) / channels / 2.0 ** (bits - 1)).astype(np.float32))


@needs_flac_cli
def test_wasted_bits():
    v = signal(10000, 2, 24, seed=1) // 256 * 256   # the low 8 bits are zero: "wasted" bits
    got, _ = decode_ints(flac_encode(v, 48000, 24, "-5"))
    np.testing.assert_array_equal(got, expect_ints(v, 24))


# ---------------------------------------------------------------- against libsndfile

@pytest.mark.parametrize("subtype,bits", [("PCM_S8", 8), ("PCM_16", 16), ("PCM_24", 24)])
@pytest.mark.parametrize("channels", [1, 2, 3])
def test_matches_soundfile(subtype, bits, channels):
    sf = pytest.importorskip("soundfile")
    v = signal(7919, channels, bits, seed=channels * bits)
    b = io.BytesIO()
    sf.write(b, v.astype(np.int32) << (32 - bits), 22050, format="FLAC", subtype=subtype)
    data = b.getvalue()
    ref, rate = sf.read(io.BytesIO(data), dtype="int32", always_2d=True)
    got, info = decode_ints(data)
    assert rate == info.sample_rate == 22050
    np.testing.assert_array_equal(got, ref)
    np.testing.assert_array_equal(got, expect_ints(v, bits))


# ---------------------------------------------------------------- the audio API around it

@pytest.fixture(scope="module")
def stereo_flac():
    sf = pytest.importorskip("soundfile")
    v = signal(44100 * 3 + 17, 2, 16, seed=7)
    b = io.BytesIO()
    sf.write(b, v.astype(np.int16), 44100, format="FLAC", subtype="PCM_16")
    return v, b.getvalue()


def test_iter_flac_blocks_equal_read(stereo_flac, tmp_path):
    v, data = stereo_flac
    path = tmp_path / "x.flac"
    path.write_bytes(data)
    whole, rate = audio.read_flac(path)
    r2, blocks = audio.iter_flac(str(path), block_frames=1234)
    parts = list(blocks)
    assert rate == r2 == 44100 and all(len(p) <= 1234 for p in parts)
    np.testing.assert_array_equal(np.concatenate(parts), whole)
    with open(path, "rb") as f:
        np.testing.assert_array_equal(audio.read_flac(f)[0], whole)


def test_read_audio_tells_wav_from_flac(stereo_flac, tmp_path):
    v, data = stereo_flac
    wav = wav_bytes(v, 44100, 2)
    (tmp_path / "a.wav").write_bytes(wav)
    (tmp_path / "a.flac").write_bytes(data)
    from_wav, r1 = audio.read_audio(tmp_path / "a.wav")
    from_flac, r2 = audio.read_audio(tmp_path / "a.flac")
    assert r1 == r2 == 44100
    np.testing.assert_array_equal(from_flac, from_wav)
    # and resampled to 16 kHz by load_audio, file or bytes
    np.testing.assert_array_equal(audio.load_audio(tmp_path / "a.flac"), audio.load_audio(wav))
    # an ID3v2 tag before the stream (as some taggers write) is skipped
    id3 = b"ID3\x04\x00\x00" + bytes([0, 0, 0, 20]) + bytes(20)
    np.testing.assert_array_equal(audio.read_audio(id3 + data)[0], from_flac)
    with pytest.raises(nerve.InputError, match="neither WAV .* nor FLAC"):
        audio.read_audio(b"OggS" + bytes(100))


def test_iter_audio_feeds_the_recognizer_path(stereo_flac):
    v, data = stereo_flac
    rate, blocks = audio.iter_audio(data, block_frames=5000)
    assert rate == 44100
    np.testing.assert_array_equal(np.concatenate(list(blocks)), audio.read_flac(data)[0])


# ---------------------------------------------------------------- bad input

def test_truncated_streams_are_refused(stereo_flac):
    _, data = stereo_flac
    rng = np.random.default_rng(0)
    cuts = sorted(set(rng.integers(0, len(data), 120).tolist()) | {0, 3, 4, 8, 41, 42, len(data) - 1})
    for cut in cuts:
        with pytest.raises(nerve.InputError) as err:
            audio.read_flac(data[:cut])
        msg = str(err.value)
        assert "read_flac" in msg and ("flac" in msg.lower()), msg


def test_every_corrupted_byte_is_refused_or_harmless(stereo_flac):
    """A flipped byte inside a frame breaks its CRC; in the metadata it is refused or changes
    nothing decoded (MD5, padding, tags). Never different samples without an error."""
    _, data = stereo_flac
    good, rate = audio.read_flac(data)
    rng = np.random.default_rng(1)
    positions = sorted(set(rng.integers(0, len(data), 300).tolist()) | set(range(0, 64)))
    refused = 0
    for pos in positions:
        bad = bytearray(data)
        bad[pos] ^= 1 << int(rng.integers(0, 8))
        try:
            got, r = audio.read_flac(bytes(bad))
        except nerve.InputError as exc:
            assert "flac" in str(exc).lower()
            refused += 1
            continue
        assert r == rate and got.shape == good.shape and np.array_equal(got, good), f"byte {pos}: silent change"
    assert refused >= len(positions) * 0.8


def test_crc_mismatch_names_the_frame(stereo_flac):
    _, data = stereo_flac
    bad = bytearray(data)
    bad[len(data) // 2] ^= 0x10
    with pytest.raises(nerve.InputError, match=r"frame at byte \d+ \(sample \d+\).*CRC"):
        audio.read_flac(bytes(bad))
    # the blocks before the bad frame come out; the error comes when its block is read
    _, blocks = audio.iter_flac(bytes(bad), block_frames=4096)
    got = []
    with pytest.raises(nerve.InputError, match="CRC"):
        for b in blocks:
            got.append(b)
    assert got, "the frames before the corruption were not delivered"


def test_not_flac_and_unreadable(tmp_path):
    with pytest.raises(nerve.InputError, match="not a FLAC stream"):
        audio.read_flac(b"RIFF" + bytes(60))
    with pytest.raises(nerve.InputError, match="not a FLAC stream"):
        audio.read_flac(b"")
    with pytest.raises(nerve.ModelError):
        audio.read_flac(tmp_path / "missing.flac")
    with pytest.raises(nerve.InputError, match="block_frames"):
        audio.iter_flac(b"fLaC", block_frames=0)


def test_c_api_arguments():
    out = ffi.new("nrv_flac_t **")
    assert lib.nrv_flac_open(ffi.NULL, 10, out) == lib.NRV_ERR_INVALID_ARG
    assert lib.nrv_flac_open(ffi.NULL, 0, ffi.NULL) == lib.NRV_ERR_INVALID_ARG
    got = ffi.new("size_t *")
    assert lib.nrv_flac_read(ffi.NULL, ffi.NULL, 0, got) == lib.NRV_ERR_INVALID_ARG
    lib.nrv_flac_free(ffi.NULL)
