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

ARM forms (docs/ARM_KERNELS.md; TargetForms and ConvBlocking in kernels/conv_geometry.py, through plan_conv, which fluid/costs.py calls too):
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

Fused epilogue (passes/epilogues.py, an Epilogue in node.attrs["_epilogue"]): every store path (both
blockings, vector and scalar, and the generic nest) adds the residual input (input 3, read through
its own strides) and applies Relu / Clip / LeakyRelu to the accumulators before they are stored.

Padding never reaches the hot loop: output rows and columns whose windows lie inside the input are
found at build time and run with constant, unrolled tap ranges; border rows and columns take their
tap ranges from build-time constants or tables. The padded rows above and below the interior of a conv of
BORDER_LOOP_ROWS rows or more run as one loop with table tap ranges (ConvPlan.border_loop: one copy of a row's code,
not one per side; below that many rows the copies with constant taps measured faster). A channels-last depthwise
row runs its tiles of P pixels in a loop however narrow the row, and the columns outside them (padded or the
interior's rest, up to EDGE_LOOP_SHARE of the row) as one loop of single pixels, each tap under a guard from the
column tables (ConvPlan.edge_loop: one pixel's code instead of a block per group of columns). Other ranks and ConvTranspose use a generic nest with
per-position tap ranges from build-time tables.

Here: lower_conv, which views the conv as 2-D (kernels/conv_plan.py conv_shape), plans it (plan_conv: every fact the
emitters read) and emits it through the emitter of its form (WHOLE, PER_IMAGE). The emitters take (ConvKernel, ConvPlan) by
composition: rows.py (row vectors), channels.py (channel vectors), depthwise.py (channels-last depthwise); walk.py
holds the ConvKernel and the walks they share; generic.py other ranks and integers, transpose.py ConvTranspose.
"""
from __future__ import annotations

from functools import partial

import numpy as np

from ...errors import InputError
from ...kernels.conv_geometry import TargetForms, auto_pad_mode, begin_pads, same_pads, tap_tables
from ...kernels.conv_plan import ConvPlan, conv_shape, pack_weights, plan_conv
from ...kernels.derived import derived, values_derived
from ...kernels.epilogue import EPILOGUE_ATTR
from ...kernels.loops import loop
from ...kernels.scalar import is_float
from ...kernels.winograd import ORDERS as WINOGRAD_ORDERS, V_INPUT_ATTR
from ...opspec import register
from .channels import ChannelVectors
from .depthwise import ChannelsLastDepthwise
from .depthwise_band import emit_depthwise_band
from .depthwise_rvv import emit_depthwise_rvv
from .generic import conv_generic
from .padding import store_padding_nan
from .im2col import emit_im2col_gemm
from .pointwise import emit_pointwise_gemm
from .rows import RowVectors
from .shared_depthwise import SharedDepthwise, shared_depthwise
from .shared_direct import SharedDirect, shared_direct
from .shared_pointwise import SharedPointwise, shared_pointwise
from .strips import ColumnStrips, column_strips
from .walk import ConvKernel
from .winograd import emit_winograd


def _packed(c: ConvKernel, p: ConvPlan) -> None:
    ChannelVectors(c, p).emit_packed()


def _depthwise(c: ConvKernel, p: ConvPlan) -> None:
    e = ChannelsLastDepthwise(c, p)

    def image(n):
        c.rows(lambda oh, khr: e.row(n, oh, khr))
    if c.emit_tiled(lambda n, g: image(n)):
        return
    if c.N == 1:
        image(0)
    else:
        with loop(c.k, c.N) as n:
            image(n)


def _pointwise_tiles(c: ConvKernel, p: ConvPlan):
    e, s, P = ChannelVectors(c, p), p.shape, p.blocking.P
    spots = [(q // s.OW, q % s.OW) for q in range(s.OH * s.OW)]
    return lambda n, g: c.channel_blocks(lambda cb, R: [e.block_c(n, g, cb, R, 0, 0, [(0, 1)] * len(spots[i:i + P]), (0, 1),
                                                                  spots[i:i + P]) for i in range(0, len(spots), P)])


def _channels_flat_outer(c: ConvKernel, p: ConvPlan):
    e = ChannelVectors(c, p)
    return lambda n, g: c.channel_blocks(lambda cb, R: c.pixel_blocks(0, (0, 1), lambda ow, pixels: e.block_c(
        n, g, cb, R, 0, ow, pixels, (0, 1))))


def _channels_flat_inner(c: ConvKernel, p: ConvPlan):
    e = ChannelVectors(c, p)
    return lambda n, g: c.pixel_blocks(0, (0, 1), lambda ow, pixels: c.channel_blocks(
        lambda cb, R: e.block_c(n, g, cb, R, 0, ow, pixels, (0, 1))))


def _channels_outer(c: ConvKernel, p: ConvPlan):
    e = ChannelVectors(c, p)
    return lambda n, g: c.channel_blocks(lambda cb, R: c.rows(lambda oh, khr: c.pixel_blocks(
        oh, khr, lambda ow, pixels: e.block_c(n, g, cb, R, oh, ow, pixels, khr))))


def _channels_inner(c: ConvKernel, p: ConvPlan):
    e = ChannelVectors(c, p)
    return lambda n, g: c.rows(lambda oh, khr: c.channel_blocks(lambda cb, R: c.pixel_blocks(
        oh, khr, lambda ow, pixels: e.block_c(n, g, cb, R, oh, ow, pixels, khr))))


def _rows_flat(c: ConvKernel, p: ConvPlan):
    e = RowVectors(c, p)
    return lambda n, g: e.row(0, (0, 1), lambda ow, nvec, kw: c.channel_blocks(
        lambda cb, R: e.block(n, g, cb, R, 0, ow, nvec, (0, 1), kw)))


def _rows(c: ConvKernel, p: ConvPlan):
    if column_strips(c, p):
        return lambda n, g: ColumnStrips(c, p, n, g).emit()
    e, KH = RowVectors(c, p), p.shape.KH

    def per_image(n, g):
        pair = (lambda cb, R: lambda oh: e.row(oh, (0, KH), lambda ow, nvec, kw: e.block(
            n, g, cb, R, oh, ow, nvec, (0, KH), kw, rows=2))) if p.blocking.row_pairs else None
        carry = ((lambda cb, R: lambda a, count: e.carried_pairs(n, g, a, count, pair(cb, R)))
                 if p.carry_rows else lambda cb, R: None)
        c.channel_blocks(lambda cb, R: c.rows(lambda oh, khr: e.row(
            oh, khr, lambda ow, nvec, kw: e.block(n, g, cb, R, oh, ow, nvec, khr, kw)), pair and pair(cb, R), carry(cb, R)))
    return per_image


def _rows_pixels_outer(c: ConvKernel, p: ConvPlan):
    e = RowVectors(c, p)
    return lambda n, g: c.rows(lambda oh, khr: e.row(oh, khr, lambda ow, nvec, kw: c.channel_blocks(
        lambda cb, R: e.block(n, g, cb, R, oh, ow, nvec, khr, kw))))


def _pixels(c: ConvKernel, p: ConvPlan):
    e = ChannelVectors(c, p)

    def block(n, g, cb, R, row, col, count):
        c.pixel_block(row, col, count, lambda oh, ow, spots: e.block_c(n, g, cb, R, oh, ow, [(0, 1)] * count, (0, 1), spots))
    if p.blocks_outer:
        return lambda n, g: c.channel_blocks(lambda cb, R: c.pixel_tiles(lambda row, col, count: block(n, g, cb, R, row, col, count)))
    return lambda n, g: c.pixel_tiles(lambda row, col, count: c.channel_blocks(lambda cb, R: block(n, g, cb, R, row, col, count)))


WHOLE = {"packed": _packed, "depthwise_c": _depthwise}
"""Forms that emit the whole conv themselves (their own packing or tiling)."""
PER_IMAGE = {"pointwise_tiles": _pointwise_tiles, "flat channels co>px": _channels_flat_outer,
             "flat channels px>co": _channels_flat_inner, "channels co>px": _channels_outer,
             "channels px>co": _channels_inner, "rows flat": _rows_flat, "rows": _rows, "rows px>co": _rows_pixels_outer,
             "pixels channels co>px": _pixels, "pixels channels px>co": _pixels}
"""Forms as per_image(n, g), run over the images and groups (as parallel tiles when split)."""


def _packed_weights(p, w: np.ndarray) -> np.ndarray:
    s = p.shape
    return pack_weights(p, w.reshape(s.OC, s.Cig, s.KH, s.KW))


def _bias_splat(p, bias: np.ndarray) -> np.ndarray:
    return np.repeat(np.asarray(bias).reshape(-1).astype(p.dtype), p.bias_run)


def emit_conv(c: ConvKernel) -> None:
    """The build-time tables and constants, then the plan's form."""
    k, p, s = c.k, c.plan, c.plan.shape
    if shared_pointwise(c):
        SharedPointwise(c).emit()
        return
    if shared_depthwise(c):
        SharedDepthwise(c).emit()
        return
    if shared_direct(c):
        SharedDirect(c).emit()
        return
    if c.w.value is not None:
        c.packed = k.constant_array(derived(k, partial(_packed_weights, p), c.w))
    if p.bias_run:
        c.bias_splat = k.constant_array(derived(k, partial(_bias_splat, p), c.bias))
    geo = ((s.OH, s.sh, s.dh, s.ph, s.KH, s.H), (s.OW, s.sw, s.dw, s.pw, s.KW, s.W))
    if p.spans is None:
        c.tables = tap_tables(k, *zip(*geo))
    else:  # a varying axis computes its border taps at run time: no table at its capacity
        c.tables = [None if c.varies(a) else tap_tables(k, *((v,) for v in geo[a]))[0] for a in (0, 1)]
    c.start_spans()
    if p.form in WHOLE:
        WHOLE[p.form](c, p)
        return
    per_image = PER_IMAGE[p.form](c, p)

    def over(extent, fn):
        if extent == 1:
            fn(0)
        else:
            with loop(k, extent) as i:
                fn(i)
    if not c.emit_tiled(per_image):
        over(c.N, lambda n: over(s.G, lambda g: per_image(n, g)))


def conv_params(k, x, w, out):
    sp = x.rank - 2
    k_sp = list(k.attr("kernel_shape") or w.shape[2:])
    strides = list(k.attr("strides") or [1] * sp)
    dils = list(k.attr("dilations") or [1] * sp)
    pads = begin_pads(k, x.shape[2:], k_sp, strides, dils, out.shape[2:])
    if k.dynamic:
        same = same_pads(k, (x.dyn or x.shape)[2:], (out.dyn or out.shape)[2:], k_sp, strides, dils, k.graph.symbols)
        pads = same[0] if same else pads
    return k_sp, strides, dils, pads


def varying_dims(k, x, w, out, pads) -> tuple | None:
    """conv_shape's `dyn` for a conv over varying dims (None when static); only the batch and spatial dims may vary,
    and a non-finite constant weight only without padding (its NaN at the padding is placed at build time)."""
    if not k.dynamic:
        return None
    for op, what in ((x, "input"), (out, "output"), (w, "weights")):
        if op.varies(1) or op is w and op.dyn is not None:
            raise InputError(f"node {k.node.name!r} (Conv): its {what} {op.name!r} has channels or weights that vary at "
                             "run time; only the batch and spatial dims may: give that dimension one value")
    padded = any(int(p) for p in (k.attr("pads") or [])) or auto_pad_mode(k) in ("SAME_UPPER", "SAME_LOWER")
    if w.value is not None and padded and not np.isfinite(w.value).all():
        raise InputError(f"node {k.node.name!r} (Conv): NaN/Inf weights meet the zero padding at positions that depend "
                         "on the run-time sizes: give every dimension one value, or replace the NaN/Inf weights")
    return (x.dyn or x.shape, out.dyn or out.shape, k.graph.symbols)


@register("Conv", strided=True, layout_anchor=True, image=True, loop_orders="conv", heavy=True, cost_kind="conv",
          runtime_extents=True)
def lower_conv(k):
    extra = int(k.attr(V_INPUT_ATTR) or 0)  # V, and with copies of V the copy per tile (fluid/winograd_split.py)
    ins, v, held = (k.inputs[:-extra], k.inputs[-extra], k.inputs[-1] if extra == 2 else None) if extra else (k.inputs, None, None)
    x, w = ins[0], ins[1]
    bias = ins[2] if len(ins) > 2 else None
    epi = k.attr(EPILOGUE_ATTR)
    residual = ins[3] if epi and epi.residual and len(ins) > 3 else None
    out = k.outputs[0]
    if out.size == 0:
        return
    groups = int(k.attr("group", 1))
    k_sp, strides, dils, pads = conv_params(k, x, w, out)
    dyn = varying_dims(k, x, w, out, pads)
    if x.rank not in (3, 4) or not is_float(out.dtype):
        conv_generic(k, x, w, bias, out, strides, dils, pads, groups, epi, residual)
    elif not (emit_pointwise_gemm(k, x, w, bias, out, residual, epi, groups, strides, pads)
              or emit_depthwise_band(k, x, w, bias, out, residual, epi, groups, k_sp, strides, dils, pads)
              or emit_depthwise_rvv(k, x, w, bias, out, residual, epi, groups, k_sp, strides, dils, pads)
              or v is None and k.loop_order not in WINOGRAD_ORDERS
              and emit_im2col_gemm(k, x, w, bias, out, residual, epi, groups, k_sp, strides, dils, pads)):
        s = conv_shape((x.shape, x.strides), (out.shape, out.strides), (w.shape, w.strides),
                       None if residual is None else (residual.shape, residual.strides), strides, dils, pads, groups,
                       dyn=dyn)
        itemsize = np.dtype(out.dtype).itemsize
        value = w.value
        finite = value is not None and bool(np.isfinite(value).all())
        forms = TargetForms(str(k.module.triple), k.conv_accumulators, getattr(k.spec, "features", ""),
                            parallel=k.tile_range is not None, cpu=getattr(k.spec, "cpu", ""))
        plan = plan_conv(s, forms, dtype=np.dtype(out.dtype).name,
                         V=max(1, k.vector_bits // (itemsize * 8)), pack_V=max(1, k.pack_vector_bits // (itemsize * 8)),
                         w_const=value is not None, finite=finite,
                         bias_const=bias is not None and getattr(bias, "value", None) is not None, order=k.loop_order,
                         epilogue=epi)
        res = None if residual is None else (s.rs, residual.ptr)
        if (v is not None) != (plan.winograd is not None and plan.winograd.whole):
            raise InputError(f"node {k.node.name!r} (Conv): loop order {k.loop_order!r} does not match its "
                             f"{'transformed input' if v is not None else 'missing WinogradInput'}: rebuild with --no-cache")
        if value is None or finite:  # a non-finite weight's padding NaN mask follows from where it is
            values_derived(k)
        if plan.winograd is not None:
            v_operand = None if v is None else (v.ptr, tuple(v.strides), v.shape[0] // s.N,
                                                None if held is None else held.ptr)
            emit_winograd(k, plan, x.ptr, out.ptr, w, bias, res, epi, v_operand)
        else:
            emit_conv(ConvKernel(k, plan, x.ptr, out.ptr, w, bias, res))
    store_padding_nan(k, x, w, out, strides, dils, pads)
