"""Sampling at computed coordinates: GridSample, RoiAlign and DeformConv.

Every output point first computes, per spatial dim, its taps (index, weight and, for zero padding,
whether the tap lies inside the input) from the grid / RoI / offset values; the taps do not depend
on the channel, so a channel loop then sums the product taps (1 for nearest, 2^r bilinear, 4^r
bicubic, unrolled) with the addresses and weights computed once per point. Indices are clamped into
the input before any load, so NaN or huge coordinates never address outside it.
"""
from __future__ import annotations

import itertools

import numpy as np
from llvmlite import ir

from ..errors import InputError
from ..kernels.loops import element, loop, nest, offset
from ..kernels.scalar import const, llvm_type, scalar_const
from ..opspec import register

FLOATS = ("float32", "float64", "float16")


def _str(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def compute_dtype(dtype) -> np.dtype:
    """Arithmetic dtype for a float tensor: float16 computes in float32."""
    return np.dtype(np.float32) if np.dtype(dtype) == np.float16 else np.dtype(dtype)


def fconst(ty: ir.Type, value: float) -> ir.Constant:
    return scalar_const(ty, float(value))


def clampf(k, x, lo: float, hi: float):
    """min(max(x, lo), hi); NaN gives lo."""
    return k.s.intrinsic_binary("llvm.minnum", k.s.intrinsic_binary("llvm.maxnum", x, fconst(x.type, lo)), fconst(x.type, hi))


def clampi(k, i, lo: int, hi: int):
    b = k.b
    i = b.select(b.icmp_signed("<", i, k.index(lo)), k.index(lo), i)
    return b.select(b.icmp_signed(">", i, k.index(hi)), k.index(hi), i)


def inside(k, i, size: int):
    """i1: 0 <= i < size."""
    return k.b.icmp_unsigned("<", i, k.index(size))


def load_as(k, op, off, ct):
    """op[off] converted to the compute dtype ct."""
    return k.s.cast(op.dtype, ct, k.b.load(element(k, op.ptr, off)))


def reflect(k, x, lo: float, hi: float):
    """GridSample's reflection of a float coordinate by the near border until it lies in [lo, hi]."""
    b, ty = k.b, x.type
    span = hi - lo
    if span <= 0:
        return fconst(ty, lo)
    below = b.fcmp_ordered("<", x, fconst(ty, lo))
    above = b.fcmp_ordered(">", x, fconst(ty, hi))
    dx = b.select(below, b.fsub(fconst(ty, lo), x), b.fsub(x, fconst(ty, hi)))
    dx = k.s.intrinsic_binary("llvm.maxnum", dx, fconst(ty, 0.0))
    n = k.s.intrinsic("llvm.floor", b.fdiv(dx, fconst(ty, span)))
    r = b.fsub(dx, b.fmul(n, fconst(ty, span)))
    half = k.s.intrinsic("llvm.floor", b.fmul(n, fconst(ty, 0.5)))
    odd = b.fcmp_ordered("!=", b.fsub(n, b.fadd(half, half)), fconst(ty, 0.0))
    res = b.select(b.xor(below, odd), b.fadd(fconst(ty, lo), r), b.fsub(fconst(ty, hi), r))
    return b.select(b.or_(below, above), res, x)


def cubic_coeffs(k, t):
    """Keys cubic convolution weights (alpha -0.75) of the taps -1, 0, 1, 2 at fraction t in [0, 1)."""
    b, ty = k.b, t.type
    a = -0.75

    def far(x):  # |x| in [1, 2]: ((a*x - 5a)*x + 8a)*x - 4a
        return b.fsub(b.fmul(b.fadd(b.fmul(b.fsub(b.fmul(fconst(ty, a), x), fconst(ty, 5 * a)), x), fconst(ty, 8 * a)), x), fconst(ty, 4 * a))

    def near(x):  # |x| in [0, 1]: ((a+2)*x - (a+3))*x*x + 1
        return b.fadd(b.fmul(b.fmul(b.fsub(b.fmul(fconst(ty, a + 2), x), fconst(ty, a + 3)), x), x), fconst(ty, 1.0))

    one = fconst(ty, 1.0)
    return [far(b.fadd(t, one)), near(t), near(b.fsub(one, t)), far(b.fsub(fconst(ty, 2.0), t))]


def sum_taps(k, taps_per_dim, strides, ct):
    """Product taps of per-dim (index, weight, valid) lists: [(offset, weight or None, valid or None)]."""
    b = k.b
    combos = []
    for combo in itertools.product(*taps_per_dim):
        off = offset(k, 0, *((idx, s) for (idx, _, _), s in zip(combo, strides)))
        weight, valid = None, None
        for _, w, v in combo:
            if w is not None:
                weight = w if weight is None else b.fmul(weight, w)
            if v is not None:
                valid = v if valid is None else b.and_(valid, v)
        combos.append((off, weight, valid))
    return combos


def gather_taps(k, x, base, combos, ct):
    """sum over taps of weight * (valid ? x[base + off] : 0), in ct."""
    b = k.b
    acc = None
    for off, weight, valid in combos:
        v = load_as(k, x, offset(k, 0, (base, 1), (off, 1)), ct)
        if valid is not None:
            v = b.select(valid, v, const(ct, 0))
        if weight is not None:
            v = b.fmul(v, weight)
        acc = v if acc is None else b.fadd(acc, v)
    return acc


@register("GridSample", since=16, dtypes=FLOATS)
def lower_grid_sample(k):
    x, grid, out = k.inputs[0], k.inputs[1], k.outputs[0]
    b = k.b
    mode = _str(k.attr("mode", "bilinear" if k.graph.opset < 20 else "linear"))
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    padding = _str(k.attr("padding_mode", "zeros"))
    align = bool(k.attr("align_corners", 0))
    if mode not in ("nearest", "linear", "cubic"):
        raise InputError(f"node {k.node.name!r} (GridSample): mode {mode!r} is not supported (nearest, linear, cubic)")
    if padding not in ("zeros", "border", "reflection"):
        raise InputError(f"node {k.node.name!r} (GridSample): padding_mode {padding!r} is not supported (zeros, border, reflection)")
    if np.dtype(grid.dtype).kind != "f":
        raise InputError(f"node {k.node.name!r} (GridSample): the grid must be a float tensor")
    if out.size == 0:
        return
    ct = compute_dtype(x.dtype)
    ty = llvm_type(ct)
    r = x.rank - 2
    N, C, sizes = x.shape[0], x.shape[1], x.shape[2:]
    out_sp = out.shape[2:]

    def point(ix):
        n, pos = ix[0], ix[1:]
        gbase = offset(k, 0, (n, grid.strides[0]), *zip(pos, grid.strides[1:1 + r]))
        taps_per_dim = []
        for d in range(r):
            L = sizes[d]
            g = load_as(k, grid, offset(k, (r - 1 - d) * grid.strides[-1], (gbase, 1)), ct)
            g1 = b.fadd(g, fconst(ty, 1.0))
            if align:
                xf = b.fmul(b.fmul(g1, fconst(ty, 0.5)), fconst(ty, L - 1))
            else:
                xf = b.fmul(b.fsub(b.fmul(g1, fconst(ty, L)), fconst(ty, 1.0)), fconst(ty, 0.5))
            if mode == "nearest":
                xf = k.s.intrinsic("llvm.rint", xf)
            lo, hi = (0.0, L - 1.0) if align else (-0.5, L - 0.5)
            if padding == "border":
                out_of = b.or_(b.fcmp_ordered("<", xf, fconst(ty, lo)), b.fcmp_ordered(">", xf, fconst(ty, hi)))
                xf = b.select(out_of, clampf(k, xf, 0.0, L - 1.0), xf)
            elif padding == "reflection":
                xf = reflect(k, xf, lo, hi)
            xc = clampf(k, xf, -4.0, L + 3.0)

            def tap(i, w):
                if padding == "zeros":
                    return (clampi(k, i, 0, L - 1), w, inside(k, i, L))
                if padding == "border":
                    return (clampi(k, i, 0, L - 1), w, None)
                fi = reflect(k, b.sitofp(i, ty), lo, hi)
                return (clampi(k, b.fptosi(fi, k.idx_t), 0, L - 1), w, None)

            if mode == "nearest":
                taps_per_dim.append([tap(b.fptosi(xc, k.idx_t), None)])
                continue
            x0 = k.s.intrinsic("llvm.floor", xc)
            t = b.fsub(xc, x0)
            i0 = b.fptosi(x0, k.idx_t)
            if mode == "linear":
                weights, first = [b.fsub(fconst(ty, 1.0), t), t], 0
            else:
                weights, first = cubic_coeffs(k, t), -1
            taps_per_dim.append([tap(b.add(i0, k.index(first + j)), w) for j, w in enumerate(weights)])
        combos = sum_taps(k, taps_per_dim, x.strides[2:], ct)
        xbase = offset(k, 0, (n, x.strides[0]))
        obase = offset(k, 0, (n, out.strides[0]), *zip(pos, out.strides[2:]))

        def channel(c):
            v = gather_taps(k, x, offset(k, 0, (xbase, 1), (c, x.strides[1])), combos, ct)
            b.store(k.s.cast(ct, out.dtype, v), element(k, out.ptr, offset(k, 0, (obase, 1), (c, out.strides[1]))))
        if C == 1:
            channel(k.index(0))
        else:
            with loop(k, C) as c:
                channel(c)
    nest(k, [N, *out_sp], point)


@register("RoiAlign", since=10, dtypes=FLOATS, heavy=True)
def lower_roi_align(k):
    """Per RoI and output bin: the sample points (a build-time or, with sampling_ratio 0, a run-time
    grid) give 4 addresses and weights each, computed once and applied to every channel."""
    x, rois, batch, out = k.inputs[0], k.inputs[1], k.inputs[2], k.outputs[0]
    b = k.b
    default_ctm = "half_pixel" if k.graph.opset >= 16 else "output_half_pixel"
    ctm = _str(k.attr("coordinate_transformation_mode", default_ctm))
    mode = _str(k.attr("mode", "avg"))
    if ctm not in ("half_pixel", "output_half_pixel"):
        raise InputError(f"node {k.node.name!r} (RoiAlign): coordinate_transformation_mode {ctm!r} is not supported")
    if mode not in ("avg", "max"):
        raise InputError(f"node {k.node.name!r} (RoiAlign): mode {mode!r} is not supported (avg, max)")
    if x.rank != 4 or rois.rank != 2 or rois.shape[1] != 4:
        raise InputError(f"node {k.node.name!r} (RoiAlign): X must be [N, C, H, W] and rois [R, 4], got {list(x.shape)} and {list(rois.shape)}")
    half_pixel = ctm == "half_pixel"
    ratio = int(k.attr("sampling_ratio", 0))
    scale = float(k.attr("spatial_scale", 1.0))
    if out.size == 0:
        return
    ct = compute_dtype(x.dtype)
    ty = llvm_type(ct)
    R, C, OH, OW = out.shape
    N, H, W = x.shape[0], x.shape[2], x.shape[3]
    one, zero = fconst(ty, 1.0), fconst(ty, 0.0)
    idx_dt = np.dtype(f"int{k.idx_t.width}")

    def roi(r):
        bi = clampi(k, k.s.cast(batch.dtype, idx_dt, b.load(element(k, batch.ptr, offset(k, 0, (r, batch.strides[0]))))), 0, N - 1)
        coords = [b.fsub(b.fmul(load_as(k, rois, offset(k, j * rois.strides[1], (r, rois.strides[0])), ct), fconst(ty, scale)),
                         fconst(ty, 0.5 if half_pixel else 0.0)) for j in range(4)]
        x1, y1, x2, y2 = coords
        roi_w, roi_h = b.fsub(x2, x1), b.fsub(y2, y1)
        if not half_pixel:
            roi_w, roi_h = k.s.max(ct, roi_w, one), k.s.max(ct, roi_h, one)
        bin_h, bin_w = b.fdiv(roi_h, fconst(ty, OH)), b.fdiv(roi_w, fconst(ty, OW))
        if ratio > 0:
            grid_h = grid_w = k.index(ratio)
        else:
            def adaptive(v):  # ceil(v), at least 0, at most a sane bound, as an index
                return b.fptosi(clampf(k, k.s.intrinsic("llvm.ceil", v), 0.0, 1 << 20), k.idx_t)
            grid_h, grid_w = adaptive(bin_h), adaptive(bin_w)
        samples = b.mul(grid_h, grid_w)
        gh_f, gw_f = b.sitofp(grid_h, ty), b.sitofp(grid_w, ty)
        count_f = (b.sitofp(b.select(b.icmp_signed("<", samples, k.index(1)), k.index(1), samples), ty))
        xbase = offset(k, 0, (bi, x.strides[0]))

        def each_channel(fn):
            with loop(k, C) as c:
                fn(c, element(k, out.ptr, offset(k, 0, (r, out.strides[0]), (c, out.strides[1]), (ph_pw[0], out.strides[2]),
                                                  (ph_pw[1], out.strides[3]))))

        ph_pw = [None, None]

        def out_bin(ph, pw):
            ph_pw[0], ph_pw[1] = ph, pw
            start = const(out.dtype, float("-inf") if mode == "max" else 0.0)
            each_channel(lambda c, p: b.store(start, p))
            phf, pwf = b.sitofp(ph, ty), b.sitofp(pw, ty)
            with k.for_range(grid_h) as iy:
                yy = b.fadd(b.fadd(y1, b.fmul(phf, bin_h)), b.fdiv(b.fmul(b.fadd(b.sitofp(iy, ty), fconst(ty, 0.5)), bin_h), gh_f))
                with k.for_range(grid_w) as ix:
                    xx = b.fadd(b.fadd(x1, b.fmul(pwf, bin_w)), b.fdiv(b.fmul(b.fadd(b.sitofp(ix, ty), fconst(ty, 0.5)), bin_w), gw_f))
                    outside = b.or_(b.or_(b.fcmp_unordered("<", yy, fconst(ty, -1.0)), b.fcmp_unordered(">", yy, fconst(ty, H))),
                                    b.or_(b.fcmp_unordered("<", xx, fconst(ty, -1.0)), b.fcmp_unordered(">", xx, fconst(ty, W))))

                    def axis(v, size):
                        v = clampf(k, v, 0.0, float(size))
                        low = b.fptosi(v, k.idx_t)
                        last = b.icmp_signed(">=", low, k.index(size - 1))
                        low = b.select(last, k.index(size - 1), low)
                        high = b.select(last, low, b.add(low, k.index(1)))
                        v = b.select(last, b.sitofp(low, ty), v)
                        l = b.fsub(v, b.sitofp(low, ty))
                        return low, high, l, b.fsub(one, l)
                    y_lo, y_hi, ly, hy = axis(yy, H)
                    x_lo, x_hi, lx, hx = axis(xx, W)
                    taps = []
                    for yi, wy in ((y_lo, hy), (y_hi, ly)):
                        for xi, wx in ((x_lo, hx), (x_hi, lx)):
                            w = b.select(outside, zero, b.fmul(wy, wx))
                            pos = b.select(outside, k.index(0), offset(k, 0, (yi, x.strides[2]), (xi, x.strides[3])))
                            taps.append((pos, w))

                    def update(c, p):
                        base = offset(k, 0, (xbase, 1), (c, x.strides[1]))
                        vals = [b.fmul(w, load_as(k, x, offset(k, 0, (base, 1), (pos, 1)), ct)) for pos, w in taps]
                        old = k.s.cast(out.dtype, ct, b.load(p))
                        if mode == "avg":
                            new = b.fadd(old, b.fadd(b.fadd(b.fadd(vals[0], vals[1]), vals[2]), vals[3]))
                        else:
                            m = vals[0]
                            for v in vals[1:]:
                                m = b.select(b.fcmp_ordered(">", v, m), v, m)
                            new = b.select(b.fcmp_ordered(">", m, old), m, old)
                        b.store(k.s.cast(ct, out.dtype, new), p)
                    each_channel(update)

            def finish(c, p):
                v = k.s.cast(out.dtype, ct, b.load(p))
                if mode == "avg":
                    v = b.fdiv(v, count_f)
                else:
                    v = b.select(b.icmp_signed("<", samples, k.index(1)), zero, v)
                b.store(k.s.cast(ct, out.dtype, v), p)
            each_channel(finish)
        nest(k, [OH, OW], lambda ix: out_bin(*ix))
    nest(k, [R], lambda ix: roi(ix[0]))


@register("DeformConv", since=19, dtypes=FLOATS, heavy=True)
def lower_deform_conv(k):
    """2-D deformable convolution: per output pixel, offset group and kernel tap, the bilinear taps
    (zero outside the input, times the mask) are computed once; each input channel's sample is then
    added, times the weights, into the output channels of its group."""
    x, w, off = k.inputs[0], k.inputs[1], k.inputs[2]
    bias = k.inputs[3] if len(k.inputs) > 3 else None
    mask = k.inputs[4] if len(k.inputs) > 4 else None
    out = k.outputs[0]
    b = k.b
    if x.rank != 4:
        raise InputError(f"node {k.node.name!r} (DeformConv): only 2-D deformable convolution (rank-4 X) is supported, got rank {x.rank}")
    N, C, H, W = x.shape
    OC, CPG, KH, KW = w.shape
    kernel = [int(v) for v in (k.attr("kernel_shape") or [KH, KW])]
    if kernel != [KH, KW]:
        raise InputError(f"node {k.node.name!r} (DeformConv): kernel_shape {kernel} does not match the weights {list(w.shape)}")
    sth, stw = [int(v) for v in (k.attr("strides") or [1, 1])]
    dh, dw = [int(v) for v in (k.attr("dilations") or [1, 1])]
    pads = [int(v) for v in (k.attr("pads") or [0, 0, 0, 0])]
    group, ogroups = int(k.attr("group", 1)), int(k.attr("offset_group", 1))
    if C != CPG * group or OC % group or C % ogroups or off.shape[1] != ogroups * KH * KW * 2:
        raise InputError(f"node {k.node.name!r} (DeformConv): inconsistent shapes X {list(x.shape)}, W {list(w.shape)}, "
                         f"offset {list(off.shape)} for group {group}, offset_group {ogroups}")
    if out.size == 0:
        return
    ct = compute_dtype(x.dtype)
    ty = llvm_type(ct)
    OH, OW = out.shape[2], out.shape[3]
    OCPG, CPO = OC // group, C // ogroups
    one = fconst(ty, 1.0)

    def pixel(ix):
        n, oi, oj = ix

        def out_at(oc):
            return element(k, out.ptr, offset(k, 0, (n, out.strides[0]), (oc, out.strides[1]), (oi, out.strides[2]), (oj, out.strides[3])))
        with loop(k, OC) as oc:
            init = load_as(k, bias, offset(k, 0, (oc, bias.strides[0])), ct) if bias is not None else fconst(ty, 0.0)
            b.store(k.s.cast(ct, out.dtype, init), out_at(oc))

        def tap(ts):
            g, ki, kj = ts
            ch = offset(k, 0, (g, KH * KW), (ki, KW), (kj, 1))

            def off_at(comp):
                return load_as(k, off, offset(k, 0, (n, off.strides[0]), (ch, 2 * off.strides[1]), (comp, off.strides[1]),
                                               (oi, off.strides[2]), (oj, off.strides[3])), ct)
            hf = b.fadd(b.sitofp(offset(k, -pads[0], (oi, sth), (ki, dh)), ty), off_at(0))
            wf = b.fadd(b.sitofp(offset(k, -pads[1], (oj, stw), (kj, dw)), ty), off_at(1))
            m = None
            if mask is not None:
                m = load_as(k, mask, offset(k, 0, (n, mask.strides[0]), (ch, mask.strides[1]), (oi, mask.strides[2]), (oj, mask.strides[3])), ct)
            per_dim = []
            for v, size in ((hf, H), (wf, W)):
                v = clampf(k, v, -4.0, size + 3.0)
                v0 = k.s.intrinsic("llvm.floor", v)
                t = b.fsub(v, v0)
                i0 = b.fptosi(v0, k.idx_t)
                i1 = b.add(i0, k.index(1))
                per_dim.append([(clampi(k, i0, 0, size - 1), b.fsub(one, t), inside(k, i0, size)),
                                (clampi(k, i1, 0, size - 1), t, inside(k, i1, size))])
            if m is not None:
                per_dim[0] = [(i, b.fmul(wt, m), v) for i, wt, v in per_dim[0]]
            combos = sum_taps(k, per_dim, x.strides[2:], ct)
            with loop(k, CPO) as cl:
                c = offset(k, 0, (g, CPO), (cl, 1))
                v = gather_taps(k, x, offset(k, 0, (n, x.strides[0]), (c, x.strides[1])), combos, ct)
                grp = b.udiv(c, k.index(CPG)) if group > 1 else k.index(0)
                c_in = b.sub(c, b.mul(grp, k.index(CPG))) if group > 1 else c
                with loop(k, OCPG) as ol:
                    oc = offset(k, 0, (grp, OCPG), (ol, 1))
                    wv = load_as(k, w, offset(k, 0, (oc, w.strides[0]), (c_in, w.strides[1]), (ki, w.strides[2]), (kj, w.strides[3])), ct)
                    p = out_at(oc)
                    b.store(k.s.cast(ct, out.dtype, b.fadd(k.s.cast(out.dtype, ct, b.load(p)), b.fmul(wv, v))), p)
        nest(k, [ogroups, KH, KW], tap)
    nest(k, [N, OH, OW], pixel)
