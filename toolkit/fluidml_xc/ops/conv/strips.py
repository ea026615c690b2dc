"""RVV NCHW depthwise 3x3 as column strips (docs/RISCV_KERNELS.md "X60 NCHW depthwise"): a strip of V columns walks
down the channel plane, each step loading one input row once (one vector and its two neighbour columns as integers,
the kw = 0 and kw = 2 taps slid from it) and giving its 9 taps to the 3 output rows it feeds; the next row's loads
and the finished row's epilogue and store are emitted early in the step, so their latencies overlap its
multiply-adds (llvm-mca-22 on the X60: 70.3% of peak; benchmarks/x60_nchw.py's hand schedule of the step 72%)."""
from __future__ import annotations

import math
import struct

from llvmlite import ir

from ...kernels.conv_plan import ConvPlan, strips_fit
from ...kernels.epilogue import epilogue
from ...kernels.loops import element, loop, offset
from ...kernels.scalar import llvm_type
from ...kernels.vectors import fused, store_lanes
from .rows import RowVectors
from .walk import ConvKernel

STRIP_STEPS = 5
"""Steps per loop iteration: the accumulators' three roles come back to their registers (2 and 4 steps leave vector
moves); llvm-mca-22 on the X60, 3 to 10 steps: 59 / 59 / 70 / 68-70 / 52 / 42% of peak."""
STORE_AFTER = 2
"""The finished row's epilogue and store come after this many of the step's multiply-adds (the next row's loads
first): 128 cycles per 5 steps, 129-130 elsewhere in the step."""


def column_strips(c: ConvKernel, p: ConvPlan) -> bool:
    """strips_fit for the conv being emitted."""
    return strips_fit(p, c.rvv(), c.res is not None)


class ColumnStrips:
    """Every strip of one channel plane (n, g), over the output rows of the tile (c.row_rng) or all of them."""

    def __init__(self, c: ConvKernel, p: ConvPlan, n, g):
        self.c, self.p, self.k, self.s, self.n, self.g = c, p, c.k, p.shape, n, g
        k, V = self.k, p.V
        self.V = V
        self.fty, self.ity = ir.VectorType(llvm_type(p.dtype), V), ir.VectorType(ir.IntType(32), V)
        rows = RowVectors(c, p)
        self.w = [[k.splat(rows.weight(g, 0, 0, 0, kh, kw), V) for kw in range(3)] for kh in range(3)]
        if c.bias is not None:
            bs = c.bias.strides[0]
            bias = k.b.load(element(k, c.bias.ptr, offset(k, 0, (g, self.s.Cog * bs))))
        else:
            bias = ir.Constant(self.fty.element, 0.0)
        self.bias = k.splat(bias, V)

    def emit(self):
        s, k = self.s, self.k
        cols = list(range(0, s.W - self.p.V, self.p.V)) + [s.W - self.p.V]
        r0, r1 = self.c.row_rng if self.c.row_rng is not None else (k.index(0), k.index(s.OH))
        with k.b.if_then(k.b.icmp_signed("<", r0, r1)):
            for col in cols:
                self.strip(col, r0, r1)

    def triple(self, i, col: int, guard: bool, at=None):
        """Input row i's taps kw = 0, 1, 2 at the strip (at: the row's pointer instead), zeros outside the plane's
        columns; guard: row i may be outside the plane, then zeros."""
        k, b, s, V = self.k, self.k.b, self.s, self.p.V
        inside = None
        if guard:
            inside = b.and_(b.icmp_signed(">=", i, k.index(0)), b.icmp_signed("<", i, k.index(s.H)))
            i = k.imin(k.imax(i, k.index(0)), k.index(s.H - 1))
        xp, base = (at, 0) if at is not None else (self.c.xp, offset(k, col, (self.n, s.xs[0]), (self.g, s.xs[1]), (i, s.xs[2])))
        i32 = ir.IntType(32)
        # integer lanes: LLVM slides them on the vector integer unit (vslide1up.vx / vslide1down.vx), where float
        # lanes take vfslide1up.vf on the FP unit that runs the multiply-adds
        bits = b.load(b.bitcast(element(k, xp, base), self.ity.as_pointer()), align=4)
        mid = b.bitcast(bits, self.fty)

        def neighbour(d: int):
            if not 0 <= col + d < s.W:
                return ir.Constant(self.ity, [ir.Constant(i32, 0)] * V)
            return k.splat(b.load(b.bitcast(element(k, xp, offset(k, d, (base, 1))), i32.as_pointer())), V)
        up = b.shuffle_vector(bits, neighbour(-1), ir.Constant(ir.VectorType(i32, V), [V] + list(range(V - 1))))
        down = b.shuffle_vector(bits, neighbour(V), ir.Constant(ir.VectorType(i32, V), list(range(1, V)) + [V]))
        taps = [b.bitcast(up, self.fty), mid, b.bitcast(down, self.fty)]
        if inside is not None:
            zero = ir.Constant(self.fty, [ir.Constant(self.fty.element, 0.0)] * V)
            taps = [b.select(inside, t, zero) for t in taps]
        return taps

    def strip(self, col: int, r0, r1):
        """Steps over input rows r0 - 1 .. r1 + 1: step i finishes output row i - 1 and stores row i - 2."""
        k, b = self.k, self.k.b
        slots = {name: k.local(self.fty) for name in ("L", "M", "R", "a2", "a1", "done")}
        for name, v in zip("LMR", self.triple(b.sub(r0, k.index(1)), col, True)):
            b.store(v, slots[name])
        b.store(self.bias, slots["a1"])
        b.store(self.bias, slots["a2"])
        b.store(self.bias, slots["done"])
        two, steps = k.index(2), STRIP_STEPS
        head_end = b.add(r0, two)  # steps r0 - 1 .. r0 + 1: no row before r0 stored, row r0 - 1 maybe outside
        with loop(k, head_end, b.sub(r0, k.index(1))) as i:
            self.step(slots, i, col, (r0, r1))
        # the hot loop, steps r0 + 2 .. r1 - 2: output row i - 2 inside [r0, r1), input row i + 1 inside the plane;
        # a pointer per plane moved one row a step
        s, first = self.s, head_end
        hot = b.sdiv(k.imax(b.sub(b.sub(r1, k.index(1)), first), k.index(0)), k.index(steps))
        ptrs = (k.local(self.c.xp.type, element(k, self.c.xp, offset(k, col, (self.n, s.xs[0]), (self.g, s.xs[1]), (first, s.xs[2]), (1, s.xs[2])))),
                k.local(self.c.op.type, element(k, self.c.op, offset(k, col, (self.n, s.os[0]), (self.g, s.os[1]), (r0, s.os[2])))))
        with loop(k, hot):
            for _ in range(steps):
                self.step(slots, None, col, ptrs=ptrs)
        with loop(k, b.add(r1, two), b.add(first, b.mul(hot, k.index(steps)))) as i:
            self.step(slots, i, col, (r0, r1))

    def step(self, slots, i, col: int, rows=None, ptrs=None):
        """Input row i: its taps (loaded by the step before) to output rows i - 1 (kh = 2: finished), i (kh = 1) and
        i + 1 (kh = 0, from the bias); the next row's taps loaded first, output row i - 2 stored after STORE_AFTER
        multiply-adds. rows: the tile's [r0, r1) the store is kept in (and the input row may be outside the plane);
        else ptrs: the hot loop's input and output row pointers."""
        k, b, w = self.k, self.k.b, self.w
        L, M, R = (b.load(slots[name]) for name in "LMR")
        a2, a1, done = b.load(slots["a2"]), b.load(slots["a1"]), b.load(slots["done"])
        if rows is not None:
            nxt = self.triple(b.add(i, k.index(1)), col, True)
        else:
            nxt = self.triple(None, col, False, b.load(ptrs[0]))
        acc = [a2, a1, self.bias]
        for j, (t, r) in enumerate((t, r) for t in range(3) for r in range(3)):
            if j == STORE_AFTER:
                if rows is not None:
                    self.store(done, col, (b.sub(i, k.index(2)), *rows))
                else:
                    self.store(done, col, at=b.load(ptrs[1]))
            acc[r] = fused(k, acc[r], w[2 - r][t], (L, M, R)[t])
        a2, a1, a0 = acc
        if ptrs is not None:
            for ptr, stride in zip(ptrs, (self.s.xs[2], self.s.os[2])):
                b.store(element(k, b.load(ptr), stride), ptr)
        for name, v in zip("LMR", nxt):
            b.store(v, slots[name])
        b.store(a2, slots["done"])
        b.store(a1, slots["a2"])
        b.store(a0, slots["a1"])

    def finish(self, value):
        """The plan's epilogue; Clip with bounds 0 <= lo < hi: vfmax on the FP unit, the upper bound as an unsigned
        minimum of the bits on the integer unit (monotone on non-negative floats), NaN lanes kept."""
        epi, b = self.p.epilogue, self.k.b
        lo, hi = epi.bounds if epi is not None else (None, None)
        if (epi is None or epi.residual or epi.activation != "clip" or lo is None or hi is None
                or not 0 <= lo < hi < math.inf or math.copysign(1.0, lo) < 0):  # -0.0: fmax gives -0.0, bits above hi's
            return epilogue(self.k, epi, value)
        V, i32 = self.V, ir.IntType(32)
        mx = b.call(self._fn("llvm.maxnum", self.fty), [value, ir.Constant(self.fty, [ir.Constant(self.fty.element, float(lo))] * V)])
        hbits = struct.unpack("<I", struct.pack("<f", float(hi)))[0]
        umin = b.call(self._fn("llvm.umin", self.ity), [b.bitcast(mx, self.ity), ir.Constant(self.ity, [ir.Constant(i32, hbits)] * V)])
        bits = b.bitcast(value, self.ity)
        number = b.icmp_unsigned("<=", b.shl(bits, ir.Constant(self.ity, [1] * V)), ir.Constant(self.ity, [0xFF000000] * V))
        return b.select(number, b.bitcast(umin, self.fty), value)

    def _fn(self, name, ty):
        full = f"{name}.v{ty.count}{ty.element.intrinsic_name}"
        m = self.k.module
        return m.globals.get(full) or ir.Function(m, ir.FunctionType(ty, [ty, ty]), full)

    def store(self, value, col: int, row=None, at=None):
        """The strip of an output row through the plan's epilogue: row = (o, r0, r1), stored when r0 <= o < r1; or at
        the pointer `at`."""
        k, b, s = self.k, self.k.b, self.s
        if at is not None:
            store_lanes(k, at, 0, self.finish(value), self.p.V, 1)
            return
        o, r0, r1 = row
        with b.if_then(b.and_(b.icmp_signed(">=", o, r0), b.icmp_signed("<", o, r1))):
            off = offset(k, col, (self.n, s.os[0]), (self.g, s.os[1]), (o, s.os[2]))
            store_lanes(k, self.c.op, off, self.finish(value), self.p.V, 1)
