"""nerve.serial: the frame codec through cffi (round trip, counters, garbage survival), the
link's retry / duplicate / heartbeat rules, the robot simulator and `nerve robot-sim`.

The must-hold check: over a channel that garbles 1 % of the bytes and drops 0.5 % of the
frames in both directions, 10,000 commands reach the simulator exactly once and in order.
Random inputs come from numpy generators with fixed seeds, so a failure reproduces.
"""

import json
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import serial  # pyserial

import nerve
from nerve import serial as link_mod
from nerve.robot_sim import RobotSim, serve
from nerve.serial import (ACK, COMMAND, FLAG_REPLY, FLAG_SYN, HEARTBEAT, MAX_FRAME, MAX_PAYLOAD, NACK, Decoder,
                          Frame, Link, LinkServer, Rejected, TcpListener, cobs_decode, cobs_encode, crc32c,
                          encode_command, encode_frame)

# ------------------------------------------------------------------ an in-process noisy line

class _Channel:
    """One direction of a line. Bytes are cut into frames at the 0x00 delimiters as they are
    written; each frame is dropped with probability drop, and each byte of the others replaced
    by a different random value with probability corrupt. Thread-safe."""

    def __init__(self, seed, corrupt=0.0, drop=0.0):
        self.rng = np.random.default_rng(seed)
        self.corrupt = corrupt
        self.drop = drop
        self.buf = bytearray()
        self.pending = bytearray()
        self.cond = threading.Condition()
        self.frames = self.dropped = self.garbled_bytes = 0
        self.closed = False

    def put(self, data):
        with self.cond:
            self.pending += data
            end = self.pending.rfind(0)
            if end < 0:
                return
            chunk = bytes(self.pending[:end + 1])
            del self.pending[:end + 1]
            for piece in chunk.split(b"\0")[:-1]:
                if not piece:  # a bare delimiter
                    self.buf += b"\0"
                    continue
                self.frames += 1
                if self.drop and self.rng.random() < self.drop:
                    self.dropped += 1
                    continue
                frame = np.frombuffer(piece + b"\0", dtype=np.uint8).copy()
                if self.corrupt:
                    hit = self.rng.random(frame.size) < self.corrupt
                    n = int(hit.sum())
                    if n:
                        frame[hit] ^= self.rng.integers(1, 256, n, dtype=np.uint8)
                        self.garbled_bytes += n
                self.buf += frame.tobytes()
            self.cond.notify_all()

    def get(self, size, timeout):
        with self.cond:
            if not self.buf and not self.closed:
                self.cond.wait(timeout)
            if self.closed and not self.buf:
                raise serial.SerialException("channel closed")
            data = bytes(self.buf[:size])
            del self.buf[:size]
            return data


class _NoisyPort:
    """The pyserial-like end of a pair of channels."""

    def __init__(self, rx, tx, name):
        self.rx, self.tx, self.name = rx, tx, name
        self.timeout = 0.05
        self.is_open = True

    @property
    def in_waiting(self):
        return len(self.rx.buf)

    def read(self, size=1):
        return self.rx.get(size, self.timeout)

    def write(self, data):
        self.tx.put(bytes(data))
        return len(data)

    def close(self):
        self.is_open = False
        with self.tx.cond:
            self.tx.closed = True
            self.tx.cond.notify_all()


def _line(seed, corrupt=0.0, drop=0.0):
    """(link end, simulator end, (link->sim channel, sim->link channel))."""
    there = _Channel(seed, corrupt, drop)
    back = _Channel(seed + 1, corrupt, drop)
    return _NoisyPort(back, there, "noisy-link"), _NoisyPort(there, back, "noisy-sim"), (there, back)


def _read_log(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


# ------------------------------------------------------------------ codec

def test_crc32c_check_value():
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(b"56789", crc32c(b"1234")) == 0xE3069283
    assert crc32c(b"") == 0


def test_cobs_round_trip_and_errors():
    rng = np.random.default_rng(11)
    for n in list(range(0, 300)) + [508, 509, 1000]:
        for data in (rng.integers(0, 256, n, dtype=np.uint8).tobytes(), bytes(n), bytes([7]) * n):
            stuffed = cobs_encode(data)
            assert b"\0" not in stuffed and len(stuffed) <= n + n // 254 + 1
            assert cobs_decode(stuffed) == data
    assert cobs_encode(b"\x11\x22\x00\x33") == b"\x03\x11\x22\x02\x33"
    for bad in (b"", b"\x05\x11", b"\x02\x00"):
        with pytest.raises(nerve.ModelError, match="not valid COBS"):
            cobs_decode(bad)


def test_frame_round_trip_every_length():
    rng = np.random.default_rng(12)
    dec = Decoder()
    stream = bytearray()
    sent = []
    for n in range(MAX_PAYLOAD + 1):
        payload = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        ftype = int(rng.integers(1, 5))
        seq = int(rng.integers(0, 2**32))
        flags = int(rng.integers(0, 256))
        wire = encode_frame(ftype, seq, payload, flags)
        assert wire[0] == 0 and wire[-1] == 0 and b"\0" not in wire[1:-1] and len(wire) <= MAX_FRAME
        assert dec.feed(wire) == [Frame(ftype, seq, flags, payload)]
        stream += wire
        sent.append(Frame(ftype, seq, flags, payload))
    # all of them back to back, in random slices, through a fresh decoder
    dec = Decoder()
    got, off = [], 0
    while off < len(stream):
        step = int(rng.integers(1, 600))
        got += dec.feed(bytes(stream[off:off + step]))
        off += step
    assert got == sent
    c = dec.counters
    assert c["frames"] == MAX_PAYLOAD + 1 and c["rejected"] == 0 and c["bytes"] == len(stream)


def test_encode_refuses_bad_frames():
    with pytest.raises(nerve.InputError, match="at most 256"):
        encode_frame(COMMAND, 1, bytes(MAX_PAYLOAD + 1))
    with pytest.raises(nerve.InputError, match="not a frame type"):
        encode_frame(9, 1, b"")
    with pytest.raises(nerve.InputError, match="32 bits"):
        encode_frame(COMMAND, 2**32, b"")
    assert len(encode_command({"a": "é"})) == len('{"a":"é"}'.encode())
    with pytest.raises(nerve.InputError, match="300 bytes of JSON"):
        encode_command({"action": "x" * 287})
    with pytest.raises(nerve.InputError, match="not list"):
        encode_command([1, 2])
    with pytest.raises(nerve.InputError, match="cannot be sent as JSON"):
        encode_command({"x": float("nan")})


def _craft(version=1, ftype=COMMAND, length=None, payload=b"abc", crc_ok=True):
    """A wire frame with any header fields: what the encoder would refuse to make."""
    length = len(payload) if length is None else length
    raw = bytes([version, ftype, 0]) + (5).to_bytes(4, "little") + length.to_bytes(2, "little") + payload
    crc = (crc32c(raw) + (0 if crc_ok else 1)) & 0xFFFFFFFF
    return b"\0" + cobs_encode(raw + crc.to_bytes(4, "little")) + b"\0"


@pytest.mark.parametrize("wire, reason", [
    (_craft(version=2), "version"),
    (_craft(crc_ok=False), "crc"),
    (_craft(length=4), "length"),
    (_craft(length=0xFFFF), "length"),
    (_craft(payload=bytes(257)), "length"),
    (_craft(ftype=0), "type"),
    (_craft(ftype=7), "type"),
    (b"\0" + cobs_encode(bytes(12)) + b"\0", "short"),
    (b"\0\x09\x01\x02\0", "cobs"),
    (b"\0" + b"\x55" * 400 + b"\0", "oversize"),
], ids=["version", "crc", "length-long", "length-65535", "payload-257", "type-0", "type-7", "short", "cobs",
        "oversize"])
def test_decoder_rejects_and_counts(wire, reason):
    dec = Decoder()
    assert dec.feed(wire) == [Rejected(reason)]
    c = dec.counters
    assert c["bad_" + reason] == 1 and c["rejected"] == 1 and c["frames"] == 0
    assert c["dropped_bytes"] == len(wire) - 1  # all but the leading delimiter
    good = encode_frame(ACK, 42, b"ok")
    assert dec.feed(good) == [Frame(ACK, 42, 0, b"ok")]


def test_decoder_survives_garbage():
    """Random bytes, truncated frames, oversize runs, flipped bits, spliced frames: every
    rejection is counted, nothing is decoded that was not sent, and the good frame after each
    piece of garbage comes through."""
    rng = np.random.default_rng(13)
    dec = Decoder()
    events = 0
    for r in range(3000):
        payload = rng.integers(0, 256, int(rng.integers(0, MAX_PAYLOAD + 1)), dtype=np.uint8).tobytes()
        wire = bytearray(encode_frame(COMMAND, r, payload))
        kind = r % 5
        if kind == 0:
            junk = rng.integers(0, 256, int(rng.integers(0, 1500)), dtype=np.uint8).tobytes()
        elif kind == 1:
            junk = bytes(wire[:int(rng.integers(0, len(wire) - 1))])
        elif kind == 2:
            junk = rng.integers(1, 256, int(rng.integers(272, 2000)), dtype=np.uint8).tobytes()
        elif kind == 3:
            for _ in range(int(rng.integers(1, 4))):
                wire[int(rng.integers(1, len(wire) - 1))] ^= 1 << int(rng.integers(0, 8))
            junk = bytes(wire)
        else:
            cut = int(rng.integers(1, len(wire) - 1))
            junk = bytes(wire[:cut]) + bytes(wire[int(rng.integers(cut, len(wire))):])
        got = dec.feed(junk)
        events += len(got)
        for item in got:  # a spliced frame can be whole again by chance; nothing else decodes
            assert isinstance(item, Rejected) or (item.seq == r and item.type == COMMAND), (r, kind, item)
        tag = r.to_bytes(4, "little")
        after = dec.feed(encode_frame(ACK, 0xC0FFEE00 + r, tag))
        events += len(after)
        assert after[-1] == Frame(ACK, 0xC0FFEE00 + r, 0, tag), (r, kind)
    c = dec.counters
    assert c["frames"] + c["rejected"] == events
    assert min(c["bad_crc"], c["bad_oversize"], c["bad_cobs"]) > 0


# ------------------------------------------------------------------ the link

def test_command_too_large_raises_before_sending():
    there = _Channel(1)
    port = _NoisyPort(_Channel(2), there, "quiet")
    with Link(port, heartbeat_s=None) as link:
        with pytest.raises(nerve.InputError, match="at most 256"):
            link.send({"action": "say", "text": "x" * 300})
        with pytest.raises(nerve.InputError):
            link.send("stop")
    assert there.frames == 0 and not there.buf


def test_duplicates_are_acked_again_not_applied():
    """Drives a LinkServer frame by frame: a retransmission is re-acked with the same
    result and not applied; a later number is applied; an earlier one is stale."""
    link_end, sim_end, _ = _line(3)
    applied = []
    server = LinkServer(sim_end, lambda cmd, seq: applied.append((seq, cmd["n"])) or {"n": cmd["n"]}).start()
    dec = Decoder()

    def exchange(wire):
        link_end.write(wire)
        deadline = time.monotonic() + 5
        got = []
        while not got and time.monotonic() < deadline:
            got = dec.feed(link_end.read(4096))
        return got

    def cmd(seq, n, flags=0):
        return encode_frame(COMMAND, seq, encode_command({"n": n}), flags)

    try:
        assert exchange(cmd(10, 1, FLAG_SYN)) == [Frame(ACK, 10, 0, b'{"n":1}')]
        assert exchange(cmd(10, 1, FLAG_SYN)) == [Frame(ACK, 10, 0, b'{"n":1}')]  # retransmission
        assert exchange(cmd(11, 2)) == [Frame(ACK, 11, 0, b'{"n":2}')]
        assert exchange(cmd(11, 2)) == [Frame(ACK, 11, 0, b'{"n":2}')]
        assert exchange(cmd(10, 1)) == [Frame(ACK, 10, 0, b'{"stale":true}')]
        assert exchange(cmd(0xFFFFFFFF, 3, FLAG_SYN)) == [Frame(ACK, 0xFFFFFFFF, 0, b'{"n":3}')]  # new sender
        assert exchange(cmd(0, 4)) == [Frame(ACK, 0, 0, b'{"n":4}')]  # across the wrap
        assert exchange(encode_frame(HEARTBEAT, 77)) == [Frame(HEARTBEAT, 77, FLAG_REPLY, b"")]
        nack = exchange(encode_frame(COMMAND, 1, b"not json"))
        assert nack[0].type == NACK and nack[0].seq == 1 and b"not a JSON object" in nack[0].payload
        garbled = exchange(_craft(crc_ok=False))
        assert garbled[0].type == NACK and garbled[0].flags & link_mod.FLAG_UNATTRIBUTED and garbled[0].payload == b"crc"
    finally:
        server.close()
    assert applied == [(10, 1), (11, 2), (0xFFFFFFFF, 3), (0, 4)]
    s = server.stats
    assert s["applied"] == 4 and s["duplicates"] == 2 and s["stale"] == 1 and s["heartbeats_answered"] == 1
    assert s["decoder"]["bad_crc"] == 1


def test_server_survives_every_kind_of_garbage_then_applies_the_next_command():
    link_end, sim_end, _ = _line(8)
    applied = []
    server = LinkServer(sim_end, lambda cmd, seq: applied.append(cmd["n"]) or {}).start()
    rng = np.random.default_rng(14)
    good = encode_frame(COMMAND, 3, encode_command({"n": 0}), FLAG_SYN)
    garbage = [
        rng.integers(0, 256, 5000, dtype=np.uint8).tobytes(),           # random bytes
        good[:len(good) // 2],                                           # truncated frame
        b"\0" + b"\x7f" * 3000 + b"\0",                                   # oversize run
        _craft(length=0xFFFF), _craft(payload=bytes(257)),               # lengths that lie
        _craft(crc_ok=False), _craft(version=9), _craft(ftype=200),      # CRC, version, type
        b"\0\x09\x01\x02\0", b"\0" + cobs_encode(bytes(5)) + b"\0",       # bad COBS, too short
    ]
    for junk in garbage:
        link_end.write(junk)
    with Link(link_end, timeout_s=0.2, heartbeat_s=None) as link:
        assert link.send({"n": 1}).attempts >= 1
    server.close()
    assert applied == [1]
    bad = server.stats["decoder"]
    assert min(bad["bad_oversize"], bad["bad_length"], bad["bad_crc"], bad["bad_version"], bad["bad_type"],
               bad["bad_cobs"], bad["bad_short"]) >= 1


def test_must_hold_10000_commands_exactly_once_in_order_over_a_noisy_line(tmp_path):
    """1 % of bytes garbled and 0.5 % of frames dropped, both ways: every one of 10,000
    commands is applied exactly once, in order (the simulator's log is the witness)."""
    link_end, sim_end, (there, back) = _line(2024, corrupt=0.01, drop=0.005)
    log = tmp_path / "robot.jsonl"
    sim = RobotSim(log)
    server = LinkServer(sim_end, sim.apply).start()
    n = 10_000
    t0 = time.monotonic()
    attempts = []
    # the default retry budgets; a short timeout, since drops are the only losses that wait
    # for it (garbled frames are nacked, and retransmitted at once)
    with Link(link_end, timeout_s=0.02, heartbeat_s=0.25) as link:
        for i in range(n):
            ack = link.send({"action": "move", "direction": "forward", "meters": 0.01, "n": i})
            assert ack.ok and ack.attempts >= 1
            attempts.append(ack.attempts)
        stats = link.stats
    elapsed = time.monotonic() - t0
    server.close()
    sim.close()
    lines = _read_log(log)
    order = [line["command"]["n"] for line in lines]
    assert order == list(range(n)), "a command was lost, repeated or reordered"
    assert server.stats["applied"] == n
    assert abs(sim.x - 0.01 * n) < 1e-6
    # the noise really was there, and the protocol really had to work around it
    assert there.dropped > 0 and back.dropped > 0 and there.garbled_bytes > 0 and back.garbled_bytes > 0
    assert server.stats["duplicates"] > 0 and stats["retransmits"] > 0
    assert server.stats["decoder"]["rejected"] > 0 and stats["decoder"]["rejected"] > 0
    print(f"\n10,000 commands in {elapsed:.1f} s: {sum(attempts)} transmissions, max {max(attempts)} for one; "
          f"link {stats}; server {server.stats}; dropped {there.dropped}+{back.dropped} frames, "
          f"garbled {there.garbled_bytes}+{back.garbled_bytes} bytes")


def test_link_error_names_url_seq_attempts_and_reason():
    """Over loop:// nobody answers (the link hears only its own frames, which it does not take
    for a far end): LinkError after retries + 1 attempts, and the link is not alive."""
    with Link("loop://", timeout_s=0.02, retries=2, heartbeat_s=0.05) as link:
        with pytest.raises(nerve.LinkError) as info:
            link.send({"action": "stop"})
        assert not link.alive and link.last_heard is None
    err = info.value
    assert isinstance(err, nerve.NerveError)
    assert err.url == "loop://" and err.attempts == 3 and err.seq is not None
    text = str(err)
    assert "loop://" in text and f"seq {err.seq}" in text and "3 attempts" in text and "no ack within 0.02 s" in text
    assert "nothing ever heard" in text


def test_loop_url_carries_frames():
    port = serial.serial_for_url("loop://", timeout=0.2)
    try:
        frames = [encode_frame(COMMAND, i, encode_command({"n": i})) for i in range(20)]
        port.write(b"".join(frames))
        dec, got = Decoder(), []
        while len(got) < 20:
            data = port.read(4096)
            assert data, "loop:// lost bytes"
            got += dec.feed(data)
        assert [json.loads(f.payload)["n"] for f in got] == list(range(20))
    finally:
        port.close()


def test_open_failure_names_the_url():
    with pytest.raises(nerve.LinkError, match="/nonexistent/tty.*cannot open"):
        Link("/nonexistent/tty")


def test_socket_url_against_the_sim_on_a_tcp_port(tmp_path):
    log = tmp_path / "sim.jsonl"
    stop = threading.Event()
    out = _Capture()
    t = threading.Thread(target=serve, args=("tcp://127.0.0.1:0",), kwargs={"log": log, "stop": stop, "out": out},
                         daemon=True)
    t.start()
    url = out.wait_for_url()
    try:
        with Link(url, timeout_s=0.5, heartbeat_s=0.1) as link:
            assert link.send({"action": "turn", "direction": "left", "degrees": 90}).ok
            ack = link.send({"action": "move", "direction": "forward", "meters": 2})
            assert ack.ok and ack.attempts == 1 and 0 < ack.rtt_s < 0.5
            for i in range(200):
                assert link.send({"action": "speed", "value": i % 101}).ok
            bad = link.send({"action": "fly"})
            assert not bad.ok and "unknown action" in bad.rejected
            status = link.send({"action": "status"}).result["state"]
            assert status["x"] == pytest.approx(0, abs=1e-9) and status["y"] == pytest.approx(2)
            deadline = time.monotonic() + 2
            while not link.alive and time.monotonic() < deadline:
                time.sleep(0.01)
            assert link.alive and link.stats["heartbeat_replies"] >= 1
    finally:
        stop.set()
        t.join(5)
    lines = _read_log(log)
    assert len(lines) == 204
    assert lines[1]["pose"] == {"x": 0.0, "y": 2.0, "heading": 90.0} and lines[1]["result"] == "applied"
    assert lines[-2]["result"] == "rejected" and "unknown action" in lines[-2]["reason"]


def test_dead_link_is_detected_and_send_fails():
    link_end, sim_end, (there, back) = _line(5)
    server = LinkServer(sim_end, lambda cmd, seq: {}).start()
    with Link(link_end, timeout_s=0.03, retries=2, heartbeat_s=0.03, dead_after_s=0.15) as link:
        assert link.send({"action": "stop"}).ok
        deadline = time.monotonic() + 2
        while not link.alive and time.monotonic() < deadline:
            time.sleep(0.005)
        assert link.alive
        back.drop = 1.0  # the far end goes silent (the line stays up)
        deadline = time.monotonic() + 2
        while link.alive and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not link.alive and link.silence_s > 0.15
        with pytest.raises(nerve.LinkError, match=r"after 3 attempts .*link dead"):
            link.send({"action": "stop"})
    server.close()


def test_urgent_goes_ahead_of_queued_commands_and_stop_now_cancels_them():
    link_end, sim_end, _ = _line(6)
    gate = threading.Event()
    applied = []

    def handler(cmd, seq):
        if cmd.get("hold"):
            gate.wait(5)  # the robot is busy: everything behind queues up
        applied.append(cmd["n"])
        return {}

    server = LinkServer(sim_end, handler).start()
    results = {}
    with Link(link_end, timeout_s=1.0, retries=3, heartbeat_s=None) as link:
        def send(n, hold=False, urgent=False):
            try:
                results[n] = link.send({"n": n, "hold": hold}, urgent=urgent)
            except nerve.LinkError as exc:
                results[n] = exc

        threads = [threading.Thread(target=send, args=(0,), kwargs={"hold": True})]
        threads[0].start()
        _wait(lambda: link.stats.get("commands", 0) == 1)
        for n in (1, 2, 3):
            threads.append(threading.Thread(target=send, args=(n,)))
            threads[-1].start()
            _wait(lambda n=n: link.pending == n)
        urgent = threading.Thread(target=send, args=(99,), kwargs={"urgent": True})
        urgent.start()
        _wait(lambda: link.pending == 4)
        gate.set()
        for t in threads + [urgent]:
            t.join(10)
        assert applied == [0, 99, 1, 2, 3]

        # stop_now: the queued normal sends are cancelled, the stop goes through
        gate.clear()
        threads = [threading.Thread(target=send, args=(10,), kwargs={"hold": True})]
        threads[0].start()
        _wait(lambda: link.stats.get("commands", 0) == 6)
        for n in (11, 12):
            threads.append(threading.Thread(target=send, args=(n,)))
            threads[-1].start()
        _wait(lambda: link.pending == 2)
        stopper = threading.Thread(target=lambda: results.__setitem__("stop", link.stop_now({"n": 100})))
        stopper.start()
        _wait(lambda: link.pending == 1)  # the two normal sends are gone, the stop waits
        gate.set()
        for t in threads + [stopper]:
            t.join(10)
    server.close()
    assert applied[5:] == [10, 100]
    assert results["stop"].ok
    for n in (11, 12):
        assert isinstance(results[n], nerve.LinkError) and "cancelled by stop_now" in str(results[n])


def test_link_closes_cleanly_and_refuses_sends_after():
    link_end, sim_end, _ = _line(7)
    server = LinkServer(sim_end, lambda cmd, seq: {}).start()
    before = threading.active_count()
    link = Link(link_end, timeout_s=0.1, heartbeat_s=0.02)
    with link:
        assert link.send({"action": "lights", "state": "on"}).ok
    assert threading.active_count() == before
    link.close()  # idempotent
    with pytest.raises(nerve.LinkError, match="closed"):
        link.send({"action": "stop"})
    server.close()


# ------------------------------------------------------------------ the simulator

def test_robot_sim_applies_commands(tmp_path):
    with RobotSim(tmp_path / "log.jsonl", clock=lambda: 1000.0) as sim:
        assert sim.apply({"action": "turn", "direction": "left", "degrees": 90}, 1) == {}
        sim.apply({"action": "move", "direction": "forward", "meters": 2}, 2)
        assert sim.pose == {"x": 0.0, "y": 2.0, "heading": 90.0}
        sim.apply({"action": "rotate", "direction": "right", "degrees": 30}, 3)
        assert sim.heading == pytest.approx(60)
        sim.apply({"action": "home"}, 4)
        sim.apply({"action": "move", "direction": "back", "centimeters": 50}, 5)
        assert sim.pose == {"x": -0.5, "y": 0.0, "heading": 0.0}
        sim.apply({"action": "speed", "value": 10}, 6)
        sim.apply({"action": "move", "direction": "forward", "seconds": 2}, 7)  # 10 % of 1 m/s
        assert sim.x == pytest.approx(-0.3)
        sim.apply({"action": "gripper", "state": "open"}, 8)
        sim.apply({"action": "lights", "state": "on"}, 9)
        sim.apply({"action": "arm", "state": "up"}, 10)
        sim.apply({"action": "move", "direction": "forward"}, 11)
        assert sim.moving == "forward"
        sim.apply({"action": "halt"}, 12)
        assert sim.moving is None
        assert (sim.gripper, sim.lights, sim.arm, sim.speed) == ("open", "on", "up", 10)
        assert "unknown action" in sim.apply({"action": "fly"}, 13)["rejected"]
        assert "outside" in sim.apply({"action": "turn", "direction": "left", "degrees": -5}, 14)["rejected"]
        assert "number" in sim.apply({"action": "move", "meters": "far"}, 15)["rejected"]
        sim.apply({"action": "pause"}, 16)
        assert "paused" in sim.apply({"action": "turn", "direction": "left"}, 17)["rejected"]
        assert sim.apply({"action": "status"}, 18)["state"]["paused"] is True
        assert (sim.applied, sim.rejected) == (14, 4)
    lines = _read_log(tmp_path / "log.jsonl")
    assert len(lines) == 18 and [line["seq"] for line in lines] == list(range(1, 19))
    assert lines[1] == {"seq": 2, "time": 1000.0, "command": {"action": "move", "direction": "forward", "meters": 2},
                        "result": "applied", "pose": {"x": 0.0, "y": 2.0, "heading": 90.0},
                        "state": lines[1]["state"]}
    assert lines[12]["result"] == "rejected" and lines[12]["reason"] == "unknown action 'fly'"


def test_cli_robot_sim_writes_its_log(tmp_path):
    log = tmp_path / "cli.jsonl"
    # the environment as it is: the nerve this pytest imports (installed, or PYTHONPATH=sdk with
    # NERVE_LIBRARY set) is the one the subprocess imports
    proc = subprocess.Popen([sys.executable, "-m", "nerve.cli", "robot-sim", "--listen", "tcp://127.0.0.1:0",
                             "--log", str(log), "--once"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        first = proc.stdout.readline()
        assert "listening on socket://127.0.0.1:" in first, first + proc.stderr.read()
        url = first.split("listening on ")[1].strip()
        with Link(url, timeout_s=1.0) as link:
            link.send({"action": "turn", "direction": "left", "degrees": 90})
            link.send({"action": "move", "direction": "forward", "meters": 2})
            link.send({"action": "gripper", "state": "open"})
        assert proc.wait(20) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    lines = _read_log(log)
    assert [line["command"]["action"] for line in lines] == ["turn", "move", "gripper"]
    assert lines[-1]["pose"] == {"x": 0.0, "y": 2.0, "heading": 90.0} and lines[-1]["state"]["gripper"] == "open"


def test_listen_url_forms():
    assert link_mod.parse_listen_url("tcp://127.0.0.1:7000") == ("127.0.0.1", 7000)
    assert link_mod.parse_listen_url("socket://localhost:0") == ("localhost", 0)
    assert link_mod.parse_listen_url("/dev/ttyUSB0") is None
    assert link_mod.parse_listen_url("rfc2217://host:2217") is None
    with pytest.raises(nerve.InputError, match="tcp://HOST:PORT"):
        link_mod.parse_listen_url("tcp://nohost")
    with TcpListener("127.0.0.1", 0) as listener:
        assert listener.url.startswith("socket://127.0.0.1:") and listener.port > 0
        assert listener.accept(timeout=0.01) is None


# ------------------------------------------------------------------ helpers



class _Capture:
    """A file-like `out` for serve(): hands the first URL it prints to the test."""

    def __init__(self):
        self.lines = []
        self.got = threading.Event()

    def write(self, text):
        self.lines.append(text)
        if "listening on" in text:
            self.got.set()

    def flush(self):
        pass

    def wait_for_url(self):
        assert self.got.wait(10), self.lines
        line = next(line for line in self.lines if "listening on" in line)
        return line.split("listening on ")[1].strip()


def _wait(cond, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.002)
