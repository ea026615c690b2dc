"""Run-time extents for the row-wise and data-movement kernels (issue #26): contiguous runs of run-time length in
vectors with a scalar tail, copies with run-time offsets, and the storage runs that decide whether a view may share
storage. Loops to run-time extents and their parallel split are Kernel.loops_tiled's (capacity given).

Tensors keep the strides of their capacity shape (symbolic.py), so only loop extents and a few offsets are run-time
values here."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Sequence

import numpy as np
from llvmlite import ir

from ..symbolic import is_static
from .loops import loop
from .operand import Access, Operand
from .scalar import const


def is_value(x) -> bool:
    return isinstance(x, ir.Value)


def add(k, x, y) -> int | ir.Value:
    if not is_value(x) and not is_value(y):
        return int(x) + int(y)
    return k.b.add(k.as_index(x), k.as_index(y), flags=("nsw",))


def scaled(k, x, c: int) -> int | ir.Value:
    return int(x) * c if not is_value(x) else (x if c == 1 else k.b.mul(x, k.index(c), flags=("nsw",)))


def count_as(k, count, dtype) -> ir.Value:
    """An element count (int or index value) as a `dtype` compute value."""
    if not is_value(count):
        return const(dtype, int(count))
    return k.s.cast(np.dtype(f"int{k.idx_t.width}"), dtype, count)


# -- runs ----------------------------------------------------------------------------------------
def walk_run_dynamic(k, n: ir.Value, lanes: int, vec, tail, unroll: int) -> None:
    """rows.walk_run over a run of run-time length n: `unroll` vectors per step, then whole vectors one by one
    (slot 0), then the last n % lanes elements one by one."""
    b, group = k.b, lanes * unroll
    steps = b.udiv(n, k.index(group))
    with loop(k, steps) as g:
        at = b.mul(g, k.index(group), flags=("nsw",))
        for u in range(unroll):
            vec(u, b.add(at, k.index(u * lanes), flags=("nsw",)) if u else at)
    start = b.mul(steps, k.index(group), flags=("nsw",))
    whole = b.sub(n, b.urem(n, k.index(lanes)))
    if unroll > 1:
        with _serial(k, whole, start, lanes) as at:
            vec(0, at)
    with _serial(k, n, whole) as t:
        tail(t)


def walk_run_masked(k, n: ir.Value, lanes: int, vec, last, unroll: int) -> None:
    """walk_run_dynamic with the last n % lanes elements as one masked vector: last(offset, mask) when any is left
    (mask: lanes below the count left)."""
    b = k.b
    group = lanes * unroll
    steps = b.udiv(n, k.index(group))
    with loop(k, steps) as g:
        at = b.mul(g, k.index(group), flags=("nsw",))
        for u in range(unroll):
            vec(u, b.add(at, k.index(u * lanes), flags=("nsw",)) if u else at)
    start = b.mul(steps, k.index(group), flags=("nsw",))
    left = b.urem(n, k.index(lanes))
    whole = b.sub(n, left)
    if unroll > 1:
        with _serial(k, whole, start, lanes) as at:
            vec(0, at)
    with b.if_then(b.icmp_signed(">", left, k.index(0))):
        last(whole, lanes_below(k, left, lanes))


def lanes_below(k, count: ir.Value, lanes: int) -> ir.Value:
    """The mask of the first `count` of `lanes` lanes (all of them when count >= lanes)."""
    lane = ir.Constant(ir.VectorType(k.idx_t, lanes), list(range(lanes)))
    return k.b.icmp_signed("<", lane, k.splat(count, lanes))


def _masked_fn(k, op: str, vt: ir.VectorType):
    mt = ir.VectorType(ir.IntType(1), vt.count)
    name = f"llvm.masked.{op}.v{vt.count}f32.p0v{vt.count}f32"
    args = [vt.as_pointer(), ir.IntType(32), mt, vt] if op == "load" else [vt, vt.as_pointer(), ir.IntType(32), mt]
    return k.module.globals.get(name) or ir.Function(k.module, ir.FunctionType(vt if op == "load" else ir.VoidType(), args), name)


def masked_load(k, ptr: ir.Value, index: ir.Value, mask: ir.Value, passthru: float) -> ir.Value:
    """float32 lanes of `mask` from ptr[index] (the others `passthru`); masked-off lanes are not read."""
    vt = ir.VectorType(ir.FloatType(), mask.type.count)
    at = k.b.bitcast(k.b.gep(ptr, [index], inbounds=True), vt.as_pointer())
    return k.b.call(_masked_fn(k, "load", vt), [at, ir.Constant(ir.IntType(32), 4), mask, ir.Constant(vt, [passthru] * vt.count)])


def masked_store(k, value: ir.Value, ptr: ir.Value, index: ir.Value, mask: ir.Value) -> None:
    """float32 lanes of `mask` to ptr[index]; masked-off lanes are not written."""
    at = k.b.bitcast(k.b.gep(ptr, [index], inbounds=True), value.type.as_pointer())
    k.b.call(_masked_fn(k, "store", value.type), [value, at, ir.Constant(ir.IntType(32), 4), mask])


@contextmanager
def _serial(k, stop, start, step: int = 1):
    """k.for_range that LLVM neither unrolls nor vectorizes: a run's last few vectors or elements (fewer than a
    step of the loop before), where more loop code only adds checks."""
    with k.for_range(stop, start, step) as i:
        yield i
    module = k.module
    flags = [module.add_metadata([ir.MetaDataString(module, "llvm.loop.unroll.disable")]),
             module.add_metadata([ir.MetaDataString(module, "llvm.loop.vectorize.enable"), ir.Constant(ir.IntType(1), 0)])]
    loop_id = module.add_metadata([*flags, ir.MetaDataString(module, f"loop{len(module.metadata)}")])
    loop_id.operands = (loop_id, *flags)
    i.incomings[-1][1].terminator.set_metadata("llvm.loop", loop_id)


def runtime_span(k, op: Operand, dims) -> int | ir.Value | None:
    """Actual elements of the block `dims` covers when that block is one contiguous run in `op`'s capacity storage
    at every size (only its outermost non-unit dim may vary), else None."""
    live = sorted((d for d in dims if op.shape[d] > 1 or op.varies(d)), key=lambda d: op.strides[d])
    run = 1
    for j, d in enumerate(live):
        if op.strides[d] != run or (op.varies(d) and j != len(live) - 1):
            return None
        run *= op.shape[d]
    return k.product([k.extent(op, d) for d in live])


# -- copies --------------------------------------------------------------------------------------
def element_at(k, access: Access, idx, offset=None) -> ir.Value:
    """Address of `access` at idx plus a run-time element `offset` (None: none)."""
    linear = k.linear(access, idx)
    if offset is not None and (is_value(offset) or offset):
        linear = k.b.add(linear, k.as_index(offset), flags=("nsw",))
    return k.b.gep(access.ptr, [linear], inbounds=True)


def copy(k, extents, capacity, out: Access, src: Access, order, out_offset=None, src_offset=None) -> None:
    """out[idx] = src[idx] over run-time `extents` (loops in `order`), with optional run-time element offsets."""
    if int(np.prod(capacity, dtype=np.int64)) == 0:
        return

    def point(ix):
        value = k.b.load(element_at(k, src, ix, src_offset))
        k.b.store(k.s.store_value(out.dtype, k.s.load_value(src.dtype, value)), element_at(k, out, ix, out_offset))
    k.loops_tiled(list(extents), list(order), [None] * len(extents), point, 2.0 * float(np.prod(capacity, dtype=np.float64)),
                  list(capacity))


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
