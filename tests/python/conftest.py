"""Shared helpers of the Python suite.

Random inputs are fresh on every run; the seed is printed in pytest's header and can be
pinned with NERVE_TEST_SEED=<int> to reproduce a failure.
"""

import zlib

import numpy as np
import pytest

import nerve
from helpers import SEED, older_ort_cannot_run


def pytest_report_header(config):
    return f"nerve {nerve.__version__} from {nerve.info()['library']}; NERVE_TEST_SEED={SEED}"


@pytest.fixture
def rng(request):
    """A generator seeded from the run's seed and the test's name (stable within a run)."""
    return np.random.default_rng([SEED, zlib.crc32(request.node.nodeid.encode())])


@pytest.fixture(autouse=True)
def _no_leaked_kernel_settings():
    """Every test leaves the dispatch table as it found it."""
    ops = nerve.kernels.ops()
    before = ({op: nerve.kernels.forced(op) for op in ops}, nerve.kernels.disabled())
    yield
    after = ({op: nerve.kernels.forced(op) for op in ops}, nerve.kernels.disabled())
    for op, variant in before[0].items():  # put it back, so one failure does not cascade
        nerve.kernels.force(op, variant)
    nerve.kernels.disable(before[1])
    assert after == before, "a test changed the kernel dispatch table without restoring it"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A test whose onnxruntime reference raised because that onnxruntime is too old for the
    case (helpers.older_ort_cannot_run) is reported skipped, with the reason; any other
    failure, and every failure with the verified onnxruntime, stays a failure."""
    outcome = yield
    report = outcome.get_result()
    reason = older_ort_cannot_run(call.excinfo.value) if report.failed and call.excinfo is not None else None
    if reason:
        report.outcome = "skipped"
        report.longrepr = (str(item.path), (item.location[1] or 0) + 1, f"Skipped: {reason}")
