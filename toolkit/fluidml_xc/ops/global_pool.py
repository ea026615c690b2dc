"""Global pools: GlobalAveragePool, GlobalMaxPool, GlobalLpPool: reductions through the kernel builder, the spatial
dims innermost; over dims that vary at run time, loops to the actual sizes (the average divides by their run-time
product)."""
from __future__ import annotations

import numpy as np

from ..errors import InputError
from ..kernels.kernel import chunk_count
from ..kernels.loops import element, loop, nest, offset
from ..kernels.scalar import const, llvm_type
from ..opspec import register
from .pool import FLOATS, MAX_TYPES, lowest


def _nan_max(s, dt, a, b):
    """max propagating NaN; floats through llvm.maximum, which the loop vectorizer reduces in vectors."""
    # float32 only: llvm.maximum on double trips an LLVM assertion when legalizing for armv7
    return s.intrinsic_binary("llvm.maximum", a, b) if np.dtype(dt) == np.float32 else s.maximum(dt, a, b)


def global_pool(k, kind: str) -> None:
    x, out = k.inputs[0], k.outputs[0]
    dt, s = out.dtype, k.s
    if k.dynamic:
        global_pool_varying(k, kind)
        return
    spatial = list(range(2, x.rank))
    count = int(np.prod(x.shape[2:]))
    p = int(k.attr("p", 2))
    out_acc = out.access(list(range(x.rank)), x.rank)
    if kind == "max":
        k.generic(x.shape, [out_acc], [x.identity_access()], lambda v, i: [v[0]], reduce_dims=spatial,
                  init=[lowest(dt)], combine=lambda accs, vals: [_nan_max(s, dt, accs[0], vals[0])])
    elif kind == "avg":
        k.generic(x.shape, [out_acc], [x.identity_access()], lambda v, i: [v[0]], reduce_dims=spatial,
                  init=[const(dt, 0)], finalize=lambda r, i: [s.mul(dt, r[0], const(dt, 1.0 / count))])
    else:
        def term(v, i):
            return [s.mul(dt, v[0], v[0]) if p == 2 else s.intrinsic_binary("llvm.pow", s.intrinsic("llvm.fabs", v[0]), const(dt, p))]

        def root(r, i):
            return [s.intrinsic("llvm.sqrt", r[0]) if p == 2 else s.intrinsic_binary("llvm.pow", r[0], const(dt, 1.0 / p))]
        k.generic(x.shape, [out_acc], [x.identity_access()], term, reduce_dims=spatial, init=[const(dt, 0)], finalize=root)


@register("GlobalAveragePool", dtypes=FLOATS, strided=True, image=True, cost_kind="global_pool", runtime_extents=True)
def lower_global_average_pool(k):
    global_pool(k, "avg")


@register("GlobalMaxPool", dtypes=MAX_TYPES, strided=True, image=True, cost_kind="global_pool", runtime_extents=True)
def lower_global_max_pool(k):
    global_pool(k, "max")


@register("GlobalLpPool", dtypes=FLOATS, heavy=True, runtime_extents=True)
def lower_global_lp_pool(k):
    global_pool(k, "lp")


def global_pool_varying(k, kind: str) -> None:
    """Global pools over run-time extents: the actual spatial dims reduced (the average divides by their run-time
    product); channel chunks as parallel tiles. Channels innermost: the output row accumulates a pixel's channels at
    a time (a contiguous, vectorizable inner loop); else one accumulator per channel plane."""
    x, out = k.inputs[0], k.outputs[0]
    b, dt, s = k.b, out.dtype, k.s
    sp = x.rank - 2
    if x.varies(1):
        raise InputError(f"node {k.node.name!r} ({k.node.op_type}): its channels vary at run time; only the batch and "
                         "spatial dims may: give that dimension one value")
    N, C, spatial = k.extent(x, 0), x.shape[1], [k.extent(x, 2 + d) for d in range(sp)]
    p = int(k.attr("p", 2))
    init = {"max": lowest(dt)}.get(kind, const(dt, 0))

    def step(acc, v):
        if kind == "max":
            return _nan_max(s, dt, acc, v)
        if kind == "lp":
            v = s.mul(dt, v, v) if p == 2 else s.intrinsic_binary("llvm.pow", s.intrinsic("llvm.fabs", v), const(dt, p))
        return s.add(dt, acc, v)

    def finish(acc):
        if kind == "avg":
            count = k.index(1)
            for e in spatial:
                count = b.mul(count, e if not isinstance(e, int) else k.index(e))
            return b.fdiv(acc, s.cast(np.int64 if k.idx_t.width == 64 else np.int32, dt, count))
        if kind == "lp":
            return s.intrinsic("llvm.sqrt", acc) if p == 2 else s.intrinsic_binary("llvm.pow", acc, const(dt, 1.0 / p))
        return acc

    def x_at(n, c, pos):
        return k.load_ptr(x.ptr, x.dtype, offset(k, 0, (n, x.strides[0]), (c, x.strides[1]), *zip(pos, x.strides[2:])))

    def out_at(n, c):
        return element(k, out.ptr, offset(k, 0, (n, out.strides[0]), (c, out.strides[1])))

    def channels_last(n, c0, c1):
        with loop(k, c1, c0) as c:
            b.store(init, out_at(n, c))
        nest(k, spatial, lambda pos: _each(k, c0, c1, lambda c: b.store(step(b.load(out_at(n, c)), x_at(n, c, pos)),
                                                                       out_at(n, c))))
        with loop(k, c1, c0) as c:
            b.store(finish(b.load(out_at(n, c))), out_at(n, c))

    def planes(n, c0, c1):
        with loop(k, c1, c0) as c:
            acc = k.local(llvm_type(dt), init)
            nest(k, spatial, lambda pos: b.store(step(b.load(acc), x_at(n, c, pos)), acc))
            b.store(finish(b.load(acc)), out_at(n, c))

    def channels(c0, c1):
        with loop(k, N) as n:
            (channels_last if x.strides[1] == 1 else planes)(n, c0, c1)
    work = float(np.prod(x.shape, dtype=np.float64))
    chunks = chunk_count(C, work)
    with k.parallel_tiles([chunks], work) as (t,):
        channels(*k.chunk(t, chunks, C))


def _each(k, lo, hi, fn):
    with loop(k, hi, lo) as i:
        fn(i)
