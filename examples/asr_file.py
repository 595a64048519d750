"""Transcribe recordings with nerve: Moonshine run by nerve's own engine behind silero VAD.

    python examples/asr_file.py [FILE.wav|FILE.flac ...] [--words examples/command_words.txt]

Without files it reads the example commands in examples/audio/. The model is fetched once
with `nerve models fetch moonshine-base` (make demo / make test do it); nothing is downloaded
while this runs.
"""

import argparse
import glob
import os
import time

import nerve


def main() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="*")
    ap.add_argument("--words", help="a file of allowed words (the robot's vocabulary)")
    args = ap.parse_args()
    files = args.files or sorted(glob.glob(os.path.join(here, "audio", "*.wav")) +
                                 glob.glob(os.path.join(here, "audio", "*.flac")))
    words = None
    if args.words:  # one or more words per line; lines starting with '#' are comments
        words = [w for line in open(args.words) if not line.lstrip().startswith("#") for w in line.split()]

    rec = nerve.asr.Recognizer(words=words)          # compiles or loads the plans once
    for path in files:
        t0 = time.perf_counter()
        finals = rec.transcribe(path)
        spent = time.perf_counter() - t0
        print(os.path.basename(path))
        for ev in finals:
            print(f"  [{ev.start_s:6.2f} - {ev.end_s:6.2f}] {ev.text}")
        print(f"  ({spent * 1000:.0f} ms)")


if __name__ == "__main__":
    main()
