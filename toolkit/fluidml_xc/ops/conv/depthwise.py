"""The Conv kernel's channels-last depthwise blocks (conv2d.py lower_conv): vectors over channels x P pixels, weights repacked
to [kh][kw][G rounded up to vectors]; aarch64 stores two vectors per pixel with one st1; RVV (blocking.dw_rows) runs
each channel unit over a whole output row, its weight vectors kept in registers (docs/RISCV_KERNELS.md)."""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from ...kernels.conv_plan import ConvPlan
from ...kernels.epilogue import epilogue, fill
from ...kernels.loops import element, loop, offset
from ...kernels.scalar import llvm_type
from ...kernels.vectors import load_lanes, mac, store_lanes
from .walk import ConvKernel


ZERO_ROWS = "fxc_zero_rows"


def zero_row(k, nbytes: int, ptr_type: ir.Type) -> ir.Value:
    """The program's zeroed row of at least `nbytes`, as a `ptr_type`: a common symbol, so the linker gives every
    unit and code variant one block of the largest size any asks for, in .bss (no bytes in the file; its pages are
    only read, so they stay the system's shared zero page)."""
    data = k.module.globals.get(ZERO_ROWS)
    if data is None:
        data = ir.GlobalVariable(k.module, ir.ArrayType(ir.IntType(8), nbytes), ZERO_ROWS)
        # hidden (a shared library keeps its own row): llvmlite prints no visibility for a global variable, but
        # prints its storage class right after the linkage, where LLVM's grammar takes the visibility
        data.linkage, data.storage_class = "common", "hidden"
        data.align = 64
    elif data.value_type.count < nbytes:  # a module of several convs (the JIT's): its largest (IR printed later)
        data.value_type = ir.ArrayType(ir.IntType(8), nbytes)
        data.type = data.value_type.as_pointer()
    data.initializer = ir.Constant(data.value_type, None)
    return k.b.bitcast(data, ptr_type)


class ChannelsLastDepthwise:
    """Channels-last depthwise blocks of one conv: reads only the ConvKernel (walk.py) and its ConvPlan."""

    def __init__(self, kernel: ConvKernel, plan: ConvPlan):
        self.c, self.p, self.k = kernel, plan, kernel.k
        self.s, self.bl = plan.shape, plan.blocking

    def row(self, n, oh, kh_range):
        """Output row oh of image n: pixel blocks x channel units, the channel units outermost under blocking.dw_rows."""
        sources = None  # plan.zero_rows: where each kernel row reads (source_row)
        if self.p.zero_rows:
            zero = zero_row(self.k, self.p.zero_rows * np.dtype(self.p.dtype).itemsize, self.c.xp.type)
            sources = [self.source_row(n, oh, kh, zero) for kh in range(self.s.KH)]
        if self.bl.dw_rows:
            self.channels_dw(lambda c0, lanes, nvec: self.c.pixel_blocks(
                oh, kh_range, lambda ow, pixels: self.block_dw(n, c0, lanes, nvec, oh, ow, pixels, kh_range, sources)))
        else:
            self.c.pixel_blocks(oh, kh_range, lambda ow, pixels: self.channels_dw(
                lambda c0, lanes, nvec: self.block_dw(n, c0, lanes, nvec, oh, ow, pixels, kh_range, sources)))

    def block_dw(self, n, c0, lanes: int, nvec: int, oh, ow, pixels, kh_range, sources=None):
        """Channels [c0, c0 + nvec * lanes) (nvec vectors) x pixels (their kw ranges) of row oh from column ow, depthwise."""
        k, b, dt = self.k, self.k.b, self.p.dtype
        ty = ir.VectorType(llvm_type(dt), lanes) if lanes > 1 else llvm_type(dt)
        slots = []
        for v in range(nvec):
            if self.c.bias is not None:
                bs = self.c.bias.strides[0]
                init = load_lanes(k, self.c.bias.ptr, offset(k, v * lanes * bs, (c0, bs)), lanes, bs, False)
            else:
                init = fill(ty, 0.0)
            slots.append([k.local(ty, init) for _ in pixels])
        xs, os_, gp = self.s.xs, self.s.os, -(-self.s.G // self.p.V) * self.p.V
        kw_lo, kw_hi = pixels[0] if len(pixels) == 1 else (min(r[0] for r in pixels), max(r[1] for r in pixels))

        xblk, oblk = self.c.xp, self.c.op
        if self.p.settle_rows and lanes > 1:
            # armv7: one input and one output address per block, rows and pixels at offsets from them; where
            # LLVM hoisted a base per input row and per pixel, 13 registers could not hold them and the loop
            # reloaded them from the stack
            xblk = self.c.opaque(element(k, xblk, offset(k, -self.s.ph * xs[2] - self.s.pw * xs[3], (n, xs[0]), (c0, xs[1]),
                                                           (oh, self.s.sh * xs[2]), (ow, self.s.sw * xs[3]))))
            oblk = self.c.opaque(element(k, oblk, offset(k, 0, (n, os_[0]), (c0, os_[1]), (oh, os_[2]), (ow, os_[3]))))

        def row_taps(kh):
            src = xblk
            if sources is not None:
                src, row = sources[kh], offset(k, -self.s.pw * xs[3], (c0, xs[1]), (ow, self.s.sw * xs[3]))
            elif xblk is self.c.xp:
                ih = offset(k, -self.s.ph, (oh, self.s.sh), (kh, self.s.dh))
                row = offset(k, -self.s.pw * xs[3], (n, xs[0]), (c0, xs[1]), (ih, xs[2]), (ow, self.s.sw * xs[3]))
            else:
                row = offset(k, 0, (kh, self.s.dh * xs[2]))
            wrow = offset(k, 0, (kh, self.s.KW * gp), (c0, 1))

            def tap(kw):
                wv = [load_lanes(k, self.c.packed, offset(k, v * lanes, (wrow, 1), (kw, gp)), lanes, 1, False) for v in range(nvec)]
                xbase = offset(k, 0, (row, 1), (kw, self.s.dw * xs[3]))
                for p, (plo, phi) in enumerate(pixels):
                    if isinstance(kw, int) and isinstance(plo, int) and not plo <= kw < phi:
                        continue
                    for v in range(nvec):
                        xv = load_lanes(k, src, offset(k, p * self.s.sw * xs[3] + v * lanes * xs[1], (xbase, 1)), lanes, xs[1], False)
                        b.store(mac(k, dt, b.load(slots[v][p]), xv, wv[v]), slots[v][p])
            if not isinstance(kw_lo, int) and self.p.unroll_kw:  # an edge column (edge_loop): its taps guarded
                self.c.guarded((kw_lo, kw_hi), self.s.KW, tap)
            else:
                self.c.each((kw_lo, kw_hi), tap, self.p.unroll_kw or len(set(pixels)) > 1)  # per-pixel ranges need constant kw
            if self.p.settle_rows and lanes > 1:
                # armv7: one kernel row at a time, or the scheduler hoists the next rows' loads and spills
                self.c.settle(slots)
            elif lanes > 1 and self.c.scalar_riscv():
                # the U74: without the fence the scheduler hoists the next rows' loads and the loop spills
                # (benchmarks/mca.py: 210 stack accesses, 14% of peak; with it 15-23, 32-33%)
                self.c.settle_lanes(slots)
        self.c.each(kh_range, row_taps, self.p.unroll_taps)
        if nvec == 2 and self.c.res is None and os_[1] == 1 and isinstance(ty, ir.VectorType) and ty.element == ir.FloatType() and ty.count == 4:
            # one st1 {v.4s, v.4s} per pixel, whatever the pixel stride (LLVM's Neoverse-N1 model charges
            # each str q at an immediate offset both V pipes, one st1 of two vectors one each)
            st = k.module.globals.get("llvm.aarch64.neon.st1x2.v4f32.p0") or ir.Function(
                k.module, ir.FunctionType(ir.VoidType(), [ty, ty, ty.element.as_pointer()]), "llvm.aarch64.neon.st1x2.v4f32.p0")
            for p in range(len(pixels)):
                off = offset(k, p * os_[3], (n, os_[0]), (c0, os_[1]), (oh, os_[2]), (ow, os_[3]))
                b.call(st, [epilogue(k, self.p.epilogue, b.load(slots[v][p])) for v in range(2)] + [element(k, self.c.op, off)])
            return
        for p in range(len(pixels)):
            for v in range(nvec):
                if oblk is self.c.op:
                    off = offset(k, p * os_[3] + v * lanes * os_[1], (n, os_[0]), (c0, os_[1]), (oh, os_[2]), (ow, os_[3]))
                else:
                    off = p * os_[3] + v * lanes * os_[1]
                residual = None
                if self.c.res is not None:
                    rs, rp = self.c.res
                    roff = offset(k, p * rs[3] + v * lanes * rs[1], (n, rs[0]), (c0, rs[1]), (oh, rs[2]), (ow, rs[3]))
                    residual = lambda roff=roff: load_lanes(k, rp, roff, lanes, rs[1], False)
                store_lanes(k, oblk, off, epilogue(k, self.p.epilogue, b.load(slots[v][p]), residual), lanes, os_[1])

    def source_row(self, n, oh, kh, zero):
        """Where kernel row kh of output row oh reads: the start of its input row, or the zero row when that row lies
        outside the input (plan.zero_rows)."""
        k, b, xs = self.k, self.k.b, self.s.xs
        ih = offset(k, -self.s.ph, (oh, self.s.sh), (kh, self.s.dh))
        if isinstance(ih, int) and not 0 <= ih < self.s.H:
            return zero
        start = element(k, self.c.xp, offset(k, 0, (n, xs[0]), (ih, xs[2])))
        if isinstance(ih, int):
            return start
        return b.select(b.icmp_unsigned("<", ih, k.index(self.s.H)), start, zero)

    def channels_dw(self, fn):
        """fn(c0, lanes, nvec): units of dw_vec channel vectors in a loop, then the remaining vectors
        one by one, then the remaining channels one by one (under cb_rng: the units [lo, hi) of them,
        the rest with the last chunk)."""
        k, V, unit = self.k, self.p.V, self.bl.dw_vec * self.p.V
        full = self.s.G // unit

        def rest():
            self.c.span(0, (self.s.G - full * unit) // V, lambda j: fn(offset(k, full * unit, (j, V)), V, 1))
            self.c.span(self.s.G // V * V, self.s.G, lambda c: fn(c, 1, 1))
        if self.c.cb_rng is not None:
            lo, hi = self.c.cb_rng
            with loop(k, k.imin(hi, k.index(full)), lo) as cb:
                fn(offset(k, 0, (cb, unit)), V, self.bl.dw_vec)
            if self.s.G % unit:
                with k.b.if_then(k.b.icmp_signed(">", hi, k.index(full))):
                    rest()
            return
        self.c.span(0, full, lambda cb: fn(offset(k, 0, (cb, unit)), V, self.bl.dw_vec))
        rest()

