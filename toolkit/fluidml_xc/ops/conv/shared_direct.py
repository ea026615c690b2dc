"""x86's channel-vector 3x3 convs (stride 1 or 2, padding 1) as one kernel per stride, register tile, loop order,
input and output layout and epilogue (issue #27: build time). The spatial sizes, output channel count, storage strides
(but the input's pixel stride) and the parallel split are run-time values read from a small constant argument, and the
packed weights and the bias are arguments of no declared size, so the layers of a model that differ only in those
compile once per code variant (emit/units.py: units of the same IR share one object). The input's pixel stride (1
channels-first, the input channel count channels-last) stays a build-time constant: each tap's loads are constant
offsets from one pointer, as in the per-layer kernel (a run-time stride's adds took ports from the multiply-adds).

The tile is the per-layer kernel's (ops/conv/channels.py block_c): R output channels (NV vectors) x P pixels of an
output row, accumulated from the bias over the input channels in order, each channel's kernel rows, then columns, in
order, every tap broadcasting its own input values; the input channels run in a loop whose accumulators are phis
(shared_pointwise.py). Every row is covered by tiles of P pixels (tile_width), the last one ending at the row's last
pixel (it recomputes the pixels it shares with the tile before: the same bits, and a Conv never writes over its
inputs). A kernel row outside the input reads a zero block (in .bss) and multiplies its zeros, as ONNX's zero
padding does (the per-layer kernel skips those taps: a sum can then differ in the sign of a zero, never otherwise,
the weights being finite); the padded column of the first tile (its first pixel's first kernel column) and, when the
row has one, of the last tile (its last pixel's last kernel column) are skipped, as the per-layer kernel skips them:
three copies of the tile (first, inner, last) instead of one per row and column case. The output channels past the
last whole block run one vector at a time, the last one through a lane mask (shared_pointwise.py); a channels-first
output stores each tile's vectors transposed in registers (channels.py store_row).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np
from llvmlite import ir

from ...kernels.conv_plan import ConvPlan, pack_weights
from ...kernels.derived import derived
from ...kernels.flat import run_time_fields
from ...kernels.loops import loop
from ...kernels.rows_runtime import lanes_below, masked_load
from ...kernels.epilogue import epilogue
from ...kernels.vectors import load_lanes, mac, store_lanes
from ...target.arch import arch_of
from .depthwise import zero_row
from .shared_pointwise import SHARED_TILES, SharedPointwise, shared_chunks
from .walk import ConvKernel
from .winograd import row_pieces

FIELDS = ("pixels", "ci", "x_step", "out_step", "res_step", "full_blocks", "rest", "block", "H", "W", "OH", "OW",
          "x_image", "x_channel", "x_row", "x_pixel", "tiles", "right", "rows", "row_chunks", "block_chunks",
          "out_image", "out_channel", "out_row")
"""The run-time argument's int64 fields, in order (the first eight are shared_pointwise.py's, read by its _block,
_weight_base and _store; x_step is unused)."""

ZERO_FLOATS = 16384
"""Floats of the zero block a padded kernel row reads: a tile's input columns times the input's pixel stride."""


def shared_direct(c: ConvKernel) -> bool:
    """Does the shared kernel run this conv: x86, float32, static, one group, 3x3, stride 1 or 2 in both dims, padding
    1 on each side, no dilation, in the channel-vector form with the taps inside the loop over input channels (not
    TargetForms.taps_outer: that plan sums in another order), the input storing channels or columns innermost, the
    output and residual dense channels-last, at least two tiles per row, constant finite weights and a constant bias
    (or none)?"""
    k, p = c.k, c.plan
    s = p.shape
    arch = arch_of(k.spec.triple) if k.spec is not None else None
    if (arch is None or not arch.x86 or p.dtype != "float32" or p.form not in ("channels co>px", "channels px>co")
            or p.taps_outer):
        return False
    if (s.dyn is not None or s.G != 1 or (s.KH, s.KW, s.dh, s.dw, s.ph, s.pw) != (3, 3, 1, 1, 1, 1)
            or s.sh != s.sw or s.sh not in (1, 2) or c.w.value is None or not np.isfinite(c.w.value).all()
            or c.bias is not None and c.bias.value is None or c.xpack is not None):
        return False
    if (s.OH - 1) * s.sh + 1 > s.H or (s.OW - 1) * s.sw + 1 > s.W or s.OW <= tile_pixels(c):
        return False
    if s.xs[1] != 1 and s.xs[3] != 1 or _columns(c) * s.xs[3] > ZERO_FLOATS:
        return False
    if channels_first_out(c):
        return True
    strides = [s.os] + ([c.res[0]] if c.res is not None else [])
    return all(st[1] == 1 and st[0] == s.OH * st[2] and st[2] == s.OW * st[3] for st in strides)


def channels_first_out(c: ConvKernel) -> bool:
    """Does the conv store a dense channels-first output, no residual, whole vectors of output channels of a
    multiple of 4 lanes (each tile's pixel vectors transposed in registers and stored as rows: channels.py
    store_row)?"""
    p = c.plan
    s = p.shape
    return (s.os == (s.OC * s.OH * s.OW, s.OH * s.OW, s.OW, 1) and c.res is None and s.OC % p.V == 0
            and p.V % 4 == 0 and tile_width(s.OW, p.blocking.P, True) % 2 == 0)


def tile_width(columns: int, most: int, even: bool = False) -> int:
    """Pixels per tile for rows of `columns`: of the widths from half the register tile's to all of it (even ones
    only when `even`: a channels-first output stores pieces of 4 and 2 pixels, an odd one lane by lane), the one
    whose tiles (the last one ending at the row's end) cost least, a tile's fixed work (its bias and weight
    addresses, stores and channel loop) counted as one pixel's, the widest of those (80 columns: 16 x 5, not 14 x 6;
    112: 19 x 6, not 28 x 4)."""
    widths = [w for w in range(min(-(-most // 2), columns), min(most, columns) + 1) if not even or w % 2 == 0]
    return min(widths or [min(most, columns)], key=lambda w: (-(-columns // w) * (w + 1), -w))


def tile_pixels(c: ConvKernel) -> int:
    """The conv's tile width (even for a channels-first output)."""
    p = c.plan
    return tile_width(p.shape.OW, p.blocking.P, channels_first_out(c))


def _columns(c: ConvKernel) -> int:
    """Input columns of a tile."""
    s = c.plan.shape
    return (tile_pixels(c) - 1) * s.sw + s.KW


def _packed_weights(p: ConvPlan, w: np.ndarray) -> np.ndarray:
    s = p.shape
    return pack_weights(p, w.reshape(s.OC, s.Cig, s.KH, s.KW))


def _bias(bias: np.ndarray) -> np.ndarray:
    return np.asarray(bias, np.float32).reshape(-1)


@dataclass
class Spot:
    """A tile's place: its first output pixel (flat over images and rows), its three input rows' pointers at its
    first input column and their steps per input channel, and the taps it skips (pixel, kernel column)."""

    pixel: ir.Value
    out: ir.Value
    """The tile's first output element in a channels-first output."""
    rows: list
    steps: list
    skip: tuple[tuple[int, int], ...]


class SharedDirect(SharedPointwise):
    """One shared direct conv emission: shared_pointwise.py's channel blocks, weights and stores, this module's
    tiles."""

    def __init__(self, c: ConvKernel):
        """The attributes shared_pointwise.py's methods read (not its __init__: its geometry is a 1x1 conv's)."""
        self.c, self.k, self.p = c, c.k, c.plan
        s, bl = self.p.shape, self.p.blocking
        self.R, self.V, self.RP = bl.R, self.p.V, self.p.RP
        self.NV = -(-self.R // self.V)
        self.vt = ir.VectorType(ir.FloatType(), self.V)
        full, rest = divmod(s.OC, self.R)
        self.has_rest, self.masked, self.steps = rest > 0, s.OC % self.V > 0, 1
        self.rows_out = channels_first_out(c)
        self.P = tile_pixels(c)
        split = c.split()
        chunks = shared_chunks(split, s.N)
        self.work = split[0] if chunks else 0.0
        block_chunks, row_chunks = chunks or (1, 1)
        res_step = c.res[0][3] if c.res is not None else 0
        right = (s.OW - 1) * s.sw - s.pw + s.KW > s.W
        self.values = np.array((s.N * s.OH * s.OW, s.Cig, 0, s.os[3], res_step, full, rest, s.Cig * 9 * self.RP,
                                s.H, s.W, s.OH, s.OW, s.xs[0], s.xs[1], s.xs[2], s.xs[3], -(-s.OW // self.P), right,
                                s.N * s.OH, row_chunks, block_chunks, s.os[0], s.os[1], s.os[2]), np.int64)

    def emit(self) -> None:
        k, b, c = self.k, self.k.b, self.c
        c.packed = k.argument_array(derived(k, partial(_packed_weights, self.p), c.w))
        self.bias = None if c.bias is None else k.argument_array(derived(k, _bias, c.bias))
        self.f = f = dict(zip(FIELDS, run_time_fields(k, self.values)))
        self.zero = zero_row(k, ZERO_FLOATS * 4, c.xp.type)
        blocks = b.add(f["full_blocks"], k.index(1)) if self.has_rest else f["full_blocks"]
        with k.parallel_tiles([SHARED_TILES], self.work) as (t,):
            active, chunk = k.spread(t, b.mul(f["row_chunks"], f["block_chunks"]), SHARED_TILES)
            rc, bc = b.udiv(chunk, f["block_chunks"]), b.urem(chunk, f["block_chunks"])
            with b.if_then(active):
                r_lo, r_hi = k.chunk(rc, f["row_chunks"], f["rows"])
                cb_lo, cb_hi = k.chunk(bc, f["block_chunks"], blocks)
                if self.p.blocks_outer:  # channel blocks, rows, a row's tiles (channels.py's orders)
                    with loop(k, cb_hi, cb_lo) as cb:
                        with loop(k, r_hi, r_lo) as r:
                            self._row(r, lambda tiles, cb=cb: tiles(cb))
                else:  # rows, channel blocks, a row's tiles
                    def blocks(tiles):
                        with loop(k, cb_hi, cb_lo) as cb:
                            tiles(cb)
                    with loop(k, r_hi, r_lo) as r:
                        self._row(r, blocks)

    def _row(self, r, blocks) -> None:
        """Output row r (of every image's rows): its input rows (the zero block's outside the input), then
        blocks(tiles): tiles(cb) runs channel block cb over the row's tiles; the first and (with padding on the
        right) the last tile skip their padded column."""
        k, b, s, f = self.k, self.k.b, self.p.shape, self.f
        n, oh = b.udiv(r, f["OH"]), b.urem(r, f["OH"])
        image = b.mul(n, f["x_image"])
        ihs = [b.add(b.mul(oh, k.index(s.sh)), k.index(kh - s.ph)) for kh in range(s.KH)]
        inside = [b.icmp_unsigned("<", ih, f["H"]) for ih in ihs]
        starts = [b.add(image, b.mul(ih, f["x_row"])) for ih in ihs]
        steps = [b.select(v, f["x_channel"], k.index(0)) for v in inside]
        row_pixel = b.mul(r, f["OW"])
        out_row = b.add(b.mul(n, f["out_image"]), b.mul(oh, f["out_row"]))
        blocks(lambda cb: self._tiles(cb, (row_pixel, out_row), inside, starts, steps))

    def _tiles(self, cb, firsts, inside, starts, steps) -> None:
        """Channel block cb over a row's tiles (firsts: the row's first pixel, flat, and output element)."""
        k, b, s, f, P = self.k, self.k.b, self.p.shape, self.f, self.P
        row_pixel, out_row = firsts
        last_tile, last_at = b.sub(f["tiles"], k.index(1)), b.sub(f["OW"], k.index(P))
        with loop(k, f["tiles"]) as j:
            at = b.mul(j, k.index(P))
            at = b.select(b.icmp_unsigned("<", at, last_at), at, last_at)
            column = b.mul(b.sub(b.mul(at, k.index(s.sw)), k.index(s.pw)), f["x_pixel"])
            rows = [b.select(v, b.gep(self.c.xp, [b.add(st, column)]), self.zero) for v, st in zip(inside, starts)]

            def spot(skip):
                return Spot(b.add(row_pixel, at), b.add(out_row, at), rows, steps, skip)
            right = b.and_(b.icmp_unsigned("==", j, last_tile), b.icmp_unsigned("!=", f["right"], k.index(0)))
            with b.if_else(b.icmp_unsigned("==", j, k.index(0))) as (first, then):
                with first:
                    self._block(cb, spot(((0, 0),)), P)
                with then:
                    with b.if_else(right) as (last, inner):
                        with last:
                            self._block(cb, spot(((P - 1, s.KW - 1),)), P)
                        with inner:
                            self._block(cb, spot(()), P)

    def _tile(self, cb, vectors: list, spot: Spot, count: int, valid=None) -> None:
        """The tile at `spot` x the given vectors of block cb: accumulate over the input channels, then the epilogue
        and the stores (the vectors' lanes below `valid` only, when given)."""
        k, b, c, V = self.k, self.k.b, self.c, self.V
        channel = [b.add(b.mul(cb, k.index(self.R)), b.mul(v, k.index(V))) for v in vectors]
        mask = None if valid is None else lanes_below(k, valid, V)
        zero = ir.Constant(self.vt, [0.0] * V)
        inits = [zero if self.bias is None else load_lanes(k, self.bias, ch, V, 1, False) if mask is None
                 else masked_load(k, self.bias, ch, mask, 0.0) for ch in channel]
        wrows = [b.gep(c.packed, [self._weight_base(cb, v)], inbounds=True) for v in vectors]
        sums = self._accumulate([[init] * count for init in inits], k.index(0), self.f["ci"], 1,
                                partial(self._taps, spot, wrows))
        for j, ch in enumerate(channel):
            if self.rows_out:
                self._store_pieces(b.add(spot.out, b.mul(ch, self.f["out_channel"])),
                                 [epilogue(k, self.p.epilogue, v) for v in sums[j]])
                continue
            for i in range(count):
                self._store(b.add(spot.pixel, k.index(i)), ch, sums[j][i], mask)

    def _store_pieces(self, first, row: list) -> None:
        """A vector's pixel values of consecutive output pixels (an even count), channels-first from output element
        `first`: transposed in registers in pieces of 4 and 2 pixels, one store per channel and piece (channels.py
        store_row), each channel's address the one before plus the channel stride (from a pointer through an empty
        asm statement: adds in the tile instead of V loop-invariant offsets to keep)."""
        k, b, step, c = self.k, self.k.b, self.f["out_channel"], self.c
        pieces = row_pieces(k, self.V, row)
        at = self.c.opaque(b.gep(c.op, [first], inbounds=True))
        for lane in range(self.V):
            if lane:
                at = b.gep(at, [step], inbounds=True)
            for j, lanes in pieces:
                store_lanes(k, at, k.index(j), lanes[lane], lanes[lane].type.count, 1)

    def _taps(self, spot: Spot, wrows: list, ci, accs: list) -> list:
        """Input channel ci: per kernel row, then column, the weights' vectors and each pixel's input value
        broadcast (from a pointer through an empty asm statement per tap, as channels.py's fresh broadcasts) into
        the multiply-adds of every vector."""
        k, b, s, dt = self.k, self.k.b, self.p.shape, self.p.dtype
        sums = [list(row) for row in accs]
        weights = [b.gep(w, [b.mul(ci, k.index(s.KH * s.KW * self.RP))], inbounds=True) for w in wrows]
        column = s.xs[3]  # a build-time constant: constant offsets from each tap's pointer (a run-time stride's adds
        # or offsets in registers took ports from the multiply-adds: +30 % on a 64-channel AVX-512 layer)
        for kh in range(s.KH):
            row = b.gep(spot.rows[kh], [b.mul(ci, spot.steps[kh])])
            for kw in range(s.KW):
                wv = [load_lanes(k, w, k.index((kh * s.KW + kw) * self.RP), self.V, 1, False) for w in weights]
                tap = self.c.opaque(b.gep(row, [k.index(kw * column)]))
                for p in range(self.P):
                    if (p, kw) in spot.skip:
                        continue
                    xv = k.splat(b.load(b.gep(tap, [k.index(p * s.sw * column)])), self.V)
                    for j, w in enumerate(wv):
                        sums[j][p] = mac(k, dt, sums[j][p], xv, w)
        return sums
