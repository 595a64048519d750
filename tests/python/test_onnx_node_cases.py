"""ONNX's own operator test cases (onnx.backend.test.case.node: ~1,900 one-node models with
inputs and expected outputs, the suite every ONNX backend is held to), generated in memory
from the installed onnx wheel. Each case either gives the expected outputs or fails at
compile time with a ModelError: never a wrong number, a run-time failure or a crash.

tests/data/onnx_node_cases_passing.txt lists the cases nerve runs today, so an operator that
stops compiling is a failure too. The rest are refused on purpose: dtypes the runtime does not
hold (int16, uint16-64, float8, bfloat16, int4/2), training ops (losses, Dropout in training
mode), string and sequence ops, data-dependent output sizes (NonZero, Unique, NMS), and
attributes the node feeds at run time where nerve plans memory at compile time (a ReduceSum's
axes, a Reshape's shape). A case that starts passing should be added to the list."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
node_cases = pytest.importorskip("onnx.backend.test.case.node")

import nerve  # noqa: E402
from nerve.compiler.onnx_import import dim_symbol  # noqa: E402

PASSING_FILE = Path(__file__).resolve().parents[1] / "data" / "onnx_node_cases_passing.txt"
PASSING = {line.strip() for line in PASSING_FILE.read_text().splitlines() if line.strip() and line[0] != "#"}


def _tensor_only(case) -> bool:
    g = case.model.graph
    return all(v.type.HasField("tensor_type") for v in list(g.input) + list(g.output))


def _collect():
    with np.errstate(all="ignore"):  # some cases compute inf / nan on purpose
        return {c.name: c for c in node_cases.collect_testcases(None) if _tensor_only(c)}


CASES = _collect()


def _as_array(x):
    return onnx.numpy_helper.to_array(x) if isinstance(x, onnx.TensorProto) else np.asarray(x)


def _compare(name, got, want, rtol, atol):
    assert got.shape == want.shape, f"{name}: shape {got.shape}, expected {want.shape}"
    if want.dtype.kind in "fc":
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol,
                                   equal_nan=True, err_msg=name)
    else:
        assert got.dtype == want.dtype, f"{name}: dtype {got.dtype}, expected {want.dtype}"
        np.testing.assert_array_equal(got, want, err_msg=name)


def _listed_onnx_version() -> str:
    for line in PASSING_FILE.read_text().splitlines():
        if line.startswith("# onnx "):
            return line.split()[2]
    return ""


def test_the_passing_list_names_real_cases():
    """Every listed case exists in the onnx version the list was made with; another onnx may
    rename or drop a few (then at most 5% of them)."""
    missing = sorted(PASSING - set(CASES))
    if _listed_onnx_version() == onnx.__version__:
        assert not missing, f"cases in {PASSING_FILE.name} that this onnx wheel does not generate: {missing[:10]}"
    else:
        assert len(missing) <= 0.05 * len(PASSING), f"{len(missing)} listed cases are gone in onnx {onnx.__version__}"


def run_case(name: str, folder: Path) -> bool:
    """Compiles and runs case `name` (its model written into folder): True when its outputs
    match, False when nerve refuses it with a ModelError; anything else raises."""
    case = CASES[name]
    model = case.model
    inits = {t.name for t in model.graph.initializer}
    inputs = [vi for vi in model.graph.input if vi.name not in inits]
    path = folder / "model.onnx"
    path.write_bytes(model.SerializeToString())
    first = [_as_array(x) for x in case.data_sets[0][0]]
    dims = {dim_symbol(vi.name, k, d): first[i].shape[k]
            for i, vi in enumerate(inputs) for k, d in enumerate(vi.type.tensor_type.shape.dim)
            if dim_symbol(vi.name, k, d)}
    try:
        sess = nerve.Session(path, dims=dims, cache=False)
    except nerve.ModelError as e:
        assert re.search(r"node '|dtype|input|output", str(e)), f"{name}: the error names nothing: {e}"
        return False
    outputs = [o.name for o in model.graph.output]
    for inputs_data, outputs_data in case.data_sets:
        feeds = {vi.name: _as_array(x) for vi, x in zip(inputs, inputs_data)}
        got = sess.run(feeds)
        for out_name, want in zip(outputs, outputs_data):
            want = _as_array(want)
            rtol, atol = case.rtol, max(case.atol, 1e-6)
            if want.dtype == np.float16:
                # the expected values round every step to float16; nerve computes float16
                # graphs in float32 and rounds once at the end: up to a few float16 steps apart
                rtol, atol = max(rtol, 4 * 2.0 ** -11), max(atol, 2.0 ** -14)
            _compare(f"{name}:{out_name}", np.asarray(got[out_name]), want, rtol, atol)
    return True


@pytest.mark.parametrize("name", sorted(CASES))
def test_node_case(name, tmp_path):
    ran = run_case(name, tmp_path)
    assert ran or name not in PASSING, f"{name} compiled before and is refused now (see the ModelError above)"
