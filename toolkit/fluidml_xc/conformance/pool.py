"""Cases in worker processes, one at a time each, several workers in parallel: a crash of generated code
(signal) or a case over its time limit kills only its worker, which is restarted for the next case."""
from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from dataclasses import asdict
from typing import Sequence

from . import runner
from .cases import DEFAULT_TIMEOUT, get_case, load_cases, op_of
from .runner import CaseResult
from .suites import load_suite, suite_of


def _worker_main(conn, board, opt) -> None:
    import faulthandler

    os.setpgid(0, 0)
    faulthandler.disable()  # a crash of generated code is reported by the parent (signal), without a dump
    while True:
        try:
            name = conn.recv()
        except EOFError:
            return
        if name is None:
            return
        result = runner.run_case(get_case(name), board, opt)
        conn.send(asdict(result))


class CaseWorker:
    """A child process running cases one at a time; killed and restarted on a crash or a timeout."""

    RECYCLE_AFTER = 400

    def __init__(self, board: str | None = None, opt: str = "fluid"):
        self.board, self.opt = board, opt
        self.proc = None
        self.conn = None
        self.done = 0

    def _start(self) -> None:
        load_cases()  # loaded once in the parent, inherited by fork (the file suites: preload)
        ctx = multiprocessing.get_context("fork")
        parent, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(child, self.board, self.opt), daemon=True)
        self.proc.start()
        child.close()
        self.conn, self.done = parent, 0

    def _kill(self) -> None:
        if self.proc is not None:
            pid = self.proc.pid
            try:
                os.killpg(pid, signal.SIGKILL)  # the worker's own group: it and the linker/qemu it started
            except (ProcessLookupError, PermissionError):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self.proc.join(5)
            self.conn.close()
        self.proc = self.conn = None

    def close(self) -> None:
        if self.proc is not None:
            try:
                self.conn.send(None)
                self.proc.join(5)
            except (BrokenPipeError, OSError):
                pass
            if self.proc.is_alive():
                self._kill()
            self.proc = self.conn = None

    def run(self, name: str, timeout: float = DEFAULT_TIMEOUT) -> CaseResult:
        if self.proc is None or not self.proc.is_alive() or self.done >= self.RECYCLE_AFTER:
            self.close()
            preload([name])
            self._start()
        op = op_of(name)
        started = time.perf_counter()
        try:
            self.conn.send(name)
            if self.conn.poll(timeout):
                data = self.conn.recv()
                self.done += 1
                return CaseResult(**data)
            self._kill()
            return CaseResult(name, op, "timeout", "timeout", f"no result within {timeout:g} s", time.perf_counter() - started)
        except (EOFError, BrokenPipeError, ConnectionResetError, OSError):
            self.proc.join(5)
            code = self.proc.exitcode
            try:
                how = f"killed by signal {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit status {code}"
            except ValueError:
                how = f"killed by signal {-code}"
            self._kill()
            return CaseResult(name, op, "crash", "crash", f"worker {how}", time.perf_counter() - started)


def preload(names: Sequence[str]) -> None:
    """Load the suites of `names` in this process, so the forked workers inherit them."""
    load_cases()
    for suite in {suite_of(n) for n in names} - {"node"}:
        load_suite(suite)


def run_cases(names: Sequence[str], board: str | None = None, jobs: int = 2, timeout: float = DEFAULT_TIMEOUT,
              opt: str = "fluid", progress=None) -> list[CaseResult]:
    """Run cases on `jobs` isolated workers; results in the order of `names`."""
    preload(names)
    results: dict[str, CaseResult] = {}
    queue = list(names)
    lock = threading.Lock()

    def drain() -> None:
        worker = CaseWorker(board, opt)
        try:
            while True:
                with lock:
                    if not queue:
                        return
                    name = queue.pop(0)
                result = worker.run(name, timeout)
                with lock:
                    results[name] = result
                    if progress:
                        progress(result, len(results), len(names))
        finally:
            worker.close()

    threads = [threading.Thread(target=drain) for _ in range(max(1, min(jobs, len(queue))))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [results[n] for n in names]
