"""nerve.cuda.select: the CUDA kernel, W4 layout, shared-memory and memory-mode choices
for every supported compute capability, decided by host code, so checked here without a
GPU (docs/CUDA.md has the rules)."""

import json

import pytest

import nerve
from nerve import cuda
from nerve.cli import main as cli_main

KIB = 1024


@pytest.fixture(autouse=True)
def _no_overrides(monkeypatch):
    monkeypatch.delenv("NERVE_FORCE_CC", raising=False)
    monkeypatch.delenv("NERVE_CUDA_MEMORY", raising=False)


@pytest.mark.parametrize("preset", sorted(cuda.PRESETS))
def test_every_preset_has_a_complete_selection(preset):
    props = cuda.PRESETS[preset]
    sel = cuda.select(preset)
    assert sel["cc"] == props["cc"] and not sel["cc_forced"]
    assert sel["w4"]["gemv_layout"] == "packed", "few rows are bound by the weight read: the 4-bit layout"
    assert sel["layernorm_linear"] == {"warp_rows_max": 16, "tensor_cores": True}
    budget = min(props["smem_per_sm"] // 2, props["smem_optin"]) // KIB * KIB
    assert sel["smem_per_block"] == budget
    # rows of x staged per block: the most of 8, 4, 2, 1 whose fp32 rows fit the budget
    rows = sel["w4"]["rows_per_block"]
    row_bytes = (4096 + 4096 // 32) * 4  # fp32, one float of padding per 32
    assert rows in (0, 1, 2, 4, 8)
    assert rows == 0 or rows * row_bytes <= budget
    assert rows == 8 or max(rows * 2, 1) * row_bytes > budget
    assert sel["memory"] == ("zero_copy" if props["integrated"] else "pinned")
    assert any(r.startswith("memory: ") for r in sel["reasons"])
    assert len(sel["reasons"]) >= 6


def test_layout_for_many_rows_follows_the_capability():
    gemm = {p: cuda.select(p)["w4"]["gemm_layout"] for p in cuda.PRESETS}
    assert gemm["a100"] == gemm["h100"] == gemm["h200"] == "unpacked"
    for p in ("v100", "t4", "rtx3090", "rtx4090", "xavier", "orin", "orin-nano"):
        assert gemm[p] == "packed", p


def test_force_cc_changes_the_choice_and_nothing_else(monkeypatch):
    base = cuda.select("h100", force_cc="")
    forced = cuda.select("h100", force_cc="7.5")
    assert forced["cc"] == (7, 5) and forced["cc_forced"]
    assert base["w4"]["gemm_layout"] == "unpacked" and forced["w4"]["gemm_layout"] == "packed"
    assert forced["smem_per_block"] == base["smem_per_block"], "forcing a capability keeps the device's memory"
    assert "forced by NERVE_FORCE_CC" in forced["reasons"][0]
    monkeypatch.setenv("NERVE_FORCE_CC", " 8.0 ")
    from_env = cuda.select("t4")
    assert from_env["cc"] == (8, 0) and from_env["w4"]["gemm_layout"] == "unpacked"
    assert not cuda.select("t4", force_cc="")["cc_forced"], "'' ignores the environment"


@pytest.mark.parametrize("bad", ["8", "8.", ".7", "8.7.1", "x", "8.10", "123.0", "0.0", "8,7", "8.7a"])
def test_malformed_capability_is_an_input_error(bad):
    with pytest.raises(nerve.InputError, match="not MAJOR.MINOR"):
        cuda.select("a100", force_cc=bad)


def test_capability_below_sm70_is_unsupported():
    with pytest.raises(nerve.NerveError, match=r"6\.1 \(forced\) is below nerve's minimum 7\.0"):
        cuda.select("a100", force_cc="6.1")
    with pytest.raises(nerve.NerveError, match="below nerve's minimum"):
        cuda.select({"cc": (5, 3), "integrated": True, "name": "Jetson Nano"})


def test_memory_modes(monkeypatch):
    assert cuda.select("a100", memory="zero_copy")["memory"] == "zero_copy"
    assert cuda.select("orin", memory="pinned")["memory"] == "pinned"
    # Jetson reports no concurrent managed access, but its DRAM is one: managed is allowed
    assert cuda.select("orin", memory="managed")["memory"] == "managed"
    no_map = dict(cuda.PRESETS["a100"], can_map_host_memory=False)
    with pytest.raises(nerve.NerveError, match="CanMapHostMemory"):
        cuda.select(no_map, memory="zero_copy")
    no_managed = dict(cuda.PRESETS["t4"], managed=False)
    with pytest.raises(nerve.NerveError, match="ConcurrentManagedAccess"):
        cuda.select(no_managed, memory="managed")
    integrated_no_map = dict(cuda.PRESETS["orin"], can_map_host_memory=False)
    assert cuda.select(integrated_no_map)["memory"] == "pinned"
    with pytest.raises(nerve.InputError, match="'zerocopy' is not one of"):
        cuda.select("orin", memory="zerocopy")
    monkeypatch.setenv("NERVE_CUDA_MEMORY", "pinned")
    assert cuda.select("orin")["memory"] == "pinned"
    assert cuda.select("orin", memory="auto")["memory"] == "zero_copy"


def test_rows_per_block_across_widths():
    sel = cuda.select("t4")  # 32 KiB per block
    by_width = {n: cuda.select("t4", in_features=n)["w4"]["rows_per_block"] for n in (32, 1025, 4096, 8192, 16384)}
    # rows of (n + n/32) floats within 32 KiB
    assert by_width == {32: 8, 1025: 4, 4096: 1, 8192: 0, 16384: 0}
    assert sel["smem_per_block"] == 32 * KIB


def test_device_without_reported_shared_memory_gets_the_default_budget():
    sel = cuda.select({"cc": (8, 9), "name": "odd"})
    assert sel["smem_per_block"] == 48 * KIB


def test_bad_device_arguments():
    with pytest.raises(nerve.InputError, match="unknown device preset 'k80'"):
        cuda.select("k80")
    with pytest.raises(nerve.InputError, match="needs 'cc'"):
        cuda.select({"name": "x"})
    with pytest.raises(nerve.InputError):
        cuda.select(True)
    with pytest.raises(nerve.InputError):
        cuda.select(3.5)


def test_present_device_index_without_gpu_is_refused():
    if cuda.device_count() > 0:
        sel = cuda.select(0)
        assert sel["device"]["index"] == 0
        return
    assert cuda.unavailable_reason()
    with pytest.raises(nerve.NerveError):
        cuda.select(0)


def test_cli_cuda_select(capsys):
    assert cli_main(["cuda-select", "all", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [s["device"]["name"] for s in out] == [p["name"] for p in cuda.PRESETS.values()]
    assert cli_main(["cuda-select", "orin", "--cc", "7.0"]) == 0
    text = capsys.readouterr().out
    assert "sm_70 (forced)" in text and "memory            zero_copy" in text
    assert cli_main(["cuda-select", "orin", "--cc", "6.0"]) == 1
    assert "below nerve's minimum" in capsys.readouterr().err


def test_cli_cuda_select_without_a_device_says_so(capsys):
    assert cli_main(["cuda-select"]) == 0
    captured = capsys.readouterr()
    if cuda.device_count() == 0:
        assert "no CUDA device here" in captured.err and "Orin" in captured.out
    else:
        assert "sm_" in captured.out and not captured.err
