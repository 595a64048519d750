"""Constants and helpers shared by the test modules (fixtures live in conftest.py)."""

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
