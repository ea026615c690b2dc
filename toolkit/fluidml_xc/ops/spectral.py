"""Spectral ops: DFT (opset 17 and 20 forms; forward, inverse, onesided rfft, irfft) and STFT.

A direct DFT per signal: bin k sums x[t] * exp(-+2 pi i k t / n) with the twiddles read from
build-time cos/sin tables of length n (the table index k*t mod n is kept incrementally, so there is
no trigonometry and no division at run time), accumulated in float64 whatever the tensor dtype (the
expected outputs come from numpy's FFT in double). O(n^2) per signal, no scratch memory. The
length, axis and frame step must be build-time constants.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from ..errors import InputError
from .conv import element, loop, nest, offset
from .registry import register

FLOATS = ("float32", "float64", "float16")
F64 = np.dtype(np.float64)


def _const_int(k, i: int, what: str) -> int | None:
    """Scalar int input i (None when absent); InputError when it is not a build-time constant."""
    if i >= len(k.inputs) or k.inputs[i] is None:
        return None
    value = k.input_value(i)
    if value is None:
        raise InputError(f"node {k.node.name!r} ({k.node.op_type}): {what} (input {i}) must be a build-time constant")
    return int(np.ravel(value)[0])


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


def _loader(k, x, base, step: int, weight=None):
    """load(t) for a signal x[base + t*step (+ last-dim stride for the imaginary part)], as float64."""
    b = k.b
    complex_in = x.shape[-1] == 2

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


@register("DFT", since=17, dtypes=FLOATS)
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
    tables = twiddles(k, n)
    rows = [d for d in range(x.rank - 1) if d != axis]

    def row(ix):
        xbase = offset(k, 0, *((i, x.strides[d]) for i, d in zip(ix, rows)))
        obase = offset(k, 0, *((i, out.strides[d]) for i, d in zip(ix, rows)))
        load = _loader(k, x, xbase, x.strides[axis])

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

        def store(kb, re, im):
            put(kb, re, 0)
            put(kb, im, 1)
        dft_bins(k, n, out.shape[axis], min(m, n), load, store, inverse, 1.0 / n if inverse else 1.0, tables)
    nest(k, [x.shape[d] for d in rows], row)


@register("STFT", since=17, dtypes=FLOATS)
def lower_stft(k):
    x, out = k.inputs[0], k.outputs[0]
    b = k.b
    if x.rank != 3 or x.shape[-1] not in (1, 2):
        raise InputError(f"node {k.node.name!r} (STFT): the signal must be [batch, length, 1 or 2], not {list(x.shape)}")
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
    tables = twiddles(k, length)
    frames, nbins = out.shape[1], out.shape[2]

    def frame(ix):
        bi, f = ix
        xbase = offset(k, 0, (bi, x.strides[0]), (f, step * x.strides[1]))
        obase = offset(k, 0, (bi, out.strides[0]), (f, out.strides[1]))
        weight = None
        if window is not None:
            def weight(t):
                return k.s.cast(window.dtype, F64, b.load(element(k, window.ptr, offset(k, 0, (t, window.strides[0])))))
        load = _loader(k, x, xbase, x.strides[1], weight)

        def store(kb, re, im):
            o = offset(k, 0, (obase, 1), (kb, out.strides[2]))
            b.store(k.s.cast(F64, out.dtype, re), element(k, out.ptr, o))
            b.store(k.s.cast(F64, out.dtype, im), element(k, out.ptr, offset(k, out.strides[3], (o, 1))))
        dft_bins(k, length, nbins, min(length, x.shape[1]), load, store, False, 1.0, tables)
    nest(k, [x.shape[0], frames], frame)
