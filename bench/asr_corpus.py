"""A synthetic robot-command test set for the speech recognisers, made at run time.

    python bench/asr_corpus.py --out DIR [--count N] [--seed S] [--snr-db 10] [--voices V,...]

N phrases (default 20) drawn from the robot vocabulary (turn/rotate, go/move with distances,
stop/halt, gripper, lights, speed, digit strings) are each spoken by every held-out voice,
then saved twice: clean, and mixed with white or pink noise at --snr-db (the SNR is taken
over the speech part: frames within 35 dB of the loudest). Files are 16 kHz mono float32 WAV;
``DIR/manifest.jsonl`` has one line per file:

    {"path": "0003_flite-awb_snr10.wav", "text": "turn left ninety degrees",
     "voice": "flite:awb", "snr_db": 10.0, "noise": "pink", "seconds": 2.41}

(``path`` relative to DIR; ``snr_db`` and ``noise`` are null for the clean copy.)

The voices are held out from examples/audio/ (which uses espeak-ng en-us, en-us+m3, en-gb+f3,
en-gb-x-rp and flite kal, slt), so nothing tuned on the examples is scored on the same
speakers. espeak-ng and flite must be installed (apt-get install espeak-ng flite); the same
--seed and tool versions give the same corpus.

Also importable: ``VOCABULARY`` (every word a phrase can contain), ``phrases(count, seed)``,
``read_wav`` (nerve.audio's), ``write_wav`` (float32 mono) and
``resample``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from wer import number_to_words  # noqa: E402

RATE = 16000

# (engine, voice, speed): espeak-ng speed in words per minute, flite a duration stretch.
VOICES: List[Tuple[str, str, float]] = [
    ("espeak-ng", "en-gb-scotland", 140),
    ("espeak-ng", "en-029+f2", 160),
    ("espeak-ng", "en-us-nyc+m7", 150),
    ("espeak-ng", "en-gb-x-gbcwmd+f4", 170),
    ("espeak-ng", "en-gb-x-gbclan+m5", 135),
    ("flite", "awb", 1.0),
    ("flite", "rms", 1.1),
]

# ---------------------------------------------------------------- phrases
DEGREES = [5, 10, 15, 20, 30, 45, 60, 90, 120, 135, 180, 270]
METERS = list(range(1, 11))
CENTIMETERS = [5, 10, 15, 20, 25, 30, 40, 50, 75]
SPEEDS = list(range(1, 21)) + [25, 30, 40, 50, 60, 75, 80, 100]
DIGITS = [number_to_words(d) for d in range(10)]


def _num(n: int) -> str:
    return number_to_words(n)


def _distance(rng: np.random.Generator) -> str:
    if rng.random() < 0.5:
        n = int(rng.choice(METERS))
        return f"{_num(n)} {'meter' if n == 1 else 'meters'}"
    return f"{_num(int(rng.choice(CENTIMETERS)))} centimeters"


def _pick(rng: np.random.Generator, options: Sequence[str]) -> str:
    return options[int(rng.integers(len(options)))]


# One generator per kind of command; a phrase picks the kind uniformly, then its words.
# No two words of the vocabulary sound the same ("set speed to ten" is left out: "to" and
# "two" would be one sound with two spellings in a word-list grammar).
_KINDS = [
    lambda r: f"{_pick(r, ['turn', 'rotate'])} {_pick(r, ['left', 'right'])} {_num(int(r.choice(DEGREES)))} degrees",
    lambda r: f"{_pick(r, ['go', 'move'])} {_pick(r, ['forward', 'back', 'backward'])} {_distance(r)}",
    lambda r: _pick(r, ["stop", "halt", "robot stop", "emergency stop", "stop now"]),
    lambda r: f"{_pick(r, ['open', 'close'])} {_pick(r, ['gripper', 'the gripper'])}",
    lambda r: _pick(r, ["lights on", "lights off", "turn the lights on", "turn the lights off"]),
    lambda r: f"{_pick(r, ['speed', 'set speed'])} {_num(int(r.choice(SPEEDS)))}",
    lambda r: " ".join(_pick(r, DIGITS) for _ in range(int(r.integers(3, 5)))),
]


def _vocabulary() -> List[str]:
    words = set("turn rotate left right degrees go move forward back backward meter meters centimeters "
                "stop halt robot emergency now open close gripper the lights on off speed set".split())
    for n in DEGREES + METERS + CENTIMETERS + SPEEDS + list(range(10)):
        words.update(_num(n).split())
    return sorted(words)


VOCABULARY: List[str] = _vocabulary()


def phrases(count: int, seed: int = 0) -> List[str]:
    """`count` phrases; each kind of command comes up in turn, in a seeded random order, and a
    phrase already drawn is drawn again (up to 50 times: the short kinds have few phrases)."""
    rng = np.random.default_rng(seed)
    out: List[str] = []
    while len(out) < count:
        for k in rng.permutation(len(_KINDS)):
            if len(out) < count:
                for _ in range(50):
                    text = _KINDS[int(k)](rng)
                    if text not in out:
                        break
                out.append(text)
    return out


# ---------------------------------------------------------------- WAV in and out
_FLOAT = 3  # WAVE_FORMAT_IEEE_FLOAT


def read_wav(source) -> Tuple[np.ndarray, int]:
    """(float32 mono samples, rate) of a WAV file or bytes: nerve's own reader."""
    from nerve.audio import read_wav as nerve_read_wav

    return nerve_read_wav(source)


def write_wav(path, samples: np.ndarray, rate: int) -> None:
    """Mono float32 WAV (format tag 3, with the fact chunk non-PCM files carry)."""
    x = np.ascontiguousarray(samples, dtype="<f4").ravel()
    fmt = struct.pack("<HHIIHHH", _FLOAT, 1, rate, rate * 4, 4, 32, 0)
    fact = struct.pack("<I", len(x))
    body = (b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"fact" + struct.pack("<I", 4) + fact
            + b"data" + struct.pack("<I", x.nbytes) + x.tobytes())
    with open(path, "wb") as f:
        f.write(b"RIFF" + struct.pack("<I", len(body)) + body)


def resample(x: np.ndarray, src: int, dst: int) -> np.ndarray:
    """Whole-signal resampling with nerve's resampler (tested against a float64 reference)."""
    from nerve.audio import load_audio

    return load_audio(np.asarray(x, np.float32), sample_rate=src, target_rate=dst)


# ---------------------------------------------------------------- synthesis and noise
def synthesize(engine: str, voice: str, speed: float, text: str) -> np.ndarray:
    """16 kHz mono float32 speech from espeak-ng or flite."""
    if engine == "espeak-ng":
        raw = subprocess.run(["espeak-ng", "-v", voice, "-s", str(int(speed)), "--stdout", text],
                             check=True, capture_output=True).stdout
    elif engine == "flite":
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "f.wav")
            subprocess.run(["flite", "-voice", voice, "--setf", f"duration_stretch={speed}", "-t", text,
                            "-o", out], check=True, capture_output=True)
            raw = Path(out).read_bytes()
    else:
        raise ValueError(f"unknown engine {engine!r}")
    x, rate = read_wav(raw)
    return resample(x, rate, RATE)


def trim(x: np.ndarray, threshold: float = 2e-3) -> np.ndarray:
    """Drop the synthesiser's own leading and trailing silence."""
    loud = np.flatnonzero(np.abs(x) > threshold)
    return x[loud[0]:loud[-1] + 1] if len(loud) else x[:0]


def speech_power(x: np.ndarray, frame: int = 320, floor_db: float = 35.0) -> float:
    """Mean power over the frames within `floor_db` of the loudest 20 ms frame."""
    n = len(x) // frame
    if n == 0:
        return float(np.mean(x.astype(np.float64) ** 2)) if len(x) else 0.0
    p = (x[:n * frame].astype(np.float64).reshape(n, frame) ** 2).mean(axis=1)
    return float(p[p >= p.max() * 10 ** (-floor_db / 10)].mean())


def noise(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """Unit-variance white or pink (1/f power) noise."""
    w = rng.standard_normal(n)
    if kind == "pink":
        spec = np.fft.rfft(w)
        f = np.arange(len(spec), dtype=np.float64)
        f[0] = 1.0
        spec /= np.sqrt(f)
        spec[0] = 0.0
        w = np.fft.irfft(spec, n)
    elif kind != "white":
        raise ValueError(f"unknown noise {kind!r}")
    return (w / w.std()).astype(np.float32)


def mix(speech: np.ndarray, snr_db: float, kind: str, rng: np.random.Generator) -> np.ndarray:
    """`speech` plus noise whose power is `snr_db` below the speech part's power."""
    gain = math.sqrt(speech_power(speech) / 10 ** (snr_db / 10))
    return (speech + gain * noise(kind, len(speech), rng)).astype(np.float32)


# ---------------------------------------------------------------- the corpus
def _slug(engine: str, voice: str) -> str:
    return f"{engine.replace('-ng', '')}-{voice}".replace("+", "-")


def build(out: Path, count: int = 20, seed: int = 0, snr_db: float = 10.0,
          voices: Optional[Sequence[Tuple[str, str, float]]] = None, log=print) -> List[Dict]:
    """Write the corpus into `out`; returns the manifest rows."""
    voices = list(VOICES if voices is None else voices)
    missing = sorted({e for e, _, _ in voices if shutil.which(e) is None})
    if missing:
        raise RuntimeError(f"{', '.join(missing)} not found: apt-get install -y {' '.join(missing)} "
                           "(or pick voices of the installed engines with --voices)")
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    rng = np.random.default_rng([seed, 1])  # levels, padding and noise; phrases use `seed` alone
    for i, text in enumerate(phrases(count, seed)):
        for engine, voice, speed in voices:
            speech = trim(synthesize(engine, voice, speed, text))
            speech *= 10 ** (rng.uniform(-12, -3) / 20) / max(float(np.abs(speech).max()), 1e-9)
            pad = [np.zeros(int(rng.uniform(0.2, 0.6) * RATE), np.float32) for _ in range(2)]
            clean = np.concatenate([pad[0], speech, pad[1]])
            kind = "white" if rng.random() < 0.5 else "pink"
            noisy = mix(clean, snr_db, kind, rng)  # speech_power() skips the silent padding
            voice_id = f"{engine}:{voice}"
            for audio, tag, snr, nk in ((clean, "clean", None, None), (noisy, f"snr{snr_db:g}", snr_db, kind)):
                name = f"{i:04d}_{_slug(engine, voice)}_{tag}.wav"
                write_wav(out / name, audio, RATE)
                rows.append({"path": name, "text": text, "voice": voice_id, "snr_db": snr, "noise": nk,
                             "seconds": round(len(audio) / RATE, 3)})
        log(f"[{i + 1}/{count}] {text}")
    with open(out / "manifest.jsonl", "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    return rows


def load_manifest(corpus: Path) -> List[Dict]:
    with open(Path(corpus) / "manifest.jsonl") as f:
        return [json.loads(line) for line in f if line.strip()]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path, help="output directory (created)")
    ap.add_argument("--count", type=int, default=20, help="number of phrases (each spoken by every voice)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--snr-db", type=float, default=10.0, help="SNR of the noisy copy, over the speech part")
    ap.add_argument("--voices", help="comma-separated subset, e.g. 'flite:awb,espeak-ng:en-029+f2' "
                    f"(default: all of {', '.join(f'{e}:{v}' for e, v, _ in VOICES)})")
    args = ap.parse_args(argv)
    voices = VOICES
    if args.voices:
        known = {f"{e}:{v}": (e, v, s) for e, v, s in VOICES}
        wanted = [v.strip() for v in args.voices.split(",") if v.strip()]
        unknown = [v for v in wanted if v not in known]
        if unknown:
            ap.error(f"unknown voice(s) {unknown}; known: {sorted(known)}")
        voices = [known[v] for v in wanted]
    try:
        rows = build(args.out, args.count, args.seed, args.snr_db, voices)
    except RuntimeError as e:
        print(f"asr_corpus: {e}", file=sys.stderr)
        return 1
    total = sum(r["seconds"] for r in rows)
    print(f"{len(rows)} files, {total:.1f} s of audio, manifest: {args.out / 'manifest.jsonl'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
