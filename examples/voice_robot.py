"""Drive a robot by voice: speech -> grammar command -> serial link, in the public API.

    nerve robot-sim --listen tcp://127.0.0.1:5760 &          # a simulated robot (or a real port)
    python examples/voice_robot.py socket://127.0.0.1:5760 examples/audio/turn_left_ninety_degrees_16k_s16.wav
"""

import sys

import nerve.asr
import nerve.audio
from nerve.commands import CommandRouter, Grammar
from nerve.serial import Link

port, wav = sys.argv[1], sys.argv[2]
grammar = Grammar.load()                                    # the default robot grammar (docs/COMMANDS.md)
rec = nerve.asr.Recognizer(words=grammar.words())           # hears only what the robot understands
rate, blocks = nerve.audio.iter_audio(wav, block_frames=1600)  # WAV or FLAC, blocks as a microphone gives them


def show(d):                                                # each command once it is acknowledged (or not)
    if d.status in ("acked", "failed"):
        print(d.source, repr(d.text), "->", d.command, d.status, d.latencies_ms())


with Link(port) as link, CommandRouter(grammar, link, on_update=show) as router:
    stream = rec.create_stream(sample_rate=rate)
    for block in blocks:
        for event in stream.accept_waveform(block):          # "stop" acts from a partial, the rest on finals
            router.feed(event)
    for event in stream.finish():
        router.feed(event)
