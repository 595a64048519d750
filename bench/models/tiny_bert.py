"""A small BERT-style text encoder written with onnx.helper the way torch.onnx.export (opset 17)
writes one: Gather embeddings plus positions from Range over the input's own length, an
additive attention mask built with Unsqueeze/Cast/Sub/Mul, heads split and merged with
Reshape targets computed from Shape/Gather/Concat, MatMul+Add projections, Softmax,
Erf-GELU and LayerNorm in their decomposed forms. Randomly initialised (seeded): the graph,
not the weights, is what the compiler has to handle.

    python bench/models/tiny_bert.py out.onnx [--layers 2 --hidden 128 --heads 4]
"""

from __future__ import annotations

import argparse
import math

import numpy as np


def build(path: str, layers: int = 2, hidden: int = 128, heads: int = 4, ff: int = 512, vocab: int = 1000,
          max_pos: int = 128, seed: int = 0) -> str:
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    dh = hidden // heads

    def const(name, arr):
        inits.append(nh.from_array(np.asarray(arr), name))
        return name

    def rand(name, *shape, scale=0.05):
        return const(name, (rng.standard_normal(shape) * scale).astype(np.float32))

    def node(op, ins, name, **attrs):
        nodes.append(h.make_node(op, ins, [name], name=f"/{name}/{op}", **attrs))
        return name

    one_f = const("one_f", np.array(1.0, np.float32))
    two_f = const("two_f", np.array(2.0, np.float32))
    eps = const("eps", np.array(1e-12, np.float32))
    half = const("half", np.array(0.5, np.float32))
    sqrt2 = const("sqrt2", np.array(math.sqrt(2.0), np.float32))
    i0, i1 = const("i0", np.array(0, np.int64)), const("i1", np.array(1, np.int64))
    ax0 = const("ax0", np.array([0], np.int64))
    ax12 = const("ax12", np.array([1, 2], np.int64))
    heads_c = const("heads_c", np.array([heads], np.int64))
    dh_c = const("dh_c", np.array([dh], np.int64))
    hid_c = const("hid_c", np.array([hidden], np.int64))
    neg = const("neg", np.array(-10000.0, np.float32))
    scale = const("scale", np.array(math.sqrt(dh), np.float32))

    def layernorm(x, p):
        g, b = const(p + ".g", (1 + 0.1 * rng.standard_normal(hidden)).astype(np.float32)), rand(p + ".b", hidden)
        m = node("ReduceMean", [x], p + ".mean", axes=[-1], keepdims=1)
        d = node("Sub", [x, m], p + ".sub")
        sq = node("Pow", [d, two_f], p + ".pow")
        v = node("ReduceMean", [sq], p + ".var", axes=[-1], keepdims=1)
        ve = node("Add", [v, eps], p + ".addeps")
        sd = node("Sqrt", [ve], p + ".sqrt")
        n = node("Div", [d, sd], p + ".div")
        gm = node("Mul", [n, g], p + ".mulg")
        return node("Add", [gm, b], p + ".addb")

    def dense(x, p, n_in, n_out):
        w, b = rand(p + ".w", n_in, n_out), rand(p + ".bias", n_out)
        return node("Add", [node("MatMul", [x, w], p + ".mm"), b], p + ".add")

    def batch_seq(x, p):
        shp = node("Shape", [x], p + ".shape")
        b = node("Unsqueeze", [node("Gather", [shp, i0], p + ".b", axis=0), ax0], p + ".bu")
        s = node("Unsqueeze", [node("Gather", [shp, i1], p + ".s", axis=0), ax0], p + ".su")
        return b, s

    # embeddings
    we = rand("word_embeddings", vocab, hidden, scale=0.5)
    pe = rand("position_embeddings", max_pos, hidden, scale=0.5)
    x = node("Gather", [we, "input_ids"], "emb.word", axis=0)
    ids_shape = node("Shape", ["input_ids"], "emb.shape")
    seq = node("Gather", [ids_shape, i1], "emb.seq", axis=0)
    pos = node("Range", [i0, seq, i1], "emb.range")
    pos = node("Unsqueeze", [pos, ax0], "emb.pos")
    x = node("Add", [x, node("Gather", [pe, pos], "emb.posemb", axis=0)], "emb.sum")
    x = layernorm(x, "emb.ln")

    # additive mask [b, 1, 1, s]
    m = node("Unsqueeze", ["attention_mask", ax12], "mask.unsq")
    m = node("Cast", [m], "mask.cast", to=T.FLOAT)
    m = node("Sub", [one_f, m], "mask.inv")
    mask = node("Mul", [m, neg], "mask.add")

    for li in range(layers):
        p = f"l{li}"
        b, s = batch_seq(x, p)
        split_shape = node("Concat", [b, s, heads_c, dh_c], p + ".split_shape", axis=0)
        merge_shape = node("Concat", [b, s, hid_c], p + ".merge_shape", axis=0)
        q = node("Reshape", [dense(x, p + ".q", hidden, hidden), split_shape], p + ".qr")
        k = node("Reshape", [dense(x, p + ".k", hidden, hidden), split_shape], p + ".kr")
        v = node("Reshape", [dense(x, p + ".v", hidden, hidden), split_shape], p + ".vr")
        q = node("Transpose", [q], p + ".qt", perm=[0, 2, 1, 3])
        k = node("Transpose", [k], p + ".kt", perm=[0, 2, 3, 1])
        v = node("Transpose", [v], p + ".vt", perm=[0, 2, 1, 3])
        sc = node("Div", [node("MatMul", [q, k], p + ".qk"), scale], p + ".scaled")
        sc = node("Add", [sc, mask], p + ".masked")
        pr = node("Softmax", [sc], p + ".probs", axis=-1)
        ctx = node("Transpose", [node("MatMul", [pr, v], p + ".ctx")], p + ".ctxt", perm=[0, 2, 1, 3])
        ctx = node("Reshape", [ctx, merge_shape], p + ".ctxr")
        x = layernorm(node("Add", [dense(ctx, p + ".o", hidden, hidden), x], p + ".res1"), p + ".ln1")
        f = dense(x, p + ".ff1", hidden, ff)
        g = node("Erf", [node("Div", [f, sqrt2], p + ".gdiv")], p + ".erf")
        g = node("Mul", [node("Mul", [f, node("Add", [g, one_f], p + ".g1")], p + ".gm"), half], p + ".gelu")
        x = layernorm(node("Add", [dense(g, p + ".ff2", ff, hidden), x], p + ".res2"), p + ".ln2")
    nodes.append(h.make_node("Identity", [x], ["last_hidden_state"], name="/output/Identity"))

    graph = h.make_graph(
        nodes, "tiny_bert",
        [h.make_tensor_value_info("input_ids", T.INT64, ["batch", "sequence"]),
         h.make_tensor_value_info("attention_mask", T.INT64, ["batch", "sequence"])],
        [h.make_tensor_value_info("last_hidden_state", T.FLOAT, ["batch", "sequence", hidden])],
        inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], producer_name="nerve-tiny-bert")
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def example_feeds(batch: int = 2, seq: int = 16, vocab: int = 1000, seed: int = 0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, vocab, size=(batch, seq)).astype(np.int64)
    mask = np.ones((batch, seq), np.int64)
    mask[1:, seq * 3 // 4:] = 0  # the second sentence is padded
    return {"input_ids": ids, "attention_mask": mask}


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--ff", type=int, default=512)
    a = ap.parse_args()
    print(build(a.out, a.layers, a.hidden, a.heads, a.ff))
