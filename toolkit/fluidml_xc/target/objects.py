"""LLVM object emission on several processes: the code variants of one build (or any independent modules).

llvmlite serializes every call into LLVM behind one process-wide lock (llvmlite.binding.ffi._lib_wrapper), so
threads compile one module at a time. Here the modules are split into one share per worker (largest first, each
to the least loaded): this process compiles the first share, a child Python (`python -m fluidml_xc.target.objects`:
specs and IR pickled on stdin, the objects on stdout) each other one. An object is a function of the IR, the spec
and LLVM alone, so it is byte-identical to the one compiled in this process.
"""
from __future__ import annotations

import os
import pickle
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from .machine import MachineSpec, compile_module_timed

PACKAGE_ROOT = Path(__file__).resolve().parent.parent.parent
"""The folder holding this fluidml_xc package: the child imports this checkout's code, not another install."""


PARALLEL_IR_CHARS = 1 << 20
"""Below this much IR text in all, the modules compile in this process: a child's start (about 0.3 s) would cost
more than it saves."""


def build_workers(jobs: int) -> int:
    """Processes for `jobs` modules: one per core this process may run on, at most one per module."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(jobs, cores))


@dataclass(frozen=True)
class CompiledObject:
    """One module's object and the seconds it took: optimization (with parse and verify), code generation;
    `process` 0 is this one, k > 0 the k-th child."""

    code: bytes
    optimize: float
    codegen: float
    process: int = 0


def _here(jobs: list[tuple[str, MachineSpec]], process: int = 0) -> list[CompiledObject]:
    return [CompiledObject(*compile_module_timed(ir, spec), process) for ir, spec in jobs]


def _child_compile(jobs: list[tuple[str, MachineSpec]]) -> list[tuple[bytes, float, float]]:
    """compile_module_timed of each job in a child process; a failing child's jobs compile here again, so the
    error is compile_module's own."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(PACKAGE_ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-m", "fluidml_xc.target.objects"], input=pickle.dumps(jobs),
                          capture_output=True, env=env)
    return pickle.loads(done.stdout) if done.returncode == 0 else [compile_module_timed(ir, spec) for ir, spec in jobs]


def shares(sizes: list[int], workers: int) -> list[list[int]]:
    """Job indices per worker: the largest job first, each to the share with the least total size."""
    out: list[list[int]] = [[] for _ in range(min(workers, len(sizes)))]
    totals = [0] * len(out)
    for k in sorted(range(len(sizes)), key=lambda k: -sizes[k]):
        least = totals.index(min(totals))
        out[least].append(k)
        totals[least] += sizes[k]
    return out


def compile_objects(jobs: list[tuple[str, MachineSpec]], workers: int | None = None) -> list[CompiledObject]:
    """compile_module for each (IR, spec), in order, with its seconds, on `workers` processes (default
    build_workers): this one and a child per further share."""
    if workers is None:
        workers = build_workers(len(jobs)) if sum(len(ir) for ir, _ in jobs) >= PARALLEL_IR_CHARS else 1
    if workers <= 1:
        return _here(jobs)
    parts = shares([len(ir) for ir, _ in jobs], workers)

    def run(part: int) -> list[CompiledObject]:
        mine = [jobs[k] for k in parts[part]]
        return _here(mine) if part == 0 else [CompiledObject(*done, part) for done in _child_compile(mine)]
    with ThreadPoolExecutor(max_workers=len(parts)) as pool:
        done = {k: obj for part, objs in zip(parts, pool.map(run, range(len(parts)))) for k, obj in zip(part, objs)}
    return [done[k] for k in range(len(jobs))]


def compile_modules(jobs: list[tuple[str, MachineSpec]], workers: int | None = None) -> list[bytes]:
    """compile_objects' objects alone."""
    return [obj.code for obj in compile_objects(jobs, workers)]


def _main() -> None:
    jobs = pickle.loads(sys.stdin.buffer.read())
    sys.stdout.buffer.write(pickle.dumps([compile_module_timed(ir, spec) for ir, spec in jobs]))


if __name__ == "__main__":
    _main()
