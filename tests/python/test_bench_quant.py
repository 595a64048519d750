"""``nerve bench quant`` (nerve.bench_quant): the structure of its result, the output checks it
makes before timing, its report, and the CLI route. Run on one small shape so the module takes
seconds; no speed thresholds (the command reports, it does not judge)."""

from __future__ import annotations

import json

import pytest

import nerve.bench_quant as bq
from nerve import cli

SHAPE = (256, 512)  # out x in: both group sizes divide 512


@pytest.fixture(scope="module")
def result():
    return bq.run(quick=True, repeat=3, shapes=(SHAPE,))


def nerve_w4_rows(result):
    return [r for r in result["rows"] if r["runtime"] == "nerve" and r["scheme"] in ("w4a32", "w4a8")]


def test_result_structure(result):
    assert result["quick"] is True and result["repeat"] == 3 and result["threads"] == 1
    assert result["shapes"] == [list(SHAPE)] and result["batches"] == list(bq.BATCHES)
    assert {"cpu_model", "cores", "arch", "kernels"} <= set(result["machine"])
    assert result["copy"]["gbps"] > 0 and result["copy"]["bytes"] == bq.COPY_BYTES
    keys = {"shape", "batch", "engine", "runtime", "scheme", "median_ms", "p90_ms", "samples", "copies",
            "weight_bytes", "gbps", "pct_copy", "vs_fp32", "vs_peers", "check"}
    for r in result["rows"]:
        assert keys <= set(r), r["engine"]
        assert r["shape"] == list(SHAPE) and r["batch"] in bq.BATCHES
        assert r["samples"] == 3 and r["copies"] >= 1
        assert 0 < r["median_ms"] <= r["p90_ms"] and r["gbps"] > 0
        assert (r["vs_fp32"] is None) == (r["engine"] == "nerve fp32")
    for batch in bq.BATCHES:
        names = {r["engine"] for r in result["rows"] if r["batch"] == batch}
        assert "nerve fp32" in names
        w4 = {(r["scheme"], r["group"], r["layout"]) for r in nerve_w4_rows(result) if r["batch"] == batch}
        assert w4 == {(s, g, lay) for s in ("w4a32", "w4a8") for g in bq.GROUPS for lay in ("packed", "unpacked")}
    n, k = SHAPE
    for r in nerve_w4_rows(result):
        assert r["weight_bytes"] == (n * k // 2 if r["layout"] == "packed" else n * k) + n * (k // r["group"]) * 2


def test_w8_rows_follow_the_plan(result):
    """W8 at precision fp32 runs linear_w8 (fp32 activations) on the batches it takes; at
    precision int8 every batch runs linear_w8a8."""
    for scheme, op, batches in (("w8", "linear_w8", [b for b in bq.BATCHES if b <= bq.W8_MAX_ROWS]),
                                ("w8a8", "linear_w8a8", list(bq.BATCHES))):
        rows = {r["batch"]: r for r in result["rows"] if r["runtime"] == "nerve" and r["scheme"] == scheme}
        assert sorted(rows) == sorted(batches), scheme
        for r in rows.values():
            assert [t for t, _ in r["plan_ops"]] == [op]


def test_every_output_matched_its_reference(result):
    rows = nerve_w4_rows(result)
    assert rows
    for r in rows:
        c = r["check"]
        assert c["min_cosine"] == (0.999 if r["activations"] == "fp32" else 0.99)
        assert c["ok"] and c["cosine"] >= c["min_cosine"], (r["engine"], r["batch"], c)
    assert all(r["check"]["ok"] for r in result["rows"])
    assert result["checks_passed"] is True


def test_onnxruntime_peers(result):
    if result["onnxruntime"] is None:
        pytest.skip("onnxruntime is not installed: no peers")
    names = {r["engine"] for r in result["rows"]}
    assert {"ORT MatMul fp32", "ORT MatMulNBits acc0", "ORT MatMulNBits acc4", "ORT MatMulInteger"} <= names
    for r in nerve_w4_rows(result):
        assert set(r["vs_peers"]) == {"acc0", "acc4"} and all(v > 0 for v in r["vs_peers"].values())
    for r in result["rows"]:
        if r["runtime"] == "nerve" and r["scheme"] in ("w8", "w8a8", "w8a8 (MatMulInteger)"):
            assert set(r["vs_peers"]) == {"MMInt"}
    # onnxruntime's quantize_dynamic graph through nerve: the exact integer op, every batch
    same = [r for r in result["rows"] if r["engine"] == "nerve MatMulInteger"]
    assert sorted(r["batch"] for r in same) == sorted(bq.BATCHES)
    assert all("matmul_integer" in [t for t, _ in r["plan_ops"]] for r in same)


def test_format_report_headlines(result):
    text = bq.format_report(result)
    assert "bench quant" in text and result["machine"]["cpu_model"] in text
    lines = text.splitlines()
    for start in ("w4 GEMV (batch 1) vs MatMulNBits: ", "w4 GEMV bandwidth: ", "w8a8 GEMM vs nerve fp32 at batch 8/32: "):
        assert any(line.startswith(start) for line in lines), start
    assert any("% of copy" in line for line in lines)
    if result["onnxruntime"] is not None:
        head = next(line for line in lines if line.startswith("w4 GEMV (batch 1) vs MatMulNBits: "))
        assert "(acc 0)" in head and "(acc 4)" in head and "n/a" not in head
    assert "all passed" in text
    for r in result["rows"]:
        assert r["engine"] in text


def test_cli_routes_quant(result, monkeypatch, capsys):
    seen = {}

    def fake_run(repeat=None, quick=False, seed=0):
        seen.update(repeat=repeat, quick=quick)
        return result

    monkeypatch.setattr(bq, "run", fake_run)
    assert cli.main(["bench", "quant", "--quick", "--repeat", "2", "--json"]) == 0
    assert seen == {"repeat": 2, "quick": True}
    assert json.loads(capsys.readouterr().out)["rows"][0]["engine"] == result["rows"][0]["engine"]
    assert cli.main(["bench", "quant", "--quick"]) == 0
    assert "w4 GEMV bandwidth: " in capsys.readouterr().out
