"""Row and column walkers of the row-wise kernels (reductions, Softmax, ArgMax, the normalizations, TopK, ...):
every row over a set of dims, folds and passes over a row, contiguous float32 runs in UNROLL vectors with their
accumulators, and float32 folds over one middle axis whose inner dims are a contiguous run (columns in lanes)."""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from .kernel import row_major
from .loops import loop
from .rows_runtime import count_as, walk_run_dynamic
from .scalar import FAST, llvm_type, splat_const


def normalize_axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def dims_by_stride(strides) -> list[int]:
    """Domain dims largest stride first, so the innermost loop walks the densest dim."""
    return sorted(range(len(strides)), key=lambda d: -abs(strides[d]))


# -- rows ----------------------------------------------------------------------------------------
def each_row(k, shape, strides, row_dims, row, extents=None) -> None:
    """Call row(ix, inner) for every index of the dims outside `row_dims`; inner = row dims, outermost first.
    `extents`: the dims' run-time extents (ints or index values) when some vary; `shape` is then the capacity."""
    if int(np.prod(shape, dtype=np.int64)) == 0:
        return
    order = dims_by_stride(strides)
    outer = [d for d in order if d not in row_dims]
    inner = [d for d in order if d in row_dims]
    idx: list = [None] * len(shape)
    if extents is not None:
        k.loops_tiled(extents, outer, idx, lambda ix: row(ix, inner), 4.0 * float(np.prod(shape, dtype=np.float64)), shape)
        return
    # rows are independent: parallel tiles of whole rows (a row's reduction never splits)
    k.loops_tiled(shape, outer, idx, lambda ix: row(ix, inner), 4.0 * float(np.prod(shape, dtype=np.float64)))


def over_row(k, shape, inner, ix, fn) -> None:
    """One pass over a row: fn(ix) at each point; afterwards the row dims of ix are reset to 0."""
    k.loops(shape, inner, ix, fn)
    for d in inner:
        ix[d] = k.index(0)


def fold_row(k, shape, inner, ix, dt, init, fn) -> ir.Value:
    """Reduce a row: acc = fn(acc, ix) over every point, starting from init; returns the final acc."""
    slot = k.local(llvm_type(dt), init)
    over_row(k, shape, inner, ix, lambda i: k.b.store(fn(k.b.load(slot), i), slot))
    return k.b.load(slot)


# -- contiguous rows in explicit vectors ----------------------------------------------------------
UNROLL = 4
"""Vectors in flight per step of a row loop (independent accumulators, so a max or sum is no serial chain)."""


def contiguous_span(op, dims) -> int | None:
    """Elements of the block `dims` covers when it is one contiguous run in `op`'s storage, else None."""
    run = 1
    for d in sorted((d for d in dims if op.shape[d] > 1), key=lambda d: op.strides[d]):
        if op.strides[d] != run:
            return None
        run *= op.shape[d]
    return run


def row_ptr(k, op, ix, inner) -> ir.Value:
    """Pointer to the first element of the row at ix (row dims at 0)."""
    for d in inner:
        ix[d] = k.index(0)
    return k.b.gep(op.ptr, [k.linear(op.identity_access(), ix)], inbounds=True)


def walk_run(k, n: int, lanes: int, vec, tail, unroll: int = UNROLL) -> None:
    """Visit a run of n elements: vec(slot, offset) for each whole vector, `unroll` per loop step (slot = 0..unroll-1),
    the whole vectors left after the loop unrolled, then tail(offset) for each of the last n % lanes elements.
    A run-time n (an index value) loops over the vectors left and the tail instead (rows_runtime.walk_run_dynamic)."""
    if isinstance(n, ir.Value):
        walk_run_dynamic(k, n, lanes, vec, tail, unroll)
        return
    group = lanes * unroll
    steps, rest = divmod(n, group)
    if steps:
        with k.for_range(steps) as g:
            at = k.b.mul(g, k.index(group), flags=("nsw",))
            for u in range(unroll):
                vec(u, k.b.add(at, k.index(u * lanes), flags=("nsw",)) if u else at)
    start = steps * group
    for u in range(rest // lanes):
        vec(u, k.index(start + u * lanes))
    for t in range(start + rest // lanes * lanes, n):
        tail(k.index(t))


def each_in_run(k, n: int, lanes: int, fn, unroll: int = UNROLL) -> None:
    """walk_run with one visitor: fn(slot, offset, lanes) for each whole vector, fn(None, offset, 1) for each tail element."""
    walk_run(k, n, lanes, lambda u, off: fn(u, off, lanes), lambda off: fn(None, off, 1), unroll)


def fast_add(k):
    """(a, b) -> a + b with the fast-math flags the row loops reassociate under."""
    return lambda p, q: k.b.fadd(p, q, flags=FAST)


def horizontal(k, value: ir.Value, combine) -> ir.Value:
    """Combine the lanes of a vector pairwise (halves, then quarters, ...) into one scalar."""
    width = value.type.count
    while width > 1:
        half = width // 2

        def part(lo):
            return k.b.shuffle_vector(value, value, ir.Constant(ir.VectorType(ir.IntType(32), half), list(range(lo, lo + half))))
        value, width = combine(part(0), part(half)), half
    return k.b.extract_element(value, ir.Constant(ir.IntType(32), 0))


class RowAccumulators:
    """UNROLL vector accumulators and one scalar one (for the tail) of a row fold, all starting at `init`."""

    def __init__(self, k, vt: ir.VectorType, init: float):
        self.k = k
        self.vectors = [k.local(vt, splat_const(vt, init)) for _ in range(UNROLL)]
        self.scalar = k.local(vt.element, splat_const(vt.element, init))

    def update(self, slot: int | None, fn) -> None:
        """acc = fn(acc) for vector `slot`, or the scalar one (slot None)."""
        at = self.scalar if slot is None else self.vectors[slot]
        self.k.b.store(fn(self.k.b.load(at)), at)

    def result(self, combine) -> ir.Value:
        vecs = [self.k.b.load(v) for v in self.vectors]
        while len(vecs) > 1:
            vecs = [combine(vecs[i], vecs[i + 1]) for i in range(0, len(vecs), 2)]
        return combine(horizontal(self.k, vecs[0], combine), self.k.b.load(self.scalar))


def greater(k, largest: bool):
    """x if it beats y, else y: a compare and select that x86 does in one maxps/minps (a NaN x loses)."""
    return lambda y, x: k.b.select(k.b.fcmp_ordered(">" if largest else "<", x, y), x, y)


def vector_rows(k, x, dims) -> int | None:
    """Run length when every row over `dims` is contiguous float32 in x (and in the output, same strides), else None."""
    out = k.outputs[0]
    if np.dtype(x.dtype) != np.float32 or x.strides != out.strides or k.lanes(np.float32) < 2 or not x.size:
        return None
    return contiguous_span(x, dims)


# -- columns: a fold over one middle axis ------------------------------------------------------
def column_run(k, x, out, axes) -> int | None:
    """Elements after the one reduced axis when it is not the last, x and the output are row-major float32 and
    that run holds at least one vector (then output row p is input rows p * axis .. + axis, summed lane-wise)."""
    if len(axes) != 1 or axes[0] >= x.rank - 1 or np.dtype(x.dtype) != np.float32 or not x.size:
        return None
    run = int(np.prod(x.shape[axes[0] + 1:], dtype=np.int64))
    V = k.lanes(np.float32)
    return run if V > 1 and run >= V and row_major(x) and row_major(out) else None


def column_fold(k, x, out, axis: int, init: float, combine, value=None, mean: bool = False, extents=None) -> None:
    """A fold over one middle axis whose inner dims are a contiguous run (column_run): each output row accumulates
    UNROLL vectors of columns in registers over the axis (the fold loop outside the lanes, not innermost over a
    strided axis): acc = combine(acc, value(k, float32, x) or x) from `init`, divided by the axis' extent when `mean`.
    `extents`: run-time extents of x's dims when the axis or the dims before it vary (the run stays static)."""
    b, f32 = k.b, np.float32
    V, run = k.lanes(f32), column_run(k, x, out, [axis])
    count = x.shape[axis] if extents is None else extents[axis]

    def columns(xb, ob, at, lanes: int, nvec: int) -> None:
        ty = k.vector_type(f32, lanes)
        accs = [k.local(ty, splat_const(ty, init)) for _ in range(nvec)]
        with loop(k, count) as i:
            row = b.add(xb, b.mul(i, k.index(run), flags=("nsw",)), flags=("nsw",))
            for u, acc in enumerate(accs):
                index = b.add(row, b.add(at, k.index(u * lanes), flags=("nsw",)), flags=("nsw",))
                v = k.vload(x.ptr, f32, index, lanes) if lanes > 1 else b.load(b.gep(x.ptr, [index], inbounds=True))
                b.store(combine(b.load(acc), value(k, f32, v) if value else v), acc)
        for u, acc in enumerate(accs):
            result = b.load(acc)
            if mean:
                result = b.fdiv(result, splat_const(ty, float(count)) if extents is None else k.splat(count_as(k, count, f32), lanes))
            k.vstore(result, out.ptr, f32, b.add(ob, b.add(at, k.index(u * lanes), flags=("nsw",)), flags=("nsw",)))

    def outer(ix):
        at = [k.index(0) if i is None else i for i in ix]
        xb = k.linear(x.identity_access(), at)
        ob = k.linear(out.identity_access(), at if out.rank == x.rank else [i for d, i in enumerate(at) if d != axis])
        group = UNROLL * V
        blocks, rest = divmod(run, group)
        if blocks:
            with loop(k, blocks) as t:
                columns(xb, ob, b.mul(t, k.index(group), flags=("nsw",)), V, UNROLL)
        if rest // V:
            columns(xb, ob, k.index(blocks * group), V, rest // V)
        for c in range(blocks * group + rest // V * V, run):
            columns(xb, ob, k.index(c), 1, 1)
    if axis == 0:
        outer([None] * x.rank)
        return
    if extents is not None:
        k.loops_tiled(extents, list(range(axis)), [None] * x.rank, lambda ix: outer(list(ix)),
                      4.0 * float(np.prod(x.shape, dtype=np.float64)), x.shape)
        return
    k.loops_tiled(list(x.shape), list(range(axis)), [None] * x.rank, lambda ix: outer(list(ix)),
                  4.0 * float(np.prod(x.shape, dtype=np.float64)))
