"""Models as PyTorch's own exporters write them (scripts/export_torch_models.py: the dynamo
exporter and the TorchScript one, opsets 17-18; an image backbone block, a U-Net with
ConvTranspose and Resize, an x3 super-resolution net (PixelShuffle, bicubic), keyword spotting
with torch.stft, a BiLSTM, a streaming GRU step, a dilated TCN with GroupNorm, a transformer
encoder, a top-k detector head (TopK, GatherElements, CumSum), a decoder-only language model
with position ids by cumsum over a padded batch; and tiny random-weight Hugging Face
architectures through the dynamo exporter: BERT, Llama, T5, wav2vec2, whose attention masks
are GatherND on run-time indices, a ViT exported in float16, and a Llama at opset 23 —
RMSNormalization, RotaryEmbedding, Attention nodes — checked against torch's own outputs) compiled by nerve and compared with onnxruntime on fresh
random inputs, at several sizes of their symbolic dims."""

import json
from pathlib import Path

import numpy as np
import pytest

ort = pytest.importorskip("onnxruntime")

import nerve  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "data" / "torch"
MANIFEST = json.loads((DATA / "manifest.json").read_text())


def draw_feeds(rng, spec, size):
    """Random feeds for one manifest entry, symbolic dims at `size` (bench/torch_models.py too)."""
    feeds = {}
    for name, inp in spec["inputs"].items():
        shape = [size if isinstance(d, str) else d for d in inp["shape"]]
        if inp.get("mask"):  # an attention mask: ones, then right padding in some rows
            lengths = rng.integers(1, shape[-1] + 1, shape[:-1])
            feeds[name] = (np.arange(shape[-1]) < lengths[..., None]).astype(inp["dtype"])
        elif inp["dtype"].startswith("int"):
            feeds[name] = rng.integers(0, inp["high"], shape).astype(inp["dtype"])
        else:
            feeds[name] = rng.standard_normal(shape).astype(inp["dtype"])
    return feeds


def input_bound(spec):
    """The bound of the symbolic dims the inputs have (dims may also bound a run-time length,
    such as hf_vits's Range), or None when the inputs are static (bench/torch_models.py too)."""
    names = {d for inp in spec["inputs"].values() for d in inp["shape"] if isinstance(d, str)}
    return max(spec["dims"][d] for d in names) if names else None


TORCH_REFERENCE = {name for name in MANIFEST if (DATA / f"{name}.torch.npz").exists()}


@pytest.mark.parametrize("name", sorted(MANIFEST.keys() - TORCH_REFERENCE))
def test_torch_export_matches_onnxruntime(rng, name):
    spec = MANIFEST[name]
    path = DATA / f"{name}.onnx"
    sess = nerve.Session(path, dims=spec["dims"], cache=False)
    ref = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert sess.output_names == spec["outputs"]
    bound = input_bound(spec)
    dynamic = bound is not None
    least = spec.get("min", 2)
    for size in ([bound, least, int(rng.integers(least + 1, bound))] if dynamic else [None]):
        feeds = draw_feeds(rng, spec, size)
        got = sess.run(feeds)
        want = dict(zip(spec["outputs"], ref.run(None, feeds)))
        for out in spec["outputs"]:
            assert got[out].shape == want[out].shape, (out, size)
            scale = float(np.abs(want[out]).max())
            # float16 models: nerve computes in float32, onnxruntime rounds to float16 between ops
            rtol = 4e-3 if want[out].dtype == np.float16 else 1e-4
            np.testing.assert_allclose(got[out].astype(np.float32), want[out].astype(np.float32), rtol=rtol,
                                       atol=rtol / 10 * max(scale, 1.0), err_msg=f"{name}:{out} at size {size}")


@pytest.mark.parametrize("name", sorted(TORCH_REFERENCE))
def test_torch_export_matches_torch(name):
    """Exports onnxruntime (1.32) cannot run — opset 23's RotaryEmbedding as torch writes it —
    against the outputs torch computed for the same inputs when the model was exported."""
    spec = MANIFEST[name]
    ref = np.load(DATA / f"{name}.torch.npz")
    sess = nerve.Session(DATA / f"{name}.onnx", cache=False)  # dims bound by the feeds
    got = sess.run({k: ref[k] for k in spec["inputs"]})
    for out in spec["outputs"]:
        want = ref[f"out:{out}"]
        np.testing.assert_allclose(got[out], want, rtol=1e-4, atol=1e-5 * max(float(np.abs(want).max()), 1.0),
                                   err_msg=f"{name}:{out}")


def test_optimum_merged_decoder_decodes_as_onnxruntime(rng):
    """Hugging Face optimum's default seq2seq export (optimum_whisper_decoder_merged.onnx: one
    If on use_cache_branch, whose branches give present KV of different lengths): a greedy
    decode of several steps, the first without the cache and the rest with it, every output
    as onnxruntime's. The encoder's KV placeholders of the first step have the encoder's length:
    nerve holds inputs that share a symbolic dimension to one size (optimum feeds length 0)."""
    path = DATA / "optimum_whisper_decoder_merged.onnx"
    ref = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    sess = nerve.Session(path, cache=False, dims={"batch_size": 2, "decoder_sequence_length": 4,
                                                  "encoder_sequence_length": 64, "past_decoder_sequence_length": 16})
    outs = [o.name for o in ref.get_outputs()]
    kv_inputs = [i.name for i in ref.get_inputs() if i.name.startswith("past_key_values")]
    for batch, enc_len in ((1, 64), (2, 37)):
        hidden = rng.standard_normal((batch, enc_len, 32)).astype(np.float32)
        feeds = {"input_ids": rng.integers(0, 97, (batch, 3)), "encoder_hidden_states": hidden,
                 "use_cache_branch": np.array([False]),
                 **{n: np.zeros((batch, 2, enc_len if ".encoder." in n else 0, 16), np.float32) for n in kv_inputs}}
        cross = {}
        for step in range(5):
            want = dict(zip(outs, ref.run(None, feeds)))
            got = sess.run(feeds)
            for name in outs:
                if step > 0 and ".encoder." in name:
                    continue  # with the cache, optimum's graph gives placeholders there, unused
                assert got[name].shape == want[name].shape, (step, name, got[name].shape, want[name].shape)
                np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-5, err_msg=f"step {step} {name}")
            if step == 0:  # the cross-attention KV, computed once
                cross = {n.replace("present", "past_key_values"): want[n] for n in outs if ".encoder." in n}
            feeds = {"input_ids": want["logits"][:, -1:].argmax(-1), "encoder_hidden_states": hidden,
                     "use_cache_branch": np.array([True]), **cross,
                     **{n.replace("present", "past_key_values"): want[n] for n in outs if ".decoder." in n}}
