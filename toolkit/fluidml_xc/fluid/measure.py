"""Measured kernel costs on the host: one node's kernel alone, JIT-compiled for this machine with llvmlite's
MCJIT (warm-up, median of several runs)."""
from __future__ import annotations

import platform
import time
from typing import Mapping

import numpy as np

from ..ir import Graph, Node
from .layouts import Perm


def jit_engine(llvm_ir: str, spec):
    """An MCJIT engine for this machine holding the optimized module (the caller keeps it alive)."""
    import llvmlite.binding as llvm

    from ..target.machine import new_target_machine, optimized_module

    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    tm = new_target_machine(spec)
    mod = optimized_module(llvm_ir, tm)
    engine = llvm.create_mcjit_compiler(mod, tm)
    engine.finalize_object()
    return engine


def host_can_run(triple: str, cpu: str) -> bool:
    import llvmlite.binding as llvm
    arch = triple.split("-")[0]
    host = platform.machine().lower()
    same_arch = arch == host or (arch == "x86_64" and host in ("amd64", "x86_64")) or (arch == "aarch64" and host == "arm64")
    return same_arch and cpu in (llvm.get_host_cpu_name(), "native", "generic")


class Measurer:
    """Times one node's kernel under given layouts with llvmlite's MCJIT (warm-up, median of runs)."""

    def __init__(self, graph: Graph, spec, warmup: int = 3, runs: int = 7, min_batch_ms: float = 1.0):
        self.graph, self.spec = graph, spec
        self.warmup, self.runs, self.min_batch_ms = warmup, runs, min_batch_ms
        self.measured = 0

    def measure(self, node: Node, layouts: Mapping[str, Perm], loop_order: str | None = None) -> float | None:
        import ctypes

        from ..emit.emitter import EmitOptions, ModuleEmitter

        class _NoPlan:
            alias_of: dict = {}
            offsets: dict = {}

        g = self.graph
        emitter = ModuleEmitter(g, _NoPlan(), self.spec, EmitOptions(layouts=dict(layouts)))
        saved = dict(node.attrs)
        if loop_order:
            node.attrs["_loop_order"] = loop_order
        try:
            fn = emitter.node_function(node, 0)
        finally:
            node.attrs.clear()
            node.attrs.update(saved)
        if fn is None:
            return None
        fn.linkage = "external"
        names = emitter._arg_names(node)  # constants are read from the module's own data, not passed
        buffers = []
        for name in names:
            t = g.tensors[name]
            if t.is_const:
                arr = np.ascontiguousarray(t.value)
            else:
                arr = np.zeros(max(t.size, 1), dtype=t.dtype)
                if arr.dtype.kind == "f":
                    arr[:] = np.random.default_rng(0).uniform(-1, 1, arr.size)
            buffers.append(arr)
        engine = jit_engine(str(emitter.module), self.spec)
        addr = engine.get_function_address(fn.name)
        cfn = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * len(names)))(addr)
        ptrs = [ctypes.c_void_p(b.ctypes.data) for b in buffers]
        start = time.perf_counter()
        cfn(*ptrs)
        once = max(time.perf_counter() - start, 1e-7)
        reps = max(1, int(self.min_batch_ms / 1e3 / once))
        for _ in range(self.warmup):
            cfn(*ptrs)
        times = []
        for _ in range(self.runs):
            start = time.perf_counter()
            for _ in range(reps):
                cfn(*ptrs)
            times.append((time.perf_counter() - start) * 1e3 / reps)
        del engine
        self.measured += 1
        return float(np.median(times))
