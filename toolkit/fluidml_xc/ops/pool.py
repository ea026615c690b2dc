"""Pooling: MaxPool (with optional Indices), AveragePool, LpPool and their Global forms.

Windowed pools loop over the output and, per spatial dim, over the taps that land inside the input:
the tap range of every output position is a build-time table, so padding (and ceil_mode's ragged
last window) costs no test per tap. Global pools are reductions through the kernel builder, the
spatial dims innermost.
"""
from __future__ import annotations

import numpy as np
from ..codegen.scalar import const, llvm_type
from .conv import auto_pad_mode, element, nest, offset, table_nest, tap_range, tap_tables
from .registry import register

FLOATS = ("float32", "float64", "float16")
MAX_TYPES = FLOATS + ("int8", "uint8", "int32", "int64")


def lowest(dtype):
    return const(dtype, float("-inf")) if np.dtype(dtype).kind == "f" else const(dtype, np.iinfo(dtype).min)


def pool_pads(k, in_sp, k_sp, strides, dils, out_sp) -> tuple[list[int], list[int]]:
    """(begin, end) pads per spatial dim, auto_pad resolved."""
    mode, n = auto_pad_mode(k), len(in_sp)
    if mode in ("SAME_UPPER", "SAME_LOWER"):
        begin, end = [], []
        for i in range(n):
            total = max(0, (out_sp[i] - 1) * strides[i] + (k_sp[i] - 1) * dils[i] + 1 - in_sp[i])
            small, big = total // 2, total - total // 2
            begin.append(small if mode == "SAME_UPPER" else big)
            end.append(big if mode == "SAME_UPPER" else small)
        return begin, end
    if mode == "VALID":
        return [0] * n, [0] * n
    pads = [int(p) for p in (k.attr("pads") or [0] * (2 * n))]
    return pads[:n], pads[n:]


def _divisor_tables(k, out_sp, strides, dils, begin, end, k_sp, in_sp, include_pad: bool):
    """Per dim: constant array count[o] of taps averaged (inside the input, or inside the padded input)."""
    tables = []
    for d in range(len(out_sp)):
        counts = []
        for o in range(out_sp[d]):
            if include_pad:
                lo, hi = tap_range(o, strides[d], dils[d], 0, k_sp[d], in_sp[d] + begin[d] + end[d])
            else:
                lo, hi = tap_range(o, strides[d], dils[d], begin[d], k_sp[d], in_sp[d])
            counts.append(hi - lo)
        tables.append(k.constant_array(np.array(counts, dtype=np.float64).astype(k.outputs[0].dtype)))
    return tables


def window_pool(k, kind: str) -> None:
    """kind: max | avg | lp."""
    x, out = k.inputs[0], k.outputs[0]
    indices = k.outputs[1] if len(k.outputs) > 1 else None
    if out.size == 0:
        return
    b, s, dt = k.b, k.s, out.dtype
    sp = x.rank - 2
    k_sp = list(k.attr("kernel_shape"))
    strides = list(k.attr("strides") or [1] * sp)
    dils = list(k.attr("dilations") or [1] * sp)
    begin, end = pool_pads(k, x.shape[2:], k_sp, strides, dils, out.shape[2:])
    tables = tap_tables(k, out.shape[2:], strides, dils, begin, k_sp, x.shape[2:])
    p = int(k.attr("p", 2))
    divisors = None
    if kind == "avg":
        divisors = _divisor_tables(k, out.shape[2:], strides, dils, begin, end, k_sp, x.shape[2:], bool(k.attr("count_include_pad", 0)))
    in_dims = x.shape[2:]

    def point(ix):
        n, c, pos = ix[0], ix[1], ix[2:]
        acc = k.local(llvm_type(dt), lowest(dt) if kind == "max" else const(dt, 0))
        arg = k.local(llvm_type(indices.dtype), const(indices.dtype, 0)) if indices is not None else None

        def tap(ts):
            xi = [offset(k, -begin[d], (pos[d], strides[d]), (ts[d], dils[d])) for d in range(sp)]
            v = b.load(element(k, x.ptr, offset(k, 0, (n, x.strides[0]), (c, x.strides[1]), *zip(xi, x.strides[2:]))))
            old = b.load(acc)
            if kind == "max":
                if arg is not None:
                    better = s.cmp(dt, ">", v, old)
                    flat = offset(k, 0, (n, x.shape[1] * int(np.prod(in_dims))), (c, int(np.prod(in_dims))),
                                  *((xi[d], int(np.prod(in_dims[d + 1:]))) for d in range(sp)))
                    flat = k.index(flat) if isinstance(flat, int) else flat
                    flat = s.cast(np.int64 if k.idx_t.width == 64 else np.int32, indices.dtype, flat)
                    b.store(b.select(better, flat, b.load(arg)), arg)
                    b.store(b.select(better, v, old), acc)
                else:
                    b.store(s.max(dt, old, v), acc)
            elif kind == "lp":
                term = s.mul(dt, v, v) if p == 2 else (s.intrinsic("llvm.fabs", v) if p == 1 else
                                                        s.intrinsic_binary("llvm.pow", s.intrinsic("llvm.fabs", v), const(dt, p)))
                b.store(s.add(dt, old, term), acc)
            else:
                b.store(s.add(dt, old, v), acc)
        table_nest(k, tables, pos, tap)
        result = b.load(acc)
        if kind == "avg":
            count = None
            for d in range(sp):
                cd = b.load(element(k, divisors[d], pos[d]))
                count = cd if count is None else s.mul(dt, count, cd)
            result = b.fdiv(result, count)
        elif kind == "lp":
            result = result if p == 1 else (s.intrinsic("llvm.sqrt", result) if p == 2 else
                                            s.intrinsic_binary("llvm.pow", result, const(dt, 1.0 / p)))
        b.store(result, element(k, out.ptr, offset(k, 0, (n, out.strides[0]), (c, out.strides[1]), *zip(pos, out.strides[2:]))))
        if indices is not None:
            b.store(b.load(arg), element(k, indices.ptr, offset(k, 0, (n, indices.strides[0]), (c, indices.strides[1]), *zip(pos, indices.strides[2:]))))
    nest(k, list(out.shape), point)


@register("MaxPool", dtypes=MAX_TYPES)
def lower_max_pool(k):
    window_pool(k, "max")


@register("AveragePool", dtypes=FLOATS)
def lower_average_pool(k):
    window_pool(k, "avg")


@register("LpPool", dtypes=FLOATS)
def lower_lp_pool(k):
    window_pool(k, "lp")


def global_pool(k, kind: str) -> None:
    x, out = k.inputs[0], k.outputs[0]
    dt, s, b = out.dtype, k.s, k.b
    spatial = list(range(2, x.rank))
    count = int(np.prod(x.shape[2:]))
    p = int(k.attr("p", 2))
    out_acc = out.access(list(range(x.rank)), x.rank)
    if kind == "max":
        k.generic(x.shape, [out_acc], [x.identity_access()], lambda v, i: [v[0]], reduce_dims=spatial,
                  init=[lowest(dt)], combine=lambda accs, vals: [s.max(dt, accs[0], vals[0])])
    elif kind == "avg":
        k.generic(x.shape, [out_acc], [x.identity_access()], lambda v, i: [v[0]], reduce_dims=spatial,
                  init=[const(dt, 0)], finalize=lambda r, i: [s.mul(dt, r[0], const(dt, 1.0 / count))])
    else:
        def term(v, i):
            return [s.mul(dt, v[0], v[0]) if p == 2 else s.intrinsic_binary("llvm.pow", s.intrinsic("llvm.fabs", v[0]), const(dt, p))]

        def root(r, i):
            return [s.intrinsic("llvm.sqrt", r[0]) if p == 2 else s.intrinsic_binary("llvm.pow", r[0], const(dt, 1.0 / p))]
        k.generic(x.shape, [out_acc], [x.identity_access()], term, reduce_dims=spatial, init=[const(dt, 0)], finalize=root)


@register("GlobalAveragePool", dtypes=FLOATS)
def lower_global_average_pool(k):
    global_pool(k, "avg")


@register("GlobalMaxPool", dtypes=MAX_TYPES)
def lower_global_max_pool(k):
    global_pool(k, "max")


@register("GlobalLpPool", dtypes=FLOATS)
def lower_global_lp_pool(k):
    global_pool(k, "lp")
