"""The Winograd Conv kernel (plan: kernels/winograd.py WinogradPlan in ConvPlan.winograd). Per image, group and block
of T tiles (the parallel split: tiles never share a reduction, so every thread count gives the same bits):

1. input transform: each tile's alpha x alpha patch (zeros outside the input) of every input channel to
   V[xi][tile][channel] on the stack (channels as vectors when the input stores them innermost);
2. per panel of NR output channels and group of MR tiles, for each of the alpha^2 points xi the blocked GEMM's
   register tile (kernels/matmul_blocked.py outer_accumulate) over the channels: V[xi] (tiles x Cin) times the
   build-time transformed weights U[xi] (Cin x Cout, packed in panels as the MatMul kernel packs B), to M on the stack;
3. output transform of those tiles, vectors over the panel's channels: Y = A^T M A, then the bias, the fused residual
   and activation, stored through the output's strides (pixels past the image's edge skipped).

The whole-image form (plan.winograd.whole, emit_whole): stage 1 is its own node (winograd_input.py) writing V to the
arena; here, per image, group and panel of NR output channels (the parallel split), per chunk of T tiles and point,
stage 2 over every MR tiles of the chunk with the point's weight panel kept in the cache, then stage 3.

Shared kernels (docs/WINOGRAD.md): the sizes, tile counts, pads and outer strides (on x86 the blocked form's channel
counts and pixel strides too) are run-time fields, U and the bias arguments of no declared size, so layers that
differ only in those share one unit."""
from __future__ import annotations

from contextlib import contextmanager
from functools import partial

import numpy as np
from llvmlite import ir

from ...kernels.conv_plan import ConvPlan
from ...kernels.epilogue import activate, fill
from ...kernels.loops import loop, offset as loop_offset
from ...kernels.derived import derived
from ...kernels.flat import even_chunk, run_time_fields
from ...kernels.matmul_blocked import (Mat, Problem, add_index, mul_index, outer_accumulate, pack_panels, panel_columns,
                                       panels)
from ...kernels.scalar import llvm_type
from ...target.arch import arch_of
from ...kernels.winograd import STACK_BYTES, TRANSFORMS, transform_weights

WINOGRAD_TILES = 64
"""Parallel tiles of the blocked form and of WinogradInput: their (image, group, block or run of tiles) items
spread evenly over them (Kernel.spread), a run of neighbouring items per tile when there are more."""


def offset(k, *terms) -> ir.Value:
    """sum(n * stride) over the (int n, stride) terms (kernels/loops.py offset) as an index value."""
    return k.as_index(loop_offset(k, 0, *terms))


def run_time_channels(k) -> bool:
    """Are the channel counts run-time fields too (x86: the GEMM's K loop and the panel loop as fast either way,
    by ab_checkouts.py), not build-time constants (aarch64 and RISC-V: the hand-scheduled GEMM tiles want a static
    K)?"""
    return k.spec is not None and arch_of(k.spec.triple).x86


def run_time_strides(f: dict, prefix: str, st, pixel: bool) -> tuple:
    """A tensor's (image, channel, row, pixel) strides as the run-time fields prefix0..prefix3, but a stride of 1
    (the innermost dim) and, unless `pixel`, the pixel stride as build-time ints."""
    return (f[prefix + "0"], 1 if st[1] == 1 else f[prefix + "1"], f[prefix + "2"],
            f[prefix + "3"] if pixel and st[3] != 1 else st[3])


@contextmanager
def spread_items(k, items, chunks, work: float):
    """The parallel split of the shared Winograd kernels: WINOGRAD_TILES tiles, `chunks` (run-time, at most the
    tiles) of them running [lo, hi) of the run-time `items` (Kernel.spread, kernels/flat.py even_chunk); yields the
    item loop's index."""
    b = k.b
    with k.parallel_tiles([WINOGRAD_TILES], work) as (t,):
        active, c = k.spread(t, chunks, WINOGRAD_TILES)
        with b.if_then(active):
            with k.for_range(*reversed(even_chunk(k, c, chunks, items))) as item:
                yield item


def _combine(k, coefs, vals):
    """sum_i coefs[i] * vals[i] over the non-zero coefficients (+-1 as adds and subtracts)."""
    acc = None
    for c, v in zip(coefs, vals):
        if c == 0:
            continue
        if abs(c) == 1:
            term, neg = v, c < 0
        else:
            term, neg = k.b.fmul(v, fill(v.type, abs(float(c)))), c < 0
        if acc is None:
            acc = k.b.fsub(fill(v.type, 0.0), term) if neg else term
        else:
            acc = k.b.fsub(acc, term) if neg else k.b.fadd(acc, term)
    return acc if acc is not None else fill(vals[0].type, 0.0)


def sandwich(k, left: np.ndarray, d: list[list]) -> list[list]:
    """left @ d @ left^T on a square grid of values (scalars or vectors)."""
    rows = [[_combine(k, left[i], [d[r][j] for r in range(len(d))]) for j in range(len(d[0]))] for i in range(left.shape[0])]
    return [[_combine(k, left[j], rows[i]) for j in range(left.shape[0])] for i in range(left.shape[0])]


def _weight_panels(shape: tuple[int, int, int], m: int, panel: int, dt, w: np.ndarray) -> np.ndarray:
    """(G * Cout/G, Cin/G, 3, 3) weights -> U per group (G * alpha^2, Cin/G, Cout/G) in GEMM panels."""
    groups = np.asarray(w).reshape(*shape, 3, 3)
    return panels(np.concatenate([transform_weights(g, m) for g in groups]), panel, dt)


def _padded_bias(groups: int, run: int, dt, bias: np.ndarray) -> np.ndarray:
    """Per group, padded to `run` so a panel's last vector reads no further."""
    padded = np.zeros((groups, run), dt)
    padded[:, :bias.size // groups] = np.asarray(bias).reshape(groups, -1)
    return padded.reshape(-1)


class WinogradConv:
    """One Winograd conv being emitted: operands, scratch buffers and the three stages."""

    def __init__(self, k, plan: ConvPlan, xp, op, w, bias, res, epilogue, v_operand=None):
        self.k, self.p, self.s, self.wp = k, plan, plan.shape, plan.winograd
        self.xp, self.op, self.res, self.epi = xp, op, res, epilogue
        self.dt = np.dtype(plan.dtype)
        self.t = TRANSFORMS[self.wp.m]
        s, wp, dt = self.s, self.wp, self.dt
        self.V = k.lanes(dt)
        self.A2 = wp.alpha * wp.alpha
        self.whole_widths = [self.V] * (wp.NR // self.V) + [1] * (wp.NR % self.V)
        """A full panel's vector groups (a 5-column tile on 4 lanes: 4 + 1)."""
        self.Ci, self.Co = s.Cig, s.Cog
        self.panel = panel_columns(k, wp.T, self.Co, wp.NR, dt)
        u = derived(k, partial(_weight_panels, (s.G, self.Co, self.Ci), wp.m, self.panel, dt), w)
        self.B = pack_panels(k, None, 1, self.panel, dt, u, argument=True)
        self.rt = run_time_channels(k) and not wp.whole
        self.bias, self.bias_run = bias, self.Co
        if bias is not None and bias.value is not None:  # per group, padded so a panel's last vector reads no further
            self.bias_run = -(-self.Co // wp.NR) * wp.NR + self.V
            self.bias = k.argument_array(derived(k, partial(_padded_bias, s.G, self.bias_run, dt), bias))
        self.mstride = wp.T if wp.whole else wp.MR
        self.copies = 1
        """Tiles between two points' rows of the GEMM results M[point][tile][NR] on the stack."""
        with k.b.goto_entry_block():
            if not wp.whole:
                most = STACK_BYTES // self.dt.itemsize if self.rt else self.A2 * wp.T * self.Ci
                self.vbuf = k.b.alloca(llvm_type(dt), size=ir.Constant(ir.IntType(32), max(most, self.A2 * wp.T * self.Ci)))
            self.mbuf = k.b.alloca(llvm_type(dt), size=ir.Constant(ir.IntType(32), self.A2 * self.mstride * wp.NR))
            self.ebuf = k.b.alloca(llvm_type(dt), size=ir.Constant(ir.IntType(32), wp.m * wp.m * wp.NR))
        if wp.whole:
            vp, self.vs, self.copies, self.held = v_operand
        vs = self.vs if wp.whole else (0, 0, 0)
        items = s.N * s.G * wp.blocks
        rs = (0, 0, 0, 0) if res is None else res[0]
        self.load_geometry(dict(OH=s.OH, OW=s.OW, blocks=wp.blocks, o0=s.os[0], o1=s.os[1], o2=s.os[2], o3=s.os[3],
                                r0=rs[0], r1=rs[1], r2=rs[2], r3=rs[3], v0=vs[0], v1=vs[1], v2=vs[2], items=items,
                                chunks=min(items, WINOGRAD_TILES), Co=self.Co, full_p=self.Co // wp.NR,
                                vstep=wp.T * self.Ci, ustep=self.B.bstrides[0], bias_run=self.bias_run))
        if self.rt:
            self.ci, self.co, self.vstep = self.f["Ci"], self.f["Co"], self.f["vstep"]
            self.ustep, self.bias_step = self.f["ustep"], self.f["bias_run"]
        else:
            self.ci, self.co, self.vstep = self.Ci, self.Co, wp.T * self.Ci
            self.ustep, self.bias_step = self.B.bstrides[0], self.bias_run
        """The channel counts and the strides that follow from them: run-time fields (run_time_channels) or ints."""
        if wp.whole:
            self.P = Problem(dt, (self.A2,), wp.tiles, self.Co, self.Ci, Mat(vp, (self.vs[2],), self.vs[3], 1), self.B, self.B)
        else:
            self.P = Problem(dt, (self.A2,), wp.T, self.Co, self.ci, Mat(self.vbuf, (0,), self.ci, 1), self.B, self.B)
        self.os = run_time_strides(self.f, "o", s.os, self.rt)
        self.rs = None if res is None else run_time_strides(self.f, "r", res[0], self.rt)
        self.vst = (self.f["v0"], self.f["v1"], self.f["v2"])
        self.last_tile = k.b.sub(self.f["tiles"], k.index(1))

    def load_geometry(self, extra: dict) -> None:
        """The layer's sizes, tile counts and outer strides (with `extra`) as run-time fields (kernels/flat.py
        run_time_fields), so layers that differ only in those share the unit's IR; the input's strides as
        run_time_strides."""
        s, wp = self.s, self.wp
        self.L = self.V if s.xs[1] == 1 and self.Ci >= self.V else 1
        """Input channels per transform step: a vector of them when they are innermost."""
        values = dict(H=s.H, W=s.W, TW=wp.TW, tiles=wp.tiles, ph=s.ph, pw=s.pw, x0=s.xs[0], x1=s.xs[1], x2=s.xs[2],
                      x3=s.xs[3], Ci=self.Ci, cgroups=self.Ci // self.L, **extra)
        self.f = dict(zip(values, run_time_fields(self.k, list(values.values()))))
        self.xs = run_time_strides(self.f, "x", s.xs, self.rt)

    def emit(self) -> None:
        s, k = self.s, self.k
        work = float(s.N) * s.OC * s.OH * s.OW * s.Cig * 9
        with spread_items(k, self.f["items"], self.f["chunks"], work) as item:
            image = k.b.udiv(item, self.f["blocks"])
            self.block(k.b.udiv(image, k.index(s.G)), k.b.urem(image, k.index(s.G)), k.b.urem(item, self.f["blocks"]))

    def emit_whole(self) -> None:
        """The whole-image form's GEMM and output transform, split over images, groups and panels of NR output
        channels: per chunk of T tiles, each point's weight panel serves every tile of the chunk. With copies of V
        (one per thread, fluid/winograd_split.py), tile c runs the c-th share of the panels on the copy `held` names
        for it: the one the transform's tile c wrote when the tiles ran apart."""
        s, wp, k = self.s, self.wp, self.k
        full_p, rem = divmod(self.Co, wp.NR)
        panels = full_p + (1 if rem else 0)
        work = float(s.N) * s.OC * s.OH * s.OW * s.Cig * 9
        if self.copies == 1:
            with k.parallel_tiles([s.N, s.G, panels], work) as (n, g, p):
                self.one_panel(n, n, g, p, full_p, rem)
            return
        with k.parallel_tiles([s.N, s.G, self.copies], work) as (n, g, c):
            first = k.b.udiv(mul_index(k, c, panels), k.index(self.copies))
            last = k.b.udiv(mul_index(k, add_index(k, c, 1), panels), k.index(self.copies))
            copy = k.load_ptr(self.held, np.dtype(np.int32), self.copy_tile(n, g, c))
            if copy.type.width != k.idx_t.width:
                copy = k.b.zext(copy, k.idx_t)
            vn = add_index(k, mul_index(k, copy, s.N), n)
            with k.for_range(last, first) as p:
                self.one_panel(n, vn, g, p, full_p, rem)

    def copy_tile(self, n, g, c):
        """The flattened tile (n, g, c) of a split over [images, groups, copies of V]: `held`'s index."""
        k = self.k
        return add_index(k, mul_index(k, add_index(k, mul_index(k, n, self.s.G), g), self.copies), c)

    def one_panel(self, n, vn, g, p, full_p: int, rem: int) -> None:
        """Panel p of image n (V's image vn: the copy's) and group g."""
        k, wp = self.k, self.wp
        if not rem:
            self.chunks(n, vn, g, p, self.whole_widths, wp.NR)
        elif not full_p:
            self.chunks(n, vn, g, p, [self.V] * -(-rem // self.V), rem)
        else:
            with k.b.if_else(k.b.icmp_signed("<", p, k.index(full_p))) as (whole, last):
                with whole:
                    self.chunks(n, vn, g, p, self.whole_widths, wp.NR)
                with last:
                    self.chunks(n, vn, g, p, [self.V] * -(-rem // self.V), rem)

    def chunks(self, n, vn, g, pidx, widths: list[int], valid: int) -> None:
        k, wp, vs = self.k, self.wp, self.vst
        col0 = mul_index(k, pidx, wp.NR)
        vbase = add_index(k, mul_index(k, vn, vs[0]), mul_index(k, g, vs[1]))
        with k.for_range(self.f["blocks"]) as blk:
            t0 = mul_index(k, blk, wp.T)
            with k.for_range(self.A2) as xi:
                point = add_index(k, mul_index(k, g, self.A2), xi)
                bases = (add_index(k, vbase, mul_index(k, xi, vs[2])), mul_index(k, point, self.ustep), None)
                with k.for_range(wp.T // wp.MR) as rt:
                    i0 = add_index(k, t0, mul_index(k, rt, wp.MR))
                    slots = outer_accumulate(k, self.P, wp.NR, self.Ci, bases, i0, wp.MR, col0, pidx, widths,
                                             last_row=self.last_tile)
                    for r in range(wp.MR):
                        row = mul_index(k, add_index(k, add_index(k, mul_index(k, xi, wp.T), mul_index(k, rt, wp.MR)), r),
                                        wp.NR)
                        for q in range(len(widths)):
                            k.vstore(k.b.load(slots[r][q]), self.mbuf, self.dt, add_index(k, row, sum(widths[:q])))
            with k.for_range(wp.T) as r:
                tt = add_index(k, t0, r)
                with k.b.if_then(k.b.icmp_signed("<", tt, self.f["tiles"])):
                    self.transform_output(n, g, tt, r, col0, widths, valid)

    def block(self, n, g, blk) -> None:
        k, wp = self.k, self.wp
        with k.for_range(wp.T) as t:
            self.transform_input(n, g, add_index(k, mul_index(k, blk, wp.T), t), t)
        full_p, rem = divmod(self.Co, wp.NR)
        if self.rt:
            full_p = self.f["full_p"]
        if self.rt or full_p:
            with k.for_range(full_p) as p:
                self.panel_tiles(n, g, blk, mul_index(k, p, wp.NR), p, self.whole_widths, wp.NR)
        if rem:
            self.panel_tiles(n, g, blk, mul_index(k, full_p, wp.NR), full_p, [self.V] * -(-rem // self.V), rem)

    # -- 1. input transform ------------------------------------------------------------------------
    def transform_input(self, n, g, tt, t) -> None:
        k, f, wp, b, xs = self.k, self.f, self.wp, self.k.b, self.xs
        a = wp.alpha
        th, tw = b.udiv(tt, f["TW"]), b.urem(tt, f["TW"])
        ih0 = b.sub(mul_index(k, th, wp.m), f["ph"])
        iw0 = b.sub(mul_index(k, tw, wp.m), f["pw"])
        live = b.icmp_signed("<", tt, f["tiles"])
        rows = [b.and_(live, self._within(add_index(k, ih0, i), f["H"])) for i in range(a)]
        cols = [self._within(add_index(k, iw0, j), f["W"]) for j in range(a)]
        inside = b.and_(b.and_(rows[0], rows[-1]), b.and_(cols[0], cols[-1]))
        base = add_index(k, add_index(k, mul_index(k, n, xs[0]), mul_index(k, mul_index(k, g, self.ci), xs[1])),
                         add_index(k, b.mul(ih0, xs[2]), b.mul(iw0, k.as_index(xs[3]))))
        with b.if_else(inside) as (fast, slow):
            with fast:
                self.channels(base, t, None)
            with slow:
                self.channels(base, t, [[b.and_(r, c) for c in cols] for r in rows])

    def _within(self, i, size: int):
        b = self.k.b
        return b.and_(b.icmp_signed(">=", i, self.k.index(0)), b.icmp_signed("<", i, size))

    def channels(self, base, t, valid) -> None:
        k, L = self.k, self.L
        with k.for_range(self.f["cgroups"] if self.rt else self.Ci // L) as cg:
            self.patch(base, t, mul_index(k, cg, L), L, valid)
        for c in range(self.Ci % L):
            self.patch(base, t, add_index(k, mul_index(k, self.f["cgroups"], L), c) if self.rt
                       else k.index(self.Ci // L * L + c), 1, valid)

    def patch(self, base, t, c0, L: int, valid) -> None:
        k, xs, wp, b, dt = self.k, self.xs, self.wp, self.k.b, self.dt
        a = wp.alpha
        cbase = add_index(k, base, mul_index(k, c0, xs[1]))
        cbase_safe = mul_index(k, c0, xs[1]) if valid is not None else None  # image 0, group 0: always in bounds
        src = k.b.gep(self.xp, [cbase], inbounds=True) if valid is None else None
        d, rows, cols = [], [offset(k, (i, xs[2])) for i in range(a)], [offset(k, (j, xs[3])) for j in range(a)]
        for i in range(a):
            row = []
            line = None if valid is not None else k.b.gep(src, [rows[i]], inbounds=True)
            for j in range(a):
                if valid is None:  # a patch inside the input: each row's loads at the columns' offsets from its first
                    row.append(k.vgather(line, dt, cols[j], xs[1], L))
                    continue
                at = add_index(k, cbase, add_index(k, rows[i], cols[j]))
                ok = valid[i][j]
                v = k.vgather(self.xp, dt, b.select(ok, at, cbase_safe), xs[1], L)
                row.append(b.select(ok, v, fill(v.type, 0.0)))
            d.append(row)
        v = sandwich(k, self.t.BT, d)
        dst = k.b.gep(self.vbuf, [self.v_at(t, 0, c0)], inbounds=True)
        for i in range(a):
            for j in range(a):
                k.vstore(v[i][j], dst, dt, offset(k, (i * a + j, self.v_point_step)))

    def v_at(self, t, point: int, c0):
        """Where tile t's channel c0 at `point` goes in the block's transformed input."""
        k = self.k
        return add_index(k, add_index(k, mul_index(k, t, self.ci), offset(k, (point, self.v_point_step))), c0)

    @property
    def v_point_step(self):
        """Elements between two points of one tile and channel in the transformed input."""
        return self.vstep

    # -- 2. the GEMM tiles, 3. output transform --------------------------------------------------------
    def panel_tiles(self, n, g, blk, col0, pidx, widths: list[int], valid: int) -> None:
        k, wp = self.k, self.wp
        with k.for_range(wp.T // wp.MR) as rt:
            i0 = mul_index(k, rt, wp.MR)
            with k.for_range(self.A2) as xi:
                point = add_index(k, mul_index(k, g, self.A2), xi)
                bases = (mul_index(k, xi, self.vstep), mul_index(k, point, self.ustep), None)
                slots = outer_accumulate(k, self.P, wp.NR, self.ci, bases, i0, wp.MR, col0, pidx, widths)
                for r in range(wp.MR):
                    row = mul_index(k, add_index(k, mul_index(k, xi, wp.MR), r), wp.NR)
                    for q in range(len(widths)):
                        k.vstore(k.b.load(slots[r][q]), self.mbuf, self.dt, add_index(k, row, sum(widths[:q])))
            with k.for_range(wp.MR) as r:
                tt = add_index(k, mul_index(k, blk, wp.T), add_index(k, i0, r))
                with k.b.if_then(k.b.icmp_signed("<", tt, self.f["tiles"])):
                    self.transform_output(n, g, tt, r, col0, widths, valid)

    def transform_output(self, n, g, tt, r, col0, widths: list[int], valid: int) -> None:
        """Tile tt's output transform, one vector of the panel at a time: the panel's whole vectors of one width
        in a loop (one copy of the transform and its stores), the others one by one."""
        k, f, wp, b = self.k, self.f, self.wp, self.k.b
        m = wp.m
        oh0 = mul_index(k, b.udiv(tt, f["TW"]), m)
        ow0 = mul_index(k, b.urem(tt, f["TW"]), m)
        whole = b.and_(b.icmp_signed("<=", add_index(k, oh0, m), f["OH"]),
                       b.icmp_signed("<=", add_index(k, ow0, m), f["OW"]))
        q = 0
        while q < len(widths):
            off, w = sum(widths[:q]), widths[q]
            run = 1
            while q + run < len(widths) and widths[q + run] == w and min(w, valid - off - run * w) == w:
                run += 1
            if run > 1 and min(w, valid - off) == w:
                with loop(k, run) as v:
                    self.output_vector(n, g, r, col0, add_index(k, mul_index(k, v, w), off), w, w, (oh0, ow0, whole))
                q += run
                continue
            self.output_vector(n, g, r, col0, k.index(off), w, min(w, valid - off), (oh0, ow0, whole))
            q += 1

    def output_vector(self, n, g, r, col0, off, w: int, count: int, tile) -> None:
        """Y = A^T M A of the panel's vector at column off (w lanes, count of them valid) for the tile at (oh0, ow0),
        then its stores (`whole`: the tile lies inside the output)."""
        k, wp, b = self.k, self.wp, self.k.b
        a = wp.alpha
        oh0, ow0, whole = tile
        grid = [[k.vload(self.mbuf, self.dt, add_index(k, mul_index(k, add_index(k, r, (i * a + j) * self.mstride),
                                                                      wp.NR), off), w)
                 for j in range(a)] for i in range(a)]
        col = add_index(k, col0, off)
        ys = [(0, w, count, self._add_bias(sandwich(k, self.t.AT, grid), g, col, w, count))]
        co0 = add_index(k, mul_index(k, g, self.co), col)
        rows = self.os[3] == 1 and self.os[1] != 1 and self.V % 4 == 0
        with b.if_else(whole) as (fast, slow):
            with fast:
                if rows:
                    self.store_rows(n, oh0, ow0, co0, ys)
                else:
                    self.store(n, oh0, ow0, co0, ys)
            with slow:
                self.store_edge(n, oh0, ow0, co0, ys)

    def _add_bias(self, y, g, co, w: int, count: int):
        if self.bias is None:
            return y
        co = add_index(self.k, mul_index(self.k, g, self.bias_step), co)
        if isinstance(self.bias, ir.Value):
            bv = self.k.vload(self.bias, self.dt, co, w)
        else:
            step = self.bias.strides[0]
            bv = self._lanes(self.bias.ptr, mul_index(self.k, co, step), step, w, max(count, 1))
        return [[self.k.b.fadd(v, bv) for v in row] for row in y]

    def store(self, n, oh0, ow0, col0, ys) -> None:
        """A whole tile, pixel by pixel: each piece at a constant offset from the tile's first element (one address
        computation per tile, not per store)."""
        out = self._tile(self.op, self.os, n, col0, oh0, ow0)
        res = None if self.res is None else self._tile(self.res[1], self.rs, n, col0, oh0, ow0)
        self.store_pieces(out, res, ys)

    def store_pieces(self, out, res, ys) -> None:
        """The pieces `ys` of a whole tile whose first elements are out (and res, the residual's), pixel by pixel."""
        k, os, rs = self.k, self.os, self.rs
        for i in range(self.wp.m):
            for j in range(self.wp.m):
                self.store_pixel((out, offset(k, (i, os[2]), (j, os[3]))),
                                 None if res is None else (res, offset(k, (i, rs[2]), (j, rs[3]))),
                                 [(off, w, count, y[i][j]) for off, w, count, y in ys])

    def store_edge(self, n, oh0, ow0, col0, ys) -> None:
        """A tile on the bottom or right edge: its values to the stack, then a loop over the pixels inside the
        output (one copy of the pixel's stores instead of m x m)."""
        k, f, m, b = self.k, self.f, self.wp.m, self.k.b
        for off, w, count, y in ys:
            for i in range(m):
                for j in range(m):
                    k.vstore(y[i][j], self.ebuf, self.dt, k.index((i * m + j) * self.wp.NR + off))
        rows, cols = (b.select(b.icmp_signed("<", left, k.index(m)), left, k.index(m))
                      for left in (b.sub(f["OH"], oh0), b.sub(f["OW"], ow0)))
        with k.for_range(rows) as i:
            with k.for_range(cols) as j:
                at = mul_index(k, add_index(k, mul_index(k, i, m), j), self.wp.NR)
                oh, ow = add_index(k, oh0, i), add_index(k, ow0, j)
                self.store_pixel((self.op, self._at(self.os, n, col0, oh, ow)),
                                 None if self.res is None else (self.res[1], self._at(self.rs, n, col0, oh, ow)),
                                 [(off, w, count, k.vload(self.ebuf, self.dt, add_index(k, at, off), w))
                                  for off, w, count, _ in ys])

    def store_rows(self, n, oh0, ow0, col0, ys) -> None:
        """A whole tile into a channels-first output: each tile row's pixels of one channel are contiguous, so the
        row's channel vectors are transposed in registers (4 x 4 blocks) and stored as one vector per channel and
        row piece (pieces of 4 and 2 pixels), each at a constant offset from the tile's first element."""
        k = self.k
        out = self._tile(self.op, self.os, n, col0, oh0, ow0)
        res = None if self.res is None else self._tile(self.res[1], self.rs, n, col0, oh0, ow0)
        for off, w, count, y in ys:
            if w % 4:  # a 5-column tile's last column (kernels/scalar_tile.py): pixel by pixel
                self.store_pieces(out, res, [(off, w, count, y)])
                continue
            for i in range(self.wp.m):
                for j0, lanes in row_pieces(k, w, y[i]):
                    for c in range(count):
                        self.store_row(out, res, ((off + c), i, j0), lanes[c])

    def store_row(self, out, res, spot: tuple[int, int, int], value) -> None:
        """value to the pixels from (channel, row, column) `spot` of the tile whose first elements are out (and res,
        the residual's)."""
        k = self.k
        if res is not None:
            at = offset(k, *zip(spot, self.rs[1:]))
            value = k.b.fadd(value, k.vgather(res, self.dt, at, self.rs[3], value.type.count))
        k.vstore(activate(k, self.epi, value), out, self.dt, offset(k, *zip(spot, self.os[1:])))

    def store_pixel(self, out, res, values) -> None:
        """One pixel's (first channel, lanes, valid lanes, vector) pieces, with the residual and activation; out and
        res: (pointer, index) of the pixel's first channel in the output and the residual."""
        k, os, rs = self.k, self.os, self.rs
        for off, w, count, value in values:
            if count <= 0:
                continue
            if res is not None:
                value = k.b.fadd(value, self._lanes(res[0], add_index(k, res[1], offset(k, (off, rs[1]))), rs[1], w, count))
            value = activate(k, self.epi, value)
            k.vscatter(value, out[0], self.dt, add_index(k, out[1], offset(k, (off, os[1]))), os[1], count)

    def _tile(self, ptr, st, n, co, oh, ow):
        """A pointer to element (n, co, oh, ow) of a tensor of strides st: a tile's stores index from it by constants."""
        return self.k.b.gep(ptr, [self._at(st, n, co, oh, ow)], inbounds=True)

    def _at(self, st, n, co, oh, ow):
        k = self.k
        return add_index(k, add_index(k, mul_index(k, n, st[0]), mul_index(k, co, st[1])),
                         add_index(k, mul_index(k, oh, st[2]), mul_index(k, ow, st[3])))

    def _lanes(self, ptr, at, stride, w: int, count: int):
        k = self.k
        if count == w:
            return k.vgather(ptr, self.dt, at, stride, w)
        vec = k.vzero(self.dt, w)
        for l in range(count):
            x = k.b.load(k.b.gep(ptr, [k.lane_at(at, l, stride)], inbounds=True))
            vec = k.b.insert_element(vec, x, ir.Constant(ir.IntType(32), l))
        return vec


def _shuffle(k, a, b, picks: list[int]):
    return k.b.shuffle_vector(a, b, ir.Constant(ir.VectorType(ir.IntType(32), len(picks)), picks))


def _interleave(k, a, b, w: int, half: int):
    """unpacklo (half 0) / unpackhi (half 1) of a and b within each block of 4 lanes."""
    picks = []
    for blk in range(0, w, 4):
        for q in (0, 1):
            picks += [blk + 2 * half + q, w + blk + 2 * half + q]
    return _shuffle(k, a, b, picks)


def _transpose4(k, cols: list, w: int) -> list:
    """Four w-lane vectors (pixels) -> per lane l, the 4 pixels' values as a <4 x T> vector (4 x 4 block transpose
    within each block of 4 lanes, then one block picked per lane)."""
    lo01, hi01 = _interleave(k, cols[0], cols[1], w, 0), _interleave(k, cols[0], cols[1], w, 1)
    lo23, hi23 = _interleave(k, cols[2], cols[3], w, 0), _interleave(k, cols[2], cols[3], w, 1)
    rows = []
    for x, z in ((lo01, lo23), (hi01, hi23)):
        for q in (0, 2):
            rows.append(_shuffle(k, x, z, [p for blk in range(0, w, 4) for p in (blk + q, blk + q + 1, w + blk + q, w + blk + q + 1)]))
    return [_shuffle(k, rows[l % 4], rows[l % 4], list(range(l - l % 4, l - l % 4 + 4))) for l in range(w)]


def _transpose2(k, cols: list, w: int) -> list:
    """Two w-lane vectors (pixels) -> per lane l, the 2 pixels' values as a <2 x T> vector."""
    lo, hi = _interleave(k, cols[0], cols[1], w, 0), _interleave(k, cols[0], cols[1], w, 1)
    return [_shuffle(k, src, src, [start, start + 1]) for l in range(w)
            for src, start in [((lo, hi)[l % 4 // 2], l - l % 4 + 2 * (l % 2))]]


def row_pieces(k, w: int, row: list) -> list[tuple[int, list]]:
    """A tile row's m pixel vectors (w lanes each, w a multiple of 4) as pieces of 4 and 2 pixels: (first pixel,
    per lane the piece's values as one vector)."""
    pieces, j = [], 0
    while j < len(row):
        size = 4 if len(row) - j >= 4 else 2
        pieces.append((j, (_transpose4 if size == 4 else _transpose2)(k, row[j:j + size], w)))
        j += size
    return pieces


def emit_winograd(k, plan: ConvPlan, xp, op, w, bias, res, epilogue, v_operand=None) -> None:
    """The conv of `plan` (plan.winograd set) as Winograd tiles; v_operand: (pointer, strides) of the whole-image
    form's transformed input V (plan.winograd.whole)."""
    conv = WinogradConv(k, plan, xp, op, w, bias, res, epilogue, v_operand)
    if plan.winograd.whole:
        conv.emit_whole()
    else:
        conv.emit()
