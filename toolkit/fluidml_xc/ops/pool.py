"""Pooling: MaxPool (with optional Indices), AveragePool, LpPool (the Global forms: ops/global_pool.py).

Float Max/AveragePool of rank 3/4 without Indices run explicit vectors (vector_pool): over channels
when both tensors store channels innermost, else over output columns (interior columns in vectors
with constant unrolled kw taps, strided rows as wide load + shuffle; border columns scalar).
Other windowed pools loop over the output and, per spatial dim, over the taps that land inside the input:
the tap range of every output position is a build-time table, so padding (and ceil_mode's ragged
last window) costs no test per tap. Over dims that vary at run time (ir.Tensor.dyn) the tap ranges and divisors
of a varying dim are computed at run time, and the vector columns run to the run-time end of the padding-free
interior with a vector and scalar tail.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from ..kernels.conv_geometry import auto_pad_mode, runtime_tap_range, same_pads, tap_range, tap_tables
from ..kernels.conv_plan import as_2d, padding_free
from ..kernels.epilogue import fill
from ..kernels.loops import element, loop, nest, offset, table_nest
from ..kernels.scalar import const, llvm_type
from ..kernels.vectors import column_lanes, load_lanes, store_lanes
from ..opspec import register
from .conv.generic import nest_ranges

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
        include_pad = self.include_pad = bool(k.attr("count_include_pad", 0))
        (self.N, self.C, H, W), self.xs = as_2d(x.shape, x.strides)
        (_, _, OH, OW), self.os_ = as_2d(out.shape, out.strides)
        self.H, self.W, self.OH, self.OW = H, W, OH, OW
        xd, od = (as_2d(op.dyn or op.shape, op.strides)[0] for op in (x, out))
        self.vary = tuple(any(not isinstance(d[a], int) for d in (xd, od)) for a in (2, 3))
        """Do the rows / columns vary at run time? (Their tap ranges and counts are then computed at run time.)"""
        if k.dynamic:
            begin, end = same_pads(k, x.dyn[2:], out.dyn[2:], k_sp, strides, dils, k.graph.symbols) or (begin, end)
        self.rt = {key: k.dim_value(d) for key, d in zip(("N", "H", "W", "OH", "OW"), (xd[0], xd[2], xd[3], od[2], od[3]))}
        self.spans = (xd[3], od[3])
        if sp == 1:
            k_sp, strides, dils, begin, end = [1, *k_sp], [1, *strides], [1, *dils], [0, *begin], [0, *end]
        KH, KW = self.KH, self.KW = k_sp
        (sh, sw), (dh, dw), (ph, pw) = (self.sh, self.sw), (self.dh, self.dw), (self.ph, self.pw) = strides, dils, begin
        self.end = end
        self.cap = {"N": self.N, "H": H, "W": W, "OH": OH, "OW": OW}
        if any(self.vary):
            geo = ((OH, sh, dh, ph, KH, H), (OW, sw, dw, pw, KW, W))
            self.tables = [None if self.vary[a] else tap_tables(k, *((v,) for v in geo[a]))[0] for a in (0, 1)]
        else:
            self.tables = tap_tables(k, (OH, OW), (sh, sw), (dh, dw), (ph, pw), (KH, KW), (H, W))
        counts = self.counts = None
        if kind == "avg":
            counts = self.counts = []
            for d, (o_n, s_, d_, t_, n_) in enumerate(((OH, sh, dh, KH, H), (OW, sw, dw, KW, W))):
                if self.vary[d]:
                    counts.append(None)
                    continue
                c_ = [tap_range(o, s_, d_, 0, t_, n_ + begin[d] + end[d]) if include_pad else tap_range(o, s_, d_, begin[d], t_, n_) for o in range(o_n)]
                counts.append(k.constant_array(np.array([hi - lo for lo, hi in c_], dtype=np.float64).astype(dt)))
        self.scalar_t = llvm_type(dt)

    def taps(self, axis: int, o):
        """[lo, hi) of the taps of output row (axis 0) or column (1) o inside the input: from the build-time table,
        or computed at run time when that axis varies."""
        k, b = self.k, self.k.b
        if not self.vary[axis]:
            lo, hi = self.tables[axis]
            return b.load(element(k, lo, o)), b.load(element(k, hi, o))
        o = k.index(o) if isinstance(o, int) else o
        if axis == 0:
            return runtime_tap_range(k, o, self.sh, self.dh, self.ph, self.KH, self.rt["H"])
        return runtime_tap_range(k, o, self.sw, self.dw, self.pw, self.KW, self.rt["W"])

    def count(self, axis: int, o):
        """The average's divisor along one axis at output position o, as a compute-type value."""
        k, b = self.k, self.k.b
        if not self.vary[axis]:
            return b.load(element(k, self.counts[axis], o))
        if self.include_pad:
            o = k.index(o) if isinstance(o, int) else o
            size, pad = self.rt["HW"[axis]], self.ph if axis == 0 else self.pw
            size = b.add(size if not isinstance(size, int) else k.index(size), k.index(pad + self.end[axis]))
            geo = (self.sh, self.dh, 0, self.KH) if axis == 0 else (self.sw, self.dw, 0, self.KW)
            lo, hi = runtime_tap_range(k, o, *geo, size)
        else:
            lo, hi = self.taps(axis, o)
        return k.s.cast(np.int64 if k.idx_t.width == 64 else np.int32, self.dt, b.sub(hi, lo))

    def tiled(self, dims, body, work: float):
        """body(index values) over `dims` (keys of self.rt, or ints) through k.loops_tiled: run-time extents where
        they vary, the parallel split planned at the capacity."""
        extents = [self.rt[d] if isinstance(d, str) else d for d in dims]
        capacity = None if all(isinstance(e, int) for e in extents) else [self.cap[d] if isinstance(d, str) else d for d in dims]
        self.k.loops_tiled(tuple(extents), list(range(len(dims))), [None] * len(dims), lambda ix: body(*ix), work, capacity)

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
        b = self.k.b
        ch = self.count(0, oh)
        cnt = b.fmul(ch, ow_count)
        if isinstance(acc.type, ir.VectorType):
            cnt = b.shuffle_vector(b.insert_element(ir.Constant(acc.type, None), cnt, ir.Constant(ir.IntType(32), 0)),
                                   ir.Constant(acc.type, None), ir.Constant(ir.VectorType(ir.IntType(32), acc.type.count), [0] * acc.type.count))
        return b.fdiv(acc, cnt)

    def taps_h(self, oh, fn):
        lo, hi = self.taps(0, oh)
        with loop(self.k, hi, lo) as kh:
            fn(kh)

    def emit(self):
        if self.xs[1] == 1 and self.os_[1] == 1 and self.C >= self.V:
            self.channels_last()
        else:
            self.columns()

    def channels_last(self):
        """Channels innermost: vectors of channels, every tap range from the tables; output pixels as tiles."""
        k, b, x, out, V, C, xs, os_ = self.k, self.k.b, self.x, self.out, self.V, self.C, self.xs, self.os_
        counts, combine, start, finish = self.counts, self.combine, self.start, self.finish
        (sh, sw), (dh, dw), (ph, pw) = (self.sh, self.sw), (self.dh, self.dw), (self.ph, self.pw)
        vt = ir.VectorType(self.scalar_t, V)
        starts = list(range(0, C - V + 1, V))
        if C % V:
            starts.append(C - V)

        def pixel(n, oh, ow):
            lo_w, hi_w = self.taps(1, ow)
            for c0 in starts:
                acc = k.local(vt, start(vt))

                def row(kh):
                    ih = offset(k, -ph, (oh, sh), (kh, dh))
                    with loop(k, hi_w, lo_w) as kw:
                        iw = offset(k, -pw, (ow, sw), (kw, dw))
                        off = offset(k, c0, (n, xs[0]), (ih, xs[2]), (iw, xs[3]))
                        b.store(combine(b.load(acc), load_lanes(k, x.ptr, off, V, 1, False)), acc)
                self.taps_h(oh, row)
                cw = self.count(1, ow) if counts else None
                value = finish(b.load(acc), oh, cw)
                store_lanes(k, out.ptr, offset(k, c0, (n, os_[0]), (oh, os_[2]), (ow, os_[3])), value, V, 1)
        work = float(self.N) * C * self.OH * self.OW * self.KH * self.KW
        self.tiled(("N", "OH", "OW"), pixel, work)  # output pixels as tiles

    def columns(self):
        """Output columns in vectors: interior columns U x V at a time with constant kw taps, the rest scalar."""
        k, b, x, out, V, xs, os_, W, OW, KW = self.k, self.k.b, self.x, self.out, self.V, self.xs, self.os_, self.W, self.OW, self.KW
        counts, combine, start, finish, scalar_t = self.counts, self.combine, self.start, self.finish, self.scalar_t
        (sh, sw), (dh, dw), (ph, pw) = (self.sh, self.sw), (self.dh, self.dw), (self.ph, self.pw)
        wide = xs[3] == 1 and 1 < sw <= 4
        margin = sw - 1 if wide else 0
        full = [o for o in range(OW) if tap_range(o, sw, dw, pw, KW, W) == (0, KW) and o * sw + (KW - 1) * dw - pw + margin <= W - 1]
        lo, hi = (full[0], full[-1] + 1) if full else (0, 0)
        if not self.vary[1]:
            V = column_lanes(V, hi - lo)
        if hi - lo < V:
            lo = hi = 0
        step = sw * xs[3]

        def scalar_col(n, c, oh, ow):
            acc = k.local(scalar_t, start(scalar_t))
            lo_w, hi_w = self.taps(1, ow)

            def row(kh):
                ih = offset(k, -ph, (oh, sh), (kh, dh))
                with loop(k, hi_w, lo_w) as kw:
                    iw = offset(k, -pw, (ow, sw), (kw, dw))
                    v = b.load(element(k, x.ptr, offset(k, 0, (n, xs[0]), (c, xs[1]), (ih, xs[2]), (iw, xs[3]))))
                    b.store(combine(b.load(acc), v), acc)
            self.taps_h(oh, row)
            cw = self.count(1, ow) if counts else None
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
        if self.vary[1]:
            out_row = self.varying_row(scalar_col, vector_cols, margin)
        # rows narrower than a column vector take the scalar taps: each costs about what a vector of V taps does
        # (fluid/costs.py prices the same)
        work = float(self.N) * self.C * self.OH * OW * self.KH * KW * (self.V if OW < V else 1)
        self.tiled(("N", self.C, "OH"), out_row, work)

    def varying_row(self, scalar_col, vector_cols, margin: int):
        """out_row over a run-time width: the columns before the interior scalar (while they exist), the interior to
        its run-time end in tiles of 2 vectors, then single vectors (the last overlapping the one before, or scalar
        columns when the interior is narrower than a vector), the columns after it scalar with run-time taps."""
        k, b, V = self.k, self.k.b, self.V
        ranges = k.graph.symbols
        lo, hi = padding_free(self.spans[1], self.sw, self.dw, self.pw, self.KW, self.spans[0], margin, ranges)
        hi, OW = k.dim_value(hi), self.rt["OW"]
        hi, OW = (k.index(v) if isinstance(v, int) else v for v in (hi, OW))

        def out_row(n, c, oh):
            for ow in range(lo):
                with b.if_then(b.icmp_signed("<", k.index(ow), OW)):
                    scalar_col(n, c, oh, ow)
            width = b.sub(hi, k.index(lo))
            tiles = b.sdiv(width, k.index(2 * V))
            with loop(k, tiles) as t:
                vector_cols(n, c, oh, offset(k, lo, (t, 2 * V)), 2)
            pos = offset(k, lo, (tiles, 2 * V))
            with b.if_then(b.icmp_signed(">=", b.sub(hi, pos), k.index(V))):
                vector_cols(n, c, oh, pos, 1)
            with b.if_then(b.icmp_signed("!=", b.srem(width, k.index(V)), k.index(0))):
                with b.if_else(b.icmp_signed(">=", width, k.index(V))) as (whole, part):
                    with whole:
                        vector_cols(n, c, oh, b.sub(hi, k.index(V)), 1)
                    with part:
                        with loop(k, hi, k.index(lo)) as ow:
                            scalar_col(n, c, oh, ow)
            with loop(k, OW, hi) as ow:
                scalar_col(n, c, oh, ow)
        return out_row


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
    if out.size == 0:
        return
    if kind in ("max", "avg") and vector_pool(k, kind):
        return
    b = k.b
    sp = x.rank - 2
    k_sp = list(k.attr("kernel_shape"))
    strides = list(k.attr("strides") or [1] * sp)
    dils = list(k.attr("dilations") or [1] * sp)
    begin, end = pool_pads(k, x.shape[2:], k_sp, strides, dils, out.shape[2:])
    if k.dynamic:
        window_pool_varying(k, kind, k_sp, strides, dils, *(same_pads(k, x.dyn[2:], out.dyn[2:], k_sp, strides, dils,
                                                                       k.graph.symbols) or (begin, end)))
        return
    tables = tap_tables(k, out.shape[2:], strides, dils, begin, k_sp, x.shape[2:])
    divisors = None
    if kind == "avg":
        divisors = _divisor_tables(k, out.shape[2:], strides, dils, begin, end, k_sp, x.shape[2:], bool(k.attr("count_include_pad", 0)))
    in_dims = x.shape[2:]
    column_major = int(k.attr("storage_order", 0)) == 1
    spatial_mult = [int(np.prod(in_dims[:d] if column_major else in_dims[d + 1:])) for d in range(sp)]

    def flat_index(n, c, xi):
        flat = offset(k, 0, (n, x.shape[1] * int(np.prod(in_dims))), (c, int(np.prod(in_dims))),
                      *((xi[d], spatial_mult[d]) for d in range(sp)))
        return k.index(flat) if isinstance(flat, int) else flat
    _window_nest(k, kind, list(out.shape), begin, strides, dils, lambda pos, fn: table_nest(k, tables, pos, fn),
                 lambda d, o: b.load(element(k, divisors[d], o)), flat_index)


def window_pool_varying(k, kind: str, k_sp, strides, dils, begin, end) -> None:
    """window_pool over dims that vary at run time: tap ranges, divisors and Indices' flat positions computed from
    the actual sizes."""
    x, out, b = k.inputs[0], k.outputs[0], k.b
    sp = x.rank - 2
    sizes = [k.extent(x, 2 + d) for d in range(sp)]
    values = [k.index(v) if isinstance(v, int) else v for v in sizes]
    include_pad = bool(k.attr("count_include_pad", 0))

    def spans(pos):
        return [runtime_tap_range(k, pos[d], strides[d], dils[d], begin[d], k_sp[d], sizes[d]) for d in range(sp)]

    def taps_of(pos, fn):
        nest_ranges(k, spans(pos), fn)

    def divisor(d, o):
        if include_pad:
            padded = b.add(values[d], k.index(begin[d] + end[d]))
            lo, hi = runtime_tap_range(k, o, strides[d], dils[d], 0, k_sp[d], padded)
        else:
            lo, hi = runtime_tap_range(k, o, strides[d], dils[d], begin[d], k_sp[d], sizes[d])
        return k.s.cast(np.int64 if k.idx_t.width == 64 else np.int32, out.dtype, b.sub(hi, lo))

    column_major = int(k.attr("storage_order", 0)) == 1

    def flat_index(n, c, xi):
        order = list(range(sp)) if not column_major else list(reversed(range(sp)))
        flat = b.add(b.mul(n, k.index(x.shape[1])), c)
        for d in order:  # Horner over the actual sizes: row-major, or column-major spatial dims
            flat = b.add(b.mul(flat, values[d]), xi[d] if not isinstance(xi[d], int) else k.index(xi[d]))
        return flat
    _window_nest(k, kind, k.extents(out), begin, strides, dils, taps_of, divisor, flat_index)


def _window_nest(k, kind: str, extents, begin, strides, dils, taps_of, divisor, flat_index) -> None:
    """The scalar window pool over output `extents`: taps_of(pos, fn) runs fn over each position's taps,
    divisor(d, o) is the average's count along dim d, flat_index(n, c, input position) MaxPool's Indices value."""
    x, out = k.inputs[0], k.outputs[0]
    indices = k.outputs[1] if len(k.outputs) > 1 else None
    b, s, dt = k.b, k.s, out.dtype
    sp = x.rank - 2
    p = int(k.attr("p", 2))

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
                    flat = s.cast(np.int64 if k.idx_t.width == 64 else np.int32, indices.dtype, flat_index(n, c, xi))
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
        taps_of(pos, tap)
        result = b.load(acc)
        if kind == "avg":
            count = None
            for d in range(sp):
                cd = divisor(d, pos[d])
                count = cd if count is None else s.mul(dt, count, cd)
            result = b.fdiv(result, count)
        elif kind == "lp":
            result = result if p == 1 else (s.intrinsic("llvm.sqrt", result) if p == 2 else
                                            s.intrinsic_binary("llvm.pow", result, const(dt, 1.0 / p)))
        b.store(result, element(k, out.ptr, offset(k, 0, (n, out.strides[0]), (c, out.strides[1]), *zip(pos, out.strides[2:]))))
        if indices is not None:
            b.store(b.load(arg), element(k, indices.ptr, offset(k, 0, (n, indices.strides[0]), (c, indices.strides[1]), *zip(pos, indices.strides[2:]))))
    nest(k, list(extents), point)


@register("MaxPool", dtypes=MAX_TYPES, strided=True, image=True, heavy=True, cost_kind="pool", runtime_extents=True)
def lower_max_pool(k):
    window_pool(k, "max")


@register("AveragePool", dtypes=FLOATS, strided=True, image=True, heavy=True, cost_kind="pool", runtime_extents=True)
def lower_average_pool(k):
    window_pool(k, "avg")


@register("LpPool", dtypes=FLOATS, heavy=True, runtime_extents=True)
def lower_lp_pool(k):
    window_pool(k, "lp")
