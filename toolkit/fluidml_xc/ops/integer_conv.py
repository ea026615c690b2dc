"""ConvInteger and QLinearConv (ops/integer.py): the blocked int8 GEMM form (integer_conv_gemm.py) where the
shapes fit, else direct loops: int32 vector blocks over the interior columns of each output row, a stack
row for the edges, or one bounds-checked point at a time for very wide kernels."""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from ..kernels.epilogue import fused_epilogue
from . import qgemm
from .integer import F64, conv_window, opt_input, param_access, requantize, tap_columns, widen
from .integer_conv_gemm import fast_conv
from ..opspec import register

MAX_UNROLLED_TAPS = 32
"""Kernel widths up to this unroll their taps along the last spatial dim (bounds known at build time)."""


class _DirectConv:
    """out[n, m, o...] = epilogue(sum over c, kernel of (x - x_zp) * (w[m] - w_zp[m]) (+ bias[m]), m).

    Output rows (the last spatial dim) one at a time. Every kernel tap along the row reads inside the
    image for one range of output columns, known at build time; where all taps do (the interior),
    blocks of V columns accumulate in int32 vector registers over channels and taps (x as one vector
    load per tap, the weight splat). The other columns (padding edges, the interior's tail) accumulate
    in an int32 stack row, tap by tap over their valid range. Padding contributes nothing: it stands
    for the zero point."""

    def __init__(self, k, x, w, x_zp, w_zp, bias, epilogue, vec_epilogue, window):
        out = self.out = k.outputs[0]
        self.k, self.x, self.w, self.x_zp, self.w_zp, self.bias = k, x, w, x_zp, w_zp, bias
        self.epilogue, self.vec_epilogue = epilogue, vec_epilogue
        self.spatial, self.kernel, self.strides, self.dilations, self.begins = window
        b = k.b
        group = int(k.attr("group", 1))
        self.n_batch, self.m_out = out.shape[0], out.shape[1]
        self.cg = w.shape[1]
        self.mg = self.m_out // group
        self.i32 = ir.IntType(32)
        ow_n, iw_n = out.shape[-1], x.shape[-1]
        s_w, d_w, p_w = self.strides[-1], self.dilations[-1], self.begins[-1]
        self.x_acc, self.w_acc, self.o_acc = x.identity_access(), w.identity_access(), out.identity_access()
        self.xz = param_access(k, x_zp, "x_zero_point", 1, None, None)
        self.wz = param_access(k, w_zp, "w_zero_point", 1, 0, self.m_out)
        self.bias_acc = param_access(k, bias, "B", 1, 0, self.m_out)
        self.zero_idx = [k.index(0)]
        with b.goto_entry_block():
            self.row = b.alloca(self.i32, size=ir.Constant(ir.IntType(32), ow_n))
        self.taps_w = taps_w = [tap_columns(kw, d_w, p_w, s_w, iw_n, ow_n) for kw in range(self.kernel[-1])]
        c_lo, c_hi = max(t[1] for t in taps_w), min(t[2] for t in taps_w)
        # vector blocks over [c_lo, c_hi): full-width ones, then (stride 1) at most one of each halved width (>= 4 lanes)
        segments, vec_end = [], c_lo
        width = k.lanes(np.int32)
        while width > 1:
            count = max(0, c_hi - vec_end) // width
            if count:
                segments.append((vec_end, count, width))
                vec_end += count * width
            if width <= 4 or s_w != 1:  # (strided columns are gathered lane by lane: the scalar loop does as well)
                break
            width //= 2
        self.segments = segments
        self.blocks = sum(seg[1] for seg in segments)
        self.scalar_ranges = [(0, ow_n)] if not self.blocks else [(0, c_lo), (vec_end, ow_n)]
        self.x_col = x.strides[-1] * s_w
        self.mr = next(r for r in (4, 2, 1) if self.mg % r == 0) if self.blocks else 1

    def emit(self):
        k, b, mr = self.k, self.k.b, self.mr
        with k.for_range(self.n_batch) as ni, k.for_range(self.m_out // mr) as mb:
            self.ni = ni
            self.m0 = b.mul(mb, k.index(mr))
            self.g = b.sdiv(self.m0, k.index(self.mg))
            self.x_zero = widen(k, self.x_zp.dtype, k.load(self.xz, self.zero_idx)) if self.xz is not None else None
            out_idx = [ni, self.m0] + [None] * self.spatial
            k.loops(self.out.shape, list(range(2, 1 + self.spatial)), out_idx, self.out_row)

    def cell(self, ow):
        return self.k.b.gep(self.row, [ow], inbounds=True)

    def w_zero(self, mi):
        k = self.k
        return widen(k, self.w_zp.dtype, k.load(self.wz, [mi])) if self.wz is not None else None

    def weight(self, mi, ci, kidx, kw, zero):
        k, b = self.k, self.k.b
        wv = widen(k, self.w.dtype, k.load(self.w_acc, [mi, ci, *kidx, k.index(kw)]))
        return b.sub(wv, zero) if zero is not None else wv

    def over_taps(self, idx, body):
        """body(kidx, pos) for every tap of the outer kernel dims that reads inside the image."""
        k, b, spatial, x = self.k, self.k.b, self.spatial, self.x
        strides, dilations, begins = self.strides, self.dilations, self.begins

        def taps(kidx):
            ok, pos = None, []
            for s in range(spatial - 1):
                p = b.sub(b.add(b.mul(idx[2 + s], k.index(strides[s])), b.mul(kidx[s], k.index(dilations[s]))), k.index(begins[s]))
                inside = b.and_(b.icmp_signed(">=", p, k.index(0)), b.icmp_signed("<", p, k.index(x.shape[2 + s])))
                ok = inside if ok is None else b.and_(ok, inside)
                pos.append(p)
            if ok is None:
                body(kidx, pos)
            else:
                with b.if_then(ok):
                    body(kidx, pos)
        k.loops(self.kernel[:-1], list(range(spatial - 1)), [None] * (spatial - 1), taps)

    def finish(self, idx, mi, ow, acc):
        k, b = self.k, self.k.b
        if self.bias_acc is not None:
            acc = b.add(acc, widen(k, self.bias.dtype, k.load(self.bias_acc, [mi])))
        oidx = list(idx)
        oidx[1], oidx[2 + self.spatial - 1] = mi, ow
        k.store(self.o_acc, oidx, self.epilogue(acc, mi))

    def edges(self, idx, mi):
        """The columns outside the vector blocks of output channel mi: tap by tap into the stack row."""
        k, b, x, cell, scalar_ranges = self.k, self.k.b, self.x, self.cell, self.scalar_ranges
        ni, g, cg, x_zero, s_w = self.ni, self.g, self.cg, self.x_zero, self.strides[-1]
        for lo, hi in scalar_ranges:
            if lo < hi:
                with k.for_range(hi, lo) as ow:
                    b.store(ir.Constant(self.i32, 0), cell(ow))
        zero = self.w_zero(mi)

        def scalar_taps(kidx, pos):
            with k.for_range(cg) as ci:
                c = b.add(b.mul(g, k.index(cg)), ci)
                for kw, (off, lo_kw, hi_kw) in enumerate(self.taps_w):
                    ranges = [(max(lo, lo_kw), min(hi, hi_kw)) for lo, hi in scalar_ranges]
                    ranges = [r for r in ranges if r[0] < r[1]]
                    if not ranges:
                        continue
                    wv = self.weight(mi, ci, kidx, kw, zero)
                    for lo, hi in ranges:
                        with k.for_range(hi, lo) as ow:
                            iw = b.add(b.mul(ow, k.index(s_w)), k.index(off)) if s_w != 1 else b.add(ow, k.index(off))
                            xv = widen(k, x.dtype, k.load(self.x_acc, [ni, c, *pos, iw]))
                            if x_zero is not None:
                                xv = b.sub(xv, x_zero)
                            b.store(b.add(b.load(cell(ow)), b.mul(xv, wv)), cell(ow))
        self.over_taps(idx, scalar_taps)
        for lo, hi in scalar_ranges:
            if lo < hi:
                with k.for_range(hi, lo) as ow:
                    self.finish(idx, mi, ow, b.load(cell(ow)))

    def out_row(self, idx):
        k, b, mr, m0 = self.k, self.k.b, self.mr, self.m0
        if mr == 1:
            self.edges(idx, m0)
        else:
            with k.for_range(mr) as r:
                self.edges(idx, b.add(m0, r))
        if not self.blocks:
            return
        channels = [b.add(m0, k.index(r)) if r else m0 for r in range(mr)]
        zeros = [self.w_zero(mi) for mi in channels]
        for start, count, lanes in self.segments:
            self.vector_blocks(idx, channels, zeros, start, count, lanes)

    def vector_blocks(self, idx, channels, zeros, start, count, lanes):
        k, b, x, out, x_acc = self.k, self.k.b, self.x, self.out, self.x_acc
        ni, g, cg, x_zero, s_w = self.ni, self.g, self.cg, self.x_zero, self.strides[-1]
        vt = ir.VectorType(self.i32, lanes)
        x_zero_v = k.splat(x_zero, lanes) if x_zero is not None else None
        with k.for_range(count) as blk:
            ow0 = b.add(k.index(start), b.mul(blk, k.index(lanes)))
            accs = [k.local(vt, k.vzero(np.int32, lanes)) for _ in range(self.mr)]

            def vector_taps(kidx, pos):
                with k.for_range(cg) as ci:
                    c = b.add(b.mul(g, k.index(cg)), ci)
                    for kw, (off, _, _) in enumerate(self.taps_w):
                        iw0 = b.add(b.mul(ow0, k.index(s_w)), k.index(off))
                        at = k.linear(x_acc, [ni, c, *pos, iw0])
                        xv = k.vgather(x.ptr, x.dtype, at, self.x_col, lanes)
                        xv = b.zext(xv, vt) if x.dtype.kind == "u" else b.sext(xv, vt)
                        if x_zero_v is not None:
                            xv = b.sub(xv, x_zero_v)
                        for acc, mi, zero in zip(accs, channels, zeros):
                            b.store(b.add(b.load(acc), b.mul(xv, k.splat(self.weight(mi, ci, kidx, kw, zero), lanes))), acc)
            self.over_taps(idx, vector_taps)
            for acc, mi in zip(accs, channels):
                total = b.load(acc)
                if self.vec_epilogue is not None and out.strides[-1] == 1:  # the whole block at once, one store
                    if self.bias_acc is not None:
                        total = b.add(total, k.splat(widen(k, self.bias.dtype, k.load(self.bias_acc, [mi])), lanes))
                    oidx = list(idx)
                    oidx[1], oidx[2 + self.spatial - 1] = mi, ow0
                    qgemm.store_lanes(k, self.vec_epilogue(total, mi), out.ptr, k.linear(self.o_acc, oidx), lanes, out.dtype)
                    continue
                for lane in range(lanes):
                    self.finish(idx, mi, b.add(ow0, k.index(lane)), b.extract_element(total, ir.Constant(ir.IntType(32), lane)))


def _conv(k, x, w, x_zp, w_zp, bias, epilogue, vec_epilogue=None):
    """_DirectConv, or one output point at a time (_conv_points) for kernels wider than MAX_UNROLLED_TAPS."""
    out = k.outputs[0]
    if not out.size:
        return
    window = conv_window(k, x, w, out)
    if window[1][-1] > MAX_UNROLLED_TAPS:
        _conv_points(k, x, w, x_zp, w_zp, bias, epilogue)
        return
    _DirectConv(k, x, w, x_zp, w_zp, bias, epilogue, vec_epilogue, window).emit()


def _conv_points(k, x, w, x_zp, w_zp, bias, epilogue):
    """One output point at a time, every kernel tap bounds-checked (very wide kernels)."""
    out = k.outputs[0]
    b = k.b
    spatial, kernel, strides, dilations, begins = conv_window(k, x, w, out)
    group = int(k.attr("group", 1))
    n_batch, m_out = out.shape[0], out.shape[1]
    cg = w.shape[1]
    mg = m_out // group
    i32 = ir.IntType(32)
    x_acc, w_acc, o_acc = x.identity_access(), w.identity_access(), out.identity_access()
    xz = param_access(k, x_zp, "x_zero_point", 1, None, None)
    wz = param_access(k, w_zp, "w_zero_point", 1, 0, m_out)
    bias_acc = param_access(k, bias, "B", 1, 0, m_out)
    zero_idx = [k.index(0)]

    with k.for_range(n_batch) as ni, k.for_range(m_out) as mi:
        g = b.sdiv(mi, k.index(mg))
        w_zero = widen(k, w_zp.dtype, k.load(wz, [mi])) if wz is not None else None
        x_zero = widen(k, x_zp.dtype, k.load(xz, zero_idx)) if xz is not None else None
        out_idx = [ni, mi] + [None] * spatial

        def out_point(idx):
            slot = k.local(i32, ir.Constant(i32, 0))
            kpos = [None] * spatial

            def tap(kidx):
                ok = None
                pos = []
                for s in range(spatial):
                    p = b.sub(b.add(b.mul(idx[2 + s], k.index(strides[s])), b.mul(kidx[s], k.index(dilations[s]))), k.index(begins[s]))
                    inside = b.and_(b.icmp_signed(">=", p, k.index(0)), b.icmp_signed("<", p, k.index(x.shape[2 + s])))
                    ok = inside if ok is None else b.and_(ok, inside)
                    pos.append(p)
                with b.if_then(ok):
                    with k.for_range(cg) as ci:
                        c = b.add(b.mul(g, k.index(cg)), ci)
                        xv = widen(k, x.dtype, k.load(x_acc, [ni, c, *pos]))
                        wv = widen(k, w.dtype, k.load(w_acc, [mi, ci, *kidx]))
                        if x_zero is not None:
                            xv = b.sub(xv, x_zero)
                        if w_zero is not None:
                            wv = b.sub(wv, w_zero)
                        b.store(b.add(b.load(slot), b.mul(xv, wv)), slot)
            k.loops(kernel, list(range(spatial)), kpos, tap)
            acc = b.load(slot)
            if bias_acc is not None:
                acc = b.add(acc, widen(k, bias.dtype, k.load(bias_acc, [mi])))
            k.store(o_acc, idx, epilogue(acc, mi))
        k.loops(out.shape, list(range(2, 2 + spatial)), out_idx, out_point)


@register("ConvInteger", dtypes=("uint8", "int8"), heavy=True)
def lower_conv_integer(k):
    if fast_conv(k, k.inputs[0], k.inputs[1], opt_input(k, 2), opt_input(k, 3), None):
        return
    _conv(k, k.inputs[0], k.inputs[1], opt_input(k, 2), opt_input(k, 3), None, lambda acc, m: acc, lambda acc, m: acc)


@register("QLinearConv", dtypes=("uint8", "int8"), heavy=True)
def lower_qlinear_conv(k):
    x, x_s, x_zp, w, w_s, w_zp, y_s, y_zp = (list(k.inputs) + [None] * 8)[:8]
    bias = opt_input(k, 8)
    out = k.outputs[0]
    m_out = out.shape[1]
    zero = [k.index(0)]
    if fast_conv(k, x, w, x_zp, w_zp, bias, (x_s, w_s, y_s, y_zp)):
        return

    def epilogue(acc, mi):
        s0 = k.load(param_access(k, x_s, "x_scale", 1, None, None), zero)
        s1 = k.load(param_access(k, w_s, "w_scale", 1, 0, m_out), [mi])
        s2 = k.load(param_access(k, y_s, "y_scale", 1, None, None), zero)
        zp = k.load(param_access(k, y_zp, "y_zero_point", 1, None, None), zero) if y_zp is not None else None
        return requantize(k, acc, [(x_s.dtype, s0), (w_s.dtype, s1), (y_s.dtype, s2)],
                          None if zp is None else (y_zp.dtype, zp), out.dtype)

    def vec_epilogue(acc, mi):
        """requantize on a vector of one channel: the same multiplier and zero point, lane-wise doubles."""
        lanes = acc.type.count
        s0 = k.load(param_access(k, x_s, "x_scale", 1, None, None), zero)
        s1 = k.load(param_access(k, w_s, "w_scale", 1, 0, m_out), [mi])
        s2 = k.load(param_access(k, y_s, "y_scale", 1, None, None), zero)
        sdt = np.dtype(x_s.dtype)
        mult = k.s.cast(sdt, F64, k.b.fdiv(k.b.fmul(s0, k.s.cast(w_s.dtype, sdt, s1)), k.s.cast(y_s.dtype, sdt, s2)))
        yz = None
        if y_zp is not None:
            yz = k.splat(k.s.cast(y_zp.dtype, F64, k.load(param_access(k, y_zp, "y_zero_point", 1, None, None), zero)), lanes)
        return qgemm.requantize_vec(k, acc, k.splat(mult, lanes), yz, out.dtype, fused_epilogue(k).relu_floor)
    _conv(k, x, w, x_zp, w_zp, bias, epilogue, vec_epilogue)
