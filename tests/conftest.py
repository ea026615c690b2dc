import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "toolkit"))


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", default=False, help="run the slow model/cross-target tests")
    parser.addoption("--fuzz-cases", default=None, metavar="N", help="cases per fuzz test in tests/test_fuzz.py (a long run)")
    parser.addoption("--nan-cases", default=None, metavar="N", help="cases per (family, source) in tests/test_nan_properties.py (a long run)")
    parser.addoption("--nan-seed", default=None, metavar="S", help="seed of tests/test_nan_properties.py (default 27)")
    parser.addoption("--fuzz-seed", default=None, metavar="S", help="seed of tests/test_fuzz.py's mutators (default 11)")


def pytest_collection_modifyitems(config, items):
    for item in items:  # the tests that run sshd on 127.0.0.1 run on one xdist worker (`--dist loadgroup`)
        if "ssh" in item.keywords:
            item.add_marker(pytest.mark.xdist_group("ssh"))
    if config.getoption("--runslow"):
        return
    skip_slow = pytest.mark.skip(reason="slow: run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip_slow)
