"""Shared helpers of the Python suite.

Random inputs are fresh on every run; the seed is printed in pytest's header and can be
pinned with NERVE_TEST_SEED=<int> to reproduce a failure.
"""

import zlib

import numpy as np
import pytest

import nerve
from helpers import SEED


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
