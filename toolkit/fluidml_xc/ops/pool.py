"""Pooling: MaxPool (with optional Indices), AveragePool, LpPool and their Global forms.

Float Max/AveragePool of rank 3/4 without Indices run explicit vectors (vector_pool): over channels
when both tensors store channels innermost, else over output columns (interior columns in vectors
with constant unrolled kw taps, strided rows as wide load + shuffle; border columns scalar).
Other windowed pools loop over the output and, per spatial dim, over the taps that land inside the input:
the tap range of every output position is a build-time table, so padding (and ceil_mode's ragged
last window) costs no test per tap. Global pools are reductions through the kernel builder, the
spatial dims innermost.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from ..kernels.conv_geometry import auto_pad_mode, tap_range, tap_tables
from ..kernels.conv_plan import as_2d
from ..kernels.epilogue import fill
from ..kernels.loops import element, loop, nest, offset, table_nest
from ..kernels.scalar import const, llvm_type
from ..kernels.vectors import load_lanes, store_lanes
from ..opspec import register

FLOATS = ("float32", "float64", "float16")
MAX_TYPES = FLOATS + ("int8", "uint8", "int32", "int64")


def max_step(b, acc, v, spatial: int):
    """One step of a float max pool window as ONNX Runtime takes it (onnx.reference would give NaN for any NaN;
    ORT is the oracle). 2-D and up (MLAS): the new value unless the running max is larger, so a NaN replaces the
    running max and the next number replaces the NaN - the window is NaN exactly when its last value (row by
    row) is. 1-D: NaN is skipped; a window of NaN only gives the lowest finite value (max_start)."""
    return b.select(max_takes(b, acc, v, spatial), v, acc)


def max_takes(b, acc, v, spatial: int):
    """Whether max_step replaces the running max by v."""
    if spatial == 1:
        return b.fcmp_ordered(">", v, acc)
    return b.fcmp_unordered(">", v, acc)


def max_start(spatial: int, dtype) -> float:
    return float(np.finfo(dtype).min) if spatial == 1 else float("-inf")


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


class _VectorPool:
    """vector_pool's steps: the window geometry and tap tables (__init__; self.ok False when not applicable),
    then vectors over channels (channels_last) or over output columns (columns)."""

    def __init__(self, k, kind: str):
        self.k, self.kind = k, kind
        x, out = self.x, self.out = k.inputs[0], k.outputs[0]
        dt = self.dt = out.dtype
        self.ok = False
        if len(k.outputs) > 1 and k.outputs[1] is not None or x.rank not in (3, 4) or np.dtype(dt).kind != "f":
            return
        V = self.V = k.lanes(dt)
        if V < 2:
            return
        self.ok = True
        sp = self.sp = x.rank - 2
        k_sp = list(k.attr("kernel_shape"))
        strides = list(k.attr("strides") or [1] * sp)
        dils = list(k.attr("dilations") or [1] * sp)
        begin, end = pool_pads(k, x.shape[2:], k_sp, strides, dils, out.shape[2:])
        include_pad = bool(k.attr("count_include_pad", 0))
        (self.N, self.C, H, W), self.xs = as_2d(x.shape, x.strides)
        (_, _, OH, OW), self.os_ = as_2d(out.shape, out.strides)
        self.H, self.W, self.OH, self.OW = H, W, OH, OW
        if sp == 1:
            k_sp, strides, dils, begin, end = [1, *k_sp], [1, *strides], [1, *dils], [0, *begin], [0, *end]
        KH, KW = self.KH, self.KW = k_sp
        (sh, sw), (dh, dw), (ph, pw) = (self.sh, self.sw), (self.dh, self.dw), (self.ph, self.pw) = strides, dils, begin
        self.tables = tap_tables(k, (OH, OW), (sh, sw), (dh, dw), (ph, pw), (KH, KW), (H, W))
        counts = self.counts = None
        if kind == "avg":
            counts = self.counts = []
            for d, (o_n, s_, d_, t_, n_) in enumerate(((OH, sh, dh, KH, H), (OW, sw, dw, KW, W))):
                c_ = [tap_range(o, s_, d_, 0, t_, n_ + begin[d] + end[d]) if include_pad else tap_range(o, s_, d_, begin[d], t_, n_) for o in range(o_n)]
                counts.append(k.constant_array(np.array([hi - lo for lo, hi in c_], dtype=np.float64).astype(dt)))
        self.scalar_t = llvm_type(dt)

    def combine(self, acc, v):
        if self.kind == "max":
            return max_step(self.k.b, acc, v, self.sp)
        return self.k.b.fadd(acc, v)

    def start(self, ty):
        return fill(ty, max_start(self.sp, self.dt) if self.kind == "max" else 0.0)

    def finish(self, acc, oh, ow_count):
        """avg: divide by the window size (rows from the table; columns ow_count: a constant or loaded)."""
        if self.kind != "avg":
            return acc
        k, b = self.k, self.k.b
        ch = b.load(element(k, self.counts[0], oh))
        cnt = b.fmul(ch, ow_count)
        if isinstance(acc.type, ir.VectorType):
            cnt = b.shuffle_vector(b.insert_element(ir.Constant(acc.type, None), cnt, ir.Constant(ir.IntType(32), 0)),
                                   ir.Constant(acc.type, None), ir.Constant(ir.VectorType(ir.IntType(32), acc.type.count), [0] * acc.type.count))
        return b.fdiv(acc, cnt)

    def taps_h(self, oh, fn):
        k, b, tables = self.k, self.k.b, self.tables
        lo, hi = b.load(element(k, tables[0][0], oh)), b.load(element(k, tables[0][1], oh))
        with loop(k, hi, lo) as kh:
            fn(kh)

    def emit(self):
        if self.xs[1] == 1 and self.os_[1] == 1 and self.C >= self.V:
            self.channels_last()
        else:
            self.columns()

    def channels_last(self):
        """Channels innermost: vectors of channels, every tap range from the tables; output pixels as tiles."""
        k, b, x, out, V, C, xs, os_ = self.k, self.k.b, self.x, self.out, self.V, self.C, self.xs, self.os_
        tables, counts, combine, start, finish = self.tables, self.counts, self.combine, self.start, self.finish
        (sh, sw), (dh, dw), (ph, pw) = (self.sh, self.sw), (self.dh, self.dw), (self.ph, self.pw)
        vt = ir.VectorType(self.scalar_t, V)
        starts = list(range(0, C - V + 1, V))
        if C % V:
            starts.append(C - V)

        def pixel(n, oh, ow):
            lo_w, hi_w = b.load(element(k, tables[1][0], ow)), b.load(element(k, tables[1][1], ow))
            for c0 in starts:
                acc = k.local(vt, start(vt))

                def row(kh):
                    ih = offset(k, -ph, (oh, sh), (kh, dh))
                    with loop(k, hi_w, lo_w) as kw:
                        iw = offset(k, -pw, (ow, sw), (kw, dw))
                        off = offset(k, c0, (n, xs[0]), (ih, xs[2]), (iw, xs[3]))
                        b.store(combine(b.load(acc), load_lanes(k, x.ptr, off, V, 1, False)), acc)
                self.taps_h(oh, row)
                cw = b.load(element(k, counts[1], ow)) if counts else None
                value = finish(b.load(acc), oh, cw)
                store_lanes(k, out.ptr, offset(k, c0, (n, os_[0]), (oh, os_[2]), (ow, os_[3])), value, V, 1)
        work = float(self.N) * C * self.OH * self.OW * self.KH * self.KW
        k.loops_tiled((self.N, self.OH, self.OW), [0, 1, 2], [None] * 3, lambda ix: pixel(*ix), work)  # output pixels as tiles

    def columns(self):
        """Output columns in vectors: interior columns U x V at a time with constant kw taps, the rest scalar."""
        k, b, x, out, V, xs, os_, W, OW, KW = self.k, self.k.b, self.x, self.out, self.V, self.xs, self.os_, self.W, self.OW, self.KW
        tables, counts, combine, start, finish, scalar_t = self.tables, self.counts, self.combine, self.start, self.finish, self.scalar_t
        (sh, sw), (dh, dw), (ph, pw) = (self.sh, self.sw), (self.dh, self.dw), (self.ph, self.pw)
        wide = xs[3] == 1 and 1 < sw <= 4
        margin = sw - 1 if wide else 0
        full = [o for o in range(OW) if tap_range(o, sw, dw, pw, KW, W) == (0, KW) and o * sw + (KW - 1) * dw - pw + margin <= W - 1]
        lo, hi = (full[0], full[-1] + 1) if full else (0, 0)
        if hi - lo < V:
            lo = hi = 0
        step = sw * xs[3]

        def scalar_col(n, c, oh, ow):
            acc = k.local(scalar_t, start(scalar_t))
            lo_w, hi_w = b.load(element(k, tables[1][0], ow)), b.load(element(k, tables[1][1], ow))

            def row(kh):
                ih = offset(k, -ph, (oh, sh), (kh, dh))
                with loop(k, hi_w, lo_w) as kw:
                    iw = offset(k, -pw, (ow, sw), (kw, dw))
                    v = b.load(element(k, x.ptr, offset(k, 0, (n, xs[0]), (c, xs[1]), (ih, xs[2]), (iw, xs[3]))))
                    b.store(combine(b.load(acc), v), acc)
            self.taps_h(oh, row)
            cw = b.load(element(k, counts[1], ow)) if counts else None
            b.store(finish(b.load(acc), oh, cw), element(k, out.ptr, offset(k, 0, (n, os_[0]), (c, os_[1]), (oh, os_[2]), (ow, os_[3]))))

        def vector_cols(n, c, oh, ow, U):
            vt = ir.VectorType(scalar_t, V)
            accs = [k.local(vt, start(vt)) for _ in range(U)]

            def row(kh):
                ih = offset(k, -ph, (oh, sh), (kh, dh))
                base = offset(k, -pw * xs[3], (n, xs[0]), (c, xs[1]), (ih, xs[2]), (ow, step))
                for kw in range(KW):
                    for u in range(U):
                        v = load_lanes(k, x.ptr, offset(k, kw * dw * xs[3] + u * V * step, (base, 1)), V, step, wide)
                        b.store(combine(b.load(accs[u]), v), accs[u])
            self.taps_h(oh, row)
            for u in range(U):
                value = finish(b.load(accs[u]), oh, ir.Constant(scalar_t, float(KW)))
                store_lanes(k, out.ptr, offset(k, u * V * os_[3], (n, os_[0]), (c, os_[1]), (oh, os_[2]), (ow, os_[3])), value, V, os_[3])

        def span(a, z, fn):
            if z - a == 1:
                fn(a)
            elif z > a:
                with loop(k, z, a) as i:
                    fn(i)

        def out_row(n, c, oh):
            span(0, lo, lambda ow: scalar_col(n, c, oh, ow))
            width = hi - lo
            U = 2 if width >= 2 * V else 1
            tiles = width // (U * V)
            if tiles == 1:
                vector_cols(n, c, oh, lo, U)
            elif tiles:
                with loop(k, tiles) as t:
                    vector_cols(n, c, oh, offset(k, lo, (t, U * V)), U)
            pos = lo + tiles * U * V
            while hi - pos >= V:
                vector_cols(n, c, oh, pos, 1)
                pos += V
            if hi > pos and width >= V:
                vector_cols(n, c, oh, hi - V, 1)
            span(hi, OW, lambda ow: scalar_col(n, c, oh, ow))
        # rows narrower than a vector take the scalar taps: each costs about what a vector of V taps does
        work = float(self.N) * self.C * self.OH * OW * self.KH * KW * (V if OW < V else 1)
        k.loops_tiled((self.N, self.C, self.OH), [0, 1, 2], [None] * 3, lambda ix: out_row(*ix), work)


def vector_pool(k, kind: str) -> bool:
    """Max/average pool of a rank-3/4 float tensor with explicit vectors; False when not applicable.

    Lanes run over channels when both tensors store channels innermost (unit stride), else over
    output columns: interior columns (whole window inside the input) in vectors of V with a
    constant, unrolled kw range (strided reads as one wide load + shuffle when the row is
    contiguous); border columns one at a time with their tap ranges from build-time tables.
    """
    pool = _VectorPool(k, kind)
    if not pool.ok:
        return False
    pool.emit()
    return True


def window_pool(k, kind: str) -> None:
    """kind: max | avg | lp."""
    x, out = k.inputs[0], k.outputs[0]
    indices = k.outputs[1] if len(k.outputs) > 1 else None
    if out.size == 0:
        return
    if kind in ("max", "avg") and vector_pool(k, kind):
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
    column_major = int(k.attr("storage_order", 0)) == 1
    spatial_mult = [int(np.prod(in_dims[:d] if column_major else in_dims[d + 1:])) for d in range(sp)]

    def point(ix):
        n, c, pos = ix[0], ix[1], ix[2:]
        first = const(dt, max_start(sp, dt)) if np.dtype(dt).kind == "f" else lowest(dt)
        acc = k.local(llvm_type(dt), first if kind == "max" else const(dt, 0))
        arg = k.local(llvm_type(indices.dtype), const(indices.dtype, 0)) if indices is not None else None

        def tap(ts):
            xi = [offset(k, -begin[d], (pos[d], strides[d]), (ts[d], dils[d])) for d in range(sp)]
            v = b.load(element(k, x.ptr, offset(k, 0, (n, x.strides[0]), (c, x.strides[1]), *zip(xi, x.strides[2:]))))
            old = b.load(acc)
            if kind == "max":
                if arg is not None:
                    better = max_takes(b, old, v, sp) if np.dtype(dt).kind == "f" else s.cmp(dt, ">", v, old)
                    flat = offset(k, 0, (n, x.shape[1] * int(np.prod(in_dims))), (c, int(np.prod(in_dims))),
                                  *((xi[d], spatial_mult[d]) for d in range(sp)))
                    flat = k.index(flat) if isinstance(flat, int) else flat
                    flat = s.cast(np.int64 if k.idx_t.width == 64 else np.int32, indices.dtype, flat)
                    b.store(b.select(better, flat, b.load(arg)), arg)
                    b.store(b.select(better, v, old), acc)
                else:
                    b.store(max_step(b, old, v, sp) if np.dtype(dt).kind == "f" else s.max(dt, old, v), acc)
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


@register("MaxPool", dtypes=MAX_TYPES, strided=True, image=True, heavy=True, cost_kind="pool")
def lower_max_pool(k):
    window_pool(k, "max")


@register("AveragePool", dtypes=FLOATS, strided=True, image=True, heavy=True, cost_kind="pool")
def lower_average_pool(k):
    window_pool(k, "avg")


@register("LpPool", dtypes=FLOATS, heavy=True)
def lower_lp_pool(k):
    window_pool(k, "lp")


def _nan_max(s, dt, a, b):
    """max propagating NaN; floats through llvm.maximum, which the loop vectorizer reduces in vectors."""
    # float32 only: llvm.maximum on double trips an LLVM assertion when legalizing for armv7
    return s.intrinsic_binary("llvm.maximum", a, b) if np.dtype(dt) == np.float32 else s.maximum(dt, a, b)


def global_pool(k, kind: str) -> None:
    x, out = k.inputs[0], k.outputs[0]
    dt, s = out.dtype, k.s
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


@register("GlobalAveragePool", dtypes=FLOATS, strided=True, image=True, cost_kind="global_pool")
def lower_global_average_pool(k):
    global_pool(k, "avg")


@register("GlobalMaxPool", dtypes=MAX_TYPES, strided=True, image=True, cost_kind="global_pool")
def lower_global_max_pool(k):
    global_pool(k, "max")


@register("GlobalLpPool", dtypes=FLOATS, heavy=True)
def lower_global_lp_pool(k):
    global_pool(k, "lp")
