"""Audio input of the speech pipeline: WAV and FLAC files, mono float32, resampling to the model's rate.

::

    samples, rate = nerve.audio.read_wav("speech.wav")     # float32 mono, the file's rate
    x = nerve.audio.load_audio("speech.wav")              # float32 mono at 16 kHz
    r = nerve.audio.Resampler(48000)                        # streaming: any slicing,
    y = np.concatenate([r.process(c) for c in chunks] + [r.flush()])   # bit-identical output

The sample conversion (scaling, downmix by the mean of the channels, non-finite detection)
and the resampler are libnerve's C code (``nrv_audio_to_mono_f32``, ``nrv_resampler_*``,
see the Audio section of ``nerve.h``); this module parses the WAV container and checks
arguments. Every problem with the input — not a WAV file, a truncated or corrupted header,
an unsupported encoding, NaN or Inf samples, a wrong dtype or rate — raises
:class:`nerve.InputError` with a message saying what was wrong; a path that cannot be read
raises :class:`nerve.ModelError` (NRV_ERR_IO).

**Resampler.** Windowed-sinc polyphase FIR (Kaiser window, 90 dB design): with
``fmin = min(in_rate, out_rate)`` the passband reaches ``0.45 fmin`` (ripple < 0.001 dB),
the stopband starts at ``0.5 fmin`` (>= 89.8 dB measured), so nothing aliases below the output's
Nyquist frequency. Equal rates are an exact copy. The filter delay is compensated: output
sample ``k`` is the signal at time ``k / out_rate``, so a stream's ``ceil(n * out / in)``
samples line up with its input; the price is a lookahead of ``latency`` input samples
(160 at 44.1 kHz -> 16 kHz) that :meth:`Resampler.flush` releases at the end of a stream.

**WAV files** (:func:`read_wav`): RIFF/WAVE (and RF64) with PCM 8/16/24/32-bit, IEEE
float 32/64-bit, or WAVE_FORMAT_EXTENSIBLE with a PCM or float sub-format; any channel
count (downmixed by the mean); unknown chunks are skipped (odd sizes padded as RIFF says);
the RIFF size field is not trusted. A ``data`` chunk whose size field is 0xFFFFFFFF or
larger than the file (a streaming writer, or a recording cut short) is read to the end of
the file — but if that leaves part of a frame, the file is refused as truncated mid-sample.
Other encodings (ADPCM, A-law, mu-law, ...) are refused naming their format code.

**FLAC files** (:func:`read_flac`, :func:`iter_flac`): libnerve's own decoder (RFC 9639,
``nrv_flac_*`` in nerve.h): 4-32 bits, 1-8 channels, every subframe and stereo coding; each
frame's CRC-8 and CRC-16 are checked, so a corrupted or truncated file is an InputError naming
the byte offset rather than noise. :func:`read_audio` / :func:`iter_audio` (and so
:func:`load_audio`, ``nerve asr`` and the Recognizer) take either format, told apart by the
file's first bytes.
"""

from __future__ import annotations

import io
import mmap
import operator
import os
import struct
from typing import Optional, Tuple, Union

import numpy as np

from ._native import ffi, lib, check, last_error
from .errors import InputError, ModelError, code

__all__ = ["read_audio", "iter_audio", "read_wav", "iter_wav", "read_flac", "iter_flac", "to_mono_float32",
           "Resampler", "load_audio", "MAX_RATE"]

MAX_RATE = 384000
"""Highest sample rate nerve accepts, in Hz (the lowest is 1)."""

_MAX_CHANNELS = 65535
_F32 = np.dtype(np.float32)

# numpy dtype (little-endian) -> nrv_sample_format
_FORMAT_OF_DTYPE = {
    np.dtype("<f4"): lib.NRV_SAMPLE_F32,
    np.dtype("<f8"): lib.NRV_SAMPLE_F64,
    np.dtype("<i2"): lib.NRV_SAMPLE_S16,
    np.dtype("<i4"): lib.NRV_SAMPLE_S32,
    np.dtype("u1"): lib.NRV_SAMPLE_U8,
}
_ACCEPTED = "float32, float64, int16, int32 or uint8"

_WAVE_FORMAT_PCM = 0x0001
_WAVE_FORMAT_IEEE_FLOAT = 0x0003
_WAVE_FORMAT_EXTENSIBLE = 0xFFFE
# The GUID of KSDATAFORMAT_SUBTYPE_PCM / _IEEE_FLOAT after their first two bytes (the code).
_GUID_TAIL = bytes.fromhex("000000001000800000aa00389b71")
_FORMAT_NAMES = {
    0x0002: "Microsoft ADPCM", 0x0006: "A-law", 0x0007: "mu-law", 0x0011: "IMA ADPCM",
    0x0031: "GSM 6.10", 0x0050: "MPEG", 0x0055: "MPEG layer 3", 0x0092: "Dolby AC-3",
    0x00FF: "AAC", 0x1610: "HE-AAC", 0xF1AC: "FLAC",
}


def _input_error(message: str, status: str = "NRV_ERR_INVALID_ARG") -> InputError:
    return InputError(message, code(status))


def _rate(value, name: str, where: str) -> int:
    """A sample rate: an integer in [1, MAX_RATE]."""
    if isinstance(value, (bool, np.bool_)):
        raise _input_error(f"{where}: {name} must be an integer number of Hz, got {value!r}")
    try:
        rate = operator.index(value)
    except TypeError:
        if isinstance(value, (float, np.floating)) and float(value).is_integer():
            rate = int(value)
        else:
            raise _input_error(f"{where}: {name} must be an integer number of Hz, got {value!r}") from None
    if not 1 <= rate <= MAX_RATE:
        raise _input_error(f"{where}: {name} {rate} Hz is outside [1, {MAX_RATE}]")
    return rate


# ---------------------------------------------------------------- sample conversion


def _convert(buf, fmt: int, frames: int, channels: int) -> Tuple[np.ndarray, int]:
    """The C converter on a readable buffer of frames x channels samples of format fmt."""
    out = np.empty(frames, _F32)
    bad = ffi.new("size_t *")
    if frames:
        src = ffi.from_buffer("uint8_t[]", buf)
        dst = ffi.from_buffer("float[]", out)
    else:
        src = dst = ffi.NULL
    check(lib.nrv_audio_to_mono_f32(src, fmt, frames, channels, dst, bad))
    return out, int(bad[0])


def _nonfinite_error(where: str, samples: np.ndarray, count: int, channels: int) -> InputError:
    """The error for count non-finite samples in samples (interleaved, any float dtype)."""
    flat = samples.reshape(-1)
    bad = ~np.isfinite(flat)
    if flat.dtype.itemsize > 4:
        bad |= np.abs(np.where(bad, 0, flat)) > np.finfo(np.float32).max
    first = int(np.argmax(bad)) if bad.any() else 0
    frame, channel = divmod(first, channels)
    place = f"frame {frame}, channel {channel}" if channels > 1 else f"sample {frame}"
    extra = " (or beyond the float32 range)" if flat.dtype.itemsize > 4 else ""
    verb = "samples are" if count != 1 else "sample is"
    return _input_error(f"{where}: {count} {verb} NaN or infinite{extra}; the first at {place}")


def to_mono_float32(samples, channels: int = 1) -> np.ndarray:
    """Converts audio samples to a new mono float32 array.

    Args:
        samples: a numpy array of dtype float32 or float64 (full scale [-1, 1]; larger values
            are kept, not clipped), int16 (/ 2**15), int32 (/ 2**31) or uint8 (8-bit WAV
            convention, (v - 128) / 128); a list of floats is read as float64 (a list of ints
            has no sample width and is refused: pass an int16 / int32 array). Shape
            ``(frames,)`` with ``channels`` interleaved, or ``(frames, channels)``.
        channels: channels interleaved in a 1-D array (1..65535). With a 2-D array it must be
            1 (the default) or equal ``samples.shape[1]``.

    Returns:
        float32 array of shape ``(frames,)``: each frame's mean over its channels.

    Raises:
        InputError: a dtype other than the above (complex, bool, object, strings, int64,
            ...), a shape that does not fit ``channels``, or NaN / Inf samples (the message
            gives how many and where the first is).
    """
    where = "to_mono_float32"
    if isinstance(samples, np.ndarray):
        arr = samples
    else:
        try:
            arr = np.asarray(samples)
        except (TypeError, ValueError) as exc:
            raise _input_error(f"{where}: samples cannot be read as an array: {exc}") from None
    kind = arr.dtype.kind
    if kind not in "fiu":
        what = {"c": "complex", "b": "bool", "O": "object", "U": "string", "S": "bytes",
                "V": "structured", "M": "datetime", "m": "timedelta"}.get(kind, str(arr.dtype))
        raise _input_error(f"{where}: samples have dtype {arr.dtype} ({what}); expected {_ACCEPTED}",
                           "NRV_ERR_DTYPE")
    little = arr.dtype.newbyteorder("<")
    if little not in _FORMAT_OF_DTYPE:
        raise _input_error(f"{where}: samples have dtype {arr.dtype}; expected {_ACCEPTED} "
                           "(convert explicitly, e.g. samples.astype(np.float32))", "NRV_ERR_DTYPE")
    if isinstance(channels, (bool, np.bool_)):
        raise _input_error(f"{where}: channels must be an integer, got {channels!r}")
    try:
        channels = operator.index(channels)
    except TypeError:
        raise _input_error(f"{where}: channels must be an integer, got {channels!r}") from None
    if not 1 <= channels <= _MAX_CHANNELS:
        raise _input_error(f"{where}: channels {channels} outside [1, {_MAX_CHANNELS}]")
    if arr.ndim == 2:
        if channels not in (1, arr.shape[1]):
            raise _input_error(f"{where}: a (frames, channels) array of shape {arr.shape} with channels={channels}")
        channels = arr.shape[1]
        if channels < 1 or channels > _MAX_CHANNELS:
            raise _input_error(f"{where}: shape {arr.shape} has {channels} channels, expected 1..{_MAX_CHANNELS}")
        frames = arr.shape[0]
    elif arr.ndim == 1:
        if arr.shape[0] % channels:
            raise _input_error(f"{where}: {arr.shape[0]} interleaved samples are not a whole number of "
                               f"{channels}-channel frames")
        frames = arr.shape[0] // channels
    else:
        raise _input_error(f"{where}: samples must be 1-D (interleaved) or 2-D (frames, channels), "
                           f"got shape {arr.shape}")
    arr = np.ascontiguousarray(arr, dtype=little)
    out, bad = _convert(arr, _FORMAT_OF_DTYPE[little], frames, channels)
    if bad:
        raise _nonfinite_error(where, arr, bad, channels)
    return out


# ---------------------------------------------------------------- WAV


def _parse_fmt(data, body: int, size: int, name: str) -> Tuple[int, int, int, int]:
    """(nrv_sample_format, channels, rate, block_align) of a 'fmt ' chunk."""
    if size < 16:
        raise _input_error(f"{name}: 'fmt ' chunk of {size} bytes, needs at least 16")
    tag, channels, rate, _byte_rate, block_align, bits = struct.unpack_from("<HHIIHH", data, body)
    container = bits
    if tag == _WAVE_FORMAT_EXTENSIBLE:
        if size < 40:
            raise _input_error(f"{name}: WAVE_FORMAT_EXTENSIBLE 'fmt ' chunk of {size} bytes, needs 40")
        valid_bits = struct.unpack_from("<H", data, body + 18)[0]
        guid = bytes(data[body + 24: body + 40])
        if guid[2:] != _GUID_TAIL:
            raise _input_error(f"{name}: unsupported WAVE_FORMAT_EXTENSIBLE sub-format GUID {guid.hex()}")
        tag = guid[0] | guid[1] << 8
        if bits % 8:
            raise _input_error(f"{name}: extensible container of {bits} bits is not whole bytes")
        if valid_bits > bits:
            raise _input_error(f"{name}: {valid_bits} valid bits in a {bits}-bit container")
    if channels == 0:
        raise _input_error(f"{name}: 0 channels")
    if rate == 0:
        raise _input_error(f"{name}: sample rate 0 Hz")
    if rate > MAX_RATE:
        raise _input_error(f"{name}: sample rate {rate} Hz is absurd (nerve accepts up to {MAX_RATE})")
    if tag == _WAVE_FORMAT_PCM:
        # Plain PCM stores n bits left-justified in whole bytes (12-bit in 16, 20-bit in 24).
        container = (bits + 7) // 8 * 8
        fmt = {8: lib.NRV_SAMPLE_U8, 16: lib.NRV_SAMPLE_S16, 24: lib.NRV_SAMPLE_S24,
               32: lib.NRV_SAMPLE_S32}.get(container)
        if fmt is None or bits == 0:
            raise _input_error(f"{name}: PCM with {bits} bits per sample is not supported (8, 16, 24 or 32)")
    elif tag == _WAVE_FORMAT_IEEE_FLOAT:
        fmt = {32: lib.NRV_SAMPLE_F32, 64: lib.NRV_SAMPLE_F64}.get(bits)
        if fmt is None:
            raise _input_error(f"{name}: IEEE float with {bits} bits per sample is not supported (32 or 64)")
    else:
        label = _FORMAT_NAMES.get(tag, "unknown")
        raise _input_error(f"{name}: unsupported WAV format code {tag:#06x} ({label}); "
                           "nerve reads PCM (1), IEEE float (3) and their WAVE_FORMAT_EXTENSIBLE forms")
    need = channels * (container // 8)
    if block_align != need:
        raise _input_error(f"{name}: block_align {block_align} does not match {channels} channels x "
                           f"{container // 8} bytes = {need}")
    return fmt, channels, rate, block_align


def _wav_layout(f, n: int, name: str):
    """Walks the chunk headers of a WAV file object of n bytes (seeking, reading only the
    headers, 'fmt ' and 'ds64'): ((format, channels, rate, block_align), data_start, data_end)."""
    def read_at(pos: int, count: int) -> bytes:
        f.seek(pos)
        return f.read(count)

    if n < 12:
        raise _input_error(f"{name}: not a WAV file: {n} bytes, shorter than a RIFF header (12)")
    head = read_at(0, 12)
    magic, form = head[0:4], head[8:12]
    if magic == b"RIFX":
        raise _input_error(f"{name}: big-endian RIFX WAV files are not supported")
    if magic not in (b"RIFF", b"RF64") or form != b"WAVE":
        raise _input_error(f"{name}: not a WAV file: starts with {magic!r}...{form!r}, expected b'RIFF'...b'WAVE'")
    rf64 = magic == b"RF64"

    fmt_info = None
    data_range = None
    ds64_data = None
    pos = 12
    while pos + 8 <= n:
        chunk = read_at(pos, 8)
        cid = chunk[0:4]
        size = struct.unpack_from("<I", chunk, 4)[0]
        body = pos + 8
        if cid == b"data":
            declared = size
            if rf64 and size == 0xFFFFFFFF and ds64_data is not None:
                declared = ds64_data
            if size == 0xFFFFFFFF and declared == size or body + declared > n:
                data_range = (body, n)  # streaming writer or a cut recording: to the end
                break
            data_range = (body, body + declared)
        elif body + size > n:
            raise _input_error(f"{name}: truncated: chunk {cid!r} at offset {pos} claims {size} bytes, "
                               f"only {n - body} follow")
        elif cid == b"fmt ":
            if fmt_info is None:
                fmt_info = _parse_fmt(read_at(body, size), 0, size, name)
        elif cid == b"ds64" and rf64 and size >= 16:
            ds64_data = struct.unpack_from("<Q", read_at(body, 16), 8)[0]
        if fmt_info is not None and data_range is not None:
            break
        pos = body + size + (size & 1)
    if fmt_info is None:
        if pos < n and pos + 8 > n:
            raise _input_error(f"{name}: truncated: {n - pos} bytes of a chunk header at offset {pos}, "
                               "and no 'fmt ' chunk before it")
        raise _input_error(f"{name}: no 'fmt ' chunk" + (" before the data, which runs to the end of the file"
                                                         if data_range is not None else ""))
    if data_range is None:
        raise _input_error(f"{name}: no 'data' chunk" + (" (file truncated?)" if pos < n else ""))
    start, end = data_range
    if (end - start) % fmt_info[3]:
        raise _input_error(f"{name}: truncated mid-sample: the data has {end - start} bytes, not a whole number "
                           f"of {fmt_info[3]}-byte frames ({fmt_info[1]} channels)")
    return fmt_info, start, end


def _io_error(where: str, path, exc: OSError) -> ModelError:
    return ModelError(f"{where}: cannot read {os.fspath(path)!r}: {exc.strerror or exc}", code("NRV_ERR_IO"))


def _object_bytes(source, where: str) -> bytes:
    """The contents of a binary file object (refusing text-mode ones)."""
    data = source.read()
    if not isinstance(data, (bytes, bytearray)):
        raise _input_error(f"{where}: the file object returned {type(data).__name__}, not bytes "
                           "(open it in binary mode)")
    return data


def _not_a_source(source, where: str) -> InputError:
    return _input_error(f"{where}: expected a path, bytes or a binary file object, got {type(source).__name__}")


def _open_wav(source, where: str):
    """(file object, byte count, name) for a path, bytes or binary file object."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        data = memoryview(source).cast("B")
        return io.BytesIO(data), len(data), f"{where}: <bytes>"
    if isinstance(source, (str, os.PathLike)):
        try:
            f = open(source, "rb")
            size = os.fstat(f.fileno()).st_size
        except OSError as exc:
            raise _io_error(where, source, exc) from exc
        return f, size, f"{where}: {os.fspath(source)}"
    if hasattr(source, "read"):
        data = _object_bytes(source, where)
        return io.BytesIO(data), len(data), f"{where}: {getattr(source, 'name', '<file>')}"
    raise _not_a_source(source, where)


def _decode_block(raw: bytes, fmt: int, channels: int, block_align: int, name: str) -> np.ndarray:
    out, bad = _convert(raw, fmt, len(raw) // block_align, channels)
    if bad:
        dtype = "<f4" if fmt == lib.NRV_SAMPLE_F32 else "<f8"
        raise _nonfinite_error(name, np.frombuffer(raw, dtype=dtype), bad, channels)
    return out


def read_wav(source: Union[str, os.PathLike, bytes, bytearray, memoryview]) -> Tuple[np.ndarray, int]:
    """Reads a WAV file (a path, its bytes, or a binary file object).

    Returns:
        ``(samples, sample_rate)``: float32 mono samples (channels averaged; integer PCM
        scaled to [-1, 1)) and the rate in Hz.

    Raises:
        InputError: not a RIFF/WAVE file, a truncated header or chunk, no ``fmt `` or no
            ``data`` chunk, a rate of 0 or above 384000 Hz, 0 channels, an unsupported
            format code or bit depth, a frame size that does not match the format, data cut
            mid-sample, or NaN / Inf float samples.
        ModelError: a path that cannot be read (NRV_ERR_IO; the OSError is its __cause__).
    """
    f, n, name = _open_wav(source, "read_wav")
    with f:
        (fmt, channels, rate, block_align), start, end = _wav_layout(f, n, name)
        f.seek(start)
        raw = f.read(end - start)
    return _decode_block(raw, fmt, channels, block_align, name), rate


def iter_wav(source: Union[str, os.PathLike, bytes, bytearray, memoryview], block_frames: int = 16000):
    """Reads a WAV file in blocks: returns ``(sample_rate, blocks)`` where blocks yields float32
    mono arrays of up to ``block_frames`` frames — an hour-long recording never sits in memory
    whole. Same formats and errors as :func:`read_wav` (the header's are raised here, a bad
    sample when its block is read)."""
    if not isinstance(block_frames, int) or block_frames < 1:
        raise _input_error(f"iter_wav: block_frames must be a positive int, got {block_frames!r}")
    f, n, name = _open_wav(source, "iter_wav")
    try:
        (fmt, channels, rate, block_align), start, end = _wav_layout(f, n, name)
    except BaseException:
        f.close()
        raise

    def blocks():
        with f:
            pos = start
            while pos < end:
                count = min(block_frames * block_align, end - pos)
                f.seek(pos)
                raw = f.read(count)
                if len(raw) != count:
                    raise _input_error(f"{name}: the file shrank while being read")
                yield _decode_block(raw, fmt, channels, block_align, name)
                pos += count

    return rate, blocks()


# ---------------------------------------------------------------- FLAC


class _FlacStream:
    """libnerve's FLAC decoder (nrv_flac_*) on one encoded stream; holds the encoded bytes (a
    memory map for a path) as long as the decoder borrows them."""

    def __init__(self, source, where: str):
        self._map = None
        if isinstance(source, (str, os.PathLike)):
            try:
                with open(source, "rb") as f:
                    size = os.fstat(f.fileno()).st_size
                    if size:
                        self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
                    data = self._map if size else b""
            except OSError as exc:
                raise _io_error(where, source, exc) from exc
            self.name = f"{where}: {os.fspath(source)}"
        elif isinstance(source, (bytes, bytearray, memoryview)):
            data = memoryview(source).cast("B")
            self.name = f"{where}: <bytes>"
        elif hasattr(source, "read"):
            data = _object_bytes(source, where)
            self.name = f"{where}: {getattr(source, 'name', '<file>')}"
        else:
            raise _not_a_source(source, where)
        self._data = data
        self._buf = ffi.from_buffer("uint8_t[]", data) if len(data) else ffi.NULL
        out = ffi.new("nrv_flac_t **")
        self._check(lib.nrv_flac_open(self._buf, len(data), out))
        self._ptr = ffi.gc(out[0], lib.nrv_flac_free)
        info = ffi.new("nrv_flac_info *")
        check(lib.nrv_flac_info_get(self._ptr, info))
        self.rate = int(info.sample_rate)
        self.channels = int(info.channels)
        self.total = int(info.total_frames)  # 0: unknown
        if not 1 <= self.rate <= MAX_RATE:
            self.close()
            raise _input_error(f"{self.name}: sample rate {self.rate} Hz is outside [1, {MAX_RATE}]")

    def _check(self, status: int) -> None:
        if status:
            message = last_error()
            self.close()
            raise InputError(f"{self.name}: {message}", int(status))

    def read(self, max_frames: int) -> np.ndarray:
        """Up to max_frames frames as float32 mono (empty at the end)."""
        buf = np.empty((max_frames, self.channels), np.int32)
        got = ffi.new("size_t *")
        self._check(lib.nrv_flac_read(self._ptr, ffi.from_buffer("int32_t[]", buf), max_frames, got))
        n = int(got[0])
        out, _ = _convert(buf[:n], lib.NRV_SAMPLE_S32, n, self.channels)  # integers: never non-finite
        return out

    def read_all(self) -> np.ndarray:
        parts = []
        step = min(self.total or 1 << 20, 1 << 22)  # the declared length in one read, if it is sane
        while True:
            part = self.read(step)
            if not part.size:
                break
            parts.append(part)
        self.close()
        return np.concatenate(parts) if parts else np.empty(0, _F32)

    def close(self) -> None:
        ptr, self._ptr = getattr(self, "_ptr", None), None
        if ptr is not None:
            ffi.release(ptr)
        self._buf = None
        if self._map is not None:
            self._map.close()
            self._map = None


def read_flac(source: Union[str, os.PathLike, bytes, bytearray, memoryview]) -> Tuple[np.ndarray, int]:
    """Reads a FLAC file (a path, its bytes, or a binary file object) with libnerve's decoder
    (``nrv_flac_*``): ``(samples, sample_rate)``, float32 mono (channels averaged, full scale
    [-1, 1) at any bit depth). A corrupted or truncated stream (a frame's CRC, a sample beyond
    its width, metadata cut short) raises InputError naming the byte offset; an unreadable
    path ModelError (NRV_ERR_IO)."""
    stream = _FlacStream(source, "read_flac")
    return stream.read_all(), stream.rate


def iter_flac(source: Union[str, os.PathLike, bytes, bytearray, memoryview], block_frames: int = 16000):
    """:func:`read_flac` in blocks: ``(sample_rate, blocks)``, blocks yielding float32 mono arrays
    of up to ``block_frames`` frames; the decoded audio never sits in memory whole (the
    encoded file is memory-mapped). A bad frame raises InputError when its block is read."""
    if not isinstance(block_frames, int) or block_frames < 1:
        raise _input_error(f"iter_flac: block_frames must be a positive int, got {block_frames!r}")
    stream = _FlacStream(source, "iter_flac")

    def blocks():
        try:
            while True:
                part = stream.read(block_frames)
                if not part.size:
                    return
                yield part
        finally:
            stream.close()

    return stream.rate, blocks()


# ---------------------------------------------------------------- any supported file


# Other audio containers by their first bytes, named in read_audio's error (nerve decodes
# WAV and FLAC only): (offset, magic, name).
_OTHER_AUDIO = [(0, b"OggS", "Ogg (Vorbis or Opus)"), (4, b"ftyp", "MP4/M4A (AAC or ALAC)"),
                (0, b"\x1aE\xdf\xa3", "WebM/Matroska"), (0, b"FORM", "AIFF"), (0, b".snd", "Sun/NeXT AU"),
                (0, b"caff", "Core Audio (CAF)"), (0, b"#!AMR", "AMR")]


def _id3_end(head: bytes) -> int:
    """Where the audio after an ID3v2 tag starts (the tag's syncsafe size, plus its footer)."""
    size = (head[6] & 0x7F) << 21 | (head[7] & 0x7F) << 14 | (head[8] & 0x7F) << 7 | (head[9] & 0x7F)
    return 10 + size + (10 if head[5] & 0x10 else 0)


def _audio_kind(head: bytes) -> str:
    """A guess at what a non-WAV, non-FLAC stream is, for the error."""
    for at, magic, name in _OTHER_AUDIO:
        if head[at:at + len(magic)] == magic:
            return name
    if len(head) >= 2 and head[0] == 0xFF and head[1] & 0xF6 == 0xF0:
        return "AAC (ADTS)"
    if len(head) >= 2 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0:
        return "MP3 (MPEG audio)"
    return ""


def _container(source, where: str) -> str:
    """ "wav" or "flac", from the first bytes of a path or bytes (after an ID3v2 tag, which
    some taggers put before FLAC too); file objects are read whole first by the caller."""
    def first(at: int, n: int) -> bytes:
        if isinstance(source, (bytes, bytearray, memoryview)):
            return bytes(memoryview(source).cast("B")[at:at + n])
        try:
            with open(source, "rb") as f:
                f.seek(at)
                return f.read(n)
        except OSError as exc:
            raise _io_error(where, source, exc) from exc

    if not isinstance(source, (str, os.PathLike, bytes, bytearray, memoryview)):
        raise _not_a_source(source, where)
    head = first(0, 12)
    if head[:4] in (b"RIFF", b"RF64"):
        return "wav"
    if head[:4] == b"fLaC":
        return "flac"
    kind = _audio_kind(head)
    if head[:3] == b"ID3" and len(head) >= 10:
        after = first(_id3_end(head), 12)
        if after[:4] == b"fLaC":
            return "flac"
        kind = (_audio_kind(after) or "unknown audio") + ", after an ID3 tag"
    name = os.fspath(source) if isinstance(source, (str, os.PathLike)) else "<bytes>"
    looks = f" (it looks like {kind})" if kind else ""
    raise _input_error(f"{where}: {name} is neither WAV (RIFF/RF64) nor FLAC (fLaC): it starts with {head[:4]!r}"
                       f"{looks}; nerve decodes those two only, so convert it first, e.g. "
                       "`ffmpeg -i IN -ac 1 -ar 16000 OUT.wav`")


def _readable(source, where: str):
    """A file object's contents as bytes (so it can be sniffed and then decoded); other
    sources as they are."""
    if hasattr(source, "read") and not isinstance(source, (str, os.PathLike, bytes, bytearray, memoryview)):
        return _object_bytes(source, where)
    return source


def read_audio(source) -> Tuple[np.ndarray, int]:
    """Reads a WAV or FLAC file, told apart by their first bytes: :func:`read_wav` or
    :func:`read_flac`. Anything else raises InputError naming what the file starts with."""
    source = _readable(source, "read_audio")
    return (read_wav if _container(source, "read_audio") == "wav" else read_flac)(source)


def iter_audio(source, block_frames: int = 16000):
    """:func:`iter_wav` or :func:`iter_flac`, by the file's first bytes: ``(sample_rate, blocks)``."""
    source = _readable(source, "iter_audio")
    return (iter_wav if _container(source, "iter_audio") == "wav" else iter_flac)(source, block_frames)


# ---------------------------------------------------------------- resampler


class Resampler:
    """Streaming resampler from ``in_rate`` to ``out_rate`` Hz (libnerve's C resampler).

    Feed any slicing of a stream to :meth:`process` and end it with :meth:`flush`: the
    output is bit-identical to processing the whole stream at once, ``ceil(n * out_rate /
    in_rate)`` samples for ``n`` inputs, output sample ``k`` at time ``k / out_rate`` (the
    filter delay is compensated; see the module docstring for the filter). Equal rates are
    an exact copy. One thread at a time per resampler.

    Raises InputError for a rate outside [1, 384000] Hz; NativeError (NRV_ERR_UNSUPPORTED)
    for a downsampling ratio beyond ~2300:1.
    """

    def __init__(self, in_rate: int, out_rate: int = 16000):
        self.in_rate = _rate(in_rate, "in_rate", "Resampler")
        self.out_rate = _rate(out_rate, "out_rate", "Resampler")
        out = ffi.new("nrv_resampler_t **")
        check(lib.nrv_resampler_create(self.in_rate, self.out_rate, out))
        self._ptr = ffi.gc(out[0], lib.nrv_resampler_free)

    def _live(self):
        if self._ptr is None:
            raise _input_error("Resampler: used after close()", "NRV_ERR_INVALID_ARG")
        return self._ptr

    def info(self) -> dict:
        """The design and state: ``up``/``down`` (L, M), ``taps`` per output, ``latency`` (input
        samples of lookahead), ``table_rows``, ``interp_phases``, ``cutoff_hz``, ``passband_hz``,
        ``stopband_hz``, ``kaiser_beta``, ``design_atten_db``, ``total_in``, ``total_out``."""
        raw = ffi.new("nrv_resampler_info *")
        check(lib.nrv_resampler_info_get(self._live(), raw))
        names = ("in_rate", "out_rate", "up", "down", "taps", "table_rows", "interp_phases", "latency",
                 "cutoff_hz", "passband_hz", "stopband_hz", "kaiser_beta", "design_atten_db", "total_in",
                 "total_out")
        return {k: (float if k.endswith(("_hz", "_beta", "_db")) else int)(getattr(raw, k)) for k in names}

    @property
    def latency(self) -> int:
        """Input samples of lookahead (0 for equal rates)."""
        return self.info()["latency"]

    @property
    def taps(self) -> np.ndarray:
        """The coefficient table, float32 ``(table_rows, taps)`` (a copy): row ``p`` is the phase
        of outputs ``k`` with ``k * down % up == p``, applied to input samples
        ``k * down // up - taps/2 + 1 ... + taps/2`` (nerve.h, nrv_resampler_info)."""
        info = self.info()
        table = np.empty((info["table_rows"], info["taps"]), _F32)
        n = ffi.new("size_t *")
        ptr = ffi.from_buffer("float[]", table) if table.size else ffi.NULL
        check(lib.nrv_resampler_filter(self._live(), ptr, table.size, n))
        return table

    def process(self, x) -> np.ndarray:
        """Feeds ``x`` (mono: a 1-D float32 array is used without a copy; other dtypes and
        2-D arrays go through :func:`to_mono_float32`) and returns the output samples it
        completes (float32; possibly empty while the lookahead fills). NaN / Inf raise
        InputError and leave the stream as it was."""
        ptr = self._live()
        if isinstance(x, np.ndarray) and x.dtype == _F32 and x.ndim == 1:
            x = np.ascontiguousarray(x)
            if not np.isfinite(x).all():
                raise _nonfinite_error("Resampler.process", x, int(np.count_nonzero(~np.isfinite(x))), 1)
        else:
            x = to_mono_float32(x)
        n = int(x.shape[0])
        cap = int(lib.nrv_resampler_output_bound(ptr, n))
        out = np.empty(cap, _F32)
        got = ffi.new("size_t *")
        check(lib.nrv_resampler_process(ptr, ffi.from_buffer("float[]", x) if n else ffi.NULL, n,
                                        ffi.from_buffer("float[]", out) if cap else ffi.NULL, cap, got))
        return out[: int(got[0])]

    def flush(self) -> np.ndarray:
        """Ends the stream: returns the remaining output samples and resets, so the next
        :meth:`process` starts a new stream."""
        ptr = self._live()
        cap = int(lib.nrv_resampler_flush_count(ptr))
        out = np.empty(cap, _F32)
        got = ffi.new("size_t *")
        check(lib.nrv_resampler_flush(ptr, ffi.from_buffer("float[]", out) if cap else ffi.NULL, cap, got))
        return out[: int(got[0])]

    def reset(self) -> None:
        """Forgets the stream (its pending tail included)."""
        check(lib.nrv_resampler_reset(self._live()))

    def close(self) -> None:
        """Frees the C resampler now (idempotent)."""
        ptr, self._ptr = self._ptr, None
        if ptr is not None:
            ffi.release(ptr)

    def __enter__(self) -> "Resampler":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._ptr is None else "open"
        return f"<nerve.audio.Resampler {self.in_rate} -> {self.out_rate} Hz {state}>"


def load_audio(path_or_array, sample_rate: Optional[int] = None, target_rate: Optional[int] = 16000) -> np.ndarray:
    """Audio as float32 mono at ``target_rate`` Hz, from a WAV or FLAC file or from samples.

    Args:
        path_or_array: a WAV or FLAC file (path, bytes or binary file object; see
            :func:`read_audio`),
            or samples (anything :func:`to_mono_float32` accepts; 2-D means
            ``(frames, channels)``).
        sample_rate: the rate of the samples (required for an array); for a file, None or
            the file's own rate (a different value raises InputError rather than guessing).
        target_rate: the rate wanted (default 16000, the speech models' rate); None keeps
            the source's rate.

    Returns:
        float32 array of ``ceil(frames * target_rate / rate)`` samples.
    """
    where = "load_audio"
    if isinstance(path_or_array, (np.ndarray, list, tuple)):
        if sample_rate is None:
            raise _input_error(f"{where}: sample_rate is required for an array of samples")
        rate = _rate(sample_rate, "sample_rate", where)
        x = to_mono_float32(path_or_array)
    else:
        x, rate = read_audio(path_or_array)
        if sample_rate is not None and _rate(sample_rate, "sample_rate", where) != rate:
            raise _input_error(f"{where}: sample_rate={sample_rate} but the file's rate is {rate} Hz")
    if target_rate is None:
        return x
    target = _rate(target_rate, "target_rate", where)
    if target == rate:
        return x
    with Resampler(rate, target) as r:
        return np.concatenate([r.process(x), r.flush()])
