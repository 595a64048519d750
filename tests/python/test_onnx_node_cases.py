"""ONNX's own operator test cases (onnx.backend.test.case.node: ~1,900 one-node models with
inputs and expected outputs, the suite every ONNX backend is held to), generated in memory
from the installed onnx wheel. Each case either gives the expected outputs or fails at
compile time with a ModelError: never a wrong number, a run-time failure or a crash.

Each case is tried twice: as ONNX wrote it (every input fed at run time), and, when nerve
refuses that, with every input but the first fixed at compile time (`constants=`), as an
exported model carries a Conv's weights, a Slice's starts or a Resize's scales as
initializers. nerve plans memory at compile time, so a Reshape's shape or a ReduceSum's axes
fed at run time are refused by design; the second try runs the operator's arithmetic anyway.

tests/data/onnx_node_cases_passing.txt lists the cases nerve runs today (those that need the
second try marked `constants`), so an operator that stops compiling is a failure too. The
rest are refused on purpose: dtypes the runtime does not hold (int16, uint16-64, float8,
bfloat16, int4/2), training ops (losses, Dropout in training mode), string and sequence ops,
loops whose iterations the data decides. Random draws (Bernoulli's expanded form) are held
to their shape, dtype and value set. A case that starts passing should be
added to the list (scripts/onnx_node_cases.py rewrites it)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
node_cases = pytest.importorskip("onnx.backend.test.case.node")

import nerve  # noqa: E402
from nerve.compiler.onnx_import import dim_symbol  # noqa: E402

PASSING_FILE = Path(__file__).resolve().parents[1] / "data" / "onnx_node_cases_passing.txt"
CONSTANTS = "constants"  # the list's mark for a case that runs with its parameters fixed at compile time


def _read_passing():
    """{case name: mode}: "" when it runs with every input fed at run time, CONSTANTS when it
    needs its inputs after the first fixed at compile time."""
    out = {}
    for line in PASSING_FILE.read_text().splitlines():
        if line.strip() and line[0] != "#":
            name, _, mode = line.strip().partition(" ")
            out[name] = mode.strip()
    return out


PASSING = _read_passing()

# Cases whose expected outputs come from ONNX's Python reference where onnxruntime computes
# something else; nerve follows onnxruntime, the peer users compare with, and is held to it.
# - Resize, align_corners with `scales` that do not give a whole output length: the reference
#   puts the unrounded length (in x scale) into x_in = x_out (len_in - 1) / (len_out - 1),
#   onnxruntime the output's length.
# - MaxUnpool with output_shape: the reference reads the indices as positions in the shape
#   the pool's attributes give and pastes that into a corner of output_shape; onnxruntime
#   (and torch's MaxUnpool2d(output_size=...), which exports it) as positions in output_shape.
FOLLOWS_ONNXRUNTIME = {"test_resize_downsample_scales_cubic_align_corners",
                       "test_resize_downsample_scales_linear_align_corners",
                       "test_maxunpool_export_with_output_shape"}


# Cases whose expected values are one draw of onnx's reference generator (Bernoulli spelt out
# as RandomUniformLike < p): nerve's generator draws others (tests/python/test_random_ops.py
# checks its distributions), so these are held to the shape, the dtype and the values' set.
def _random_draws(name: str) -> bool:
    return name.startswith("test_bernoulli") and name.endswith("_expanded")


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
    missing = sorted(set(PASSING) - set(CASES))
    if _listed_onnx_version() == onnx.__version__:
        assert not missing, f"cases in {PASSING_FILE.name} that this onnx wheel does not generate: {missing[:10]}"
    else:
        assert len(missing) <= 0.05 * len(PASSING), f"{len(missing)} listed cases are gone in onnx {onnx.__version__}"


def _expected_outputs(case, inputs_data):
    """The case's expected outputs, or onnxruntime's for the cases in FOLLOWS_ONNXRUNTIME."""
    if case.name not in FOLLOWS_ONNXRUNTIME:
        return None
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(case.model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {i.name: _as_array(x) for i, x in zip(sess.get_inputs(), inputs_data)})


def run_case(name: str, folder: Path, constants: bool = False) -> bool:
    """Compiles and runs case `name` (its model written into folder): True when its outputs
    match, False when nerve refuses it with a ModelError; anything else raises. constants:
    every input after the first is fixed at compile time (one compile per data set)."""
    case = CASES[name]
    model = case.model
    inits = {t.name for t in model.graph.initializer}
    inputs = [vi for vi in model.graph.input if vi.name not in inits]
    fed = inputs[:1] if constants else inputs
    path = folder / "model.onnx"
    path.write_bytes(model.SerializeToString())
    outputs = [o.name for o in model.graph.output]
    sess = None
    for inputs_data, outputs_data in case.data_sets:
        arrays = [_as_array(x) for x in inputs_data]
        if sess is None or constants:
            dims = {dim_symbol(vi.name, k, d): arrays[i].shape[k]
                    for i, vi in enumerate(fed) for k, d in enumerate(vi.type.tensor_type.shape.dim)
                    if dim_symbol(vi.name, k, d)}
            fixed = {vi.name: a for vi, a in zip(inputs[1:], arrays[1:])} if constants else None
            try:
                sess = nerve.Session(path, dims=dims, constants=fixed, cache=False)
            except nerve.ModelError as e:
                assert re.search(r"node '|dtype|input|output", str(e)), f"{name}: the error names nothing: {e}"
                return False
        got = sess.run({vi.name: a for vi, a in zip(fed, arrays)})
        wants = _expected_outputs(case, inputs_data) or outputs_data
        for out_name, want in zip(outputs, wants):
            want = _as_array(want)
            rtol, atol = case.rtol, max(case.atol, 1e-6)
            if want.dtype == np.float16:
                # the expected values round every step to float16; nerve computes float16
                # graphs in float32 and rounds once at the end: up to a few float16 steps apart
                rtol, atol = max(rtol, 4 * 2.0 ** -11), max(atol, 2.0 ** -14)
            if _random_draws(name):
                g = np.asarray(got[out_name])
                assert g.shape == want.shape and g.dtype == want.dtype, (name, g.shape, g.dtype)
                assert set(np.unique(g)) <= {0, 1}, f"{name}: values {np.unique(g)}, expected 0 and 1"
                continue
            _compare(f"{name}:{out_name}", np.asarray(got[out_name]), want, rtol, atol)
    return True


def has_parameters(name: str) -> bool:
    """True when the case feeds more than one input (so the constants try differs)."""
    model = CASES[name].model
    inits = {t.name for t in model.graph.initializer}
    return sum(vi.name not in inits for vi in model.graph.input) > 1


def run_case_either_way(name: str, folder: Path) -> Optional[str]:
    """The mode the case runs in ("" or CONSTANTS, as the list writes it), None if refused both ways."""
    if run_case(name, folder):
        return ""
    if has_parameters(name) and run_case(name, folder, constants=True):
        return CONSTANTS
    return None


@pytest.mark.parametrize("name", sorted(CASES))
def test_node_case(name, tmp_path):
    mode = run_case_either_way(name, tmp_path)
    if name in PASSING:
        assert mode is not None, f"{name} compiled before and is refused now (see the ModelError above)"
        assert not (mode == CONSTANTS and PASSING[name] == ""), \
            f"{name} ran with every input fed at run time before; now only with its parameters fixed"
