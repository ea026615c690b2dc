"""Normalization: BatchNormalization (inference), InstanceNormalization, LRN, LpNormalization,
MeanVarianceNormalization.

BatchNormalization with constant statistics folds to y = x * a[c] + b[c] with a, b computed at
build time; a following activation fused by passes/epilogues.py (node.attrs["_epilogue"]) is
applied before the store. The others loop over the kept dims and run their passes (mean, variance, scale) over the
normalized dims through the operands' strides.
"""
from __future__ import annotations

import numpy as np

from ..errors import InputError
from ..kernels.epilogue import activate, fused_epilogue
from ..kernels.kernel import Operand, chunk_count, row_major_strides
from ..kernels.loops import element, offset
from ..kernels.rows import RowAccumulators, dims_by_stride, each_in_run, each_row, fast_add, row_ptr, vector_rows
from ..kernels.rows_runtime import count_as, runtime_span
from ..kernels.scalar import FAST, const, llvm_type
from ..opspec import register, traits

FLOATS = ("float32", "float64", "float16")


def _per_channel(k, value: np.ndarray, dtype, name: str) -> Operand:
    value = np.ascontiguousarray(value.astype(dtype))
    return Operand(name, np.dtype(dtype), value.shape, row_major_strides(value.shape), k.constant_array(value), value)


def _param_access(op: Operand, rank: int):
    """Parameters indexed by the dims after the batch dim ((C,) in the usual spatial form)."""
    return op.access(list(range(1, 1 + op.rank)), rank)


@register("BatchNormalization", inplace=True, dtypes=FLOATS, image=True, cost_kind="channel_affine", runtime_extents=True)
def lower_batch_norm(k):
    x, out = k.inputs[0], k.outputs[0]
    dt, s, b = out.dtype, k.s, k.b
    eps = float(k.attr("epsilon", 1e-5))
    params = k.inputs[1:5]
    values = [p.value for p in params]
    if int(k.attr("training_mode", 0)):
        _batch_norm_training(k, eps)
        return
    if all(v is not None for v in values):
        scale, bias, mean, var = (v.astype(np.float64) for v in values)
        with np.errstate(all="ignore"):
            a = scale / np.sqrt(var + eps)
            c = bias - mean * a
        epi = fused_epilogue(k)
        if np.isfinite(a.astype(dt)).all() and np.isfinite(c.astype(dt)).all():  # x * a + c, one multiply-add
            a_op, c_op = _per_channel(k, a, dt, "bn.a"), _per_channel(k, c, dt, "bn.c")
            _pointwise(k, [out.identity_access()], [x.identity_access(), _param_access(a_op, x.rank), _param_access(c_op, x.rank)],
                      lambda v, i: [activate(k, epi, s.add(dt, s.mul(dt, v[0], v[1]), v[2]))])
            return
        # a NaN or infinite factor: (x - mean) * a + bias, so x == mean gives 0 * a and an infinity meets no other
        consts = [_param_access(_per_channel(k, v, dt, f"bn.{n}"), x.rank) for n, v in (("mean", mean), ("a", a), ("bias", bias))]
        _pointwise(k, [out.identity_access()], [x.identity_access(), *consts],
                  lambda v, i: [activate(k, epi, s.add(dt, s.mul(dt, s.sub(dt, v[0], v[1]), v[2]), v[3]))])
        return

    def body(v, i):
        scale, bias, mean, var = (s.cast(p.dtype, dt, val) for p, val in zip(params, v[1:]))
        inv = b.fdiv(scale, s.intrinsic("llvm.sqrt", s.add(dt, var, const(dt, eps))))
        return [s.add(dt, s.mul(dt, s.sub(dt, v[0], mean), inv), bias)]
    _pointwise(k, [out.identity_access()], [x.identity_access(), *(_param_access(p, x.rank) for p in params)], body)


def _pointwise(k, outs, ins, body) -> None:
    """k.generic over input 0's shape; over its run-time extents when a dim varies."""
    x = k.inputs[0]
    if k.dynamic:
        k.generic(k.extents(x), outs, ins, body, order=dims_by_stride(x.strides), capacity=x.shape)
        return
    k.generic(x.shape, outs, ins, body)


def _batch_norm_training(k, eps: float) -> None:
    """training_mode=1: normalize with the batch's own mean and (population) variance per channel;
    outputs 1 and 2, when present, are the running statistics blended with `momentum`."""
    x, scale, bias, run_mean, run_var = k.inputs[:5]
    dt, s, b = x.dtype, k.s, k.b
    momentum = float(k.attr("momentum", 0.9))
    sa, ba = _param_access(scale, x.rank), _param_access(bias, x.rank)
    stats = [(k.outputs[i], src) for i, src in ((1, run_mean), (2, run_var)) if len(k.outputs) > i and k.outputs[i] is not None and k.outputs[i].size]

    def finish(v, mean, var, ix):
        inv = b.fdiv(s.cast(scale.dtype, dt, k.load(sa, ix)), s.intrinsic("llvm.sqrt", s.add(dt, var, const(dt, eps))))
        return s.add(dt, s.mul(dt, s.sub(dt, v, mean), inv), s.cast(bias.dtype, dt, k.load(ba, ix)))

    def channel_stats(mean, var, ix):
        for (out, src), batch in zip(stats, (mean, var)):
            old = s.cast(src.dtype, dt, k.load(_param_access(src, x.rank), ix))
            blended = s.add(dt, s.mul(dt, old, const(dt, momentum)), s.mul(dt, batch, const(dt, 1.0 - momentum)))
            k.store(_param_access(out, x.rank), ix, s.cast(dt, out.dtype, blended))
    _normalize(k, [d for d in range(x.rank) if d != 1], finish, channel_stats if stats else None)


def _sum(k, x, idx, axes, term=lambda v: v, shape=None):
    """Sum of term(x) over `axes` at the kept indices in idx (accumulated in a register slot); `shape`: the loop
    extents (run-time values where dims vary), x.shape by default."""
    dt = x.dtype
    acc = k.local(llvm_type(dt), const(dt, 0))
    access = x.identity_access()

    def body(ix):
        k.b.store(k.s.add(dt, k.b.load(acc), term(k.load(access, ix))), acc)
    k.loops(x.shape if shape is None else shape, axes, idx, body)
    return k.b.load(acc)


def _normalize(k, axes, finish, per_slice=None) -> None:
    """For each slice over `axes`: mean, then E[(x - mean)^2]; finish(x, mean, var, idx) -> y;
    per_slice(mean, var, idx), if given, runs once per slice (idx holds the kept indices)."""
    x, out = k.inputs[0], k.outputs[0]
    dt, s, b = out.dtype, k.s, k.b
    if out.size == 0:
        return
    axes = sorted(a % x.rank for a in axes)
    kept = [d for d in range(x.rank) if d not in axes]
    shape = k.extents(x) if k.dynamic else x.shape
    count = count_as(k, k.product([shape[a] for a in axes]), dt) if k.dynamic else const(dt, int(np.prod([x.shape[a] for a in axes])))
    xa, oa = x.identity_access(), out.identity_access()

    def group(idx):
        mean = b.fdiv(_sum(k, x, idx, axes, shape=shape), count)
        var = b.fdiv(_sum(k, x, idx, axes, lambda v: (lambda d: s.mul(dt, d, d))(s.sub(dt, v, mean)), shape), count)
        if per_slice is not None:
            per_slice(mean, var, [k.index(0) if i is None else i for i in idx])
        k.loops(shape, axes, idx, lambda ix: k.store(oa, ix, finish(k.load(xa, ix), mean, var, ix)))
    k.loops(shape, kept, [None] * x.rank, group)


@register("InstanceNormalization", dtypes=FLOATS, runtime_extents=True)
def lower_instance_norm(k):
    x, scale, bias = k.inputs[:3]
    dt, s, b = x.dtype, k.s, k.b
    eps = const(dt, float(k.attr("epsilon", 1e-5)))
    sa, ba = scale.access([1], x.rank), bias.access([1], x.rank)

    def finish(v, mean, var, ix):
        inv = b.fdiv(k.load(sa, ix), s.intrinsic("llvm.sqrt", s.add(dt, var, eps)))
        return s.add(dt, s.mul(dt, s.sub(dt, v, mean), inv), k.load(ba, ix))
    if vector_rows(k, x, range(2, x.rank)) and (not k.dynamic or runtime_span(k, x, range(2, x.rank)) is not None):
        _instance_norm_vector_rows(k, eps, sa, ba)
        return
    _normalize(k, range(2, x.rank), finish)


def _instance_norm_vector_rows(k, eps, sa, ba) -> None:
    """InstanceNormalization over contiguous float32 spatial runs in explicit vectors: the sum with UNROLL
    accumulators, the sum of (x - mean)^2 the same way, then one pass y = (x - mean) * a + bias with
    a = scale / sqrt(var + eps). (The plain loops: LLVM unrolled the 56-long inner run whole and vectorized across
    rows with vinsertps gathers, as in ops/reduce.py.)"""
    x, out = k.inputs[0], k.outputs[0]
    b, f32, V = k.b, np.float32, k.lanes(np.float32)
    dims = list(range(2, x.rank))
    ext = k.extents(x) if k.dynamic else None
    n = int(np.prod([x.shape[d] for d in dims])) if ext is None else runtime_span(k, x, dims)
    vt = k.vector_type(f32, V)
    count, add = count_as(k, n, f32) if ext is not None else const(f32, n), fast_add(k)

    def row(ix, inner):
        src, dst = row_ptr(k, x, ix, inner), row_ptr(k, out, ix, inner)

        def each(fn):
            each_in_run(k, n, V, fn)

        def fold(term):
            acc = RowAccumulators(k, vt, 0.0)
            each(lambda u, off, lanes: acc.update(u, lambda a: add(a, term(k.vload(src, f32, off, lanes), lanes))))
            return acc.result(add)
        mean = b.fdiv(fold(lambda v, lanes: v), count)

        def square(v, lanes):
            d = b.fsub(v, k.splat(mean, lanes), flags=FAST)
            return b.fmul(d, d, flags=FAST)
        var = b.fdiv(fold(square), count)
        a = b.fdiv(k.load(sa, ix), k.s.intrinsic("llvm.sqrt", b.fadd(var, eps)))
        shift = k.load(ba, ix)
        each(lambda u, off, lanes: k.vstore(
            add(b.fmul(b.fsub(k.vload(src, f32, off, lanes), k.splat(mean, lanes), flags=FAST), k.splat(a, lanes), flags=FAST),
                k.splat(shift, lanes)), dst, f32, off))
    each_row(k, x.shape, x.strides, dims, row, ext)


@register("MeanVarianceNormalization", dtypes=FLOATS, runtime_extents=True)
def lower_mvn(k):
    dt, s, b = k.inputs[0].dtype, k.s, k.b
    axes = list(k.attr("axes", [0, 2, 3]))

    def finish(v, mean, var, ix):
        return b.fdiv(s.sub(dt, v, mean), s.add(dt, s.intrinsic("llvm.sqrt", var), const(dt, 1e-9)))
    _normalize(k, axes, finish)


@register("LpNormalization", dtypes=FLOATS, axis_attr="dim", runtime_extents=True)
def lower_lp_norm(k):
    x, out = k.inputs[0], k.outputs[0]
    dt, s, b = out.dtype, k.s, k.b
    axis = int(k.attr("axis", -1)) % x.rank
    p = int(k.attr("p", 2))
    kept = [d for d in range(x.rank) if d != axis]
    xa, oa = x.identity_access(), out.identity_access()
    shape = k.extents(x) if k.dynamic else x.shape

    def group(idx):
        if p == 1:
            norm = _sum(k, x, idx, [axis], lambda v: s.intrinsic("llvm.fabs", v), shape)
        else:
            norm = s.intrinsic("llvm.sqrt", _sum(k, x, idx, [axis], lambda v: s.mul(dt, v, v), shape))
        zero = const(dt, 0.0)
        is_zero = b.fcmp_ordered("==", norm, zero)
        k.loops(shape, [axis], idx, lambda ix: k.store(oa, ix, b.select(is_zero, zero, b.fdiv(k.load(xa, ix), norm))))
    if out.size:
        k.loops(shape, kept, [None] * x.rank, group)


_INVERSE_ROOTS = {
    0.5: lambda k, x: k.s.intrinsic("llvm.sqrt", x),
    0.75: lambda k, x: (lambda r: k.b.fmul(r, k.s.intrinsic("llvm.sqrt", r)))(k.s.intrinsic("llvm.sqrt", x)),
    1.0: lambda k, x: x,
}
"""base ** beta for LRN's usual betas: x / these instead of x * pow(base, -beta), sqrt and a division
vectorize where a pow call does not (within 2 ulps of pow for base > 0, which LRN's base is for bias > 0)."""


def _divide_by_power(k, dt, x, base, beta: float):
    root = _INVERSE_ROOTS.get(beta)
    if root is None:
        return k.s.mul(dt, x, k.s.intrinsic_binary("llvm.pow", base, const(dt, -beta)))
    return k.b.fdiv(x, root(k, base))


@register("LRN", dtypes=FLOATS, runtime_extents=True)
def lower_lrn(k):
    """y = x / (bias + alpha/size * sum of x^2 over the channel window)^beta; the sum builds up in y.
    Tiles: chunks of (image, channel) planes, each computed whole (its window sum in the same order)."""
    x, out = k.inputs[0], k.outputs[0]
    dt, s, b = out.dtype, k.s, k.b
    if out.size == 0:
        return
    size = int(k.attr("size"))
    alpha, beta, bias = float(k.attr("alpha", 1e-4)), float(k.attr("beta", 0.75)), float(k.attr("bias", 1.0))
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    C = x.shape[1]
    if x.varies(1):
        raise InputError(f"node {k.node.name!r} (LRN): the channel count {x.dyn[1]} varies at run time; give that "
                         "dimension one value (--input-shape or --dim NAME=N)")
    spatial = list(range(2, x.rank))
    xa, oa = x.identity_access(), out.identity_access()
    shape = k.extents(out) if k.dynamic else out.shape

    def channel(idx):
        n, c = idx[0], idx[1]
        k.loops(shape, spatial, idx, lambda ix: k.store(oa, ix, const(dt, 0)))
        lo = b.select(b.icmp_signed("<", c, k.index(before)), k.index(0), b.sub(c, k.index(before)))
        last = b.add(c, k.index(after + 1))
        hi = b.select(b.icmp_signed(">", last, k.index(C)), k.index(C), last)
        with k.for_range(hi, lo) as cc:
            def add_square(ix):
                v = b.load(element(k, x.ptr, offset(k, 0, (n, x.strides[0]), (cc, x.strides[1]), *((ix[d], x.strides[d]) for d in spatial))))
                p = element(k, out.ptr, offset(k, 0, (n, out.strides[0]), (c, out.strides[1]), *((ix[d], out.strides[d]) for d in spatial)))
                b.store(s.add(dt, b.load(p), s.mul(dt, v, v)), p)
            k.loops(shape, spatial, list(idx), add_square)

        def scale(ix):
            base = s.add(dt, const(dt, bias), s.mul(dt, k.load(oa, ix), const(dt, alpha / size)))
            k.store(oa, ix, _divide_by_power(k, dt, k.load(xa, ix), base, beta))
        k.loops(shape, spatial, idx, scale)
    work = float(out.size) * (2 * size + 3 + traits("Div" if beta in _INVERSE_ROOTS else "Pow").work)
    planes = x.shape[0] * C
    chunks = chunk_count(planes, work)
    with k.parallel_tiles([chunks], work) as (t,):
        lo_plane, hi_plane = k.chunk(t, chunks, planes if not k.dynamic else k.product([shape[0], C]))
        with k.for_range(hi_plane, lo_plane) as u:
            channel([b.udiv(u, k.index(C)), b.urem(u, k.index(C))] + [None] * len(spatial))
