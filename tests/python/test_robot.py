"""nerve robot end to end: a recorded command through the recogniser, the grammar and the
serial link reaches a simulated robot's log as the right structured command; and the
simulator understands every command the default grammar can produce."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from nerve.commands import Grammar
from nerve.robot_sim import RobotSim

ROOT = Path(__file__).resolve().parents[2]


def test_simulator_understands_every_command_of_the_default_grammar():
    grammar, sim = Grammar.load(), RobotSim()
    rules = json.loads((ROOT / "sdk/nerve/robot_grammar.json").read_text())["rules"]
    examples = [ex for rule in rules for ex in rule.get("examples", [])]
    assert len(examples) >= 30
    for ex in examples:
        cmd = grammar.parse(ex)
        assert cmd is not None, ex
        assert "rejected" not in sim.apply(cmd), (ex, cmd)
    assert sim.rejected == 0 and sim.applied == len(examples)


@pytest.fixture
def robot_sim(tmp_path):
    """A `nerve robot-sim` process listening on a free local port: (url, log path)."""
    log = tmp_path / "robot.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "nerve", "robot-sim", "--listen", "tcp://127.0.0.1:0",
                             "--log", str(log)], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert "listening on socket://" in line, line
        yield line.split("listening on ", 1)[1].strip(), log
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_nerve_robot_wav_reaches_the_simulator_log(robot_sim, capsys):
    from nerve.asr import models
    from nerve.robot import run

    models.fetch("moonshine-base")  # idempotent: present after `make test`'s set-up
    url, log = robot_sim
    wav = ROOT / "examples/audio/turn_left_ninety_degrees_16k_s16.wav"
    assert run(url, wav=str(wav)) == 0
    out = capsys.readouterr().out
    assert "acked" in out and "ms" in out  # each step printed with its latency
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert [e["command"] for e in lines] == [{"action": "turn", "direction": "left", "degrees": 90}]
    assert lines[0]["result"] == "applied" and lines[0]["pose"]["heading"] == 90.0


def test_nerve_robot_needs_one_audio_source():
    import nerve
    from nerve.robot import run

    with pytest.raises(nerve.InputError, match="exactly one audio source"):
        run("loop://")
