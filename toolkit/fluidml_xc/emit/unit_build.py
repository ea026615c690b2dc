"""A model's units (emit/units.py) compiled on every core, each unit's object reused from the kernel cache.

Keys are computed and looked up here; the units missed are emitted, printed and compiled by a pool of processes
forked after the graph is planned (the children inherit the jobs and receive only their indices; llvmlite starts
no threads, so none is lost at the fork), while this process emits and compiles the entry modules. Below
FORK_MIN_UNITS missed units, everything runs here: a pool's start and stop (70 ms on a loaded 2-core machine)
would cost more than it saves. The objects, the weights blob and its labels come out in step order, whatever the
workers and the cache did.
"""
from __future__ import annotations

import contextlib
import hashlib
import multiprocessing
import os
import signal
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Protocol

from ..ir import Graph
from ..target.machine import MachineSpec, compile_module_timed
from ..target.objects import build_workers
from .emitter import EmitOptions, ModuleEmitter
from .units import UnitRecord, UnitView, emit_entry, emit_unit, local_view, unit_key, unit_symbol, view_digest

FORK_MIN_UNITS = 4


class UnitCache(Protocol):
    """target/kernel_cache.KernelCache's interface: keys are 64 hex characters."""

    def get(self, key: str) -> bytes | None: ...

    def put(self, key: str, data: bytes) -> bool: ...


@dataclass(frozen=True)
class UnitJob:
    view: UnitView
    spec: MachineSpec
    key: str

    @property
    def weight(self) -> int:
        """Bytes the node touches: the pool starts with the heaviest units."""
        return sum(t.nbytes for t in self.view.graph.tensors.values())


@dataclass(frozen=True)
class UnitResult:
    """A unit's record and constants (sha256 hex -> bytes), with the seconds it took (0 when cached): emission and
    IR text, LLVM optimization, code generation; `pid`: the process that compiled it."""

    record: UnitRecord
    constants: dict[str, bytes]
    emit: float = 0.0
    optimize: float = 0.0
    codegen: float = 0.0
    pid: int = 0


@dataclass(frozen=True)
class VariantSeconds:
    cpu: str
    emit: float
    optimize: float
    codegen: float


@dataclass
class UnitsBuild:
    """The objects to link (per variant: its entry, then its units in step order), the weights blob with each
    constant's symbol and offset, and what happened."""

    objects: list[bytes]
    blob: bytes
    labels: list[tuple[str, int]]
    entries: list[ModuleEmitter]
    entry_texts: list[str]
    splits: dict[str, tuple[int, ...]]
    """Variant 0's parallel nodes: node name -> tiles per split dimension (the manifest's parallel_ops)."""
    cached: int = 0
    compiled: int = 0
    processes: int = 1
    seconds: list[VariantSeconds] = field(default_factory=list)


def compile_unit(job: UnitJob) -> UnitResult:
    started = time.perf_counter()
    unit = emit_unit(job.view, job.spec, job.key)
    emitted = time.perf_counter() - started
    code, optimize, codegen = compile_module_timed(unit.ir_text, job.spec)
    return UnitResult(UnitRecord(code, tuple(unit.constants), unit.split), unit.constants, emitted, optimize, codegen,
                      os.getpid())


_FORKED: list[UnitJob] = []
"""The jobs a forked worker inherits (set just before the pool forks)."""


def _forked(index: int) -> UnitResult | None:
    """A worker's unit; None on any error (this process redoes it, so the error is the unit's own)."""
    try:
        return compile_unit(_FORKED[index])
    except BaseException:
        return None


def compile_units(jobs: list[UnitJob], workers: int, meanwhile=lambda: None) -> list[UnitResult]:
    """compile_unit of each job, in order, on `workers` forked processes (1: here); `meanwhile` runs here while
    the workers work."""
    global _FORKED
    if workers <= 1 or len(jobs) < FORK_MIN_UNITS:
        meanwhile()
        return [compile_unit(job) for job in jobs]
    _FORKED, pool = jobs, None
    try:
        with _signals_held():  # the workers fork at the first submit
            pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"), initializer=_worker_signals)
            futures = {i: pool.submit(_forked, i) for i in sorted(range(len(jobs)), key=lambda i: -jobs[i].weight)}
        meanwhile()
        done = [_result(futures[i]) for i in range(len(jobs))]
    finally:  # an error or a signal here: the units not started are dropped
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        _FORKED = []
    return [result if result is not None else compile_unit(job) for job, result in zip(jobs, done)]


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def _signals_held():
    """The build's stop signals recorded while the pool forks and raised again after: Python runs a handler in
    the main thread at its next instruction, which may be an at-fork hook, where the exception it raises (Ctrl-C's
    KeyboardInterrupt) would be printed and lost."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    previous = {sig: signal.signal(sig, lambda sig, frame: held.append(sig)) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for sig in dict.fromkeys(held):
            signal.raise_signal(sig)


def _worker_signals() -> None:
    """A worker ignores Ctrl-C (sent to the whole process group: the build's process stops the pool and reports
    the interruption in its one line) and dies of SIGTERM and SIGHUP."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for sig in STOP_SIGNALS[1:]:
        signal.signal(sig, signal.SIG_DFL)


def _result(future) -> UnitResult | None:
    """A worker's unit; None when the worker died (this process redoes it)."""
    try:
        return future.result()
    except BrokenProcessPool:
        return None


def cached_unit(cache: UnitCache | None, key: str) -> UnitResult | None:
    """The unit under `key` with every constant it names, or None (a miss)."""
    record = UnitRecord.from_bytes(cache.get(key) or b"") if cache is not None else None
    if record is None:
        return None
    constants = {}
    for digest in record.constants:
        data = cache.get(digest)
        if data is None:
            return None
        constants[digest] = data
    return UnitResult(record, constants)


def store_unit(cache: UnitCache | None, key: str, result: UnitResult) -> None:
    if cache is None:
        return
    for digest, data in result.constants.items():
        cache.put(digest, data)
    cache.put(key, result.record.to_bytes())


@dataclass(frozen=True)
class UnitOptions:
    layouts: dict
    loop_orders: dict
    parallel: bool
    symbol_prefix: str = "fxc_"
    workers: int | None = None
    """Processes (None: one per core, build_workers)."""


def _entry_emitters(graph: Graph, plan, specs: list[MachineSpec], options: UnitOptions) -> list[ModuleEmitter]:
    return [ModuleEmitter(graph, plan, spec, EmitOptions(layouts=options.layouts, loop_orders=options.loop_orders,
                                                         parallel=options.parallel, symbol_prefix=options.symbol_prefix,
                                                         variant=spec.variant, unit=True)) for spec in specs]


def build_units(graph: Graph, plan, specs: list[MachineSpec], options: UnitOptions, cache: UnitCache | None,
                on_keys=lambda: None) -> UnitsBuild:
    """Every variant's units and entry module as objects, in step order; `on_keys` is called once the keys are
    computed and looked up (the build's "kernels" stage)."""
    entries = _entry_emitters(graph, plan, specs, options)
    steps = [(step, graph.nodes[i]) for step, i in enumerate(plan.order) if entries[0].emits_function(graph.nodes[i])]
    views = {step: local_view(entries[0], node) for step, node in steps}
    digests = {step: view_digest(view) for step, view in views.items()}
    keys = [{step: unit_key(digests[step], spec) for step, _ in steps} for spec in specs]
    jobs = {}
    for v, spec in enumerate(specs):
        for step, _ in steps:
            jobs.setdefault(keys[v][step], UnitJob(views[step], spec, keys[v][step]))
    results = {key: cached_unit(cache, key) for key in jobs}
    missed = [job for key, job in jobs.items() if results[key] is None]
    on_keys()
    texts: list[str] = []
    entry_codes: list[tuple[bytes, float, float]] = []

    def entries_here() -> None:
        for v, entry in enumerate(entries):
            texts.append(emit_entry(entry, {step: unit_symbol(keys[v][step], specs[v]) for step, _ in steps}))
            entry_codes.append(compile_module_timed(texts[-1], specs[v]))
    workers = options.workers or build_workers(len(missed))
    for job, result in zip(missed, compile_units(missed, workers, entries_here)):
        results[job.key] = result
        store_unit(cache, job.key, result)
    return _assemble(specs, steps, keys, results, entries, texts, entry_codes, len(jobs) - len(missed), len(missed))


def _assemble(specs, steps, keys, results, entries, texts, entry_codes, cached: int, compiled: int) -> UnitsBuild:
    """The objects, blob and labels in step order (the same bytes whatever was cached or where it compiled)."""
    objects, blob, labels, seen = [], bytearray(), {}, set()
    alignment = specs[0].alignment

    def add(symbol: str, data: bytes) -> None:
        if symbol not in labels:
            blob.extend(b"\0" * (-len(blob) % alignment))
            labels[symbol] = len(blob)
            blob.extend(data)
    seconds = []
    for v, spec in enumerate(specs):
        objects.append(entry_codes[v][0])
        emit = optimize = codegen = 0.0
        for step, _ in steps:
            key = keys[v][step]
            result = results[key]
            if key in seen:
                continue
            seen.add(key)
            objects.append(result.record.code)
            for digest in result.record.constants:
                add("fxc_c_" + digest[:32], result.constants[digest])
            emit, optimize, codegen = emit + result.emit, optimize + result.optimize, codegen + result.codegen
        for symbol, data in entries[v].content.items():
            add(symbol, data)
        seconds.append(VariantSeconds(spec.cpu, emit, optimize + entry_codes[v][1], codegen + entry_codes[v][2]))
    splits = {node.name: results[keys[0][step]].record.split for step, node in steps
              if results[keys[0][step]].record.split is not None}
    pids = {r.pid for r in results.values() if r.pid} - {os.getpid()}
    return UnitsBuild(objects, bytes(blob), sorted(labels.items(), key=lambda kv: kv[1]), entries, texts, splits,
                      cached, compiled, 1 + len(pids), seconds)


def unit_texts(graph: Graph, plan, specs: list[MachineSpec], options: UnitOptions) -> tuple[list[str], bytes]:
    """Per variant, its units' IR text in step order and then its entry module's; and the constants' bytes in the
    blob's order (what benchmarks/codegen_digest.py digests: no LLVM, no cache)."""
    entries = _entry_emitters(graph, plan, specs, options)
    steps = [(step, graph.nodes[i]) for step, i in enumerate(plan.order) if entries[0].emits_function(graph.nodes[i])]
    views = {step: local_view(entries[0], node) for step, node in steps}
    texts, constants = [], {}
    for spec, entry in zip(specs, entries):
        keys = {step: unit_key(view_digest(views[step]), spec) for step, _ in steps}
        emitted = [emit_unit(views[step], spec, keys[step]) for step, _ in steps]
        for unit in emitted:
            constants.update(unit.constants)
        text = emit_entry(entry, {step: unit_symbol(keys[step], spec) for step, _ in steps})
        constants.update({hashlib.sha256(data).hexdigest(): data for data in entry.content.values()})
        texts.append("\n".join([*(unit.ir_text for unit in emitted), text]))
    return texts, b"".join(constants.values())
