"""Conv and ConvTranspose.

1D and 2D float Conv use direct kernels (1D is 2D with one row); weights are repacked at build time
into [group][channel block][Cin/group][kh][kw][R] so one block's taps are contiguous (channel vectors: blocks of
RP channels, the same for every code variant of a build, read as sub-blocks or one block per vector). Two register
blockings, both accumulating in registers over every input channel and tap:

- channel vectors (constant weights, at least one vector of output channels): R = 1-2 vectors of
  output channels x P pixels; each input value is broadcast once and feeds R multiply-adds. Used for
  every non-depthwise conv except 1x1 stride-1 convs over wide images. On x86 each tap broadcasts its own
  input values (16 ymm: shared across taps they spill); border columns share a block with interior ones.
- row vectors: R (<= 4; 6 x 2 vectors for flat 1x1 convs on x86) output channels x U vectors along the output row (strided rows read with one
  load + shuffle); each input vector feeds R multiply-adds. Used for depthwise convs (R = 1, U = 4),
  runtime weights, and 1x1 stride-1 convs, which run as a matmul over the flattened image with pixel
  tiles outermost so a tile of input stays in cache across the channel blocks.

- depthwise channels-last (constant weights, input and output storing channels innermost, at least
  one vector of channels, as --opt fluid's NHWC layout gives): vectors over channels x P = 8 pixels
  (aarch64: 2 adjacent vectors x 6 pixels, one st1 of both per pixel), weights repacked to [kh][kw][G
  rounded up to vectors]; the last G % V channels run one by one. (Row vectors would gather along a
  strided row; channel vectors also replace them for flat 1x1 convs whose pixels are strided.)

ARM forms (docs/ARM_KERNELS.md; TargetForms and ConvBlocking in kernels/conv_geometry.py, which fluid/costs.py reads too):
float32 multiply-adds are llvm.fma on armv7 (vfma.f32); armv7 depthwise rows take each tap as a lane of the channel's weight
vectors (vmla.f32 q, q, d[x]); armv7 channels-last depthwise blocks finish one kernel row before the
next one's loads; aarch64 row vectors at stride 1 run a row's first and last vector with zeros
shifted in for the padding, and depthwise rows run in pairs sharing their input rows, taps as lanes
of weight vectors, accumulators starting from a loaded bias vector, the shifted edge vectors of the input
rows two pairs share carried from one to the next, each row's vectors stored by one st1.

Loop order: k.loop_order from the optimizer ("co>px" channel blocks outermost, "px>co"
pixel rows / tiles outermost, chosen under the operands' layouts by fluid/costs.py), else channel
blocks outermost unless re-reading all weights once per output row (pixel tile when flat) moves
fewer bytes than re-reading the input once per channel block. Flat 1x1 convs use
channel vectors below FLAT_ROW_MIN_PIXELS pixels; unpadded 1x1 convs with tiny outputs (e.g. 7x7
after a stride-2 1x1) tile pixels across row ends so narrow rows leave no ragged tiles. Flat 1x1 channel-vector
convs over small NCHW images (TargetForms.packs_input: ResNet's 14x14 and 7x7 stages) first pack their input on
the stack into [pixel block][channel][the block's pixels], so each block's broadcasts read one contiguous run
instead of a few bytes of every channel plane; an input over the stack budget is packed in groups of pixel
blocks, each group a parallel tile that packs its own pixels.

Fused epilogue (passes/conv_epilogue.py, node.attrs["_epilogue"]): every store path (both
blockings, vector and scalar, and the generic nest) adds the residual input (input 3, read through
its own strides) and applies Relu / Clip / LeakyRelu to the accumulators before they are stored.

Padding never reaches the hot loop: output rows and columns whose windows lie inside the input are
found at build time and run with constant, unrolled tap ranges; border rows and columns take their
tap ranges from build-time constants or tables. Other ranks and ConvTranspose use a generic nest with
per-position tap ranges from build-time tables.

Here: Conv2D's construction (the blocking choice), interior/border ranges, rows, the parallel split and emit,
and lower_conv. Conv2D's blocks are mixins: conv_rows.py (row vectors), conv_channels.py (channel vectors),
conv_depthwise.py (channels-last depthwise); conv_generic.py (other ranks, integers), conv_transpose.py.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from ..kernels.conv_geometry import CONV_ORDERS, ConvBlocking, TargetForms, begin_pads, tap_range, tap_tables
from ..kernels.kernel import PARALLEL_MIN_WORK, chunk_count
from ..kernels.loops import element, loop, offset
from ..kernels.scalar import is_float
from .conv_channels import ChannelVectors
from .conv_depthwise import ChannelsLastDepthwise
from .conv_generic import conv_generic
from .conv_padding import store_padding_nan
from .conv_rows import RowVectors
from ..opspec import register


class Conv2D(RowVectors, ChannelVectors, ChannelsLastDepthwise):
    """Emits out = conv(x, w) + bias for (N, C, H, W) views given as (shape, strides, ptr)."""

    def __init__(self, k, dtype, x, w, bias, out, strides, dils, pads, groups, flat: bool, epi=None, res=None, order=None):
        self.k, self.dtype = k, dtype
        self.order = order  # one of CONV_ORDERS from the optimizer (fluid/costs.py), else the blocking's default_order
        self.epi = epi
        self.res = res  # (strides, ptr) of the fused residual input, viewed like the output
        (self.N, self.C, self.H, self.W), self.xs, self.xp = x
        (self.OC, _, self.KH, self.KW), self.ws, self.w_operand, wvalue = w
        (_, _, self.OH, self.OW), self.os, self.op = out
        self.bias = bias
        (self.sh, self.sw), (self.dh, self.dw), (self.ph, self.pw) = strides, dils, pads
        self.G, self.flat = groups, flat
        self.Cig, self.Cog = self.C // groups, self.OC // groups
        self.V = max(1, k.vector_bits // (np.dtype(self.dtype).itemsize * 8))
        forms = self.forms = TargetForms(str(k.module.triple), k.conv_accumulators)
        b = self.blocking = ConvBlocking.choose(
            forms, N=self.N, C=self.C, H=self.H, W=self.W, OC=self.OC, OH=self.OH, OW=self.OW, KH=self.KH, KW=self.KW, G=groups,
            sh=self.sh, sw=self.sw, dh=self.dh, xs=self.xs, os=self.os, flat=flat, w_const=wvalue is not None,
            finite=wvalue is not None and bool(np.isfinite(wvalue).all()), itemsize=np.dtype(dtype).itemsize, V=self.V,
            unpadded=self.ph == 0 and self.pw == 0 and (self.OH - 1) * self.sh < self.H and (self.OW - 1) * self.sw < self.W)
        self.by_channel, self.depthwise_c = b.kind == "channels", b.kind == "depthwise_c"
        self.R, self.P, self.U, self.dw_vec, self.NB = b.R, b.P, b.U, b.dw_vec, -(-self.Cog // b.R)
        self.by_lane, self.edges, self.row_pairs, self.lane_taps = b.by_lane, b.edges, b.row_pairs, b.lane_taps
        self.packs_input, self.pack_groups = b.packs_input, b.pack_groups
        pack_V = max(1, k.pack_vector_bits // (np.dtype(self.dtype).itemsize * 8))
        self.RP = forms.packed_channels(self.Cog, self.R, self.V, pack_V) if self.by_channel else self.R
        self.NBP = -(-self.Cog // self.RP)  # blocks of RP channels in the packed weights
        # row pairs: accumulators start from a load of the channel's bias splatted in read-only data (a load
        # pipe) instead of a register copy of it (a vector pipe: fmla overwrites its accumulator)
        bvalue = None if bias is None else getattr(bias, "value", None)
        self.bias_rows = np.asarray(bvalue).reshape(-1) if self.row_pairs and bvalue is not None else None
        self.bias_splat = None
        # floats per channel in bias_splat: a vector for each accumulator of a block (2 rows x U + 1 vectors), one float apart
        self.bias_run = self.V + 2 * (self.U + 1) - 1 if self.bias_rows is not None else 0
        # x86 (16 ymm): each tap broadcasts its own input values; merged across the taps of a row (the same
        # column feeds pixel p at tap kw and pixel p + 1 at kw + 1) they stay live beside the 12 accumulators and spill
        self.fresh_broadcasts = self.by_channel and str(k.module.triple).startswith("x86_64")
        self.wvalue, self.packed, self.tables = wvalue, None, None
        self.px_runs = None  # under packs_input: the pixel runs (first column, size, blocks) of the group being emitted
        self.xpack, self.pack_origin, self.pack_width = None, 0, 0  # the packed input (stack), its group's columns
        # wide (load + shuffle) strided row reads need unit element stride and stay inside the row
        self.wide = self.xs[3] == 1 and 1 < self.sw <= 4
        self.margin = self.sw - 1 if self.wide else 0
        self.unroll = self.KH * self.KW <= 49
        # parallel tiles (emit_tiled): run-time [lo, hi) of channel blocks, output rows, or row tiles (flat)
        self.cb_rng = self.row_rng = self.px_rng = None
        # row pair loops carrying edge vectors (RowVectors.carries): (slots, this pair's vectors) while a pair is emitted
        self.carry_rows = self.carries()
        self.carry = None

    # columns / rows whose windows are entirely inside the input
    def interior(self, n_out, stride, dil, pad, taps, size, margin):
        full = [o for o in range(n_out) if tap_range(o, stride, dil, pad, taps, size) == (0, taps)
                and o * stride + (taps - 1) * dil - pad + margin <= size - 1]
        return (full[0], full[-1] + 1) if full else (0, 0)

    def border_taps(self, axis: int, o):
        """Tap range of border row (axis 0) or column (axis 1) o: constant, or from a build-time table."""
        if isinstance(o, int):
            return tap_range(o, *((self.sh, self.dh, self.ph, self.KH, self.H) if axis == 0 else (self.sw, self.dw, self.pw, self.KW, self.W)))
        lo, hi = self.tables[axis]
        return self.k.b.load(element(self.k, lo, o)), self.k.b.load(element(self.k, hi, o))

    def each(self, rng, fn, unroll: bool):
        """fn(t) for t in [lo, hi): unrolled when the bounds are constant and unroll is set."""
        lo, hi = rng
        if isinstance(lo, int) and isinstance(hi, int):
            if unroll or hi - lo <= 1:
                for t in range(lo, hi):
                    fn(t)
                return
            if hi <= lo:
                return
        with loop(self.k, hi, lo) as t:
            fn(t)

    def fence(self):
        """An empty asm statement with side effects: the machine scheduler moves no load or store across it."""
        self.k.b.call(ir.InlineAsm(ir.FunctionType(ir.VoidType(), []), "", "", side_effect=True), [])

    def settle(self, slots):
        """Each accumulator through an empty asm statement with side effects: the multiply-adds before it
        complete first, and the loads after it (the next kernel row's) stay after it."""
        b = self.k.b
        for row in slots:
            for slot in row:
                v = b.load(slot)
                b.store(b.call(ir.InlineAsm(ir.FunctionType(v.type, [v.type]), "", "=w,0", side_effect=True), [v]), slot)

    def opaque(self, ptr):
        """ptr through an empty asm statement: a value LLVM cannot see through, so loads from it stay where they are."""
        return self.k.b.call(ir.InlineAsm(ir.FunctionType(ptr.type, [ptr.type]), "", "=r,0"), [ptr])

    def channel_blocks(self, fn):
        full, rest = divmod(self.Cog, self.R)
        if self.cb_rng is not None:
            k, (lo, hi) = self.k, self.cb_rng
            with loop(k, k.imin(hi, k.index(full)), lo) as cb:
                fn(cb, self.R)
            if rest:
                with k.b.if_then(k.b.icmp_signed(">", hi, k.index(full))):
                    fn(full, rest)
            return
        self.span(0, full, lambda cb: fn(cb, self.R))
        if rest:
            fn(full, rest)

    def when(self, cond):
        """`if cond:` at run time (cond None: always)."""
        from contextlib import nullcontext
        return nullcontext() if cond is None else self.k.b.if_then(cond)

    def px_parts(self, tiles: int):
        """Under px_rng: (first, last, (t0, t1)) = conditions for the fixed blocks before / after the
        tile loop and its range; else (None, None, None)."""
        if self.px_rng is None:
            return None, None, None
        k, (t0, t1) = self.k, self.px_rng
        return (k.b.icmp_signed("==", t0, k.index(0)), k.b.icmp_signed("==", t1, k.index(tiles)), (t0, t1))

    def px_tiles(self) -> int:
        """Interior tiles of the (single, flat) output row: the units px_rng splits (none under packs_input)."""
        if self.packs_input:
            return 0
        if self.by_channel:
            return self.col_plan()[1]
        lo, hi = self.interior(self.OW, self.sw, self.dw, self.pw, self.KW, self.W, self.margin)
        return (max(hi, lo) - lo) // (self.U * self.V)

    def span(self, lo: int, hi: int, fn):
        """fn(i) for i in [lo, hi) at run time (inline when it is a single index)."""
        if hi - lo == 1:
            fn(lo)
        elif hi > lo:
            with loop(self.k, hi, lo) as i:
                fn(i)

    def rows(self, emit_row, emit_pair=None, carry=None):
        """Interior rows with the full constant tap range (emit_pair(oh): rows oh and oh + 1 at once, then
        the odd one; carry(a, count): count pairs from row a in a loop that carries edge vectors); border
        rows with table ranges."""
        lo, hi = self.interior(self.OH, self.sh, self.dh, self.ph, self.KH, self.H, 0)
        hi = max(hi, lo)
        k, full = self.k, (0, self.KH)

        def interior(a, b):
            if emit_pair is None:
                with loop(k, b, a) as oh:
                    emit_row(oh, full)
                return
            pairs = k.b.sdiv(k.b.sub(b, a), k.index(2))
            if carry is not None:
                carry(a, pairs)
            else:
                with loop(k, pairs) as p:
                    emit_pair(k.b.add(a, k.b.mul(p, k.index(2), flags=("nsw",)), flags=("nsw",)))
            with k.b.if_then(k.b.icmp_signed("<", k.b.add(a, k.b.mul(pairs, k.index(2))), b)):
                emit_row(k.b.sub(b, k.index(1)), full)
        if self.row_rng is not None:
            r0, r1 = self.row_rng

            def border(a, b):
                if b - a > 4:  # many border rows: a loop with their tap ranges from the tables
                    with loop(k, k.imin(r1, k.index(b)), k.imax(r0, k.index(a))) as oh:
                        emit_row(oh, self.border_taps(0, oh))
                    return
                for oh in range(a, b):  # a few: each with its constant tap range, when in range
                    inside = k.b.and_(k.b.icmp_signed("<=", r0, k.index(oh)), k.b.icmp_signed(">", r1, k.index(oh)))
                    with k.b.if_then(inside):
                        emit_row(oh, self.border_taps(0, oh))
            border(0, lo)
            if hi > lo:
                stop = k.imin(r1, k.index(hi))
                interior(k.imax(r0, k.index(lo)), stop)
            border(hi, self.OH)
            return
        self.span(0, lo, lambda oh: emit_row(oh, self.border_taps(0, oh)))
        if carry is not None and hi - lo >= 4:
            carry(k.index(lo), (hi - lo) // 2)
            if (hi - lo) % 2:
                emit_row(hi - 1, full)
        elif emit_pair is not None and hi - lo >= 2:
            self.span(0, (hi - lo) // 2, lambda p: emit_pair(offset(k, lo, (p, 2))))
            if (hi - lo) % 2:
                emit_row(hi - 1, full)
        else:
            self.span(lo, hi, lambda oh: emit_row(oh, full))
        self.span(hi, self.OH, lambda oh: emit_row(oh, self.border_taps(0, oh)))

    def blocks_outer(self) -> bool:
        """Channel blocks outermost: the optimizer's order, else the blocking's (ConvBlocking.default_order)."""
        return (self.order if self.order in CONV_ORDERS else self.blocking.default_order) == "co>px"

    def pack(self, value: np.ndarray) -> np.ndarray:
        """[G][block][Cin/G][kh][kw][RP] with the last block zero-filled (RP: the widest code variant's R)."""
        wv = value.reshape(self.G, self.Cog, self.Cig, self.KH, self.KW)
        pad = self.NBP * self.RP - self.Cog
        if pad:
            wv = np.concatenate([wv, np.zeros((self.G, pad, self.Cig, self.KH, self.KW), wv.dtype)], axis=1)
        return np.ascontiguousarray(wv.reshape(self.G, self.NBP, self.RP, self.Cig, self.KH, self.KW).transpose(0, 1, 3, 4, 5, 2))

    def split(self):
        """Parallel split: (chunks of channel blocks, chunks of rows or row tiles, which of the two
        `rows` / `px` the second is), outer loop of the order first, about TARGET_TILES tiles in all."""
        work = float(self.N) * self.OC * self.OH * self.OW * self.Cig * self.KH * self.KW
        if self.k.tile_range is None or work < PARALLEL_MIN_WORK:
            return None
        want = -(-chunk_count(1 << 30, work) // (self.N * self.groups_tiled()))
        if self.depthwise_c:  # rows, then channel vectors when the rows are few
            rc = chunk_count(self.OH, work, want)
            return work, chunk_count(self.dw_units(), work, -(-want // rc)), rc, "rows"
        if self.pointwise_tiles():
            return work, chunk_count(self.NB, work, want), 1, "rows"
        kind, units = ("px", self.px_tiles()) if self.flat else ("rows", self.OH)
        if self.blocks_outer() if self.by_channel else not self.flat:
            cbc = chunk_count(self.NB, work, want)
            return work, cbc, chunk_count(units, work, -(-want // cbc)), kind
        uc = chunk_count(units, work, want)
        return work, chunk_count(self.NB, work, -(-want // uc)), uc, kind

    def groups_tiled(self) -> int:
        """Groups as separate tiles (the channels-last depthwise kernel does every group in one pass)."""
        return 1 if self.depthwise_c else self.G

    def emit_tiled(self, per_image) -> bool:
        split = self.split()
        if split is None or self.N * self.groups_tiled() * split[1] * split[2] < 2:
            return False
        work, cbc, uc, kind = split
        k = self.k
        units = self.OH if kind == "rows" else self.px_tiles()
        with k.parallel_tiles([self.N, self.groups_tiled(), cbc, uc], work) as (n, g, c, u):
            if cbc > 1:
                self.cb_rng = k.chunk(c, cbc, self.dw_units() if self.depthwise_c else self.NB)
            if uc > 1:
                setattr(self, "row_rng" if kind == "rows" else "px_rng", k.chunk(u, uc, units))
            per_image(n, g)
        self.cb_rng = self.row_rng = self.px_rng = None
        return True

    def emit(self):
        k = self.k
        if self.wvalue is not None:
            packed = self.pack_depthwise(self.wvalue) if self.depthwise_c else self.pack(self.wvalue)
            if self.lane_taps:
                packed = np.concatenate([packed.ravel(), np.zeros(self.V, packed.dtype)])
            self.packed = k.constant_array(packed)
        if self.bias_rows is not None:
            self.bias_splat = k.constant_array(np.repeat(self.bias_rows.astype(self.dtype), self.bias_run))
        self.tables = tap_tables(k, (self.OH, self.OW), (self.sh, self.sw), (self.dh, self.dw), (self.ph, self.pw),
                                 (self.KH, self.KW), (self.H, self.W))
        if self.packs_input:
            self.emit_packed()
            return
        if self.depthwise_c:
            def image(n):
                self.rows(lambda oh, khr: self.row_c(oh, khr, lambda ow, pixels: self.channels_dw(
                    lambda c0, lanes, nvec: self.block_dw(n, c0, lanes, nvec, oh, ow, pixels, khr))))
            if self.emit_tiled(lambda n, g: image(n)):
                return
            if self.N == 1:
                image(0)
            else:
                with loop(k, self.N) as n:
                    image(n)
            return

        def per_image(n, g):
            if self.pointwise_tiles():
                spots = [(q // self.OW, q % self.OW) for q in range(self.OH * self.OW)]
                self.channel_blocks(lambda cb, R: [self.block_c(n, g, cb, R, 0, 0, [(0, 1)] * len(spots[i:i + self.P]), (0, 1),
                                                                spots[i:i + self.P]) for i in range(0, len(spots), self.P)])
            elif self.by_channel and self.flat and self.blocks_outer():
                self.channel_blocks(lambda cb, R: self.row_c(0, (0, 1), lambda ow, pixels: self.block_c(
                    n, g, cb, R, 0, ow, pixels, (0, 1))))
            elif self.by_channel and self.flat:
                self.row_c(0, (0, 1), lambda ow, pixels: self.channel_blocks(
                    lambda cb, R: self.block_c(n, g, cb, R, 0, ow, pixels, (0, 1))))
            elif self.by_channel and self.blocks_outer():
                self.channel_blocks(lambda cb, R: self.rows(lambda oh, khr: self.row_c(
                    oh, khr, lambda ow, pixels: self.block_c(n, g, cb, R, oh, ow, pixels, khr))))
            elif self.by_channel:
                self.rows(lambda oh, khr: self.channel_blocks(lambda cb, R: self.row_c(
                    oh, khr, lambda ow, pixels: self.block_c(n, g, cb, R, oh, ow, pixels, khr))))
            elif self.flat:
                self.row(0, (0, 1), lambda ow, nvec, kw: self.channel_blocks(
                    lambda cb, R: self.block(n, g, cb, R, 0, ow, nvec, (0, 1), kw)))
            else:
                pair = (lambda cb, R: lambda oh: self.row(oh, (0, self.KH), lambda ow, nvec, kw: self.block(
                    n, g, cb, R, oh, ow, nvec, (0, self.KH), kw, rows=2))) if self.row_pairs else None
                carry = ((lambda cb, R: lambda a, count: self.carried_pairs(n, g, a, count, pair(cb, R)))
                         if self.carry_rows else lambda cb, R: None)
                self.channel_blocks(lambda cb, R: self.rows(lambda oh, khr: self.row(
                    oh, khr, lambda ow, nvec, kw: self.block(n, g, cb, R, oh, ow, nvec, khr, kw)), pair and pair(cb, R), carry(cb, R)))

        def over(extent, fn):
            if extent == 1:
                fn(0)
            else:
                with loop(k, extent) as i:
                    fn(i)
        if not self.emit_tiled(per_image):
            over(self.N, lambda n: over(self.G, lambda g: per_image(n, g)))


def _as_2d(op):
    """(shape, strides) of a rank-3 (1D conv) operand viewed as rank 4 with a unit row."""
    if op.rank == 4:
        return op.shape, op.strides
    return (*op.shape[:2], 1, op.shape[2]), (*op.strides[:2], 0, op.strides[2])


def conv_params(k, x, w, out):
    sp = x.rank - 2
    k_sp = list(k.attr("kernel_shape") or w.shape[2:])
    strides = list(k.attr("strides") or [1] * sp)
    dils = list(k.attr("dilations") or [1] * sp)
    pads = begin_pads(k, x.shape[2:], k_sp, strides, dils, out.shape[2:])
    return k_sp, strides, dils, pads


@register("Conv", strided=True, layout_anchor=True, image=True, loop_orders="conv", heavy=True, cost_kind="conv")
def lower_conv(k):
    x, w = k.inputs[0], k.inputs[1]
    bias = k.inputs[2] if len(k.inputs) > 2 else None
    epi = k.attr("_epilogue")
    residual = k.inputs[3] if epi and epi.get("residual") and len(k.inputs) > 3 else None
    out = k.outputs[0]
    if out.size == 0:
        return
    groups = int(k.attr("group", 1))
    k_sp, strides, dils, pads = conv_params(k, x, w, out)
    _emit_conv(k, x, w, bias, out, strides, dils, pads, groups, epi, residual)
    store_padding_nan(k, x, w, out, strides, dils, pads)


def _emit_conv(k, x, w, bias, out, strides, dils, pads, groups, epi, residual) -> None:
    if x.rank not in (3, 4) or not is_float(out.dtype):
        conv_generic(k, x, w, bias, out, strides, dils, pads, groups, epi, residual)
        return
    (N, C, H, W), xs = _as_2d(x)
    oshape, os_ = _as_2d(out)
    wshape, ws = _as_2d(w)
    rs = _as_2d(residual)[1] if residual is not None else None
    if x.rank == 3:
        strides, dils, pads = [1, *strides], [1, *dils], [0, *pads]
    if W == 1 and oshape[3] == 1 and wshape[3] == 1 and pads[1] == 0 and H > 1:
        # a 1-D conv written as 2-D with a k x 1 kernel (tf2onnx and others): run it along the row, where
        # the kernel blocks pixels, instead of down a column of one-pixel rows
        (N, C, H, W), xs = (N, C, 1, H), (xs[0], xs[1], 0, xs[2])
        oshape, os_ = (*oshape[:2], 1, oshape[2]), (os_[0], os_[1], 0, os_[2])
        wshape, ws = (*wshape[:2], 1, wshape[2]), (ws[0], ws[1], 0, ws[2])
        rs = None if rs is None else (rs[0], rs[1], 0, rs[2])
        strides, dils, pads = [1, strides[0]], [1, dils[0]], [0, pads[0]]
    flat = (wshape[2:] == (1, 1) and strides == [1, 1] and pads == [0, 0] and oshape[2:] == (H, W)
            and xs[2] == W * xs[3] and os_[2] == W * os_[3] and (rs is None or rs[2] == W * rs[3]))
    if flat:
        (N, C, H, W), xs = (N, C, 1, H * W), (xs[0], xs[1], 0, xs[3])
        oshape, os_ = (oshape[0], oshape[1], 1, H * W), (os_[0], os_[1], 0, os_[3])
        if rs is not None:
            rs = (rs[0], rs[1], 0, rs[3])
    value = None if w.value is None else w.value.reshape(wshape)
    res = None if residual is None else (rs, residual.ptr)
    Conv2D(k, out.dtype, ((N, C, H, W), xs, x.ptr), (wshape, ws, w, value), bias, (oshape, os_, out.ptr),
           strides, dils, pads, groups, flat, epi, res, k.loop_order).emit()
