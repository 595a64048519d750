"""``nerve robot``: speech in, structured commands out over a serial link.

    nerve robot --port socket://127.0.0.1:5760 --wav command.wav
    arecord -f S16_LE -r 16000 -c 1 | nerve robot --port /dev/ttyUSB0 --raw - --rate 16000

Audio (a WAV file, or raw signed 16-bit little-endian PCM on stdin) -> the recogniser,
constrained to the grammar's words -> the grammar's parser -> :class:`nerve.commands.CommandRouter`
-> :class:`nerve.serial.Link`. "stop"/"halt" go out from the first partial that holds them,
ahead of anything queued; other commands from finals. One line per step, with its latency.
"""

from __future__ import annotations

import json
import sys
from typing import Iterable, Optional, TextIO

import numpy as np

from .errors import InputError

__all__ = ["run"]

BLOCK_S = 0.1  # audio is fed in 100 ms blocks, as a microphone delivers it


def _raw_blocks(stream, rate: int, channels: int) -> Iterable[np.ndarray]:
    frame_bytes = 2 * channels
    block = max(1, int(rate * BLOCK_S)) * frame_bytes
    while True:
        raw = stream.read(block)
        if not raw:
            return
        raw = raw[: len(raw) - len(raw) % frame_bytes]
        yield np.frombuffer(raw, "<i2").astype(np.float32) / 32768.0


def _rechunk(blocks: Iterable[np.ndarray], n: int) -> Iterable[np.ndarray]:
    """The samples of blocks in pieces of n (the last may be shorter)."""
    pending = np.zeros(0, np.float32)
    for block in blocks:
        pending = np.concatenate([pending, block]) if pending.size else block
        while pending.size >= n:
            yield pending[:n]
            pending = pending[n:]
    if pending.size:
        yield pending


def run(port: str, wav: Optional[str] = None, raw: Optional[TextIO] = None, rate: int = 16000, channels: int = 1,
        grammar: Optional[str] = None, model: str = "moonshine-base", precision: str = "fp32",
        timeout_s: float = 0.2, retries: int = 5, as_json: bool = False, out: TextIO = sys.stdout) -> int:
    """Runs the pipeline on one audio source until it ends; returns the exit status (0 when
    every command was acknowledged)."""
    from . import asr, audio
    from .commands import CommandRouter, Grammar
    from .serial import Link

    if (wav is None) == (raw is None):
        raise InputError("nerve robot: give exactly one audio source (--wav FILE or --raw -)")
    g = Grammar.load(grammar)
    rec = asr.Recognizer(model=model, words=g.words(), precision=precision)
    if wav is not None:
        rate, big = audio.iter_audio(wav)  # WAV or FLAC, read in large blocks, fed in 100 ms ones
        blocks = _rechunk(big, max(1, int(rate * BLOCK_S)))
        channels = 1  # iter_audio downmixes
    else:
        blocks = _raw_blocks(raw, rate, channels)

    def show(d) -> None:
        if d.status not in ("acked", "failed"):
            return
        if as_json:
            print(json.dumps(d.to_json(), default=str), file=out, flush=True)
            return
        lat = d.latencies_ms()
        extra = f" ({d.error})" if d.error is not None else ""
        print(f"{d.source:7} {d.text!r} -> {json.dumps(d.command)} {d.status}{extra}  "
              + "  ".join(f"{k} {v:.1f} ms" for k, v in lat.items() if v is not None), file=out, flush=True)

    failed = 0
    with Link(port, timeout_s=timeout_s, retries=retries) as link:
        with CommandRouter(g, link, on_update=show) as router:
            stream = rec.create_stream(sample_rate=rate, channels=channels)

            def feed(events) -> None:
                for ev in events:
                    if not router.feed(ev) and ev.type == "final" and not as_json:
                        print(f"final   {ev.text!r} -> no command", file=out, flush=True)

            for block in blocks:
                feed(stream.accept_waveform(block))
            feed(stream.finish())
        failed = sum(d.status == "failed" for d in router.dispatches)
    return 1 if failed else 0
