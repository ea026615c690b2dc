"""A model's units (emit/units.py) compiled on every core, each unit's object reused from the kernel cache.

Keys are computed and looked up here; the units missed are emitted, printed and compiled by a pool of processes
forked after the graph is planned (the children inherit the jobs and receive only their indices; llvmlite starts
no threads, so none is lost at the fork), while this process emits and compiles the entry modules. Below
FORK_MIN_UNITS missed units, everything runs here: a pool's start and stop (70 ms on a loaded 2-core machine)
would cost more than it saves. Units that differ only in their weights' values are one job (share_groups): the
first is emitted and the others derived from it (units.Sharing). The objects, the weights blob and its labels come
out in step order, whatever the workers and the cache did.
"""
from __future__ import annotations

import contextlib
import gc
import hashlib
import itertools
import multiprocessing
import os
import signal
import threading
import time
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Protocol

from ..ir import Graph
from ..target.machine import MachineSpec, compile_module_timed
from ..target.objects import build_workers
from .emitter import EmitOptions, ModuleEmitter
from .units import (OBJECT_MAGIC, EmittedUnit, Sharing, UnitRecord, UnitView, blind_digest, code_key, emit_entry,
                    emit_shared, local_view, unit_key, unit_symbol, view_digest)

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
class Emitted:
    """A unit emitted (its IR named by its code key) with the CPU seconds it took."""

    unit: EmittedUnit
    key: str
    seconds: float = 0.0


@dataclass(frozen=True)
class CodeResult:
    """A unit's object with the CPU seconds LLVM took (0 when cached) and the process that compiled it."""

    code: bytes
    optimize: float = 0.0
    codegen: float = 0.0
    pid: int = 0


@dataclass(frozen=True)
class UnitResult:
    """A unit's record and constants (sha256 hex -> bytes), with its emission's seconds (0 when cached)."""

    record: UnitRecord
    constants: dict[str, bytes]
    emit: float = 0.0


@dataclass(frozen=True)
class VariantSeconds:
    cpu: str
    emit: float
    optimize: float
    codegen: float


@dataclass
class UnitsBuild:
    """The objects to link (per variant: its entry, then its units' distinct objects in step order), the weights
    blob with each constant's symbol and offset, and what happened."""

    objects: list[bytes]
    blob: bytes
    labels: list[tuple[str, int]]
    entries: list[ModuleEmitter]
    entry_texts: list[str]
    splits: dict[str, tuple[int, ...]]
    """Variant 0's parallel nodes: node name -> tiles per split dimension (the manifest's parallel_ops)."""
    cached: int = 0
    emitted: int = 0
    compiled: int = 0
    """Units found by their view key, units emitted, and distinct objects compiled (units with the same IR once)."""
    processes: int = 1
    seconds: list[VariantSeconds] = field(default_factory=list)


def emit_job(job: UnitJob) -> Emitted:
    return _emit(job)[0]


def _emit(job: UnitJob) -> tuple[Emitted, Sharing | None]:
    started = time.thread_time()
    unit, sharing = emit_shared(job.view, job.spec)
    return Emitted(unit, code_key(unit.ir_text, job.spec), time.thread_time() - started), sharing


def emit_group(jobs: list[UnitJob]) -> list[Emitted]:
    """Units of one blind digest and spec (share_groups): the first emitted, the others from its Sharing when its
    kernel gives one, else emitted themselves. The same units as emit_job's, in less time."""
    with collector_paused():
        first, sharing = _emit(jobs[0])
        done = [first]
        for job in jobs[1:]:
            started = time.thread_time()
            unit = sharing.apply(job.view) if sharing is not None else None
            done.append(Emitted(unit, first.key, time.thread_time() - started) if unit is not None else emit_job(job))
    return done


@contextlib.contextmanager
def collector_paused():
    """Python's cyclic garbage collector off while a module is emitted, and its youngest generation collected after:
    an llvmlite module is many thousands of objects in reference cycles, which the automatic collections would scan
    again and again (a fifth to a quarter of a unit's emission time); they are all young, so that collection frees
    them. A caller that turned the collector off keeps it off."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
            gc.collect(0)


def share_groups(jobs: list[UnitJob]) -> list[list[int]]:
    """The jobs' indices grouped by blind digest and spec, in first-job order."""
    digests: dict[int, str] = {}
    groups: dict[tuple, list[int]] = {}
    for i, job in enumerate(jobs):
        if id(job.view) not in digests:
            digests[id(job.view)] = blind_digest(job.view)
        groups.setdefault((digests[id(job.view)], job.spec), []).append(i)
    return list(groups.values())


def compile_code(text: str, spec: MachineSpec) -> CodeResult:
    code, optimize, codegen = compile_module_timed(text, spec)
    return CodeResult(code, optimize, codegen, os.getpid())


_FORKED: list[UnitJob] = []
"""A forked worker's jobs: its pool's, set by the pool's initializer (forked, not pickled), so that builds in
threads of one process never hand their jobs to each other's workers."""


def _worker_init(jobs: list[UnitJob]) -> None:
    global _FORKED
    _FORKED = jobs
    _worker_signals()


def _forked_emit(group: list[int]) -> list[Emitted] | None:
    """A worker's emission of a share group; None on any error (this process redoes it, so the error is the unit's
    own)."""
    try:
        return emit_group([_FORKED[i] for i in group])
    except BaseException:
        return None


def _forked_compile(text: str, spec: MachineSpec) -> CodeResult | None:
    try:
        return compile_code(text, spec)
    except BaseException:
        return None


class Compiler:
    """Emits the units missed (on forked workers when there are enough) and compiles each distinct IR once: a
    code key already compiled in this build, or in the cache, is not compiled again."""

    def __init__(self, cache, workers: int, on_compiled=lambda key, code: None):
        self.cache, self.workers, self.pool, self.on_compiled = cache, workers, None, on_compiled
        self.codes: dict[str, CodeResult | object] = {}
        """code key -> its CodeResult, or the future compiling it."""

    def _compiled(self, key: str, code: CodeResult) -> None:
        self.codes[key] = code
        self.on_compiled(key, code)

    def want(self, key: str, text: str, spec: MachineSpec) -> None:
        if key in self.codes:
            return
        cached = cached_code(self.cache, key)
        if cached is not None:
            self.codes[key] = cached
        elif self.pool is not None:
            try:
                self.codes[key] = self.pool.submit(_forked_compile, text, spec)
            except BrokenProcessPool:  # a worker died: this process compiles the rest
                self.pool = None
                self._compiled(key, compile_code(text, spec))
        else:
            self._compiled(key, compile_code(text, spec))

    def run(self, jobs: list[UnitJob], meanwhile) -> tuple[list[Emitted], dict[str, CodeResult], set[str]]:
        """Every job emitted (in order) and every distinct code compiled or found; `meanwhile(emitted)` runs here
        once all are emitted, while the workers compile. Returns the code keys compiled now too."""
        texts: dict[str, tuple[str, MachineSpec]] = {}
        done: dict[int, Emitted] = {}
        groups = share_groups(jobs)
        if self.workers <= 1 or len(jobs) < FORK_MIN_UNITS or multiprocessing.current_process().daemon:  # may not fork
            for group in groups:
                done.update(zip(group, emit_group([jobs[i] for i in group])))
            emitted = [done[i] for i in range(len(jobs))]
            for job, e in zip(jobs, emitted):
                self.want(e.key, e.unit.named(e.key, job.spec), job.spec)
            meanwhile(emitted)
            return emitted, self.codes, {k for k, c in self.codes.items() if c.pid}
        pool = None
        try:
            with _signals_held():  # the workers fork at the first submit
                self.pool = pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("fork"),
                                                       initializer=_worker_init, initargs=(jobs,))
                futures, unsent = {}, []
                for group in sorted(groups, key=lambda group: -jobs[group[0]].weight):
                    try:
                        futures[self.pool.submit(_forked_emit, group)] = group
                    except BrokenProcessPool:  # a worker died already: this process emits the rest
                        unsent.append(group)
            finished = ((futures[future], _result(future)) for future in as_completed(futures))
            for group, result in itertools.chain(finished, ((group, None) for group in unsent)):
                done.update(zip(group, result or emit_group([jobs[i] for i in group])))
                for i in group:
                    texts.setdefault(done[i].key, (done[i].unit.named(done[i].key, jobs[i].spec), jobs[i].spec))
                    self.want(done[i].key, *texts[done[i].key])
            emitted = [done[i] for i in range(len(jobs))]
            meanwhile(emitted)
            pending = {value: key for key, value in self.codes.items() if isinstance(value, Future)}
            for future in as_completed(pending):
                key = pending[future]
                self._compiled(key, _result(future) or compile_code(*texts[key]))
        finally:  # an error or a signal here: the units not started are dropped
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)
        self.pool = None
        return emitted, self.codes, {k for k, c in self.codes.items() if c.pid}


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


def _result(future):
    """A worker's result; None when the worker died (this process redoes it)."""
    try:
        return future.result()
    except BrokenProcessPool:
        return None


def constant_key(digest: str) -> str:
    """A constant's cache key: its sha256 in a key space of its own (no record or object key can equal it)."""
    return hashlib.sha256(b"unit constant\0" + digest.encode()).hexdigest()


def cached_unit(cache: UnitCache | None, key: str) -> UnitResult | None:
    """The unit under its view key `key` with every constant it names, or None (a miss)."""
    record = UnitRecord.from_bytes(cache.get(key) or b"") if cache is not None else None
    if record is None:
        return None
    constants = {}
    for digest in record.constants:
        data = cache.get(constant_key(digest))
        if data is None or hashlib.sha256(data).hexdigest() != digest:
            return None
        constants[digest] = data
    return UnitResult(record, constants)


def cached_code(cache: UnitCache | None, key: str) -> CodeResult | None:
    data = cache.get(key) if cache is not None else None
    return CodeResult(data[len(OBJECT_MAGIC):]) if data is not None and data.startswith(OBJECT_MAGIC) else None


def store_unit(cache: UnitCache | None, key: str, result: UnitResult, stored: set[str]) -> None:
    """The unit's record and its constants not in `stored` (the digests this build stored already; updated)."""
    if cache is None:
        return
    for digest, data in result.constants.items():
        if digest not in stored:
            stored.add(digest)
            cache.put(constant_key(digest), data)
    cache.put(key, result.record.to_bytes())


class CacheWriter:
    """The kernel cache's writes on a thread of their own, while the workers compile: the units' records and
    constants once every unit is emitted, each object as soon as it is compiled. Leaving the `with` block waits for
    them (an error in one is raised there). A record stored before its object is a miss until the object is in."""

    def __init__(self, cache: UnitCache | None):
        self.cache, self.stored, self.writes = cache, set(), []
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="fxc-cache") if cache is not None else None

    def _submit(self, fn, *args) -> None:
        if self.pool is not None:
            self.writes.append(self.pool.submit(fn, *args))

    def code(self, key: str, code: CodeResult) -> None:
        self._submit(self.cache.put if self.cache else None, key, OBJECT_MAGIC + code.code)

    def units(self, units: list[tuple[str, UnitResult]]) -> None:
        self._submit(self._store_units, units)

    def _store_units(self, units: list[tuple[str, UnitResult]]) -> None:
        for key, result in units:
            store_unit(self.cache, key, result, self.stored)

    def __enter__(self) -> CacheWriter:
        return self

    def __exit__(self, *exc) -> None:
        if self.pool is None:
            return
        self.pool.shutdown(wait=True, cancel_futures=exc[0] is not None)
        if exc[0] is None:
            for write in self.writes:
                write.result()


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
    jobs: dict[str, UnitJob] = {}
    for v, spec in enumerate(specs):
        for step, _ in steps:
            jobs.setdefault(keys[v][step], UnitJob(views[step], spec, keys[v][step]))
    writer = CacheWriter(cache)
    compiler = Compiler(cache, options.workers or 1, writer.code)
    results = {key: cached_unit(cache, key) for key in jobs}
    for key, result in results.items():
        code = cached_code(cache, result.record.code) if result is not None else None
        if code is None:
            results[key] = None
        else:
            compiler.codes[result.record.code] = code
    missed = [job for key, job in jobs.items() if results[key] is None]
    on_keys()
    compiler.workers = options.workers or build_workers(len(missed))
    texts: list[str] = []
    entry_codes: list[tuple[bytes, float, float]] = []

    def entries_here(emitted: list[Emitted]) -> None:
        for job, e in zip(missed, emitted):
            record = UnitRecord(e.key, tuple(e.unit.constants), e.unit.arguments, e.unit.split)
            results[job.key] = UnitResult(record, e.unit.constants, e.seconds)
        writer.units([(job.key, results[job.key]) for job in missed])
        for v, entry in enumerate(entries):
            units = {step: results[keys[v][step]] for step, _ in steps}
            symbols = {step: unit_symbol(u.record.code, specs[v]) for step, u in units.items()}
            with collector_paused():
                texts.append(emit_entry(entry, symbols, {step: [(d, u.constants[d]) for d in u.record.arguments]
                                                         for step, u in units.items()}))
            entry_codes.append(compile_module_timed(texts[-1], specs[v]))
    with writer:
        _, codes, fresh = compiler.run(missed, entries_here)
    counts = (len(jobs) - len(missed), len(missed), len(fresh))
    return _assemble(specs, steps, keys, results, codes, entries, texts, entry_codes, counts)


def _assemble(specs, steps, keys, results, codes, entries, texts, entry_codes, counts) -> UnitsBuild:
    """The objects, blob and labels in step order (the same bytes whatever was cached or where it compiled)."""
    objects, blob, labels, seen = [], bytearray(), {}, set()
    alignment = specs[0].alignment

    def add(symbol: str, data: bytes) -> None:
        if symbol not in labels:
            blob.extend(b"\0" * (-len(blob) % alignment))
            labels[symbol] = len(blob)
            blob.extend(data)
    seconds, emitted = [], set()
    for v, spec in enumerate(specs):
        objects.append(entry_codes[v][0])
        emit = optimize = codegen = 0.0
        for step, _ in steps:
            result = results[keys[v][step]]
            if keys[v][step] not in emitted:
                emitted.add(keys[v][step])
                emit += result.emit
            for digest in result.record.constants:
                add("fxc_c_" + digest[:32], result.constants[digest])
            if result.record.code in seen:
                continue
            seen.add(result.record.code)
            code = codes[result.record.code]
            objects.append(code.code)
            optimize, codegen = optimize + code.optimize, codegen + code.codegen
        for symbol, data in entries[v].content.items():
            add(symbol, data)
        seconds.append(VariantSeconds(spec.cpu, emit, optimize + entry_codes[v][1], codegen + entry_codes[v][2]))
    splits = {node.name: results[keys[0][step]].record.split for step, node in steps
              if results[keys[0][step]].record.split is not None}
    pids = {c.pid for c in codes.values() if c.pid} - {os.getpid()}
    return UnitsBuild(objects, bytes(blob), sorted(labels.items(), key=lambda kv: kv[1]), entries, texts, splits,
                      *counts, 1 + len(pids), seconds)


def unit_texts(graph: Graph, plan, specs: list[MachineSpec], options: UnitOptions) -> tuple[list[str], bytes]:
    """Per variant, its units' IR text in step order and then its entry module's; and the constants' bytes in the
    blob's order (what benchmarks/codegen_digest.py digests: no LLVM, no cache)."""
    entries = _entry_emitters(graph, plan, specs, options)
    steps = [(step, graph.nodes[i]) for step, i in enumerate(plan.order) if entries[0].emits_function(graph.nodes[i])]
    views = {step: local_view(entries[0], node) for step, node in steps}
    texts, constants = [], {}
    for spec, entry in zip(specs, entries):
        emitted = {step: emit_job(UnitJob(views[step], spec, "")) for step, _ in steps}
        for e in emitted.values():
            constants.update(e.unit.constants)
        text = emit_entry(entry, {step: unit_symbol(e.key, spec) for step, e in emitted.items()},
                          {step: [(d, e.unit.constants[d]) for d in e.unit.arguments] for step, e in emitted.items()})
        constants.update({hashlib.sha256(data).hexdigest(): data for data in entry.content.values()})
        texts.append("\n".join([*dict.fromkeys(e.unit.named(e.key, spec) for e in emitted.values()), text]))
    return texts, b"".join(constants.values())
