"""One version, from the VERSION file, everywhere."""

import re
from importlib import metadata

import nerve
from helpers import REPO
from nerve._native import lib


def test_version_is_the_same_everywhere():
    version = (REPO / "VERSION").read_text().strip()
    assert re.fullmatch(r"\d+\.\d+\.\d+", version)
    assert nerve.__version__ == version
    assert nerve.info()["version"] == version
    assert metadata.version("nerve") == version


def test_version_number_matches_the_string():
    major, minor, patch = map(int, nerve.__version__.split("."))
    assert lib.nrv_version_number() == major * 10000 + minor * 100 + patch
