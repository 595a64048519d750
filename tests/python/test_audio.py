"""nerve.audio: WAV reading, conversion to mono float32, the resampler, load_audio.

WAV files are written here by hand (struct) and by the ``wave`` module and checked against
numpy; broken files must raise InputError, never crash; the resampler is checked against a
float64 numpy convolution with its own (documented) filter, for slicing invariance, and on
tones.
"""

import io
import math
import struct
import wave

import numpy as np
import pytest

import nerve
from nerve import audio
from nerve.errors import InputError

GUID_TAIL = bytes.fromhex("000000001000800000aa00389b71")


# ---------------------------------------------------------------- WAV writers


def chunk(cid: bytes, body: bytes, size=None) -> bytes:
    """A RIFF chunk, padded to an even length."""
    size = len(body) if size is None else size
    return cid + struct.pack("<I", size) + body + (b"\0" if len(body) % 2 else b"")


def fmt_chunk(tag, channels, rate, bits, extensible=False, block_align=None, valid_bits=None):
    container = (bits + 7) // 8
    block_align = channels * container if block_align is None else block_align
    body = struct.pack("<HHIIHH", 0xFFFE if extensible else tag, channels, rate, (rate * block_align) & 0xFFFFFFFF,
                       block_align, bits)
    if extensible:
        body += struct.pack("<HHI", 22, valid_bits or bits, 0) + struct.pack("<H", tag) + GUID_TAIL
    return chunk(b"fmt ", body)


def wav_bytes(tag, channels, rate, bits, payload: bytes, extensible=False, before=(), after=(),
              data_size=None, magic=b"RIFF"):
    body = b"WAVE" + fmt_chunk(tag, channels, rate, bits, extensible)
    for c in before:
        body += c
    body += chunk(b"data", payload, data_size)
    for c in after:
        body += c
    return magic + struct.pack("<I", len(body)) + body


def encode(frames: np.ndarray, kind: str) -> bytes:
    """(frames, channels) float64 in [-1, 1) -> interleaved little-endian bytes, and the exact
    values a reader must return (as float64, before the mean)."""
    if kind == "u8":
        return (np.round(frames * 128) + 128).clip(0, 255).astype(np.uint8).tobytes()
    if kind == "s16":
        return np.round(frames * 32768).clip(-32768, 32767).astype("<i2").tobytes()
    if kind == "s24":
        v = np.round(frames * 2**23).clip(-2**23, 2**23 - 1).astype(np.int64).reshape(-1)
        b = (v & 0xFFFFFF).astype("<u4").view(np.uint8).reshape(-1, 4)[:, :3]
        return b.tobytes()
    if kind == "s32":
        return np.round(frames * 2**31).clip(-2**31, 2**31 - 1).astype("<i4").tobytes()
    if kind == "f32":
        return frames.astype("<f4").tobytes()
    if kind == "f64":
        return frames.astype("<f8").tobytes()
    raise ValueError(kind)


def decode(payload: bytes, kind: str, channels: int) -> np.ndarray:
    """numpy's reading of the payload: the expected mono float32."""
    if kind == "u8":
        v = (np.frombuffer(payload, np.uint8).astype(np.float64) - 128) / 128
    elif kind == "s16":
        v = np.frombuffer(payload, "<i2") / 32768.0
    elif kind == "s24":
        b = np.frombuffer(payload, np.uint8).reshape(-1, 3).astype(np.int64)
        i = b[:, 0] | b[:, 1] << 8 | b[:, 2] << 16
        v = np.where(i >= 2**23, i - 2**24, i) / 2.0**23
    elif kind == "s32":
        v = np.frombuffer(payload, "<i4") / 2.0**31
    elif kind == "f32":
        v = np.frombuffer(payload, "<f4").astype(np.float64)
    else:
        v = np.frombuffer(payload, "<f8")
    return v.reshape(-1, channels).mean(axis=1).astype(np.float32)


KINDS = {"u8": (1, 8), "s16": (1, 16), "s24": (1, 24), "s32": (1, 32), "f32": (3, 32), "f64": (3, 64)}


# ---------------------------------------------------------------- WAV formats


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("channels", [1, 2, 3, 6])
@pytest.mark.parametrize("extensible", [False, True], ids=["plain", "extensible"])
def test_read_wav_formats(rng, kind, channels, extensible):
    tag, bits = KINDS[kind]
    frames = rng.uniform(-1, 1, (257, channels))
    payload = encode(frames, kind)
    data = wav_bytes(tag, channels, 22050, bits, payload, extensible)
    x, rate = audio.read_wav(data)
    assert rate == 22050 and x.dtype == np.float32 and x.shape == (257,)
    np.testing.assert_allclose(x, decode(payload, kind, channels), rtol=2e-7, atol=1e-9)
    if channels == 1 and kind in ("s16", "s24", "f32", "u8"):
        assert np.array_equal(x, decode(payload, kind, channels))  # exactly representable


@pytest.mark.parametrize("width", [1, 2, 3, 4])
@pytest.mark.parametrize("channels", [1, 2, 5])
def test_read_wav_written_by_wave_module(tmp_path, rng, width, channels):
    kind = {1: "u8", 2: "s16", 3: "s24", 4: "s32"}[width]
    frames = rng.uniform(-1, 1, (1001, channels))
    payload = encode(frames, kind)
    path = tmp_path / "w.wav"
    with wave.open(str(path), "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(width)
        w.setframerate(44100)
        w.writeframes(payload)
    expected = decode(payload, kind, channels)
    for source in (path, str(path), path.read_bytes(), bytearray(path.read_bytes()), io.BytesIO(path.read_bytes())):
        x, rate = audio.read_wav(source)
        assert rate == 44100
        np.testing.assert_allclose(x, expected, rtol=2e-7, atol=1e-9)


def test_read_wav_chunks_padding_and_order(rng):
    frames = rng.uniform(-1, 1, (101, 1))  # 101 bytes of u8: an odd data chunk, padded
    payload = encode(frames, "u8")
    odd = chunk(b"LIST", b"INFOISFT\x05\x00\x00\x00abcd\x00")  # 17 bytes: padded to 18
    junk = chunk(b"junk", bytes(7))
    data = wav_bytes(1, 1, 8000, 8, payload, before=[odd, junk], after=[chunk(b"cue ", bytes(3)), odd])
    x, rate = audio.read_wav(data)
    assert rate == 8000 and np.array_equal(x, decode(payload, "u8", 1))
    # data before fmt (allowed when the data chunk's size is right)
    body = b"WAVE" + junk + chunk(b"data", payload) + fmt_chunk(1, 1, 8000, 8)
    x2, _ = audio.read_wav(b"RIFF" + struct.pack("<I", len(body)) + body)
    assert np.array_equal(x2, x)
    # a wrong RIFF size field is not trusted
    bad_riff = data[:4] + struct.pack("<I", 3) + data[8:]
    assert np.array_equal(audio.read_wav(bad_riff)[0], x)


def test_read_wav_streaming_and_cut_data(rng):
    frames = rng.uniform(-1, 1, (50, 2))
    payload = encode(frames, "s16")
    expected = decode(payload, "s16", 2)
    # size 0xFFFFFFFF (streaming writers) and sizes beyond the file: read to the end
    for size in (0xFFFFFFFF, len(payload) + 4000, len(payload) + 1):
        x, _ = audio.read_wav(wav_bytes(1, 2, 16000, 16, payload, data_size=size))
        assert np.array_equal(x, expected)
    # cut after whole frames: what is there
    full = wav_bytes(1, 2, 16000, 16, payload)
    x, _ = audio.read_wav(full[: len(full) - 4 * 10])
    assert np.array_equal(x, expected[:40])
    # cut mid-frame / mid-sample: refused
    for cut in (1, 2, 3):
        with pytest.raises(InputError, match="truncated mid-sample"):
            audio.read_wav(full[: len(full) - cut])
    # a declared size that is not whole frames
    with pytest.raises(InputError, match="truncated mid-sample"):
        audio.read_wav(wav_bytes(1, 2, 16000, 16, payload[:-2]))
    # RF64 with its ds64 chunk
    ds64 = chunk(b"ds64", struct.pack("<QQQI", 0, len(payload), 50, 0))
    body = b"WAVE" + ds64 + fmt_chunk(1, 2, 16000, 16) + chunk(b"data", payload, 0xFFFFFFFF)
    x, _ = audio.read_wav(b"RF64" + struct.pack("<I", 0xFFFFFFFF) + body + chunk(b"LIST", bytes(6)))
    assert np.array_equal(x, expected)


def test_read_wav_empty_data():
    x, rate = audio.read_wav(wav_bytes(3, 2, 48000, 32, b""))
    assert x.shape == (0,) and x.dtype == np.float32 and rate == 48000


def test_read_wav_pcm_12_bit_is_left_justified():
    v = np.array([-2048, 0, 2047], np.int16) << 4  # 12-bit samples in 16-bit containers
    x, _ = audio.read_wav(wav_bytes(1, 1, 8000, 12, v.astype("<i2").tobytes()))
    np.testing.assert_array_equal(x, v / 32768.0)


# ---------------------------------------------------------------- bad WAV files


def expect_input_error(data, match=None):
    with pytest.raises(InputError, match=match) as info:
        audio.read_wav(data)
    return str(info.value)


def test_read_wav_bad_headers(rng):
    payload = encode(rng.uniform(-1, 1, (20, 1)), "s16")
    expect_input_error(b"", "not a WAV file")
    expect_input_error(b"RIFF\x00\x00", "not a WAV file")
    expect_input_error(b"OggS" + bytes(40), "not a WAV file")
    expect_input_error(b"RIFF\x10\x00\x00\x00AVI LIST", "not a WAV file")
    expect_input_error(b"RIFX" + bytes(4) + b"WAVE", "big-endian")
    no_fmt = b"WAVE" + chunk(b"data", payload)
    expect_input_error(b"RIFF" + struct.pack("<I", len(no_fmt)) + no_fmt, "no 'fmt ' chunk")
    no_data = b"WAVE" + fmt_chunk(1, 1, 16000, 16) + chunk(b"LIST", bytes(4))
    expect_input_error(b"RIFF" + struct.pack("<I", len(no_data)) + no_data, "no 'data' chunk")
    expect_input_error(wav_bytes(1, 1, 0, 16, payload), "sample rate 0")
    expect_input_error(wav_bytes(1, 1, 384001, 16, payload), "absurd")
    expect_input_error(wav_bytes(1, 1, 0xFFFFFFFF, 16, payload), "absurd")
    expect_input_error(wav_bytes(1, 0, 16000, 16, payload), "0 channels")
    assert "0x0002" in expect_input_error(wav_bytes(2, 1, 16000, 16, payload), "unsupported WAV format code")
    assert "mu-law" in expect_input_error(wav_bytes(7, 1, 16000, 8, payload), "unsupported")
    expect_input_error(wav_bytes(3, 1, 16000, 16, payload), "IEEE float with 16 bits")
    expect_input_error(wav_bytes(1, 1, 16000, 40, payload), "PCM with 40 bits")
    expect_input_error(wav_bytes(1, 1, 16000, 0, payload), "PCM with 0 bits")
    expect_input_error(wav_bytes(5, 1, 16000, 16, payload, extensible=True), "format code 0x0005")
    # extensible with a foreign GUID
    body = struct.pack("<HHIIHH", 0xFFFE, 1, 16000, 32000, 2, 16) + struct.pack("<HHI", 22, 16, 0) + bytes(16)
    riff = b"WAVE" + chunk(b"fmt ", body) + chunk(b"data", payload)
    expect_input_error(b"RIFF" + struct.pack("<I", len(riff)) + riff, "GUID")
    # block_align that does not match the format
    riff = b"WAVE" + fmt_chunk(1, 2, 16000, 16, block_align=6) + chunk(b"data", payload)
    expect_input_error(b"RIFF" + struct.pack("<I", len(riff)) + riff, "block_align 6")
    # fmt chunk too short
    riff = b"WAVE" + chunk(b"fmt ", bytes(14)) + chunk(b"data", payload)
    expect_input_error(b"RIFF" + struct.pack("<I", len(riff)) + riff, "needs at least 16")
    # NaN in float data: how many and where
    f = np.zeros((10, 2), "<f4")
    f[3, 1] = np.nan
    f[7, 0] = np.inf
    msg = expect_input_error(wav_bytes(3, 2, 16000, 32, f.tobytes()), "NaN or infinite")
    assert "2 samples" in msg and "frame 3, channel 1" in msg
    with pytest.raises(InputError, match="expected a path"):
        audio.read_wav(12345)


def test_read_wav_unreadable_path(tmp_path):
    with pytest.raises(nerve.ModelError, match="cannot read") as info:
        audio.read_wav(tmp_path / "missing.wav")
    assert info.value.status_name == "NRV_ERR_IO" and isinstance(info.value.__cause__, FileNotFoundError)
    with pytest.raises(nerve.ModelError):
        audio.read_wav(tmp_path)  # a directory


def test_read_wav_truncated_at_every_offset(rng):
    payload = encode(rng.uniform(-1, 1, (40, 2)), "s24")
    full = wav_bytes(1, 2, 44100, 24, payload, extensible=True, before=[chunk(b"LIST", bytes(9))])
    data_start = full.index(b"data") + 8
    frame = 6
    for cut in range(len(full)):
        part = full[:cut]
        if cut >= data_start and (cut - data_start) % frame == 0:
            x, rate = audio.read_wav(part)  # whole frames: what is there
            assert x.shape == ((cut - data_start) // frame,) and rate == 44100
        else:
            with pytest.raises(InputError):
                audio.read_wav(part)


def test_read_wav_random_bytes_never_crash(rng):
    good = wav_bytes(1, 2, 16000, 16, encode(rng.uniform(-1, 1, (30, 2)), "s16"))
    for _ in range(300):
        blob = rng.integers(0, 256, int(rng.integers(0, 200)), dtype=np.uint8).tobytes()
        if rng.random() < 0.5:
            blob = b"RIFF" + blob[:4] + b"WAVE" + blob[8:]
        with pytest.raises(InputError):
            audio.read_wav(blob)
    # header fields flipped at random: a result or an InputError, nothing else
    for _ in range(500):
        b = bytearray(good)
        for _ in range(int(rng.integers(1, 4))):
            b[int(rng.integers(0, 44))] = int(rng.integers(0, 256))
        try:
            x, rate = audio.read_wav(bytes(b))
        except InputError:
            continue
        assert x.dtype == np.float32 and x.ndim == 1 and 1 <= rate <= audio.MAX_RATE


# ---------------------------------------------------------------- to_mono_float32


def test_to_mono_dtypes_and_layouts(rng):
    f = rng.uniform(-1, 1, (100, 3))
    want = f.mean(axis=1).astype(np.float32)
    np.testing.assert_allclose(audio.to_mono_float32(f), want, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(audio.to_mono_float32(f.reshape(-1), channels=3), want, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(audio.to_mono_float32(f, channels=3), want, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(audio.to_mono_float32(np.asfortranarray(f)), want, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(audio.to_mono_float32(f[::2]), want[::2], rtol=1e-7, atol=1e-9)
    f32 = f[:, 0].astype(np.float32)
    out = audio.to_mono_float32(f32)
    assert np.array_equal(out, f32) and out is not f32 and not np.shares_memory(out, f32)
    assert np.array_equal(audio.to_mono_float32(f32.astype(">f4")), f32)  # big-endian input
    i16 = rng.integers(-32768, 32768, (64, 2)).astype(np.int16)
    np.testing.assert_allclose(audio.to_mono_float32(i16), (i16 / 32768.0).mean(axis=1), rtol=1e-7)
    i32 = rng.integers(-2**31, 2**31, 64).astype(np.int32)
    np.testing.assert_allclose(audio.to_mono_float32(i32), i32 / 2.0**31, rtol=1e-7)
    u8 = rng.integers(0, 256, 64).astype(np.uint8)
    assert np.array_equal(audio.to_mono_float32(u8), ((u8 - 128.0) / 128).astype(np.float32))
    assert np.array_equal(audio.to_mono_float32([0.5, -0.25]), np.array([0.5, -0.25], np.float32))
    assert audio.to_mono_float32(np.zeros((0, 2), np.float32)).shape == (0,)
    assert audio.to_mono_float32(np.array([2.0, -3.0])).tolist() == [2.0, -3.0]  # not clipped


def test_to_mono_rejects():
    for bad in (np.zeros(4, np.complex64), np.zeros(4, bool), np.array(["a", "b"]), np.array([1, None]),
                np.zeros(4, np.int64), np.zeros(4, np.float16), np.zeros(4, np.int8), np.zeros(4, np.uint16)):
        with pytest.raises(InputError, match="dtype"):
            audio.to_mono_float32(bad)
    with pytest.raises(InputError, match="int64"):
        audio.to_mono_float32([1, 0, -1])  # no sample width
    with pytest.raises(InputError, match="cannot be read"):
        audio.to_mono_float32([[1.0], [2.0, 3.0]])
    with pytest.raises(InputError, match="whole number"):
        audio.to_mono_float32(np.zeros(5, np.float32), channels=2)
    with pytest.raises(InputError, match="channels"):
        audio.to_mono_float32(np.zeros((5, 2), np.float32), channels=3)
    with pytest.raises(InputError, match="channels 0"):
        audio.to_mono_float32(np.zeros(4, np.float32), channels=0)
    with pytest.raises(InputError, match="integer"):
        audio.to_mono_float32(np.zeros(4, np.float32), channels=1.5)
    with pytest.raises(InputError, match="1-D"):
        audio.to_mono_float32(np.zeros((2, 2, 2), np.float32))
    with pytest.raises(InputError, match="1-D"):
        audio.to_mono_float32(np.float32(1.0))
    x = np.zeros((100, 2))
    x[17, 1] = np.nan
    x[50, 0] = -np.inf
    x[60, 0] = 1e300  # beyond float32
    with pytest.raises(InputError, match=r"3 samples are NaN or infinite.*frame 17, channel 1"):
        audio.to_mono_float32(x)
    with pytest.raises(InputError, match=r"1 sample is NaN or infinite; the first at sample 4"):
        audio.to_mono_float32(np.array([0, 0, 0, 0, np.inf], np.float32))


# ---------------------------------------------------------------- resampler


def design_taps(info):
    """The documented prototype g(t) sampled as the table: float64 (rows, taps)."""
    k, rows = info["taps"], info["table_rows"]
    denom = info["interp_phases"] or info["up"]
    fc = info["cutoff_hz"] / info["in_rate"]
    t = np.arange(rows)[:, None] / denom + k / 2 - 1 - np.arange(k)[None, :]
    u = np.clip(1 - (t / (k / 2)) ** 2, 0, None)
    w = np.i0(info["kaiser_beta"] * np.sqrt(u)) / np.i0(info["kaiser_beta"])
    return 2 * fc * np.sinc(2 * fc * t) * w


def reference(r: audio.Resampler, x: np.ndarray) -> np.ndarray:
    """float64 direct convolution with the resampler's own table, whole stream + tail."""
    info = r.info()
    L, M, K = info["up"], info["down"], info["taps"]
    table = r.taps.astype(np.float64)
    n_out = -(-len(x) * L // M)
    k = np.arange(n_out, dtype=np.int64)
    q, p = (k * M) // L, (k * M) % L
    xp = np.concatenate([np.zeros(K), x.astype(np.float64), np.zeros(K)])
    idx = q[:, None] - K // 2 + 1 + np.arange(K)[None, :] + K
    win = xp[idx]
    if info["interp_phases"]:
        s = p * info["interp_phases"]
        i, w = s // L, (s % L) / L
        return (1 - w) * np.einsum("kj,kj->k", win, table[i]) + w * np.einsum("kj,kj->k", win, table[i + 1])
    return np.einsum("kj,kj->k", win, table[p])


def run_sliced(r, x, sizes):
    out, pos = [], 0
    for n in sizes:
        out.append(r.process(x[pos:pos + n]))
        pos += n
    assert pos == len(x)
    out.append(r.flush())
    return np.concatenate(out)


def random_sizes(rng, n, hi=500):
    sizes = []
    while sum(sizes) < n:
        sizes.append(int(rng.integers(0, hi)))
    sizes[-1] -= sum(sizes) - n
    return sizes


RATE_PAIRS = [(44100, 16000), (48000, 16000), (22050, 16000), (8000, 16000), (11025, 16000), (16000, 44100),
              (16000, 8000), (7, 5), (44101, 16000)]


@pytest.mark.parametrize("rates", RATE_PAIRS, ids=[f"{a}-{b}" for a, b in RATE_PAIRS])
def test_resampler_matches_reference(rng, rates):
    r = audio.Resampler(*rates)
    info = r.info()
    np.testing.assert_allclose(r.taps, design_taps(info), rtol=0, atol=1e-7)
    x = rng.uniform(-1, 1, 3000).astype(np.float32)
    y = run_sliced(r, x, random_sizes(rng, len(x)))
    want = reference(r, x)
    assert y.dtype == np.float32 and y.shape == want.shape == (math.ceil(3000 * info["up"] / info["down"]),)
    np.testing.assert_allclose(y, want, rtol=0, atol=1e-6)


@pytest.mark.parametrize("rates", [(44100, 16000), (48000, 16000), (8000, 16000), (7, 5)])
def test_resampler_slicing_invariance(rng, rates):
    x = rng.uniform(-1, 1, 2000).astype(np.float32)
    r = audio.Resampler(*rates)
    whole = run_sliced(r, x, [len(x)])
    assert np.array_equal(run_sliced(r, x, [1] * len(x)), whole)
    for _ in range(5):
        assert np.array_equal(run_sliced(r, x, random_sizes(rng, len(x), 800)), whole)
    # the count after each call is ceil((fed - latency) * L / M): the total input decides
    info = r.info()
    half, L, M = info["latency"], info["up"], info["down"]
    got, fed = 0, 0
    for n in random_sizes(rng, len(x)):
        got += len(r.process(x[fed:fed + n]))
        fed += n
        assert got == (-(-(fed - half) * L // M) if fed > half else 0)
        assert r.info()["total_out"] == got and r.info()["total_in"] == fed
    assert got + len(r.flush()) == -(-len(x) * L // M)


def tone_fit(y, freq, rate, skip):
    """Least-squares amplitude and phase of a sine of freq Hz in y[skip:-skip]."""
    k = np.arange(skip, len(y) - skip)
    a = np.stack([np.sin(2 * np.pi * freq * k / rate), np.cos(2 * np.pi * freq * k / rate)], axis=1)
    coef, *_ = np.linalg.lstsq(a, y[skip:len(y) - skip].astype(np.float64), rcond=None)
    return float(np.hypot(*coef)), coef


@pytest.mark.parametrize("in_rate", [44100, 48000, 8000, 22050])
def test_resampler_1khz_tone(in_rate):
    n = in_rate  # one second
    x = (0.5 * np.sin(2 * np.pi * 1000 * np.arange(n) / in_rate)).astype(np.float32)
    with audio.Resampler(in_rate, 16000) as r:
        y = np.concatenate([r.process(x), r.flush()])
    assert len(y) == 16000
    mid = y[2000:14000]
    spectrum = np.abs(np.fft.rfft(mid * np.hanning(len(mid))))
    peak_hz = np.argmax(spectrum) * 16000 / len(mid)
    assert abs(peak_hz - 1000) <= 16000 / len(mid)
    amp, coef = tone_fit(y, 1000, 16000, 400)
    assert abs(20 * np.log10(amp / 0.5)) < 0.01
    # the delay is compensated: phase 0 at t = 0, like the input (coef = [sin, cos])
    assert abs(coef[1]) < 1e-4 and coef[0] > 0
    ideal = 0.5 * np.sin(2 * np.pi * 1000 * np.arange(16000) / 16000)
    assert np.max(np.abs(y[400:-400] - ideal[400:-400])) < 1e-4


def test_resampler_8k_to_16k_no_energy_above_4k(rng):
    x = rng.uniform(-1, 1, 80000).astype(np.float32)  # white: the images would be as strong
    with audio.Resampler(8000, 16000) as r:
        y = np.concatenate([r.process(x), r.flush()])
    seg = y[1000:-1000].astype(np.float64)
    p = np.abs(np.fft.rfft(seg * np.blackman(len(seg)))) ** 2
    f = np.arange(len(p)) * 16000 / len(seg)
    below = p[(f > 200) & (f < 3500)].mean()
    above = p[f > 4100].mean()
    assert 10 * np.log10(above / below) < -80


def test_resampler_equal_rates_copy(rng):
    x = rng.uniform(-3, 3, 1234).astype(np.float32)
    r = audio.Resampler(16000, 16000)
    assert r.latency == 0 and r.info()["taps"] == 0 and r.taps.size == 0
    y = run_sliced(r, x, random_sizes(rng, len(x)))
    assert np.array_equal(y, x)


def test_resampler_inputs_and_errors(rng):
    r = audio.Resampler(44100)
    assert r.out_rate == 16000
    x16 = rng.integers(-32768, 32768, 5000).astype(np.int16)
    y = np.concatenate([r.process(x16), r.flush()])
    y2 = np.concatenate([r.process((x16 / 32768.0).astype(np.float32)), r.flush()])
    assert np.array_equal(y, y2)
    a = rng.uniform(-1, 1, 1000).astype(np.float32)
    first = r.process(a)
    bad = a.copy()
    bad[3] = np.nan
    with pytest.raises(InputError, match="NaN"):
        r.process(bad)
    # the failed call left the stream as it was
    rest = np.concatenate([r.process(a), r.flush()])
    again = audio.Resampler(44100)
    assert np.array_equal(np.concatenate([first, rest]), run_sliced(again, np.concatenate([a, a]), [2000]))
    with pytest.raises(InputError, match="dtype"):
        r.process(np.zeros(3, np.complex64))
    for bad_rate in (0, -1, 384001, 10**12, 1.5, "16000", True, None):
        with pytest.raises(InputError):
            audio.Resampler(bad_rate)
        with pytest.raises(InputError):
            audio.Resampler(16000, bad_rate)
    with pytest.raises(nerve.NerveError, match="two stages"):
        audio.Resampler(384000, 1)
    assert audio.Resampler(16000.0).in_rate == 16000
    r.close()
    r.close()
    with pytest.raises(InputError, match="close"):
        r.process(a)


def test_resampler_reset_forgets_the_tail(rng):
    x = rng.uniform(-1, 1, 3000).astype(np.float32)
    r = audio.Resampler(48000)
    r.process(x[:1000])
    r.reset()
    assert r.info()["total_in"] == 0 and len(r.flush()) == 0
    assert np.array_equal(run_sliced(r, x, [3000]), run_sliced(audio.Resampler(48000), x, [10] * 300))


# ---------------------------------------------------------------- load_audio


def test_load_audio(tmp_path, rng):
    frames = rng.uniform(-0.9, 0.9, (4410, 2))
    payload = encode(frames, "s16")
    path = tmp_path / "a.wav"
    path.write_bytes(wav_bytes(1, 2, 44100, 16, payload))
    y = audio.load_audio(path)
    mono = decode(payload, "s16", 2)
    r = audio.Resampler(44100, 16000)
    assert y.dtype == np.float32 and len(y) == 1600
    assert np.array_equal(y, np.concatenate([r.process(mono), r.flush()]))
    assert np.array_equal(audio.load_audio(str(path), sample_rate=44100), y)
    assert np.array_equal(audio.load_audio(path, target_rate=None), mono)
    stereo = audio.load_audio(frames.astype(np.float32), sample_rate=44100)  # (frames, channels)
    r.reset()
    want = audio.to_mono_float32(frames.astype(np.float32))
    assert np.array_equal(stereo, np.concatenate([r.process(want), r.flush()]))
    ya = audio.load_audio(mono, sample_rate=44100)
    assert np.array_equal(ya, y)
    assert np.array_equal(audio.load_audio(mono, sample_rate=16000), mono)
    assert len(audio.load_audio(mono, sample_rate=44100, target_rate=8000)) == 800
    with pytest.raises(InputError, match="sample_rate is required"):
        audio.load_audio(mono)
    with pytest.raises(InputError, match="file's rate is 44100"):
        audio.load_audio(path, sample_rate=16000)
    with pytest.raises(InputError, match="target_rate"):
        audio.load_audio(mono, sample_rate=16000, target_rate=0)
    with pytest.raises(InputError, match="neither WAV .* nor FLAC"):
        audio.load_audio(b"hello")


def test_iter_wav_blocks_equal_read_wav(tmp_path):
    """iter_wav gives read_wav's samples in blocks (any block size), errors in the header at
    the call, bad block sizes refused."""
    rng = np.random.default_rng(11)
    pcm = (rng.standard_normal((4801, 2)) * 8000).astype(np.int16)
    path = tmp_path / "s.wav"
    with wave.open(str(path), "wb") as w:
        w.setnchannels(2), w.setsampwidth(2), w.setframerate(22050)
        w.writeframes(pcm.tobytes())
    want, rate = nerve.audio.read_wav(str(path))
    for block in (1, 7, 1000, 4801, 100000):
        r, blocks = nerve.audio.iter_wav(str(path), block_frames=block)
        parts = list(blocks)
        assert r == rate == 22050 and all(len(p) <= block for p in parts)
        np.testing.assert_array_equal(np.concatenate(parts), want)
    with pytest.raises(nerve.InputError):
        nerve.audio.iter_wav(b"RIFF\x00\x00\x00\x00WAVEjunk")
    with pytest.raises(nerve.InputError):
        nerve.audio.iter_wav(str(path), block_frames=0)


@pytest.mark.parametrize("head, kind", [
    (b"OggS\x00\x02" + bytes(40), "Ogg"),
    (b"\x00\x00\x00\x20ftypM4A " + bytes(40), "MP4/M4A"),
    (b"\xff\xfb\x90\x64" + bytes(40), "MP3"),
    (b"ID3\x04\x00\x00\x00\x00\x00\x0a" + bytes(10) + b"\xff\xfb\x90\x64" + bytes(40), "MP3 .*after an ID3 tag"),
    (b"\xff\xf1\x50\x80" + bytes(40), "AAC"),
    (b"\x1aE\xdf\xa3" + bytes(40), "WebM"),
    (b"FORM\x00\x00\x00\x00AIFF" + bytes(40), "AIFF"),
])
def test_other_audio_formats_are_named_with_the_conversion(tmp_path, head, kind):
    """nerve decodes WAV and FLAC; a recording in another container (what phones and browsers
    save) gets an InputError naming what it looks like and the ffmpeg line, not a decoder's
    complaint about a missing marker (an ID3 tag used to send MP3s to the FLAC reader)."""
    path = tmp_path / "clip.audio"
    path.write_bytes(head)
    for source in (head, path):
        with pytest.raises(InputError, match=f"neither WAV .* nor FLAC .*looks like {kind}.*ffmpeg -i"):
            audio.load_audio(source)
    with pytest.raises(InputError, match=f"looks like {kind}"):
        audio.iter_audio(head)
