"""A dynamic graph's inputs and outputs at the C API: dense tensors of their actual dims (issue #26).

Inside the model every tensor is stored with the strides of its capacity shape (symbolic.py). At the boundary:

- an input whose dense layout is a prefix of its capacity layout for every size (no dim of capacity > 1 before a
  varying dim: [1, seq, 128], [batch, 3, 224, 224]) is read from the caller's pointer as it is; any other input is
  copied at entry into a staging buffer with capacity strides: in a gap of the memory plan that no buffer uses
  from the entry to the input's last reader when there is one (the plan and its offsets are unchanged), else
  after the arena's tail;
- kernels write outputs with capacity strides into the caller's buffer (sized for the capacity); at exit a
  non-prefix output is compacted in place to dense (row by row, front to back: a row's dense offset never
  exceeds its capacity offset);
- every varying output gets a dims slot in the arena's tail (the mechanism of data-dependent outputs,
  frontend/shapes.py): the entry writes its actual dims there, so `fxc_output_shape` and the JIT read them.

The symbols' values come from the caller (the glue derives them from the input dims, `symbolic.bind_inputs`),
so every input dim that varies must be a symbol itself, and every symbol must be some input's dim.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from llvmlite import ir

from ..errors import InputError
from ..ir import Graph
from ..kernels.extents import dim_value
from ..symbolic import Expr

I8P = ir.IntType(8).as_pointer()
I64 = ir.IntType(64)


def input_dims(graph: Graph) -> list[tuple[str, tuple]]:
    """Per graph input, (name, dims) with each dim a fixed int or its symbol's name (symbolic.bind_inputs' form);
    InputError for a varying input dim that is not a plain symbol, or a symbol no input dim sets."""
    out, seen = [], set()
    for name in graph.inputs:
        t = graph.tensors[name]
        dims = []
        for k, d in enumerate(t.dyn or t.shape):
            if isinstance(d, Expr):
                if d.op != "sym":
                    raise InputError(f"input {name!r} dim {k} is {d}, an expression: declare that dim as a symbol of its "
                                     "own (--dim NAME=MIN..MAX) so a run's input dims give its value")
                d = d.args[0]
                seen.add(d)
            dims.append(d if isinstance(d, str) else int(d))
        out.append((name, tuple(dims)))
    unset = [s for s in graph.symbols if s not in seen]
    if unset:
        raise InputError(f"symbol {unset[0]} varies but is no input's dim, so no run can give its value: give it one "
                         f"value (--dim {unset[0]}=N)")
    return out


def varies(graph: Graph, name: str) -> bool:
    return graph.tensors[name].dyn is not None


def is_prefix(graph: Graph, name: str) -> bool:
    """Is the dense layout of every actual size the start of the capacity layout (the same strides where it counts)?"""
    t = graph.tensors[name]
    if t.dyn is None:
        return True
    first_varying = next((k for k, d in enumerate(t.dyn) if isinstance(d, Expr)), len(t.shape))
    return all(c <= 1 for c in t.shape[:first_varying]) and all(not isinstance(d, Expr) for d in t.dyn[first_varying + 1:])


@dataclass
class Boundary:
    staged: dict[str, int] = field(default_factory=dict)
    """Non-prefix varying input -> arena offset of its capacity-strided copy."""
    dims_slots: dict[str, int] = field(default_factory=dict)
    """Varying graph output -> arena offset of its actual dims (int64[rank])."""
    staged_bytes: int = 0
    """Bytes of the staged inputs placed after the tail (those no gap of the plan holds)."""


def _last_reader(graph: Graph, plan, name: str) -> int:
    """The last step (index into plan.order) whose node reads `name`; -1 when none does."""
    return max((step for step, i in enumerate(plan.order) if name in graph.nodes[i].inputs), default=-1)


def _gap(graph: Graph, plan, last: int, nbytes: int, alignment: int, taken: list[tuple[int, int]]) -> int | None:
    """The lowest aligned offset below the plan's arena where `nbytes` overlap no buffer live at steps 0..last (nor
    the `taken` ranges): a staged input lives from the entry to its last reader. None when there is no such gap."""
    busy = sorted([(plan.offsets[r], plan.offsets[r] + -(-graph.tensors[r].nbytes // alignment) * alignment)
                   for r, (first, _) in plan.intervals.items() if first <= last] + taken)
    offset = 0
    for lo, hi in busy:
        if offset + nbytes <= lo:
            break
        offset = max(offset, -(-hi // alignment) * alignment)
    return offset if offset + nbytes <= plan.arena_bytes else None


def extend_tail(graph: Graph, tail, alignment: int, plan=None) -> Boundary:
    """Add the varying outputs' dims slots and the staging buffers to `tail` (frontend/shapes.TailLayout) and grow
    its arena; `tail.output_slots` / `output_dims` then name these outputs as shaped at run time. A staged input
    goes into a gap of the plan (`plan`: its offsets and live intervals) when one holds it up to its last reader,
    else after the tail."""
    input_dims(graph)
    layout = Boundary()
    top = -(-tail.arena_bytes // 8) * 8
    for k, name in enumerate(graph.outputs):
        t = graph.tensors[name]
        if t.dyn is None or tail.output_slots[k] >= 0:
            continue
        if name not in layout.dims_slots:
            layout.dims_slots[name] = top
            top += 8 * max(len(t.shape), 1)
        tail.output_slots[k] = layout.dims_slots[name]
        tail.output_dims[k] = tuple(i for i, d in enumerate(t.dyn) if isinstance(d, Expr))
    taken: list[tuple[int, int]] = []
    for name in graph.inputs:
        if not varies(graph, name) or is_prefix(graph, name):
            continue
        nbytes = graph.tensors[name].nbytes
        last = _last_reader(graph, plan, name) if hasattr(plan, "intervals") else len(graph.nodes)
        if last < 0:
            continue  # no node reads it (a graph output as it is: copied from the caller's buffer)
        offset = _gap(graph, plan, last, nbytes, alignment, taken) if hasattr(plan, "intervals") else None
        if offset is None:
            offset = top = -(-top // alignment) * alignment
            top += nbytes
            layout.staged_bytes += nbytes
        layout.staged[name] = offset
        taken.append((offset, offset + -(-nbytes // alignment) * alignment))
    tail.arena_bytes = top
    return layout


class _Dims:
    """What kernels/extents.dim_value needs of a kernel, over the entry's builder (i64 arithmetic)."""

    idx_t = I64

    def __init__(self, b: ir.IRBuilder, syms: ir.Value, sym_index: dict[str, int]):
        self.b, self.syms, self.sym_index = b, syms, sym_index

    def imin(self, x, y):
        return self.b.select(self.b.icmp_signed("<", x, y), x, y)

    def imax(self, x, y):
        return self.b.select(self.b.icmp_signed(">", x, y), x, y)

    def value(self, d) -> ir.Value:
        v = dim_value(self, d)
        return v if isinstance(v, ir.Value) else I64(int(v))


def _loop(b: ir.IRBuilder, n: ir.Value, body: Callable[[ir.Value], None]) -> None:
    """for (i = 0; i < n; i++) body(i), at the builder's position; the builder ends after the loop."""
    pre = b.block
    head, inner, done = (b.append_basic_block(s) for s in ("rows", "row", "rows.done"))
    b.branch(head)
    b.position_at_end(head)
    i = b.phi(I64)
    i.add_incoming(I64(0), pre)
    b.cbranch(b.icmp_signed("<", i, n), inner, done)
    b.position_at_end(inner)
    body(i)
    i.add_incoming(b.add(i, I64(1)), b.block)
    b.branch(head)
    b.position_at_end(done)


def _rows(b: ir.IRBuilder, dims: _Dims, graph: Graph, name: str, move: Callable[[ir.Value, ir.Value, ir.Value], None]) -> None:
    """Call move(capacity byte offset, dense byte offset, bytes) for each contiguous run of `name`'s actual elements,
    in increasing order: the runs are the dims from the innermost varying one inwards."""
    t = graph.tensors[name]
    item = np.dtype(t.dtype).itemsize
    actual = [dims.value(d) for d in t.dyn]
    inner = max(k for k, d in enumerate(t.dyn) if isinstance(d, Expr))
    cap_strides = [math.prod(t.shape[k + 1:]) * item for k in range(len(t.shape))]
    run = b.mul(actual[inner], I64(cap_strides[inner]))
    dense_strides, stride = {}, run
    for k in range(inner - 1, -1, -1):
        dense_strides[k] = stride
        stride = b.mul(stride, actual[k])

    def nest(k: int, cap_off: ir.Value, dense_off: ir.Value) -> None:
        if k == inner:
            move(cap_off, dense_off, run)
            return
        _loop(b, actual[k], lambda i: nest(k + 1, b.add(cap_off, b.mul(i, I64(cap_strides[k]))),
                                              b.add(dense_off, b.mul(i, dense_strides[k]))))
    nest(0, I64(0), I64(0))


def _at(b: ir.IRBuilder, base: ir.Value, offset: ir.Value) -> ir.Value:
    return b.gep(b.bitcast(base, I8P), [offset])


class BoundaryEmitter:
    """The entry's code at the boundary of a dynamic graph (one per entry function)."""

    def __init__(self, module: ir.Module, b: ir.IRBuilder, graph: Graph, layout: Boundary, syms: ir.Value,
                 sym_index: dict[str, int]):
        self.module, self.b, self.graph, self.layout = module, b, graph, layout
        self.dims = _Dims(b, syms, sym_index)
        flag = ir.IntType(1)
        self.memcpy = module.declare_intrinsic("llvm.memcpy", [I8P, I8P, I64])
        self.memmove = module.declare_intrinsic("llvm.memmove", [I8P, I8P, I64])
        self._false = ir.Constant(flag, 0)

    def nbytes(self, name: str) -> ir.Value:
        t = self.graph.tensors[name]
        if t.dyn is None:
            return I64(t.nbytes)
        out = I64(np.dtype(t.dtype).itemsize)
        for d in t.dyn:
            out = self.b.mul(out, self.dims.value(d))
        return out

    def dense_is_capacity(self, name: str) -> ir.Value:
        """i1: at this run's sizes the dense layout is the capacity layout (every varying dim after the first dim of
        capacity > 1 is at its capacity), so nothing needs staging or compacting."""
        t, out = self.graph.tensors[name], ir.Constant(ir.IntType(1), 1)
        first = next((k for k, c in enumerate(t.shape) if c > 1), len(t.shape))
        for k, d in enumerate(t.dyn):
            if k > first and isinstance(d, Expr):
                out = self.b.and_(out, self.b.icmp_signed("==", self.dims.value(d), I64(t.shape[k])))
        return out

    def stage(self, name: str, src: ir.Value, arena: ir.Value) -> ir.Value:
        """The input with capacity strides: the caller's buffer when its dense layout is that already, else a copy
        into its staging buffer; an i8 pointer."""
        b = self.b
        src = b.bitcast(src, I8P)
        dst = b.gep(arena, [I64(self.layout.staged[name])], inbounds=True)
        same = self.dense_is_capacity(name)
        with b.if_then(b.not_(same)):
            _rows(b, self.dims, self.graph, name,
                  lambda cap, dense, n: b.call(self.memcpy, [_at(b, dst, cap), _at(b, src, dense), n, self._false]))
        return b.select(same, src, dst)

    def compact(self, name: str, buf: ir.Value) -> None:
        """Capacity strides -> dense, in place in the caller's output buffer (nothing to do when they coincide)."""
        b = self.b
        with b.if_then(b.not_(self.dense_is_capacity(name))):
            _rows(b, self.dims, self.graph, name,
                  lambda cap, dense, n: b.call(self.memmove, [_at(b, buf, dense), _at(b, buf, cap), n, self._false]))

    def write_dims(self, name: str, arena: ir.Value) -> None:
        b, t = self.b, self.graph.tensors[name]
        slot = b.bitcast(b.gep(arena, [I64(self.layout.dims_slots[name])], inbounds=True), I64.as_pointer())
        for k, d in enumerate(t.dyn):
            b.store(self.dims.value(d), b.gep(slot, [I64(k)]))

    def copy(self, name: str, dst: ir.Value, src: ir.Value) -> None:
        """A dense tensor's actual bytes from src to dst."""
        self.b.call(self.memcpy, [self.b.bitcast(dst, I8P), self.b.bitcast(src, I8P), self.nbytes(name), self._false])

    def copy_rows(self, name: str, dst: ir.Value, src: ir.Value) -> None:
        """A capacity-strided tensor at src to its dense form at dst, row by row."""
        b = self.b
        _rows(b, self.dims, self.graph, name,
              lambda cap, dense, n: b.call(self.memcpy, [_at(b, dst, dense), _at(b, src, cap), n, self._false]))


def finish_outputs(em: BoundaryEmitter, graph: Graph, outputs_arg: ir.Value, arena: ir.Value, raw_inputs: dict,
                   constant: Callable[[str], ir.Value]) -> None:
    """At exit: compact the non-prefix outputs the nodes wrote, write the varying outputs' dims, then copy the
    outputs that are graph inputs or constants, and repeats of an output, at their actual bytes (the dense form; a
    non-prefix varying constant is stored with capacity strides, so it is copied row by row)."""
    b = em.b
    produced = {o for n in graph.nodes for o in n.outputs}
    slot = [b.load(b.gep(outputs_arg, [ir.Constant(ir.IntType(32), k)])) for k in range(len(graph.outputs))]
    for k, name in enumerate(graph.outputs):
        first = graph.outputs.index(name) == k
        if first and name in produced and not graph.tensors[name].is_const and varies(graph, name) \
                and not is_prefix(graph, name):
            em.compact(name, slot[k])
        if first and name in em.layout.dims_slots:
            em.write_dims(name, arena)
    for k, name in enumerate(graph.outputs):
        tensor, first = graph.tensors[name], graph.outputs.index(name)
        if name in produced and not tensor.is_const and first == k:
            continue
        if tensor.is_const and not is_prefix(graph, name):
            em.copy_rows(name, slot[k], constant(name))
            continue
        if tensor.is_const:
            src = constant(name)
        elif name in raw_inputs:
            src = raw_inputs[name]
        else:
            src = slot[first]
        em.copy(name, slot[k], src)
