"""The ONNX ops of streaming and decoding models that carry state between runs
(sdk/nerve/compiler/onnx_ops_stream.py, native/src/plan/op_stream.c): TensorScatter (opset
24, a KV cache of fixed length), CausalConvWithState and LinearAttention (opset 27, the
blocks of Mamba- and DeltaNet-style models), each against onnxruntime at awkward sizes, then
run as a stream: the state kept in the session (``state={present: past}``) and the input fed
in chunks of uneven lengths must give what one run over the whole input gives.

Tolerances: TensorScatter only moves values (exact). CausalConvWithState is a k-tap sum per
output of products of standard normals, in another order than onnxruntime's, and a few
outputs may cancel to near zero: the error is relative to the terms, so the scale is at
least 1 (over 200 seeds the worst was 4.1e-7 of it; held to 2e-6). LinearAttention sums T
outer products into its state and reads it back through dk-term products, in another order
than onnxruntime's: over 200 seeds the worst was 4.0e-7 of the output's scale, held to 4e-6.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import nerve
from helpers import assert_within, forced, make_model, ort_run, ort_session, variant_params

ort = pytest.importorskip("onnxruntime")

F32 = np.float32
CONV_TOL = 2e-6
LA_TOL = 4e-6


def _model(nodes, inputs, outputs, inits=None, opset=27):
    """inputs [(name, TensorProto type, shape)], outputs [names] (float32), inits {name: array}."""
    return make_model(nodes, inputs, [(o, T.FLOAT) for o in outputs], inits or {}, opset)


def _seen(m, state="present"):
    """m with the state output also copied to output "seen": a session keeps a state output
    to itself (nerve.Session.run does not return it)."""
    m.graph.node.append(h.make_node("Identity", [state], ["seen"]))
    m.graph.output.append(h.make_tensor_value_info("seen", T.FLOAT, None))
    return m


def _session(m, dims=None, **kw):
    return nerve.Session(m, dims=dims or {}, cache=False, **kw)


def _close(got, want, rel, what, floor=1e-3):
    """|got - want| <= rel x the largest |want| (at least floor)."""
    scale = max(float(np.abs(want).max()), floor) if want.size else 1.0
    assert np.asarray(got).shape == want.shape, (what, np.asarray(got).shape, want.shape)
    assert_within(got, want, rel * scale, what)


# ----------------------------------------------------------------------------- TensorScatter

# (past shape, axis, update length, mode, write indices given)
SCATTER_CASES = [
    ((1, 2, 8, 3), -2, 1, "linear", True),
    ((3, 4, 13, 5), -2, 4, "linear", True),
    ((2, 3, 7, 1), -2, 7, "linear", False),      # the whole cache (prefill)
    ((3, 2, 9, 6), -2, 5, "circular", True),     # wraps for starts past 4
    ((2, 5, 3), 1, 2, "circular", True),
    ((2, 4, 6, 2, 3), 2, 3, "linear", True),     # rows of 2 x 3 after the axis
    ((4, 97), 1, 13, "circular", True),          # 2-D: the axis is the last
]


@pytest.mark.parametrize("shape, axis, length, mode, with_indices", SCATTER_CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int64])
def test_tensor_scatter_matches_onnxruntime(rng, shape, axis, length, mode, with_indices, dtype):
    L = shape[axis]
    ushape = list(shape)
    ushape[axis] = length
    past = (rng.normal(size=shape) * 100).astype(dtype)
    update = (rng.normal(size=ushape) * 100).astype(dtype)
    top = L - length + 1 if mode == "linear" else 3 * L
    w = rng.integers(0, top, shape[0]).astype(np.int64)
    ttype = h.np_dtype_to_tensor_dtype(np.dtype(dtype))
    inputs = [("past", ttype, list(shape)), ("update", ttype, ushape)] + ([("w", T.INT64, [shape[0]])] if with_indices else [])
    m = _model([h.make_node("TensorScatter", ["past", "update"] + (["w"] if with_indices else []), ["present"],
                            axis=axis, mode=mode)], inputs, [], opset=24)
    m.graph.output.append(h.make_tensor_value_info("present", ttype, None))
    feeds = {"past": past, "update": update, **({"w": w} if with_indices else {})}
    got, want = _session(m).run(feeds)["present"], ort_run(m, feeds)["present"]
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def _scatter_model(L=8, mode="linear"):
    m = _model([h.make_node("TensorScatter", ["past", "update", "w"], ["present"], mode=mode)],
               [("past", T.FLOAT, [2, 3, L, 4]), ("update", T.FLOAT, [2, 3, "S", 4]), ("w", T.INT64, [2])],
               ["present"], opset=24)
    return m


@pytest.mark.parametrize("w, why", [([7, 0], "write_indices[0] = 7: the update's rows would run past"),
                                    ([0, -1], "write_indices[1] = -1: negative")])
def test_tensor_scatter_refuses_a_write_outside_the_cache(rng, w, why):
    sess = _session(_scatter_model(), dims={"S": 8})
    past = rng.normal(size=(2, 3, 8, 4)).astype(F32)
    with pytest.raises(nerve.InputError, match=why.replace("[", r"\[").replace("]", r"\]")):
        sess.run({"past": past, "update": np.ones((2, 3, 2, 4), F32), "w": np.array(w)})
    # the session survives and runs a valid write
    got = sess.run({"past": past, "update": np.ones((2, 3, 2, 4), F32), "w": np.array([6, 0])})["present"]
    want = past.copy()
    want[0, :, 6:8] = 1
    want[1, :, 0:2] = 1
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("mode", ["linear", "circular"])
def test_tensor_scatter_cache_kept_in_the_session(rng, mode):
    """A decoder's KV cache as a session state: each step writes its tokens at the positions
    the model feeds; after the steps the cache holds every token where it was written."""
    L = 11
    sess = _session(_seen(_scatter_model(L, mode)), dims={"S": 4}, state={"present": "past"})
    cache = np.zeros((2, 3, L, 4), F32)
    pos = np.array([0, 3])
    feeds = {"past": cache.copy()}
    steps = [1, 3, 2, 2] if mode == "linear" else [3, 4, 4, 2, 3]  # circular: wraps the 11 rows twice
    for n in steps:
        update = rng.normal(size=(2, 3, n, 4)).astype(F32)
        got = sess.run({**feeds, "update": update, "w": pos})["seen"]
        feeds = {}
        for b in range(2):
            for s in range(n):
                cache[b, :, (pos[b] + s) % L] = update[b, :, s]
        np.testing.assert_array_equal(got, cache)
        pos = pos + n
    # the op is the cache's only reader: one buffer, written in place, not a copy per step
    assert sess.memory_report()["pools"]["state"]["allocated"] == cache.nbytes


def test_tensor_scatter_cache_also_read_as_it_was_fed(rng):
    """An output that shows the past cache must see it before the step's write: then the
    pair keeps two buffers."""
    m = _seen(_scatter_model(9))
    m.graph.node.append(h.make_node("Identity", ["past"], ["before"]))
    m.graph.output.append(h.make_tensor_value_info("before", T.FLOAT, None))
    sess = _session(m, dims={"S": 3}, state={"present": "past"})
    cache = rng.normal(size=(2, 3, 9, 4)).astype(F32)
    feeds = {"past": cache.copy()}
    for step in range(3):
        update = rng.normal(size=(2, 3, 3, 4)).astype(F32)
        out = sess.run({**feeds, "update": update, "w": np.array([3 * step, 0])})
        feeds = {}
        np.testing.assert_array_equal(out["before"], cache)
        cache[0, :, 3 * step:3 * step + 3] = update[0]
        cache[1, :, 0:3] = update[1]
        np.testing.assert_array_equal(out["seen"], cache)
    assert sess.memory_report()["pools"]["state"]["allocated"] == 2 * cache.nbytes


# ---------------------------------------------------------------------- CausalConvWithState

# (channels, kernel size, length, past given, bias, activation)
CONV_CASES = [
    (1, 4, 1, True, True, "silu"),
    (3, 1, 5, True, False, "none"),         # k = 1: no state (0 positions)
    (13, 2, 3, False, True, "swish"),
    (13, 4, 2, True, True, "silu"),         # shorter than k - 1: the state keeps some of the past
    (97, 3, 16, True, False, "none"),
    (64, 4, 33, False, True, "silu"),
]


def _conv_model(rng, channels, k, length, past, bias, act, batch=2):
    w = rng.normal(size=(channels, 1, k)).astype(F32)
    inits = {"w": w, **({"b": rng.normal(size=channels).astype(F32)} if bias else {})}
    ins = ["x", "w", "b" if bias else "", "past" if past else ""]
    while ins[-1] == "":
        ins.pop()
    inputs = [("x", T.FLOAT, [batch, channels, length])] + ([("past", T.FLOAT, [batch, channels, k - 1])] if past else [])
    return _model([h.make_node("CausalConvWithState", ins, ["y", "present"], activation=act)], inputs,
                  ["y", "present"], inits)


@pytest.mark.parametrize("channels, k, length, past, bias, act", CONV_CASES)
def test_causal_conv_with_state_matches_onnxruntime(rng, channels, k, length, past, bias, act):
    m = _conv_model(rng, channels, k, length, past, bias, act)
    feeds = {"x": rng.normal(size=(2, channels, length)).astype(F32),
             **({"past": rng.normal(size=(2, channels, k - 1)).astype(F32)} if past else {})}
    got, want = _session(m).run(feeds), ort_run(m, feeds)
    _close(got["y"], want["y"], CONV_TOL, "y", floor=1.0)
    np.testing.assert_array_equal(got["present"], want["present"])  # copied, not computed


@pytest.mark.parametrize("k", [1, 4])
def test_causal_conv_streams_chunk_by_chunk(rng, k):
    """Chunks of 1-9 positions with the state kept in the session give the outputs of one
    run over the whole signal, and the last state is its last k - 1 positions."""
    channels, total = 6, 40
    m = _conv_model(rng, channels, k, "T", True, True, "silu", batch=1)
    x = rng.normal(size=(1, channels, total)).astype(F32)
    zero = np.zeros((1, channels, k - 1), F32)
    whole = _session(m, dims={"T": total}).run({"x": x, "past": zero})
    stream = _session(_seen(m), dims={"T": 9}, state={"present": "past"})
    outs, at, feeds = [], 0, {"past": zero}
    for n in [1, 9, 3, 7, 2, 9, 5, 4]:
        out = stream.run({**feeds, "x": x[:, :, at:at + n]})
        outs.append(out["y"])
        feeds, at = {}, at + n
    assert at == total
    _close(np.concatenate(outs, axis=2), whole["y"], CONV_TOL, "streamed y", floor=1.0)
    np.testing.assert_array_equal(out["seen"], x[:, :, total - (k - 1):] if k > 1 else zero)


# -------------------------------------------------------------------------- LinearAttention

# (rule, batch, tokens, q heads, kv heads, dk, dv, decay last dim as "head"/"key", beta last
# dim as "head"/"one", past given, scale attribute)
LA_CASES = [
    ("linear", 1, 1, 1, 1, 1, 1, None, None, False, None),
    ("linear", 2, 5, 4, 2, 3, 70, None, None, True, 0.5),       # dv over one 64-column block
    ("gated", 1, 7, 3, 1, 13, 5, "head", None, True, None),     # 3 query heads on one state
    ("gated", 2, 3, 2, 2, 8, 97, "key", None, False, None),
    ("delta", 1, 9, 2, 1, 16, 16, None, "one", True, None),
    ("delta", 3, 2, 4, 4, 5, 3, None, "head", False, 0.25),
    ("gated_delta", 2, 6, 4, 2, 32, 64, "head", "head", True, None),
    ("gated_delta", 1, 4, 6, 3, 7, 129, "key", "one", True, None),
]


def _la_feeds(rng, rule, batch, tokens, hq, hkv, dk, dv, decay, beta, past):
    k = rng.normal(size=(batch, tokens, hkv, dk))
    if rule in ("delta", "gated_delta"):  # the operator expects L2-normalised keys there
        k /= np.linalg.norm(k, axis=-1, keepdims=True)
    feeds = {"q": rng.normal(size=(batch, tokens, hq * dk)), "k": k.reshape(batch, tokens, hkv * dk),
             "v": rng.normal(size=(batch, tokens, hkv * dv))}
    if past:
        feeds["past"] = rng.normal(size=(batch, hkv, dk, dv))
    if decay:  # log-space decay: log of a factor in (0.5, 1)
        feeds["g"] = np.log(rng.uniform(0.5, 1.0, (batch, tokens, hkv if decay == "head" else hkv * dk)))
    if beta:
        feeds["beta"] = rng.uniform(0, 1, (batch, tokens, hkv if beta == "head" else 1))
    return {n: a.astype(F32) for n, a in feeds.items()}


def _la_model(feeds, rule, hq, hkv, scale, tokens=None):
    names = ["q", "k", "v", "past", "g", "beta"]
    ins = [n if n in feeds else "" for n in names]
    while ins[-1] == "":
        ins.pop()
    attrs = dict(q_num_heads=hq, kv_num_heads=hkv, update_rule=rule, **({"scale": scale} if scale else {}))
    shape = lambda n: [feeds[n].shape[0], tokens or feeds[n].shape[1], feeds[n].shape[2]] if n != "past" \
        else list(feeds[n].shape)  # noqa: E731
    return _model([h.make_node("LinearAttention", ins, ["y", "present"], **attrs)],
                  [(n, T.FLOAT, shape(n)) for n in ins if n], ["y", "present"])


@pytest.mark.parametrize("rule, batch, tokens, hq, hkv, dk, dv, decay, beta, past, scale", LA_CASES)
def test_linear_attention_matches_onnxruntime(rng, rule, batch, tokens, hq, hkv, dk, dv, decay, beta, past, scale):
    feeds = _la_feeds(rng, rule, batch, tokens, hq, hkv, dk, dv, decay, beta, past)
    m = _la_model(feeds, rule, hq, hkv, scale)
    got, want = _session(m).run(feeds), ort_run(m, feeds)
    for name in ("y", "present"):
        _close(got[name], want[name], LA_TOL, name)


@pytest.mark.parametrize("variant", variant_params("linear_attention"))
@pytest.mark.parametrize("case", [LA_CASES[1], LA_CASES[3], LA_CASES[6], LA_CASES[7]], ids=lambda c: c[0])
def test_linear_attention_every_variant_matches_onnxruntime(rng, variant, case):
    """Each compiled-in kernel of the dispatch op (the reference, AVX2, AVX-512, NEON under
    qemu's C tests) runs the op; dv 70, 97, 64 and 129 cross the vector blocks and tails."""
    rule, batch, tokens, hq, hkv, dk, dv, decay, beta, past, scale = case
    feeds = _la_feeds(rng, rule, batch, tokens, hq, hkv, dk, dv, decay, beta, past)
    m = _la_model(feeds, rule, hq, hkv, scale)
    want = ort_run(m, feeds)
    with forced("linear_attention", variant):
        got = _session(m).run(feeds)
    for name in ("y", "present"):
        _close(got[name], want[name], LA_TOL, f"{variant} {name}")


@pytest.mark.parametrize("rule", ["gated", "gated_delta"])
def test_linear_attention_streams_chunk_by_chunk(rng, rule):
    """Tokens fed a few at a time, the state kept in the session: the outputs of one run over
    all of them, and the same final state."""
    total = 24
    feeds = _la_feeds(rng, rule, 1, total, 4, 2, 8, 12, "key", "head" if rule == "gated_delta" else None, True)
    m = _la_model(feeds, rule, 4, 2, None, tokens="T")
    whole = _session(m, dims={"T": total}).run(feeds)
    stream = _session(_seen(m), dims={"T": 8}, state={"present": "past"})
    outs, at, first = [], 0, True
    for n in [1, 8, 3, 5, 7]:
        part = {k: v[:, at:at + n] for k, v in feeds.items() if k != "past"}
        if first:
            part["past"], first = feeds["past"], False
        out = stream.run(part)
        outs.append(out["y"])
        at += n
    assert at == total
    _close(np.concatenate(outs, axis=1), whole["y"], LA_TOL, "streamed y")
    _close(out["seen"], whole["present"], LA_TOL, "final state")


@pytest.mark.parametrize("change, message", [
    (dict(update_rule="linear", with_decay=True), "update_rule 'linear' forbids the decay input"),
    (dict(update_rule="gated_delta", with_decay=False), "requires the decay input"),
    (dict(q_num_heads=3), "q_num_heads 3 must be a positive multiple of kv_num_heads 2"),
    (dict(update_rule="sideways"), "update_rule 'sideways' is not one of"),
])
def test_linear_attention_refuses_what_the_operator_forbids(change, message):
    change = dict(change)
    with_decay = change.pop("with_decay", False)
    attrs = {**dict(q_num_heads=4, kv_num_heads=2, update_rule="linear"), **change}
    ins = ["q", "k", "v"] + (["", "g"] if with_decay else [])
    inputs = [("q", T.FLOAT, [1, 2, 16]), ("k", T.FLOAT, [1, 2, 8]), ("v", T.FLOAT, [1, 2, 6])] + \
        ([("g", T.FLOAT, [1, 2, 2])] if with_decay else [])
    m = _model([h.make_node("LinearAttention", ins, ["y"], **attrs)], inputs, ["y"])
    with pytest.raises(nerve.ModelError, match=message):
        _session(m)


def test_linear_attention_checks_the_state_each_run(rng):
    """A past state of another head size fed at run time: a clear error, then a good run."""
    feeds = _la_feeds(rng, "linear", 1, 3, 2, 2, 4, 5, None, None, True)
    m = _la_model(feeds, "linear", 2, 2, None)
    m.graph.input[3].type.tensor_type.shape.dim[3].dim_param = "dv"  # past's last dim symbolic
    sess = _session(m, dims={"dv": 5})
    with pytest.raises(nerve.InputError):
        sess.run({**feeds, "past": np.zeros((1, 2, 4, 3), F32)})
    _close(sess.run(feeds)["y"], ort_run(m, feeds)["y"], LA_TOL, "y after the refused run")


# ---------------------------------------------- a decoder's static cache: TensorScatter + Attention

def _static_cache_decoder(heads=4, kv_heads=2, length=12, dim=8):
    """One attention layer as opset 24 writes it for a cache of fixed length: the step's keys
    and values written at write_indices by TensorScatter, then Attention over the whole cache
    with nonpad_kv_seqlen masking the rows not written yet (and the causal frontier)."""
    nodes = [h.make_node("TensorScatter", ["past_k", "k", "w"], ["present_k"]),
             h.make_node("TensorScatter", ["past_v", "v", "w"], ["present_v"]),
             h.make_node("Attention", ["q", "present_k", "present_v", "", "", "", "nonpad"], ["y"], is_causal=1)]
    inputs = [("q", T.FLOAT, [2, heads, "S", dim]), ("k", T.FLOAT, [2, kv_heads, "S", dim]),
              ("v", T.FLOAT, [2, kv_heads, "S", dim]), ("past_k", T.FLOAT, [2, kv_heads, length, dim]),
              ("past_v", T.FLOAT, [2, kv_heads, length, dim]), ("w", T.INT64, [2]), ("nonpad", T.INT64, [2])]
    return _model(nodes, inputs, ["y", "present_k", "present_v"], opset=24)


def test_static_cache_decoder_streams_like_onnxruntime(rng):
    """Two sequences decoded a few tokens at a time, the second 2 tokens ahead (its cache fed
    with them at the start): nerve keeps both caches in the session, written in place;
    onnxruntime gets them fed back. Every step's attention output agrees (over 40 seeds, 240
    steps, within 3.9e-7 of its scale; held to 2e-6), and the caches take one buffer each."""
    heads, kv_heads, length, dim = 4, 2, 12, 8
    m = _static_cache_decoder(heads, kv_heads, length, dim)
    sess = _session(m, dims={"S": 3}, state={"present_k": "past_k", "present_v": "past_v"})
    ref = ort_session(m)
    caches = {n: np.zeros((2, kv_heads, length, dim), F32) for n in ("past_k", "past_v")}
    for c in caches.values():
        c[1, :, :2] = rng.normal(size=(kv_heads, 2, dim))
    state_feeds = {n: c.copy() for n, c in caches.items()}
    filled = np.array([0, 2])
    for n_new in [3, 1, 1, 2, 1, 1]:
        feeds = {"q": rng.normal(size=(2, heads, n_new, dim)).astype(F32),
                 "k": rng.normal(size=(2, kv_heads, n_new, dim)).astype(F32),
                 "v": rng.normal(size=(2, kv_heads, n_new, dim)).astype(F32),
                 "w": filled.copy(), "nonpad": filled + n_new}
        want = dict(zip([o.name for o in ref.get_outputs()], ref.run(None, {**feeds, **caches})))
        got = sess.run({**feeds, **state_feeds})
        state_feeds = {}
        assert set(got) == {"y"}  # the caches stay in the session
        _close(got["y"], want["y"], 2e-6, f"attention output after {filled.tolist()} tokens")
        caches = {"past_k": want["present_k"], "past_v": want["present_v"]}
        filled = filled + n_new
    assert sess.memory_report()["pools"]["state"]["allocated"] == 2 * caches["past_k"].nbytes
