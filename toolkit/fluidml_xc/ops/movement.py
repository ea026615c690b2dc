"""Data movement: Transpose, Concat, Slice, Split, Expand, Tile, Pad, Depth/SpaceToDepth, the Gather and
Scatter families, Trilu, OneHot and Resize.

Affine movement is a `generic` copy whose accesses carry the offsets/strides (a Slice is an input
access with scaled strides and an offset). Data-dependent addressing (Gather, Scatter) loads the
indices at run time, wraps negative ones and addresses the data through its strides.
"""
from __future__ import annotations

import math

import numpy as np
from llvmlite import ir

from ..errors import InputError, NeedsConstant
from ..kernels.kernel import Access, Operand
from ..kernels.rows import dims_by_stride, normalize_axis
from ..kernels.scalar import const, is_float, llvm_type
from ..opspec import register


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


def _index_dtype(k) -> np.dtype:
    return np.dtype(f"int{k.idx_t.width}")


def _as_index(k, dtype, value: ir.Value, extent: int | None = None) -> ir.Value:
    """A loaded index (any int/float dtype) as k.idx_t; negative values wrap by `extent` when given."""
    i = k.s.cast(dtype, _index_dtype(k), value)
    if extent is None:
        return i
    return k.b.select(k.b.icmp_signed("<", i, k.index(0)), k.b.add(i, k.index(extent)), i)


def _copy(k, domain, out: Access, src: Access, order=None) -> None:
    if int(np.prod(domain, dtype=np.int64)) == 0:
        return
    k.generic(domain, [out], [src], lambda v, i: [v[0]], order=order if order is not None else dims_by_stride(out.strides))


def _each(k, domain, body) -> None:
    """Run body(idx) for every point of domain (row-major loops); nothing for an empty domain."""
    if int(np.prod(domain, dtype=np.int64)) == 0:
        return
    idx: list = [None] * len(domain)
    k.loops(domain, list(range(len(domain))), idx, body)


def _linear(k, op: Operand, dims_to_idx: dict[int, ir.Value]) -> ir.Value:
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
@register("Transpose", strided=True, layout_anchor=True, lowp_native=True, cost_kind="transpose")
def lower_transpose(k):
    x, out = k.inputs[0], k.outputs[0]
    perm = k.attr("perm") or list(range(x.rank))[::-1]
    dims = [0] * x.rank
    for j, p in enumerate(perm):
        dims[p] = j
    _copy(k, out.shape, out.identity_access(), x.access(dims, out.rank))


@register("Concat", strided=True, image=True, lowp_native=True, cost_kind="concat", axis_attr="dim")
def lower_concat(k):
    out = k.outputs[0]
    axis = normalize_axis(int(k.attr("axis")), out.rank)
    start = 0
    for x in k.inputs:
        if x is None:
            continue
        acc = out.identity_access()
        acc = Access(acc.ptr, acc.dtype, acc.strides, start * out.strides[axis])
        _copy(k, x.shape, acc, x.identity_access())
        start += x.shape[axis]


def _slice_params(k, x: Operand):
    """Per input dim (start, step) after ONNX clamping; unsliced dims are (0, 1).

    The node's own form decides, not the model's opset: Slice-1 has one input and starts/ends/axes as
    attributes, Slice-10 on has them as inputs, and passes write the input form into graphs of any opset."""
    if len(k.node.inputs) == 1:
        starts, ends = _ints(k, None, "starts"), _ints(k, None, "ends")
        axes, steps = _ints(k, None, "axes", list(range(len(starts)))), [1] * len(starts)
    else:
        starts, ends = _ints(k, 1), _ints(k, 2)
        axes = _ints(k, 3, default=list(range(len(starts))))
        steps = _ints(k, 4, default=[1] * len(starts))
    params = [(0, 1)] * x.rank
    for s, e, a, st in zip(starts, ends, axes, steps):
        r = range(*slice(s, e, st).indices(x.shape[normalize_axis(a, x.rank)]))
        params[normalize_axis(a, x.rank)] = (r.start, st)
    return params


def _offset_access(x: Operand, starts_steps) -> Access:
    strides = tuple(x.strides[d] * st for d, (_, st) in enumerate(starts_steps))
    offset = sum(x.strides[d] * s for d, (s, _) in enumerate(starts_steps))
    return Access(x.ptr, x.dtype, strides, offset)


@register("Slice", lowp_native=True)
def lower_slice(k):
    x, out = k.inputs[0], k.outputs[0]
    _copy(k, out.shape, out.identity_access(), _offset_access(x, _slice_params(k, x)))


@register("Split", lowp_native=True, axis_attr="dim")
def lower_split(k):
    x = k.inputs[0]
    axis = normalize_axis(int(k.attr("axis", 0)), x.rank)
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


@register("Tile", lowp_native=True)
def lower_tile(k):
    """Domain (rep0, n0, rep1, n1, ...): out index rep*n + i reads input index i."""
    x, out = k.inputs[0], k.outputs[0]
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
    if space_to_depth:
        _copy(k, domain, deep_acc, wide_acc)
    else:
        _copy(k, domain, wide_acc, deep_acc)


@register("DepthToSpace", lowp_native=True)
def lower_depth_to_space(k):
    _blocks(k, False)


@register("SpaceToDepth", lowp_native=True)
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


@register("Pad")
def lower_pad(k):
    x, out = k.inputs[0], k.outputs[0]
    mode = k.attr("mode", "constant")
    begin, end, value = _pad_params(k, x.rank)
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
        k.store(out_acc, ix, k.load_at(x, _linear(k, x, src)))
    _each(k, out.shape, body)


# -- gathers -------------------------------------------------------------------------------------
@register("Gather", lowp_native=True, axis_attr="dim", index_inputs=(1,))
def lower_gather(k):
    data, indices, out = k.inputs[0], k.inputs[1], k.outputs[0]
    axis = normalize_axis(int(k.attr("axis", 0)), data.rank)
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
        k.store(out_acc, ix, k.load_at(data, _linear(k, data, dims)))
    _each(k, out.shape, body)


@register("GatherElements", lowp_native=True, axis_attr="dim", index_inputs=(1,))
def lower_gather_elements(k):
    data, indices, out = k.inputs[0], k.inputs[1], k.outputs[0]
    axis = normalize_axis(int(k.attr("axis", 0)), data.rank)
    ind_acc, out_acc = indices.identity_access(), out.identity_access()

    def body(ix):
        dims = {d: ix[d] for d in range(data.rank)}
        dims[axis] = _as_index(k, indices.dtype, k.load(ind_acc, ix), data.shape[axis])
        k.store(out_acc, ix, k.load_at(data, _linear(k, data, dims)))
    _each(k, out.shape, body)


def _nd_dims(k, data: Operand, indices: Operand, ix, batch: int, lead: int) -> dict[int, ir.Value]:
    """GatherND/ScatterND: data dims addressed by the index tuple at domain point ix[:lead]."""
    r = indices.shape[-1]
    dims = {d: ix[d] for d in range(batch)}
    base = _linear(k, indices, {d: ix[d] for d in range(lead)})
    for j in range(r):
        pos = k.b.add(base, k.index(j * indices.strides[-1]))
        dims[batch + j] = _as_index(k, indices.dtype, k.load_at(indices, pos), data.shape[batch + j])
    return dims


@register("GatherND", lowp_native=True, index_inputs=(1,))
def lower_gather_nd(k):
    data, indices, out = k.inputs[0], k.inputs[1], k.outputs[0]
    batch = int(k.attr("batch_dims", 0))
    lead, r = indices.rank - 1, indices.shape[-1]
    out_acc = out.identity_access()

    def body(ix):
        dims = _nd_dims(k, data, indices, ix, batch, lead)
        for d in range(batch + r, data.rank):
            dims[d] = ix[lead + d - batch - r]
        k.store(out_acc, ix, k.load_at(data, _linear(k, data, dims)))
    _each(k, out.shape, body)


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
    ptr = k.b.gep(out.ptr, [_linear(k, out, dims)], inbounds=True)
    k.b.store(reduce(k.b.load(ptr), update), ptr)


@register("ScatterElements", axis_attr="dim", index_inputs=(1,))
@register("Scatter", index_inputs=(1,))
def lower_scatter_elements(k):
    data, indices, updates, out = k.inputs[0], k.inputs[1], k.inputs[2], k.outputs[0]
    axis = normalize_axis(int(k.attr("axis", 0)), data.rank)
    reduce = _reduce_fn(k, data.dtype)
    _copy(k, out.shape, out.identity_access(), data.identity_access())
    ind_acc, upd_acc = indices.identity_access(), updates.identity_access()

    def body(ix):
        dims = {d: ix[d] for d in range(data.rank)}
        dims[axis] = _as_index(k, indices.dtype, k.load(ind_acc, ix), data.shape[axis])
        _scatter_store(k, out, dims, k.load(upd_acc, ix), reduce)
    _each(k, indices.shape, body)


@register("ScatterND", index_inputs=(1,))
def lower_scatter_nd(k):
    data, indices, updates, out = k.inputs[0], k.inputs[1], k.inputs[2], k.outputs[0]
    reduce = _reduce_fn(k, data.dtype)
    lead, r = indices.rank - 1, indices.shape[-1]
    _copy(k, out.shape, out.identity_access(), data.identity_access())
    upd_acc = updates.identity_access()

    def body(ix):
        dims = _nd_dims(k, out, indices, ix, 0, lead)
        for d in range(r, data.rank):
            dims[d] = ix[lead + d - r]
        _scatter_store(k, out, dims, k.load(upd_acc, ix), reduce)
    _each(k, updates.shape, body)


# -- generators ----------------------------------------------------------------------------------
def _scalar(k, i: int) -> ir.Value:
    """Scalar input i: a constant when known at build time, else loaded."""
    op, value = k.inputs[i], k.input_value(i)
    return const(op.dtype, np.ravel(value)[0]) if value is not None else k.b.load(op.ptr)


@register("Trilu")
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
    if out.size:
        k.generic(out.shape, [out.identity_access()], [x.identity_access()], body, order=dims_by_stride(out.strides))


@register("OneHot", lowp_native=True, index_inputs=(0,))
def lower_one_hot(k):
    indices, values, out = k.inputs[0], k.inputs[2], k.outputs[0]
    axis = normalize_axis(int(k.attr("axis", -1)), out.rank)
    depth = out.shape[axis]
    off, on = k.load_at(values, k.index(0)), k.load_at(values, k.index(values.strides[0]))
    ind_acc = indices.access([d if d < axis else d + 1 for d in range(indices.rank)], out.rank)

    def body(v, ix):
        i = _as_index(k, indices.dtype, v[0], depth)
        return [k.b.select(k.b.icmp_signed("==", i, ix[axis]), on, off)]
    if out.size:
        k.generic(out.shape, [out.identity_access()], [ind_acc], body)


# -- Resize --------------------------------------------------------------------------------------
def _resize_scales(k, x: Operand, out: Operand) -> list[float]:
    """Per-dim scale factors as the coordinate transform uses them (given scales, else from the sizes)."""
    rank, axes = x.rank, [normalize_axis(a, x.rank) for a in (k.attr("axes") or range(x.rank))]
    given = None
    if k.graph.opset < 11:
        given = k.input_value(1) if len(k.inputs) > 1 else None
        given = given if given is not None else k.attr("scales")
    elif len(k.inputs) > 2 and k.input_value(2) is not None and k.input_value(2).size:
        given = k.input_value(2)
    scales = [o / i if i else 1.0 for o, i in zip(out.shape, x.shape)]
    if given is not None and len(np.ravel(given)):
        for a, sc in zip(axes if len(np.ravel(given)) != rank else range(rank), np.ravel(given)):
            scales[a] = float(sc)
    elif k.attr("keep_aspect_ratio_policy", "stretch") != "stretch":
        sizes = [int(v) for v in np.ravel(k.input_value(3))]
        ratios = [sz / x.shape[a] for a, sz in zip(axes, sizes)]
        uniform = min(ratios) if k.attr("keep_aspect_ratio_policy") == "not_larger" else max(ratios)
        for a in axes:
            scales[a] = uniform
    return scales


def _source_coord(mode: str, i: int, scale: float, n_in: int, n_out: int, roi: tuple[float, float]) -> float:
    """Input coordinate of output index i along one dim (ONNX coordinate_transformation_mode)."""
    width = scale * n_in
    if mode == "asymmetric":
        return i / scale
    if mode == "align_corners":
        return 0.0 if width == 1 else i * (n_in - 1) / (width - 1)
    if mode == "pytorch_half_pixel":
        return (i + 0.5) / scale - 0.5 if width != 1 else -0.5
    if mode == "half_pixel":
        return (i + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        return (n_in / 2) * (1 - n_out / width) + (i + 0.5) / scale - 0.5
    if mode == "tf_crop_and_resize":
        lo, hi = roi
        if width == 1:
            return (hi - lo) * (n_in - 1) / 2 + lo * (n_in - 1)
        return i * (hi - lo) * (n_in - 1) / (width - 1) + lo * (n_in - 1)
    raise InputError(f"Resize: coordinate_transformation_mode {mode!r} is not supported")


def _nearest(x: float, mode: str) -> int:
    rounding = {"floor": math.floor, "ceil": math.ceil, "round_prefer_ceil": lambda v: math.floor(v + 0.5),
                "round_prefer_floor": lambda v: math.ceil(v - 0.5)}
    if mode not in rounding:
        raise InputError(f"Resize: nearest_mode {mode!r} is not supported")
    return rounding[mode](x)


def _coefficients(mode: str, ratio: float, scale: float, a: float, antialias: bool) -> list[float]:
    """Interpolation weights of the taps around x (ONNX: ratio in (0, 1], taps start at floor - n/2 + 1)."""
    if antialias and scale < 1:
        reach = 1 if mode == "linear" else 2
        start = math.floor(-reach / scale) + 1
        args = [scale * (j - ratio) for j in range(start, 2 - start)]
        if mode == "linear":
            w = [max(0.0, 1 - abs(t)) for t in args]
        else:
            w = [(a + 2) * abs(t) ** 3 - (a + 3) * t * t + 1 if abs(t) <= 1 else
                 (a * abs(t) ** 3 - 5 * a * t * t + 8 * a * abs(t) - 4 * a if abs(t) < 2 else 0.0) for t in args]
        total = sum(w)
        return [v / total for v in w]
    if mode == "linear":
        return [1 - ratio, ratio]
    r, q = ratio + 1, 2 - ratio
    return [((a * r - 5 * a) * r + 8 * a) * r - 4 * a, ((a + 2) * ratio - (a + 3)) * ratio * ratio + 1,
            ((a + 2) * (1 - ratio) - (a + 3)) * (1 - ratio) * (1 - ratio) + 1, ((a * q - 5 * a) * q + 8 * a) * q - 4 * a]


def _resize_taps(k, mode, n_in, n_out, scale, roi):
    """Per output index: (input indices, weights, outside-the-crop flag) along one dim, all at build time."""
    coord = k.attr("coordinate_transformation_mode", "half_pixel" if k.graph.opset >= 11 else "asymmetric")
    nearest_mode = k.attr("nearest_mode", "round_prefer_floor") if k.graph.opset >= 11 else "floor"
    a, exclude, antialias = float(k.attr("cubic_coeff_a", -0.75)), int(k.attr("exclude_outside", 0)), int(k.attr("antialias", 0))
    taps = []
    for i in range(n_out):
        x = _source_coord(coord, i, scale, n_in, n_out, roi)
        outside = coord == "tf_crop_and_resize" and not 0 <= x <= n_in - 1
        if mode == "nearest":
            taps.append(([min(max(_nearest(x, nearest_mode), 0), n_in - 1)], [1.0], outside))
            continue
        base = math.ceil(x) - 1
        w = _coefficients(mode, x - base, scale, a, bool(antialias))
        n, pad = len(w), (len(w) + 1) // 2
        start = min(max(base - n // 2 + 1, -pad), n_in - 1 + pad - (n - 1))
        idx = list(range(start, start + n))
        if exclude:
            w = [v if 0 <= j < n_in else 0.0 for v, j in zip(w, idx)]
            w = [v / sum(w) for v in w]
        taps.append(([min(max(j, 0), n_in - 1) for j in idx], w, outside))
    return taps


@register(("Resize", "Upsample"), heavy=True)
def lower_resize(k):
    """Nearest, (multi)linear and cubic resize from per-dim tap tables (indices and weights) built at compile time."""
    x, out = k.inputs[0], k.outputs[0]
    mode = {"bilinear": "linear", "trilinear": "linear"}.get(k.attr("mode", "nearest"), k.attr("mode", "nearest"))
    if mode not in ("nearest", "linear", "cubic"):
        raise InputError(f"node {k.node.name!r} (Resize): mode {mode!r} is not supported (nearest, linear, cubic)")
    if mode != "nearest" and not is_float(x.dtype):
        raise InputError(f"node {k.node.name!r} (Resize): {mode} mode needs a float tensor, got {x.dtype}")
    scales = _resize_scales(k, x, out)
    rois = [(0.0, 1.0)] * x.rank
    roi = k.input_value(1) if k.graph.opset >= 11 and len(k.inputs) > 1 else None
    if roi is not None and roi.size:
        axes = [normalize_axis(a, x.rank) for a in (k.attr("axes") or range(x.rank))]
        half = roi.size // 2
        for j, a in enumerate(axes[:half]):
            rois[a] = (float(roi[j]), float(roi[half + j]))
    dt, idx_dt = x.dtype, _index_dtype(k)
    moved = [d for d in range(x.rank) if not (x.shape[d] == out.shape[d] and scales[d] == 1.0 and rois[d] == (0.0, 1.0))]
    taps = {d: _resize_taps(k, mode, x.shape[d], out.shape[d], scales[d], rois[d]) for d in moved}
    width = {d: len(taps[d][0][1]) for d in moved}
    index_tables = {d: k.constant_array(np.array([t[0] for t in taps[d]], dtype=idx_dt)) for d in moved}
    weight_tables = {d: k.constant_array(np.array([t[1] for t in taps[d]], dtype=dt)) for d in moved if width[d] > 1}
    outside = {d: k.constant_array(np.array([t[2] for t in taps[d]], dtype=np.uint8)) for d in moved if any(t[2] for t in taps[d])}
    extrapolation = const(dt, k.attr("extrapolation_value", 0.0))
    wide = [d for d in moved if width[d] > 1]
    out_acc = out.identity_access()

    def entry(table, d, i, t):
        return k.b.load(k.b.gep(table, [k.b.add(k.b.mul(i, k.index(width[d])), t)], inbounds=True))

    def body(ix):
        dims = {d: ix[d] for d in range(x.rank) if d not in moved}
        dims.update({d: entry(index_tables[d], d, ix[d], k.index(0)) for d in moved if width[d] == 1})
        acc = k.local(llvm_type(dt), const(dt, 0))

        def tap(t):
            w, at = None, dict(dims)
            for j, d in enumerate(wide):
                at[d] = entry(index_tables[d], d, ix[d], t[j])
                wd = entry(weight_tables[d], d, ix[d], t[j])
                w = wd if w is None else k.b.fmul(w, wd)
            v = k.load_at(x, _linear(k, x, at))
            k.b.store(k.s.add(dt, k.b.load(acc), v if w is None else k.b.fmul(v, w)), acc)
        k.loops([width[d] for d in wide], list(range(len(wide))), [None] * len(wide), tap)
        value = k.b.load(acc)
        for d, table in outside.items():
            flag = k.b.load(k.b.gep(table, [ix[d]], inbounds=True))
            value = k.b.select(k.b.icmp_unsigned("!=", flag, ir.Constant(flag.type, 0)), extrapolation, value)
        k.store(out_acc, ix, value)
    _each(k, out.shape, body)
