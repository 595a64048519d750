"""``nerve bench robot`` (nerve.bench_robot): the structure of its result, every command acked
and applied exactly once, latencies positive and ordered. No speed thresholds: the bench
reports, the tests only check that what it reports is whole and consistent."""

from __future__ import annotations

import json

import numpy as np
import pytest

import nerve.bench_robot as br
from nerve import cli

N = 50  # link commands per path: small, the noisy path still sees drops now and then


def _ordered(s):
    assert s is not None and s["n"] >= 1
    assert 0 < s["min_ms"] <= s["median_ms"] <= s["p99_ms"] <= s["max_ms"]


@pytest.fixture(scope="module")
def result():
    from nerve.asr import models

    models.fetch("moonshine-base")  # idempotent: present after `make test`'s set-up
    # one WAV per part keeps this to ~15 s: the speech parts run at real-time pace
    return br.run(quick=True, repeat=2, n=N, wavs=["turn_left_ninety_degrees_16k_s16.wav"],
                  stop_wavs=["robot_stop_44k1_stereo_u8.wav"])


def test_link_rows_every_command_acked_and_applied_once(result):
    link = result["link"]
    assert link["n"] == N
    assert [r["path"] for r in link["rows"]][:2] == ["direct", "proxy, clean"]
    assert len(link["rows"]) == 3 and link["rows"][2]["corrupt"] == 0.01 and link["rows"][2]["drop"] == 0.005
    for r in link["rows"]:
        assert r["n"] == N and r["acked"] == N and r["ok"] == N
        assert r["applied"] == N, f"{r['path']}: the simulator applied {r['applied']} of {N}"
        _ordered(r)
        assert r["commands_per_s"] > 0 and r["retransmits"] >= 0
    clean = link["rows"][:2]
    assert all(r["retransmits"] == 0 for r in clean)
    noisy = link["rows"][2]
    assert noisy["proxy"]["frames"] > 0 and noisy["proxy"]["garbled_bytes"] > 0  # the noise was there


def test_speech_final_and_stop_latencies(result):
    sp = result["speech"]
    assert sp["repeat"] == 2 and sp["realtime"] and not sp["not_acked"]
    fin = sp["final"]
    # "turn left ninety degrees": one command from each pass's final
    w = fin["per_wav"]["turn_left_ninety_degrees_16k_s16.wav"]
    assert w["commands"] == [{"action": "turn", "direction": "left", "degrees": 90}] * 2
    assert w["heard"] == {"turn left ninety degrees": 2} and w["duplicates"] == 0
    for key in ("total", "link", "recognition", "speech_end_to_ack", "segment_end_to_ack"):
        _ordered(fin[key])
    assert fin["total"]["n"] == 2
    # the ack comes after the speech ended, and after the VAD's (padded) end of the segment
    assert fin["speech_end_to_ack"]["min_ms"] >= fin["segment_end_to_ack"]["min_ms"] > 0

    stop = sp["stop"]["per_wav"]["robot_stop_44k1_stereo_u8.wav"]
    assert stop["passes"] == 2
    assert stop["heard"] == 2
    # from a partial: here at 1.6 s of stream time, well before the endpointer closes the segment
    # (a heavily loaded machine could stretch the partial period; one pass is enough to measure)
    assert stop["from_partial"] >= 1, f"'robot stop' was not acted on from a partial: {stop}"
    _ordered(stop["total"])
    _ordered(sp["stop"]["total"])
    assert 0 < stop["speech_end_s"] <= stop["segment_end_s"]
    assert stop["fired_at_s"] > 0 and stop["partial_compute_ms"] > 0


def test_report_and_json(result):
    text = br.format_report(result)
    assert "bench robot" in text and result["machine"]["cpu_model"] in text
    assert "proxy, 1% bytes, 0.5% frames" in text and '"stop" first partial -> ack' in text
    json.dumps(result, default=str)


def test_speech_parts_from_digital_silence():
    rate = 1000
    x = np.zeros(3000, np.float32)
    x[500:1000] = 0.1
    x[1700:2100] = -0.1  # after 0.7 s of exact zeros: a second spoken part
    assert br._speech_parts(x, rate) == [(0.5, 1.0), (1.7, 2.1)]
    assert br._speech_end(br._speech_parts(x, rate), 0.3, 1.2) == 1.0
    assert br._speech_end(br._speech_parts(x, rate), 1.5, 2.3) == 2.1


def test_noisy_proxy_drops_and_garbles_frames_only():
    proxy = br.NoisyProxy(("127.0.0.1", 9), corrupt=0.0, drop=1.0)  # no upstream needed for _damage
    try:
        rng = np.random.default_rng(0)
        assert proxy._damage(b"\0abc\0\0def\0", rng) == b"\0\0"  # frames dropped, bare delimiters kept
        proxy.drop, proxy.corrupt = 0.0, 1.0
        out = proxy._damage(b"abc\0", rng)
        assert len(out) == 4 and all(a != b for a, b in zip(out, b"abc\0"))
        assert proxy.counts["dropped"] == 2 and proxy.counts["garbled_bytes"] == 4
    finally:
        proxy.close()


def test_cli_bench_robot_is_wired(monkeypatch, capsys):
    seen = {}

    def fake_run(repeat=None, quick=False):
        seen.update(repeat=repeat, quick=quick)
        return {"fake": True}

    monkeypatch.setattr(br, "run", fake_run)
    assert cli.main(["bench", "robot", "--quick", "--repeat", "3", "--json"]) == 0
    assert seen == {"repeat": 3, "quick": True}
    assert json.loads(capsys.readouterr().out) == {"fake": True}
