"""Run-time extents for the row-wise and data-movement kernels (issue #26): loop nests whose extents are ints or
run-time index values, parallel tiles over a varying extent, contiguous runs of run-time length in vectors with a
scalar tail, copies with run-time offsets, and the storage runs that decide whether a view may share storage.

Tensors keep the strides of their capacity shape (symbolic.py), so only loop extents and a few offsets are run-time
values here; the tile count of a parallel split is fixed at build time from the capacity and each tile's [lo, hi) is
a run-time fraction of the actual extent (tiles may be empty)."""
from __future__ import annotations

from typing import Sequence

import numpy as np
from llvmlite import ir

from ..symbolic import is_static
from .operand import Access, Operand


def is_value(x) -> bool:
    return isinstance(x, ir.Value)


def as_value(k, x) -> ir.Value:
    return x if is_value(x) else k.index(x)


def product(k, values: Sequence) -> int | ir.Value:
    """The product of ints and index values (an int when all are ints)."""
    const, acc = 1, None
    for v in values:
        if is_value(v):
            acc = v if acc is None else k.b.mul(acc, v, flags=("nsw",))
        else:
            const *= int(v)
    if acc is None:
        return const
    return acc if const == 1 else k.b.mul(acc, k.index(const), flags=("nsw",))


def add(k, x, y) -> int | ir.Value:
    if not is_value(x) and not is_value(y):
        return int(x) + int(y)
    return k.b.add(as_value(k, x), as_value(k, y), flags=("nsw",))


def scaled(k, x, c: int) -> int | ir.Value:
    return int(x) * c if not is_value(x) else (x if c == 1 else k.b.mul(x, k.index(c), flags=("nsw",)))


def count_as(k, count, dtype) -> ir.Value:
    """An element count (int or index value) as a `dtype` compute value."""
    from .scalar import const

    if not is_value(count):
        return const(dtype, int(count))
    return k.s.cast(np.dtype(f"int{k.idx_t.width}"), dtype, count)


# -- loops ---------------------------------------------------------------------------------------
def tiled_loops(k, extents: Sequence, capacity: Sequence[int], dims: Sequence[int], idx: list, body, work: float) -> None:
    """k.loops over `dims` to run-time `extents`; the leading loops are split as k.split_plan splits the `capacity`
    into a build-time number of parallel tiles, each running a run-time fraction of the actual iterations."""
    plan = k.split_plan(list(capacity), list(dims), work)
    if plan is None:
        k.loops(list(extents), list(dims), idx, body)
        return
    lead, _, chunks = plan
    for d in dims:
        if capacity[d] == 1:
            idx[d] = k.index(0)
    rest = [d for d in dims if d not in lead and capacity[d] > 1]
    units = as_value(k, product(k, [extents[d] for d in lead]))
    b = k.b
    with k.parallel_tiles([chunks], work) as (c,):
        def at(v):
            return b.udiv(b.mul(v, units, flags=("nuw",)), k.index(chunks))
        with k.for_range(at(b.add(c, k.index(1), flags=("nuw",))), at(c)) as u:
            for j, d in enumerate(lead):
                inner = product(k, [extents[e] for e in lead[j + 1:]])
                q = u if not is_value(inner) and inner == 1 else b.udiv(u, as_value(k, inner))
                idx[d] = q if j == 0 else b.urem(q, as_value(k, extents[d]))
            k.loops(list(extents), rest, idx, body)


def walk_run_dynamic(k, n: ir.Value, lanes: int, vec, tail, unroll: int) -> None:
    """rows.walk_run over a run of run-time length n: `unroll` vectors per step, then whole vectors one by one
    (slot 0), then the last n % lanes elements one by one."""
    from .loops import loop

    b, group = k.b, lanes * unroll
    steps = b.udiv(n, k.index(group))
    with loop(k, steps) as g:
        at = b.mul(g, k.index(group), flags=("nsw",))
        for u in range(unroll):
            vec(u, b.add(at, k.index(u * lanes), flags=("nsw",)) if u else at)
    start = b.mul(steps, k.index(group), flags=("nsw",))
    whole = b.sub(n, b.urem(n, k.index(lanes)))
    if unroll > 1:
        with k.for_range(whole, start, lanes) as at:
            vec(0, at)
    with k.for_range(n, whole) as t:
        tail(t)


def runtime_span(k, op: Operand, dims) -> int | ir.Value | None:
    """Actual elements of the block `dims` covers when that block is one contiguous run in `op`'s capacity storage
    at every size (only its outermost non-unit dim may vary), else None."""
    live = sorted((d for d in dims if op.shape[d] > 1 or op.varies(d)), key=lambda d: op.strides[d])
    run = 1
    for j, d in enumerate(live):
        if op.strides[d] != run or (op.varies(d) and j != len(live) - 1):
            return None
        run *= op.shape[d]
    return product(k, [k.extent(op, d) for d in live])


# -- copies --------------------------------------------------------------------------------------
def element_at(k, access: Access, idx, offset=None) -> ir.Value:
    """Address of `access` at idx plus a run-time element `offset` (None: none)."""
    linear = k.linear(access, idx)
    if offset is not None and (is_value(offset) or offset):
        linear = k.b.add(linear, as_value(k, offset), flags=("nsw",))
    return k.b.gep(access.ptr, [linear], inbounds=True)


def copy(k, extents, capacity, out: Access, src: Access, order, out_offset=None, src_offset=None) -> None:
    """out[idx] = src[idx] over run-time `extents` (loops in `order`), with optional run-time element offsets."""
    if int(np.prod(capacity, dtype=np.int64)) == 0:
        return

    def point(ix):
        value = k.b.load(element_at(k, src, ix, src_offset))
        k.b.store(k.s.store_value(out.dtype, k.s.load_value(src.dtype, value)), element_at(k, out, ix, out_offset))
    tiled_loops(k, extents, capacity, order, [None] * len(extents), point, 2.0 * float(np.prod(capacity, dtype=np.float64)))


def pointwise(k, extents, capacity, outs: Sequence[Access], ins: Sequence[Access], body, order) -> None:
    """k.generic without reductions over run-time `extents`: body(loaded inputs, idx) -> one value per output."""
    if int(np.prod(capacity, dtype=np.int64)) == 0:
        return

    def point(ix):
        for a, v in zip(outs, body([k.load(a, ix) for a in ins], ix)):
            k.store(a, ix, v)
    tiled_loops(k, extents, capacity, order, [None] * len(extents), point, k.generic_work(capacity, len(ins)))


def fill(k, extents, capacity, out: Access, value: ir.Value, order) -> None:
    """out[idx] = value over run-time `extents`."""
    if int(np.prod(capacity, dtype=np.int64)) == 0:
        return
    tiled_loops(k, extents, capacity, order, [None] * len(extents), lambda ix: k.store(out, ix, value),
                float(np.prod(capacity, dtype=np.float64)))


# -- views ---------------------------------------------------------------------------------------
def storage_runs(dims: Sequence, capacity: Sequence[int]) -> list[list]:
    """A tensor's element order as runs [actual extent, capacity extent]: a static dim joins the run before it (its
    actual extent is its capacity), a varying dim starts a run. Two tensors with equal runs (the first run's
    capacity aside) hold each element at the same place for every size: a view between them may share storage."""
    runs: list[list] = []
    for e, c in zip(dims, capacity):
        if is_static(e) and int(e) == 1:
            continue
        if is_static(e) and runs:
            runs[-1] = [runs[-1][0] * int(c), runs[-1][1] * int(c)]
        else:
            runs.append([e, int(c)])
    return runs


def same_storage(a_dims, a_capacity, b_dims, b_capacity) -> bool:
    ra, rb = storage_runs(a_dims, a_capacity), storage_runs(b_dims, b_capacity)
    return len(ra) == len(rb) and all(x[0] == y[0] and (j == 0 or x[1] == y[1]) for j, (x, y) in enumerate(zip(ra, rb)))
