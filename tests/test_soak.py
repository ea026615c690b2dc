"""Soak (issue #24, benchmarks/soak.py): runs in a loop in one process through the runner and the C API (one
thread, and two application threads each with its own arena), resident memory and open descriptors flat, outputs
equal to ONNX Runtime's and every C API run byte-identical to the first; and run_artifact in a loop (a runner
process a call). 2,000 runs (100 run_artifact calls) on x86_64 by default; the release soak (100,000 runs and
1,000 calls on x86_64, 10,000 runs under qemu-aarch64) with --runslow."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from modelrun import require_emulator

SOAK_PATH = Path(__file__).resolve().parent.parent / "benchmarks" / "soak.py"


def _soak_module():
    if "fxc_soak" not in sys.modules:
        spec = importlib.util.spec_from_file_location("fxc_soak", SOAK_PATH)
        module = importlib.util.module_from_spec(spec)
        sys.modules["fxc_soak"] = module
        spec.loader.exec_module(module)
    return sys.modules["fxc_soak"]


def _check(results, runs: int) -> None:
    assert [s.kind for s in results][:3] == ["runner", "c-api", "c-api-2-threads"]
    for s in results:
        assert s.runs == runs or s.kind == "run_artifact"
        assert s.fds_start == s.fds_end > 0, s
        assert 0 < s.rss_start_bytes and s.rss_end_bytes - s.rss_start_bytes <= s.rss_slack, s
        assert s.mismatches == 0 and s.outputs_ok and s.left_over == 0, s


def test_soak_2000_runs_x86_64(tmp_path):
    results = _soak_module().soak_board("x86_64", 2000, tmp_path, process_runs=100)
    assert results[-1].kind == "run_artifact" and results[-1].runs == 100
    _check(results, 2000)


@pytest.mark.slow
@pytest.mark.parametrize("board, runs", [("x86_64", 100_000), pytest.param("qemu-aarch64", 10_000, marks=pytest.mark.qemu)])
def test_release_soak(board, runs, tmp_path):
    require_emulator(board)
    _check(_soak_module().soak_board(board, runs, tmp_path, process_runs=1000 if board == "x86_64" else 0), runs)
