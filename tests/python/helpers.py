"""Constants and helpers shared by the test modules (fixtures live in conftest.py)."""

import functools
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


# ---- onnxruntime's version. The whole suite is verified against this release (CI installs
# the newest onnxruntime for Python 3.11+). An older one (Python 3.10 stops at 1.23: JetPack
# 6) lacks ops and opsets the suite uses and computes a few edge cases differently, fixed
# since: there such a case is skipped, naming the version and what it lacks, never passed.
ORT_VERIFIED = (1, 32)


@functools.lru_cache(maxsize=None)
def ort_version() -> tuple:
    """The installed onnxruntime's (major, minor), (0, 0) without one."""
    try:
        import onnxruntime as ort
    except ImportError:
        return (0, 0)
    return tuple(int(part) for part in ort.__version__.split(".")[:2])


def ort_older_than_verified() -> bool:
    return ort_version() < ORT_VERIFIED


def _version_text(v) -> str:
    return ".".join(map(str, v))


def older_ort_differs(why: str) -> None:
    """Skips the calling test where the installed onnxruntime is older than ORT_VERIFIED: for
    an edge case such a release is known to compute differently (why: what it does; nerve
    and the verified release agree)."""
    if ort_older_than_verified():
        pytest.skip(f"onnxruntime {_version_text(ort_version())} is older than the reference this suite is "
                    f"verified against ({_version_text(ORT_VERIFIED)}): {why}")


def older_ort_cannot_run(exc: BaseException):
    """The skip reason when exc is onnxruntime refusing or failing a reference model (an op,
    opset, IR version or attribute combination it does not support) and that onnxruntime is
    older than ORT_VERIFIED; None otherwise (the test fails as usual). conftest.py applies it
    to every test, whichever of its calls into onnxruntime raised."""
    if not type(exc).__module__.startswith("onnxruntime.") or not ort_older_than_verified():
        return None
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return (f"onnxruntime {_version_text(ort_version())} (older than {_version_text(ORT_VERIFIED)}, which this "
            f"suite is verified against) cannot run this reference: {type(exc).__name__}: {first[:300]}")


def ort_run(m, feeds, basic=False):
    """m run by onnxruntime on the CPU: {output name: array}. basic: only its basic graph
    optimisations (no fusions that change the arithmetic). Integer products of uint8
    activations and int8 weights run exactly on every CPU (ort_session)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    if basic:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    s = ort_session(m, so)
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds)))


# ---- onnxruntime as the reference for integer products. On an x86 CPU without AVX-512 VNNI
# (AVX2 only) onnxruntime multiplies uint8 activations by int8 weights with vpmaddubsw, which
# adds each pair of products into an int16 and saturates there (255 · -128 · 2 = -65280), and
# its ConvInteger of int8 activations by uint8 weights is wrong too: its MatMulInteger,
# ConvInteger, QLinearConv, ... are then off by thousands, while nerve's are exact. Products
# of operands of the same signedness are exact there. So where onnxruntime saturates, the
# reference runs the same model with each such weight stored in its activation's signedness
# (w ± 128, zero point ± 128): the same dequantised values, the same requantisation, exact
# integer sums.

# (domain, op type) -> (indices of the activation and its zero point, or None when the op
# quantizes a float activation to uint8 itself; [(weight index, weight zero point index), ...])
_INT_WEIGHT_INPUTS = {
    ("", "MatMulInteger"): ((0, 2), [(1, 3)]),
    ("", "ConvInteger"): ((0, 2), [(1, 3)]),
    ("", "QLinearConv"): ((0, 2), [(3, 5)]),
    ("", "QLinearMatMul"): ((0, 2), [(3, 5)]),
    ("com.microsoft", "QGemm"): ((0, 2), [(3, 5)]),
    ("com.microsoft", "MatMulIntegerToFloat"): ((0, 4), [(1, 5)]),
    ("com.microsoft", "DynamicQuantizeMatMul"): (None, [(1, 3)]),
}


@functools.lru_cache(maxsize=None)
def ort_u8s8_saturates() -> bool:
    """Whether this machine's onnxruntime sums uint8 x int8 products through int16 (AVX2)."""
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh
    import onnxruntime as ort

    a = np.full((1, 32), 255, np.uint8)
    b = np.full((32, 1), -128, np.int8)
    g = h.make_graph([h.make_node("MatMulInteger", ["a", "b"], ["y"])], "probe",
                     [h.make_tensor_value_info("a", T.UINT8, [1, 32])],
                     [h.make_tensor_value_info("y", T.INT32, [1, 1])], [nh.from_array(b, "b")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 13)])
    m.ir_version = 8
    got = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"a": a})[0]
    return int(got[0, 0]) != 255 * -128 * 32


def ort_session(model, so=None):
    """An onnxruntime CPU session of model (a ModelProto or a path), its mixed-sign integer
    products run exactly where this CPU's onnxruntime would not (see above)."""
    import onnx
    import onnxruntime as ort

    if not isinstance(model, onnx.ModelProto):
        model = onnx.load(str(model))
    if ort_u8s8_saturates():
        model = _weights_signed_as_activations(model)
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _weights_signed_as_activations(model):
    """A copy of model in which every 8-bit weight initializer multiplied with activations of
    the other signedness (the ops of _INT_WEIGHT_INPUTS, and a DequantizeLinear of a weight
    beside a DequantizeLinear of activations, as the QDQ format writes a quantized Conv or
    MatMul) takes the activations' type: w ± 128 and its zero point ± 128 (a zero point added
    where the node has none)."""
    import onnx
    from onnx import numpy_helper as nh

    copied = onnx.ModelProto()
    copied.CopyFrom(model)
    model, g = copied, copied.graph
    inits = {t.name: t for t in g.initializer}
    types = _tensor_types(model)
    producers = {o: n for n in g.node for o in n.output}
    consumers = {}
    for n in g.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    eight_bit = (onnx.TensorProto.UINT8, onnx.TensorProto.INT8)

    to_shift = []  # (node, weight index, zero point index, the activations' type)
    for n in g.node:
        rule = _INT_WEIGHT_INPUTS.get((n.domain if n.domain != "ai.onnx" else "", n.op_type))
        if rule is not None:
            act, pairs = rule
            act_type = onnx.TensorProto.UINT8 if act is None else next(
                (types[n.input[i]] for i in act if len(n.input) > i and types.get(n.input[i])), None)
            to_shift += [(n, w, zp, act_type) for w, zp in pairs]
        elif n.op_type == "DequantizeLinear" and n.input[0] in inits:
            beside = {types.get(p.input[0]) for c in consumers.get(n.output[0], []) for i in c.input
                      if i != n.output[0] for p in [producers.get(i)] if p is not None and p.op_type == "DequantizeLinear"}
            kinds = beside & set(eight_bit)
            if len(kinds) == 1:
                to_shift.append((n, 0, 2, kinds.pop()))
    shifted = set()
    for n, w, zp, act_type in to_shift:
        weight, zero = n.input[w] if len(n.input) > w else "", n.input[zp] if len(n.input) > zp else ""
        if act_type not in eight_bit or weight not in inits or inits[weight].data_type not in eight_bit \
                or inits[weight].data_type == act_type or (zero and zero not in inits):
            continue  # same signedness already, or a run-time weight or zero point: left as it is
        to_unsigned = act_type == onnx.TensorProto.UINT8
        if not zero:  # none: 0, stored as 128 or -128 (a DequantizeLinear's per axis, as its scale)
            while len(n.input) <= zp:
                n.input.append("")
            zero = n.input[zp] = f"{n.output[0]}.zero_point"
            scale = inits.get(n.input[1]) if n.op_type == "DequantizeLinear" else None
            shape = tuple(scale.dims) if scale is not None else ()
            g.initializer.append(nh.from_array(np.zeros(shape, np.int8 if to_unsigned else np.uint8), zero))
            inits[zero] = g.initializer[-1]
        for name in (weight, zero):
            if name not in shifted:
                t = inits[name]
                v = nh.to_array(t).astype(np.int16)
                t.CopyFrom(nh.from_array((v + 128).astype(np.uint8) if to_unsigned else (v - 128).astype(np.int8), name))
                shifted.add(name)
    return model


def _tensor_types(model):
    """{tensor name: TensorProto type} of model's main graph: declared, inferred, and for the
    com.microsoft ops that shape inference does not know (QLinearGlobalAveragePool, ...)
    carried by hand: a quantized op's output has its zero point's type, a Flatten's its
    input's."""
    import onnx

    g = model.graph
    types = {vi.name: vi.type.tensor_type.elem_type for vi in list(g.input) + list(g.output) + list(g.value_info)}
    types.update({t.name: t.data_type for t in g.initializer})
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
        types.update({vi.name: vi.type.tensor_type.elem_type for vi in inferred.graph.value_info})
    except Exception:  # noqa: BLE001 - inference is a help here, not a requirement
        pass
    eight_bit = (onnx.TensorProto.UINT8, onnx.TensorProto.INT8)
    for n in g.node:
        if n.op_type.startswith("QLinear") or n.op_type in ("QuantizeLinear", "QGemm"):
            zero_points = [types.get(i) for i in n.input if types.get(i) in eight_bit]
            out_type = zero_points[-1] if zero_points else 0  # the output zero point is the last
        elif n.op_type in ("Flatten", "Reshape", "Squeeze", "Unsqueeze", "Transpose", "Identity", "Concat"):
            out_type = types.get(n.input[0], 0)
        else:
            continue
        for o in n.output:
            if o and not types.get(o):
                types[o] = out_type
    return types


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
