"""Spectral ops: DFT (opset 17 and 20 forms; forward, inverse, onesided rfft, irfft) and STFT (a real signal
[batch, length] as ONNX Runtime reads it, or [batch, length, 1 or 2]; frontend/signal_checks.py refuses at import
the forms ORT refuses).

DFT, rfft, irfft and STFT run as one batched mixed-radix FFT over all their signals (kernels/fft.py: float64
whatever the tensor dtype, every leading dim and every frame in one kernel, a signal per vector lane, twiddles
as build-time tables); irfft transforms the full Hermitian spectrum and keeps the real part. A transform longer
than the FFT's stack budget (n > 4096) runs a direct DFT per signal instead: bin k sums x[t] * exp(-+2 pi i k t / n)
with the twiddles read from build-time cos/sin tables of length n (the table index k*t mod n kept
incrementally), accumulated in float64.

The complex inverse of float32/float64 signals (numpy computes it in the input precision) runs a
straight-line mixed-radix FFT for lengths whose factors are 2, 3, 4, 5 and 8 (up to 128), with
pocketfft's pass structure and operation order, so that it rounds as numpy does; other lengths use
the batched FFT. The length, axis and frame step must be build-time constants.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from ..errors import InputError
from ..kernels.fft import FFTJob, emit_fft, fft_lanes
from ..kernels.loops import element, loop, nest, offset
from ..kernels.scalar import llvm_type
from ..opspec import register

FLOATS = ("float32", "float64", "float16")
F64 = np.dtype(np.float64)


def _const_int(k, i: int, what: str) -> int | None:
    """Scalar int input i (None when absent); NeedsConstant when it is not a build-time constant."""
    value = k.constant_input(i, what)
    return None if value is None else int(np.ravel(value)[0])


def twiddles(k, n: int):
    """(cos, sin) of 2 pi j / n, j < n, as float64 constant arrays (exact at the quarter points)."""
    j = np.arange(n, dtype=np.float64)
    cos, sin = np.cos(2 * np.pi * j / n), np.sin(2 * np.pi * j / n)
    for q, (c, s) in enumerate(((1, 0), (0, 1), (-1, 0), (0, -1))):
        hit = (4 * np.arange(n)) == q * n
        cos[hit], sin[hit] = c, s
    return k.constant_array(cos), k.constant_array(sin)


def dft_bins(k, n: int, nbins: int, used: int, load, store, inverse: bool, scale: float, tables) -> None:
    """For each bin kb < nbins: store(kb, re, im) of scale * sum_{t < used} x[t] e^(-+2 pi i kb t / n).

    load(t) -> (re, im or None) as float64 values."""
    b = k.b
    f64 = ir.DoubleType()
    cos_t, sin_t = tables
    zero = ir.Constant(f64, 0.0)
    with loop(k, nbins) as kb:
        acc_r, acc_i, j = k.local(f64, zero), k.local(f64, zero), k.local(k.idx_t, k.index(0))
        with k.for_range(used) as t:
            xr, xi = load(t)
            jj = b.load(j)
            c, s = b.load(element(k, cos_t, jj)), b.load(element(k, sin_t, jj))
            if inverse:  # (xr + i xi)(c + i s)
                re, im = b.fmul(xr, c), b.fmul(xr, s)
                if xi is not None:
                    re, im = b.fsub(re, b.fmul(xi, s)), b.fadd(im, b.fmul(xi, c))
            else:  # (xr + i xi)(c - i s)
                re, im = b.fmul(xr, c), b.fneg(b.fmul(xr, s))
                if xi is not None:
                    re, im = b.fadd(re, b.fmul(xi, s)), b.fadd(im, b.fmul(xi, c))
            b.store(b.fadd(b.load(acc_r), re), acc_r)
            b.store(b.fadd(b.load(acc_i), im), acc_i)
            nj = b.add(jj, kb)
            b.store(b.select(b.icmp_signed(">=", nj, k.index(n)), b.sub(nj, k.index(n)), nj), j)
        re, im = b.load(acc_r), b.load(acc_i)
        if scale != 1.0:
            re, im = b.fmul(re, ir.Constant(f64, scale)), b.fmul(im, ir.Constant(f64, scale))
        store(kb, re, im)


# -- single-precision mixed-radix FFT ----------------------------------------------------------------
FFT_RADICES = (2, 3, 4, 5, 8)
FFT_MAX_UNROLLED = 128
"""Longest transform emitted as straight-line code (about 5 n log n operations)."""


def fft_factors(n: int) -> list[int] | None:
    """The radix sequence pocketfft (numpy's FFT) uses for length n: 8s, 4s, a 2 moved to the front,
    then odd factors; None when a factor has no butterfly here."""
    fact, rest = [], n
    while rest % 8 == 0:
        fact.append(8)
        rest //= 8
    while rest % 4 == 0:
        fact.append(4)
        rest //= 4
    if rest % 2 == 0:
        rest //= 2
        fact.append(2)
        fact[0], fact[-1] = fact[-1], fact[0]
    d = 3
    while d * d <= rest:
        while rest % d == 0:
            fact.append(d)
            rest //= d
        d += 2
    if rest > 1:
        fact.append(rest)
    return fact if all(f in FFT_RADICES for f in fact) else None


_TW3 = 0.8660254037844386467637231707529362
_TW5 = (0.3090169943749474241022934171828191, 0.9510565162951535721164393333793821,
        -0.8090169943749474241022934171828191, 0.5877852522924731291687059546390728)
_HSQT2 = 0.707106781186547524400844362104849


def mixed_radix_fft(A, x: list, forward: bool, fct: float) -> list:
    """Decimation-in-frequency Cooley-Tukey passes over complex values x (pairs of A scalars), in the
    order and with the operation sequence of pocketfft's complex passes, so that single-precision
    results round exactly as numpy's do; fct scales the result (1/n for the inverse).

    A: arithmetic backend with add, sub, mul, neg and const(python float) (an LLVM builder, or numpy
    float32 scalars in tests). Twiddles are cos/sin of 2 pi m / n computed in double, then A.const."""
    n = len(x)
    if n == 1:
        return [(A.mul(x[0][0], A.const(fct)), A.mul(x[0][1], A.const(fct)))] if fct != 1 else list(x)
    sign = -1.0 if forward else 1.0

    def add(a, b):
        return (A.add(a[0], b[0]), A.add(a[1], b[1]))

    def sub(a, b):
        return (A.sub(a[0], b[0]), A.sub(a[1], b[1]))

    def scale(a, c):
        return (A.mul(a[0], A.const(c)), A.mul(a[1], A.const(c)))

    def twiddle(a, m):  # a * w^(+-m): conj(w) when forward
        ang = 2 * np.pi * m / n
        wr, wi = A.const(np.cos(ang)), A.const(np.sin(ang))
        if forward:
            return (A.add(A.mul(a[0], wr), A.mul(a[1], wi)), A.sub(A.mul(a[1], wr), A.mul(a[0], wi)))
        return (A.sub(A.mul(a[0], wr), A.mul(a[1], wi)), A.add(A.mul(a[0], wi), A.mul(a[1], wr)))

    def rot90(a):  # multiply by i
        return (A.neg(a[1]), a[0])

    def rotx90(a):  # by -i forward, i inverse
        return (a[1], A.neg(a[0])) if forward else (A.neg(a[1]), a[0])

    def rotx45(a):
        h = A.const(_HSQT2)
        if forward:
            return (A.mul(h, A.add(a[0], a[1])), A.mul(h, A.sub(a[1], a[0])))
        return (A.mul(h, A.sub(a[0], a[1])), A.mul(h, A.add(a[1], a[0])))

    def rotx135(a):
        h = A.const(_HSQT2)
        if forward:
            return (A.mul(h, A.sub(a[1], a[0])), A.mul(h, A.sub(A.neg(a[0]), a[1])))
        return (A.mul(h, A.sub(A.neg(a[0]), a[1])), A.mul(h, A.sub(a[0], a[1])))

    cc, l1 = list(x), 1
    for ip in fft_factors(n):
        ido = n // (ip * l1)
        ch = [None] * n

        def put(i, k, j, v, ch=ch, ido=ido, l1=l1):
            ch[i + ido * (k + l1 * j)] = v

        def tw(v, j, i, l1=l1):  # the twiddle of output j at position i of this pass
            return v if i == 0 else twiddle(v, j * l1 * i)
        for k in range(l1):
            for i in range(ido):
                c = [cc[i + ido * (j + ip * k)] for j in range(ip)]
                if ip == 2:
                    put(i, k, 0, add(c[0], c[1]))
                    put(i, k, 1, tw(sub(c[0], c[1]), 1, i))
                elif ip == 3:
                    t0, t1, t2 = c[0], add(c[1], c[2]), sub(c[1], c[2])
                    put(i, k, 0, add(t0, t1))
                    ca = add(t0, scale(t1, -0.5))
                    cb = rot90(scale(t2, sign * _TW3))
                    put(i, k, 1, tw(add(ca, cb), 1, i))
                    put(i, k, 2, tw(sub(ca, cb), 2, i))
                elif ip == 4:
                    t2, t1 = add(c[0], c[2]), sub(c[0], c[2])
                    t3, t4 = add(c[1], c[3]), sub(c[1], c[3])
                    t4 = rotx90(t4)
                    put(i, k, 0, add(t2, t3))
                    put(i, k, 1, tw(add(t1, t4), 1, i))
                    put(i, k, 2, tw(sub(t2, t3), 2, i))
                    put(i, k, 3, tw(sub(t1, t4), 3, i))
                elif ip == 5:
                    tw1r, tw1i, tw2r, tw2i = _TW5[0], sign * _TW5[1], _TW5[2], sign * _TW5[3]
                    t0 = c[0]
                    t1, t4 = add(c[1], c[4]), sub(c[1], c[4])
                    t2, t3 = add(c[2], c[3]), sub(c[2], c[3])
                    put(i, k, 0, (A.add(A.add(t0[0], t1[0]), t2[0]), A.add(A.add(t0[1], t1[1]), t2[1])))
                    for u1, u2, ar, br, ai, bi in ((1, 4, tw1r, tw2r, tw1i, tw2i), (2, 3, tw2r, tw1r, tw2i, -tw1i)):
                        ca = (A.add(A.add(t0[0], A.mul(A.const(ar), t1[0])), A.mul(A.const(br), t2[0])),
                              A.add(A.add(t0[1], A.mul(A.const(ar), t1[1])), A.mul(A.const(br), t2[1])))
                        cb = (A.neg(A.add(A.mul(A.const(ai), t4[1]), A.mul(A.const(bi), t3[1]))),
                              A.add(A.mul(A.const(ai), t4[0]), A.mul(A.const(bi), t3[0])))
                        put(i, k, u1, tw(add(ca, cb), u1, i))
                        put(i, k, u2, tw(sub(ca, cb), u2, i))
                else:  # 8
                    a1, a5 = add(c[1], c[5]), sub(c[1], c[5])
                    a3, a7 = add(c[3], c[7]), sub(c[3], c[7])
                    a1, a3 = add(a1, a3), sub(a1, a3)
                    a3, a7 = rotx90(a3), rotx90(a7)
                    a5, a7 = add(a5, a7), sub(a5, a7)
                    a5, a7 = rotx45(a5), rotx135(a7)
                    a0, a4 = add(c[0], c[4]), sub(c[0], c[4])
                    a2, a6 = add(c[2], c[6]), sub(c[2], c[6])
                    a0, a2 = add(a0, a2), sub(a0, a2)
                    put(i, k, 0, add(a0, a1))
                    put(i, k, 4, tw(sub(a0, a1), 4, i))
                    put(i, k, 2, tw(add(a2, a3), 2, i))
                    put(i, k, 6, tw(sub(a2, a3), 6, i))
                    a6 = rotx90(a6)
                    a4, a6 = add(a4, a6), sub(a4, a6)
                    put(i, k, 1, tw(add(a4, a5), 1, i))
                    put(i, k, 5, tw(sub(a4, a5), 5, i))
                    put(i, k, 3, tw(add(a6, a7), 3, i))
                    put(i, k, 7, tw(sub(a6, a7), 7, i))
        cc, l1 = ch, l1 * ip
    return [scale(v, fct) for v in cc] if fct != 1 else cc


class IRArith:
    """mixed_radix_fft's backend emitting LLVM float operations (no fast-math: the rounding is the point)."""

    def __init__(self, b: ir.IRBuilder, ty: ir.Type, dtype):
        self.b, self.ty, self.dtype = b, ty, np.dtype(dtype)

    def add(self, x, y):
        return self.b.fadd(x, y)

    def sub(self, x, y):
        return self.b.fsub(x, y)

    def mul(self, x, y):
        return self.b.fmul(x, y)

    def neg(self, x):
        return self.b.fneg(x)

    def const(self, v):
        return ir.Constant(self.ty, float(self.dtype.type(v)))


def _loader(k, x, base, step: int, complex_in: bool, weight=None):
    """load(t) for a signal x[base + t*step (+ last-dim stride for the imaginary part when complex_in)], as float64."""
    b = k.b

    def load(t):
        off = offset(k, 0, (base, 1), (t, step))
        xr = k.s.cast(x.dtype, F64, b.load(element(k, x.ptr, off)))
        xi = k.s.cast(x.dtype, F64, b.load(element(k, x.ptr, offset(k, x.strides[-1], (off, 1))))) if complex_in else None
        if weight is not None:
            w = weight(t)
            xr = b.fmul(xr, w)
            xi = b.fmul(xi, w) if xi is not None else None
        return xr, xi
    return load


def _dft_as_fft(k, x, out, axis: int, rows: list[int], n: int, inverse: bool, onesided: bool, lanes: int) -> None:
    """DFT over `axis` of every signal in one batched FFT (irfft: the inverse of the full Hermitian spectrum)."""
    b, m = k.b, x.shape[axis]
    irfft = inverse and onesided

    def load(ix, t):
        xbase = offset(k, 0, *((i, x.strides[d]) for i, d in zip(ix, rows)))
        return _loader(k, x, xbase, x.strides[axis], x.shape[-1] == 2)(t)

    def store(ix, j, re, im):
        obase = offset(k, 0, *((i, out.strides[d]) for i, d in zip(ix, rows)))
        o = offset(k, 0, (obase, 1), (j, out.strides[axis]))
        b.store(k.s.cast(F64, out.dtype, re), element(k, out.ptr, o))
        if not irfft:
            b.store(k.s.cast(F64, out.dtype, im), element(k, out.ptr, offset(k, out.strides[-1], (o, 1))))
    used = min(m, n // 2 + 1) if irfft else min(m, n)
    job = FFTJob(n, int(np.prod([x.shape[d] for d in rows], dtype=np.int64)), used, out.shape[axis], not inverse,
                 1.0 / n if inverse else 1.0, load, store, hermitian=irfft)
    emit_fft(k, job, [x.shape[d] for d in rows], lanes)


@register("DFT", since=17, dtypes=FLOATS, heavy=True)
def lower_dft(k):
    x, out = k.inputs[0], k.outputs[0]
    b = k.b
    if x.shape[-1] not in (1, 2):
        raise InputError(f"node {k.node.name!r} (DFT): the last input dim must be 1 (real) or 2 (complex), not {x.shape[-1]}")
    if k.graph.opset >= 20:
        axis = _const_int(k, 2, "axis")
        axis = -2 if axis is None else axis
    else:
        axis = int(k.attr("axis", 1))
    axis = axis + x.rank if axis < 0 else axis
    if not 0 <= axis < x.rank - 1:
        raise InputError(f"node {k.node.name!r} (DFT): axis {axis} must name a signal dim, not the last (complex) one")
    inverse, onesided = bool(k.attr("inverse", 0)), bool(k.attr("onesided", 0))
    m = x.shape[axis]
    n = _const_int(k, 1, "dft_length")
    if n is None:
        n = 2 * (m - 1) if inverse and onesided else m
    if n <= 0:
        raise InputError(f"node {k.node.name!r} (DFT): dft_length must be positive, got {n}")
    if out.size == 0:
        return
    fft_inverse = (inverse and not onesided and x.dtype in (np.float32, np.float64) and out.dtype == x.dtype
                   and n <= FFT_MAX_UNROLLED and fft_factors(n) is not None)
    rows = [d for d in range(x.rank - 1) if d != axis]
    lanes = fft_lanes(n, k.vector_bits)
    if lanes and not fft_inverse:
        _dft_as_fft(k, x, out, axis, rows, n, inverse, onesided, lanes)
        return
    tables = None if fft_inverse else twiddles(k, n)

    def row(ix):
        xbase = offset(k, 0, *((i, x.strides[d]) for i, d in zip(ix, rows)))
        obase = offset(k, 0, *((i, out.strides[d]) for i, d in zip(ix, rows)))
        load = _loader(k, x, xbase, x.strides[axis], x.shape[-1] == 2)

        def put(pos, value, comp):
            o = offset(k, comp * out.strides[-1], (obase, 1), (pos, out.strides[axis]))
            b.store(k.s.cast(F64, out.dtype, value), element(k, out.ptr, o))

        if inverse and onesided:
            # irfft: y[t] = 1/n sum_{kb <= n/2} c_kb Re(X_kb e^(2 pi i kb t / n)), c = 1 at DC and Nyquist, else 2
            used = min(m, n // 2 + 1)
            coef = np.full(used, 2.0)
            coef[0] = 1.0
            if n % 2 == 0 and n // 2 < used:
                coef[n // 2] = 1.0
            coef_t = k.constant_array(coef / n)
            base_load = load

            def weighted(kb):
                xr, xi = base_load(kb)
                w = b.load(element(k, coef_t, kb))
                return b.fmul(xr, w), (b.fmul(xi, w) if xi is not None else None)
            # sum over kb of X_kb e^(+2 pi i kb t / n): the same loop with the roles of t and kb swapped
            dft_bins(k, n, out.shape[axis], used, weighted, lambda t, re, im: put(t, re, 0), True, 1.0, tables)
            return

        if fft_inverse:
            # numpy's ifft runs pocketfft in the input precision: the same passes, straight-line
            A = IRArith(b, llvm_type(x.dtype), x.dtype)
            zero = A.const(0.0)
            values = []
            for t in range(n):
                if t < m:
                    off = offset(k, t * x.strides[axis], (xbase, 1))
                    xr = b.load(element(k, x.ptr, off))
                    xi = b.load(element(k, x.ptr, offset(k, x.strides[-1], (off, 1)))) if x.shape[-1] == 2 else zero
                    values.append((xr, xi))
                else:
                    values.append((zero, zero))
            for t, (re, im) in enumerate(mixed_radix_fft(A, values, False, 1.0 / n)):
                o = offset(k, t * out.strides[axis], (obase, 1))
                b.store(re, element(k, out.ptr, o))
                b.store(im, element(k, out.ptr, offset(k, out.strides[-1], (o, 1))))
            return

        def store(kb, re, im):
            put(kb, re, 0)
            put(kb, im, 1)
        dft_bins(k, n, out.shape[axis], min(m, n), load, store, inverse, 1.0 / n if inverse else 1.0, tables)
    nest(k, [x.shape[d] for d in rows], row)


@register("STFT", since=17, dtypes=FLOATS, heavy=True)
def lower_stft(k):
    x, out = k.inputs[0], k.outputs[0]
    b = k.b
    if x.rank not in (2, 3) or (x.rank == 3 and x.shape[-1] not in (1, 2)):
        raise InputError(f"node {k.node.name!r} (STFT): the signal must be [batch, length] or [batch, length, 1 or 2], "
                         f"not {list(x.shape)}")
    step = _const_int(k, 1, "frame_step")
    window = k.inputs[2] if len(k.inputs) > 2 else None
    length = _const_int(k, 3, "frame_length")
    if length is None:
        length = window.shape[0] if window is not None else x.shape[1]
    if window is not None and window.shape[0] != length:
        raise InputError(f"node {k.node.name!r} (STFT): window length {window.shape[0]} differs from frame_length {length}")
    if step is None or step <= 0:
        raise InputError(f"node {k.node.name!r} (STFT): frame_step must be a positive build-time constant")
    if out.size == 0:
        return
    frames, nbins = out.shape[1], out.shape[2]

    def window_at(t):
        return k.s.cast(window.dtype, F64, b.load(element(k, window.ptr, offset(k, 0, (t, window.strides[0])))))

    def frame_loader(bi, f):
        xbase = offset(k, 0, (bi, x.strides[0]), (f, step * x.strides[1]))
        return _loader(k, x, xbase, x.strides[1], x.rank == 3 and x.shape[-1] == 2, window_at if window is not None else None)

    lanes = fft_lanes(length, k.vector_bits)
    if lanes:
        def store_bin(ix, kb, re, im):
            o = offset(k, 0, (ix[0], out.strides[0]), (ix[1], out.strides[1]), (kb, out.strides[2]))
            b.store(k.s.cast(F64, out.dtype, re), element(k, out.ptr, o))
            b.store(k.s.cast(F64, out.dtype, im), element(k, out.ptr, offset(k, out.strides[3], (o, 1))))
        job = FFTJob(length, x.shape[0] * frames, min(length, x.shape[1]), nbins, True, 1.0,
                     lambda ix, t: frame_loader(*ix)(t), store_bin)
        emit_fft(k, job, [x.shape[0], frames], lanes)
        return
    tables = twiddles(k, length)

    def frame(ix):
        bi, f = ix
        obase = offset(k, 0, (bi, out.strides[0]), (f, out.strides[1]))
        load = frame_loader(bi, f)

        def store(kb, re, im):
            o = offset(k, 0, (obase, 1), (kb, out.strides[2]))
            b.store(k.s.cast(F64, out.dtype, re), element(k, out.ptr, o))
            b.store(k.s.cast(F64, out.dtype, im), element(k, out.ptr, offset(k, out.strides[3], (o, 1))))
        dft_bins(k, length, nbins, min(length, x.shape[1]), load, store, False, 1.0, tables)
    nest(k, [x.shape[0], frames], frame)
