"""Constants and helpers shared by the test modules (fixtures live in conftest.py)."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import nerve

REPO = Path(__file__).resolve().parents[2]
HEADER = REPO / "native" / "include" / "nerve.h"
SEED = int(os.environ.get("NERVE_TEST_SEED", np.random.SeedSequence().entropy % 2**32))

# Sizes that are never a multiple of a vector width (the tails are where kernels break).
SIZES = (1, 3, 13, 97, 127, 257, 1025)
U32 = float(np.finfo(np.float32).eps) / 2  # unit roundoff of float32


def variant_params(op):
    """pytest params for every variant compiled in for op; the ones this CPU cannot run are
    reported as skipped (with the reason), never as passed."""
    params = []
    for v in nerve.kernels.variant_info(op):
        marks = ()
        if not v["runnable"]:
            marks = pytest.mark.skip(reason=f"variant '{v['name']}' of {op} needs CPU features this machine lacks")
        params.append(pytest.param(v["name"], id=v["name"], marks=marks))
    return params


def run_cli(*args, timeout=120):
    """Runs `python -m nerve.cli ARGS` in a subprocess; returns the CompletedProcess."""
    return subprocess.run(
        [sys.executable, "-m", "nerve.cli", *args], capture_output=True, text=True, timeout=timeout
    )


def op_variant_params(op_names):
    """(op, variant) params for several ops, ids like 'gelu-ref'."""
    params = []
    for op in op_names:
        for p in variant_params(op):
            params.append(pytest.param(op, p.values[0], id=f"{op}-{p.id}", marks=p.marks))
    return params


def forced(op, variant):
    """nerve.kernels.force(op, variant), checking that the dispatch table really switched."""
    ctx = nerve.kernels.force(op, variant)
    assert nerve.kernels.selected(op) == variant
    return ctx


def assert_within(got, ref, tol, what=""):
    """Asserts |got - ref| <= tol element-wise (tol broadcast); NaN anywhere fails. The
    message shows how many elements fail and the worst one."""
    got = np.asarray(got)
    ref = np.asarray(ref, dtype=np.float64)
    assert got.shape == ref.shape, f"{what}: shape {got.shape} != expected {ref.shape}"
    tol = np.broadcast_to(np.asarray(tol, dtype=np.float64), ref.shape)
    err = np.abs(got.astype(np.float64) - ref)
    bad = ~(err <= tol)
    if bad.any():
        score = np.where(bad, np.nan_to_num(err / np.maximum(tol, 1e-300), nan=np.inf, posinf=np.inf), 0)
        worst = np.unravel_index(int(np.argmax(score)), ref.shape)
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {ref.size} elements out of tolerance; worst at {worst}: "
            f"got {got[worst]!r}, expected {ref[worst]!r}, |err| {err[worst]:.3g} > tol {tol[worst]:.3g}"
        )


# ---- ONNX models with int8 weights dequantised in the graph (test_linear_w8*.py). onnx and
# onnxruntime are imported where used, so modules that need neither can import this one.


def make_model(nodes, inputs, outputs, inits, opset=17):
    """A model of the given opset (plus onnxruntime's com.microsoft domain): inputs [(name,
    TensorProto type, shape)], outputs [(name, type)], inits {name: array} as initializers."""
    from onnx import helper as h
    from onnx import numpy_helper as nh

    g = h.make_graph(nodes, "g", [h.make_tensor_value_info(n, dt, shp) for n, dt, shp in inputs],
                     [h.make_tensor_value_info(n, dt, None) for n, dt in outputs],
                     [nh.from_array(np.asarray(v), k) for k, v in inits.items()])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset), h.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8 if opset < 21 else 10
    return m


def dequant_nodes(q_name="q", out="W", sub_zero=False):
    """W = Cast(q) * s + z (or (Cast(q) - zp) * s with sub_zero)."""
    from onnx import TensorProto as T
    from onnx import helper as h

    if sub_zero:
        return [h.make_node("Cast", [q_name], ["qf"], to=T.FLOAT), h.make_node("Sub", ["qf", "zp"], ["qc"]),
                h.make_node("Mul", ["qc", "s"], [out])]
    return [h.make_node("Cast", [q_name], ["qf"], to=T.FLOAT), h.make_node("Mul", ["qf", "s"], ["qs"]),
            h.make_node("Add", ["qs", "z"], [out])]


def quant(rng, shape, s_shape=(1,), z_shape=(1,)):
    """Random int8 q of shape, scales s (quantisation-like) and zero points z."""
    q = rng.integers(-128, 128, shape).astype(np.int8)
    s = (0.002 + 0.01 * rng.random(s_shape)).astype(np.float32)
    z = (0.05 * rng.standard_normal(z_shape)).astype(np.float32)
    return q, s, z


def w8_matmul_model(rng, k, n, bias=True, relu=True, s_shape=(1,), z_shape=(1,), rows_dims=("batch", "seq")):
    """y = [Relu](x · (Cast(q) * s + z) [+ b]), x [*rows_dims, k]; returns (model, inits)."""
    from onnx import TensorProto as T
    from onnx import helper as h

    q, s, z = quant(rng, (k, n), s_shape, z_shape)
    nodes = dequant_nodes() + [h.make_node("MatMul", ["x", "W"], ["mm"])]
    inits = {"q": q, "s": s, "z": z}
    last = "mm"
    if bias:
        inits["b"] = rng.standard_normal(n).astype(np.float32)
        nodes.append(h.make_node("Add", [last, "b"], ["mb"]))
        last = "mb"
    if relu:
        nodes.append(h.make_node("Relu", [last], ["act"]))
        last = "act"
    nodes.append(h.make_node("Identity", [last], ["y"]))
    return make_model(nodes, [("x", T.FLOAT, list(rows_dims) + [k])], [("y", T.FLOAT)], inits), inits


def onnx_session(tmp_path, m, dims, **kw):
    """m saved under tmp_path and compiled by nerve.Session (no plan cache)."""
    import onnx

    p = tmp_path / "m.onnx"
    onnx.save(m, p)
    return nerve.Session(p, dims=dims, cache=False, **kw)


def ort_run(m, feeds, basic=False):
    """m run by onnxruntime on the CPU: {output name: array}. basic: only its basic graph
    optimisations (no fusions that change the arithmetic)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    if basic:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds)))


def op_types(sess):
    return [o["type"] for o in sess.ops()]


def undo_dynamic_quantization(model):
    """model (an onnx ModelProto, changed in place and returned) with onnxruntime's dynamic
    quantization undone, in every subgraph: MatMulIntegerToFloat fed by a
    DynamicQuantizeLinear, and DynamicQuantizeMatMul, become a float MatMul (+ Add of the
    bias) on the dequantised weight — the arithmetic nerve runs them with, for onnxruntime to
    check it (its own kernels round the activations to uint8 first)."""
    from onnx import helper as h
    from onnx import numpy_helper as nh

    inits = {i.name: nh.to_array(i) for i in model.graph.initializer}
    dql = {}  # quantized activation -> its DynamicQuantizeLinear (a subgraph sees its outer graph's)
    added = []

    def rewrite(graph):
        for i in graph.initializer:
            inits[i.name] = nh.to_array(i)
        dql.update({n.output[0]: n for n in graph.node if n.op_type == "DynamicQuantizeLinear"})
        nodes = []
        for n in graph.node:
            for a in n.attribute:
                if a.type == a.GRAPH:
                    rewrite(a.g)
            if n.op_type not in ("MatMulIntegerToFloat", "DynamicQuantizeMatMul"):
                nodes.append(n)
                continue
            ins = list(n.input) + [""] * 7
            if n.op_type == "MatMulIntegerToFloat":
                a, b, bs, bz, bias = dql[ins[0]].input[0], ins[1], ins[3], ins[5], ins[6]
            else:
                a, b, bs, bz, bias = ins[:5]
            w = inits[b].astype(np.float64) - (inits[bz].astype(np.float64) if bz else 0.0)
            wname = n.name + "/float_weight"
            added.append(nh.from_array((w * inits[bs].astype(np.float64)).astype(np.float32), wname))
            out = n.output[0]
            if bias:
                nodes += [h.make_node("MatMul", [a, wname], [out + "/mm"], name=n.name),
                          h.make_node("Add", [out + "/mm", bias], [out], name=n.name + "/bias")]
            else:
                nodes.append(h.make_node("MatMul", [a, wname], [out], name=n.name))
        del graph.node[:]
        graph.node.extend(nodes)

    rewrite(model.graph)
    model.graph.initializer.extend(added)
    return model
