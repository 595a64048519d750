"""nerve.serial — a command link that delivers each command exactly once, in order, over
anything pyserial opens (a UART, a USB adapter, ``socket://``, ``rfc2217://``, ``loop://``).

    from nerve.serial import Link
    with Link("socket://127.0.0.1:7000", timeout_s=0.2, retries=5) as link:
        ack = link.send({"action": "turn", "direction": "left", "degrees": 90})
        ack.seq, ack.rtt_s, ack.attempts, ack.ok
        link.stop_now()                       # {"action": "stop"} ahead of everything queued

The far end is a :class:`LinkServer` (``nerve robot-sim`` runs one in front of a simulated
robot). Frames are built and parsed by libnerve's C codec (``nrv_frame_*``, native/src/frame.c,
the same file a microcontroller can use): COBS with 0x00 delimiters, version, sequence
number, type, length, CRC-32C. The whole protocol: docs/SERIAL.md.

* **Sender** (:class:`Link`): one command in flight at a time. Each command gets the next
  sequence number and is sent until the far end acknowledges it: again at once on a nack or
  on a garbled reply (fast retransmit), again after ``timeout_s`` of silence, at most
  ``retries`` times more (garbled frames have a separate, larger budget, ``noise_retries``),
  then :class:`nerve.LinkError` names the url, seq, attempts and the last reason. Heartbeats
  every ``heartbeat_s`` keep :attr:`Link.last_heard` fresh, so :attr:`Link.alive` turns False
  when the far end goes quiet.
* **Receiver** (:class:`LinkServer`): applies a command only if its sequence number is new
  (the first, or after the last applied one); a repeat of the last one is acknowledged again
  with the same result and not applied, so a retransmission caused by a lost ack is harmless.
  Frames it cannot read are nacked at once, which makes the sender retransmit without waiting.
* **Payload**: the command as compact JSON (``separators=(',', ':')``, UTF-8), at most 256
  bytes; a bigger or non-JSON command raises :class:`nerve.InputError` before anything is sent.

Thread safety: a Link may be shared by any number of threads. ``send`` calls queue; the one
whose turn it is owns the line until its command is acknowledged or fails. ``urgent=True``
puts a command ahead of every queued normal one (never ahead of the one already in flight:
interrupting it could apply it twice or lose it). A LinkServer runs on one thread (its own,
with ``start()``); its handler is called on that thread, one command at a time.
"""

from __future__ import annotations

import collections
import json
import math
import secrets
import select
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Deque, Dict, List, Optional, Tuple, Union
from urllib.parse import urlsplit

try:  # FIONREAD, for SocketPort.in_waiting (POSIX); elsewhere in_waiting is 0 and reads still work
    import fcntl
    import termios
except ImportError:  # pragma: no cover
    fcntl = termios = None

try:
    import serial as _pyserial  # pyserial; this module is nerve.serial, imports are absolute
except ImportError as exc:  # pragma: no cover - pyserial is a dependency of the package
    raise ImportError("nerve.serial needs pyserial: pip install 'pyserial>=3.5'") from exc

from ._native import ffi, lib
from .errors import InputError, LinkError, code, make_error

__all__ = [
    "COMMAND",
    "ACK",
    "NACK",
    "HEARTBEAT",
    "FLAG_SYN",
    "FLAG_REPLY",
    "FLAG_UNATTRIBUTED",
    "MAX_PAYLOAD",
    "MAX_FRAME",
    "Frame",
    "Rejected",
    "Decoder",
    "Ack",
    "Link",
    "LinkServer",
    "SocketPort",
    "TcpListener",
    "crc32c",
    "cobs_encode",
    "cobs_decode",
    "encode_frame",
    "encode_command",
    "parse_listen_url",
    "open_port",
]

COMMAND = int(lib.NRV_FRAME_COMMAND)
ACK = int(lib.NRV_FRAME_ACK)
NACK = int(lib.NRV_FRAME_NACK)
HEARTBEAT = int(lib.NRV_FRAME_HEARTBEAT)
FLAG_SYN = int(lib.NRV_FRAME_FLAG_SYN)
FLAG_REPLY = int(lib.NRV_FRAME_FLAG_REPLY)
FLAG_UNATTRIBUTED = int(lib.NRV_FRAME_FLAG_UNATTRIBUTED)
MAX_PAYLOAD = int(lib.NRV_FRAME_MAX_PAYLOAD)
MAX_FRAME = int(lib.NRV_FRAME_MAX_ENCODED)
_SEQ_MASK = 0xFFFFFFFF
# Written after every frame: an empty frame to any decoder. If noise hits a frame's closing
# delimiter, this one still ends the frame, which is then nacked at once instead of waiting,
# merged with the next frame, for a timeout.
_SPARE_DELIMITER = b"\0"
_TYPE_NAMES = {COMMAND: "command", ACK: "ack", NACK: "nack", HEARTBEAT: "heartbeat"}

# decoder events -> the reason a Rejected carries (= the decoder counter's name without "bad_")
_REJECT_REASONS = {
    int(lib.NRV_FRAME_BAD_OVERSIZE): "oversize",
    int(lib.NRV_FRAME_BAD_COBS): "cobs",
    int(lib.NRV_FRAME_BAD_SHORT): "short",
    int(lib.NRV_FRAME_BAD_CRC): "crc",
    int(lib.NRV_FRAME_BAD_VERSION): "version",
    int(lib.NRV_FRAME_BAD_LENGTH): "length",
    int(lib.NRV_FRAME_BAD_TYPE): "type",
}
_COUNTERS = ("bytes", "frames") + tuple("bad_" + r for r in _REJECT_REASONS.values()) + ("dropped_bytes",)
_ERR_INVALID = code("NRV_ERR_INVALID_ARG")


def _status_error(status: int, what: str):
    # frame.c stands alone (microcontrollers) and leaves nrv_last_error() untouched, so the
    # message is made here rather than by _native.check.
    return make_error(int(status), what)


# ---------------------------------------------------------------------------------- codec

def crc32c(data: bytes, crc: int = 0) -> int:
    """CRC-32C (Castagnoli) of data, continuing from crc (``crc32c(b"123456789") == 0xE3069283``)."""
    data = bytes(data)
    return int(lib.nrv_crc32c(crc & _SEQ_MASK, ffi.from_buffer("uint8_t[]", data) if data else ffi.NULL, len(data)))


def cobs_encode(data: bytes) -> bytes:
    """COBS-stuffs data (no delimiter added): the result holds no zero byte."""
    data = bytes(data)
    cap = len(data) + len(data) // 254 + 1
    out = ffi.new("uint8_t[]", cap)
    written = ffi.new("size_t *")
    src = ffi.from_buffer("uint8_t[]", data) if data else ffi.NULL
    status = lib.nrv_frame_cobs_encode(src, len(data), out, cap, written)
    if status:
        raise _status_error(status, f"cobs_encode: {len(data)} bytes could not be stuffed")
    return bytes(ffi.buffer(out, written[0]))


def cobs_decode(data: bytes) -> bytes:
    """Reverses :func:`cobs_encode`; :class:`nerve.ModelError` (NRV_ERR_FORMAT) if data is not
    valid COBS (empty, contains a zero, or a code byte runs past the end)."""
    data = bytes(data)
    cap = max(len(data), 1)
    out = ffi.new("uint8_t[]", cap)
    written = ffi.new("size_t *")
    src = ffi.from_buffer("uint8_t[]", data) if data else ffi.NULL
    status = lib.nrv_frame_cobs_decode(src, len(data), out, cap, written)
    if status:
        raise _status_error(status, f"cobs_decode: {len(data)} bytes are not valid COBS "
                                    "(empty, a zero inside, or a code byte running past the end)")
    return bytes(ffi.buffer(out, written[0]))


def encode_frame(type: int, seq: int, payload: bytes = b"", flags: int = 0) -> bytes:
    """One frame as it goes on the wire (0x00, COBS(header, payload, CRC-32C), 0x00).

    :class:`nerve.InputError` for a type outside COMMAND..HEARTBEAT, a seq outside uint32,
    flags outside a byte, or a payload over 256 bytes."""
    payload = bytes(payload)
    if type not in _TYPE_NAMES:
        raise InputError(f"encode_frame: type {type!r} is not a frame type (1 command, 2 ack, 3 nack, 4 heartbeat)",
                         _ERR_INVALID)
    if not 0 <= int(seq) <= _SEQ_MASK:
        raise InputError(f"encode_frame: seq {seq} does not fit in 32 bits", _ERR_INVALID)
    if not 0 <= int(flags) <= 255:
        raise InputError(f"encode_frame: flags {flags} do not fit in a byte", _ERR_INVALID)
    if len(payload) > MAX_PAYLOAD:
        raise InputError(f"encode_frame: payload of {len(payload)} bytes, a frame carries at most {MAX_PAYLOAD}",
                         _ERR_INVALID)
    hdr = ffi.new("nrv_frame_header *", {"version": 1, "type": type, "flags": int(flags), "seq": int(seq)})
    out = ffi.new("uint8_t[]", MAX_FRAME)
    written = ffi.new("size_t *")
    src = ffi.from_buffer("uint8_t[]", payload) if payload else ffi.NULL
    status = lib.nrv_frame_encode(hdr, src, len(payload), out, MAX_FRAME, written)
    if status:
        raise _status_error(status, f"nrv_frame_encode refused a {_TYPE_NAMES[type]} frame of {len(payload)} bytes")
    return bytes(ffi.buffer(out, written[0]))


def encode_command(command: Dict[str, Any]) -> bytes:
    """The payload of a command: compact JSON, UTF-8, at most 256 bytes (InputError otherwise)."""
    if not isinstance(command, dict):
        raise InputError(f"a command is a dict (a JSON object), not {type(command).__name__}", _ERR_INVALID)
    try:
        text = json.dumps(command, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InputError(f"the command cannot be sent as JSON: {exc}", _ERR_INVALID) from None
    data = text.encode("utf-8")
    if len(data) > MAX_PAYLOAD:
        raise InputError(f"the command is {len(data)} bytes of JSON, a frame carries at most {MAX_PAYLOAD}: "
                         f"{text[:80]}...", _ERR_INVALID)
    return data


@dataclass(frozen=True)
class Frame:
    """A decoded frame: type (COMMAND, ACK, NACK, HEARTBEAT), seq, flags, payload bytes."""

    type: int
    seq: int
    flags: int
    payload: bytes


@dataclass(frozen=True)
class Rejected:
    """A frame the decoder dropped; reason is one of oversize, cobs, short, crc, version,
    length, type (the decoder counter ``bad_<reason>`` counted it)."""

    reason: str


class Decoder:
    """The C streaming decoder: ``feed(bytes)`` returns the frames and rejections completed
    by those bytes, in order; partial frames wait for the next feed. Garbage costs only the
    frame it falls in. Not thread-safe (one reader per decoder)."""

    def __init__(self):
        self._dec = ffi.new("nrv_frame_decoder *")
        lib.nrv_frame_decoder_init(self._dec)
        self._hdr = ffi.new("nrv_frame_header *")
        self._payload = ffi.new("uint8_t[]", MAX_PAYLOAD)
        self._consumed = ffi.new("size_t *")
        self._len = ffi.new("size_t *")
        self._event = ffi.new("nrv_frame_event *")

    def feed(self, data: bytes) -> List[Union[Frame, Rejected]]:
        out: List[Union[Frame, Rejected]] = []
        n = len(data)
        if n == 0:
            return out
        buf = ffi.from_buffer("uint8_t[]", data)
        off = 0
        while off < n:
            status = lib.nrv_frame_decoder_push(self._dec, buf + off, n - off, self._consumed, self._hdr,
                                                self._payload, MAX_PAYLOAD, self._len, self._event)
            if status:  # only for bad arguments, which this wrapper never passes
                raise _status_error(status, "nrv_frame_decoder_push refused its arguments")
            off += self._consumed[0]
            event = int(self._event[0])
            if event == lib.NRV_FRAME_DECODED:
                h = self._hdr
                out.append(Frame(int(h.type), int(h.seq), int(h.flags), bytes(ffi.buffer(self._payload, self._len[0]))))
            elif event != lib.NRV_FRAME_NEED_MORE:
                out.append(Rejected(_REJECT_REASONS.get(event, f"event {event}")))
        return out

    @property
    def counters(self) -> Dict[str, int]:
        """bytes, frames, bad_oversize, bad_cobs, bad_short, bad_crc, bad_version, bad_length,
        bad_type, dropped_bytes (since creation, modulo 2**32), and rejected (their sum)."""
        c = {name: int(getattr(self._dec, name)) for name in _COUNTERS}
        c["rejected"] = sum(v for k, v in c.items() if k.startswith("bad_"))
        return c


# ---------------------------------------------------------------------------------- ports

def parse_listen_url(url: str) -> Optional[Tuple[str, int]]:
    """(host, port) for ``tcp://HOST:PORT`` or ``socket://HOST:PORT`` (port 0: any free one),
    None for other URLs (serial devices, rfc2217://, loop://)."""
    parts = urlsplit(url)
    if parts.scheme not in ("tcp", "socket"):
        return None
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is None or not parts.hostname:
        raise InputError(f"{url!r}: a listening URL is tcp://HOST:PORT (PORT 0 picks a free one)", _ERR_INVALID)
    return parts.hostname, port


class SocketPort:
    """A connected socket with the part of pyserial's Serial interface the link uses
    (read, write, in_waiting, timeout, close, name, is_open). Unlike pyserial, ``read(size)``
    returns as soon as any bytes are there (up to size), or b"" after ``timeout`` seconds; a
    closed connection raises ``serial.SerialException``, as pyserial's socket:// does."""

    def __init__(self, sock: socket.socket, name: str, timeout: float = 0.05, write_timeout: float = 2.0):
        self._sock = sock
        self.name = name
        self.timeout = timeout
        self.is_open = True
        sock.settimeout(write_timeout)  # bounds sendall; reads wait in select first
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    @property
    def in_waiting(self) -> int:
        if fcntl is None:
            return 0
        try:
            raw = fcntl.ioctl(self._sock.fileno(), termios.FIONREAD, b"\0\0\0\0")
            return struct.unpack("i", raw)[0]
        except OSError:
            return 0

    def read(self, size: int = 1) -> bytes:
        if not self.is_open:
            raise _pyserial.PortNotOpenError()
        ready, _, _ = select.select([self._sock], [], [], self.timeout)
        if not ready:
            return b""
        try:
            data = self._sock.recv(max(1, size))
        except OSError as exc:
            raise _pyserial.SerialException(f"{self.name}: read failed: {exc}") from exc
        if not data:
            raise _pyserial.SerialException(f"{self.name}: connection closed by the peer")
        return data

    def write(self, data: bytes) -> int:
        if not self.is_open:
            raise _pyserial.PortNotOpenError()
        try:
            self._sock.sendall(data)
        except OSError as exc:
            raise _pyserial.SerialException(f"{self.name}: write failed: {exc}") from exc
        return len(data)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        if self.is_open:
            self.is_open = False
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._sock.close()


class TcpListener:
    """Listens on host:port for links (pyserial's socket:// only connects, so the far end of a
    ``socket://`` link needs this). ``accept()`` gives each connection as a :class:`SocketPort`;
    ``url`` is what a :class:`Link` opens to reach it."""

    def __init__(self, host: str, port: int):
        self._sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._sock.bind((host, port))
        except OSError as exc:
            self._sock.close()
            raise LinkError(f"tcp://{host}:{port}: cannot listen: {exc}", url=f"tcp://{host}:{port}",
                            reason=str(exc)) from exc
        self._sock.listen(4)
        self.host = host
        self.port = self._sock.getsockname()[1]

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"socket://{host}:{self.port}"

    def accept(self, timeout: Optional[float] = None) -> Optional[SocketPort]:
        """The next connection, or None when timeout seconds pass without one."""
        ready, _, _ = select.select([self._sock], [], [], timeout)
        if not ready:
            return None
        conn, addr = self._sock.accept()
        return SocketPort(conn, name=f"tcp://{addr[0]}:{addr[1]}")

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> "TcpListener":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


PortLike = Any  # an object with read(size), write(data), in_waiting, timeout, close() (pyserial's Serial)


def open_port(url: Union[str, PortLike], baudrate: int = 115200, read_timeout: float = 0.05,
              write_timeout: float = 2.0) -> Tuple[PortLike, str]:
    """(port, name): ``serial.serial_for_url(url, ...)`` for a string (a device path or any
    pyserial URL), or an already open port-like object as it is (its ``timeout``, if it has
    one, is set to read_timeout so the reader thread can notice a close). LinkError if the
    port cannot be opened."""
    if not isinstance(url, str):
        if not (hasattr(url, "read") and hasattr(url, "write")):
            raise InputError(f"a link needs a URL or a port with read() and write(), not {type(url).__name__}",
                             _ERR_INVALID)
        if hasattr(url, "timeout"):
            url.timeout = read_timeout
        return url, str(getattr(url, "name", None) or type(url).__name__)
    try:
        port = _pyserial.serial_for_url(url, baudrate=baudrate, timeout=read_timeout, write_timeout=write_timeout)
    except (_pyserial.SerialException, ValueError, OSError) as exc:
        raise LinkError(f"{url}: cannot open: {exc}", url=url, reason=str(exc)) from exc
    return port, url


def _read_some(port: PortLike) -> bytes:
    """Waits up to the port's timeout for bytes, then takes what else is already there. (For
    pyserial's socket:// in_waiting is only 0 or 1, hence the loop, bounded per call.)"""
    n = getattr(port, "in_waiting", 0)
    data = port.read(n if n else 1)
    if data:
        while len(data) < 4096:
            n = getattr(port, "in_waiting", 0)
            if not n:
                break
            more = port.read(n)
            if not more:
                break
            data += more
    return data


# ---------------------------------------------------------------------------------- sender

@dataclass(frozen=True)
class Ack:
    """The far end's acknowledgement of one command.

    seq: its sequence number; rtt_s: seconds from the last transmission to the ack;
    attempts: transmissions it took (1 = no retry); elapsed_s: seconds from the first
    transmission to the ack; result: the JSON object the far end returned ({} when it said
    nothing). ``ok`` is False when the far end received the command but refused to carry it out
    (``result["rejected"]`` says why: an unknown action, a bad argument): such a command is not
    retried, it was delivered."""

    seq: int
    rtt_s: float
    attempts: int
    elapsed_s: float = 0.0
    result: Dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return "rejected" not in self.result

    @property
    def rejected(self) -> Optional[str]:
        reason = self.result.get("rejected")
        return None if reason is None else str(reason)


def _parse_result(payload: bytes) -> Dict[str, Any]:
    if not payload:
        return {}
    try:
        value = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return {"unparsed": payload.decode("utf-8", errors="replace")}
    return value if isinstance(value, dict) else {"value": value}


class _Ticket:
    __slots__ = ("urgent", "cancelled")

    def __init__(self, urgent: bool):
        self.urgent = urgent
        self.cancelled: Optional[str] = None


def _positive(name: str, value: float) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise InputError(f"{name} must be a number, not {value!r}", _ERR_INVALID) from None
    if not (v > 0 and math.isfinite(v)):
        raise InputError(f"{name} must be a positive number of seconds, not {value!r}", _ERR_INVALID)
    return v


class Link:
    """The sending end of a command link (see the module's documentation).

    url: a device (``/dev/ttyUSB0``), any pyserial URL (``socket://host:port``,
    ``rfc2217://host:port``, ``loop://``), or an open port-like object (tests).
    timeout_s: how long to wait for an ack before sending again. retries: retransmissions
    after a timeout or a nack of the command (so at most retries + 1 such attempts).
    noise_retries: retransmissions triggered by noise — the far end nacked a frame it could not
    read, or its reply arrived damaged. Those prove the line is up, only noisy (on a line that
    garbles 1 % of bytes half the 60-byte frames arrive damaged), so they have their own, larger
    budget and are sent at once, without waiting for the timeout. heartbeat_s: ping
    the far end when nothing was sent for this long (None or 0: no heartbeats). dead_after_s:
    :attr:`alive` is False once nothing was heard for this long (default 3 heartbeats plus a
    timeout). Opening fails with LinkError naming the url.
    """

    def __init__(self, url: Union[str, PortLike], baudrate: int = 115200, timeout_s: float = 0.2,
                 retries: int = 5, heartbeat_s: Optional[float] = 1.0, dead_after_s: Optional[float] = None,
                 noise_retries: int = 50):
        self.timeout_s = _positive("timeout_s", timeout_s)
        for name, value in (("retries", retries), ("noise_retries", noise_retries)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise InputError(f"{name} must be an int >= 0, not {value!r}", _ERR_INVALID)
        self.retries = retries
        self.noise_retries = noise_retries
        self.heartbeat_s = _positive("heartbeat_s", heartbeat_s) if heartbeat_s else None
        self.dead_after_s = (_positive("dead_after_s", dead_after_s) if dead_after_s is not None
                             else 3 * (self.heartbeat_s or 1.0) + self.timeout_s)
        self._port, self.url = open_port(url, baudrate, read_timeout=min(0.05, self.timeout_s / 2),
                                         write_timeout=max(1.0, 4 * self.timeout_s))
        self._decoder = Decoder()
        self._cond = threading.Condition()
        self._write_lock = threading.Lock()
        self._urgent: Deque[_Ticket] = collections.deque()
        self._normal: Deque[_Ticket] = collections.deque()
        self._busy = False
        # A random first sequence number: a restarted sender then never repeats the number
        # the receiver applied last (which it would take for a retransmission and skip).
        self._next_seq = secrets.randbits(32)
        self._synced = False  # True after the first ack: the receiver knows our numbering
        self._outstanding: Optional[int] = None
        self._reply: Optional[Tuple[str, Frame, float]] = None
        self._kick: Optional[str] = None
        self._hb_seq = 0
        self._last_heard: Optional[float] = None
        self._last_sent = 0.0
        self._closed = False
        self._broken: Optional[str] = None
        self._stats = collections.Counter()
        self._stop = threading.Event()
        self._reader = threading.Thread(target=self._read_loop, name=f"nerve-link-rx {self.url}", daemon=True)
        self._reader.start()
        self._beater = None
        if self.heartbeat_s:
            self._beater = threading.Thread(target=self._heartbeat_loop, name=f"nerve-link-hb {self.url}",
                                            daemon=True)
            self._beater.start()

    # ---- public state
    @property
    def last_heard(self) -> Optional[float]:
        """time.monotonic() of the last frame from the far end (ack, nack or heartbeat
        answer), None if nothing was heard yet."""
        return self._last_heard

    @property
    def silence_s(self) -> float:
        """Seconds since the far end was last heard (inf if never)."""
        heard = self._last_heard
        return math.inf if heard is None else time.monotonic() - heard

    @property
    def alive(self) -> bool:
        """True while the far end was heard within dead_after_s."""
        return not self._closed and self._broken is None and self.silence_s <= self.dead_after_s

    @property
    def pending(self) -> int:
        """Sends waiting for their turn (not counting the one in flight)."""
        with self._cond:
            return len(self._urgent) + len(self._normal)

    @property
    def stats(self) -> Dict[str, int]:
        """Counters: commands, acks, retransmits, timeouts, nacks, garbled (replies the decoder
        rejected), heartbeats_sent, heartbeat_replies, failures; plus the decoder's counters
        under ``decoder``."""
        with self._cond:
            s: Dict[str, Any] = dict(self._stats)
        s["decoder"] = self._decoder.counters
        return s

    # ---- sending
    def send(self, command: Dict[str, Any], urgent: bool = False, retries: Optional[int] = None) -> Ack:
        """Sends command (a dict, compact JSON of at most 256 bytes) and returns the Ack once
        the far end acknowledged it. Blocks while earlier sends are queued; ``urgent=True``
        goes ahead of all queued normal sends. ``retries`` overrides the link's (timeouts and
        nacks) for this command. InputError (nothing sent) for a command that is not a JSON object of at most
        256 bytes; LinkError after the last retry, on a port failure or when closed."""
        payload = encode_command(command)
        return self._send_payload(payload, urgent, self.retries if retries is None else retries)

    def stop_now(self, command: Optional[Dict[str, Any]] = None, retries: Optional[int] = None) -> Ack:
        """Sends command (default ``{"action": "stop"}``) ahead of everything queued and
        cancels the queued normal sends (each raises LinkError with reason "cancelled"); the
        command in flight, if any, completes first. Returns the stop's Ack."""
        payload = encode_command({"action": "stop"} if command is None else command)
        with self._cond:
            for ticket in self._normal:
                ticket.cancelled = "cancelled by stop_now"
            self._cond.notify_all()
        return self._send_payload(payload, True, self.retries if retries is None else retries)

    def _take_turn(self, urgent: bool) -> None:
        ticket = _Ticket(urgent)
        queue = self._urgent if urgent else self._normal
        with self._cond:
            queue.append(ticket)
            try:
                while True:
                    if self._closed or self._broken or ticket.cancelled:
                        reason = ticket.cancelled or self._broken or "link closed"
                        raise LinkError(f"{self.url}: command not sent: {reason}", url=self.url, reason=reason)
                    head = self._urgent[0] if self._urgent else self._normal[0]
                    if head is ticket and not self._busy:
                        self._busy = True
                        return
                    self._cond.wait()
            finally:
                queue.remove(ticket)

    def _give_turn(self) -> None:
        with self._cond:
            self._busy = False
            self._outstanding = None
            self._cond.notify_all()

    def _send_payload(self, payload: bytes, urgent: bool, retries: int) -> Ack:
        self._take_turn(urgent)
        try:
            with self._cond:
                seq = self._next_seq
                self._next_seq = (seq + 1) & _SEQ_MASK
                self._stats["commands"] += 1
            return self._deliver(seq, payload, retries)
        finally:
            self._give_turn()

    def _deliver(self, seq: int, payload: bytes, retries: int) -> Ack:
        attempts = 0
        silent = 0  # attempts that ended in a timeout or a nack of this seq
        noisy = 0   # attempts cut short by a garbled frame
        reason = "not sent"
        first = None
        while True:
            with self._cond:
                self._outstanding = seq
                self._reply = None
                self._kick = None
                flags = 0 if self._synced else FLAG_SYN
            frame = encode_frame(COMMAND, seq, payload, flags)
            sent_at = time.monotonic()
            first = sent_at if first is None else first
            self._write(frame)  # raises LinkError on a port failure
            attempts += 1
            deadline = sent_at + self.timeout_s
            with self._cond:
                if attempts > 1:
                    self._stats["retransmits"] += 1
                while True:
                    if self._closed or self._broken:
                        reason = self._broken or "link closed"
                        raise self._failure(seq, attempts, reason)
                    if self._reply is not None:
                        kind, f, at = self._reply
                        self._reply = None
                        if kind == "ack":
                            self._synced = True
                            self._stats["acks"] += 1
                            return Ack(seq, at - sent_at, attempts, at - first, _parse_result(f.payload))
                        self._stats["nacks"] += 1
                        reason = "nack: " + (f.payload.decode("utf-8", errors="replace") or "no reason given")
                        silent += 1
                        break
                    if self._kick is not None:
                        reason, self._kick = self._kick, None
                        noisy += 1
                        break
                    left = deadline - time.monotonic()
                    if left <= 0:
                        self._stats["timeouts"] += 1
                        reason = f"no ack within {self.timeout_s:g} s"
                        silent += 1
                        break
                    self._cond.wait(left)
                if silent > retries or noisy > self.noise_retries:
                    raise self._failure(seq, attempts, reason)

    def _failure(self, seq: int, attempts: int, reason: str) -> LinkError:
        self._stats["failures"] += 1
        heard = self._last_heard
        if heard is None:
            liveness = "nothing ever heard from the far end (link dead?)"
        else:
            silence = time.monotonic() - heard
            liveness = (f"far end last heard {silence:.2f} s ago"
                        + (" (link dead)" if silence > self.dead_after_s else ""))
        return LinkError(f"{self.url}: command seq {seq} not acknowledged after {attempts} attempt"
                         f"{'s' if attempts != 1 else ''} (last: {reason}); {liveness}",
                         url=self.url, seq=seq, attempts=attempts, reason=reason)

    def _write(self, frame: bytes) -> None:
        with self._write_lock:
            if self._closed:
                raise LinkError(f"{self.url}: link closed", url=self.url, reason="link closed")
            try:
                self._port.write(frame + _SPARE_DELIMITER)
            except (_pyserial.SerialException, OSError) as exc:
                self._mark_broken(f"port error: {exc}")
                raise LinkError(f"{self.url}: write failed: {exc}", url=self.url, reason=str(exc)) from exc
            self._last_sent = time.monotonic()

    def _mark_broken(self, reason: str) -> None:
        with self._cond:
            if self._broken is None:
                self._broken = reason
            self._cond.notify_all()

    # ---- background threads
    def _read_loop(self) -> None:
        while not self._stop.is_set():
            try:
                data = _read_some(self._port)
            except (_pyserial.SerialException, OSError, TypeError, AttributeError) as exc:
                # TypeError/AttributeError: pyserial closing a port under a blocked read
                if not self._stop.is_set():
                    self._mark_broken(f"port error: {exc}")
                return
            if data:
                for item in self._decoder.feed(data):
                    self._on_item(item)

    def _on_item(self, item: Union[Frame, Rejected]) -> None:
        now = time.monotonic()
        with self._cond:
            if isinstance(item, Rejected):
                self._stats["garbled"] += 1
                # Most likely our command or its ack was damaged: send again now instead of
                # waiting for the timeout (a repeat is harmless, the receiver drops it).
                if self._outstanding is not None:
                    self._kick = f"garbled reply ({item.reason})"
                    self._cond.notify_all()
                return
            if item.type == HEARTBEAT and item.flags & FLAG_REPLY:
                self._stats["heartbeat_replies"] += 1
                self._last_heard = now
            elif item.type == ACK:
                self._last_heard = now
                if item.seq == self._outstanding:
                    self._reply = ("ack", item, now)
                    self._cond.notify_all()
            elif item.type == NACK:
                self._last_heard = now
                if item.flags & FLAG_UNATTRIBUTED:
                    if self._outstanding is not None:
                        self._kick = "nack: far end could not read a frame (" + \
                            item.payload.decode("utf-8", errors="replace") + ")"
                        self._cond.notify_all()
                elif item.seq == self._outstanding:
                    self._reply = ("nack", item, now)
                    self._cond.notify_all()
            # commands and pings are the receiver's business: a link does not answer them (over
            # loop:// it hears its own frames, which must not look like a live far end)

    def _heartbeat_loop(self) -> None:
        assert self.heartbeat_s
        self._ping()
        while not self._stop.wait(self.heartbeat_s / 4):
            if time.monotonic() - self._last_sent >= self.heartbeat_s:
                self._ping()

    def _ping(self) -> None:
        with self._cond:
            seq = self._hb_seq
            self._hb_seq = (seq + 1) & _SEQ_MASK
            self._stats["heartbeats_sent"] += 1
        try:
            self._write(encode_frame(HEARTBEAT, seq))
        except LinkError:
            pass  # the reader or the next send reports the port failure

    # ---- closing
    def close(self) -> None:
        """Stops the threads and closes the port; waiting and later sends raise LinkError.
        Idempotent; safe from any thread."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
        self._stop.set()
        me = threading.current_thread()
        for t in (self._beater, self._reader):
            if t is not None and t is not me:
                t.join(timeout=5)
        with self._write_lock:
            try:
                self._port.close()
            except Exception:  # noqa: BLE001 - closing a failed port must not raise
                pass

    def __enter__(self) -> "Link":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<nerve.serial.Link {self.url} {'alive' if self.alive else 'not alive'}>"


# ---------------------------------------------------------------------------------- receiver

Handler = Callable[[Dict[str, Any], int], Optional[Dict[str, Any]]]


class LinkServer:
    """The receiving end: decodes frames from port, applies each new command once through
    ``handler(command, seq) -> result`` and acknowledges it, answers heartbeats, nacks what it
    cannot read.

    Duplicates: the server remembers the last sequence number it applied. A command with that
    number (a retransmission after a lost ack) is acknowledged again with the same result and
    not applied; one with a later number (modulo 2**32, within half the range) is applied; one
    with an earlier number is stale and acknowledged without being applied. A command flagged
    SYN (the first of a new sender) is applied unless it repeats the last number.

    handler returns the result to put in the ack (a dict, {} or None for none); a result with
    ``"rejected": reason`` tells the sender the command arrived but was refused. An exception in
    the handler becomes such a rejection (the command counts as delivered, it is not retried).
    A command whose payload is not a JSON object is nacked with the reason and not applied.

    Thread safety: ``serve()`` runs the loop on the calling thread, ``start()`` on a thread of
    its own; the handler runs on that thread. ``close()`` may be called from any thread.
    """

    def __init__(self, port: Union[str, PortLike], handler: Handler, baudrate: int = 115200,
                 dead_after_s: float = 3.5):
        self.handler = handler
        self.dead_after_s = dead_after_s
        self._port, self.url = open_port(port, baudrate, read_timeout=0.05)
        self._decoder = Decoder()
        self._last_seq: Optional[int] = None
        self._last_ack = b""
        self._last_heard: Optional[float] = None
        self._stats = collections.Counter()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.ended: Optional[str] = None  # why serve() returned

    @property
    def last_heard(self) -> Optional[float]:
        """time.monotonic() of the last good frame from the sender, None if none yet."""
        return self._last_heard

    @property
    def alive(self) -> bool:
        """True while the sender was heard (a command or a heartbeat) within dead_after_s."""
        heard = self._last_heard
        return heard is not None and time.monotonic() - heard <= self.dead_after_s

    @property
    def stats(self) -> Dict[str, Any]:
        """applied, duplicates, stale, acks_sent, nacks_sent, heartbeats_answered, bad_payloads,
        handler_errors, and the decoder's counters under ``decoder``."""
        s: Dict[str, Any] = dict(self._stats)
        s["decoder"] = self._decoder.counters
        return s

    def serve(self) -> str:
        """Serves until close() or until the port fails / the peer disconnects; returns why."""
        try:
            while not self._stop.is_set():
                data = _read_some(self._port)
                if data:
                    for item in self._decoder.feed(data):
                        self._on_item(item)
            self.ended = "closed"
        except (_pyserial.SerialException, OSError, TypeError, AttributeError) as exc:
            self.ended = "closed" if self._stop.is_set() else f"port error: {exc}"
        return self.ended

    def start(self) -> "LinkServer":
        """Runs serve() on a daemon thread; returns self."""
        self._thread = threading.Thread(target=self.serve, name=f"nerve-link-server {self.url}", daemon=True)
        self._thread.start()
        return self

    def join(self, timeout: Optional[float] = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def close(self) -> None:
        """Stops serving and closes the port. Idempotent."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        try:
            self._port.close()
        except Exception:  # noqa: BLE001
            pass

    def __enter__(self) -> "LinkServer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _send(self, type_: int, seq: int, payload: bytes = b"", flags: int = 0) -> None:
        self._port.write(encode_frame(type_, seq, payload, flags) + _SPARE_DELIMITER)

    def _on_item(self, item: Union[Frame, Rejected]) -> None:
        if isinstance(item, Rejected):
            # The sender retransmits at once on this instead of waiting for its timeout.
            self._stats["nacks_sent"] += 1
            self._send(NACK, 0, item.reason.encode(), FLAG_UNATTRIBUTED)
            return
        self._last_heard = time.monotonic()
        if item.type == HEARTBEAT:
            if not item.flags & FLAG_REPLY:
                self._stats["heartbeats_answered"] += 1
                self._send(HEARTBEAT, item.seq, b"", FLAG_REPLY)
            return
        if item.type != COMMAND:
            return  # acks and nacks are not for a receiver
        seq = item.seq
        verdict = self._classify(seq, item.flags)
        if verdict == "duplicate":
            self._stats["duplicates"] += 1
            self._stats["acks_sent"] += 1
            self._send(ACK, seq, self._last_ack)
            return
        if verdict == "stale":
            self._stats["stale"] += 1
            self._stats["acks_sent"] += 1
            self._send(ACK, seq, b'{"stale":true}')
            return
        try:
            command = json.loads(item.payload.decode("utf-8"))
            if not isinstance(command, dict):
                raise ValueError(f"a JSON {type(command).__name__}, not an object")
        except (UnicodeDecodeError, ValueError) as exc:
            self._stats["bad_payloads"] += 1
            self._stats["nacks_sent"] += 1
            self._send(NACK, seq, f"payload is not a JSON object: {exc}".encode()[:MAX_PAYLOAD])
            return
        try:
            result = self.handler(command, seq) or {}
        except Exception as exc:  # noqa: BLE001 - the handler's failure is reported to the sender
            self._stats["handler_errors"] += 1
            result = {"rejected": f"handler error: {type(exc).__name__}: {exc}"}
        ack = self._result_payload(result)
        self._last_seq = seq
        self._last_ack = ack
        self._stats["applied"] += 1
        self._stats["acks_sent"] += 1
        self._send(ACK, seq, ack)

    def _classify(self, seq: int, flags: int) -> str:
        last = self._last_seq
        if last is None:
            return "new"
        if seq == last:
            return "duplicate"
        if flags & FLAG_SYN:
            return "new"
        return "new" if (seq - last) & _SEQ_MASK < 0x80000000 else "stale"

    @staticmethod
    def _result_payload(result: Dict[str, Any]) -> bytes:
        if not result:
            return b""
        try:
            data = json.dumps(result, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")
        except (TypeError, ValueError) as exc:
            data = json.dumps({"note": f"result not JSON: {exc}"[:200]}, separators=(",", ":")).encode()
        if len(data) > MAX_PAYLOAD:  # keep the verdict, drop the detail (ASCII: 200 chars fit)
            rejected = result.get("rejected") if isinstance(result, dict) else None
            note = {"rejected": str(rejected)[:200]} if rejected else {"note": f"result of {len(data)} bytes omitted"}
            data = json.dumps(note, separators=(",", ":")).encode("ascii")
        return data
