"""The Conv kernel's channel-vector blocks (conv2d.py lower_conv): R = 1-2 vectors of output channels x P pixels, each input
value broadcast once and feeding R multiply-adds; border columns share blocks with interior ones."""
from __future__ import annotations

from llvmlite import ir

from ...kernels.conv_geometry import pixel_groups
from ...kernels.conv_plan import ConvPlan
from ...kernels.epilogue import epilogue
from ...kernels.loops import element, offset
from ...kernels.scalar import llvm_type
from ...kernels.vectors import load_lanes, mac, store_lanes
from .walk import ConvKernel
from .winograd import row_pieces


class ChannelVectors:
    """Channel-vector blocks of one conv: reads only the ConvKernel (walk.py) and its ConvPlan."""

    def __init__(self, kernel: ConvKernel, plan: ConvPlan):
        self.c, self.p, self.k = kernel, plan, kernel.k
        self.s, self.bl = plan.shape, plan.blocking

    def weight_bases(self, g, cb, nv: int) -> list:
        """Per vector of channel block cb (self.bl.R channels) of group g: the offset of its first tap in the packed
        weights, [G][block][Cin/G][kh][kw][RP]; a block narrower than RP is a sub-block of one packed block, a
        wider one takes each vector from its own."""
        k, V, R, RP = self.k, self.p.V, self.bl.R, self.p.RP
        block = self.s.Cig * self.s.KH * self.s.KW * RP
        group = (g, self.p.NBP * block)
        if R >= RP:
            return [offset(k, (v * V // RP) * block + v * V % RP, group, (cb, R // RP * block)) for v in range(nv)]
        ratio = RP // R
        hi, lo = divmod(cb, ratio) if isinstance(cb, int) else (k.b.udiv(cb, k.index(ratio)), k.b.urem(cb, k.index(ratio)))
        return [offset(k, v * V, group, (hi, block), (lo, R)) for v in range(nv)]

    def bias_vector(self, g, cb, v: int, valid: int, vt: ir.VectorType) -> ir.Value:
        """Vector v's accumulator start: zeros, or the bias of its `valid` channels of block cb (one vector load
        when they are V contiguous ones, else lane by lane)."""
        k, b, V, init = self.k, self.k.b, self.p.V, ir.Constant(vt, [0.0] * vt.count)
        if self.c.bias is None:
            return init
        bs = self.c.bias.strides[0]
        first = offset(k, v * V * bs, (g, self.s.Cog * bs), (cb, self.bl.R * bs))
        if valid == V and bs == 1:
            return load_lanes(k, self.c.bias.ptr, first, V, 1, False)
        for lane in range(valid):
            c = offset(k, lane * bs, (first, 1)) if not isinstance(first, int) else first + lane * bs
            init = b.insert_element(init, b.load(element(k, self.c.bias.ptr, c)), ir.Constant(ir.IntType(32), lane))
        return init

    def store_vector(self, off, value: ir.Value, step: int) -> None:
        """A vector of channels to output[off + lane * step]: one store when contiguous, else lane by lane from one
        base pointer (three instructions a lane: its element, its address at a constant index, the store)."""
        k, b, V = self.k, self.k.b, self.p.V
        if step == 1 or V == 1:
            store_lanes(k, self.c.op, off, value, V, step)
            return
        base = element(k, self.c.op, off)
        for lane in range(V):
            b.store(b.extract_element(value, ir.Constant(ir.IntType(32), lane)), element(k, base, lane * step))

    def block_c(self, n, g, cb, R, oh, ow, pixels, kh_range, spots=None):
        """Channels [cb*R, cb*R + R) (R valid of self.bl.R, in vectors) x pixels (their kw ranges) of row oh from column ow.

        spots: per pixel its constant (oh, ow) offset from (oh, ow) instead of (0, p) (1x1 tiles across rows)."""
        k, b, dt, V = self.k, self.k.b, self.p.dtype, self.p.V
        nv, npix = -(-R // V), len(pixels)  # a rest block (R < bl.R) computes only the vectors it stores
        vt = ir.VectorType(llvm_type(dt), V)
        inits = [self.bias_vector(g, cb, v, min(V, R - v * V), vt) for v in range(nv)]
        slots = [[k.local(vt, init) for _ in range(npix)] for init in inits]
        xs = self.s.xs
        per_ci = self.s.KH * self.s.KW * self.p.RP
        wbases = self.weight_bases(g, cb, nv)
        kw_lo, kw_hi = pixels[0] if npix == 1 else (min(r[0] for r in pixels), max(r[1] for r in pixels))
        fresh = self.p.fresh_broadcasts and npix > 1 and kw_hi - kw_lo > 1

        def row_base(ci, kh):
            """Offsets of input channel ci's kernel row kh: in the input (at tap 0) and in the packed weights."""
            ih = offset(k, -self.s.ph, (oh, self.s.sh), (kh, self.s.dh))
            row = offset(k, -self.s.pw * xs[3], (n, xs[0]), (g, self.s.Cig * xs[1]), (ci, xs[1]), (ih, xs[2]), (ow, self.s.sw * xs[3]))
            if self.c.xpack is not None:  # pack_input's [block][channel][pixel]: the block at column ow starts at ow * C
                row = offset(k, -self.c.pack_origin * self.s.C, (n, self.s.C * self.c.pack_width), (ow, self.s.C), (g, self.s.Cig * npix), (ci, npix))
            return row, offset(k, 0, (ci, per_ci), (kh, self.s.KW * self.p.RP))

        def tap(row, wrow, kw, fresh: bool):
            wtap = offset(k, 0, (wrow, 1), (kw, self.p.RP))
            wv = [load_lanes(k, self.c.packed, offset(k, 0, (wbases[v], 1), (wtap, 1)), V, 1, False) for v in range(nv)]
            xbase = offset(k, 0, (row, 1), (kw, self.s.dw * xs[3]))
            src = self.c.xp if self.c.xpack is None else self.c.xpack
            xptr, xbase = (self.c.opaque(element(k, src, xbase)), 0) if fresh else (src, xbase)
            for p, (plo, phi) in enumerate(pixels):
                if isinstance(kw, int) and not plo <= kw < phi:
                    continue
                if self.c.xpack is not None:
                    xp_off = p
                elif spots is None:
                    xp_off = p * self.s.sw * xs[3]
                else:
                    xp_off = offset(k, 0, (spots[p][0], self.s.sh * xs[2]), (spots[p][1], self.s.sw * xs[3]))
                at = offset(k, xp_off, (xbase, 1)) if isinstance(xp_off, int) else offset(k, 0, (xbase, 1), (xp_off, 1))
                xv = k.splat(b.load(element(k, xptr, at)), V)
                for v in range(nv):
                    b.store(mac(k, dt, b.load(slots[v][p]), xv, wv[v]), slots[v][p])

        def row_taps(ci, kh):
            row, wrow = row_base(ci, kh)
            self.c.each((kw_lo, kw_hi), lambda kw: tap(row, wrow, kw, fresh), unroll_kw)

        unroll_kw = self.p.unroll_kw or len(set(pixels)) > 1  # per-pixel ranges need constant kw
        accumulators = [s for row in slots for s in row]
        if self.p.taps_outer:
            def one_tap(kh, kw):
                self.c.input_channels(accumulators, lambda ci: tap(*row_base(ci, kh), kw, False))
            self.c.each(kh_range, lambda kh: self.c.each((kw_lo, kw_hi), lambda kw: one_tap(kh, kw), unroll_kw), self.p.unroll_taps)
        else:
            self.c.input_channels(accumulators, lambda ci: self.c.each(kh_range, lambda kh: row_taps(ci, kh), self.p.unroll_taps),
                                  self.c.channel_steps())
        os_ = self.s.os
        by_rows = self.transposes(npix, spots)
        # the block's first output (and residual) element, once: each pixel and vector adds a constant to it
        obase = offset(k, 0, (n, os_[0]), (g, self.s.Cog * os_[1]), (cb, self.bl.R * os_[1]), (oh, os_[2]), (ow, os_[3]))
        if self.c.res is not None:
            rs = self.c.res[0]
            rbase = offset(k, 0, (n, rs[0]), (g, self.s.Cog * rs[1]), (cb, self.bl.R * rs[1]), (oh, rs[2]), (ow, rs[3]))
        for v in range(nv):
            valid = min(V, R - v * V)
            row = []
            for p in range(npix):
                dy, dx = (0, p) if spots is None else spots[p]

                def at(strides, first):
                    """offset() of this pixel's vector in a tensor of `strides`: constant parts of the spot fold into
                    `first`, run-time parts are terms."""
                    parts = ((dy, strides[2]), (dx, strides[3]))
                    return (first + sum(d * st for d, st in parts if isinstance(d, int)),
                            tuple((d, st) for d, st in parts if not isinstance(d, int)))
                c0, spot = at(os_, v * V * os_[1])
                off = offset(k, c0, *spot, (obase, 1))
                value = b.load(slots[v][p])
                roff = rs = rp = None
                if self.c.res is not None:
                    rs, rp = self.c.res
                    c0, spot = at(rs, v * V * rs[1])
                    roff = offset(k, c0, *spot, (rbase, 1))
                if valid == V:
                    residual = None if rp is None else (lambda: load_lanes(k, rp, roff, V, rs[1], False))
                    row.append((off, epilogue(k, self.p.epilogue, value, residual)))
                    if not by_rows:
                        self.store_vector(*row.pop(), os_[1])
                else:
                    for lane in range(valid):
                        x = b.extract_element(value, ir.Constant(ir.IntType(32), lane))
                        residual = None if rp is None else (lambda lane=lane: b.load(element(k, rp, offset(k, lane * rs[1], (roff, 1)))))
                        b.store(epilogue(k, self.p.epilogue, x, residual), element(k, self.c.op, offset(k, lane * os_[1], (off, 1))))
            if row:
                self.store_row(row)

    def transposes(self, npix: int, spots) -> bool:
        """Are a block's pixel vectors stored as rows: channels-first output (channel step > 1), the block's pixels
        contiguous in one output row, vectors of a multiple of 4 lanes, at least 2 pixels."""
        os_ = self.s.os
        return spots is None and npix >= 2 and os_[3] == 1 and os_[1] != 1 and self.p.V % 4 == 0

    def store_row(self, row: list) -> None:
        """Pixel vectors (offset, value) of consecutive output pixels, channels-first: transposed in registers
        (winograd.row_pieces: blocks of 4 and 2 pixels) and stored as one vector per channel and piece; an odd last
        pixel lane by lane. A piece's store replaces its pixels x V scalar stores (LLVM's DSE and SLP time grows
        with the scalar stores of a unit)."""
        k, step = self.k, self.s.os[1]
        first, even = row[0][0], len(row) - len(row) % 2
        for j, lanes in row_pieces(k, self.p.V, [value for _, value in row[:even]]):
            for c, piece in enumerate(lanes):
                store_lanes(k, self.c.op, offset(k, j + c * step, (first, 1)), piece, piece.type.count, 1)
        if even < len(row):
            self.store_vector(*row[-1], step)

    def pack_input(self, runs, chunk: int = 8, image=None, group=None):
        """Copy the (flat) input's pixel blocks `runs` (one group of pixel_groups) into the stack buffer as
        [n][block][channel][pixels of the block]: with c0 the group's first column and w its width, the block
        at column c of image n starts at n * C * w + (c - c0) * C. `chunk` channels at a time, each block's
        run of them in turn: reads stream through the channel planes and writes go to a few runs (one per
        block for every channel would thrash L1's sets: runs 4 KiB apart). image, group: only that image's and
        conv group's channels, at their places in the buffer (a parallel tile packs what it reads)."""
        k, b, xs = self.k, self.k.b, self.s.xs
        first, C = (0, self.s.C) if group is None else (offset(k, 0, (group, self.s.Cig)), self.s.Cig)
        origin = runs[0][0]
        width = runs[-1][0] + runs[-1][1] * runs[-1][2] - origin
        self.c.pack_origin, self.c.pack_width = origin, width

        def channels(n, c_lo, count):
            for c0, size, blocks in runs:
                def block(t):
                    col = offset(k, c0, (t, size))

                    def one(j):
                        c = offset(k, 0, (c_lo, 1), (j, 1))
                        src = offset(k, 0, (n, xs[0]), (c, xs[1]), (col, xs[3]))
                        dst = offset(k, -origin * self.s.C, (n, self.s.C * width), (col, self.s.C), (c, size))
                        for p in range(size):
                            b.store(b.load(element(k, self.c.xp, offset(k, p * xs[3], (src, 1)))), element(k, self.c.xpack, offset(k, p, (dst, 1))))
                    self.c.span(0, count, one)
                self.c.span(0, blocks, block)

        def one_image(n):
            full = C // chunk
            self.c.span(0, full, lambda q: channels(n, offset(k, 0, (first, 1), (q, chunk)), chunk))
            if C % chunk:
                channels(n, offset(k, full * chunk, (first, 1)), C % chunk)
        if image is None:
            self.c.span(0, self.c.N, one_image)
        else:
            one_image(image)

    def emit_packed(self):
        """packs_input: one group packed before the parallel region (once per call, into this call's stack), then
        the usual tiles; or the groups as the parallel tiles, each packing its own pixels, its channel blocks
        in the order's loop nest."""
        k = self.k
        groups = pixel_groups(self.s.W, self.bl.P, self.bl.pack_groups)
        width = max(g[-1][0] + g[-1][1] * g[-1][2] - g[0][0] for g in groups)
        with k.b.goto_entry_block():
            self.c.xpack = k.b.alloca(llvm_type(self.p.dtype), size=ir.Constant(ir.IntType(32), self.s.N * self.s.C * width))

        def per_image(n, g):
            if self.p.blocks_outer:
                self.c.channel_blocks(lambda cb, R: self.c.pixel_blocks(0, (0, 1), lambda ow, pixels: self.block_c(n, g, cb, R, 0, ow, pixels, (0, 1))))
            else:
                self.c.pixel_blocks(0, (0, 1), lambda ow, pixels: self.c.channel_blocks(lambda cb, R: self.block_c(n, g, cb, R, 0, ow, pixels, (0, 1))))

        def run(group):
            self.c.px_runs = group
            self.pack_input(group)
        if len(groups) == 1 and self.s.G > 1 and self.c.split() is not None:
            def packed_image(n, g):  # each tile packs its own group: the pool calls a tile at a time
                self.pack_input(groups[0], image=n, group=g)
                per_image(n, g)
            self.c.px_runs = groups[0]
            if self.c.emit_tiled(packed_image):
                return
        if len(groups) == 1:
            run(groups[0])
            if not self.c.emit_tiled(per_image):
                self.c.span(0, self.c.N, lambda n: self.c.span(0, self.s.G, lambda g: per_image(n, g)))
            return
        split = self.c.split()
        with k.parallel_tiles([len(groups)], split[0] if split else 0.0) as (gi,):
            for i, group in enumerate(groups):
                with k.b.if_then(k.b.icmp_signed("==", gi, k.index(i))):
                    run(group)
                    self.c.span(0, self.c.N, lambda n: self.c.span(0, self.s.G, lambda g: per_image(n, g)))

