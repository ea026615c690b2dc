"""Work on many hosts at once: bounded workers, one result per host, a failing host never stops the others."""
from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Callable

from ..errors import FxcError, RemoteError
from ..progress import progress_bar
from ..remote.artifact import Artifact
from ..remote.profile import fmt_ms
from ..remote.progress import human_bytes
from .inventory import FleetHost
from .tasks import HostOutcome

DEFAULT_WORKERS = 5


@dataclass
class HostResult:
    host: FleetHost
    board: str
    outcome: HostOutcome | None = None
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.outcome is not None and not self.error


def run_hosts(hosts: list[FleetHost], artifacts: dict[str, Artifact], default_board: str,
              work: Callable[[FleetHost, Artifact], HostOutcome], workers: int = DEFAULT_WORKERS,
              what: str = "hosts") -> list[HostResult]:
    """`work(host, artifact)` on every host with at most `workers` at a time; results in inventory order."""
    results: dict[str, HostResult] = {}

    def one(host: FleetHost) -> HostResult:
        board = artifacts[host.board_name(default_board)].board.name
        try:
            return HostResult(host, board, work(host, artifacts[host.board_name(default_board)]))
        except FxcError as exc:
            return HostResult(host, board, error=str(exc))
        except Exception as exc:  # noqa: BLE001 - one host's unexpected failure must not stop the others
            return HostResult(host, board, error=f"{type(exc).__name__}: {exc}")

    with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="fleet") as pool, \
            progress_bar(total=len(hosts), desc=what, unit="host") as bar:
        futures = {pool.submit(one, host): host for host in hosts}
        for future in as_completed(futures):
            result = future.result()
            results[result.host.name] = result
            bar.update(1)
    return [results[h.name] for h in hosts]


def host_header(result: HostResult) -> str:
    h = result.host
    where = f"{h.address}" + (f":{h.port}" if h.port else "")
    status = "ok" if result.ok else "FAILED"
    return f"== {h.name} ({result.board}, {where}): {status}"


def summary(results: list[HostResult]) -> str:
    """One line per host: board, status, latency and peak RSS when profiled, what went wrong otherwise."""
    rows = [("host", "board", "status", "median", "p90", "peak RSS", "detail")]
    for r in results:
        prof = r.outcome.profile if r.outcome else None
        median = fmt_ms(prof.latency_ms["median"]) if prof else "-"
        p90 = fmt_ms(prof.latency_ms["p90"]) if prof else "-"
        rss = human_bytes(prof.peak_rss_bytes) if prof and prof.peak_rss_bytes is not None else "-"
        if r.ok:
            d = r.outcome.deployed
            detail = ("already deployed" if d.get("already_present") else
                      f"uploaded {d.get('uploaded_files', 0)} files ({human_bytes(d.get('uploaded_bytes', 0))})")
        else:
            detail = r.error
        rows.append((r.host.name, r.board, "ok" if r.ok else "FAILED", median, p90, rss, detail))
    widths = [max(len(row[i]) for row in rows) for i in range(6)]
    return "\n".join("  ".join(f"{c:<{w}}" for c, w in zip(row[:6], widths)) + "  " + row[6] for row in rows)


def raise_for_failures(results: list[HostResult], action: str) -> None:
    failed = [r for r in results if not r.ok]
    if failed:
        names = "; ".join(f"{r.host.name} ({r.error})" for r in failed)
        raise RemoteError(f"{action} failed on {len(failed)} of {len(results)} hosts: {names}")


def print_results(results: list[HostResult], body: Callable[[HostOutcome], str]) -> None:
    """A table per host (its own report, or what failed), then the summary over all hosts."""
    for r in results:
        print(host_header(r))
        print(body(r.outcome) if r.ok else f"error     {r.error}")
        print()
    print(summary(results))
    sys.stdout.flush()
