"""nerve's graph compiler: ONNX in, a ``.nrv`` plan out.

    compile_onnx(model_bytes, model_dir, dims=..., state=..., fuse=True) -> bytes

Stages: import (onnx_import + onnx_ops*: shapes, symbolic dims, constant folding through the
C runtime, If specialisation) → passes (passes.py: dead-op elimination, fusion) → static
memory plan (memplan.py) → serialisation (planfile.py). Importing this package needs the
``onnx`` package; the runtime (nerve.Session on a ready .nrv) does not.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Optional, Sequence

from ..errors import ModelError, UnboundDimsError
from .graph import CompileError, UnboundDims

__all__ = ["compile_onnx", "compile_program", "CompileError"]


def _load_model(model_bytes: bytes):
    try:
        import onnx
    except ImportError as exc:  # pragma: no cover - onnx is a dependency
        raise ModelError("compiling an ONNX model needs the 'onnx' package (pip install onnx)") from exc
    from google.protobuf.message import DecodeError

    try:
        model = onnx.ModelProto()
        model.ParseFromString(model_bytes)  # external data is read by the importer, path-checked
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise ModelError(f"not a valid ONNX model (truncated or corrupted?): {exc}") from exc
    if not model.graph.node and not model.graph.output:
        raise ModelError("not a valid ONNX model: the graph is empty (truncated or corrupted file?)")
    return model


def compile_program(model_bytes: bytes, model_dir: Path, dims: Optional[Mapping[str, int]] = None,
                    state: Optional[Mapping[str, str]] = None, fuse: bool = True,
                    constants: Optional[Mapping[str, object]] = None,
                    outputs: Optional[Sequence[str]] = None, precision: str = "fp32",
                    layers: Optional[Mapping[str, str]] = None, hessians: Optional[Mapping[str, object]] = None):
    """Imports and optimises a model; returns the Program (before serialisation).

    constants: graph inputs fixed at compile time (folded; an If on one is specialised).
    outputs: the graph outputs to keep (default all); the ops only the others need are dropped.
    precision: a nerve.precision name; layers: {linear op name: precision} overrides for single
    layers (passes.optimize); hessians: {linear op name: Σ xᵀx} for GPTQ W4 weights."""
    from . import onnx_ops  # noqa: F401  (registers the handlers)
    from . import onnx_ops_nn  # noqa: F401
    from . import onnx_ops_signal  # noqa: F401  (STFT, DFT, windows, MelWeightMatrix)
    from . import onnx_ops_contrib  # noqa: F401  (onnxruntime's float com.microsoft ops)
    from . import onnx_ops_quant  # noqa: F401  (MatMulNBits, (De)QuantizeLinear, dynamic quantization)
    from . import onnx_ops_attention  # noqa: F401  (opset 23: RMSNormalization, RotaryEmbedding, Attention)
    from . import onnx_ops_composite  # noqa: F401  (CastLike, EyeLike, Swish, Hardmax, AffineGrid, ...)
    from . import onnx_ops_stream  # noqa: F401  (TensorScatter, CausalConvWithState, LinearAttention)
    from . import onnx_ops_misc  # noqa: F401  (Det, BitCast, MaxRoiPool)
    from . import passes
    from .onnx_import import Importer

    model = _load_model(model_bytes)
    try:
        prog = Importer(model, Path(model_dir) if model_dir is not None else None,
                        dims or {}).import_model(state or {}, constants, outputs)
        passes.optimize(prog, fuse=fuse, precision=precision, layers=layers, hessians=hessians)
        if fuse:
            from .kv_append import append_kv_caches

            append_kv_caches(prog)
    except UnboundDims as exc:
        raise UnboundDimsError(str(exc), exc.missing, exc.inputs, exc.outputs) from None
    except CompileError as exc:
        raise ModelError(str(exc)) from None
    return prog


def compile_onnx(model_bytes: bytes, model_dir: Path, dims: Optional[Mapping[str, int]] = None,
                 state: Optional[Mapping[str, str]] = None, fuse: bool = True,
                 constants: Optional[Mapping[str, object]] = None,
                 outputs: Optional[Sequence[str]] = None, precision: str = "fp32",
                 layers: Optional[Mapping[str, str]] = None, hessians: Optional[Mapping[str, object]] = None) -> bytes:
    from .planfile import serialize

    prog = compile_program(model_bytes, model_dir, dims, state, fuse, constants, outputs, precision, layers, hessians)
    try:
        return serialize(prog)
    except CompileError as exc:
        raise ModelError(str(exc)) from None
