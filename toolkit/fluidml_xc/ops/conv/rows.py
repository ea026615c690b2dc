"""The Conv kernel's row-vector blocks (conv2d.py lower_conv): R output channels x U vectors along an output row, each input
vector feeding R multiply-adds; aarch64 edge blocks and row pairs, armv7 taps as lanes (docs/ARM_KERNELS.md)."""
from __future__ import annotations

from llvmlite import ir

from ...kernels.conv_plan import ConvPlan
from ...kernels.epilogue import epilogue
from ...kernels.loops import element, loop, offset
from ...kernels.scalar import FAST, const, llvm_type
from ...kernels.vectors import fused, load_lanes, mac, store_lanes
from ...target.arch import arch_of
from .walk import ConvKernel


class RowVectors:
    """Row-vector blocks of one conv: reads only the ConvKernel (walk.py) and its ConvPlan."""

    def __init__(self, kernel: ConvKernel, plan: ConvPlan):
        self.c, self.p, self.k = kernel, plan, kernel.k
        self.s, self.bl = plan.shape, plan.blocking

    def weight(self, g, cb, r, ci, kh, kw):
        k = self.k
        if self.c.packed is not None:
            R = self.bl.R
            per_ci = self.s.KH * self.s.KW * R
            off = offset(k, r, (g, self.p.NB * self.s.Cig * per_ci), (cb, self.s.Cig * per_ci), (ci, per_ci), (kh, self.s.KW * R), (kw, R))
            return k.b.load(element(k, self.c.packed, off))
        ws = self.s.ws
        off = offset(k, r * ws[0], (g, self.s.Cog * ws[0]), (cb, self.bl.R * ws[0]), (ci, ws[1]), (kh, ws[2]), (kw, ws[3]))
        return k.b.load(element(k, self.c.w.ptr, off))

    def block(self, n, g, cb, R, oh, ow, nvec, kh_range, kw_range, rows: int = 1):
        """R output channels x (nvec vectors | one pixel when nvec == 0) at row oh, columns from ow.
        rows > 1 (self.bl.row_pairs: stride and dilation 1 down the column, full kh_range): output rows oh ..
        oh + rows - 1, which share each input row's loads (and edge shifts); every accumulator takes its
        taps in the same order as in a block of one row."""
        k, b, dt = self.k, self.k.b, self.p.dtype
        lanes = self.p.V if nvec else 1
        count = max(nvec, 1)
        ty = ir.VectorType(llvm_type(dt), lanes) if nvec else llvm_type(dt)
        slots = [[] for _ in range(rows)]
        for r in range(R):
            if nvec and self.c.bias_splat is not None:
                # the channel's bias repeated: accumulator i loads V of them from element i of one opaque address,
                # so LLVM neither hoists nor merges the loads and each fmla starts from a loaded register instead
                # of a register copy of the bias
                ch = offset(k, r, (g, self.s.Cog), (cb, self.bl.R))
                run = self.c.opaque(element(k, self.c.bias_splat, offset(k, 0, (ch, self.p.bias_run))))
                for j in range(rows):
                    slots[j].append([k.local(ty, load_lanes(k, run, j * count + u, lanes, 1, False)) for u in range(count)])
                continue
            if self.c.bias is not None:
                bs = self.c.bias.strides[0]
                bv = b.load(element(k, self.c.bias.ptr, offset(k, r * bs, (g, self.s.Cog * bs), (cb, self.bl.R * bs))))
            else:
                bv = const(dt, 0)
            init = k.splat(bv, lanes) if nvec else bv
            for j in range(rows):
                slots[j].append([k.local(ty, init) for _ in range(count)])
        xs, sx = self.s.xs, self.s.sw * self.s.xs[3]
        lane_w = self.lane_weights(g, cb) if self.bl.lane_taps and nvec else None

        def row_taps(ci, d):
            # input row d of the block: tap kh = d - j of output row j
            ih = offset(k, -self.s.ph, (oh, self.s.sh), (d, self.s.dh))
            row = offset(k, -self.s.pw * xs[3], (n, xs[0]), (g, self.s.Cig * xs[1]), (ci, xs[1]), (ih, xs[2]), (ow, sx))
            # row pairs: each input row from its own opaque base, so every tap's offset fits ldur (no add per load;
            # RVV loads take no offset, and the asm statement would cost a vsetivli)
            opaque = rows > 1 and not self.c.rvv()
            xp, row = (self.c.opaque(element(k, self.c.xp, row)), 0) if opaque else (self.c.xp, row)

            def tap(kw):
                base = offset(k, 0, (row, 1), (kw, self.s.dw * xs[3]))
                xv = [self.edge_load(xp, base, ow, kw, u, d if rows > 1 and isinstance(ci, int) else None)
                      if nvec and self.bl.edges and isinstance(ow, int) and isinstance(kw, int)
                      else load_lanes(k, xp, offset(k, u * lanes * sx, (base, 1)), lanes, sx, self.p.wide) for u in range(count)]
                for j in range(rows):
                    kh = d if rows == 1 else d - j
                    if rows > 1 and not 0 <= kh < self.s.KH:
                        continue
                    for r in range(R):
                        if lane_w is not None and all(isinstance(i, int) for i in (ci, kh, kw)):
                            t = (ci * self.s.KH + kh) * self.s.KW + kw
                            wv = b.shuffle_vector(lane_w[t // lanes], ir.Constant(ty, None), ir.Constant(ir.VectorType(ir.IntType(32), lanes), [t % lanes] * lanes))
                        else:
                            wv = self.weight(g, cb, r, ci, kh, kw)
                            if nvec:
                                wv = k.splat(wv, lanes)
                        for u in range(count):
                            acc = b.load(slots[j][r][u])
                            b.store(k.b.fadd(acc, k.b.fmul(wv, xv[u], flags=FAST), flags=FAST) if self.bl.by_lane
                                    else fused(k, acc, wv, xv[u]) if self.p.carry_rows else mac(k, dt, acc, wv, xv[u]), slots[j][r][u])
            self.c.each(kw_range, tap, self.p.unroll_kw)

        d_range = kh_range if rows == 1 else (0, self.s.KH + rows - 1)
        self.c.input_channels([s for row in slots for acc in row for s in acc],
                              lambda ci: self.c.each(d_range, lambda d: row_taps(ci, d), self.p.unroll_taps),
                              self.c.channel_steps())
        os_ = self.s.os
        runs = self.store_runs(ty, count)
        for j in range(rows):
            for r in range(R):
                for u0, m in runs:
                    off = offset(k, r * os_[1] + u0 * lanes + j * os_[2], (n, os_[0]), (g, self.s.Cog * os_[1]), (cb, self.bl.R * os_[1]), (oh, os_[2]), (ow, 1))
                    b.call(self.st1(ty, m), [epilogue(k, self.p.epilogue, b.load(slots[j][r][u])) for u in range(u0, u0 + m)] + [element(k, self.c.op, off)])
                for u in range(0 if runs else count):
                    off = offset(k, r * os_[1] + u * lanes * os_[3] + j * os_[2], (n, os_[0]), (g, self.s.Cog * os_[1]), (cb, self.bl.R * os_[1]), (oh, os_[2]), (ow, os_[3]))
                    residual = None
                    if self.c.res is not None:
                        rs, rp = self.c.res
                        roff = offset(k, r * rs[1] + u * lanes * rs[3] + j * rs[2], (n, rs[0]), (g, self.s.Cog * rs[1]), (cb, self.bl.R * rs[1]), (oh, rs[2]), (ow, rs[3]))
                        residual = lambda roff=roff: load_lanes(k, rp, roff, lanes, rs[3], False)
                    store_lanes(k, self.c.op, off, epilogue(k, self.p.epilogue, b.load(slots[j][r][u]), residual), lanes, os_[3])
        if rows > 1 and count >= self.bl.U:
            # after each full tile: the next blocks' loads stay after its stores (all of a row pair's blocks
            # interleaved hold more vectors than the 32 registers and spill)
            self.c.fence()

    def store_runs(self, ty, count: int) -> list[tuple[int, int]]:
        """aarch64 row-pair convs' float32 rows of 2 or more vectors (RVV's row pairs store each vector): (first
        vector, count) of the st1 {v.4s x 2-4} that store them. LLVM's Neoverse-N1 model charges st1 one V slot and 2
        micro-ops per vector, where a lone str q takes two V slots and stp q 3 micro-ops per vector
        (docs/ARM_KERNELS.md)."""
        if not (self.bl.row_pairs and arch_of(str(self.k.module.triple)).aarch64 and count >= 2 and self.c.res is None
                and self.s.os[3] == 1 and isinstance(ty, ir.VectorType) and ty.element == ir.FloatType()
                and ty.count == 4):
            return []
        sizes = [4] * (count // 4) + ([count % 4] if count % 4 else [])
        if sizes[-1] == 1:
            sizes[-2:] = [3, 2]
        return [(sum(sizes[:i]), m) for i, m in enumerate(sizes)]

    def st1(self, ty, m: int):
        """llvm.aarch64.neon.st1x<m>: m vectors to consecutive addresses."""
        k, name = self.k, f"llvm.aarch64.neon.st1x{m}.v4f32.p0"
        return k.module.globals.get(name) or ir.Function(k.module, ir.FunctionType(ir.VoidType(), [ty] * m + [ty.element.as_pointer()]), name)

    def lane_weights(self, g, cb):
        """The block's taps as vectors (packed [g][taps] with V spare zeros at the end), loaded through an
        empty asm statement's copy of their address: LLVM cannot hoist them, or the lane splats, out of the
        tile loop, so instruction selection sees each splat beside its multiply and folds it (vmla q, q, d[x])."""
        k, V = self.k, self.p.V
        per_ci = self.s.KH * self.s.KW * self.bl.R
        ptr = element(k, self.c.packed, offset(k, 0, (g, self.p.NB * self.s.Cig * per_ci), (cb, self.s.Cig * per_ci)))
        ptr = self.c.opaque(ptr)
        vt = ir.VectorType(ptr.type.pointee, V)
        return [k.b.load(k.b.bitcast(element(k, ptr, j * V), vt.as_pointer()), align=4)
                for j in range(-(-self.s.Cig * self.s.KH * self.s.KW // V))]

    def edge_load(self, xp, base, ow: int, kw: int, u: int, d=None):
        """Vector u of tap kw at column ow (xp[base]: its first column), zeros for the columns outside the row.
        d: the pair block's input row, whose shifted vectors a row pair loop carries (self.c.carry)."""
        k, V = self.k, self.p.V
        s = ow - self.s.pw + kw * self.s.dw + u * V
        if 0 <= s and s + V <= self.s.W:
            return load_lanes(k, xp, offset(k, u * V, (base, 1)), V, 1, False)
        if self.c.carry is not None and d is not None:
            slots, now = self.c.carry
            if (d, s) not in now:
                now[(d, s)] = k.b.load(slots[(d, s)]) if (d, s) in slots else self.shifted(xp, offset(k, u * V, (base, 1)), s)
            return now[(d, s)]
        return self.shifted(xp, offset(k, u * V, (base, 1)), s)

    def shifted(self, xp, base, s: int):
        """The V input columns from s (xp[base]: column s), zeros for those outside the row."""
        k, V = self.k, self.p.V
        c0 = max(s, 0) if s < 0 else self.s.W - V  # W >= V: only one side is outside
        v = load_lanes(k, xp, offset(k, c0 - s, (base, 1)), V, 1, False)
        zero = ir.Constant(v.type, [ir.Constant(v.type.element, 0.0)] * V)
        # one ext: lanes consecutive in (zero, v) on the left, in (v, zero) on the right
        pair, first = ((zero, v), V + s) if s < 0 else ((v, zero), s - c0)
        return k.b.shuffle_vector(*pair, ir.Constant(ir.VectorType(ir.IntType(32), V), [first + i for i in range(V)]))

    def row_varying(self, emit):
        """row() over a run-time row: the columns before the interior one pixel each (while they exist), tiles of
        U vectors to the end of the interior, its rest in single vectors (the last one overlapping the one before
        when the rest is not a whole vector, pixels when the interior is narrower than a vector), the columns after
        it one pixel each with run-time tap ranges."""
        k, V, T, c = self.k, self.p.V, self.bl.U * self.p.V, self.c
        lo, hi, tiles = self.p.spans.cols[0], k.as_index(c.rt["cols"]), c.rt["tiles"]
        full = (0, self.s.KW)
        first, last, trange = c.px_parts(tiles)
        with c.when(first):
            c.fixed_columns(lo, lambda ow, taps: emit(ow, 0, taps))
        a, b = trange or (0, tiles)
        with loop(k, k.as_index(b), k.as_index(a)) as t:
            emit(offset(k, lo, (t, T)), self.bl.U, full)
        with c.when(last):
            pos = offset(k, lo, (k.as_index(tiles), T))
            rest = k.b.sub(hi, pos)
            vectors = k.b.sdiv(rest, k.index(V))
            with loop(k, vectors) as j:
                emit(offset(k, 0, (pos, 1), (j, V)), 1, full)
            done = offset(k, 0, (pos, 1), (vectors, V))
            with k.b.if_then(k.b.icmp_signed("<", done, hi)):
                with k.b.if_else(k.b.icmp_signed(">=", k.b.sub(hi, k.index(lo)), k.index(V))) as (whole, part):
                    with whole:
                        emit(k.b.sub(hi, k.index(V)), 1, full)
                    with part:
                        with loop(k, hi, done) as ow:
                            emit(ow, 0, full)
            with loop(k, k.as_index(c.rt["OW"]), hi) as ow:
                emit(ow, 0, c.end_taps(1, ow))

    def row(self, oh, kh_range, emit):
        """Every column of output row oh: emit(ow, nvec, kw_range) per block; border columns at run time."""
        if self.c.varies(1):
            self.row_varying(emit)
            return
        k, V, T = self.k, self.p.V, self.bl.U * self.p.V
        edge = self.p.edge_span
        lo, hi = edge or self.p.cols_inside
        hi = max(hi, lo)
        width, full = hi - lo, (0, self.s.KW)
        tiles = width // T
        first, last, trange = self.c.px_parts(tiles)
        with self.c.when(first):
            if edge and tiles and trange is None:  # the left edge vector joins the first tile
                emit(0, self.bl.U + 1, full)
                lo, tiles = lo + T, tiles - 1
            elif edge:
                emit(0, 1, full)
            else:
                self.c.span(0, lo, lambda ow: emit(ow, 0, self.c.border_taps(1, ow)))
        if trange is not None:
            with loop(k, trange[1], trange[0]) as t:
                emit(offset(k, lo, (t, T)), self.bl.U, full)
        elif tiles == 1:
            emit(lo, self.bl.U, full)
        elif tiles:
            with loop(k, tiles) as t:
                emit(offset(k, lo, (t, T)), self.bl.U, full)
        with self.c.when(last):
            pos = lo + tiles * T
            rest = hi - pos
            if edge and rest % V == 0:  # the vectors after the tiles join the right edge vector
                emit(pos, rest // V + 1, full)
                return
            if rest >= V:
                emit(pos, rest // V, full)
                pos, rest = pos + rest // V * V, rest % V
            if rest and width >= V:
                emit(hi - V, 1, full)
            elif rest:
                self.c.span(pos, hi, lambda ow: emit(ow, 0, full))
            if edge:
                emit(self.s.OW - V, 1, full)
            else:
                self.c.span(hi, self.s.OW, lambda ow: emit(ow, 0, self.c.border_taps(1, ow)))

    def carried_pairs(self, n, g, a, count, emit_pair):
        """count row pairs from output row a (run time): each pair passes the shifted edge vectors of its input rows
        2 .. KH to the next in registers; a prologue shifts the first pair's input rows 0 .. KH - 2 (only when
        there is a pair: a thread's rows may hold none, and the rows after them may be outside the input)."""
        k, xs = self.k, self.s.xs
        slots = {(d, s): k.local(ir.VectorType(llvm_type(self.p.dtype), self.p.V)) for d in range(self.s.KH - 1) for s in self.p.edge_columns}
        with self.c.when(None if isinstance(count, int) else k.b.icmp_signed(">", count, k.index(0))):
            for (d, s), slot in slots.items():
                ih = offset(k, d - self.s.ph, (a, 1))
                k.b.store(self.shifted(self.c.xp, offset(k, s * xs[3], (n, xs[0]), (g, self.s.Cig * xs[1]), (ih, xs[2])), s), slot)
            with loop(k, count) as p:
                self.c.carry = (slots, {})
                emit_pair(offset(k, 0, (a, 1), (p, 2)))
                now = self.c.carry[1]
                for (d, s), slot in slots.items():
                    k.b.store(now[(d + 2, s)], slot)
                self.c.carry = None
