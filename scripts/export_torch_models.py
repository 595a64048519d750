"""Exports small PyTorch models of the kinds edge users run (image backbone blocks, a
segmentation U-Net, a super-resolution net, keyword spotting from raw audio, recurrent and
convolutional sequence models, a transformer encoder, a detector-style top-k head, a tiny
decoder-only language model) to ONNX with PyTorch's own exporters, for
tests/python/test_torch_exports.py: the graphs are what torch.onnx really writes (its op
patterns, opsets, shape arithmetic), not hand-built.

Development only (needs torch; the SDK and its tests never import it):
    pip install torch==2.13.0 onnx onnxscript
    python scripts/export_torch_models.py tests/data/torch [NAME...]   (names: only those)
Weights are random with a fixed seed; each model is written as <name>.onnx with its
feeds' shapes and symbolic dims in manifest.json.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F


class InvertedResidual(nn.Module):
    """MobileNetV2's block: pointwise expand, depthwise 3x3, pointwise project, ReLU6, skip."""

    def __init__(self, c=16, expand=4):
        super().__init__()
        h = c * expand
        self.body = nn.Sequential(
            nn.Conv2d(c, h, 1, bias=False), nn.BatchNorm2d(h), nn.ReLU6(),
            nn.Conv2d(h, h, 3, padding=1, groups=h, bias=False), nn.BatchNorm2d(h), nn.ReLU6(),
            nn.Conv2d(h, c, 1, bias=False), nn.BatchNorm2d(c))

    def forward(self, x):
        return x + self.body(x)


class MobileNetish(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.Hardswish())
        self.blocks = nn.Sequential(InvertedResidual(), InvertedResidual())
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        y = self.blocks(self.stem(x))
        return self.head(F.adaptive_avg_pool2d(y, 1).flatten(1)).softmax(-1)


class UNet(nn.Module):
    """Two levels down (max-pool), up by ConvTranspose and by bilinear and nearest upsampling."""

    def __init__(self, c=8):
        super().__init__()
        self.d1 = nn.Sequential(nn.Conv2d(3, c, 3, padding=1), nn.ReLU())
        self.d2 = nn.Sequential(nn.Conv2d(c, 2 * c, 3, padding=1), nn.ReLU())
        self.mid = nn.Sequential(nn.Conv2d(2 * c, 2 * c, 3, padding=1), nn.LeakyReLU(0.1))
        self.up2 = nn.ConvTranspose2d(2 * c, 2 * c, 2, stride=2)
        self.u2 = nn.Conv2d(4 * c, c, 3, padding=1)
        self.u1 = nn.Conv2d(2 * c, 2, 1)

    def forward(self, x):
        a = self.d1(x)
        b = self.d2(F.max_pool2d(a, 2))
        m = self.mid(F.max_pool2d(b, 2))
        u = torch.relu(self.u2(torch.cat([self.up2(m), b], 1)))
        u = F.interpolate(u, scale_factor=2, mode="bilinear", align_corners=False)
        y = self.u1(torch.cat([u, a], 1))
        return torch.sigmoid(y), F.interpolate(y, scale_factor=0.5, mode="nearest")


class KeywordSpotter(nn.Module):
    """Raw 16 kHz audio -> log power spectrum (torch.stft) -> a small conv net -> 12 classes."""

    def __init__(self):
        super().__init__()
        self.register_buffer("window", torch.hann_window(256))
        self.conv = nn.Sequential(nn.Conv1d(129, 64, 3, padding=1), nn.ReLU(), nn.Conv1d(64, 64, 3, dilation=2,
                                                                                             padding=2), nn.ReLU())
        self.out = nn.Linear(64, 12)

    def forward(self, wav):
        spec = torch.stft(wav, 256, hop_length=128, window=self.window, center=False, return_complex=False)
        power = (spec ** 2).sum(-1)
        feats = torch.log(power + 1e-6)
        return self.out(self.conv(feats).mean(-1))


class BiLSTMTagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(100, 24)
        self.lstm = nn.LSTM(24, 32, num_layers=2, bidirectional=True, batch_first=True)
        self.out = nn.Linear(64, 5)

    def forward(self, ids):
        h, _ = self.lstm(self.emb(ids))
        return self.out(h).log_softmax(-1)


class GRUStream(nn.Module):
    """One streaming step: features and the previous hidden state in, output and state out."""

    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(20, 48, batch_first=True)
        self.out = nn.Linear(48, 4)

    def forward(self, x, h):
        y, h2 = self.gru(x, h)
        return torch.sigmoid(self.out(y)), h2


class TCN(nn.Module):
    """Dilated causal 1-D convolutions with residuals and GELU (a WaveNet-style stack)."""

    def __init__(self, c=32):
        super().__init__()
        self.inp = nn.Conv1d(1, c, 1)
        self.layers = nn.ModuleList(nn.Conv1d(c, c, 3, dilation=d) for d in (1, 2, 4, 8))
        self.norm = nn.GroupNorm(1, c)
        self.out = nn.Conv1d(c, 1, 1)

    def forward(self, x):
        h = self.inp(x)
        for conv in self.layers:
            h = h + F.gelu(conv(F.pad(h, (2 * conv.dilation[0], 0))))
        return torch.tanh(self.out(self.norm(h)))


class TinyTransformer(nn.Module):
    def __init__(self):
        super().__init__()
        layer = nn.TransformerEncoderLayer(48, 4, 96, dropout=0.0, batch_first=True, activation="gelu")
        self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.pos = nn.Parameter(torch.randn(1, 64, 48) * 0.02)

    def forward(self, x):
        return self.enc(x + self.pos[:, : x.shape[1]])


class SuperResolution(nn.Module):
    """ESPCN-style x3 upscaler: convs, then PixelShuffle (DepthToSpace), plus a bicubic skip."""

    def __init__(self, r=3):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(1, 32, 5, padding=2), nn.Tanh(), nn.Conv2d(32, 16, 3, padding=1), nn.Tanh(),
                                  nn.Conv2d(16, r * r, 3, padding=1), nn.PixelShuffle(r))
        self.r = r

    def forward(self, x):
        return self.body(x) + F.interpolate(x, scale_factor=self.r, mode="bicubic", align_corners=False)


class TopKHead(nn.Module):
    """A detector-style head: per-anchor scores, the k best (torch.topk), their boxes gathered
    (torch.gather), a cumulative score (torch.cumsum)."""

    def __init__(self):
        super().__init__()
        self.score = nn.Conv1d(16, 1, 1)
        self.box = nn.Conv1d(16, 4, 1)

    def forward(self, feats):
        scores = self.score(feats)[:, 0]                         # [B, anchors]
        best, idx = torch.topk(scores, 10, dim=1)
        boxes = torch.gather(self.box(feats), 2, idx[:, None, :].expand(-1, 4, -1))
        return best.sigmoid(), boxes, torch.cumsum(best.softmax(-1), dim=1)


class CausalBlock(nn.Module):
    """Pre-norm causal self-attention and MLP, written out (as model code on the Hub is)."""

    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, h, bias):
        b, n, d = h.shape
        q, k, v = self.qkv(self.ln1(h)).split(d, dim=-1)
        q, k, v = (t.view(b, n, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-1, -2)) / math.sqrt(d // self.heads) + bias
        h = h + self.proj((att.softmax(-1) @ v).transpose(1, 2).reshape(b, n, d))
        return h + self.fc2(F.gelu(self.fc1(self.ln2(h))))


class TinyGPT(nn.Module):
    """A decoder-only language model over a padded batch, as Hugging Face style code exports:
    position ids from the attention mask by cumsum, a causal + padding additive mask, tied
    embeddings."""

    def __init__(self, vocab=97, d=32, heads=4, layers=2):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(64, d)
        self.blocks = nn.ModuleList(CausalBlock(d, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(d)

    def forward(self, ids, mask):
        pos = (mask.cumsum(-1) - 1).clamp(min=0)
        h = self.tok(ids) + self.pos(pos)
        n = ids.shape[1]
        causal = torch.ones(n, n, dtype=torch.bool).tril()
        allowed = causal[None, None] & (mask[:, None, None, :] > 0)
        bias = torch.where(allowed, 0.0, -1e9)
        for block in self.blocks:
            h = block(h, bias)
        return self.norm(h) @ self.tok.weight.T


# How the tests draw integer inputs: ids below a bound, or an attention mask (ones, then zeros
# of right padding in some rows)
INT_INPUTS = {"ids": {"high": 97}, "mask": {"mask": True}}


def models():
    """(name, module, example inputs, input names, output names, dynamic dims {input: {axis: name}},
    bounds {name: upper bound}, exporter)."""
    seq = torch.export.Dim("seq", min=2, max=64)
    return [
        ("mobilenet_block", MobileNetish(), (torch.randn(1, 3, 32, 32),), ["image"], ["probs"], None, {}, "dynamo"),
        ("unet", UNet(), (torch.randn(1, 3, 32, 48),), ["image"], ["mask", "coarse"], None, {}, "dynamo"),
        ("kws_stft", KeywordSpotter(), (torch.randn(1, 16000),), ["wav"], ["logits"], None, {}, "torchscript"),
        ("bilstm_tagger", BiLSTMTagger(), (torch.randint(0, 97, (1, 23)),), ["ids"], ["logp"],
         {"ids": {1: "seq"}}, {"seq": 64}, "torchscript"),
        ("gru_stream", GRUStream(), (torch.randn(1, 5, 20), torch.zeros(1, 1, 48)), ["x", "h"], ["y", "h_out"], None,
         {}, "torchscript"),
        ("tcn", TCN(), (torch.randn(1, 1, 400),), ["signal"], ["out"], {"signal": {2: "len"}}, {"len": 1000},
         "torchscript"),
        ("transformer", TinyTransformer(), (torch.randn(1, 17, 48),), ["x"], ["y"], {"x": {1: seq}}, {"seq": 64},
         "dynamo"),
        ("superres_x3", SuperResolution(), (torch.randn(1, 1, 24, 20),), ["low"], ["high"], None, {}, "torchscript"),
        ("topk_head", TopKHead(), (torch.randn(2, 16, 60),), ["feats"], ["scores", "boxes", "cumulative"], None, {},
         "torchscript"),
        ("gpt_tiny", TinyGPT(), (torch.randint(0, 97, (2, 12)), torch.ones(2, 12, dtype=torch.int64)),
         ["ids", "mask"], ["logits"], {"ids": {1: "seq"}, "mask": {1: "seq"}}, {"seq": 32}, "torchscript"),
    ]


class HFWrapper(nn.Module):
    """A Hugging Face transformers model called with keyword inputs, returning one tensor (its
    logits or last hidden state) so the ONNX graph has one plainly named output."""

    def __init__(self, model, keys, output):
        super().__init__()
        self.model, self.keys, self.output = model, keys, output

    def forward(self, x0, x1=None, x2=None):  # positional, as the exporter passes them
        return getattr(self.model(**dict(zip(self.keys, (x0, x1, x2)))), self.output)


def hf_models():
    """Tiny random-weight configs of Hugging Face architectures (no download: built from their
    config classes), as the dynamo exporter writes them: attention masks become GatherND on
    Range-built indices, rotary embeddings, RMSNorm, relative position buckets (T5), a conv
    feature encoder (wav2vec2). Needs `pip install transformers`; skipped without it."""
    try:
        import transformers as T
    except ImportError:
        print("transformers is not installed: the hf_* models are not exported")
        return []
    torch.manual_seed(0)  # the weights are drawn when the models are built
    seq, tgt = torch.export.Dim("seq", min=2, max=32), torch.export.Dim("tgt", min=2, max=32)
    small = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
    ids = torch.randint(0, 97, (2, 9))
    mask = torch.ones(2, 9, dtype=torch.int64)
    text = {"input_ids": {1: seq}, "attention_mask": {1: seq}}

    def wrap(model, keys, output):
        return HFWrapper(model.eval(), keys, output)

    llama = T.LlamaConfig(vocab_size=97, num_key_value_heads=2, use_cache=False, **small)
    t5 = T.T5Config(vocab_size=97, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, use_cache=False)
    w2v = T.Wav2Vec2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                           conv_dim=(16, 16, 16), conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3),
                           num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4)
    audio = torch.export.Dim("samples", min=400, max=4000)
    vits = T.VitsConfig(vocab_size=97, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, ffn_dim=64,
                        flow_size=16, upsample_initial_channel=32, upsample_rates=[8, 8, 4],
                        upsample_kernel_sizes=[16, 16, 8], resblock_kernel_sizes=[3, 5],
                        resblock_dilation_sizes=[[1, 3], [1, 3]], prior_encoder_num_flows=2,
                        prior_encoder_num_wavenet_layers=2, posterior_encoder_num_wavenet_layers=2,
                        duration_predictor_filter_channels=32, depth_separable_num_layers=2,
                        noise_scale=0.0, noise_scale_duration=0.0)
    return [
        ("hf_bert", wrap(T.BertModel(T.BertConfig(vocab_size=97, **small)), ["input_ids", "attention_mask"],
                         "last_hidden_state"), (ids, mask), ["input_ids", "attention_mask"], ["hidden"], text,
         {"seq": 32}, "dynamo"),
        ("hf_llama", wrap(T.LlamaForCausalLM(llama), ["input_ids", "attention_mask"], "logits"), (ids, mask),
         ["input_ids", "attention_mask"], ["logits"], text, {"seq": 32}, "dynamo"),
        ("hf_t5", wrap(T.T5ForConditionalGeneration(t5), ["input_ids", "attention_mask", "decoder_input_ids"],
                       "logits"), (ids, mask, torch.randint(0, 97, (2, 5))),
         ["input_ids", "attention_mask", "decoder_input_ids"], ["logits"], {**text, "decoder_input_ids": {1: tgt}},
         {"seq": 32, "tgt": 32}, "dynamo"),
        ("hf_wav2vec2", wrap(T.Wav2Vec2Model(w2v), ["input_values"], "last_hidden_state"), (torch.randn(1, 2000),),
         ["input_values"], ["hidden"], {"input_values": {1: audio}}, {"samples": 4000}, "dynamo"),
        # opset 23: RMSNormalization, RotaryEmbedding and Attention nodes
        ("hf_llama_op23", wrap(T.LlamaForCausalLM(llama), ["input_ids", "attention_mask"], "logits"), (ids, mask),
         ["input_ids", "attention_mask"], ["logits"], text, {"seq": 32}, "dynamo23"),
        # text to speech (MMS-TTS / Piper's architecture) as the TorchScript exporter writes it: the
        # waveform's length is decided by the predicted durations (a Range over their sum, given a
        # bound by name), the stochastic duration predictor's spline flows index by boolean masks
        # (NonZero, ScatterND), and the noise is RandomNormalLike, here scaled by 0 so the
        # waveform can be compared with onnxruntime's
        ("hf_vits", wrap(T.VitsModel(vits), ["input_ids"], "waveform"), (torch.randint(0, 97, (1, 9)),),
         ["input_ids"], ["waveform"], {"input_ids": {1: "seq"}}, {"seq": 32, "/model/Range.length": 2048}, "torchscript"),
        # model.half(): float16 weights, inputs and outputs
        ("hf_vit_fp16", wrap(T.ViTModel(T.ViTConfig(image_size=32, patch_size=8, **small)).half(), ["pixel_values"],
                             "last_hidden_state"), (torch.randn(1, 3, 32, 32).half(),), ["pixel_values"], ["hidden"],
         None, {}, "dynamo"),
    ]


# the integer inputs of the hf_* models, as INT_INPUTS
INT_INPUTS.update({"input_ids": {"high": 97}, "decoder_input_ids": {"high": 97}, "attention_mask": {"mask": True}})


def export_optimum_merged_decoder(out_dir: Path) -> None:
    """A tiny random Whisper exported by Hugging Face optimum the way `optimum-cli export onnx
    --task automatic-speech-recognition-with-past` writes it, keeping its decoder_model_merged.onnx
    (one If on `use_cache_branch`: with the cache the present KV is past + new long, without it
    new long) as optimum_whisper_decoder_merged.onnx. Needs `pip install optimum-onnx onnxruntime`."""
    import shutil
    import tempfile

    try:
        import transformers as T
        from optimum.exporters.onnx import main_export
    except ImportError:
        print("optimum is not installed: optimum_whisper_decoder_merged is not exported")
        return
    torch.manual_seed(0)
    cfg = T.WhisperConfig(vocab_size=97, d_model=32, encoder_layers=1, decoder_layers=2, encoder_attention_heads=2,
                          decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, num_mel_bins=80,
                          max_source_positions=1500, max_target_positions=64, pad_token_id=1, bos_token_id=2,
                          eos_token_id=3, decoder_start_token_id=2)
    with tempfile.TemporaryDirectory() as tmp:
        T.WhisperForConditionalGeneration(cfg).save_pretrained(tmp + "/model")
        T.WhisperFeatureExtractor(feature_size=80).save_pretrained(tmp + "/model")
        main_export(tmp + "/model", output=tmp + "/onnx", task="automatic-speech-recognition-with-past")
        shutil.copy(tmp + "/onnx/decoder_model_merged.onnx", out_dir / "optimum_whisper_decoder_merged.onnx")
    print("optimum_whisper_decoder_merged: exported")


def export(out_dir: Path, only=()) -> None:
    """Every model, or only those named (their manifest entries replaced, the others kept)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    manifest = json.loads((out_dir / "manifest.json").read_text()) if only else {}
    for name, module, args, in_names, out_names, dyn, bounds, exporter in models() + hf_models():
        if only and name not in only:
            continue
        torch.manual_seed(0)
        for p in module.parameters():
            if not name.startswith("hf_"):  # those keep their architecture's own initialisation
                nn.init.normal_(p, std=0.3 if p.dim() > 1 else 0.1)
        for m in module.modules():  # BatchNorm statistics that are not the identity
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
        module.eval()
        path = out_dir / f"{name}.onnx"
        with torch.no_grad():
            if exporter.startswith("dynamo"):  # "dynamo23": at opset 23 (one Attention node per layer...)
                shapes = None if dyn is None else tuple(dyn.get(n) for n in in_names)
                opset = {"opset_version": int(exporter[6:])} if exporter != "dynamo" else {}
                prog = torch.onnx.export(module, args, dynamo=True, input_names=in_names, output_names=out_names,
                                         dynamic_shapes=shapes, optimize=True, **opset)
                prog.save(str(path))
                if opset:  # onnxruntime 1.32 cannot run these: the test compares with torch's own outputs
                    np.savez(out_dir / f"{name}.torch.npz", **{n: a.numpy() for n, a in zip(in_names, args)},
                             **{f"out:{out_names[0]}": module(*args).numpy()})
            else:
                axes = None if dyn is None else {k: v for k, v in dyn.items()}
                torch.onnx.export(module, args, str(path), dynamo=False, input_names=in_names, output_names=out_names,
                                  dynamic_axes=axes, opset_version=17)
        inputs = {}
        for n, a in zip(in_names, args):
            shape = list(a.shape)
            for axis, dim in (dyn or {}).get(n, {}).items():
                shape[axis] = dim if isinstance(dim, str) else dim.__name__
            inputs[n] = {"shape": shape, "dtype": str(a.dtype).replace("torch.", "")}
            if not a.dtype.is_floating_point:
                inputs[n].update(INT_INPUTS[n])
        manifest[name] = {"inputs": inputs, "outputs": out_names, "dims": bounds, "exporter": exporter}
        least = max([getattr(d, "min", 2) for axes in (dyn or {}).values() for d in axes.values()] or [2])
        if least > 2:  # the smallest size the model takes (wav2vec2's conv stack needs 400 samples)
            manifest[name]["min"] = least
        print(f"{name}: {path.stat().st_size / 1e3:.0f} kB ({exporter})")
    (out_dir / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    if not only or "optimum_whisper_decoder_merged" in only:
        export_optimum_merged_decoder(out_dir)


if __name__ == "__main__":
    export(Path(sys.argv[1] if len(sys.argv) > 1 else "tests/data/torch"), set(sys.argv[2:]))
