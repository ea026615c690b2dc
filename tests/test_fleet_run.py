"""fleet.run: hosts really run concurrently (bounded by the worker count) and one failing host stops no other."""
from __future__ import annotations

import threading
from pathlib import Path

import pytest

from fluidml_xc.artifact import Manifest
from fluidml_xc.errors import RemoteError
from fluidml_xc.fleet.inventory import FleetHost
from fluidml_xc.fleet.run import raise_for_failures, run_hosts, summary
from fluidml_xc.fleet.tasks import HostOutcome
from fluidml_xc.remote.artifact import Artifact


def artifacts() -> dict[str, Artifact]:
    return {"rpi4": Artifact(Path("/nonexistent"), Manifest(board="rpi4", inputs=(), outputs=()), ())}


HOSTS = [FleetHost(f"h{i}", "127.0.0.1", board="rpi4") for i in range(3)]


def test_hosts_run_concurrently_up_to_the_worker_bound():
    barrier = threading.Barrier(2, timeout=5)
    running, peak, lock = [0], [0], threading.Lock()

    def work(host: FleetHost, artifact: Artifact) -> HostOutcome:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        try:
            if host.name != "h2":
                barrier.wait()  # h0 and h1 must be in flight at the same time
            return HostOutcome(host.name, artifact.board.name, "here", {"already_present": True})
        finally:
            with lock:
                running[0] -= 1

    results = run_hosts(HOSTS, artifacts(), "rpi4", work, workers=2)
    assert [r.host.name for r in results] == ["h0", "h1", "h2"] and all(r.ok for r in results)
    assert peak[0] == 2


def test_one_worker_runs_hosts_one_at_a_time_and_failures_are_per_host():
    barrier = threading.Barrier(2, timeout=0.5)

    def work(host: FleetHost, artifact: Artifact) -> HostOutcome:
        if host.name == "h1":
            raise RemoteError("connection refused by 127.0.0.1:1")
        if host.name == "h2":
            raise ValueError("unexpected")
        barrier.wait()  # alone: times out, since only one host runs at a time
        return HostOutcome(host.name, "rpi4")

    results = run_hosts(HOSTS, artifacts(), "rpi4", work, workers=1)
    assert [r.ok for r in results] == [False, False, False]
    assert "BrokenBarrierError" in results[0].error and "refused" in results[1].error
    assert results[2].error == "ValueError: unexpected"
    with pytest.raises(RemoteError, match=r"deploy failed on 3 of 3 hosts: h0 .*; h1 \(connection refused"):
        raise_for_failures(results, "deploy")
    assert summary(results).count("FAILED") == 3
