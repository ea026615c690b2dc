"""Conv2D's channel-vector blocks (ops/conv.py): R = 1-2 vectors of output channels x P pixels, each input
value broadcast once and feeding R multiply-adds; border columns share blocks with interior ones."""
from __future__ import annotations

from llvmlite import ir

from ...kernels.conv_geometry import pixel_groups, tap_range
from ...kernels.epilogue import epilogue
from ...kernels.loops import element, loop, offset
from ...kernels.scalar import llvm_type
from ...kernels.vectors import load_lanes, mac, store_lanes


class ChannelVectors:
    """The channel-vector methods of Conv2D (a mixin: every attribute is Conv2D's)."""

    def row_c(self, oh, kh_range, emit):
        """Every column of output row oh: emit(ow, kw ranges of its pixels) per block of up to P pixels.

        Columns known at build time (the borders, and every column of a narrow row) go in blocks
        whose pixels each have their own constant tap range; the interior runs in a loop of tiles.
        """
        k, P, OW = self.k, self.P, self.OW
        lo, tiles = self.col_plan()
        balanced = self.by_channel

        def fixed(a, b):
            count = -(-(b - a) // P)
            for i in range(count):  # balanced: 7 columns as 4 + 3, not 6 + 1 (a pixel's few accumulators wait on the FMA latency)
                c, d = (a + (b - a) * i // count, a + (b - a) * (i + 1) // count) if balanced else (a + i * P, min(b, a + (i + 1) * P))
                emit(c, [tap_range(o, self.sw, self.dw, self.pw, self.KW, self.W) for o in range(c, d)])
        if self.px_runs is not None:
            for c, size, count in self.px_runs:
                self.span(0, count, lambda t: emit(offset(k, c, (t, size)), [(0, 1)] * size))
            return
        first, last, trange = self.px_parts(tiles)
        with self.when(first):
            fixed(0, lo)
        if trange is not None:
            with loop(k, trange[1], trange[0]) as t:
                emit(offset(k, lo, (t, P)), [(0, self.KW)] * P)
        elif tiles == 1:
            emit(lo, [(0, self.KW)] * P)
        elif tiles:
            with loop(k, tiles) as t:
                emit(offset(k, lo, (t, P)), [(0, self.KW)] * P)
        with self.when(last):
            if balanced:
                fixed(lo + tiles * P, OW)
            else:
                hi = max(lo, self.interior(OW, self.sw, self.dw, self.pw, self.KW, self.W, 0)[1])
                fixed(lo + tiles * P, hi)
                fixed(hi, OW)

    def col_plan(self) -> tuple[int, int]:
        """(lo, tiles) of row_c: fixed blocks over [0, lo), `tiles` interior tiles of P from lo, fixed blocks after.
        Channel vectors: the border columns share a block with interior ones (lo rounded up to a multiple of P)
        and the columns after the tiles go in one run of balanced blocks."""
        P, OW = self.P, self.OW
        lo, hi = self.interior(OW, self.sw, self.dw, self.pw, self.KW, self.W, 0)
        hi = max(hi, lo)
        if OW <= 4 * P or hi - lo < P:
            return OW, 0
        if self.by_channel:
            lo = min(-(-lo // P) * P, hi)
        return lo, (hi - lo) // P

    def weight_bases(self, g, cb, nv: int) -> list:
        """Per vector of channel block cb (self.R channels) of group g: the offset of its first tap in the packed
        weights, [G][block][Cin/G][kh][kw][RP]; a block narrower than RP is a sub-block of one packed block, a
        wider one takes each vector from its own."""
        k, V, R, RP = self.k, self.V, self.R, self.RP
        block = self.Cig * self.KH * self.KW * RP
        group = (g, self.NBP * block)
        if R >= RP:
            return [offset(k, (v * V // RP) * block + v * V % RP, group, (cb, R // RP * block)) for v in range(nv)]
        ratio = RP // R
        hi, lo = divmod(cb, ratio) if isinstance(cb, int) else (k.b.udiv(cb, k.index(ratio)), k.b.urem(cb, k.index(ratio)))
        return [offset(k, v * V, group, (hi, block), (lo, R)) for v in range(nv)]

    def block_c(self, n, g, cb, R, oh, ow, pixels, kh_range, spots=None):
        """Channels [cb*R, cb*R + R) (R valid of self.R, in vectors) x pixels (their kw ranges) of row oh from column ow.

        spots: per pixel its constant (oh, ow) offset from (oh, ow) instead of (0, p) (1x1 tiles across rows)."""
        k, b, dt, V = self.k, self.k.b, self.dtype, self.V
        nv, npix = self.R // V, len(pixels)
        vt = ir.VectorType(llvm_type(dt), V)
        slots = []
        for v in range(nv):
            init = ir.Constant(vt, [0.0] * V)
            if self.bias is not None:
                bs = self.bias.strides[0]
                for lane in range(min(V, R - v * V)):
                    c = offset(k, (v * V + lane) * bs, (g, self.Cog * bs), (cb, self.R * bs))
                    init = b.insert_element(init, b.load(element(k, self.bias.ptr, c)), ir.Constant(ir.IntType(32), lane))
            slots.append([k.local(vt, init) for _ in range(npix)])
        xs = self.xs
        per_ci = self.KH * self.KW * self.RP
        wbases = self.weight_bases(g, cb, nv)
        kw_lo, kw_hi = min(r[0] for r in pixels), max(r[1] for r in pixels)
        fresh = self.fresh_broadcasts and kw_hi - kw_lo > 1 and npix > 1

        def row_taps(ci, kh):
            ih = offset(k, -self.ph, (oh, self.sh), (kh, self.dh))
            row = offset(k, -self.pw * xs[3], (n, xs[0]), (g, self.Cig * xs[1]), (ci, xs[1]), (ih, xs[2]), (ow, self.sw * xs[3]))
            if self.xpack is not None:  # pack_input's [block][channel][pixel]: the block at column ow starts at ow * C
                row = offset(k, -self.pack_origin * self.C, (n, self.C * self.pack_width), (ow, self.C), (g, self.Cig * npix), (ci, npix))
            wrow = offset(k, 0, (ci, per_ci), (kh, self.KW * self.RP))

            def tap(kw):
                wtap = offset(k, 0, (wrow, 1), (kw, self.RP))
                wv = [load_lanes(k, self.packed, offset(k, 0, (wbases[v], 1), (wtap, 1)), V, 1, False) for v in range(nv)]
                xbase = offset(k, 0, (row, 1), (kw, self.dw * xs[3]))
                src = self.xp if self.xpack is None else self.xpack
                xptr, xbase = (self.opaque(element(k, src, xbase)), 0) if fresh else (src, xbase)
                for p, (plo, phi) in enumerate(pixels):
                    if isinstance(kw, int) and not plo <= kw < phi:
                        continue
                    if self.xpack is not None:
                        xp_off = p
                    elif spots is None:
                        xp_off = p * self.sw * xs[3]
                    else:
                        xp_off = spots[p][0] * self.sh * xs[2] + spots[p][1] * self.sw * xs[3]
                    xv = k.splat(b.load(element(k, xptr, offset(k, xp_off, (xbase, 1)))), V)
                    for v in range(nv):
                        b.store(mac(k, dt, b.load(slots[v][p]), xv, wv[v]), slots[v][p])
            self.each((kw_lo, kw_hi), tap, self.KW <= 16 or len(set(pixels)) > 1)  # per-pixel ranges need constant kw

        self.each((0, self.Cig), lambda ci: self.each(kh_range, lambda kh: row_taps(ci, kh), self.unroll), False)
        os_ = self.os
        for v in range(nv):
            valid = min(V, R - v * V)
            for p in range(npix):
                dy, dx = (0, p) if spots is None else spots[p]
                off = offset(k, v * V * os_[1] + dy * os_[2] + dx * os_[3], (n, os_[0]), (g, self.Cog * os_[1]), (cb, self.R * os_[1]), (oh, os_[2]), (ow, os_[3]))
                value = b.load(slots[v][p])
                roff = rs = rp = None
                if self.res is not None:
                    rs, rp = self.res
                    roff = offset(k, v * V * rs[1] + dy * rs[2] + dx * rs[3], (n, rs[0]), (g, self.Cog * rs[1]), (cb, self.R * rs[1]), (oh, rs[2]), (ow, rs[3]))
                if valid == V:
                    residual = None if rp is None else (lambda: load_lanes(k, rp, roff, V, rs[1], False))
                    store_lanes(k, self.op, off, epilogue(k, self.epi, value, residual), V, os_[1])
                else:
                    for lane in range(valid):
                        x = b.extract_element(value, ir.Constant(ir.IntType(32), lane))
                        residual = None if rp is None else (lambda lane=lane: b.load(element(k, rp, offset(k, lane * rs[1], (roff, 1)))))
                        b.store(epilogue(k, self.epi, x, residual), element(k, self.op, offset(k, lane * os_[1], (off, 1))))

    def pack_input(self, runs, chunk: int = 8):
        """Copy the (flat) input's pixel blocks `runs` (one group of pixel_groups) into the stack buffer as
        [n][block][channel][pixels of the block]: with c0 the group's first column and w its width, the block
        at column c of image n starts at n * C * w + (c - c0) * C. `chunk` channels at a time, each block's
        run of them in turn: reads stream through the channel planes and writes go to a few runs (one per
        block for every channel would thrash L1's sets: runs 4 KiB apart)."""
        k, b, xs = self.k, self.k.b, self.xs
        origin = runs[0][0]
        width = runs[-1][0] + runs[-1][1] * runs[-1][2] - origin
        self.pack_origin, self.pack_width = origin, width

        def channels(n, c_lo, count):
            for c0, size, blocks in runs:
                def block(t):
                    col = offset(k, c0, (t, size))

                    def one(j):
                        c = offset(k, 0, (c_lo, 1), (j, 1))
                        src = offset(k, 0, (n, xs[0]), (c, xs[1]), (col, xs[3]))
                        dst = offset(k, -origin * self.C, (n, self.C * width), (col, self.C), (c, size))
                        for p in range(size):
                            b.store(b.load(element(k, self.xp, offset(k, p * xs[3], (src, 1)))), element(k, self.xpack, offset(k, p, (dst, 1))))
                    self.span(0, count, one)
                self.span(0, blocks, block)

        def image(n):
            full = self.C // chunk
            self.span(0, full, lambda q: channels(n, offset(k, 0, (q, chunk)), chunk))
            if self.C % chunk:
                channels(n, full * chunk, self.C % chunk)
        self.span(0, self.N, image)

    def emit_packed(self):
        """packs_input: one group packed before the parallel region (once per call, into this call's stack), then
        the usual tiles; or the groups as the parallel tiles, each packing its own pixels, its channel blocks
        in the order's loop nest."""
        k = self.k
        groups = pixel_groups(self.W, self.P, self.pack_groups)
        width = max(g[-1][0] + g[-1][1] * g[-1][2] - g[0][0] for g in groups)
        with k.b.goto_entry_block():
            self.xpack = k.b.alloca(llvm_type(self.dtype), size=ir.Constant(ir.IntType(32), self.N * self.C * width))

        def per_image(n, g):
            if self.blocks_outer():
                self.channel_blocks(lambda cb, R: self.row_c(0, (0, 1), lambda ow, pixels: self.block_c(n, g, cb, R, 0, ow, pixels, (0, 1))))
            else:
                self.row_c(0, (0, 1), lambda ow, pixels: self.channel_blocks(lambda cb, R: self.block_c(n, g, cb, R, 0, ow, pixels, (0, 1))))

        def run(group):
            self.px_runs = group
            self.pack_input(group)
        if len(groups) == 1:
            run(groups[0])
            if not self.emit_tiled(per_image):
                self.span(0, self.N, lambda n: self.span(0, self.G, lambda g: per_image(n, g)))
            return
        split = self.split()
        with k.parallel_tiles([len(groups)], split[0] if split else 0.0) as (gi,):
            for i, group in enumerate(groups):
                with k.b.if_then(k.b.icmp_signed("==", gi, k.index(i))):
                    run(group)
                    self.span(0, self.N, lambda n: self.span(0, self.G, lambda g: per_image(n, g)))

    def pointwise_tiles(self) -> bool:
        """ConvBlocking.pointwise_tiles (kernels/conv_geometry.py)."""
        return self.blocking.pointwise_tiles
