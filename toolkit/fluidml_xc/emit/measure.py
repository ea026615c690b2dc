"""Measured kernel costs on the host (--costs measure): one node's kernel alone, emitted as the build emits it
and JIT-compiled for this machine (target/jit.py), timed after a warm-up as the median of several runs.
The optimizer receives the Measurer as its KernelTimer (fluid/costs.py); the pipeline builds it."""
from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping

import numpy as np

from ..ir import Graph, Node
from ..target.jit import jit_engine
from ..target.machine import MachineSpec
from .emitter import EmitOptions, ModuleEmitter


@dataclass(frozen=True)
class _Unplanned:
    """The memory plan of a kernel compiled alone: no aliases, no arena (every tensor a buffer of its own)."""

    alias_of: dict[str, str] = field(default_factory=dict)
    offsets: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class NodeKernel:
    """One node's kernel JIT-compiled alone: `call` takes one pointer per name in `names` (constants are
    read from the module's own data, not passed); `engine` holds the code."""

    names: list[str]
    call: Callable[..., None]
    engine: object


def compile_node(graph: Graph, node: Node, spec: MachineSpec, layouts: Mapping[str, tuple[int, ...]],
                 loop_order: str | None = None) -> NodeKernel | None:
    """`node`'s kernel under `layouts` (and `loop_order`) compiled like the build's object; None when the node
    has no kernel (a view)."""
    options = EmitOptions(layouts=dict(layouts), loop_orders={node.name: loop_order} if loop_order else {})
    emitter = ModuleEmitter(graph, _Unplanned(), spec, options)
    fn = emitter.node_function(node, 0)
    if fn is None:
        return None
    fn.linkage = "external"
    names = emitter.arg_names(node)
    engine = jit_engine(str(emitter.module), spec, like_object=True)
    call = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * len(names)))(engine.get_function_address(fn.name))
    return NodeKernel(names, call, engine)


class Measurer:
    """Times one node's kernel under given layouts with llvmlite's MCJIT (warm-up, median of runs): the
    cost model's KernelTimer."""

    def __init__(self, graph: Graph, spec: MachineSpec, warmup: int = 3, runs: int = 7, min_batch_ms: float = 1.0):
        self.graph, self.spec = graph, spec
        self.warmup, self.runs, self.min_batch_ms = warmup, runs, min_batch_ms
        self.measured = 0

    def measure(self, node: Node, layouts: Mapping[str, tuple[int, ...]], loop_order: str | None = None) -> float | None:
        """Milliseconds per run of `node`'s kernel, None when it has none."""
        kernel = compile_node(self.graph, node, self.spec, layouts, loop_order)
        if kernel is None:
            return None
        buffers = []
        for name in kernel.names:
            t = self.graph.tensors[name]
            if t.is_const:
                arr = page_aligned(np.ascontiguousarray(t.value))
            else:
                arr = page_aligned(np.zeros(max(t.size, 1), dtype=t.dtype))
                if arr.dtype.kind == "f":
                    arr[:] = np.random.default_rng(0).uniform(-1, 1, arr.size)
            buffers.append(arr)
        cfn = kernel.call
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
        del kernel
        self.measured += 1
        return float(np.median(times))


def page_aligned(value: np.ndarray) -> np.ndarray:
    """A copy of `value` starting on a 4 KiB page, as the arena's buffers do: numpy puts large arrays 16 bytes past
    a page, where half of the 32-byte vector accesses straddle two cache lines and time a kernel wrongly. The copy's
    base array keeps its memory alive."""
    raw = np.zeros(value.nbytes + 4096, np.uint8)
    start = -raw.ctypes.data % 4096
    out = raw[start:start + value.nbytes].view(value.dtype).reshape(value.shape)
    out[...] = value
    return out
