"""LLVM object emission on several processes: the code variants of one build (or any independent modules).

llvmlite serializes every call into LLVM behind one process-wide lock (llvmlite.binding.ffi._lib_wrapper), so
threads compile one module at a time; each worker here is a child Python (`python -m fluidml_xc.target.objects`)
that runs `compile_module` on one module (spec and IR pickled on stdin, the object on stdout). The object is a
function of the IR, the spec and LLVM alone, so it is byte-identical to the one compiled in this process.
"""
from __future__ import annotations

import os
import pickle
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .machine import MachineSpec, compile_module

PACKAGE_ROOT = Path(__file__).resolve().parent.parent.parent
"""The folder holding this fluidml_xc package: the child imports this checkout's code, not another install."""


def build_workers(jobs: int) -> int:
    """Processes for `jobs` modules: one per core this process may run on, at most one per module."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(jobs, cores))


def _child_compile(llvm_ir: str, spec: MachineSpec) -> bytes:
    """compile_module in a child process; a failing child compiles here again, so the error is compile_module's own."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(PACKAGE_ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-m", "fluidml_xc.target.objects"], input=pickle.dumps((llvm_ir, spec)),
                          capture_output=True, env=env)
    return done.stdout if done.returncode == 0 else compile_module(llvm_ir, spec)


def compile_modules(jobs: list[tuple[str, MachineSpec]], workers: int | None = None) -> list[bytes]:
    """compile_module for each (IR, spec), in order, on `workers` processes (default build_workers): one worker
    compiles in this process, several run child processes (the largest module first)."""
    workers = build_workers(len(jobs)) if workers is None else workers
    if workers <= 1:
        return [compile_module(ir, spec) for ir, spec in jobs]
    order = sorted(range(len(jobs)), key=lambda k: -len(jobs[k][0]))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        done = dict(zip(order, pool.map(lambda k: _child_compile(*jobs[k]), order)))
    return [done[k] for k in range(len(jobs))]


def _main() -> None:
    llvm_ir, spec = pickle.loads(sys.stdin.buffer.read())
    sys.stdout.buffer.write(compile_module(llvm_ir, spec))


if __name__ == "__main__":
    _main()
