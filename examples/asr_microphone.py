"""Live speech to text from a microphone (or any raw 16-bit PCM stream) with nerve.

    arecord -f S16_LE -r 16000 -c 1 | python examples/asr_microphone.py
    python examples/asr_microphone.py --rate 48000 --channels 2 < capture.raw

Reads raw signed 16-bit little-endian samples from stdin in 100 ms blocks and prints
partial results while you speak and the final text once you pause (0.6 s). Any rate and
channel count: the stream resamples and downmixes. Add --words FILE to restrict the output
to a command vocabulary (see examples/command_words.txt).
"""

import argparse
import sys

import numpy as np

import nerve


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=int, default=16000)
    ap.add_argument("--channels", type=int, default=1)
    ap.add_argument("--words")
    args = ap.parse_args()
    words = None
    if args.words:
        words = [w for line in open(args.words) if not line.lstrip().startswith("#") for w in line.split()]
    rec = nerve.asr.Recognizer(words=words, partial_ms=320)
    stream = rec.create_stream(sample_rate=args.rate, channels=args.channels)
    block = args.rate // 10 * args.channels * 2
    source = sys.stdin.buffer
    pending = b""
    while True:
        data = source.read(block)
        if not data:
            break
        pending += data
        usable = len(pending) // (2 * args.channels) * 2 * args.channels
        samples, pending = np.frombuffer(pending[:usable], np.int16), pending[usable:]
        for ev in stream.accept_waveform(samples):
            show(ev)
    for ev in stream.finish():
        show(ev)
    stream.close()


def show(ev) -> None:
    if ev.type == "partial":
        print(f"\r  ... {ev.text:70.70}", end="", flush=True)
    else:
        print(f"\r[{ev.start_s:7.2f}] {ev.text:70}", flush=True)


if __name__ == "__main__":
    main()
