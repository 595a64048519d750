"""Ops whose output size depends on the data (NonZero, Compress, NonMaxSuppression, Unique) against
onnxruntime: the size is a symbol of the plan set during the run (op set_dim after the op
that counts), so the ops downstream run at the real extent and a session's next run may find
another one. Fresh random inputs, several runs per session (counts of zero and of everything
included); the detection post-processing a YOLO or SSD export ends with. And Loop, whose
iterations must be known at compile time (it is unrolled): against onnxruntime, and refused
clearly when the data decides them."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import nerve  # noqa: E402


I64, F32 = TensorProto.INT64, TensorProto.FLOAT


def _model(nodes, inputs, outputs, inits=()):
    """inputs: [(name, elem_type, shape)]; outputs: [(name, elem_type)]; inits: [(name, array)]."""
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                              [helper.make_tensor_value_info(n, t, None) for n, t in outputs],
                              [numpy_helper.from_array(np.asarray(a), n) for n, a in inits])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m.SerializeToString()


def _check(model, feed_sets, exact=True, **kw):
    """Every output of one nerve session equal to onnxruntime's (shape, dtype and values) for
    each feeds dict in turn."""
    sess = nerve.Session(model, cache=False, **kw)
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    names = [o.name for o in ref.get_outputs()]
    for feeds in feed_sets:
        got = sess.run(feeds)
        for name, want in zip(names, ref.run(None, feeds)):
            assert got[name].shape == want.shape and got[name].dtype == want.dtype, (name, got[name].shape,
                                                                                      want.shape)
            if exact:
                np.testing.assert_array_equal(got[name], want, err_msg=name)
            else:
                np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-6, err_msg=name)
    return sess


def test_nonzero_of_run_time_values_sizes_what_follows(rng):
    """NonZero of a comparison, its transpose as GatherND indices, the values summed: the count
    differs run to run (none, all, some) and every tensor after it follows."""
    model = _model([helper.make_node("Greater", ["x", "t"], ["m"]), helper.make_node("NonZero", ["m"], ["nz"]),
                    helper.make_node("Transpose", ["nz"], ["at"]), helper.make_node("GatherND", ["x", "at"], ["v"]),
                    helper.make_node("Shape", ["v"], ["n"]), helper.make_node("ReduceSum", ["v"], ["s"], keepdims=1)],
                   [("x", TensorProto.FLOAT, [3, 7, 5])], [("nz", I64), ("v", F32), ("n", I64), ("s", F32)], [("t", np.array(0.6, np.float32))])
    feeds = [{"x": rng.random((3, 7, 5)).astype(np.float32)} for _ in range(4)]
    feeds[1]["x"][:] = 0.0
    feeds[2]["x"][:] = 1.0
    sess = _check(model, feeds, exact=False)
    assert "set_dim" in [o["type"] for o in sess.ops()]


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int32, np.uint8, np.bool_])
def test_nonzero_dtypes(dtype, rng):
    """NonZero of each element type, -0.0 counting as zero and NaN as nonzero."""
    x = (rng.random((4, 9)) * 3).astype(dtype)
    if dtype == np.float32:
        x[0, :3] = [-0.0, np.nan, 0.0]
    elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    model = _model([helper.make_node("NonZero", ["x"], ["nz"])], [("x", elem, [4, 9])], [("nz", I64)])
    _check(model, [{"x": x}, {"x": np.zeros_like(x)}])


def test_nonzero_with_symbolic_input_dims(rng):
    """The input's own dims symbolic: the count's bound is the product of their bounds."""
    model = _model([helper.make_node("NonZero", ["x"], ["nz"])], [("x", TensorProto.FLOAT, ["n", 6])], [("nz", I64)])
    feeds = [{"x": (rng.random((n, 6)) > 0.5).astype(np.float32)} for n in (1, 13, 4)]
    _check(model, feeds, dims={"n": 13})


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_compress(axis, rng):
    """Compress along an axis or of the flattened input, the condition a run-time comparison
    (shorter than the axis: the rest is left out)."""
    length = {None: 20, 0: 5, 1: 4, -1: 3}[axis]
    attrs = {} if axis is None else {"axis": axis}
    model = _model([helper.make_node("Greater", ["c", "t"], ["cond"]),
                    helper.make_node("Compress", ["x", "cond"], ["y"], **attrs)],
                   [("x", TensorProto.FLOAT, [5, 4, 3]), ("c", TensorProto.FLOAT, [length])], [("y", F32)],
                   [("t", np.array(0.5, np.float32))])
    feeds = [{"x": rng.standard_normal((5, 4, 3)).astype(np.float32), "c": rng.random(length).astype(np.float32)}
             for _ in range(3)]
    feeds[1]["c"][:] = 0.0
    _check(model, feeds)


def _random_boxes(rng, batches, n, center):
    """Boxes that overlap often: corners in any diagonal order, or centre and size."""
    if center:
        xy = rng.random((batches, n, 2)) * 8
        wh = rng.random((batches, n, 2)) * 4 + 0.1
        return np.concatenate([xy, wh], axis=2).astype(np.float32)
    a = rng.random((batches, n, 2)) * 8
    b = a + (rng.random((batches, n, 2)) * 4 + 0.1) * rng.choice([-1, 1], (batches, n, 2))
    return np.concatenate([a, b], axis=2).astype(np.float32)


@pytest.mark.parametrize("center", [0, 1])
@pytest.mark.parametrize("max_out,iou,score", [(5, 0.5, 0.3), (1, 0.0, None), (0, 0.5, None), (100, 0.7, 0.9),
                                               (-3, 0.5, 0.1), (3, 1.0, None)])
def test_non_max_suppression(center, max_out, iou, score, rng):
    """selected_indices equal to onnxruntime's for 2 images x 3 classes x 97 boxes, over the
    attribute and threshold settings (no max: nothing; negative: nothing; IoU 0 and 1), the
    scores distinct (onnxruntime's order of equal scores is its heap's)."""
    inits = [("max", np.array(max_out, np.int64)), ("iou", np.array(iou, np.float32))]
    names = ["boxes", "scores", "max", "iou"]
    if score is not None:
        inits.append(("score", np.array(score, np.float32)))
        names.append("score")
    model = _model([helper.make_node("NonMaxSuppression", names, ["sel"], center_point_box=center)],
                   [("boxes", TensorProto.FLOAT, [2, 97, 4]), ("scores", TensorProto.FLOAT, [2, 3, 97])], [("sel", I64)],
                   inits)
    feeds = [{"boxes": _random_boxes(rng, 2, 97, center), "scores": rng.permutation(2 * 3 * 97).reshape(2, 3, 97)
              .astype(np.float32) / 582} for _ in range(3)]
    _check(model, feeds)


def test_non_max_suppression_without_optional_inputs(rng):
    """Only boxes and scores: no max_output_boxes_per_class, so nothing is selected."""
    model = _model([helper.make_node("NonMaxSuppression", ["boxes", "scores"], ["sel"])],
                   [("boxes", TensorProto.FLOAT, [1, 10, 4]), ("scores", TensorProto.FLOAT, [1, 2, 10])], [("sel", I64)])
    _check(model, [{"boxes": _random_boxes(rng, 1, 10, 0), "scores": rng.random((1, 2, 10)).astype(np.float32)}])


def test_detection_post_processing(rng):
    """A detector's tail as exports write it: transposed scores, NMS with run-time
    thresholds, then the selected boxes and their scores gathered by the indices (Slice,
    Squeeze, Gather, GatherND), the number of detections varying run to run, the symbolic
    box count bound at compile time."""
    nodes = [helper.make_node("Transpose", ["cls"], ["scores"], perm=[0, 2, 1]),
             helper.make_node("NonMaxSuppression", ["boxes", "scores", "max", "iou", "thr"], ["sel"],
                              center_point_box=1),
             helper.make_node("Slice", ["sel", "s2", "e3", "ax1"], ["box_col"]),
             helper.make_node("Squeeze", ["box_col", "ax1"], ["box_idx"]),
             helper.make_node("Gather", ["boxes", "box_idx"], ["picked"], axis=1),
             helper.make_node("Slice", ["sel", "s0", "e1", "ax1"], ["b_col"]),
             helper.make_node("Slice", ["sel", "s1", "e3", "ax1"], ["cb"]),
             helper.make_node("GatherND", ["scores", "sel"], ["conf"]),
             helper.make_node("Cast", ["b_col"], ["b_f"], to=TensorProto.FLOAT)]
    inits = [("max", np.array(20, np.int64)), ("s0", np.array([0], np.int64)), ("e1", np.array([1], np.int64)),
             ("s1", np.array([1], np.int64)), ("s2", np.array([2], np.int64)), ("e3", np.array([3], np.int64)),
             ("ax1", np.array([1], np.int64))]
    model = _model(nodes, [("boxes", TensorProto.FLOAT, [1, "anchors", 4]),
                           ("cls", TensorProto.FLOAT, [1, "anchors", 4]),
                           ("iou", TensorProto.FLOAT, []), ("thr", TensorProto.FLOAT, [])],
                   [("sel", I64), ("picked", F32), ("cb", I64), ("conf", F32), ("b_f", F32)], inits)
    feeds = []
    for anchors, thr in ((300, 0.5), (120, 0.99), (300, 0.0), (50, 1.5)):
        feeds.append({"boxes": _random_boxes(rng, 1, anchors, 1),
                      "cls": rng.permutation(anchors * 4).reshape(1, anchors, 4).astype(np.float32) / (anchors * 4),
                      "iou": np.array(0.45, np.float32), "thr": np.array(thr, np.float32)})
    _check(model, feeds, dims={"anchors": 300})


def test_non_max_suppression_bad_threshold_is_a_clear_error(rng):
    """An IoU threshold outside [0, 1] fed at run time: InputError naming it, and the session
    runs again afterwards."""
    model = _model([helper.make_node("NonMaxSuppression", ["boxes", "scores", "max", "iou"], ["sel"])],
                   [("boxes", TensorProto.FLOAT, [1, 8, 4]), ("scores", TensorProto.FLOAT, [1, 1, 8]),
                    ("iou", TensorProto.FLOAT, [])], [("sel", I64)], [("max", np.array(4, np.int64))])
    sess = nerve.Session(model, cache=False)
    feeds = {"boxes": _random_boxes(rng, 1, 8, 0), "scores": rng.random((1, 1, 8)).astype(np.float32),
             "iou": np.array(1.5, np.float32)}
    with pytest.raises(nerve.NerveError, match="iou_threshold"):
        sess.run(feeds)
    feeds["iou"] = np.array(0.5, np.float32)
    assert sess.run(feeds)["sel"].shape[1] == 3


def test_nonzero_plan_survives_save_and_load(tmp_path, rng):
    """A plan with a data-decided size written to a file and loaded again runs the same."""
    model = _model([helper.make_node("NonZero", ["x"], ["nz"])], [("x", TensorProto.FLOAT, [6, 6])], [("nz", I64)])
    path = nerve.compile(model).save(tmp_path / "nz.nrv")
    x = (rng.random((6, 6)) > 0.7).astype(np.float32)
    np.testing.assert_array_equal(nerve.Session(nerve.Plan.load(path)).run({"x": x})["nz"], np.array(np.nonzero(x)))


def test_nonzero_of_a_scalar_fails_clearly():
    model = _model([helper.make_node("NonZero", ["x"], ["nz"])], [("x", TensorProto.FLOAT, [])], [("nz", I64)])
    with pytest.raises(nerve.NerveError, match="NonZero of a scalar"):
        nerve.Session(model, cache=False)


def test_topk_of_the_boxes_left(rng):
    """TopK with k = min(5, boxes left after a score filter), as torchvision's detection
    exports compute it from sizes: k evaluated in each run, after the count is known."""
    nodes = [helper.make_node("Greater", ["s", "t"], ["keep"]), helper.make_node("Compress", ["s", "keep"], ["left"]),
             helper.make_node("Shape", ["left"], ["n"]), helper.make_node("Min", ["n", "five"], ["k"]),
             helper.make_node("TopK", ["left", "k"], ["v", "i"])]
    model = _model(nodes, [("s", TensorProto.FLOAT, [40])], [("v", F32), ("i", I64)],
                   [("t", np.array(0.8, np.float32)), ("five", np.array([5], np.int64))])
    feeds = [{"s": rng.permutation(40).astype(np.float32) / 40} for _ in range(2)]
    feeds.append({"s": np.linspace(0.0, 0.83, 40, dtype=np.float32)})  # 2 left: k = 2
    feeds.append({"s": np.zeros(40, np.float32)})                      # none left: k = 0
    _check(model, feeds)


# ---------------------------------------------------------------- Loop (unrolled)

def _loop_body(cond_out=None):
    """A body: acc <- acc * 0.5 + x[i] (x from the outer graph), scan out acc and i * 2; the
    condition out is cond_in, or what cond_out(builder nodes) gives."""
    nodes = [helper.make_node("Gather", ["x", "i"], ["xi"], axis=0),
             helper.make_node("Mul", ["acc_in", "half"], ["h"]), helper.make_node("Add", ["h", "xi"], ["acc_out"]),
             helper.make_node("Mul", ["i", "two"], ["i2"])]
    nodes += cond_out or [helper.make_node("Identity", ["c_in"], ["c_out"])]
    return helper.make_graph(
        nodes, "body", [helper.make_tensor_value_info("i", I64, []), helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
                        helper.make_tensor_value_info("acc_in", F32, [3])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []), helper.make_tensor_value_info("acc_out", F32, [3]),
         helper.make_tensor_value_info("acc_out", F32, [3]), helper.make_tensor_value_info("i2", I64, [])],
        [numpy_helper.from_array(np.array(0.5, np.float32), "half"), numpy_helper.from_array(np.array(2, np.int64), "two")])


@pytest.mark.parametrize("kind", ["count", "shape", "until"])
def test_loop_with_known_iterations_is_unrolled(kind, rng):
    """Loop with its trip count a constant or the input's length, or with a condition the body
    computes from the iteration number: the loop-carried value and both scan outputs equal
    onnxruntime's."""
    until = [helper.make_node("Less", ["i", "lim"], ["c_out"])] if kind == "until" else None
    body = _loop_body(until)
    if until:
        body.initializer.append(numpy_helper.from_array(np.array(3, np.int64), "lim"))
    nodes = [helper.make_node("Shape", ["x"], ["xs"]), helper.make_node("Gather", ["xs", "zero"], ["n"], axis=0)]
    m = {"count": "m", "shape": "n", "until": ""}[kind]
    nodes.append(helper.make_node("Loop", [m, "" if kind != "until" else "t", "acc0"], ["acc", "accs", "i2s"],
                                  body=body))
    model = _model(nodes, [("x", F32, [6, 3])], [("acc", F32), ("accs", F32), ("i2s", I64)],
                   [("m", np.array(4, np.int64)), ("zero", np.array(0, np.int64)), ("t", np.array(True)),
                    ("acc0", np.zeros(3, np.float32))])
    _check(model, [{"x": rng.standard_normal((6, 3)).astype(np.float32)} for _ in range(2)], exact=False)


def test_loop_with_a_data_dependent_condition_is_refused():
    body = _loop_body([helper.make_node("ReduceSum", ["acc_out"], ["s"], keepdims=0),
                       helper.make_node("Less", ["s", "big"], ["c_out"])])
    body.initializer.append(numpy_helper.from_array(np.array(10.0, np.float32), "big"))
    model = _model([helper.make_node("Loop", ["m", "", "acc0"], ["acc", "accs", "i2s"], body=body)],
                   [("x", F32, [6, 3])], [("acc", F32), ("accs", F32), ("i2s", I64)],
                   [("m", np.array(4, np.int64)), ("acc0", np.zeros(3, np.float32))])
    with pytest.raises(nerve.ModelError, match="depends on the data.*unrolled"):
        nerve.Session(model, cache=False)


@pytest.mark.parametrize("in_dir,out_dir,out_axis", [(0, 0, 0), (1, 0, 1), (0, 1, 1), (1, 1, 0)])
def test_scan_is_unrolled(in_dir, out_dir, out_axis, rng):
    """Scan over a sequence of known length: a running state and a per-step output, the input
    scanned along axis 1 in either direction, the output stacked along either axis in either
    direction; against onnxruntime."""
    body = helper.make_graph(
        [helper.make_node("Mul", ["s_in", "decay"], ["sd"]), helper.make_node("Add", ["sd", "xt"], ["s_out"]),
         helper.make_node("Tanh", ["s_out"], ["y_t"])], "body",
        [helper.make_tensor_value_info("s_in", F32, [4]), helper.make_tensor_value_info("xt", F32, [4])],
        [helper.make_tensor_value_info("s_out", F32, [4]), helper.make_tensor_value_info("y_t", F32, [4])],
        [numpy_helper.from_array(np.array(0.7, np.float32), "decay")])
    node = helper.make_node("Scan", ["s0", "x"], ["s", "y"], body=body, num_scan_inputs=1, scan_input_axes=[1],
                            scan_input_directions=[in_dir], scan_output_axes=[out_axis],
                            scan_output_directions=[out_dir])
    model = _model([node], [("s0", F32, [4]), ("x", F32, [4, 9])], [("s", F32), ("y", F32)])
    _check(model, [{"s0": rng.standard_normal(4).astype(np.float32), "x": rng.standard_normal((4, 9)).astype(np.float32)}],
           exact=False)


@pytest.mark.parametrize("axis,sorted_", [(None, 1), (None, 0), (0, 1), (1, 0), (-1, 1)])
@pytest.mark.parametrize("dtype", [np.float32, np.int64])
def test_unique(axis, sorted_, dtype, rng):
    """Unique of elements or of slices along an axis, sorted or in order of first occurrence:
    the values, first positions, inverse and counts equal onnxruntime's, over inputs with many
    repeats, none, and -0.0 beside 0.0."""
    attrs = {"sorted": sorted_} if axis is None else {"sorted": sorted_, "axis": axis}
    elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    model = _model([helper.make_node("Unique", ["x"], ["y", "idx", "inv", "cnt"], **attrs)], [("x", elem, [6, 5])],
                   [("y", elem), ("idx", I64), ("inv", I64), ("cnt", I64)])
    few = rng.integers(0, 3, (6, 5)).astype(dtype)
    few[2] = few[4]          # a repeated row
    few[:, 1] = few[:, 3]    # a repeated column
    distinct = rng.permutation(30).reshape(6, 5).astype(dtype)
    feeds = [{"x": few}, {"x": distinct}, {"x": np.zeros((6, 5), dtype)}]
    if dtype == np.float32:
        signed = few.copy()
        signed[0, 0], signed[5, 4] = -0.0, 0.0
        feeds.append({"x": signed})
    _check(model, feeds)


# ---------------------------------------------------------------- Range over run-time bounds


def _length_mask_model(dtype=I64):
    """A TTS length regulator's idiom: frames = Range(0, max(lengths), 1), then the sequence
    mask frames < lengths[:, None] and the frame indices scaled by a float."""
    cast = [] if dtype == I64 else [helper.make_node("Cast", ["mx64"], ["mx"], to=dtype)]
    return _model([helper.make_node("ReduceMax", ["lengths"], ["mx64"], keepdims=0)] + cast +
                  [helper.make_node("Range", ["zero", "mx" if cast else "mx64", "one"], ["frames"], name="frames"),
                   helper.make_node("Unsqueeze", ["frames", "ax0"], ["f2"]),
                   helper.make_node("Cast", ["lengths"], ["len_t"], to=dtype),
                   helper.make_node("Unsqueeze", ["len_t", "ax1"], ["l2"]),
                   helper.make_node("Less", ["f2", "l2"], ["mask"]),
                   helper.make_node("Cast", ["frames"], ["ff"], to=F32),
                   helper.make_node("Mul", ["ff", "step"], ["times"])],
                  [("lengths", I64, [3])], [("frames", dtype), ("mask", TensorProto.BOOL), ("times", F32)],
                  [("zero", np.array(0, helper.tensor_dtype_to_np_dtype(dtype))),
                   ("one", np.array(1, helper.tensor_dtype_to_np_dtype(dtype))),
                   ("ax0", np.array([0])), ("ax1", np.array([1])), ("step", np.array(0.0125, np.float32))])


@pytest.mark.parametrize("dtype", [I64, TensorProto.INT32, F32])
def test_range_over_run_time_bounds_sizes_what_follows(dtype, rng):
    """Range whose limit the data decides, with its bound given by name in dims: each run finds
    its own length (0, the bound, and between) and the mask and scaled times after it follow."""
    lengths = [rng.integers(0, 60, 3) for _ in range(3)] + [np.zeros(3), np.array([0, 64, 3]), np.array([5, 1, 2])]
    _check(_length_mask_model(dtype), [{"lengths": np.asarray(v, np.int64)} for v in lengths], exact=False,
           dims={"frames.length": 64})


def test_range_with_every_bound_at_run_time(rng):
    """start, limit and delta all fed: negative steps, empty ranges, steps that do not divide."""
    model = _model([helper.make_node("Range", ["s", "l", "d"], ["y"], name="r"),
                    helper.make_node("ReduceSum", ["y"], ["t"], keepdims=1)],
                   [("s", I64, []), ("l", I64, []), ("d", I64, [])], [("y", I64), ("t", I64)])
    cases = [(0, 10, 3), (10, -7, -4), (5, 5, 1), (5, 2, 1), (-3, 40, 7)] + \
        [tuple(int(v) for v in rng.integers(-50, 50, 2)) + (int(rng.choice([-3, -1, 2, 5])),) for _ in range(4)]
    # bound: the longest range drawn, 99 elements (from -50 to 49 by 1)
    _check(model, [{"s": np.array(s), "l": np.array(lim), "d": np.array(d)} for s, lim, d in cases],
           dims={"r.length": 100})


def test_range_over_run_time_bounds_needs_its_bound_by_name():
    with pytest.raises(nerve.ModelError, match=r"only known at run time.*dims=\{'frames.length': N\}"):
        nerve.Session(_length_mask_model(), cache=False)


def test_range_longer_than_its_bound_is_refused_and_the_session_survives():
    sess = nerve.Session(_length_mask_model(), cache=False, dims={"frames.length": 16})
    with pytest.raises(nerve.InputError, match=r"'frames.length' \(node 'frames'\) is 17, outside \[0, 16\]"):
        sess.run({"lengths": np.array([3, 17, 2])})
    got = sess.run({"lengths": np.array([3, 16, 2])})
    assert got["frames"].shape == (16,) and got["mask"].shape == (3, 16)
    np.testing.assert_array_equal(got["mask"].sum(1), [3, 16, 2])


def test_range_with_a_zero_step_at_run_time_is_a_clear_error():
    model = _model([helper.make_node("Range", ["s", "l", "d"], ["y"], name="r")],
                   [("s", I64, []), ("l", I64, []), ("d", I64, [])], [("y", I64)])
    sess = nerve.Session(model, cache=False, dims={"r.length": 8})
    with pytest.raises(nerve.NerveError, match="delta is 0"):
        sess.run({"s": np.array(0), "l": np.array(4), "d": np.array(0)})
    np.testing.assert_array_equal(sess.run({"s": np.array(0), "l": np.array(4), "d": np.array(1)})["y"], [0, 1, 2, 3])


def test_run_time_range_plan_survives_save_and_load(tmp_path):
    path = tmp_path / "r.nrv"
    nerve.compile(_length_mask_model(), dims={"frames.length": 32}).save(path)
    got = nerve.Session(path).run({"lengths": np.array([4, 9, 1])})
    np.testing.assert_array_equal(got["frames"], np.arange(9))
