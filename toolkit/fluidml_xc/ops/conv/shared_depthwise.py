"""Channels-last depthwise convs on x86 as one kernel per stride, kernel size, dilation, padding, pixel tile and
epilogue (issue #27: build time). The spatial sizes, the channel count, the storage strides and the parallel split
are run-time values read from a small constant argument, and the packed weights and the bias are arguments of no
declared size, so the depthwise layers of a model that differ only in those compile once per code variant
(emit/units.py: units of the same IR share one object).

The tile is the per-layer kernel's (ops/conv/depthwise.py): one channel vector x P pixels of an output row,
accumulated from the bias over the kernel rows, then the kernel columns, in order, the channel vectors innermost;
so the outputs are the same bits. Every row is covered by tiles of P pixels, the last one ending at the row's last
pixel (it recomputes the pixels it shares with the tile before: the same bits, and a Conv never writes over its
inputs). A tap outside the input reads a zero block instead (in .bss) and multiplies its zeros, as ONNX's zero
padding and the per-layer kernel's zero rows do (the per-layer kernel skips a padded column's taps instead: a sum
can then differ in the sign of a zero, never otherwise, the weights being finite). The channels past the last whole
vector run through a lane mask.
"""
from __future__ import annotations

from functools import partial

import numpy as np
from llvmlite import ir

from ...kernels.conv_plan import ConvPlan, pack_weights
from ...kernels.derived import derived
from ...kernels.epilogue import epilogue
from ...kernels.flat import run_time_fields
from ...kernels.loops import loop
from ...kernels.rows_runtime import lanes_below, masked_load, masked_store
from ...kernels.scalar import llvm_type
from ...kernels.vectors import load_lanes, mac, store_lanes
from ...target.arch import arch_of
from .depthwise import zero_row
from .shared_pointwise import SHARED_TILES, shared_chunks
from .walk import ConvKernel

FIELDS = ("H", "W", "OH", "OW", "channels", "x_image", "x_row", "x_pixel", "out_image", "out_row", "out_pixel",
          "vectors", "padded", "col_lo", "col_hi", "tiles", "rows", "row_chunks", "unit_chunks")
"""The run-time argument's int64 fields, in order."""

ZERO_CHANNELS = 4096
"""Most channels: a tap outside the input reads its channels from a zero block of this many floats (in .bss, the
per-layer kernel's zero row, at least this long)."""

MAX_TAPS = 25
"""Kernel sizes up to 5x5 (every tap's multiply-adds unrolled in the tile)."""


def shared_depthwise(c: ConvKernel) -> bool:
    """Does the shared kernel run this conv: x86, float32, static, depthwise (one input and one output channel per
    group), in the channels-last depthwise form with one channel vector per block, channels innermost in input and
    output, no residual, constant finite weights and a constant bias (or none)?"""
    k, p = c.k, c.plan
    s, bl = p.shape, p.blocking
    arch = arch_of(k.spec.triple) if k.spec is not None else None
    if arch is None or not arch.x86 or p.dtype != "float32" or p.form != "depthwise_c":
        return False
    if (s.dyn is not None or s.Cig != 1 or s.Cog != 1 or bl.dw_vec != 1 or bl.lane_taps or bl.by_lane
            or s.KH * s.KW > MAX_TAPS or c.res is not None or c.w.value is None or not np.isfinite(c.w.value).all()
            or c.bias is not None and c.bias.value is None or s.G > ZERO_CHANNELS):
        return False
    return s.xs[1] == 1 and s.os[1] == 1


def inside_columns(s) -> tuple[int, int]:
    """[lo, hi): the output columns whose kernel columns all lie inside the input row."""
    lo = -(-s.pw // s.sw)
    reach = s.W - 1 + s.pw - (s.KW - 1) * s.dw
    hi = reach // s.sw + 1 if reach >= 0 else 0
    return lo, max(lo, min(hi, s.OW))


def tile_width(columns: int, most: int) -> int:
    """Pixels per tile for rows of `columns`: of the widths from half the register tile's to all of it, the one whose
    tiles recompute the fewest pixels (the last tile ends at the row's end), the widest of those (28 columns: 4 x 7,
    not 4 x 8 recomputing 4)."""
    widths = range(min(-(-most // 2), columns), min(most, columns) + 1)
    return min(widths, key=lambda w: (-columns % w, -w))


def _packed_weights(p: ConvPlan, w: np.ndarray) -> np.ndarray:
    s = p.shape
    return pack_weights(p, w.reshape(s.OC, 1, s.KH, s.KW))


def _bias(bias: np.ndarray) -> np.ndarray:
    return np.asarray(bias, np.float32).reshape(-1)


class Direct:
    """The taps of a tile inside the input: per kernel row its first column's element offset. In each channel step
    a row's base pointer passes an empty asm statement, so LLVM keeps the columns as adds of the pixel stride in the
    loop (one register each row) instead of 30 loop-invariant pointers it would spill and reload."""

    def __init__(self, rows):
        self.rows = rows

    def pointers(self, sd: "SharedDepthwise", c0):
        b = sd.k.b
        bases = [sd.c.opaque(b.gep(sd.c.xp, [b.add(r, c0)], inbounds=True)) for r in self.rows]
        chains: dict[tuple[int, int], ir.Value] = {}

        def pointer(kh, m):
            if (kh, m) not in chains:
                chains[kh, m] = bases[kh] if m == 0 else b.gep(pointer(kh, m - 1), [sd.f["x_pixel"]], inbounds=True)
            return chains[kh, m]
        return lambda kh, m: (pointer(kh, m), sd.k.index(0))


class Border:
    """The taps of a tile at a padded border: each tap's pointer into the input or the zero block's."""

    def __init__(self, taps):
        self.taps = taps

    def pointers(self, sd: "SharedDepthwise", c0):
        return lambda kh, m: (self.taps[kh][m], c0)


class SharedDepthwise:
    """One shared depthwise kernel emission: reads the ConvKernel, its ConvPlan and the run-time fields."""

    def __init__(self, c: ConvKernel):
        self.c, self.k, self.p = c, c.k, c.plan
        s = self.p.shape
        self.V = self.p.V
        self.P = tile_width(s.OW, self.p.blocking.P)
        self.vt = ir.VectorType(llvm_type(self.p.dtype), self.V)
        self.masked = s.G % self.V > 0
        split = c.split()
        chunks = shared_chunks(split, s.N)
        self.work = split[0] if chunks else 0.0
        unit_chunks, row_chunks = chunks or (1, 1)
        self.values = np.array((s.H, s.W, s.OH, s.OW, s.G, s.xs[0], s.xs[2], s.xs[3], s.os[0], s.os[2], s.os[3],
                                -(-s.G // self.V), -(-s.G // self.V) * self.V, *inside_columns(s), -(-s.OW // self.P),
                                s.N * s.OH, row_chunks, unit_chunks), np.int64)

    def emit(self) -> None:
        k, b, c = self.k, self.k.b, self.c
        c.packed = k.argument_array(derived(k, partial(_packed_weights, self.p), c.w))
        self.bias = k.argument_array(derived(k, _bias, c.bias)) if c.bias is not None else None
        self.f = f = dict(zip(FIELDS, run_time_fields(k, self.values)))
        self.last_tile = b.sub(f["OW"], k.index(self.P))
        self.zero = zero_row(k, ZERO_CHANNELS * np.dtype(self.p.dtype).itemsize, c.xp.type)
        with k.parallel_tiles([SHARED_TILES], self.work) as (t,):
            active, chunk = k.spread(t, b.mul(f["row_chunks"], f["unit_chunks"]), SHARED_TILES)
            rc, uc = b.udiv(chunk, f["unit_chunks"]), b.urem(chunk, f["unit_chunks"])
            with b.if_then(active):
                r_lo, r_hi = k.chunk(rc, f["row_chunks"], f["rows"])
                self.units = k.chunk(uc, f["unit_chunks"], f["vectors"])
                with loop(k, r_hi, r_lo) as r:
                    self._row(b.udiv(r, f["OH"]), b.urem(r, f["OH"]))

    def _row(self, n, oh) -> None:
        """Output row oh of image n: its tiles, each tap's pointer the input's or, outside it, the zero block's (a
        tile inside the input computes them without a check)."""
        k, b, s, f = self.k, self.k.b, self.p.shape, self.f
        last_row = b.sub(f["H"], k.index(1))
        image = b.mul(n, f["x_image"])
        ih = [b.add(b.mul(oh, k.index(s.sh)), k.index(kh * s.dh - s.ph)) for kh in range(s.KH)]
        rows = [(b.add(image, b.mul(k.imin(k.imax(v, k.index(0)), last_row), f["x_row"])), b.icmp_unsigned("<", v, f["H"]))
                for v in ih]
        rows_inside = b.and_(b.icmp_signed(">=", ih[0], k.index(0)), b.icmp_signed("<", ih[-1], f["H"]))
        out_row = b.add(b.mul(n, f["out_image"]), b.mul(oh, f["out_row"]))
        with loop(k, f["tiles"]) as j:
            at = b.mul(j, k.index(self.P))
            at = b.select(b.icmp_signed("<", at, self.last_tile), at, self.last_tile)
            first = b.sub(b.mul(at, k.index(s.sw)), k.index(s.pw))
            inside = b.and_(rows_inside, b.and_(b.icmp_signed(">=", at, f["col_lo"]),
                                                b.icmp_signed("<=", b.add(at, k.index(self.P)), f["col_hi"])))
            with b.if_else(inside) as (direct, border):
                with direct:
                    start = b.mul(first, f["x_pixel"])
                    self._tile(Direct([b.add(r, start) for r, _ in rows]), at, out_row)
                with border:
                    self._tile(Border(self._border_taps(rows, first)), at, out_row)

    def _border_taps(self, rows, first) -> list:
        """Each tap's pointer into the input (row and column clamped into it), or the zero block's outside it."""
        k, b, f = self.k, self.k.b, self.f
        last_col = b.sub(f["W"], k.index(1))
        cols = []
        for m in range(self._columns()):
            iw = b.add(first, k.index(m))
            cols.append((b.mul(k.imin(k.imax(iw, k.index(0)), last_col), f["x_pixel"]), b.icmp_unsigned("<", iw, f["W"])))
        return [[b.select(b.and_(rv, cv), b.gep(self.c.xp, [b.add(r, col)], inbounds=True), self.zero)
                 for col, cv in cols] for r, rv in rows]

    def _columns(self) -> int:
        s = self.p.shape
        return (self.P - 1) * s.sw + (s.KW - 1) * s.dw + 1

    def _tile(self, taps, at, out_row) -> None:
        """Pixels [at, at + P) of the row, every channel vector of this tile's units (the last through a mask)."""
        k, b, f = self.k, self.k.b, self.f
        lo, hi = self.units
        whole = b.sub(f["vectors"], k.index(1)) if self.masked else f["vectors"]
        with loop(k, k.imin(hi, whole), lo) as u:
            self._block(b.mul(u, k.index(self.V)), taps, at, out_row, None)
        if self.masked:
            with b.if_then(b.icmp_signed(">", hi, whole)):
                c0 = b.mul(whole, k.index(self.V))
                self._block(c0, taps, at, out_row, lanes_below(k, b.sub(f["channels"], c0), self.V))

    def _block(self, c0, taps, at, out_row, mask) -> None:
        k, b, s, f, dt, V = self.k, self.k.b, self.p.shape, self.f, self.p.dtype, self.V
        c = self.c
        if self.bias is None:
            init = ir.Constant(self.vt, [0.0] * V)
        elif mask is None:
            init = load_lanes(k, self.bias, c0, V, 1, False)
        else:
            init = masked_load(k, self.bias, c0, mask, 0.0)
        sums = [init] * self.P
        pointers = taps.pointers(self, c0)

        def x(kh, m):
            """Each tap's load of its own (LLVM folds it into the multiply-add; kept for the other pixels that read
            it, the values spilled)."""
            ptr, at_ = pointers(kh, m)
            return load_lanes(k, ptr, at_, V, 1, False) if mask is None else masked_load(k, ptr, at_, mask, 0.0)
        for kh in range(s.KH):
            for kw in range(s.KW):
                w = load_lanes(k, c.packed, b.add(c0, k.index(0) if kh == kw == 0 else
                                                  b.mul(k.index(kh * s.KW + kw), f["padded"])), V, 1, False)
                for p in range(self.P):
                    sums[p] = mac(k, dt, sums[p], x(kh, p * s.sw + kw * s.dw), w)
        for p in range(self.P):
            out = b.add(b.add(out_row, b.mul(b.add(at, k.index(p)), f["out_pixel"])), c0)
            value = epilogue(k, self.p.epilogue, sums[p], None)
            if mask is None:
                store_lanes(k, c.op, out, value, V, 1)
            else:
                masked_store(k, value, c.op, out, mask)
