"""Data movement: Transpose, Concat, Slice, Split, Expand, Tile, Pad, Depth/SpaceToDepth, the Gather and
Scatter families, Trilu and OneHot (Resize: ops/resize.py).

Affine movement is a `generic` copy whose accesses carry the offsets/strides (a Slice is an input
access with scaled strides and an offset). Data-dependent addressing (Gather, Scatter) loads the
indices at run time, wraps negative ones and addresses the data through its strides.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from ..errors import InputError, NeedsConstant
from ..kernels.flat import flat_concat
from ..kernels.kernel import Access, Operand
from ..kernels.rows import dims_by_stride, normalize_axis
from ..kernels.rows_runtime import copy as copy_runtime
from ..kernels.scalar import const
from ..opspec import register
from . import movement_runtime as runtime


# -- helpers -------------------------------------------------------------------------------------
def _ints(k, i: int | None, attr: str | None = None, default=None):
    """Integer list from attribute `attr` (older opsets) or input i (newer ones); `default` when absent."""
    if attr is not None and attr in k.node.attrs:
        return [int(v) for v in np.ravel(k.attr(attr))]
    if i is not None and i < len(k.inputs) and k.inputs[i] is not None:
        value = k.input_value(i)
        if value is None:
            raise NeedsConstant(f"node {k.node.name!r} ({k.node.op_type}): input {i} must be a build-time constant; "
                                "export the model with static shapes so it folds", k.node.name)
        return [int(v) for v in np.ravel(value)]
    return default


def index_dtype(k) -> np.dtype:
    return np.dtype(f"int{k.idx_t.width}")


def _as_index(k, dtype, value: ir.Value, extent: int | ir.Value | None = None) -> ir.Value:
    """A loaded index (any int/float dtype) as k.idx_t; negative values wrap by `extent` (a run-time one too) when
    given."""
    i = k.s.cast(dtype, index_dtype(k), value)
    if extent is None:
        return i
    return k.b.select(k.b.icmp_signed("<", i, k.index(0)), k.b.add(i, k.as_index(extent)), i)


def _copy(k, domain, out: Access, src: Access, order=None) -> None:
    if int(np.prod(domain, dtype=np.int64)) == 0:
        return
    k.generic(domain, [out], [src], lambda v, i: [v[0]], order=order if order is not None else dims_by_stride(out.strides))


def each_point(k, domain, body, capacity=None) -> None:
    """Run body(idx) for every point of domain (row-major loops); nothing for an empty domain. A domain of run-time
    extents gives its `capacity` (the build-time maxima)."""
    if int(np.prod(domain if capacity is None else capacity, dtype=np.int64)) == 0:
        return
    idx: list = [None] * len(domain)
    k.loops(domain, list(range(len(domain))), idx, body)


def linear_at(k, op: Operand, dims_to_idx: dict[int, ir.Value]) -> ir.Value:
    """Element offset of op at the given per-dim indices (dims absent are 0)."""
    total = k.index(0)
    for d, i in dims_to_idx.items():
        if op.shape[d] != 1 and op.strides[d]:
            term = i if op.strides[d] == 1 else k.b.mul(i, k.index(op.strides[d]))
            total = k.b.add(total, term)
    return total


def _store_at(k, op: Operand, linear: ir.Value, value: ir.Value) -> None:
    k.b.store(value, k.b.gep(op.ptr, [linear], inbounds=True))


# -- affine copies -------------------------------------------------------------------------------
@register("Transpose", strided=True, layout_anchor=True, lowp_native=True, cost_kind="transpose", runtime_extents=True)
def lower_transpose(k):
    x, out = k.inputs[0], k.outputs[0]
    perm = k.attr("perm") or list(range(x.rank))[::-1]
    dims = [0] * x.rank
    for j, p in enumerate(perm):
        dims[p] = j
    if k.dynamic:
        return runtime.transpose(k, dims)
    _copy(k, out.shape, out.identity_access(), x.access(dims, out.rank))


@register("Concat", strided=True, image=True, lowp_native=True, cost_kind="concat", axis_attr="dim", runtime_extents=True)
def lower_concat(k):
    out = k.outputs[0]
    axis = normalize_axis(int(k.attr("axis")), out.rank)
    if k.dynamic:
        return runtime.concat(k, axis)
    if flat_concat(k, out, [x for x in k.inputs if x is not None], axis):
        return
    start = 0
    for x in k.inputs:
        if x is None:
            continue
        acc = out.identity_access()
        acc = Access(acc.ptr, acc.dtype, acc.strides, start * out.strides[axis])
        _copy(k, x.shape, acc, x.identity_access())
        start += x.shape[axis]


def _slice_lists(k):
    """(starts, ends, axes, steps) as given. The node's own form decides, not the model's opset: Slice-1 has one
    input and starts/ends/axes as attributes, Slice-10 on has them as inputs, and passes write the input form into
    graphs of any opset."""
    if len(k.node.inputs) == 1:
        starts, ends = _ints(k, None, "starts"), _ints(k, None, "ends")
        return starts, ends, _ints(k, None, "axes", list(range(len(starts)))), [1] * len(starts)
    starts, ends = _ints(k, 1), _ints(k, 2)
    return starts, ends, _ints(k, 3, default=list(range(len(starts)))), _ints(k, 4, default=[1] * len(starts))


def _slice_params(k, x: Operand):
    """Per input dim (start, step) after ONNX clamping; unsliced dims are (0, 1)."""
    starts, ends, axes, steps = _slice_lists(k)
    params = [(0, 1)] * x.rank
    for s, e, a, st in zip(starts, ends, axes, steps):
        r = range(*slice(s, e, st).indices(x.shape[normalize_axis(a, x.rank)]))
        params[normalize_axis(a, x.rank)] = (r.start, st)
    return params


def _offset_access(x: Operand, starts_steps) -> Access:
    strides = tuple(x.strides[d] * st for d, (_, st) in enumerate(starts_steps))
    offset = sum(x.strides[d] * s for d, (s, _) in enumerate(starts_steps))
    return Access(x.ptr, x.dtype, strides, offset)


@register("Slice", lowp_native=True, runtime_extents=True)
def lower_slice(k):
    x, out = k.inputs[0], k.outputs[0]
    if k.dynamic:
        return runtime.slice_(k, *_slice_lists(k))
    _copy(k, out.shape, out.identity_access(), _offset_access(x, _slice_params(k, x)))


@register("Split", lowp_native=True, axis_attr="dim", runtime_extents=True)
def lower_split(k):
    x = k.inputs[0]
    axis = normalize_axis(int(k.attr("axis", 0)), x.rank)
    if k.dynamic:
        return runtime.split(k, axis)
    n = len(k.outputs)
    sizes = _ints(k, 1, "split")
    if sizes is None:
        chunk = -(-x.shape[axis] // n)
        sizes = [min(chunk, max(x.shape[axis] - chunk * j, 0)) for j in range(n)]
    start = 0
    for out, size in zip(k.outputs, sizes):
        if out is not None:
            params = [(start if d == axis else 0, 1) for d in range(x.rank)]
            _copy(k, out.shape, out.identity_access(), _offset_access(x, params))
        start += size


@register("Expand", lowp_native=True, runtime_extents=True)
def lower_expand(k):
    x, out = k.inputs[0], k.outputs[0]
    if k.dynamic:  # the output's run-time extents; x broadcast against them
        k.elementwise(lambda v: v[0], out, [x])
        return
    _copy(k, out.shape, out.identity_access(), x.broadcast_access(out.shape))


@register("Tile", lowp_native=True, runtime_extents=True)
def lower_tile(k):
    """Domain (rep0, n0, rep1, n1, ...): out index rep*n + i reads input index i."""
    x, out = k.inputs[0], k.outputs[0]
    if k.dynamic:
        return runtime.tile(k)
    domain, out_strides, in_strides = [], [], []
    for d, n in enumerate(x.shape):
        domain += [out.shape[d] // n if n else 0, n]
        out_strides += [out.strides[d] * n, out.strides[d]]
        in_strides += [0, x.strides[d]]
    _copy(k, domain, Access(out.ptr, out.dtype, tuple(out_strides)), Access(x.ptr, x.dtype, tuple(in_strides)))


def _blocks(k, space_to_depth: bool) -> None:
    """DepthToSpace / SpaceToDepth over the domain (N, C', H, b1, W, b2) with C' the smaller channel count."""
    x, out = k.inputs[0], k.outputs[0]
    bs = int(k.attr("blocksize"))
    crd = k.attr("mode", "DCR") == "CRD"
    deep, wide = (out, x) if space_to_depth else (x, out)
    n, c, h, w = wide.shape[0], wide.shape[1], deep.shape[2], deep.shape[3]
    cs = deep.strides[1]
    chan = (cs * bs * bs, cs * bs, cs) if crd else (cs, cs * bs * c, cs * c)
    deep_strides = (deep.strides[0], chan[0], deep.strides[2], chan[1], deep.strides[3], chan[2])
    ws = wide.strides
    wide_strides = (ws[0], ws[1], ws[2] * bs, ws[2], ws[3] * bs, ws[3])
    domain = (n, c, h, bs, w, bs)
    deep_acc, wide_acc = Access(deep.ptr, deep.dtype, deep_strides), Access(wide.ptr, wide.dtype, wide_strides)
    dst, src = (deep_acc, wide_acc) if space_to_depth else (wide_acc, deep_acc)
    if k.dynamic:
        if wide.varies(1):
            raise InputError(f"node {k.node.name!r} ({k.node.op_type}): the channel count {wide.dyn[1]} varies at run "
                             "time; give that dimension one value (--input-shape or --dim NAME=N)")
        we, de = k.extents(wide), k.extents(deep)
        copy_runtime(k, (we[0], c, de[2], bs, de[3], bs), domain, dst, src, dims_by_stride(dst.strides))
        return
    _copy(k, domain, dst, src)


@register("DepthToSpace", lowp_native=True, runtime_extents=True)
def lower_depth_to_space(k):
    _blocks(k, False)


@register("SpaceToDepth", lowp_native=True, runtime_extents=True)
def lower_space_to_depth(k):
    _blocks(k, True)


# -- Pad -----------------------------------------------------------------------------------------
def _pad_params(k, rank: int):
    """(begin pads, end pads) per dim, and the constant fill value (an ir.Value)."""
    dt = k.inputs[0].dtype
    value = None
    if k.graph.opset < 11:
        pads = _ints(k, None, "pads") or _ints(k, None, "paddings")
        value = const(dt, k.attr("value", 0.0))
        axes = list(range(rank))
    else:
        pads = _ints(k, 1)
        axes = [normalize_axis(a, rank) for a in (_ints(k, 3) or list(range(rank)))]
        cv = k.inputs[2] if len(k.inputs) > 2 else None
        if cv is not None:
            v = k.input_value(2)
            value = const(dt, np.ravel(v)[0]) if v is not None else k.b.load(cv.ptr)
        else:
            value = const(dt, 0)
    begin, end = [0] * rank, [0] * rank
    for j, a in enumerate(axes):
        begin[a], end[a] = pads[j], pads[len(axes) + j]
    return begin, end, value


def _pad_source(k, mode: str, i: ir.Value, pad: int, n: int, end: int) -> ir.Value:
    """Input index read by output index i along one dim for reflect / edge / wrap padding (pad, end: the dim's
    begin and end pads)."""
    b, zero, last = k.b, k.index(0), k.index(n - 1)
    src = b.sub(i, k.index(pad))
    if mode == "edge":
        src = b.select(b.icmp_signed("<", src, zero), zero, src)
        return b.select(b.icmp_signed(">", src, last), last, src)
    if mode == "wrap" and pad <= n and end <= n:  # src in [-n, 2n): one add or subtract of n, no srem per element
        src = b.select(b.icmp_signed("<", src, zero), b.add(src, k.index(n)), src)
        return b.select(b.icmp_signed(">", src, last), b.sub(src, k.index(n)), src)
    if mode == "wrap":
        r = b.srem(src, k.index(n))
        return b.select(b.icmp_signed("<", r, zero), b.add(r, k.index(n)), r)
    if n == 1:
        return zero
    period = k.index(2 * (n - 1))
    r = b.srem(src, period)
    r = b.select(b.icmp_signed("<", r, zero), b.add(r, period), r)
    return b.select(b.icmp_signed(">", r, last), b.sub(period, r), r)


@register("Pad", runtime_extents=True)
def lower_pad(k):
    x, out = k.inputs[0], k.outputs[0]
    mode = k.attr("mode", "constant")
    begin, end, value = _pad_params(k, x.rank)
    if k.dynamic:
        return runtime.pad(k, mode, begin, end, value)
    if mode == "constant":
        if out.size:
            k.generic(out.shape, [out.identity_access()], [], lambda v, i: [value], order=dims_by_stride(out.strides))
        inner = tuple(o - max(p, 0) - max(q, 0) for o, p, q in zip(out.shape, begin, end))
        if min(inner, default=1) <= 0:
            return
        dst = out.identity_access()
        dst = Access(dst.ptr, dst.dtype, dst.strides, sum(max(p, 0) * s for p, s in zip(begin, out.strides)))
        src = _offset_access(x, [(max(-p, 0), 1) for p in begin])
        _copy(k, inner, dst, src)
        return
    if mode not in ("edge", "reflect", "wrap"):
        raise InputError(f"node {k.node.name!r} (Pad): mode {mode!r} is not one of constant, reflect, edge, wrap")
    out_acc = out.identity_access()

    def body(ix):
        src = {d: _pad_source(k, mode, ix[d], begin[d], x.shape[d], end[d]) for d in range(x.rank) if x.shape[d] != 1}
        k.store(out_acc, ix, k.load_at(x, linear_at(k, x, src)))
    each_point(k, out.shape, body)


# -- gathers -------------------------------------------------------------------------------------
@register("Gather", lowp_native=True, axis_attr="dim", index_inputs=(1,), runtime_extents=True, strings=True)
def lower_gather(k):
    data, indices, out = k.inputs[0], k.inputs[1], k.outputs[0]
    axis = normalize_axis(int(k.attr("axis", 0)), data.rank)
    if k.dynamic:
        return runtime.gather(k, axis)
    q = indices.rank
    value = k.input_value(1)
    if value is not None and value.size == 1:
        start = int(value.reshape(-1)[0]) % data.shape[axis]
        params = [(start if d == axis else 0, 1) for d in range(data.rank)]
        src = _offset_access(data, params)
        dims = [d if d < axis else (None if d == axis else d + q - 1) for d in range(data.rank)]
        strides = [0] * out.rank
        for d, j in enumerate(dims):
            if j is not None:
                strides[j] += src.strides[d]
        _copy(k, out.shape, out.identity_access(), Access(src.ptr, src.dtype, tuple(strides), src.offset))
        return
    ind_acc = indices.access([axis + j for j in range(q)], out.rank)
    out_acc = out.identity_access()

    def body(ix):
        i = _as_index(k, indices.dtype, k.load(ind_acc, ix), data.shape[axis])
        dims = {d: ix[d] if d < axis else ix[d + q - 1] for d in range(data.rank) if d != axis}
        dims[axis] = i
        k.store(out_acc, ix, k.load_at(data, linear_at(k, data, dims)))
    each_point(k, out.shape, body)


@register("GatherElements", lowp_native=True, axis_attr="dim", index_inputs=(1,), runtime_extents=True)
def lower_gather_elements(k):
    data, indices, out = k.inputs[0], k.inputs[1], k.outputs[0]
    axis = normalize_axis(int(k.attr("axis", 0)), data.rank)
    if k.dynamic:
        return runtime.gather_elements(k, axis)
    ind_acc, out_acc = indices.identity_access(), out.identity_access()

    def body(ix):
        dims = {d: ix[d] for d in range(data.rank)}
        dims[axis] = _as_index(k, indices.dtype, k.load(ind_acc, ix), data.shape[axis])
        k.store(out_acc, ix, k.load_at(data, linear_at(k, data, dims)))
    each_point(k, out.shape, body)


def _extents(k, op: Operand) -> list:
    """op's dims: run-time extents in a dynamic build, else its shape."""
    return k.extents(op) if k.dynamic else list(op.shape)


def _nd_dims(k, data: Operand, indices: Operand, ix, batch: int, lead: int) -> dict[int, ir.Value]:
    """GatherND/ScatterND: data dims addressed by the index tuple at domain point ix[:lead]."""
    r, extents = indices.shape[-1], _extents(k, data)
    dims = {d: ix[d] for d in range(batch)}
    base = linear_at(k, indices, {d: ix[d] for d in range(lead)})
    for j in range(r):
        pos = k.b.add(base, k.index(j * indices.strides[-1]))
        dims[batch + j] = _as_index(k, indices.dtype, k.load_at(indices, pos), extents[batch + j])
    return dims


@register("GatherND", lowp_native=True, index_inputs=(1,), runtime_extents=True)
def lower_gather_nd(k):
    data, indices, out = k.inputs[0], k.inputs[1], k.outputs[0]
    batch = int(k.attr("batch_dims", 0))
    lead, r = indices.rank - 1, indices.shape[-1]
    out_acc = out.identity_access()

    def body(ix):
        dims = _nd_dims(k, data, indices, ix, batch, lead)
        for d in range(batch + r, data.rank):
            dims[d] = ix[lead + d - batch - r]
        k.store(out_acc, ix, k.load_at(data, linear_at(k, data, dims)))
    each_point(k, _extents(k, out), body, out.shape)


# -- scatters ------------------------------------------------------------------------------------
def _reduce_fn(k, dtype):
    """The scatter reduction: new value from (old, update)."""
    mode = k.attr("reduction", "none")
    fns = {"none": lambda old, u: u, "add": lambda old, u: k.s.add(dtype, old, u), "mul": lambda old, u: k.s.mul(dtype, old, u),
           "max": lambda old, u: k.s.max(dtype, old, u), "min": lambda old, u: k.s.min(dtype, old, u)}
    if mode not in fns:
        raise InputError(f"node {k.node.name!r} ({k.node.op_type}): reduction {mode!r} is not one of {', '.join(fns)}")
    return fns[mode]


def _scatter_store(k, out: Operand, dims, update: ir.Value, reduce) -> None:
    ptr = k.b.gep(out.ptr, [linear_at(k, out, dims)], inbounds=True)
    k.b.store(reduce(k.b.load(ptr), update), ptr)


@register("ScatterElements", axis_attr="dim", index_inputs=(1,), runtime_extents=True)
@register("Scatter", index_inputs=(1,), runtime_extents=True)
def lower_scatter_elements(k):
    data, indices, updates, out = k.inputs[0], k.inputs[1], k.inputs[2], k.outputs[0]
    axis = normalize_axis(int(k.attr("axis", 0)), data.rank)
    reduce = _reduce_fn(k, data.dtype)
    _copy_all(k, out, data)
    ind_acc, upd_acc = indices.identity_access(), updates.identity_access()
    n = _extents(k, data)[axis]

    def body(ix):
        dims = {d: ix[d] for d in range(data.rank)}
        dims[axis] = _as_index(k, indices.dtype, k.load(ind_acc, ix), n)
        _scatter_store(k, out, dims, k.load(upd_acc, ix), reduce)
    each_point(k, _extents(k, indices), body, indices.shape)


def _copy_all(k, out: Operand, data: Operand) -> None:
    """out = data (a scatter's start), to the run-time extents in a dynamic build."""
    if k.dynamic:
        copy_runtime(k, k.extents(out), out.shape, out.identity_access(), data.identity_access(), dims_by_stride(out.strides))
        return
    _copy(k, out.shape, out.identity_access(), data.identity_access())


@register("ScatterND", index_inputs=(1,), runtime_extents=True)
def lower_scatter_nd(k):
    data, indices, updates, out = k.inputs[0], k.inputs[1], k.inputs[2], k.outputs[0]
    reduce = _reduce_fn(k, data.dtype)
    lead, r = indices.rank - 1, indices.shape[-1]
    _copy_all(k, out, data)
    upd_acc = updates.identity_access()

    def body(ix):
        dims = _nd_dims(k, out, indices, ix, 0, lead)
        for d in range(r, data.rank):
            dims[d] = ix[lead + d - r]
        _scatter_store(k, out, dims, k.load(upd_acc, ix), reduce)
    each_point(k, _extents(k, updates), body, updates.shape)


# -- generators ----------------------------------------------------------------------------------
def _scalar(k, i: int) -> ir.Value:
    """Scalar input i: a constant when known at build time, else loaded."""
    op, value = k.inputs[i], k.input_value(i)
    return const(op.dtype, np.ravel(value)[0]) if value is not None else k.b.load(op.ptr)


@register("Trilu", runtime_extents=True)
def lower_trilu(k):
    x, out = k.inputs[0], k.outputs[0]
    upper = int(k.attr("upper", 1))
    diag = _as_index(k, np.int64, _scalar(k, 1)) if len(k.inputs) > 1 and k.inputs[1] is not None else k.index(0)
    zero = const(x.dtype, 0)
    r = x.rank

    def body(v, ix):
        d = k.b.sub(ix[r - 1], ix[r - 2])
        keep = k.b.icmp_signed(">=" if upper else "<=", d, diag)
        return [k.b.select(keep, v[0], zero)]
    if out.size and k.dynamic:
        k.generic(k.extents(out), [out.identity_access()], [x.identity_access()], body, order=dims_by_stride(out.strides),
                  capacity=out.shape)
    elif out.size:
        k.generic(out.shape, [out.identity_access()], [x.identity_access()], body, order=dims_by_stride(out.strides))


@register("OneHot", lowp_native=True, index_inputs=(0,), runtime_extents=True)
def lower_one_hot(k):
    indices, values, out = k.inputs[0], k.inputs[2], k.outputs[0]
    axis = normalize_axis(int(k.attr("axis", -1)), out.rank)
    depth = out.shape[axis]
    off, on = k.load_at(values, k.index(0)), k.load_at(values, k.index(values.strides[0]))
    ind_acc = indices.access([d if d < axis else d + 1 for d in range(indices.rank)], out.rank)

    def body(v, ix):
        i = _as_index(k, indices.dtype, v[0], depth)
        return [k.b.select(k.b.icmp_signed("==", i, ix[axis]), on, off)]
    if out.size and k.dynamic:
        k.generic(k.extents(out), [out.identity_access()], [ind_acc], body, capacity=out.shape)
    elif out.size:
        k.generic(out.shape, [out.identity_access()], [ind_acc], body)
