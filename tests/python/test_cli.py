"""The `nerve` command, run as a user would: in a subprocess."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import nerve
from helpers import run_cli


def test_info_json():
    result = run_cli("info", "--json")
    assert result.returncode == 0, result.stderr
    desc = json.loads(result.stdout)
    assert desc["version"] == nerve.__version__
    assert set(desc["cpu"]) >= {"arch", "features", "count"}
    assert desc["kernels"] == nerve.info()["kernels"]
    for op, variants in desc["variants"].items():
        assert {"name", "runnable", "selected"} <= set(variants[0])
    assert "devices" in desc["cuda"] and "reason" in desc["cuda"]


def test_info_text_via_the_console_script():
    script = Path(sys.executable).with_name("nerve")
    assert script.exists(), f"console script not installed next to {sys.executable}"
    result = subprocess.run([str(script), "info"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert f"nerve {nerve.__version__}" in out
    for op, variant in nerve.info()["kernels"].items():
        assert any(line.split()[:2] == [op, variant] for line in out.splitlines()), f"{op} -> {variant} missing"
    assert "cuda" in out


def test_info_honours_nerve_disable():
    env = dict(os.environ, NERVE_DISABLE="all")
    result = subprocess.run([sys.executable, "-m", "nerve", "info", "--json"], capture_output=True, text=True,
                            env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    assert set(json.loads(result.stdout)["kernels"].values()) == {"ref"}


def test_bench_ops_quick_prints_the_three_tables():
    result = run_cli("bench", "ops", "--quick", "--repeat", "2")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "machine:" in out and "logical cores" in out
    for header in ("embedding GB/s", "memcpy GB/s", "fused us", "unfused us", "variant us", "ref us"):
        assert header in out, header
    for row in ("256 B", "1 KiB", "4 KiB", "16 KiB"):
        assert row in out
    for op in nerve.kernels.ops():
        assert any(line.startswith(op + " ") for line in out.splitlines()), op


def test_bench_ops_quick_json():
    result = run_cli("bench", "ops", "--quick", "--repeat", "1", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert [r["row_bytes"] for r in data["embedding"]["rows"]] == [256, 1024, 4096, 16384]
    for r in data["embedding"]["rows"]:
        assert r["embedding_gbps"] > 0 and r["memcpy_gbps"] > 0
        assert r["ratio"] == pytest.approx(r["embedding_gbps"] / r["memcpy_gbps"])
    assert {(r["in"], r["out"]) for r in data["fused"]} == {(384, 1536), (1024, 1024)}
    assert {r["op"] for r in data["variants"]} == set(nerve.kernels.ops())
    assert data["machine"]["cores"] >= 1 and data["machine"]["cpu_model"]


def test_bad_usage_exits_non_zero():
    assert run_cli("bench", "ops", "--repeat", "0").returncode != 0
    assert run_cli("frobnicate").returncode != 0
    assert run_cli().returncode != 0


def test_quickstart_example_runs():
    example = Path(__file__).resolve().parents[2] / "examples" / "quickstart.py"
    result = subprocess.run([sys.executable, str(example)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "layernorm_linear: (3, 64)" in result.stdout and "refused: nrv_embedding: id[0] = 1000" in result.stdout


def test_bench_of_a_tts_export_names_the_bound_it_needs_then_runs():
    """A Range whose length the data decides (tests/data/torch/hf_vits.onnx): the error names
    the key and the command-line spelling; given it, the bench runs against onnxruntime."""
    model = Path(__file__).resolve().parents[1] / "data" / "torch" / "hf_vits.onnx"
    r = run_cli("bench", str(model), "--quick")
    assert r.returncode == 1 and "'/model/Range.length'" in r.stderr and "--dim NAME=N" in r.stderr, r.stderr
    r = run_cli("bench", str(model), "--quick", "--json", "--vs", "onnxruntime", "--dim", "/model/Range.length=2048")
    assert r.returncode == 0, r.stderr
