#!/usr/bin/env python3
"""Rewrites tests/data/onnx_node_cases_passing.txt: the ONNX node test cases that nerve
compiles and runs correctly today, each marked `constants` where it runs only with its inputs
after the first fixed at compile time (tests/python/test_onnx_node_cases.py holds them to it).
Run after a change that makes more of them pass; a case that goes wrong raises here."""

import importlib.util
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    spec = importlib.util.spec_from_file_location("node_cases", REPO / "tests/python/test_onnx_node_cases.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    passing = []
    with tempfile.TemporaryDirectory() as d:
        for name in sorted(mod.CASES):
            mode = mod.run_case_either_way(name, Path(d))
            if mode is not None:
                passing.append(f"{name} {mode}".strip())
    header = [line for line in mod.PASSING_FILE.read_text().splitlines()
              if line.startswith("#") and not line.startswith("# onnx ")]
    header.append(f"# onnx {mod.onnx.__version__}")
    mod.PASSING_FILE.write_text("\n".join(header + passing) + "\n")
    fixed = sum(line.endswith(" " + mod.CONSTANTS) for line in passing)
    print(f"{len(passing)} of {len(mod.CASES)} cases pass ({fixed} of them with their parameters fixed at "
          f"compile time); written to {mod.PASSING_FILE.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
