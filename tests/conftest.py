"""Options, markers and the shared fixtures of the test suite.

Helpers the tests import: modelrun.py (build/run a model natively or under qemu, `require_emulator`,
`board_runner`, the node JIT `jit_node`, the CLI in a subprocess `cli`, model builders `graph_model`,
`float_model`, `proto_model`, `matmul_relu_model`) and sshd.py (a real sshd on 127.0.0.1). Fixtures here:
`board_runner` (a board's runner; its missing emulator fails the test), `loopback_sshd` (a running sshd and an
empty ssh_config, stopped after the test; a missing sshd fails the test) and `patched_compiler` (for a test that
patches the compiler: builds bypass the kernel and plan caches and compile their units in this process).
"""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "toolkit"))

import modelrun  # noqa: E402  (after the paths above)
from sshd import Loopback, start_server  # noqa: E402


@pytest.fixture
def board_runner():
    """`board_runner(board)` -> modelrun.BoardRunner; a missing emulator fails the test in one line."""
    return modelrun.board_runner


@pytest.fixture
def loopback_sshd(tmp_path):
    """An sshd on 127.0.0.1 (keys and config under tmp_path/sshd) and an empty tmp_path/ssh_config."""
    server = start_server(tmp_path / "sshd")
    config = tmp_path / "ssh_config"
    config.write_text("")
    try:
        yield Loopback(server, config)
    finally:
        server.stop()


@pytest.fixture
def patched_compiler(monkeypatch):
    """The monkeypatch of a test that patches the compiler (an emitter, a planner, a constant). The caches' keys
    cover the sources, not a patch: a build reads and writes no cache, so a patched build neither reuses code built
    without the patch nor leaves code behind for later builds; units are compiled here, not in forked workers, so
    what a patched function records stays in this process."""
    from fluidml_xc import build
    from fluidml_xc.emit import unit_build
    monkeypatch.setattr(build, "kernel_cache", lambda: None)
    monkeypatch.setattr(build, "plan_store", lambda: None)
    monkeypatch.setattr(unit_build, "FORK_MIN_UNITS", 1 << 30)
    return monkeypatch


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", default=False, help="run the slow model/cross-target tests")
    parser.addoption("--fuzz-cases", default=None, metavar="N", help="cases per fuzz test in tests/test_fuzz.py (a long run)")
    parser.addoption("--nan-cases", default=None, metavar="N", help="cases per (family, source) in tests/test_nan_properties.py (a long run)")
    parser.addoption("--nan-seed", default=None, metavar="S", help="seed of tests/test_nan_properties.py (default 27)")
    parser.addoption("--fuzz-seed", default=None, metavar="S", help="seed of tests/test_fuzz.py's mutators (default 11)")


def pytest_collection_modifyitems(config, items):
    for item in items:  # the tests that run sshd on 127.0.0.1 run on one xdist worker (`--dist loadgroup`)
        if "loopback_sshd" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.ssh)
        if "ssh" in item.keywords:
            item.add_marker(pytest.mark.xdist_group("ssh"))
    if config.getoption("--runslow"):
        return
    skip_slow = pytest.mark.skip(reason="slow: run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip_slow)
