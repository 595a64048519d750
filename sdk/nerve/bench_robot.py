"""``nerve bench robot``: the robot link and the speech-to-robot pipeline, on loopback, in one
process.

1. **Link round trip.** A :class:`nerve.robot_sim.RobotSim` served by
   :func:`nerve.robot_sim.serve` on ``tcp://127.0.0.1:0`` (the ``nerve robot-sim`` code, on a
   thread), and a :class:`nerve.serial.Link` on ``socket://127.0.0.1:PORT`` with its default
   settings (timeout 0.2 s, 5 retries, heartbeats every second), as ``nerve robot`` opens it.
   ``Link.send()`` of N commands, one at a time (stop-and-wait), each timed from the call to
   its return with the ack: median, p99, max, commands per second. Three paths: direct; through
   this module's TCP proxy with no noise (the cost of the extra hop); and through the proxy
   garbling 1 % of the bytes and dropping 0.5 % of the frames in each direction (the cost of
   the retries: retransmissions and timeouts per command). Every command must be acked, and the
   simulator must have applied exactly N (none lost, none twice).
2. **Recogniser final -> ack.** The real pipeline of ``nerve robot``:
   ``nerve.asr.Recognizer(words=grammar.words())`` -> :class:`nerve.commands.CommandRouter` ->
   the Link -> the simulator, over the example WAVs (examples/audio/), fed in 100 ms blocks at
   the pace a microphone delivers them, each followed by 1 s of silence (a live microphone does
   not stop at the end of the command, so the endpointer closes the segment as it would live,
   not the end of the file). For every Dispatch with source "final" that was acked:
   ``latencies_ms()["total"]`` (the final event reached the router -> the ack). Because audio
   is fed in real time, stream time maps onto the wall clock (stream time t = t0 + t), so also:
   **speech end -> ack**, from the moment the last spoken sample of the segment would have left
   the microphone to the ack (the examples are padded with exact digital silence, so the end of
   speech is read off the file, independently of the VAD), and **segment end -> ack** from the
   VAD's end of the segment (``Dispatch.audio_end_s``: silero's end plus 200 ms padding).
   With ``realtime=False`` the audio is fed as fast as it is recognised and these two are not
   measured (stream time is then not wall time).
3. **"stop" from the first partial that holds it -> ack.** The same passes, on
   robot_stop_44k1_stereo_u8.wav and halt_48k_f32.wav (partials every 320 ms, the default):
   the Dispatch with source "partial" (urgent), its total latency; where in the stream the
   partial fired against the end of the speech and of the VAD segment; and the speech end ->
   ack time. A recording in which no "stop"/"halt" is heard is reported as such.

Every WAV is streamed once per repeat; the first creation of the recogniser (compiling or
loading its plans) and one warm-up pass are not timed. There are no thresholds: the command
reports. Percentiles are numpy's (linear interpolation) over the pooled samples.
"""

from __future__ import annotations

import functools
import json
import os
import select
import socket
import statistics
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .bench import example_audio_dir, format_table, machine

__all__ = ["run", "format_report", "NoisyProxy", "FINAL_WAVS", "STOP_WAVS"]

FINAL_WAVS = ("go_forward_two_meters_8k_s16.wav", "halt_48k_f32.wav", "open_the_gripper_22k05_s24.wav",
              "robot_stop_44k1_stereo_u8.wav", "turn_left_ninety_degrees_16k_s16.wav",
              "two_commands_11k025_s16.wav")
STOP_WAVS = ("robot_stop_44k1_stereo_u8.wav", "halt_48k_f32.wav")
BLOCK_S = 0.1            # as nerve.robot: a microphone delivers 100 ms blocks
TRAILING_SILENCE_S = 1.0  # > the endpointer's 600 ms: the segment closes as it would live
NOISE_CORRUPT = 0.01     # the noisy line: 1 % of bytes garbled ...
NOISE_DROP = 0.005       # ... 0.5 % of frames dropped, each direction
_SILENCE_GAP_S = 0.15    # exact-zero runs this long separate spoken parts of an example
_SPEECH_END_SLACK_S = 0.3  # silero may close a segment a little before a quiet last sound
# A realistic mix of what the grammar produces; every one is valid for the simulator.
COMMANDS: Tuple[Dict[str, Any], ...] = (
    {"action": "turn", "direction": "left", "degrees": 90},
    {"action": "move", "direction": "forward", "meters": 0.5},
    {"action": "speed", "value": 10},
    {"action": "gripper", "state": "open"},
    {"action": "lights", "state": "on"},
    {"action": "move", "direction": "backward", "meters": 0.5},
    {"action": "turn", "direction": "right", "degrees": 90},
    {"action": "gripper", "state": "close"},
)


# ------------------------------------------------------------------------- statistics

def _stats(values_ms: Sequence[float]) -> Optional[Dict[str, float]]:
    """n, median, p99, max, min of millisecond samples; None when there are none."""
    if not values_ms:
        return None
    a = np.asarray(values_ms, dtype=np.float64)
    return {"n": int(a.size), "median_ms": float(np.median(a)), "p99_ms": float(np.percentile(a, 99)),
            "max_ms": float(a.max()), "min_ms": float(a.min())}


# ------------------------------------------------------------------------- the simulator

class _Out:
    """serve()'s stdout: catches the "listening on URL" line."""

    def __init__(self):
        self.url: Optional[str] = None
        self.ready = threading.Event()
        self.lines: List[str] = []

    def write(self, text: str) -> None:
        for line in text.splitlines():
            self.lines.append(line)
            if "listening on " in line and self.url is None:
                self.url = line.split("listening on ", 1)[1].strip()
                self.ready.set()

    def flush(self) -> None:
        pass


class _Simulator:
    """A RobotSim behind ``nerve robot-sim``'s serve() on a free local port, on a thread."""

    def __init__(self):
        from .robot_sim import RobotSim, serve

        self.sim = RobotSim()
        self._stop = threading.Event()
        self._out = _Out()
        self._thread = threading.Thread(target=serve, args=("tcp://127.0.0.1:0",), name="bench-robot-sim",
                                        kwargs={"stop": self._stop, "out": self._out, "sim": self.sim}, daemon=True)
        self._thread.start()
        if not self._out.ready.wait(10) or self._out.url is None:
            raise RuntimeError(f"the simulator did not start listening: {self._out.lines}")
        self.url: str = self._out.url

    @property
    def received(self) -> int:
        return self.sim.applied + self.sim.rejected

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)


# ------------------------------------------------------------------------- the noisy proxy

class NoisyProxy:
    """A TCP proxy between a Link and a LinkServer that damages what it forwards, frame by frame.

    Each direction is cut into frames at the 0x00 delimiters as bytes arrive; a frame is dropped
    with probability ``drop``, and each byte of a kept frame (its closing delimiter included) is
    replaced by a different random value with probability ``corrupt``. Bare delimiters pass.
    Seeded: the same seed damages the same frames. ``url`` is what a Link opens; each accepted
    connection gets its own upstream connection to ``upstream`` (host, port)."""

    def __init__(self, upstream: Tuple[str, int], corrupt: float = 0.0, drop: float = 0.0, seed: int = 0):
        self.upstream, self.corrupt, self.drop = upstream, float(corrupt), float(drop)
        self._seed = seed
        self._listen = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listen.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listen.bind(("127.0.0.1", 0))
        self._listen.listen(4)
        self.url = f"socket://127.0.0.1:{self._listen.getsockname()[1]}"
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._socks: List[socket.socket] = []
        self._threads: List[threading.Thread] = []
        self.counts = {"frames": 0, "dropped": 0, "garbled_frames": 0, "garbled_bytes": 0}
        self._acceptor = threading.Thread(target=self._accept_loop, name="bench-proxy-accept", daemon=True)
        self._acceptor.start()

    def _accept_loop(self) -> None:
        n = 0
        while not self._stop.is_set():
            ready, _, _ = select.select([self._listen], [], [], 0.1)
            if not ready:
                continue
            try:
                down, _ = self._listen.accept()
                up = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                continue
            for s in (down, up):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                s.settimeout(None)
            with self._lock:
                self._socks += [down, up]
            for src, dst, k in ((down, up, 0), (up, down, 1)):
                rng = np.random.default_rng([self._seed, n, k])
                t = threading.Thread(target=self._pump, args=(src, dst, rng), name="bench-proxy-pump", daemon=True)
                t.start()
                self._threads.append(t)
            n += 1

    def _pump(self, src: socket.socket, dst: socket.socket, rng: np.random.Generator) -> None:
        pending = bytearray()
        try:
            while not self._stop.is_set():
                ready, _, _ = select.select([src], [], [], 0.1)
                if not ready:
                    continue
                data = src.recv(65536)
                if not data:
                    break
                pending += data
                end = pending.rfind(0)
                if end < 0:
                    continue  # no frame complete yet
                chunk = bytes(pending[:end + 1])
                del pending[:end + 1]
                out = self._damage(chunk, rng)
                if out:
                    dst.sendall(out)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def _damage(self, chunk: bytes, rng: np.random.Generator) -> bytes:
        out = bytearray()
        frames = dropped = garbled_frames = garbled_bytes = 0
        for piece in chunk.split(b"\0")[:-1]:
            if not piece:
                out += b"\0"
                continue
            frames += 1
            if self.drop and rng.random() < self.drop:
                dropped += 1
                continue
            frame = np.frombuffer(piece + b"\0", dtype=np.uint8).copy()
            if self.corrupt:
                hit = rng.random(frame.size) < self.corrupt
                k = int(hit.sum())
                if k:
                    frame[hit] ^= rng.integers(1, 256, k, dtype=np.uint8)
                    garbled_frames += 1
                    garbled_bytes += k
            out += frame.tobytes()
        with self._lock:
            c = self.counts
            c["frames"] += frames
            c["dropped"] += dropped
            c["garbled_frames"] += garbled_frames
            c["garbled_bytes"] += garbled_bytes
        return bytes(out)

    def close(self) -> None:
        self._stop.set()
        self._acceptor.join(5)
        with self._lock:
            socks = list(self._socks)
        for s in socks:
            try:
                s.close()
            except OSError:
                pass
        for t in self._threads:
            t.join(5)
        self._listen.close()

    def __enter__(self) -> "NoisyProxy":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _host_port(url: str) -> Tuple[str, int]:
    from .serial import parse_listen_url

    where = parse_listen_url(url)
    assert where is not None, url
    return where


# ------------------------------------------------------------------------- 1. link round trip

def _bench_link(sim: _Simulator, path: str, url: str, n: int, warmup: int = 20) -> Dict[str, Any]:
    from .serial import Link

    times: List[float] = []
    acked = ok = 0
    with Link(url) as link:  # the defaults nerve robot uses
        for i in range(warmup):
            link.send(COMMANDS[i % len(COMMANDS)])
        before_stats, before_received = link.stats, sim.received
        t0 = time.perf_counter()
        for i in range(n):
            t = time.perf_counter()
            ack = link.send(COMMANDS[i % len(COMMANDS)])
            times.append((time.perf_counter() - t) * 1e3)
            acked += 1
            ok += ack.ok
        elapsed = time.perf_counter() - t0
        after = link.stats
        settings = {"timeout_s": link.timeout_s, "retries": link.retries}
    applied = sim.received - before_received

    def delta(key: str) -> int:
        return int(after.get(key, 0)) - int(before_stats.get(key, 0))

    row = {"path": path, "url": url, "n": n, "acked": acked, "ok": ok, "applied": applied,
           **_stats(times), "commands_per_s": n / elapsed if elapsed > 0 else None, "seconds": elapsed,
           "retransmits": delta("retransmits"), "timeouts": delta("timeouts"), "nacks": delta("nacks"),
           "garbled": delta("garbled"), **settings}
    row["retransmits_per_command"] = row["retransmits"] / n if n else 0.0
    return row


def bench_link(n: int = 1000, seed: int = 0) -> Dict[str, Any]:
    """Part 1: N commands direct, through a clean proxy, and through the noisy proxy."""
    sim = _Simulator()
    try:
        rows = [_bench_link(sim, "direct", sim.url, n)]
        upstream = _host_port(sim.url)
        for path, corrupt, drop in (("proxy, clean", 0.0, 0.0),
                                    (f"proxy, {NOISE_CORRUPT:.0%} bytes, {NOISE_DROP:.1%} frames", NOISE_CORRUPT,
                                     NOISE_DROP)):
            with NoisyProxy(upstream, corrupt=corrupt, drop=drop, seed=seed) as proxy:
                row = _bench_link(sim, path, proxy.url, n)
            row["corrupt"], row["drop"], row["proxy"] = corrupt, drop, dict(proxy.counts)
            rows.append(row)
        rows[0]["corrupt"], rows[0]["drop"], rows[0]["proxy"] = 0.0, 0.0, None
    finally:
        sim.close()
    return {"n": n, "timeout_s": rows[0]["timeout_s"], "retries": rows[0]["retries"], "rows": rows}


# ------------------------------------------------------------------------- 2, 3. speech -> robot

def _speech_parts(x: np.ndarray, rate: int) -> List[Tuple[float, float]]:
    """(start_s, end_s) of the spoken parts of an example: runs of non-zero samples, split where
    exact digital silence lasts at least _SILENCE_GAP_S (the examples are padded with zeros)."""
    nz = np.flatnonzero(x != 0)
    if nz.size == 0:
        return []
    cuts = np.flatnonzero(np.diff(nz) > _SILENCE_GAP_S * rate)
    starts = [nz[0]] + [nz[c + 1] for c in cuts]
    ends = [nz[c] + 1 for c in cuts] + [nz[-1] + 1]
    return [(float(s) / rate, float(e) / rate) for s, e in zip(starts, ends)]


def _speech_end(parts: List[Tuple[float, float]], start_s: float, end_s: float) -> Optional[float]:
    """The end of the last spoken part inside the VAD segment [start_s, end_s] (segments are
    padded, so a part normally ends before the segment does). None when speech goes on well
    past the segment (a split of a long utterance): that segment has no end of speech."""
    inside = [e for s, e in parts if s < end_s and e > start_s]
    if not inside or max(inside) > end_s + _SPEECH_END_SLACK_S:
        return None
    return max(inside)


def _stream_wav(rec, grammar, link, path: Path, realtime: bool) -> Dict[str, Any]:
    """One pass of a WAV through recogniser -> router -> link, paced like a microphone when
    realtime. Returns the dispatches, the events and t0 (perf_counter at stream time 0)."""
    from . import audio
    from .commands import CommandRouter

    x, rate = audio.read_audio(str(path))
    block = max(1, int(round(rate * BLOCK_S)))
    silence = np.zeros(block, np.float32)
    blocks = [x[i:i + block] for i in range(0, len(x), block)]
    blocks += [silence] * int(round(TRAILING_SILENCE_S / BLOCK_S))
    events = []
    router = CommandRouter(grammar, link).start()  # clock: perf_counter
    stream = rec.create_stream(sample_rate=rate)
    try:
        t0 = time.perf_counter()
        fed = 0
        for b in blocks:
            fed += len(b)
            if realtime:  # the block is there once its last sample was captured
                wait = t0 + fed / rate - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)
            for ev in stream.accept_waveform(b):
                events.append(ev)
                router.feed(ev)
        for ev in stream.finish():
            events.append(ev)
            router.feed(ev)
    finally:
        router.close()
        stream.close()
    return {"dispatches": router.dispatches, "events": events, "t0": t0,
            "parts": _speech_parts(x, rate), "audio_s": len(x) / rate}


def bench_speech(repeat: int = 5, wavs: Sequence[str] = FINAL_WAVS, stop_wavs: Sequence[str] = STOP_WAVS,
                 realtime: bool = True, model: str = "moonshine-base", precision: str = "fp32",
                 audio_dir: Optional[Path] = None) -> Dict[str, Any]:
    """Parts 2 and 3: every WAV of wavs and stop_wavs streamed once per repeat."""
    from . import asr
    from .commands import Grammar
    from .serial import Link

    folder = Path(audio_dir) if audio_dir is not None else Path(example_audio_dir())
    names = list(dict.fromkeys(list(wavs) + list(stop_wavs)))
    grammar = Grammar.load()
    t = time.perf_counter()
    rec = asr.Recognizer(model=model, words=grammar.words(), precision=precision)  # compiles/loads once
    load_s = time.perf_counter() - t
    sim = _Simulator()
    finals: Dict[str, List[Dict[str, Any]]] = {n: [] for n in wavs}
    heard: Dict[str, Dict[str, Any]] = {n: {"texts": {}, "duplicates": 0} for n in wavs}
    stops: Dict[str, List[Dict[str, Any]]] = {n: [] for n in stop_wavs}
    not_acked: List[Dict[str, Any]] = []
    try:
        with Link(sim.url) as link:
            _stream_wav(rec, grammar, link, folder / names[0], realtime=False)  # warm-up, not timed
            for _ in range(repeat):
                for name in names:
                    p = _stream_wav(rec, grammar, link, folder / name, realtime)
                    _collect(name, p, realtime, finals.get(name), stops.get(name), not_acked)
                    if name in heard:
                        _count_heard(heard[name], p)
    finally:
        sim.close()
    return {"model": model, "precision": precision, "recognizer_load_s": load_s, "repeat": repeat,
            "realtime": realtime, "block_ms": BLOCK_S * 1e3, "trailing_silence_s": TRAILING_SILENCE_S,
            "wavs": list(wavs), "stop_wavs": list(stop_wavs), "final": _summarise_finals(finals, heard, realtime),
            "stop": _summarise_stops(stops, realtime), "not_acked": not_acked}


def _collect(name: str, p: Dict[str, Any], realtime: bool, finals: Optional[list], stops: Optional[list],
             not_acked: list) -> None:
    t0, parts = p["t0"], p["parts"]
    seg_span = {ev.segment: (ev.start_s, ev.end_s) for ev in p["events"] if ev.type == "final"}
    seg_compute = {ev.segment: ev.compute_ms for ev in p["events"] if ev.type == "final"}
    for d in p["dispatches"]:
        if d.status == "duplicate":
            continue  # a stop already sent from a partial: the final rightly does not send it again
        if d.status != "acked":
            not_acked.append({"wav": name, **d.to_json()})
            continue
        span = seg_span.get(d.segment)
        speech_end = _speech_end(parts, *span) if span else None
        rec = {"text": d.text, "command": d.command, "segment": d.segment, "total_ms": d.latencies_ms()["total"],
               "link_ms": d.latencies_ms()["link"], "recognition_ms": seg_compute.get(d.segment),
               "segment_end_s": span[1] if span else None,
               "speech_end_s": speech_end}
        if realtime:
            rec["segment_end_to_ack_ms"] = ((d.acked - (t0 + span[1])) * 1e3) if span else None
            rec["speech_end_to_ack_ms"] = ((d.acked - (t0 + speech_end)) * 1e3) if speech_end is not None else None
        if d.source == "final" and finals is not None:
            finals.append(rec)
    if stops is None:
        return
    # the first safety dispatch of the pass: from a partial if one held the stop
    safety = [d for d in p["dispatches"] if d.urgent and d.status == "acked"]
    if not safety:
        heard = [ev.text for ev in p["events"] if ev.type == "final"]
        stops.append({"heard": False, "finals": heard})
        return
    d = safety[0]
    partial = next((ev for ev in p["events"] if ev.type == "partial" and ev.text == d.text
                    and ev.segment == d.segment and ev.end_s == d.audio_end_s), None)
    span = seg_span.get(d.segment)
    speech_end = _speech_end(parts, *span) if span else None
    entry = {"heard": True, "source": d.source, "text": d.text, "total_ms": d.latencies_ms()["total"],
             "link_ms": d.latencies_ms()["link"], "fired_at_s": d.audio_end_s,
             "partial_compute_ms": partial.compute_ms if (partial is not None and d.source == "partial") else None,
             "segment_end_s": span[1] if span else None, "speech_end_s": speech_end}
    if realtime and speech_end is not None:
        entry["speech_end_to_ack_ms"] = (d.acked - (t0 + speech_end)) * 1e3
    stops.append(entry)


def _count_heard(acc: Dict[str, Any], p: Dict[str, Any]) -> None:
    """What the finals of a pass said (with or without a command in it), and the safety
    commands a final did not send again because a partial had sent them."""
    for ev in p["events"]:
        if ev.type == "final":
            acc["texts"][ev.text] = acc["texts"].get(ev.text, 0) + 1
    acc["duplicates"] += sum(d.source == "final" and d.status == "duplicate" for d in p["dispatches"])


def _summarise_finals(finals: Dict[str, List[Dict[str, Any]]], heard: Dict[str, Dict[str, Any]],
                      realtime: bool) -> Dict[str, Any]:
    every = [r for rs in finals.values() for r in rs]
    out: Dict[str, Any] = {
        "total": _stats([r["total_ms"] for r in every]),
        "link": _stats([r["link_ms"] for r in every]),
        # what comes before the router: recognising the segment once the endpointer closed it
        "recognition": _stats([r["recognition_ms"] for r in every if r["recognition_ms"] is not None]),
        "per_wav": {name: {"commands": [r["command"] for r in rs], "heard": heard[name]["texts"],
                           "duplicates": heard[name]["duplicates"], "total": _stats([r["total_ms"] for r in rs])}
                    for name, rs in finals.items()},
    }
    if realtime:
        out["speech_end_to_ack"] = _stats([r["speech_end_to_ack_ms"] for r in every
                                           if r.get("speech_end_to_ack_ms") is not None])
        out["segment_end_to_ack"] = _stats([r["segment_end_to_ack_ms"] for r in every
                                            if r.get("segment_end_to_ack_ms") is not None])
        out["audio_end_note"] = None
    else:
        out["speech_end_to_ack"] = out["segment_end_to_ack"] = None
        out["audio_end_note"] = ("not measured: audio was fed faster than real time, so stream time is not "
                                 "wall-clock time")
    return out


def _median_of(items: List[Dict[str, Any]], key: str) -> Optional[float]:
    values = [s.get(key) for s in items]
    return statistics.median(values) if values and None not in values else None


def _summarise_stops(stops: Dict[str, List[Dict[str, Any]]], realtime: bool) -> Dict[str, Any]:
    per_wav = {}
    for name, passes in stops.items():
        heard = [s for s in passes if s["heard"]]
        from_partial = [s for s in heard if s["source"] == "partial"]
        med = functools.partial(_median_of, from_partial)
        per_wav[name] = {
            "passes": len(passes), "heard": len(heard), "from_partial": len(from_partial),
            "texts": sorted({s["text"] for s in heard}),
            "finals_when_not_heard": sorted({t for s in passes if not s["heard"] for t in s["finals"]}),
            "total": _stats([s["total_ms"] for s in from_partial]),
            "speech_end_to_ack": _stats([s["speech_end_to_ack_ms"] for s in from_partial
                                         if s.get("speech_end_to_ack_ms") is not None]) if realtime else None,
            "partial_compute_ms": med("partial_compute_ms"),
            "fired_at_s": med("fired_at_s"), "speech_end_s": med("speech_end_s"),
            "segment_end_s": med("segment_end_s"),
        }
    every = [s for ps in stops.values() for s in ps if s["heard"] and s["source"] == "partial"]
    return {"total": _stats([s["total_ms"] for s in every]), "per_wav": per_wav}


# ------------------------------------------------------------------------- run / report

def run(repeat: Optional[int] = None, quick: bool = False, n: Optional[int] = None,
        wavs: Sequence[str] = FINAL_WAVS, stop_wavs: Sequence[str] = STOP_WAVS, realtime: bool = True,
        model: str = "moonshine-base", precision: str = "fp32", seed: int = 0) -> Dict[str, Any]:
    """Runs the three parts; returns a dict (see format_report). n: link commands per path
    (default 1000, 200 with quick); repeat: passes over the WAVs (default 5, 2 with quick)."""
    repeat = max(1, int(repeat if repeat is not None else (2 if quick else 5)))
    n = max(1, int(n if n is not None else (200 if quick else 1000)))
    started = time.perf_counter()
    load_start = os.getloadavg()
    link = bench_link(n, seed=seed)
    speech = bench_speech(repeat, wavs, stop_wavs, realtime=realtime, model=model, precision=precision)
    return {"machine": machine(), "date": time.strftime("%Y-%m-%d"), "quick": bool(quick), "repeat": repeat,
            "loadavg_start": list(load_start), "loadavg_end": list(os.getloadavg()), "link": link,
            "speech": speech, "seconds": time.perf_counter() - started}


def _ms(v: Optional[float]) -> str:
    return "" if v is None else f"{v:.2f}" if v < 10 else f"{v:.1f}"


def _row(label: str, s: Optional[Dict[str, float]]) -> List[str]:
    if s is None:
        return [label, "0", "", "", "", ""]
    return [label, str(s["n"]), _ms(s["median_ms"]), _ms(s["p99_ms"]), _ms(s["max_ms"]), _ms(s["min_ms"])]


def format_report(result: Dict[str, Any]) -> str:
    """The human-readable report of run()'s result."""
    mach, link, sp = result["machine"], result["link"], result["speech"]
    la = result["loadavg_start"]
    lines = [
        f"nerve {mach['nerve_version']} bench robot -- loopback, one process"
        + (" (quick)" if result["quick"] else ""),
        f"machine: {mach['cpu_model']}, {mach['cores']} logical cores, {mach['arch']}; load average at start "
        f"{la[0]:.2f} {la[1]:.2f} {la[2]:.2f}, at end {result['loadavg_end'][0]:.2f}",
        "",
        f"1. Link.send() -> ack, socket://127.0.0.1 to nerve robot-sim's server (RobotSim) on a thread; "
        f"{link['n']} commands per path, stop-and-wait, Link defaults (timeout {link['timeout_s']:g} s, "
        f"{link['retries']} retries)",
    ]
    table = []
    for r in link["rows"]:
        table.append([r["path"], f"{r['acked']}/{r['n']}", str(r["applied"]), _ms(r["median_ms"]), _ms(r["p99_ms"]),
                      _ms(r["max_ms"]), f"{r['commands_per_s']:.0f}", f"{r['retransmits_per_command']:.3f}",
                      str(r["timeouts"])])
    lines.append(format_table(["path", "acked", "applied", "median ms", "p99 ms", "max ms", "cmd/s", "retx/cmd",
                               "timeouts"], table, align="lrrrrrrrr"))
    noisy = link["rows"][-1].get("proxy")
    if noisy:
        lines.append(f"noisy proxy: {noisy['frames']} frames, {noisy['dropped']} dropped, {noisy['garbled_frames']} "
                     f"garbled ({noisy['garbled_bytes']} bytes)")
    pace = ("fed at real-time pace" if sp["realtime"] else "fed as fast as recognised")
    lines += [
        "",
        f"2./3. speech -> robot: {sp['model']} {sp['precision']}, Recognizer(words=grammar.words()) -> "
        f"CommandRouter -> Link -> sim; 100 ms blocks {pace}, +{sp['trailing_silence_s']:g} s silence per WAV; "
        f"{sp['repeat']} passes; recogniser load {sp['recognizer_load_s']:.1f} s (not timed)",
    ]
    fin, stop = sp["final"], sp["stop"]
    table = [_row("final -> ack (router heard -> ack)", fin["total"]),
             _row("  of which link (sent -> ack)", fin["link"]),
             _row("(before it: the final's recognition)", fin["recognition"])]
    if fin["speech_end_to_ack"] is not None:
        table.append(_row("speech end -> ack (final)", fin["speech_end_to_ack"]))
        table.append(_row("VAD segment end -> ack (final)", fin["segment_end_to_ack"]))
    table.append(_row('"stop" first partial -> ack', stop["total"]))
    lines.append(format_table(["measure", "n", "median ms", "p99 ms", "max ms", "min ms"], table, align="lrrrrr"))
    if fin["audio_end_note"]:
        lines.append(f"audio end -> ack: {fin['audio_end_note']}")
    lines.append("")
    lines.append("finals per WAV (what the finals said, in how many passes; commands acked per pass):")
    for name, w in fin["per_wav"].items():
        tot = w["total"]
        per_pass = len(w["commands"]) / max(1, sp["repeat"])
        said = "; ".join(f"{t!r} x{k}" for t, k in w["heard"].items()) or "nothing"
        lines.append(f"  {name}: {said} -> {per_pass:g} command(s)"
                     + (f", final -> ack median {_ms(tot['median_ms'])} ms" if tot else "")
                     + (f" ({w['duplicates']} stop(s) already sent from a partial)" if w["duplicates"] else ""))
    lines.append('"stop" per WAV (stream time: s from the start of the file):')
    for name, w in stop["per_wav"].items():
        if not w["from_partial"]:
            why = (f"heard {w['finals_when_not_heard']}" if w["finals_when_not_heard"] else "no command heard")
            src = "" if not w["heard"] else f" (a stop was heard only in the final {w['heard']}x)"
            lines.append(f"  {name}: no stop from a partial in {w['passes']} passes; {why}{src}")
            continue
        tot = w["total"]
        s = (f"  {name}: from a partial in {w['from_partial']}/{w['passes']} passes ({w['texts']}): partial -> ack "
             f"median {_ms(tot['median_ms'])} ms, max {_ms(tot['max_ms'])} ms; the partial fired at "
             f"{w['fired_at_s']:.3f} s, its recognition took {_ms(w['partial_compute_ms'])} ms; speech ended at "
             f"{w['speech_end_s']:.3f} s, the VAD segment at {w['segment_end_s']:.3f} s")
        if w["speech_end_to_ack"]:
            e = w["speech_end_to_ack"]
            s += f"; speech end -> ack median {_ms(e['median_ms'])} ms, max {_ms(e['max_ms'])} ms"
        lines.append(s)
    if sp["not_acked"]:
        lines.append(f"NOT ACKED: {len(sp['not_acked'])} dispatches: "
                     + "; ".join(json.dumps(d, default=str) for d in sp["not_acked"][:5]))
    lines.append(f"total {result['seconds']:.1f} s")
    return "\n".join(lines)
