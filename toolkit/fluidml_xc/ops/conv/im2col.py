"""A convolution of one group as GEMMs on a CPU with a hand-scheduled GEMM tile (kernels/scalar_tile.py: the SiFive
U74): per output row, each panel of the tile's width in output pixels gathers its input columns (K = input channels
x kernel taps, zeros where the taps meet the padding) into a stack buffer, then every block of output channels runs
the tile over it (the weights, Co x K, as A's rows) and stores through the GEMM's epilogue (bias, a residual stored
like the output, an activation). A panel inside the image is copied without bounds tests; at the borders each tap is
tested."""
from __future__ import annotations

from functools import reduce

import numpy as np
from llvmlite import ir

from ...kernels.epilogue import Epilogue
from ...kernels.matmul_blocked import Mat, Problem, outer_accumulate, store_tile
from ...kernels.scalar import const
from ...kernels.scalar_tile import kernel_tile

MAX_K = 2304
"""The largest K (input channels x taps) gathered: the panel buffer is K x tile columns floats on the stack (45 KB)."""
MIN_CHANNELS = 10
"""Output channels below which the gather (K x 5 loads and stores a panel) outweighs the tile's gain."""


def emit_im2col_gemm(k, x, w, bias, out, residual, epi: Epilogue | None, groups: int, k_sp, strides, dils, pads) -> bool:
    """Emit the conv as the panels' GEMMs and say True, or False (nothing emitted) when it is not such a conv:
    float32, static, 2-D, constant weights of one group and more than one tap, an epilogue of at most a residual
    (stored like out) and an activation (Relu, Clip, leaky Relu), enough output channels, K within MAX_K and rows of
    at least the tile's width."""
    tile = kernel_tile(k)
    if (tile is None or k.dynamic or x.rank != 4 or np.dtype(out.dtype) != np.float32 or w.value is None or groups != 1
            or len(k_sp) != 2 or k_sp[0] * k_sp[1] == 1):
        return False
    if epi is not None and epi.activation not in (None, "relu", "clip", "leaky_relu"):
        return False
    if residual is not None and (tuple(residual.shape) != tuple(out.shape) or tuple(residual.strides) != tuple(out.strides)):
        return False
    n, ci, h, wd = x.shape
    co, oh_count, ow_count = out.shape[1:]
    kh, kw = (int(v) for v in k_sp)
    K = ci * kh * kw
    if co < max(tile.rows, MIN_CHANNELS) or ow_count < tile.cols or K > MAX_K:
        return False
    weights = k.constant_array(np.ascontiguousarray(w.value.reshape(co, K).astype(np.float32)))
    cols, dt = tile.cols, np.dtype(np.float32)
    with k.b.goto_entry_block():
        buf = k.b.alloca(ir.FloatType(), size=ir.Constant(ir.IntType(32), K * cols))
    P = Problem(dt, (), co, ow_count, K, Mat(weights, (), K, 1), Mat(buf, (), cols, 1, None, cols),
                Mat(lambda: out.ptr, (), out.strides[1], out.strides[3]),
                None if bias is None else Mat(lambda: bias.ptr, (), 1, 0),
                residual=None if residual is None else Mat(lambda: residual.ptr, (), 0, 0),
                relu=epi is not None and epi.activation == "relu",
                activation=epi if epi is not None and epi.activation in ("clip", "leaky_relu") else None)
    geometry = (kh, kw, *(int(v) for v in strides), *(int(v) for v in dils), *(int(v) for v in pads[:2]))
    widths = [k.lanes(dt)] * (cols // k.lanes(dt)) + [1] * (cols % k.lanes(dt))
    full, rest = divmod(ow_count, cols)
    with k.parallel_tiles([n, oh_count], float(n) * co * oh_count * ow_count * K) as (img, oh):
        c_base = k.b.add(k.b.mul(img, k.index(out.strides[0])), k.b.mul(oh, k.index(out.strides[2])))

        def block(co0, rows: int, ow0, valid: int) -> None:
            slots = outer_accumulate(k, P, cols, K, (k.index(0), k.index(0), c_base), co0, tile.rows, ow0, 0, widths,
                                     last_row=co - 1)
            store_tile(k, P, slots[:rows], c_base, co0, rows, ow0, widths, valid)

        def panel(ow0, valid: int) -> None:
            _gather(k, x, buf, img, oh, ow0, valid, cols, geometry)
            with k.for_range(co // tile.rows) as cb:
                block(k.b.mul(cb, k.index(tile.rows)), tile.rows, ow0, valid)
            if co % tile.rows:
                block(k.index(co - co % tile.rows), co % tile.rows, ow0, valid)
        with k.for_range(full) as p:
            panel(k.b.mul(p, k.index(cols)), cols)
        if rest:
            panel(k.index(full * cols), rest)
    return True


def _gather(k, x, buf, img, oh, ow0, valid: int, cols: int, geometry) -> None:
    """buf[(c, i, j) x cols + q] = x[img, c, oh sh - ph + i dh, (ow0 + q) sw - pw + j dw], 0 outside the image and
    for q >= valid: plain copies when the whole panel is inside, else each element tested."""
    b = k.b
    kh, kw, sh, sw, dh, dw, ph, pw = geometry
    _, ci, h, wd = x.shape
    top = b.sub(b.mul(oh, k.index(sh)), k.index(ph))
    left = b.sub(b.mul(ow0, k.index(sw)), k.index(pw))
    inside = reduce(b.and_, [b.icmp_signed(">=", top, k.index(0)), b.icmp_signed(">=", left, k.index(0)),
                             b.icmp_signed("<", b.add(top, k.index((kh - 1) * dh)), k.index(h)),
                             b.icmp_signed("<", b.add(left, k.index((valid - 1) * sw + (kw - 1) * dw)), k.index(wd))])
    base = b.add(b.mul(img, k.index(x.strides[0])), b.add(b.mul(top, k.index(x.strides[2])), b.mul(left, k.index(x.strides[3]))))
    zero = const(np.float32, 0)
    with b.if_else(inside) as (whole, border):
        with whole:
            with k.for_range(ci) as c:
                at = b.add(base, b.mul(c, k.index(x.strides[1])))
                for i in range(kh):
                    for j in range(kw):
                        row = b.add(b.mul(c, k.index(kh * kw * cols)), k.index((i * kw + j) * cols))
                        for q in range(cols):
                            value = zero if q >= valid else b.load(b.gep(x.ptr, [b.add(at, k.index(
                                i * dh * x.strides[2] + (q * sw + j * dw) * x.strides[3]))], inbounds=True))
                            b.store(value, b.gep(buf, [b.add(row, k.index(q))], inbounds=True))
        with border:
            with k.for_range(ci) as c:
                plane = b.add(b.mul(img, k.index(x.strides[0])), b.mul(c, k.index(x.strides[1])))
                for i in range(kh):
                    ih = b.add(top, k.index(i * dh))
                    row_in = b.and_(b.icmp_signed(">=", ih, k.index(0)), b.icmp_signed("<", ih, k.index(h)))
                    for j in range(kw):
                        row = b.add(b.mul(c, k.index(kh * kw * cols)), k.index((i * kw + j) * cols))
                        for q in range(cols):
                            iw = b.add(left, k.index(q * sw + j * dw))
                            ok = b.and_(row_in, b.and_(b.icmp_signed(">=", iw, k.index(0)), b.icmp_signed("<", iw, k.index(wd))))
                            value = zero
                            if q < valid:
                                at = b.add(plane, b.add(b.mul(k.imax(k.imin(ih, k.index(h - 1)), k.index(0)), k.index(x.strides[2])),
                                                        b.mul(k.imax(k.imin(iw, k.index(wd - 1)), k.index(0)), k.index(x.strides[3]))))
                                value = b.select(ok, b.load(b.gep(x.ptr, [at], inbounds=True)), zero)
                            b.store(value, b.gep(buf, [b.add(row, k.index(q))], inbounds=True))
