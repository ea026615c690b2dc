"""The kernel builder: loop nests over an iteration domain with strided operand accesses.

In the spirit of MLIR's linalg.generic: an op states its iteration domain, one `Access` per operand
(element strides per domain dimension, so broadcasting is stride 0, a transpose is permuted strides
and any tensor layout is just other strides), and a scalar body. `generic` emits the loop nest in the
chosen order; innermost unit-stride loops are left for LLVM to vectorize.
"""
from __future__ import annotations

from contextlib import ExitStack, contextmanager, nullcontext
from typing import Callable, Sequence

import numpy as np
from llvmlite import ir

from ..dtypes import compute_dtype
from ..errors import NeedsConstant
from ..ir import Graph, Node
from ..target.machine import MachineSpec
from ..opspec import traits
from . import lowp
from .extents import broadcast_check, dim_value
from .flat import flat_elementwise
from .operand import Access, Operand  # noqa: F401  (Operand and Access are part of the kernel builder's interface)
from .scalar import FAST, Scalar, const, llvm_type, splat_constants, storage_type
from .split import PARALLEL_MIN_WORK, TARGET_TILES, UNSHARED_MAC_WORK, chunk_count  # noqa: F401  (re-exported)


def element_work(op_types) -> float:
    """Work per element of a chain of elementwise ops, each its OpSpec.work (the parallel split's estimate, not a
    timing)."""
    return float(sum(traits(op).work for op in op_types))


def is_unit(extent) -> bool:
    """A build-time extent of 1 (a run-time extent, an ir.Value, never counts as 1)."""
    return not isinstance(extent, ir.Value) and extent == 1


def row_major_strides(shape: Sequence[int]) -> tuple[int, ...]:
    strides, acc = [], 1
    for dim in reversed(shape):
        strides.append(acc)
        acc *= dim
    return tuple(reversed(strides))


def row_major(op) -> bool:
    """Whether the operand's strides are the row-major strides of its shape."""
    return tuple(op.strides) == row_major_strides(op.shape)


def layout_strides(shape: Sequence[int], layout: Sequence[int] | None) -> tuple[int, ...]:
    """Element strides of a tensor stored with its dimensions in `layout` order (outermost first)."""
    if layout is None:
        return row_major_strides(shape)
    strides = [0] * len(shape)
    acc = 1
    for dim in reversed(layout):
        strides[dim] = acc
        acc *= shape[dim]
    return tuple(strides)


class Kernel:
    """Builds the body of one node's function."""

    def __init__(self, module: ir.Module, fn: ir.Function, graph: Graph, node: Node,
                 inputs: list[Operand | None], outputs: list[Operand | None], index_bits: int, vector_bits: int):
        self.module, self.fn, self.graph, self.node = module, fn, graph, node
        self.inputs, self.outputs = inputs, outputs
        self.idx_t = ir.IntType(index_bits)
        self.vector_bits = vector_bits
        self.spec: MachineSpec | None = None
        """The machine the module is emitted for (the module emitter sets it): features and triple for the
        per-architecture choices (target/arch.py arch_of); None in a kernel built outside an emitter."""
        self.accumulators = self.conv_accumulators = 12
        """Vector registers a GEMM / Conv register tile may keep accumulators in (MachineSpec)."""
        self.pack_vector_bits = vector_bits
        """The vector width build-time weight packs are laid out for (MachineSpec.pack_vector_bits)."""
        self.b = ir.IRBuilder(fn.append_basic_block("entry"))
        self.constant_data: Callable[[np.ndarray], ir.Value] = self._inline_constant
        self.argument_data: Callable[[np.ndarray], ir.Value] = self._inline_constant
        """A build-time array that a per-node unit takes as an argument whatever its size, with no size declared,
        so that the unit's code does not depend on it (emit/units.py); inline outside a unit."""
        self.s = Scalar(self.b, module)
        self.dims_out: dict[int, ir.Value] = {}
        """Output index -> int64* slot for the actual dims of a data-dependent output (dynamic.py)."""
        self.scratch: ir.Value | None = None
        """i8* scratch memory of a data-dependent op (ops/dynamic.py scratch_bytes), else None."""
        self.status: ir.Value | None = None
        """i8* to the run's int64 status word when this kernel may fail the run (OpSpec.run_check), else None."""
        self.check_code = 0
        """What a failed run's kernel stores there: its node's place among the nodes that may fail the run, + 1."""
        self.status_base: int | None = None
        """A run-time Loop whose body may fail the run: the run's status is this + the body's (frontend/shapes.py)."""
        self.tile_range: tuple[ir.Value, ir.Value] | None = None
        """(begin, end) arguments when this function may run as tiles on several threads (emit/emitter.py)."""
        self.tiles = 0
        """Tiles of the parallel region (parallel_tiles), 0 when the op runs whole on one thread."""
        self.tile_split: tuple[int, ...] = ()
        self.region_blocks: set = set()
        self.region_begin: ir.Value | None = None
        """The first tile of this call's range inside a region handed to fxc_parallel_for, else None (plain loops)."""
        self._in_region = False
        self.loop_depth = 0
        """Run-time loops (for_range) open around the current position: a region opens only at depth 0,
        since a loop around it could carry results of one iteration's tiles into the next."""
        self.outer_chunk: tuple[ir.Value, int] | None = None
        """(chunk, chunks) set by a kernel that opened the region itself: loops_tiled runs that chunk."""
        self.point_work = 0.0
        """Operations per domain point of k.generic beyond its loads and stores (a fused chain's element_work)."""
        self.loop_order: str | None = None
        """The optimizer's loop order for a MatMul/Gemm/Conv (EmitOptions.loop_orders), else the kernel's default."""
        self.syms: ir.Value | None = None
        """i64* to the run-time values of the graph's symbols (Graph.symbols order) when the node reads or writes a
        tensor whose dims vary (ir.Tensor.dyn), else None."""
        self.sym_index: dict[str, int] = {}
        self.compile_subgraph: Callable[[Graph], Callable] | None = None
        """Set by the module emitter: a run-time Loop's body graph -> a callable (with `arena_bytes`) that emits one
        run of the body's node functions, `call(builder, input pointers, output pointers, arena)` (ops/control.py)."""

    # -- attributes and constants -------------------------------------------------------------
    def attr(self, name: str, default=None):
        return self.node.attrs.get(name, default)

    def input_value(self, i: int) -> np.ndarray | None:
        op = self.inputs[i] if i < len(self.inputs) else None
        return None if op is None else op.value

    def constant_input(self, i: int, what: str) -> np.ndarray | None:
        """Input i's build-time value (None when the input is absent); NeedsConstant naming this node when it is
        computed at run time, so the ONNX backend can bind the graph inputs behind it."""
        if i >= len(self.inputs) or self.inputs[i] is None:
            return None
        value = self.input_value(i)
        if value is None:
            raise NeedsConstant(f"node {self.node.name!r} ({self.node.op_type}): {what} (input {i}) must be a "
                                "build-time constant: make it a constant in the model, or freeze the graph input it "
                                "comes from with --bind NAME=VALUE", self.node.name)
        return value

    def _inline_constant(self, value: np.ndarray) -> ir.Value:
        value = np.ascontiguousarray(value)
        data = bytearray(value.astype(np.uint8).tobytes() if value.dtype == np.bool_ else value.tobytes()) or bytearray(1)
        ty = ir.ArrayType(ir.IntType(8), len(data))
        var = ir.GlobalVariable(self.module, ty, self.module.get_unique_name("packed"))
        var.global_constant = True
        var.linkage = "internal"
        var.align = 64
        var.initializer = ir.Constant(ty, data)
        return var

    def constant_array(self, value: np.ndarray) -> ir.Value:
        """A build-time array (e.g. a repacked weight) as a typed pointer into read-only data."""
        return self.b.bitcast(self.constant_data(value), storage_type(value.dtype).as_pointer())

    def argument_array(self, value: np.ndarray) -> ir.Value:
        """constant_array through argument_data: code that reads it stays the same for other values and sizes."""
        return self.b.bitcast(self.argument_data(value), storage_type(value.dtype).as_pointer())

    def index(self, value: int) -> ir.Constant:
        return ir.Constant(self.idx_t, int(value))

    # -- run-time extents (symbolic dims) --------------------------------------------------------
    @property
    def dynamic(self) -> bool:
        """Does any operand have a dim that varies at run time?"""
        return any(op is not None and op.dyn is not None for op in [*self.inputs, *self.outputs])

    def extent(self, operand: Operand, dim: int) -> int | ir.Value:
        """Dim `dim` of `operand`: an int when static, else its run-time value (index type) from `syms`."""
        if not operand.varies(dim):
            return int(operand.shape[dim])
        return self.dim_value(operand.dyn[dim])

    def dim_value(self, d) -> int | ir.Value:
        """A symbolic.Dim as an index-typed value (an int stays an int)."""
        return dim_value(self, d)

    def extents(self, operand: Operand) -> list[int | ir.Value]:
        return [self.extent(operand, d) for d in range(operand.rank)]

    def as_index(self, value: int | ir.Value) -> ir.Value:
        """An int as an index constant; a run-time value as it is."""
        return value if isinstance(value, ir.Value) else self.index(value)

    def product(self, extents: Sequence[int | ir.Value]) -> int | ir.Value:
        """The product of extents: an int when all are build-time, else a run-time value (ints folded)."""
        static = int(np.prod([e for e in extents if not isinstance(e, ir.Value)], dtype=np.int64))
        total: int | ir.Value = static
        for e in extents:
            if isinstance(e, ir.Value):
                total = e if isinstance(total, int) and total == 1 else self.b.mul(self.as_index(total), e, flags=("nsw",))
        return total

    # -- loops ---------------------------------------------------------------------------------
    @contextmanager
    def for_range(self, stop: int | ir.Value, start: int | ir.Value = 0, step: int = 1):
        b = self.b
        start_v = self.index(start) if isinstance(start, int) else start
        stop_v = self.index(stop) if isinstance(stop, int) else stop
        pre = b.block
        header = self.fn.append_basic_block("loop")
        body = self.fn.append_basic_block("body")
        done = self.fn.append_basic_block("done")
        b.branch(header)
        b.position_at_end(header)
        i = b.phi(self.idx_t)
        i.add_incoming(start_v, pre)
        b.cbranch(b.icmp_signed("<", i, stop_v), body, done)
        b.position_at_end(body)
        self.loop_depth += 1
        try:
            yield i
        finally:
            self.loop_depth -= 1
        nxt = b.add(i, self.index(step), flags=("nsw",))
        i.add_incoming(nxt, b.block)
        b.branch(header)
        b.position_at_end(done)

    @contextmanager
    def parallel_tiles(self, extents: Sequence[int], work: float):
        """Index values over `extents` (outermost first), one per tile of a region whose tiles write
        disjoint outputs and never share a reduction. In a tile-capable function (emit/emitter.py) with
        enough `work` the flattened index runs over [begin, end) and the emitter hands the tiles to
        fxc_parallel_for; otherwise plain nested loops. Code outside the region runs once per call of
        the function (per tile range): it may compute and fill stack buffers, but a store to memory
        outside the stack there makes the emitter run the whole op on one thread (emit.parallel_safe).
        A run-time extent (ir.Value) runs as plain loops: a split over a varying dim takes a build-time
        tile count here and each tile's range from `chunk` of the run-time extent."""
        runtime = any(isinstance(e, ir.Value) for e in extents)
        extents = [e if isinstance(e, ir.Value) else int(e) for e in extents]
        total = 0 if runtime else int(np.prod(extents, dtype=np.int64)) if extents else 1
        if (self.tile_range is None or self.tiles or self._in_region or self.loop_depth or total < 2
                or work < PARALLEL_MIN_WORK):
            with ExitStack() as stack:
                idx = [stack.enter_context(self.for_range(e)) if isinstance(e, ir.Value) or e > 1 else self.index(0)
                       for e in extents]
                self._in_region, outer = True, self._in_region
                try:
                    yield idx
                finally:
                    self._in_region = outer
            return
        begin, end = self.tile_range
        first = len(self.fn.blocks)
        self._in_region, self.region_begin = True, begin
        with self.for_range(end, begin) as t:
            idx, rest = [], t
            for j, e in enumerate(extents):
                inner = int(np.prod(extents[j + 1:], dtype=np.int64)) if j + 1 < len(extents) else 1
                if e == 1:
                    idx.append(self.index(0))
                    continue
                q = rest if inner == 1 else self.b.udiv(rest, self.index(inner))
                idx.append(q)
                if inner > 1:
                    rest = self.b.urem(rest, self.index(inner))
            yield idx
        self._in_region, self.region_begin = False, None
        done = self.b.block
        self.region_blocks = {blk for blk in self.fn.blocks[first:] if blk is not done}
        self.tiles = total
        self.tile_split = tuple(extents)

    def chunk(self, c: ir.Value, chunks: int | ir.Value, extent: int | ir.Value) -> tuple[ir.Value, ir.Value]:
        """[lo, hi) of chunk c of `chunks` near-equal chunks of range(extent) (run-time counts too)."""
        if not isinstance(chunks, ir.Value) and chunks == 1:
            return self.index(0), self.as_index(extent)

        def at(v):
            return self.b.udiv(self.b.mul(v, self.as_index(extent), flags=("nuw",)), self.as_index(chunks))
        return at(c), at(self.b.add(c, self.index(1), flags=("nuw",)))

    def spread(self, t: ir.Value, chunks: ir.Value, tiles: int) -> tuple[ir.Value, ir.Value]:
        """(does tile t of `tiles` run a chunk, which one): `chunks` (a run-time count, at most `tiles`) working tiles
        spread evenly over the tiles, so that each thread's home shard of the pool (runtime_c/pool.c) holds its
        share of them, the other tiles idle."""
        at = self.b.mul(t, chunks)
        return self.b.icmp_unsigned("<", self.b.urem(at, self.index(tiles)), chunks), self.b.udiv(at, self.index(tiles))

    def imin(self, x: ir.Value, y: ir.Value) -> ir.Value:
        return self.b.select(self.b.icmp_signed("<", x, y), x, y)

    def imax(self, x: ir.Value, y: ir.Value) -> ir.Value:
        return self.b.select(self.b.icmp_signed(">", x, y), x, y)

    def loops(self, extents: Sequence[int | ir.Value], dims: Sequence[int], idx: list, body: Callable[[list], None]) -> None:
        """Nest loops over `dims` (outermost first) of a domain, filling idx[d]; call body at the innermost.
        An extent may be a run-time value (Kernel.extent)."""
        if not dims:
            body(idx)
            return
        d, rest = dims[0], dims[1:]
        if is_unit(extents[d]):
            idx[d] = self.index(0)
            self.loops(extents, rest, idx, body)
            return
        with self.for_range(extents[d]) as i:
            idx[d] = i
            self.loops(extents, rest, idx, body)

    @staticmethod
    def split_plan(extents: Sequence[int], dims: Sequence[int], work: float) -> tuple[list[int], int, int] | None:
        """How loops_tiled splits: (leading dims, their iterations together, chunks), None for no split."""
        live = [d for d in dims if extents[d] > 1]
        if work < PARALLEL_MIN_WORK or not live:
            return None
        lead, units = [], 1
        for d in (live[:-1] if len(live) > 1 else live):
            lead.append(d)
            units *= extents[d]
            if units >= TARGET_TILES:
                break
        chunks = chunk_count(units, work)
        return (lead, units, chunks) if chunks >= 2 else None

    def loops_tiled(self, extents: Sequence[int | ir.Value], dims: Sequence[int], idx: list, body: Callable[[list], None],
                    work: float, capacity: Sequence[int] | None = None) -> None:
        """loops(), with the leading loops (up to TARGET_TILES iterations together) split into parallel
        tiles when the work is worth it and this function has no parallel region yet; every point still
        runs exactly its own body, so results do not depend on the split. With run-time extents the split
        is planned at `capacity` (the build-time maxima; None: no split) and each tile takes its fraction
        of the run-time iterations."""
        sizes = extents if capacity is None else capacity
        plan = None if any(isinstance(e, ir.Value) for e in sizes) else self.split_plan(sizes, dims, work)
        inside = self.outer_chunk is not None and plan is not None and plan[2] == self.outer_chunk[1] and self._in_region
        if not inside and (self.tile_range is None or self.tiles or self._in_region or self.loop_depth or plan is None):
            self.loops(extents, dims, idx, body)
            return
        lead, units, chunks = plan
        for d in dims:
            if is_unit(extents[d]):
                idx[d] = self.index(0)
        rest = [d for d in dims if d not in lead and (isinstance(extents[d], ir.Value) or extents[d] > 1)]
        with (nullcontext([self.outer_chunk[0]]) if inside else self.parallel_tiles([chunks], work)) as (c,):
            lo, hi = self.chunk(c, chunks, units if capacity is None else self.product([extents[d] for d in lead]))
            with self.for_range(hi, lo) as u:
                for j, d in enumerate(lead):
                    inner = self.product([extents[e] for e in lead[j + 1:]])
                    q = u if is_unit(inner) else self.b.udiv(u, self.as_index(inner))
                    idx[d] = q if j == 0 else self.b.urem(q, self.as_index(extents[d]))
                self.loops(extents, rest, idx, body)

    def generic_work(self, domain: Sequence[int], n_inputs: int) -> float:
        """k.generic's work estimate for the parallel split: per point a load per input, the store, point_work
        (0 for a domain with run-time extents: give its capacity)."""
        if any(isinstance(e, ir.Value) for e in domain):
            return 0.0
        return float(np.prod(domain, dtype=np.float64)) * (1 + n_inputs + self.point_work)

    def local(self, ty: ir.Type, init: ir.Value | None = None) -> ir.Value:
        """A stack slot in the entry block (promoted to registers by LLVM)."""
        with self.b.goto_entry_block():
            slot = self.b.alloca(ty)
        if init is not None:
            self.b.store(init, slot)
        return slot

    # -- memory --------------------------------------------------------------------------------
    def linear(self, access: Access, idx: Sequence) -> ir.Value:
        total = self.index(access.offset)
        for stride, i in zip(access.strides, idx):
            if stride:
                term = i if stride == 1 else self.b.mul(i, self.index(stride), flags=("nsw",))
                total = self.b.add(total, term, flags=("nsw",))
        return total

    def address(self, access: Access, idx: Sequence) -> ir.Value:
        return self.b.gep(access.ptr, [self.linear(access, idx)], inbounds=True)

    # Loads and stores convert storage-only dtypes (kernels/lowp.py) to and from their compute dtype.
    def load(self, access: Access, idx: Sequence) -> ir.Value:
        return self.s.load_value(access.dtype, self.b.load(self.address(access, idx)))

    def store(self, access: Access, idx: Sequence, value: ir.Value) -> None:
        self.b.store(self.s.store_value(access.dtype, value), self.address(access, idx))

    def load_at(self, operand: Operand, linear: ir.Value) -> ir.Value:
        return self.s.load_value(operand.dtype, self.b.load(self.b.gep(operand.ptr, [linear], inbounds=True)))

    def load_ptr(self, ptr: ir.Value, dtype, index: ir.Value | int = 0) -> ir.Value:
        """ptr[index] of a tensor of `dtype`, as a compute value."""
        at = self.index(index) if isinstance(index, int) else index
        return self.s.load_value(dtype, self.b.load(self.b.gep(ptr, [at], inbounds=True)))

    def store_ptr(self, value: ir.Value, ptr: ir.Value, dtype, index: ir.Value | int = 0) -> None:
        at = self.index(index) if isinstance(index, int) else index
        self.b.store(self.s.store_value(dtype, value), self.b.gep(ptr, [at], inbounds=True))

    # -- generic -------------------------------------------------------------------------------
    def generic(self, domain: Sequence[int], outs: Sequence[Access], ins: Sequence[Access],
                body: Callable[[list, list], list], reduce_dims: Sequence[int] = (),
                init: Sequence | None = None, combine: Callable[[list, list], list] | None = None,
                finalize: Callable[[list, list], list] | None = None, order: Sequence[int] | None = None,
                capacity: Sequence[int] | None = None) -> None:
        """Loop over `domain`; body(loaded inputs, idx) -> one value per output.

        With reduce_dims: outputs have stride 0 on those dims; each output starts at init[k] and
        folds body values with combine(accs, values) (default: add); finalize(accs, idx) may
        post-process before the store. Reduction loops run innermost, parallel dims in `order`.
        A domain extent may be a run-time value (Kernel.extent); `capacity` (the domain at its build-time
        maxima) then plans the parallel split, whose tiles take fractions of the run-time iterations.
        """
        n = len(domain)
        reduce_set = set(reduce_dims)
        if order is None and outs and not reduce_set:  # the output's storage order (row-major: 0..n-1)
            order = sorted(range(n), key=lambda d: -abs(outs[0].strides[d]))
        order = list(order) if order is not None else list(range(n))
        idx: list = [None] * n
        if not reduce_set:
            def point(ix):
                values = body([self.load(a, ix) for a in ins], ix)
                for a, v in zip(outs, values):
                    self.store(a, ix, v)
            self.loops_tiled(domain, order, idx, point, self.generic_work(capacity or domain, len(ins)), capacity)
            return
        outer = [d for d in order if d not in reduce_set]
        inner = [d for d in order if d in reduce_set]
        if combine is None:
            combine = lambda accs, vals: [self.s.add(a.dtype, x, y) for a, x, y in zip(outs, accs, vals)]

        def reduce_point(ix):
            slots = [self.local(llvm_type(a.dtype), v if isinstance(v, ir.Value) else const(a.dtype, v)) for a, v in zip(outs, init)]

            def step(ix2):
                values = body([self.load(a, ix2) for a in ins], ix2)
                accs = [self.b.load(s) for s in slots]
                for s, v in zip(slots, combine(accs, values)):
                    self.b.store(v, s)
            self.loops(domain, inner, ix, step)
            results = [self.b.load(s) for s in slots]
            for d in inner:
                ix[d] = self.index(0)
            if finalize is not None:
                results = finalize(results, ix)
            for a, v in zip(outs, results):
                self.store(a, ix, v)
        self.loops_tiled(domain, outer, idx, reduce_point, self.generic_work(capacity or domain, len(ins)), capacity)

    def elementwise(self, fn: Callable[[list], ir.Value], out: Operand | None = None, ins: Sequence[Operand] | None = None) -> None:
        """out = fn(inputs) with numpy broadcasting, iterating the output's shape (its run-time extents where
        they vary); operands of one shape and storage order as one flat loop (kernels/flat.py)."""
        out = out or self.outputs[0]
        ins = [op for op in (ins if ins is not None else self.inputs) if op is not None]
        if flat_elementwise(self, out, ins, lambda values: [fn(values)]):
            return
        domain, capacity = self.domain(out, ins)
        self.generic(domain, [out.identity_access()], [op.broadcast_access(out.shape) for op in ins],
                     lambda values, idx: [fn(values)], capacity=capacity)

    def domain(self, out: Operand, ins: Sequence[Operand] = ()) -> tuple[Sequence[int | ir.Value], tuple[int, ...] | None]:
        """(extents, capacity) of an elementwise domain over `out`: its shape and None when nothing varies, else its
        run-time extents and its capacity; InputError for an input dim that varies unlike the output's."""
        if out.dyn is None and all(op.dyn is None for op in ins):
            return out.shape, None
        broadcast_check(self.node, out, ins, self.graph.symbols)
        return self.extents(out), tuple(out.shape)

    def copy(self, src: Operand, dst: Operand) -> None:
        """dst = src element by element (same logical shape; layouts may differ)."""
        domain, capacity = self.domain(dst, [src])
        self.generic(domain, [dst.identity_access()], [src.identity_access()], lambda v, i: [v[0]], capacity=capacity)

    # -- explicit vectors (hand-tuned kernels) ------------------------------------------------------
    def lanes(self, dtype) -> int:
        """Elements of `dtype` in one target vector register (k.vector_bits wide)."""
        return max(1, self.vector_bits // (8 * compute_dtype(dtype).itemsize))

    @staticmethod
    def vector_type(dtype, lanes: int) -> ir.Type:
        """<lanes x T>, or the scalar type for one lane."""
        return llvm_type(dtype) if lanes == 1 else ir.VectorType(llvm_type(dtype), lanes)

    def vzero(self, dtype, lanes: int) -> ir.Constant:
        if lanes == 1:
            return const(dtype, 0)
        return ir.Constant(self.vector_type(dtype, lanes), [const(dtype, 0).constant] * lanes)

    def splat(self, value: ir.Value, lanes: int) -> ir.Value:
        """A scalar broadcast to every lane (the scalar itself for one lane)."""
        if lanes == 1:
            return value
        undef, first, mask = splat_constants(value.type, lanes)
        return self.b.shuffle_vector(self.b.insert_element(undef, value, first), undef, mask)

    def vload(self, ptr: ir.Value, dtype, index: ir.Value, lanes: int) -> ir.Value:
        """`lanes` consecutive elements from ptr[index] (element-aligned, unaligned vector access)."""
        if lowp.is_lowp(dtype):
            return self._lanes_lowp(ptr, dtype, index, 1, lanes)
        addr = self.b.gep(ptr, [index], inbounds=True)
        if lanes == 1:
            return self.b.load(addr)
        vt = self.vector_type(dtype, lanes)
        return self.b.load(self.b.bitcast(addr, vt.as_pointer()), align=np.dtype(dtype).itemsize)

    def vstore(self, value: ir.Value, ptr: ir.Value, dtype, index: ir.Value) -> None:
        """Store a vector (or scalar) to consecutive elements from ptr[index]."""
        if lowp.is_lowp(dtype):
            self.vscatter(value, ptr, dtype, index, 1)
            return
        addr = self.b.gep(ptr, [index], inbounds=True)
        if not isinstance(value.type, ir.VectorType):
            self.b.store(value, addr)
            return
        self.b.store(value, self.b.bitcast(addr, value.type.as_pointer()), align=np.dtype(dtype).itemsize)

    def lane_at(self, index: ir.Value, lane: int, stride: int | ir.Value) -> ir.Value:
        """index + lane * stride (a run-time stride too)."""
        step = lane and (self.b.mul(self.index(lane), stride) if isinstance(stride, ir.Value) else self.index(lane * stride))
        return self.b.add(index, step, flags=("nsw",)) if lane else index

    def vgather(self, ptr: ir.Value, dtype, index: ir.Value, stride: int | ir.Value, lanes: int) -> ir.Value:
        """`lanes` elements ptr[index + l * stride]: a vector load for stride 1, a splat for stride 0."""
        if lowp.is_lowp(dtype):
            return self._lanes_lowp(ptr, dtype, index, stride, lanes)
        if lanes == 1 or isinstance(stride, int) and stride == 1:
            return self.vload(ptr, dtype, index, lanes)
        if isinstance(stride, int) and stride == 0:
            return self.splat(self.b.load(self.b.gep(ptr, [index], inbounds=True)), lanes)
        vec = ir.Constant(self.vector_type(dtype, lanes), ir.Undefined)
        for l in range(lanes):
            at = self.lane_at(index, l, stride)
            vec = self.b.insert_element(vec, self.b.load(self.b.gep(ptr, [at], inbounds=True)), ir.Constant(ir.IntType(32), l))
        return vec

    def vscatter(self, value: ir.Value, ptr: ir.Value, dtype, index: ir.Value, stride, count: int | None = None) -> None:
        """Store the first `count` lanes of `value` to ptr[index + l * stride] (one vector store when contiguous and whole)."""
        lanes = value.type.count if isinstance(value.type, ir.VectorType) else 1
        count = lanes if count is None else count
        if lowp.is_lowp(dtype):
            for l in range(count):
                at = self.b.add(index, self.index(l * stride), flags=("nsw",)) if l else index
                lane = value if lanes == 1 else self.b.extract_element(value, ir.Constant(ir.IntType(32), l))
                self.store_ptr(lane, ptr, dtype, at)
            return
        if count == lanes and (lanes == 1 or isinstance(stride, int) and stride == 1):
            self.vstore(value, ptr, dtype, index)
            return
        for l in range(count):
            at = self.lane_at(index, l, stride)
            self.b.store(self.b.extract_element(value, ir.Constant(ir.IntType(32), l)), self.b.gep(ptr, [at], inbounds=True))

    def _lanes_lowp(self, ptr: ir.Value, dtype, index: ir.Value, stride: int, lanes: int) -> ir.Value:
        """Storage-only dtypes: lanes loaded and converted one by one."""
        if lanes == 1:
            return self.load_ptr(ptr, dtype, index)
        vec = ir.Constant(self.vector_type(dtype, lanes), ir.Undefined)
        for l in range(lanes):
            at = self.lane_at(index, l, stride)
            vec = self.b.insert_element(vec, self.load_ptr(ptr, dtype, at), ir.Constant(ir.IntType(32), l))
        return vec

    def fma(self, acc: ir.Value, x: ir.Value, y: ir.Value) -> ir.Value:
        """acc + x * y for floats (scalar or vector), contracted to an FMA where the target has one."""
        return self.b.fadd(acc, self.b.fmul(x, y, flags=FAST), flags=FAST)

    def reduce_lanes(self, vectors: Sequence[ir.Value]) -> ir.Value:
        """Horizontal sums of n vectors (n a power of two <= lanes, <= one 128-bit block) as one n-lane vector
        (a scalar for n = 1).

        hadd-like shuffles inside 128-bit blocks combine the vectors pairwise (cheap in-lane shuffles on
        AVX, plain pairwise adds on NEON), then the blocks are added, then the halves of the block left.
        """
        vecs = list(vectors)
        if not isinstance(vecs[0].type, ir.VectorType):
            return vecs[0]
        width = vecs[0].type.count
        block = min(width, 2 if isinstance(vecs[0].type.element, ir.DoubleType) else 4)

        def shuffle(x, y, mask):
            return self.b.shuffle_vector(x, y, ir.Constant(ir.VectorType(ir.IntType(32), len(mask)), mask))

        def hadd(x, y):
            even, odd = [], []
            for base in range(0, width, block):
                for src in (0, width):
                    even += [src + base + i for i in range(0, block, 2)]
                    odd += [src + base + i + 1 for i in range(0, block, 2)]
            return self.b.fadd(shuffle(x, y, even), shuffle(x, y, odd), flags=FAST)

        n = len(vecs)
        while len(vecs) > 1:
            vecs = [hadd(vecs[i], vecs[i + 1]) for i in range(0, len(vecs), 2)]
        w = vecs[0]
        while width > max(block, n):
            half = width // 2
            w = self.b.fadd(shuffle(w, w, list(range(half))), shuffle(w, w, list(range(half, width))), flags=FAST)
            width = half
        while width > n:
            half = width // 2
            if half == 1:
                return self.b.fadd(self.b.extract_element(w, ir.Constant(ir.IntType(32), 0)),
                                   self.b.extract_element(w, ir.Constant(ir.IntType(32), 1)), flags=FAST)
            w = self.b.fadd(shuffle(w, w, list(range(0, width, 2))), shuffle(w, w, list(range(1, width, 2))), flags=FAST)
            width = half
        return w
