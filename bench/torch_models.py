"""nerve against onnxruntime on the torch-exported models of tests/data/torch (made by
scripts/export_torch_models.py), one thread each, in one process, interleaved runs, medians
(nerve.modeltools.bench_model, as `nerve bench MODEL --vs onnxruntime`); symbolic dims at their
bounds. Prints a table for bench/RESULTS.md.

    python bench/torch_models.py [--seconds 2]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "python"))

from test_torch_exports import DATA, draw_feeds, input_bound  # noqa: E402

from nerve.bench import cpu_model  # noqa: E402
from nerve.modeltools import bench_model  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=2.0, help="measurement time per model (both runtimes)")
    args = ap.parse_args()
    manifest = json.loads((DATA / "manifest.json").read_text())
    rng = np.random.default_rng(0)
    print(f"machine: {cpu_model()}, threads 1")
    print("| model | exporter | inputs | nerve µs | onnxruntime µs | ratio | max abs diff |")
    print("|---|---|---|---|---|---|---|")
    for name in sorted(manifest):
        if (DATA / f"{name}.torch.npz").exists():
            continue  # onnxruntime cannot run it (opset 23's RotaryEmbedding as torch writes it)
        spec = manifest[name]
        size = input_bound(spec)
        feeds = draw_feeds(rng, spec, size)
        r = bench_model(str(DATA / f"{name}.onnx"), feeds, spec["dims"], "onnxruntime", seconds=args.seconds)
        shapes = ", ".join(f"{k} {list(v.shape)}" for k, v in feeds.items())
        diff = max(r["max_abs_diff"].values())
        print(f"| {name} | {spec['exporter']} | {shapes} | {r['nerve']['median_us']:.1f} | "
              f"{r['onnxruntime']['median_us']:.1f} | {r['ratio']:.2f}x | {diff:.2g} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
