"""1x1 stride-1 unpadded convs over channels-last pixels as one kernel per register tile, loop order, epilogue and
storage kind (issue #27: build time). The pixel and channel counts, the strides and the parallel split are run-time values read
from a small constant argument, and the packed weights and bias are arguments of no declared size, so every such
layer with the same tile compiles once per code variant (emit/units.py: units of the same IR share one object).

The tile is the flat channel-vector form's (ops/conv/channels.py): R output channels (blocking.R, NV vectors of V
lanes) x P pixels, accumulated in registers from the bias over the input channels in order, so the outputs are the
same bits (x86 and aarch64; aarch64 takes 4 input channels per step, one vector load per pixel, by lane). On x86
the input or the output of one image may also store channels first (planes): the tile then reads a channel's
pixels at constant offsets from one pointer, and stores each vector's pixels transposed into rows of channels, as
the per-layer kernel does (channels.py store_row). The last
tile of pixels ends at the last pixel and recomputes the pixels it shares with the tile before (the same bits
again: a Conv never writes over its inputs, so rewriting a pixel reads what the first write read); where that would
recompute more than OVERLAP_SHARE of them, the tiles split the pixels evenly, in two heights that the layers of the
same pixel count share. The output channels past the last whole block (CO % R, when the layer has them) run one
vector at a time, the last one through a lane mask when CO is not a multiple of V. The parallel split is
SHARED_TILES tiles, each a (channel chunk, pixel chunk) of the chunk counts walk.py's split chooses for the layer
(shared_chunks: at most SHARED_TILES of them), spread evenly over the tiles (Kernel.spread), the others idle. Two
tiles may write the same last pixels (the overlapping tile), with the same bits; the pool joins every tile before
the next op reads them.
"""
from __future__ import annotations

from functools import partial

import numpy as np
from llvmlite import ir

from ...kernels.conv_plan import ConvPlan, pack_weights
from ...kernels.derived import derived
from ...kernels.epilogue import epilogue
from ...kernels.flat import run_time_fields
from ...kernels.loops import keep_rolled, loop
from ...kernels.rows_runtime import lanes_below, masked_load, masked_store
from ...kernels.scalar import llvm_type
from ...kernels.vectors import load_lanes, mac, store_lanes
from ...target.arch import arch_of
from .walk import ConvKernel
from .winograd import row_pieces

SHARED_TILES = 24
"""Parallel tiles of every shared pointwise kernel: kernels/split.py's most (2 x TARGET_TILES)."""

OVERLAP_SHARE = 0.02
"""At most this share of a layer's pixels computed twice by its last tile (7x7 at 6-pixel tiles recomputed 5 of 49:
mobilenetv2 2.4 % and inception_v2 4.6 % slower on one thread); past it the tiles split the pixels evenly."""

FIELDS = ("pixels", "ci", "x_step", "out_step", "res_step", "full_blocks", "rest", "block", "channel_chunks",
          "pixel_chunks", "tiles")
"""The run-time argument's int64 fields, in order. x_step / out_step: elements between two pixels of a channels-last
input / output, between two channels of a channels-first one."""


def shared_pointwise(c: ConvKernel) -> bool:
    """Does the shared kernel run this conv: x86 or aarch64, float32, static, one group, a flat 1x1 conv (one run of
    pixels per image, images back to back) whose pixels fill tiles of at least half the register tile's height
    (tile_heights), input, output and residual storing channels innermost (on x86 the input or the output of one
    image may store channels first: _channels_first, _output_rows), in the flat channel-vector form, with constant
    weights and bias?"""
    k, p = c.k, c.plan
    s = p.shape
    arch = arch_of(k.spec.triple) if k.spec is not None else None
    if arch is None or not (arch.x86 or arch.aarch64) or p.dtype != "float32":
        return False
    if (not s.flat or s.dyn is not None or s.G != 1 or c.w.value is None
            or c.bias is not None and c.bias.value is None or p.form not in ("flat channels co>px", "flat channels px>co")):
        return False
    if tile_heights(s.N * s.W, p.blocking.P) is None:
        return False
    if c.res is not None and not _channels_last(c.res[0], s):
        return False
    x86 = arch.x86
    return ((_channels_last(s.xs, s) or x86 and _channels_first(s.xs, s))
            and (_channels_last(s.os, s) or x86 and _output_rows(c)))


def _channels_last(st, s) -> bool:
    """Channels innermost, the images' pixels one run."""
    return st[1] == 1 and (s.N == 1 or st[0] == s.W * st[3])


def _channels_first(st, s) -> bool:
    """One image's channel planes, its pixels contiguous in each."""
    return s.N == 1 and st[3] == 1 and st[1] != 1


def _output_rows(c) -> bool:
    """A channels-first output the kernel stores as pixel rows (4 x 4 transposes, as channels.py's store_row): one
    image, whole vectors of channels (no lane masks), no residual."""
    s, V = c.plan.shape, c.plan.V
    return _channels_first(s.os, s) and c.res is None and s.OC % V == 0 and V % 4 == 0


def tile_heights(pixels: int, P: int) -> tuple[int, ...] | None:
    """The pixel tile heights the kernel takes: (P,) when the last tile, ending at the last pixel, recomputes at most
    OVERLAP_SHARE of them; else the ceil(pixels / P) tiles split evenly, (hi, lo) pixels each (sharing code with the
    layers of the same pixel count), when lo >= P / 2; else None (too few pixels for the register tile)."""
    if pixels >= P and -pixels % P <= OVERLAP_SHARE * pixels:
        return (P,)
    tiles = -(-pixels // P)
    lo, extra = divmod(pixels, tiles)
    if 2 * lo < P:
        return None
    return (lo + 1, lo) if extra else (lo,)


def shared_chunks(split, images: int) -> tuple[int, int] | None:
    """(channel chunks, pixel chunks) of walk.py's split for the kernel's SHARED_TILES tiles: the images' pixels are
    one run here, so the split's pixel chunks per image times the images, the product at most SHARED_TILES (the
    split may ask for more: chunk_count goes up to twice its target for equal chunks); None: one thread runs it all
    (no split, or a single chunk)."""
    if split is None:
        return None
    channels = min(split[2], SHARED_TILES)
    pixels = max(1, min(split[3] * images, SHARED_TILES // channels))
    return (channels, pixels) if channels * pixels > 1 else None


def _packed_weights(p: ConvPlan, w: np.ndarray) -> np.ndarray:
    s = p.shape
    return pack_weights(p, w.reshape(s.OC, s.Cig, 1, 1))


def _bias(bias: np.ndarray) -> np.ndarray:
    return np.asarray(bias, np.float32).reshape(-1)


class SharedPointwise:
    """One shared pointwise kernel emission: reads the ConvKernel, its ConvPlan and the run-time fields."""

    def __init__(self, c: ConvKernel):
        self.c, self.k, self.p = c, c.k, c.plan
        s, bl = self.p.shape, self.p.blocking
        self.R, self.P, self.V, self.RP = bl.R, bl.P, self.p.V, self.p.RP
        self.NV = -(-self.R // self.V)
        self.vt = ir.VectorType(llvm_type(self.p.dtype), self.V)
        pixels = s.N * s.W
        full, rest = divmod(s.OC, self.R)
        self.has_rest, self.masked = rest > 0, s.OC % self.V > 0
        self.x_rows = not _channels_last(s.xs, s)
        """Channels-first input: a pixel tile's values of one channel at constant offsets from one pointer."""
        self.out_rows = not _channels_last(s.os, s)
        """Channels-first output: each vector's pixels transposed into rows of channels (store_rows)."""
        self.steps = 4 if arch_of(self.k.spec.triple).aarch64 and self.V == 4 else 1
        """Input channels per step of the inner loop: aarch64 loads 4 channels of each pixel as a vector and takes
        them by lane (`fmla v, v, v.s[l]`); one at a time through a pointer stepped by the run-time stride, LLVM
        broadcasts each with a post-indexed `ld1r`, 28% more cycles per channel than the per-layer kernel's `ldr s`
        at constant offsets by llvm-mca on the Cortex-A72."""
        split = c.split()
        chunks = shared_chunks(split, s.N)
        self.work = split[0] if chunks else 0.0
        chunks = chunks or (1, 1)
        res_step = c.res[0][3] if c.res is not None else 0
        self.heights = tile_heights(pixels, self.P)
        x_step, out_step = (s.xs[1] if self.x_rows else s.xs[3]), (s.os[1] if self.out_rows else s.os[3])
        self.values = np.array((pixels, s.Cig, x_step, out_step, res_step, full, rest, s.Cig * self.RP, *chunks,
                                -(-pixels // self.P)), np.int64)

    def emit(self) -> None:
        k, b, c = self.k, self.k.b, self.c
        c.packed = k.argument_array(derived(k, partial(_packed_weights, self.p), c.w))
        self.bias = None
        if c.bias is not None:
            self.bias = k.argument_array(derived(k, _bias, c.bias))
        self.f = dict(zip(FIELDS, run_time_fields(k, self.values)))
        f = self.f
        blocks = f["full_blocks"]
        if self.has_rest:
            blocks = b.add(blocks, k.index(1))
        self.last_at = b.sub(f["pixels"], k.index(self.P))
        self.extra = b.urem(f["pixels"], f["tiles"])
        with k.parallel_tiles([SHARED_TILES], self.work) as (t,):
            active, chunk = k.spread(t, b.mul(f["channel_chunks"], f["pixel_chunks"]), SHARED_TILES)
            cc, uu = b.udiv(chunk, f["pixel_chunks"]), b.urem(chunk, f["pixel_chunks"])
            with b.if_then(active):
                cb_lo, cb_hi = k.chunk(cc, f["channel_chunks"], blocks)
                px_lo, px_hi = k.chunk(uu, f["pixel_chunks"], f["tiles"])
                if self.p.blocks_outer:
                    with loop(k, cb_hi, cb_lo) as cb:
                        with loop(k, px_hi, px_lo) as tile:
                            self._heights(tile, lambda at, count, cb=cb: self._block(cb, at, count))
                else:
                    with loop(k, px_hi, px_lo) as tile:
                        def blocks_at(at, count):
                            with loop(k, cb_hi, cb_lo) as cb:
                                self._block(cb, at, count)
                        self._heights(tile, blocks_at)

    def _heights(self, tile, emit) -> None:
        """emit(first pixel, height) of pixel tile `tile`: at P-pixel steps, the last tile ending at the last pixel;
        or, for an even split, the first `extra` tiles one pixel higher than the others."""
        k, b = self.k, self.k.b
        if len(self.heights) == 1 and self.heights[0] == self.P:
            at = b.mul(tile, k.index(self.P))
            emit(b.select(b.icmp_unsigned("<", at, self.last_at), at, self.last_at), self.P)
            return
        lo = self.heights[-1]
        at = b.add(b.mul(tile, k.index(lo)), b.select(b.icmp_unsigned("<", tile, self.extra), tile, self.extra))
        if len(self.heights) == 1:
            emit(at, lo)
            return
        with b.if_else(b.icmp_unsigned("<", tile, self.extra)) as (high, low):
            with high:
                emit(at, lo + 1)
            with low:
                emit(at, lo)

    def _block(self, cb, at, count: int) -> None:
        """Channel block cb at pixels [at, at + count): NV whole vectors, or the rest one vector at a time."""
        k, b, f = self.k, self.k.b, self.f
        if not self.has_rest:
            self._tile(cb, [k.index(v) for v in range(self.NV)], at, count)
            return
        with b.if_else(b.icmp_unsigned("<", cb, f["full_blocks"])) as (whole, rest):
            with whole:
                self._tile(cb, [k.index(v) for v in range(self.NV)], at, count)
            with rest:
                vectors = b.udiv(b.add(f["rest"], k.index(self.V - 1)), k.index(self.V))
                with loop(k, vectors) as v:
                    valid = b.sub(f["rest"], b.mul(v, k.index(self.V))) if self.masked else None
                    self._tile(cb, [v], at, count, valid)

    def _weight_base(self, cb, v):
        """Offset of vector v of channel block cb in the packed weights [block][Cin][RP] (channels.py
        weight_bases)."""
        k, b, R, RP, V = self.k, self.k.b, self.R, self.RP, self.V
        block = self.f["block"]
        if R >= RP:
            first = b.mul(v, k.index(V))
            inner = b.add(b.mul(b.udiv(first, k.index(RP)), block), b.urem(first, k.index(RP)))
            return b.add(inner, b.mul(cb, b.mul(k.index(R // RP), block)))
        ratio = RP // R
        return b.add(b.add(b.mul(v, k.index(V)), b.mul(b.udiv(cb, k.index(ratio)), block)),
                     b.mul(b.urem(cb, k.index(ratio)), k.index(R)))

    def _tile(self, cb, vectors: list, at, count: int, valid=None) -> None:
        """Pixels [at, at + count) x the given vectors of block cb: accumulate over the input channels (a loop whose
        accumulators are phis), then the epilogue and the stores (the vectors' lanes below `valid` only, when
        given)."""
        k, b, c, f, V = self.k, self.k.b, self.c, self.f, self.V
        channel = [b.add(b.mul(cb, k.index(self.R)), b.mul(v, k.index(V))) for v in vectors]
        mask = None
        if valid is not None:
            mask = lanes_below(k, valid, V)
        zero = ir.Constant(self.vt, [0.0] * V)
        inits = [zero if self.bias is None else load_lanes(k, self.bias, ch, V, 1, False) if mask is None
                 else masked_load(k, self.bias, ch, mask, 0.0) for ch in channel]
        pixels = [b.add(at, k.index(i)) for i in range(count)]
        if self.x_rows:
            first = b.gep(c.xp, [at], inbounds=True)
            rows = [lambda ci, i=i, first=first: b.gep(b.gep(first, [b.mul(ci, f["x_step"])], inbounds=True),
                                                        [k.index(i)], inbounds=True) for i in range(count)]
        else:
            rows = [b.gep(c.xp, [b.mul(q, f["x_step"])], inbounds=True) for q in pixels]
        wrows = [b.gep(c.packed, [self._weight_base(cb, v)], inbounds=True) for v in vectors]
        sums = [[init] * count for init in inits]
        start = k.index(0)
        if self.steps > 1:  # whole vectors of input channels, each lane a step, then the channels left one by one
            rows = [c.opaque(row) for row in rows]
            start = b.and_(f["ci"], k.index(-self.steps))
            sums = self._accumulate(sums, k.index(0), start, self.steps, partial(self._vector_steps, rows, wrows))
        sums = self._accumulate(sums, start, f["ci"], 1, partial(self._step, rows, wrows))
        if self.out_rows:
            for j, ch in enumerate(channel):
                self._store_rows(at, ch, [epilogue(k, self.p.epilogue, value, None) for value in sums[j]])
            return
        for j, ch in enumerate(channel):
            for i, q in enumerate(pixels):
                self._store(q, ch, sums[j][i], mask)

    def _accumulate(self, inits: list, lo, hi, step: int, body) -> list:
        """The accumulators after body(ci, accumulators) -> accumulators for ci = lo, lo + step, ... < hi (a loop
        whose accumulators are phis; none when lo >= hi)."""
        k, b = self.k, self.k.b
        before, loop_block, done = b.block, k.fn.append_basic_block("ci"), k.fn.append_basic_block("ci.done")
        b.cbranch(b.icmp_unsigned("<", lo, hi), loop_block, done)
        b.position_at_end(loop_block)
        ci = b.phi(k.idx_t)
        accs = [[b.phi(self.vt) for _ in row] for row in inits]
        sums = body(ci, accs)
        following = b.add(ci, k.index(step))
        end = b.block
        ci.add_incoming(lo, before)
        ci.add_incoming(following, end)
        for row, init_row, sum_row in zip(accs, inits, sums):
            for acc, init, new in zip(row, init_row, sum_row):
                acc.add_incoming(init, before)
                acc.add_incoming(new, end)
        keep_rolled(k, b.cbranch(b.icmp_unsigned("<", following, hi), loop_block, done))
        b.position_at_end(done)
        outs = []
        for init_row, sum_row in zip(inits, sums):
            outs.append([])
            for init, new in zip(init_row, sum_row):
                phi = b.phi(self.vt)
                phi.add_incoming(init, before)
                phi.add_incoming(new, end)
                outs[-1].append(phi)
        return outs

    def _weights(self, wrows: list, ci) -> list:
        return [load_lanes(self.k, w, self.k.b.mul(ci, self.k.index(self.RP)), self.V, 1, False) for w in wrows]

    def _step(self, rows: list, wrows: list, ci, accs: list) -> list:
        """One input channel: each pixel's value broadcast into the multiply-adds of every vector."""
        k, b, dt = self.k, self.k.b, self.p.dtype
        wv = self._weights(wrows, ci)
        sums = [list(row) for row in accs]
        for i, row in enumerate(rows):
            xv = k.splat(b.load(row(ci) if self.x_rows else b.gep(row, [ci], inbounds=True)), self.V)
            for j, w in enumerate(wv):
                sums[j][i] = mac(k, dt, sums[j][i], xv, w)
        return sums

    def _vector_steps(self, rows: list, wrows: list, ci, accs: list) -> list:
        """`steps` input channels from one vector load per pixel, each lane broadcast in its turn (aarch64's
        multiply-add by lane), in channel order as _step takes them."""
        k, b, dt, n = self.k, self.k.b, self.p.dtype, self.steps
        sums = [list(row) for row in accs]
        xq = [load_lanes(k, row, ci, n, 1, False) for row in rows]
        for lane in range(n):
            wv = self._weights(wrows, b.add(ci, k.index(lane)))
            pick = ir.Constant(ir.VectorType(ir.IntType(32), self.V), [lane] * self.V)
            for i, x in enumerate(xq):
                xv = b.shuffle_vector(x, ir.Constant(x.type, ir.Undefined), pick)
                for j, w in enumerate(wv):
                    sums[j][i] = mac(k, dt, sums[j][i], xv, w)
        return sums

    def _store_rows(self, at, channel, values: list) -> None:
        """One vector's pixels [at, at + len(values)) into a channels-first output: transposed in registers
        (winograd.row_pieces: pieces of 4 and 2 pixels) and stored as one vector per channel and piece; an odd last
        pixel lane by lane."""
        k, b, c, V = self.k, self.k.b, self.c, self.V
        even = len(values) - len(values) % 2
        lanes_at = [b.gep(c.op, [b.add(b.mul(b.add(channel, k.index(lane)), self.f["out_step"]), at)], inbounds=True)
                    for lane in range(V)]
        for j, pieces in row_pieces(k, V, values[:even]):
            for lane, piece in enumerate(pieces):
                store_lanes(k, lanes_at[lane], k.index(j), piece, piece.type.count, 1)
        if even < len(values):
            for lane in range(V):
                b.store(b.extract_element(values[-1], ir.Constant(ir.IntType(32), lane)),
                        b.gep(lanes_at[lane], [k.index(even)], inbounds=True))

    def _store(self, pixel, channel, value, mask) -> None:
        k, b, c, f, V = self.k, self.k.b, self.c, self.f, self.V
        residual = None
        if c.res is not None:
            at, rp = b.add(b.mul(pixel, f["res_step"]), channel), c.res[1]
            residual = ((lambda: load_lanes(k, rp, at, V, 1, False)) if mask is None
                        else (lambda: masked_load(k, rp, at, mask, 0.0)))
        value = epilogue(k, self.p.epilogue, value, residual)
        out = b.add(b.mul(pixel, f["out_step"]), channel)
        if mask is None:
            store_lanes(k, c.op, out, value, V, 1)
        else:
            masked_store(k, value, c.op, out, mask)
