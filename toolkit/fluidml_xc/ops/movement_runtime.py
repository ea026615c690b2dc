"""Data movement over dims that vary at run time (issue #26): the dynamic-build forms of Transpose, Concat, Slice,
Split, Tile, Pad, Gather, GatherElements and the views (Reshape, Flatten, Squeeze, Unsqueeze) when they copy.
ops/movement.py and ops/views.py call these when a node's operand varies (Kernel.dynamic).

Every tensor keeps the strides of its capacity shape, so these loop to the actual extents (Kernel.extents) and
only offsets that follow a varying extent are run-time values: a Concat input's place after a varying input, a
Slice start counted from a varying end, a Split output's start, a Tile repeat's place, a negative constant Gather
index."""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from ..errors import InputError
from ..kernels.kernel import Access, Operand, row_major, row_major_strides
from ..kernels.rows import dims_by_stride, normalize_axis
from ..kernels.rows_runtime import add, copy, is_value, same_storage, scaled, storage_runs

INDEX_LIMIT = 1 << 30
"""Slice bounds beyond this clamp to it before they meet a run-time extent (extents are far below it)."""


def _order(op: Operand) -> list[int]:
    return dims_by_stride(op.strides)


def _work(op: Operand, per_point: float = 2.0) -> float:
    return per_point * float(np.prod(op.shape, dtype=np.float64))


def transpose(k, dims: list[int]) -> None:
    """out[j] = x[perm]: x's dim d is the domain's dims[d]."""
    x, out = k.inputs[0], k.outputs[0]
    copy(k, k.extents(out), out.shape, out.identity_access(), x.access(dims, out.rank), _order(out))


def concat(k, axis: int) -> None:
    """Each input copied at its place along `axis`: the sum of the actual extents of the inputs before it."""
    out = k.outputs[0]
    start = 0
    for x in k.inputs:
        if x is None:
            continue
        ext = k.extents(x)
        copy(k, ext, x.shape, out.identity_access(), x.identity_access(), _order(out),
             out_offset=scaled(k, start, out.strides[axis]))
        start = add(k, start, ext[axis])


def _slice_start(k, s: int, step: int, n) -> int | ir.Value:
    """ONNX's clamped start of a slice along a dim of run-time extent n (slice(s, e, step).indices(n)[0])."""
    s = max(min(s, INDEX_LIMIT), -INDEX_LIMIT)
    b = k.b
    if s < 0:
        v = b.add(n, k.index(s))
        low = k.index(0 if step > 0 else -1)
        return k.imax(v, low)
    top = n if step > 0 else b.sub(n, k.index(1))
    return k.imin(k.index(s), top)


def slice_(k, starts, ends, axes, steps) -> None:
    """Slice with constant starts/ends/steps: the output's extents come from its dyn; a start on a varying dim is
    clamped against that dim's run-time extent."""
    x, out = k.inputs[0], k.outputs[0]
    strides, offset = list(x.strides), 0
    for s, e, a, st in zip(starts, ends, axes, steps):
        a = normalize_axis(a, x.rank)
        if x.varies(a):
            start = _slice_start(k, s, st, k.extent(x, a))
        else:
            start = range(*slice(s, e, st).indices(x.shape[a])).start
        offset = add(k, offset, scaled(k, start, x.strides[a]))
        strides[a] = x.strides[a] * st
    copy(k, k.extents(out), out.shape, out.identity_access(), Access(x.ptr, x.dtype, tuple(strides)), _order(out),
         src_offset=offset if is_value(offset) or offset else None)


def split(k, axis: int) -> None:
    """Each output copied from its start along `axis`: the sum of the actual extents of the outputs before it (an
    absent output of an equal split counts ceil(extent / outputs))."""
    x = k.inputs[0]
    n = len(k.outputs)
    chunk = k.b.udiv(k.as_index(add(k, k.extent(x, axis), n - 1)), k.index(n))
    start = 0
    for out in k.outputs:
        if out is not None:
            copy(k, k.extents(out), out.shape, out.identity_access(), x.identity_access(), _order(out),
                 src_offset=scaled(k, start, x.strides[axis]))
        start = add(k, start, k.extent(out, axis) if out is not None else chunk)


def tile(k) -> None:
    """Domain (rep0, n0, rep1, n1, ...) with n the input's run-time extents: out index rep * n + i reads input i."""
    x, out = k.inputs[0], k.outputs[0]
    ext = k.extents(x)
    reps = [out.shape[d] // x.shape[d] if x.shape[d] else 0 for d in range(x.rank)]
    extents = [e for d in range(x.rank) for e in (reps[d], ext[d])]
    capacity = [c for d in range(x.rank) for c in (reps[d], x.shape[d])]
    b = k.b

    def point(ix):
        src, dst = k.index(0), k.index(0)
        for d in range(x.rank):
            r, i = ix[2 * d], ix[2 * d + 1]
            at = b.add(b.mul(r, k.as_index(ext[d]), flags=("nsw",)), i, flags=("nsw",))
            src = b.add(src, b.mul(i, k.index(x.strides[d]), flags=("nsw",)), flags=("nsw",))
            dst = b.add(dst, b.mul(at, k.index(out.strides[d]), flags=("nsw",)), flags=("nsw",))
        k.b.store(k.b.load(b.gep(x.ptr, [src], inbounds=True)), b.gep(out.ptr, [dst], inbounds=True))
    if int(np.prod(capacity, dtype=np.int64)):
        k.loops_tiled(extents, list(range(len(extents))), [None] * len(extents), point, _work(out), capacity)


def pad(k, mode: str, begin, end, value) -> None:
    """Pad to the output's actual extents: constant fills them with `value` and copies the input inside (negative
    pads crop); reflect, edge and wrap read the mirrored, clamped or wrapped input index of the run-time extent."""
    x, out = k.inputs[0], k.outputs[0]
    if not out.size:
        return
    oext = k.extents(out)
    if mode != "constant":
        if mode not in MIRRORS:
            raise InputError(f"node {k.node.name!r} (Pad): mode {mode!r} is not one of constant, reflect, edge, wrap")
        xext, out_acc = k.extents(x), out.identity_access()

        def body(ix):
            src = {d: MIRRORS[mode](k, k.b.sub(ix[d], k.index(begin[d])), k.as_index(xext[d]))
                   for d in range(x.rank) if x.shape[d] != 1 or x.varies(d)}
            k.store(out_acc, ix, k.load_at(x, _offset(k, x, src)))
        k.loops_tiled(oext, _order(out), [None] * out.rank, body, _work(out, 6.0), out.shape)
        return
    k.generic(oext, [out.identity_access()], [], lambda v, i: [value], order=_order(out), capacity=out.shape)
    cut = [max(p, 0) + max(q, 0) for p, q in zip(begin, end)]
    inner = [add(k, e, -c) for e, c in zip(oext, cut)]
    capacity = [o - c for o, c in zip(out.shape, cut)]
    if min(capacity, default=1) <= 0:
        return
    dst = out.identity_access()
    dst = Access(dst.ptr, dst.dtype, dst.strides, sum(max(p, 0) * s for p, s in zip(begin, out.strides)))
    src = Access(x.ptr, x.dtype, x.strides, sum(max(-p, 0) * s for p, s in zip(begin, x.strides)))
    copy(k, inner, capacity, dst, src, _order(out))


def _edge(k, src, n):
    return k.imin(k.imax(src, k.index(0)), k.b.sub(n, k.index(1)))


def _wrap(k, src, n):
    r = k.b.srem(src, n)
    return k.b.select(k.b.icmp_signed("<", r, k.index(0)), k.b.add(r, n), r)


def _reflect(k, src, n):
    """Mirror without repeating the ends: period 2(n - 1) (1 for n = 1, where every index reads 0)."""
    b, last = k.b, k.b.sub(n, k.index(1))
    period = k.imax(b.mul(last, k.index(2)), k.index(1))
    r = b.srem(src, period)
    r = b.select(b.icmp_signed("<", r, k.index(0)), b.add(r, period), r)
    return b.select(b.icmp_signed(">", r, last), b.sub(period, r), r)


MIRRORS = {"edge": _edge, "wrap": _wrap, "reflect": _reflect}
"""Pad mode -> the input index read for input-relative index `src` along a dim of run-time extent n."""


def _index(k, dtype, value: ir.Value, extent) -> ir.Value:
    """A loaded index as k.idx_t, a negative one wrapped by the (run-time) extent."""
    i = k.s.cast(dtype, np.dtype(f"int{k.idx_t.width}"), value)
    return k.b.select(k.b.icmp_signed("<", i, k.index(0)), k.b.add(i, k.as_index(extent)), i)


def _offset(k, op: Operand, dims: dict) -> ir.Value:
    total = k.index(0)
    for d, i in dims.items():
        if op.strides[d] and (op.shape[d] != 1 or op.varies(d)):
            total = k.b.add(total, k.b.mul(i, k.index(op.strides[d]), flags=("nsw",)), flags=("nsw",))
    return total


def _each_out(k, body) -> None:
    out = k.outputs[0]
    if out.size:
        k.loops_tiled(k.extents(out), _order(out), [None] * out.rank, body, _work(out, 4.0), out.shape)


def gather(k, axis: int) -> None:
    """out[..., j, ...] = data[..., indices[j], ...]: any number of indices, varying data dims; a negative index
    wraps by the axis' run-time extent."""
    data, indices, out = k.inputs[0], k.inputs[1], k.outputs[0]
    q, n = indices.rank, k.extent(data, axis)
    value = k.input_value(1)
    if value is not None and value.size == 1:  # one constant index: a copy from its (run-time when negative) offset
        i = int(value.reshape(-1)[0])
        start = i % n if not is_value(n) else (i if i >= 0 else k.b.add(n, k.index(i)))
        strides = [0] * out.rank
        for d in range(data.rank):
            if d != axis:
                strides[d if d < axis else d + q - 1] += data.strides[d]
        copy(k, k.extents(out), out.shape, out.identity_access(), Access(data.ptr, data.dtype, tuple(strides)), _order(out),
             src_offset=scaled(k, start, data.strides[axis]))
        return
    ind_acc, out_acc = indices.access([axis + j for j in range(q)], out.rank), out.identity_access()

    def body(ix):
        dims = {d: ix[d] if d < axis else ix[d + q - 1] for d in range(data.rank) if d != axis}
        dims[axis] = _index(k, indices.dtype, k.load(ind_acc, ix), n)
        k.store(out_acc, ix, k.load_at(data, _offset(k, data, dims)))
    _each_out(k, body)


def gather_elements(k, axis: int) -> None:
    data, indices, out = k.inputs[0], k.inputs[1], k.outputs[0]
    n = k.extent(data, axis)
    ind_acc, out_acc = indices.identity_access(), out.identity_access()

    def body(ix):
        dims = {d: ix[d] for d in range(data.rank)}
        dims[axis] = _index(k, indices.dtype, k.load(ind_acc, ix), n)
        k.store(out_acc, ix, k.load_at(data, _offset(k, data, dims)))
    _each_out(k, body)


def view_copy(k) -> None:
    """A view that does not share storage (a graph input or output on one side, or storage runs that differ):
    copied run by run when both hold each element at the same place, else element by element through the actual
    row-major index (divided back into the input's run-time extents)."""
    src, dst = k.inputs[0], k.outputs[0]
    if not dst.size:
        return
    s_dims, d_dims = src.dyn or src.shape, dst.dyn or dst.shape
    if row_major(src) and row_major(dst) and same_storage(s_dims, src.shape, d_dims, dst.shape):
        runs = storage_runs(d_dims, dst.shape)
        strides = row_major_strides([c for _, c in runs])
        flat = [Access(op.ptr, op.dtype, strides) for op in (dst, src)]
        copy(k, [k.dim_value(e) for e, _ in runs], [c for _, c in runs], *flat, list(range(len(runs))))
        return
    s_ext, d_ext, b = k.extents(src), k.extents(dst), k.b

    def point(ix):
        linear = k.index(0)
        for d in range(dst.rank):
            linear = b.add(b.mul(linear, k.as_index(d_ext[d]), flags=("nsw",)), ix[d], flags=("nsw",))
        at = {}
        for d in reversed(range(src.rank)):
            e = k.as_index(s_ext[d])
            at[d] = b.urem(linear, e)
            linear = b.udiv(linear, e)
        k.store(dst.identity_access(), ix, k.load_at(src, _offset(k, src, at)))
    k.loops_tiled(d_ext, list(range(dst.rank)), [None] * dst.rank, point, _work(dst, 6.0), dst.shape)
