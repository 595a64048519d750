"""Speech recognition on nerve: Moonshine run by nerve's own engine, silero VAD, streaming.

    rec = nerve.asr.Recognizer(model="moonshine-base", words=None, phrases=None,
                               partial_ms=320, threads=1)
    stream = rec.create_stream(sample_rate=16000)   # many streams share one model; one per thread
    events = stream.accept_waveform(samples)        # -> list[Event]: new partials / finals
    events = stream.finish()                        # flush
    rec.transcribe("file.wav") -> list[Event]

The model is fetched once with ``nerve models fetch moonshine-base`` (see nerve.asr.models).
"""

from .models import fetch, model_dir
from .recognizer import Event, Recognizer, Stream, Token

__all__ = ["Recognizer", "Stream", "Event", "Token", "fetch", "model_dir"]
