"""Float32 reductions over one middle axis (ops/reduce.py hands them over): the inner dims after the axis are one
contiguous run, so each output row accumulates vectors of that run's columns in registers over the axis, instead of
a reduce loop innermost over the strided axis. Softmax and LogSoftmax off the last axis decompose into these
(passes/softmax_axis.py)."""
from __future__ import annotations

import numpy as np

from .loops import loop
from .scalar import splat_const
from ..ops.reduce import REDUCERS, UNROLL, VECTOR_REDUCERS, _fast_add


COLUMN_REDUCERS = ("ReduceSum", "ReduceMean", "ReduceSumSquare", "ReduceL1", "ReduceMax", "ReduceMin")
"""Reductions column_reduce runs over one middle axis."""


def _row_major(op) -> bool:
    return tuple(op.strides) == tuple(int(np.prod(op.shape[d + 1:], dtype=np.int64)) for d in range(op.rank))


def column_run(k, x, out, axes) -> int | None:
    """Elements after the one reduced axis when it is not the last, x and the output are row-major float32 and
    that run holds at least one vector (then output row p is input rows p * axis .. + axis, summed lane-wise)."""
    if len(axes) != 1 or axes[0] >= x.rank - 1 or np.dtype(x.dtype) != np.float32 or not x.size:
        return None
    run = int(np.prod(x.shape[axes[0] + 1:], dtype=np.int64))
    V = k.lanes(np.float32)
    return run if V > 1 and run >= V and _row_major(x) and _row_major(out) else None


def column_reduce(k, x, out, axis: int, name: str) -> None:
    """A reduction over one middle axis whose inner dims are a contiguous run: each output row accumulates UNROLL
    vectors of columns in registers over the axis (the reduce loop outside the lanes, not innermost over a strided
    axis). Max/Min keep a NaN once seen, as onnx.reference does."""
    b, f32 = k.b, np.float32
    V, run, count = k.lanes(f32), column_run(k, x, out, [axis]), x.shape[axis]
    _, value, _, finish = REDUCERS[name]
    init = VECTOR_REDUCERS[name]
    if name in ("ReduceMax", "ReduceMin"):
        op = ">" if name == "ReduceMax" else "<"
        combine = lambda a, v: b.select(b.or_(b.fcmp_ordered(op, v, a), b.fcmp_unordered("uno", v, v)), v, a)  # noqa: E731
    else:
        combine = _fast_add(k)

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
            if finish:
                result = b.fdiv(result, splat_const(ty, float(count)))
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
    k.loops_tiled(list(x.shape), list(range(axis)), [None] * x.rank, lambda ix: outer(list(ix)),
                  4.0 * float(np.prod(x.shape, dtype=np.float64)))
