"""A channels-last 3x3 depthwise convolution on the SpacemiT X60 as kernels/rvv_depthwise.py's routine: per image,
band of up to ROWS[stride] output rows and unit of 8 channels (the last unit's `vl` its remainder), the whole row
width; input rows outside the image read the zero row (ops/conv/depthwise.py zero_row)."""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from ...kernels import rvv_depthwise as rv
from .depthwise import zero_row

NAN_BOUND = 0xFF000001
"""`x + x` below this (unsigned) is not a NaN: the lanes the masked Clip writes."""


def emit_depthwise_rvv(k, x, w, bias, out, residual, epi, groups: int, k_sp, strides, dils, pads) -> bool:
    """Emit the conv as routine calls and say True, or False (nothing emitted) when it is not such a conv: float32,
    static, 2-D, channels-last (channels contiguous in and out), one channel per group, 3 x 3, stride 1 or 2 (the
    same both ways), dilation 1, pads up to 2, constant weights, no residual, an activation rv.clip_form takes."""
    if (not rv.takes(k) or residual is not None or k.dynamic or x.rank != 4 or np.dtype(out.dtype) != np.float32
            or tuple(int(v) for v in k_sp) != (3, 3) or any(int(v) != 1 for v in dils)
            or len({int(v) for v in strides}) != 1 or w.value is None):
        return False
    n, c, h, wd = x.shape
    oh_count, ow_count = out.shape[2:]
    xs, os_ = tuple(x.strides), tuple(out.strides)
    if (groups != c or out.shape[1] != c or tuple(w.shape[:2]) != (c, 1) or xs[1] != 1 or os_[1] != 1
            or (bias is not None and bias.strides[0] != 1)):
        return False
    top, left = (int(v) for v in pads[:2])
    form = rv.clip_form(epi)
    stride = int(strides[0])
    plane = None if form is None else rv.bands(h, wd, oh_count, ow_count, top, left, form[0], stride)
    if plane is None:
        return False
    act, lo_bits, hi_bits = form
    units = -(-c // rv.LANES)
    packed = np.zeros((units * rv.LANES, 9), np.float32)
    packed[:c] = w.value.reshape(c, 9)
    weights = k.constant_array(np.ascontiguousarray(packed.reshape(units, rv.LANES, 9).transpose(0, 2, 1)))
    b, i64 = k.b, ir.IntType(64)
    f32p = ir.FloatType().as_pointer()
    zero = zero_row(k, 4 * (wd * xs[3] + rv.LANES), f32p)
    full, rest, nbands = plane[0], (plane[-1] if plane[-1] != plane[0] else None), len(plane)
    step = 4 * xs[3]
    with k.parallel_tiles([n, nbands, units], float(n) * c * oh_count * ow_count * 9) as (img, band, unit):
        c0 = b.mul(unit, k.index(rv.LANES))
        oh0 = b.mul(band, k.index(rv.ROWS[stride]))

        def run(bd: rv.Band) -> None:
            block = {"stride": i64(step), "out_stride": i64(4 * os_[3]), "lo": i64(lo_bits), "hi": i64(hi_bits),
                     "nan": i64(NAN_BOUND),
                     "vl": k.imin(k.index(rv.LANES), b.sub(k.index(c), c0)),
                     "weights": b.gep(weights, [b.mul(unit, k.index(9 * rv.LANES))]),
                     "bias": zero if bias is None else b.gep(bias.ptr, [c0])}
            for i in range(bd.in_rows):
                ih = b.add(b.mul(oh0, k.index(stride)), k.index(i - top))
                at = b.gep(x.ptr, [b.add(b.add(b.mul(img, k.index(xs[0])), b.mul(ih, k.index(xs[2]))), c0)])
                inside = b.icmp_unsigned("<", ih, k.index(h))
                block[f"in{i}"] = b.select(inside, b.bitcast(at, f32p), zero)
            for o in range(bd.rows):
                at = b.add(b.add(b.mul(img, k.index(os_[0])), b.mul(b.add(oh0, k.index(o)), k.index(os_[2]))), c0)
                block[f"out{o}"] = b.gep(out.ptr, [at])
            block["end"] = b.add(b.ptrtoint(block["in0"], i64), i64(step * rv.loop_end_columns(bd)))
            rv.call(k, bd, block)
        if rest is None:
            run(full)
        else:
            with b.if_else(b.icmp_signed("<", band, k.index(nbands - 1))) as (then, otherwise):
                with then:
                    run(full)
                with otherwise:
                    run(rest)
    return True
