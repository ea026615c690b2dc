"""A batched mixed-radix FFT in float64 for DFT and STFT (ops/spectral.py).

Signals run `lanes` at a time, one signal per vector lane (a frame per lane of a <lanes x double>): a group's
signals are loaded lane by lane into a stack buffer of n complex vectors (split real / imaginary), transformed
there by Stockham passes (pocketfft's decimation-in-frequency pass structure: radix 4, 2, 3 and 5 butterflies,
a generic O(p^2) butterfly for any other prime factor), and stored lane by lane. Twiddles are build-time float64
tables, one per pass; the groups are the tiles of the op's parallel region. The signal count, length and all
strides are build-time constants; so is the stack (FFT_STACK_BYTES bounds n * lanes).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
from llvmlite import ir

from .loops import element, loop

FFT_STACK_BYTES = 128 * 1024
"""Two buffers of n complex float64 vectors at most: n <= 4096 runs as an FFT with one lane."""
SPECIAL_RADICES = (4, 2, 3, 5)


def fft_radices(n: int) -> list[int]:
    """Factors of n in pass order: 4s, a 2, 3s, 5s, then other primes ascending."""
    fact, rest = [], n
    while rest % 4 == 0:
        fact.append(4)
        rest //= 4
    d = 2
    while rest > 1:
        while rest % d == 0:
            fact.append(d)
            rest //= d
        d += 1 if d == 2 else 2
        if d * d > rest and rest > 1:
            fact.append(rest)
            break
    return fact


def fft_lanes(n: int, vector_bits: int) -> int:
    """Signals per group: one float64 vector's lanes, at most 4 (8 lanes of AVX-512 double the buffers past L1: 400
    points took 0.140 ms for 100 frames at 8, 0.079 at 4), fewer when the buffers would not fit FFT_STACK_BYTES (0: no FFT)."""
    lanes = max(1, min(vector_bits, 256) // 64)
    while lanes > 1 and 4 * 8 * n * lanes > FFT_STACK_BYTES:
        lanes //= 2
    return lanes if 4 * 8 * n * lanes <= FFT_STACK_BYTES else 0


def fft_flops(n: int) -> float:
    return 5.0 * n * max(1.0, np.log2(n)) + sum(p * p for p in fft_radices(n) if p not in SPECIAL_RADICES) * n


@dataclass
class FFTJob:
    """One batched transform: `count` signals of length n (callers map a signal index to their tensors).

    load(s, t) -> (re, im or None): float64 input point t < used of signal s (the rest is zero);
    store(s, j, re, im): float64 output point j < outputs of signal s, scaled by `scale`.
    hermitian: points n - t (0 < t < used, n - t >= used) are conj(point t), the full spectrum of a onesided one."""
    n: int
    count: int
    used: int
    outputs: int
    forward: bool
    scale: float
    load: Callable
    store: Callable
    hermitian: bool = False


class _Complex:
    """Complex arithmetic on (re, im) pairs of <lanes x double> values."""

    def __init__(self, k, lanes: int):
        self.k, self.b, self.lanes = k, k.b, lanes
        self.vt = ir.VectorType(ir.DoubleType(), lanes) if lanes > 1 else ir.DoubleType()

    def c(self, v: float):
        return ir.Constant(self.vt, [float(v)] * self.lanes) if self.lanes > 1 else ir.Constant(self.vt, float(v))

    def add(self, x, y):
        return self.b.fadd(x[0], y[0]), self.b.fadd(x[1], y[1])

    def sub(self, x, y):
        return self.b.fsub(x[0], y[0]), self.b.fsub(x[1], y[1])

    def scale(self, x, f: float):
        return self.b.fmul(x[0], self.c(f)), self.b.fmul(x[1], self.c(f))

    def times_i(self, x, s: float):
        """x * (i s) for a real s."""
        return self.b.fmul(x[1], self.c(-s)), self.b.fmul(x[0], self.c(s))

    def mul(self, x, wr, wi):
        b = self.b
        return b.fsub(b.fmul(x[0], wr), b.fmul(x[1], wi)), b.fadd(b.fmul(x[0], wi), b.fmul(x[1], wr))


def _butterfly(C: _Complex, c: list, p: int, sign: float) -> list:
    """The p outputs y_u = sum_j c_j exp(sign 2 pi i u j / p) for p in SPECIAL_RADICES."""
    if p == 2:
        return [C.add(c[0], c[1]), C.sub(c[0], c[1])]
    if p == 4:
        t2, t1, t3, t4 = C.add(c[0], c[2]), C.sub(c[0], c[2]), C.add(c[1], c[3]), C.sub(c[1], c[3])
        t4 = C.times_i(t4, sign)
        return [C.add(t2, t3), C.add(t1, t4), C.sub(t2, t3), C.sub(t1, t4)]
    if p == 3:
        t1, t2 = C.add(c[1], c[2]), C.sub(c[1], c[2])
        ca, cb = C.add(c[0], C.scale(t1, -0.5)), C.times_i(t2, sign * np.sin(2 * np.pi / 3))
        return [C.add(c[0], t1), C.add(ca, cb), C.sub(ca, cb)]
    c1, s1 = np.cos(2 * np.pi / 5), sign * np.sin(2 * np.pi / 5)
    c2, s2 = np.cos(4 * np.pi / 5), sign * np.sin(4 * np.pi / 5)
    t1, t4, t2, t3 = C.add(c[1], c[4]), C.sub(c[1], c[4]), C.add(c[2], c[3]), C.sub(c[2], c[3])
    y = [C.add(C.add(c[0], t1), t2), None, None, None, None]
    for u1, u2, ar, br, ai, bi in ((1, 4, c1, c2, s1, s2), (2, 3, c2, c1, s2, -s1)):
        ca = C.add(C.add(c[0], C.scale(t1, ar)), C.scale(t2, br))
        cb = C.add(C.times_i(t4, ai), C.times_i(t3, bi))
        y[u1], y[u2] = C.add(ca, cb), C.sub(ca, cb)
    return y


class _Buffers:
    """Two ping-pong buffers of n complex <lanes x double> (split re / im) on the stack."""

    def __init__(self, k, n: int, lanes: int, vt):
        with k.b.goto_entry_block():
            self.bufs = [tuple(k.b.alloca(vt, size=ir.Constant(ir.IntType(32), n)) for _ in range(2)) for _ in range(2)]
        self.k, self.lanes = k, lanes

    def lane_ptr(self, which: int, part: int, pos, lane):
        """double* to lane `lane` of point `pos` (both index values)."""
        b, k = self.k.b, self.k
        flat = b.bitcast(self.bufs[which][part], ir.DoubleType().as_pointer())
        at = b.add(b.mul(pos, k.index(self.lanes), flags=("nsw",)), lane, flags=("nsw",)) if self.lanes > 1 else pos
        return element(k, flat, at)


def _stage_loops(k, extents: list[int], body: Callable[[list], None]) -> None:
    """Loops over build-time extents (outermost first; extents of 1 cost nothing)."""
    def rec(idx):
        if len(idx) == len(extents):
            body(idx)
            return
        if extents[len(idx)] == 1:
            rec([*idx, k.index(0)])
            return
        with loop(k, extents[len(idx)], vectorize=False) as i:
            rec([*idx, i])
    rec([])


def _pass(k, C: _Complex, src, dst, n: int, p: int, l1: int, sign: float) -> None:
    """One Stockham pass: ch[i + ido (kk + l1 u)] = tw(u l1 i) * butterfly(cc[i + ido (j + p kk)])_u."""
    b = k.b
    ido = n // (p * l1)
    tw = None
    if ido > 1:
        m = np.outer(np.arange(1, p), np.arange(ido)) * l1
        ang = sign * 2 * np.pi * m / n
        tw = k.constant_array(np.cos(ang).ravel()), k.constant_array(np.sin(ang).ravel())
    gen = None
    if p not in SPECIAL_RADICES:
        ang = sign * 2 * np.pi * np.arange(p) / p
        gen = k.constant_array(np.cos(ang)), k.constant_array(np.sin(ang))

    def at(buf, pos):
        return element(k, buf[0], pos), element(k, buf[1], pos)

    def splat_load(table, idx):
        return k.splat(b.load(element(k, table, idx)), C.lanes)

    def twiddled(y, u, i):
        if tw is None or u == 0:
            return y
        idx = b.add(i, k.index((u - 1) * ido), flags=("nsw",))
        return C.mul(y, splat_load(tw[0], idx), splat_load(tw[1], idx))

    def body(ix):
        kk, i = ix
        ibase = b.add(i, b.mul(kk, k.index(ido * p), flags=("nsw",)), flags=("nsw",))
        obase = b.add(i, b.mul(kk, k.index(ido), flags=("nsw",)), flags=("nsw",))
        if gen is None:
            c = []
            for j in range(p):
                pr, pi = at(src, b.add(ibase, k.index(j * ido), flags=("nsw",)))
                c.append((b.load(pr), b.load(pi)))
            for u, y in enumerate(_butterfly(C, c, p, sign)):
                y = twiddled(y, u, i)
                pr, pi = at(dst, b.add(obase, k.index(u * ido * l1), flags=("nsw",)))
                b.store(y[0], pr)
                b.store(y[1], pi)
            return
        with loop(k, p, vectorize=False) as u:
            acc = [k.local(C.vt, C.c(0.0)), k.local(C.vt, C.c(0.0))]
            rot = k.local(k.idx_t, k.index(0))
            with loop(k, p, vectorize=False) as j:
                pr, pi = at(src, b.add(ibase, b.mul(j, k.index(ido), flags=("nsw",)), flags=("nsw",)))
                r = b.load(rot)
                y = C.mul((b.load(pr), b.load(pi)), splat_load(gen[0], r), splat_load(gen[1], r))
                b.store(b.fadd(b.load(acc[0]), y[0]), acc[0])
                b.store(b.fadd(b.load(acc[1]), y[1]), acc[1])
                nr = b.add(r, u)
                b.store(b.select(b.icmp_signed(">=", nr, k.index(p)), b.sub(nr, k.index(p)), nr), rot)
            y = (b.load(acc[0]), b.load(acc[1]))
            if tw is not None:
                first = b.icmp_signed("==", u, k.index(0))
                idx = b.add(b.mul(b.select(first, k.index(0), b.sub(u, k.index(1))), k.index(ido)), i)
                wr = b.select(first, C.c(1.0), splat_load(tw[0], idx))
                wi = b.select(first, C.c(0.0), splat_load(tw[1], idx))
                y = C.mul(y, wr, wi)
            pr, pi = at(dst, b.add(obase, b.mul(u, k.index(ido * l1), flags=("nsw",)), flags=("nsw",)))
            b.store(y[0], pr)
            b.store(y[1], pi)
    _stage_loops(k, [l1, ido], body)


def _unflatten(k, s, extents: list[int]) -> list:
    """Index values of flat s over extents (outermost first)."""
    b, idx = k.b, []
    for j, e in enumerate(extents):
        inner = int(np.prod(extents[j + 1:], dtype=np.int64))
        q = s if inner == 1 else b.udiv(s, k.index(inner))
        idx.append(k.index(0) if e == 1 else (q if j == 0 else b.urem(q, k.index(e))))
    return idx


def emit_fft(k, job: FFTJob, extents: list[int], lanes: int) -> None:
    """Run job over the signals of `extents` (their product is job.count); load/store get the signal's index list."""
    b, n = k.b, job.n
    C = _Complex(k, lanes)
    bufs = _Buffers(k, n, lanes, C.vt)
    sign = -1.0 if job.forward else 1.0
    radices = fft_radices(n)
    groups = -(-job.count // lanes)
    last = k.index(job.count - 1)
    zero = ir.Constant(ir.DoubleType(), 0.0)
    with k.parallel_tiles([groups], fft_flops(n) * job.count) as (g,):
        first = b.mul(g, k.index(lanes), flags=("nsw",))
        with loop(k, n, vectorize=False) as t:
            for part in range(2):
                b.store(C.c(0.0), element(k, bufs.bufs[0][part], t))
        with loop(k, lanes, vectorize=False) as lane:
            s = k.imin(b.add(first, lane, flags=("nsw",)), last)
            ix = _unflatten(k, s, extents)
            with loop(k, job.used, vectorize=False) as t:
                re, im = job.load(ix, t)
                b.store(re, bufs.lane_ptr(0, 0, t, lane))
                b.store(im if im is not None else zero, bufs.lane_ptr(0, 1, t, lane))
            if job.hermitian and min(job.used, n - job.used + 1) > 1:
                with loop(k, min(job.used, n - job.used + 1), start=1, vectorize=False) as t:
                    mirror = b.sub(k.index(n), t)
                    re = b.load(bufs.lane_ptr(0, 0, t, lane))
                    im = b.load(bufs.lane_ptr(0, 1, t, lane))
                    b.store(re, bufs.lane_ptr(0, 0, mirror, lane))
                    b.store(b.fneg(im), bufs.lane_ptr(0, 1, mirror, lane))
        l1, which = 1, 0
        for p in radices:
            _pass(k, C, bufs.bufs[which], bufs.bufs[1 - which], n, p, l1, sign)
            l1, which = l1 * p, 1 - which
        valid = k.imin(b.sub(k.index(job.count), first), k.index(lanes))
        with k.for_range(valid) as lane:
            ix = _unflatten(k, b.add(first, lane, flags=("nsw",)), extents)
            with loop(k, job.outputs, vectorize=False) as j:
                re = b.load(bufs.lane_ptr(which, 0, j, lane))
                im = b.load(bufs.lane_ptr(which, 1, j, lane))
                if job.scale != 1.0:
                    re, im = b.fmul(re, ir.Constant(ir.DoubleType(), job.scale)), b.fmul(im, ir.Constant(ir.DoubleType(), job.scale))
                job.store(ix, j, re, im)
