"""Streaming voice activity detection with nerve: the silero VAD, compiled by nerve, fed
chunk by chunk with its LSTM state kept inside the session.

    python examples/vad_stream.py [recording.wav|recording.flac]

Without a file it listens to a sentence spoken by espeak-ng (if installed; otherwise a
voiced buzz with a syllable rhythm) between two half-seconds of silence. The model comes from the silero-vad
wheel (pip install --no-deps silero-vad); nothing is downloaded at run time.
"""

import importlib.util
import shutil
import subprocess
import sys

import numpy as np

import nerve

SR = 16000
CHUNK, CONTEXT = 512, 64


def model_path() -> str:
    spec = importlib.util.find_spec("silero_vad")  # locate, do not import (it needs torch)
    if spec is None:
        sys.exit("install the model package first: pip install --no-deps silero-vad")
    return spec.submodule_search_locations[0] + "/data/silero_vad_op18_ifless.onnx"


def load_audio(path=None) -> np.ndarray:
    if path:  # any WAV or FLAC: nerve's readers and resampler, to the model's 16 kHz mono
        return nerve.audio.load_audio(path, target_rate=SR)
    if shutil.which("espeak-ng"):
        wav = subprocess.run(["espeak-ng", "--stdout", "Robot, turn left ninety degrees, then stop."],
                             check=True, capture_output=True).stdout
        speech = nerve.audio.load_audio(wav, target_rate=SR)
    else:
        t = np.arange(int(1.5 * SR)) / SR
        speech = sum(np.sin(2 * np.pi * f * t) / k for k, f in enumerate((140, 280, 420, 700, 1100), 1))
        speech = (speech * (np.sin(2 * np.pi * 4 * t) > 0) * 0.3).astype(np.float32)
    silence = np.zeros(SR // 2, np.float32)
    return np.concatenate([silence, speech, silence])


def main() -> None:
    sess = nerve.Session(model_path(), dims={"batch": 1, "sequence": CONTEXT + CHUNK},
                         state={"stateN": "state"})
    audio = load_audio(sys.argv[1] if len(sys.argv) > 1 else None)
    sr = np.array(SR, np.int64)
    context = np.zeros(CONTEXT, np.float32)
    feeds = {"sr": sr, "state": np.zeros((2, 1, 128), np.float32)}  # the first run sets the state
    for start in range(0, len(audio) - CHUNK + 1, CHUNK):
        new = audio[start:start + CHUNK]
        feeds["input"] = np.concatenate([context, new])[None]
        p = float(sess.run(feeds)["output"][0, 0])
        feeds.pop("state", None)  # from now on the session carries it
        context = new[-CONTEXT:]
        print(f"{start / SR:6.2f} s  {'#' * int(p * 40):<40} {p:.3f}")
    print(sess.memory_report())


if __name__ == "__main__":
    main()
