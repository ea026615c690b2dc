"""ConvPlan: every fact the float 1D/2D Conv kernel (ops/conv/) reads, decided by one function, `plan_conv`, which
the optimizer's cost model (fluid/geometry.py) calls too. Pure: shapes, strides and target forms in, no LLVM.

`conv_shape` views a 1D/2D conv as the 2-D kernel runs it (rank 3 as one row, k x 1 kernels along the row, flat 1x1
convs as one row of H * W pixels); `plan_conv` adds the register blocking (ConvBlocking), the loop order, the
interior (padding-free) ranges, the unroll choices and the epilogue. Extents and loop-versus-unroll choices are
explicit fields so that run-time extents can replace them field by field: a conv whose dims vary at run time
(ir.Tensor.dyn) carries them as `ConvDyn`, is planned at its capacity with no decision over a varying spatial dim
(no edge blocks, input packs or pixel tiles across rows), and its walks take the interior ranges of `ConvSpans`."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from ..dtypes import compute_dtype
from ..symbolic import Dim, SymRange, floordiv, is_static, maximum, minimum
from .conv_geometry import CONV_ORDERS, ConvBlocking, TargetForms, settle
from .epilogue import Epilogue
from .winograd import ORDERS as WINOGRAD_ORDERS, WHOLE_ORDERS, WinogradPlan, eligible as winograd_eligible, plan_winograd

UNROLL_TAPS = 49
"""Kernel windows up to this many taps (7x7) run with their tap rows unrolled."""
UNROLL_KW = 16
"""Kernel rows up to this many taps run their taps unrolled."""
BORDER_LOOP_ROWS = 28
"""Convs with at least this many output rows run their padded rows as one loop (`border_loop`); fewer rows keep a
copy per side with constant taps (A/B on x86_64, single thread: a table-driven tap loop cost 3-5% over 7-20 rows,
50% on 7x7 depthwise row vectors; none from 28 rows on)."""
ZERO_ROW_BYTES = 1 << 18
"""The largest zero input row a channels-last depthwise conv reads for its padded kernel rows (`zero_rows`); a
wider row keeps the border rows' own code."""
EDGE_LOOP_SHARE = 0.5
"""Channels-last depthwise rows whose columns outside the tiles of P (the padded ones and the interior's rest) are
at most this share of the row run those columns as one loop of single pixels (`edge_loop`; A/B on x86_64 v4 and v3,
one thread: 14x14 (6 of 14 columns), 28x28, 56x56 stride 2 and 112x112 rows within 0.7 % of the blocks)."""


@dataclass(frozen=True)
class ConvDyn:
    """The dims of a ConvShape's 2-D view that vary at run time: each a symbolic.Dim (the int where static)."""

    N: Dim
    H: Dim
    W: Dim
    OH: Dim
    OW: Dim
    ranges: Mapping[str, SymRange] = field(compare=False, hash=False, default_factory=dict)

    @property
    def spatial(self) -> bool:
        """Does a row or column count vary (not only the batch)?"""
        return not all(is_static(d) for d in (self.H, self.W, self.OH, self.OW))


@dataclass(frozen=True)
class ConvShape:
    """A float 1D/2D conv as the 2-D kernel sees it: (N, C, H, W) input, (OC, Cin/G, KH, KW) weights, (N, OC, OH,
    OW) output; strides of input, output, weights and residual in elements, each as 4 (rank 3: a 0 row stride)."""

    N: int
    C: int
    H: int
    W: int
    OC: int
    OH: int
    OW: int
    KH: int
    KW: int
    G: int
    sh: int
    sw: int
    dh: int
    dw: int
    ph: int
    pw: int
    xs: tuple[int, ...]
    os: tuple[int, ...]
    ws: tuple[int, ...]
    rs: tuple[int, ...] | None
    """The fused residual input's strides, viewed like the output; None without one."""
    flat: bool
    """A 1x1 stride-1 unpadded conv over rows without gaps, run as one row of H * W pixels."""
    dyn: ConvDyn | None = None
    """The varying dims (N, H, W, OH, OW are then their capacities); None when every dim is static."""

    @property
    def Cig(self) -> int:
        return self.C // self.G

    @property
    def Cog(self) -> int:
        return self.OC // self.G

    @property
    def unpadded(self) -> bool:
        """No begin pads and every output pixel reads an input pixel (end pads may only cut the input short)."""
        return self.ph == 0 and self.pw == 0 and (self.OH - 1) * self.sh < self.H and (self.OW - 1) * self.sw < self.W


def as_2d(shape, strides) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(shape, strides) of a rank-3 (1D conv or pool) operand viewed as rank 4 with a unit row."""
    if len(shape) == 4:
        return tuple(shape), tuple(strides)
    return (*shape[:2], 1, shape[2]), (*strides[:2], 0, strides[2])


def _row(shape, strides) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """A k x 1 view (H rows of one column) as one row of H columns."""
    return (*shape[:2], 1, shape[2]), (strides[0], strides[1], 0, strides[2])


def conv_shape(x: tuple, out: tuple, w: tuple, residual: tuple | None, strides, dils, pads, groups: int,
               kx1_along_row: bool = True, dyn: tuple | None = None) -> ConvShape:
    """x, out, w, residual: (shape, element strides) of rank 3 or 4; strides, dils, pads: per spatial dim (begin pads).
    kx1_along_row: a 1-D conv written as 2-D with a k x 1 kernel runs along the row, where the kernel blocks pixels,
    instead of down a column of one-pixel rows (the kernel does; the cost model still prices the column).
    dyn: (input dims, output dims, ranges) when dims vary at run time (ir.Tensor.dyn, capacities in the shapes); a
    row that varies is never flattened (its capacity stride would put gaps between the actual rows)."""
    (N, C, H, W), xs = as_2d(*x)
    oshape, os_ = as_2d(*out)
    wshape, ws = as_2d(*w)
    rs = as_2d(*residual)[1] if residual is not None else None
    xd = as_2d(dyn[0], [0] * len(dyn[0]))[0] if dyn else (N, C, H, W)
    od = as_2d(dyn[1], [0] * len(dyn[1]))[0] if dyn else oshape
    strides, dils, pads = list(strides), list(dils), list(pads)
    if len(x[0]) == 3:
        strides, dils, pads = [1, *strides], [1, *dils], [0, *pads]
    if kx1_along_row and W == 1 and oshape[3] == 1 and wshape[3] == 1 and pads[1] == 0 and H > 1:
        ((N, C, H, W), xs), (oshape, os_), (wshape, ws) = _row((N, C, H), xs), _row(oshape[:3], os_), _row(wshape[:3], ws)
        xd, od = (*xd[:2], 1, xd[2]), (*od[:2], 1, od[2])
        rs = None if rs is None else (rs[0], rs[1], 0, rs[2])
        strides, dils, pads = [1, strides[0]], [1, dils[0]], [0, pads[0]]
    flat = (wshape[2:] == (1, 1) and strides == [1, 1] and pads == [0, 0] and oshape[2:] == (H, W)
            and xs[2] == W * xs[3] and os_[2] == W * os_[3] and (rs is None or rs[2] == W * rs[3]) and is_static(xd[3]))
    if flat:
        (H, W), xs = (1, H * W), (xs[0], xs[1], 0, xs[3])
        oshape, os_ = (oshape[0], oshape[1], 1, H * W), (os_[0], os_[1], 0, os_[3])
        xd, od = (*xd[:2], 1, xd[2] * xd[3]), (*od[:2], 1, od[2] * od[3])
        if rs is not None:
            rs = (rs[0], rs[1], 0, rs[3])
    varying = None
    if dyn and not all(is_static(d) for d in (*xd, *od)):
        varying = ConvDyn(xd[0], xd[2], xd[3], od[2], od[3], dict(dyn[2]))
    return ConvShape(N, C, H, W, oshape[1], oshape[2], oshape[3], wshape[2], wshape[3], groups, strides[0], strides[1],
                     dils[0], dils[1], pads[0], pads[1], tuple(xs), tuple(os_), tuple(ws), rs, flat, varying)


def inside(n_out: int, stride: int, dil: int, pad: int, taps: int, size: int, margin: int) -> tuple[int, int]:
    """[lo, hi) of the output positions whose windows lie entirely inside the input (margin: extra elements a wide
    strided load reads past the last tap); (0, 0) when none does."""
    lo = max(0, -(-pad // stride))
    hi = min(n_out, (size - 1 - (taps - 1) * dil + pad - max(0, margin)) // stride + 1)
    return (lo, hi) if lo < hi else (0, 0)


def tap_span(o: int, stride: int, dil: int, pad: int, taps: int, size: Dim,
             ranges: Mapping[str, SymRange]) -> tuple[int, Dim]:
    """tap_range of position o over an input of `size` (a symbolic.Dim): the first tap is fixed by the begin pad,
    the end (an int when no size of the range cuts the window) follows the actual size."""
    base = o * stride - pad
    lo = max(0, -(base // dil))
    hi = minimum(taps, floordiv(size - 1 - base, dil) + 1)
    return lo, settle(maximum(hi, lo), ranges)


def padding_free(n_out: Dim, stride: int, dil: int, pad: int, taps: int, size: Dim, margin: int,
                 ranges: Mapping[str, SymRange]) -> tuple[int, Dim]:
    """`inside` over run-time sizes: [lo, hi) with lo the first position clear of the begin pad (an int) and hi the
    end of the positions whose windows (and `margin`) lie inside the actual input, at least lo."""
    lo = -(-pad // stride)
    hi = minimum(n_out, floordiv(size - 1 - margin - (taps - 1) * dil + pad, stride) + 1)
    return lo, settle(maximum(hi, lo), ranges)


@dataclass(frozen=True)
class ConvSpans:
    """The run-time geometry a conv's walks read when its dims vary (ConvDyn), each a symbolic.Dim."""

    N: Dim
    H: Dim
    W: Dim
    OH: Dim
    OW: Dim
    rows: tuple[int, Dim]
    """Output rows whose windows lie inside the actual input (padding_free)."""
    cols: tuple[int, Dim]
    """Output columns whose windows and wide loads lie inside the actual row (row vectors)."""
    taps: tuple[int, Dim]
    """Output columns whose windows lie inside the actual row (channel vectors, depthwise)."""
    tiles: Dim
    """Interior tiles of a row: P pixels (channel vectors, depthwise) or U vectors (row vectors) each."""
    ranges: Mapping[str, SymRange] = field(compare=False, hash=False, default_factory=dict)


def conv_spans(s: ConvShape, b: "ConvBlocking", V: int, margin: int, pixels: bool = False) -> ConvSpans | None:
    """The ConvSpans of `s` (None when no dim varies); pixels: tiles of P run over the image's actual pixels across
    row ends (form "pixels ...")."""
    d = s.dyn
    if d is None:
        return None
    r = d.ranges
    rows = padding_free(d.OH, s.sh, s.dh, s.ph, s.KH, d.H, 0, r)
    cols = padding_free(d.OW, s.sw, s.dw, s.pw, s.KW, d.W, margin, r)
    taps = padding_free(d.OW, s.sw, s.dw, s.pw, s.KW, d.W, 0, r)
    lo, hi = (taps if b.P else cols)
    tiles = settle(floordiv(d.OH * d.OW if pixels else hi - lo, b.P if b.P else b.U * V), r)
    return ConvSpans(settle(d.N, r), settle(d.H, r), settle(d.W, r), settle(d.OH, r), settle(d.OW, r), rows, cols, taps,
                     tiles, r)


@dataclass(frozen=True)
class ConvPlan:
    """The float Conv kernel's plan: shape, register blocking and every derived fact its emitters read."""

    shape: ConvShape
    blocking: ConvBlocking
    dtype: str
    """Element type of input, weights and output (numpy name)."""
    V: int
    """Vector lanes of this code variant."""
    RP: int
    """Output channels per block of the packed weights (TargetForms.packed_channels; R for non-channel kinds)."""
    NB: int
    """Channel blocks of R per group."""
    NBP: int
    """Blocks of RP channels per group in the packed weights."""
    blocks_outer: bool
    """Channel blocks outermost (loop order "co>px"): the optimizer's order, else the blocking's default."""
    wide: bool
    """Strided rows read with one wide load + shuffle (unit element stride, stride 2-4)."""
    margin: int
    """Elements a wide load reads past a window's last tap."""
    unroll_taps: bool
    """Tap rows unrolled (KH * KW <= UNROLL_TAPS); else a loop."""
    unroll_kw: bool
    """Taps of a row unrolled (KW <= UNROLL_KW); else a loop."""
    rows_inside: tuple[int, int]
    """Output rows whose windows lie inside the input."""
    cols_inside: tuple[int, int]
    """Output columns whose windows, and wide loads, lie inside the input (row vectors)."""
    taps_inside: tuple[int, int]
    """Output columns whose windows lie inside the input (channel vectors, depthwise)."""
    col_blocks: tuple[int, int]
    """(lo, tiles) of a row of pixel blocks: fixed blocks over [0, lo), `tiles` interior tiles of P from lo."""
    px_tiles: int
    """Interior tiles of a flat row: the units a pixel-tile split divides (none under packs_input)."""
    edge_span: tuple[int, int] | None
    """(V, OW - V) when a row's first and last V columns run as edge blocks (blocking.edges), else None."""
    edge_columns: tuple[int, ...]
    """First columns of the shifted edge vectors of a row of edge blocks (partly outside the input)."""
    carry_rows: bool
    """Row pairs carry the shifted edge vectors of their last KH - 1 input rows to the next pair in registers."""
    bias_run: int
    """Floats per channel in the row pairs' splatted bias table (0: accumulators start from a register)."""
    fresh_broadcasts: bool
    """Channel vectors broadcast each tap's input values afresh (x86's 16 ymm: shared ones spill)."""
    settle_rows: bool
    """Channels-last depthwise float32 blocks finish a kernel row before the next one's loads (armv7)."""
    dw_units: int
    """Channel units of the channels-last depthwise kernel (full units of dw_vec vectors, plus one for the rest)."""
    groups_tiled: int
    """Groups as separate parallel tiles (1: the channels-last depthwise kernel does every group in one pass)."""
    epilogue: Epilogue | None
    form: str
    """The loop nest (a key of ops/conv/conv2d.py WHOLE or PER_IMAGE): "packed", "depthwise_c", "pointwise_tiles",
    "[flat ]channels co>px", "[flat ]channels px>co", "rows flat" or "rows"; over varying rows also "rows px>co"
    and "pixels channels co>px" / "pixels channels px>co" (_pointwise_over_rows)."""
    spans: ConvSpans | None = None
    """Run-time geometry when dims vary (the ranges above are then the capacity's and unused for a varying dim)."""
    border_loop: bool = False
    """The padded rows above and below the interior run as one loop, tap ranges from the tables (`border_loop`)."""
    edge_loop: bool = False
    """Channels-last depthwise: a row's columns outside its tiles run as one loop of single pixels, their tap ranges
    from the tables (`edge_loop`), instead of a block of constant tap ranges per group of them."""
    zero_rows: int = 0
    """Channels-last depthwise: elements of a zero input row that a kernel row outside the input reads instead (so
    every output row runs the interior's code: one copy of it, no border rows' copies); 0: the border rows have
    their own code (`zero_rows`)."""
    winograd: WinogradPlan | None = None
    """Winograd F(m x m, 3 x 3) instead of the direct form (loop orders "wino2", "wino4", "wino6" blocked, "wimg2", "wimg4", "wimg6"
    whole-image: kernels/winograd.py ORDERS)."""
    taps_outer: bool = False
    """Channel vectors: each tap a loop over the input channels, taps outermost (TargetForms.taps_outer); else one
    loop over the input channels with every tap inside."""


def _form(b: ConvBlocking, flat: bool, blocks_outer: bool) -> str:
    if b.packs_input or b.kind == "depthwise_c":
        return "packed" if b.packs_input else b.kind
    if b.kind == "channels":
        if b.pointwise_tiles:
            return "pointwise_tiles"
        return ("flat " if flat else "") + ("channels co>px" if blocks_outer else "channels px>co")
    return "rows flat" if flat else "rows"


def _pointwise_over_rows(s: ConvShape) -> bool:
    """A 1x1 stride-1 unpadded conv whose rows vary (so not flat): planned as if flat (the flat kernel's blocking),
    its row vectors walk each row with pixel tiles outermost, its channel vectors tile the actual pixels across row
    ends (form "pixels ...")."""
    return (s.dyn is not None and s.dyn.spatial and not s.flat and (s.KH, s.KW, s.sh, s.sw, s.ph, s.pw) == (1, 1, 1, 1, 0, 0)
            and (s.OH, s.OW) == (s.H, s.W))


def _col_blocks(s: ConvShape, b: ConvBlocking, forms: TargetForms, V: int, itemsize: int) -> tuple[int, int]:
    lo, hi = inside(s.OW, s.sw, s.dw, s.pw, s.KW, s.W, 0)
    hi = max(hi, lo)
    if b.P == 0 or s.OW <= 4 * b.P or hi - lo < b.P:
        return s.OW, 0
    if b.kind == "channels":
        lo = min(-(-lo // b.P) * b.P, hi)
        tiles = (hi - lo) // b.P
        return lo, tiles - forms.tail_tiles(tiles, s.OW - lo - tiles * b.P, b.P, b.R // V, V * itemsize)
    return lo, (hi - lo) // b.P


def _edges(s: ConvShape, b: ConvBlocking, V: int, cols: tuple[int, int]) -> tuple[tuple[int, int] | None, tuple[int, ...]]:
    lo, hi = cols
    span = None if not b.edges or s.OW < 2 * V or lo > V or hi < s.OW - V else (V, s.OW - V)
    edge = [kw * s.dw - s.pw for kw in range(s.KW)] + [s.OW - V - s.pw + kw * s.dw for kw in range(s.KW)]
    return span, tuple(sorted({c for c in edge if c < 0 or c + V > s.W}))


def border_loop(s: ConvShape, b: ConvBlocking, rows: tuple[int, int]) -> bool:
    """Padded rows on both sides of the interior, at least BORDER_LOOP_ROWS rows, static, each row's taps not lanes
    of constant weight vectors (lane_taps need constant taps): those rows run as one loop (one copy of a row's code
    instead of one per side)."""
    lo, hi = rows[0], max(rows)
    return (lo >= 1 and s.OH - hi >= 1 and s.OH >= BORDER_LOOP_ROWS and not b.lane_taps
            and (s.dyn is None or not s.dyn.spatial))


def zero_rows(s: ConvShape, b: ConvBlocking, rows: tuple[int, int], V: int, itemsize: int, settle_rows: bool) -> int:
    """The elements of the zero row a channels-last depthwise conv with padded rows reads for its kernel rows
    outside the input (static, unrolled taps, not armv7's settled blocks nor lane taps, the row at most
    ZERO_ROW_BYTES), else 0. A padded row then multiplies zeros as explicit padding does: the same sums (a zero
    product added changes no sum but -0's sign, and gives NaN where a weight is infinite, as ONNX's padding does)."""
    if (b.kind != "depthwise_c" or b.lane_taps or settle_rows or s.KH * s.KW > UNROLL_TAPS
            or (s.dyn is not None and s.dyn.spatial) or s.xs[1] != 1 or rows == (0, s.OH)):
        return 0
    elements = (s.W - 1) * s.xs[3] + -(-s.G // V) * V
    return elements if elements * itemsize <= ZERO_ROW_BYTES else 0


def strips_fit(p: ConvPlan, rvv: bool, residual: bool) -> bool:
    """Float32 depthwise 3x3, stride and dilation 1, pads 1, constant weights (edge blocks), no residual, rows of at
    least V columns, on RISC-V with V (fixed geometry): ops/conv/strips.py's column strips, the kernel's choice and fluid/costs.py's."""
    s = p.shape
    return (rvv and p.blocking.edges and p.dtype == "float32" and s.Cig == 1 and s.Cog == 1 and s.KH == 3
            and s.KW == 3 and s.sh == s.sw == s.dh == s.dw == 1 and s.ph == s.pw == 1 and s.OH == s.H and s.OW == s.W
            and s.W >= p.V and s.xs[3] == 1 and s.os[3] == 1 and not residual and s.dyn is None)


def edge_loop(s: ConvShape, b: ConvBlocking) -> tuple[int, int] | None:
    """The col_blocks of a channels-last depthwise row whose columns outside its tiles of P (at least one tile, at
    least two such columns) are at most EDGE_LOOP_SHARE of the row, static, its taps not lanes of constant weight
    vectors: those columns run as one loop (one copy of a pixel's code instead of a block per group of them; the
    tiles stay the unrolled hot body, in a loop however narrow the row). None otherwise."""
    if b.kind != "depthwise_c" or b.lane_taps or b.P == 0 or (s.dyn is not None and s.dyn.spatial):
        return None
    lo, hi = inside(s.OW, s.sw, s.dw, s.pw, s.KW, s.W, 0)
    tiles = max(hi - lo, 0) // b.P
    edges = s.OW - tiles * b.P
    return (lo, tiles) if tiles >= 1 and 2 <= edges <= EDGE_LOOP_SHARE * s.OW else None


def plan_conv(s: ConvShape, forms: TargetForms, *, dtype: str, V: int, pack_V: int | None = None, w_const: bool,
              finite: bool, bias_const: bool = False, order: str | None = None,
              epilogue: Epilogue | None = None) -> ConvPlan:
    """The plan of conv `s` on `forms` at V lanes (pack_V: the widest code variant's lanes, which the packed weights
    follow); finite: every constant weight is finite; bias_const: the bias is a build-time constant; order: the
    optimizer's loop order (CONV_ORDERS; a Winograd order, kernels/winograd.py ORDERS, on an eligible conv sets
    `winograd`), else the blocking's default."""
    itemsize = np.dtype(dtype).itemsize
    pointwise = _pointwise_over_rows(s)
    H, W, OH, OW = (1, s.H * s.W, 1, s.OH * s.OW) if pointwise else (s.H, s.W, s.OH, s.OW)
    b = ConvBlocking.choose(forms, N=s.N, C=s.C, H=H, W=W, OC=s.OC, OH=OH, OW=OW, KH=s.KH, KW=s.KW, G=s.G,
                            sh=s.sh, sw=s.sw, dh=s.dh, xs=s.xs, os=s.os, flat=s.flat or pointwise, w_const=w_const,
                            finite=finite, itemsize=itemsize, V=V, unpadded=s.unpadded,
                            fixed_geometry=s.dyn is None or not s.dyn.spatial)
    channels = b.kind == "channels"
    rp = forms.packed_channels(s.Cog, b.R, V, pack_V or V) if channels else b.R
    wide = s.xs[3] == 1 and 1 < s.sw <= 4
    margin = s.sw - 1 if wide else 0
    cols = inside(s.OW, s.sw, s.dw, s.pw, s.KW, s.W, margin)
    edges = edge_loop(s, b)
    col_blocks = edges or _col_blocks(s, b, forms, V, itemsize)
    span, edge_columns = _edges(s, b, V, cols)
    if b.packs_input or b.kind == "depthwise_c":
        px_tiles = 0
    elif channels:
        px_tiles = col_blocks[1]
    else:
        px_tiles = (max(cols[1], cols[0]) - cols[0]) // (b.U * V)
    unit = b.dw_vec * V
    blocks_outer = (order if order in CONV_ORDERS else b.default_order) == "co>px"
    form = _form(b, s.flat, blocks_outer)
    if pointwise and b.kind == "rows":
        form = "rows px>co"
    elif pointwise and channels:
        form, px_tiles = "pixels " + form, OH * OW // b.P
    rows = inside(s.OH, s.sh, s.dh, s.ph, s.KH, s.H, 0)
    settle_rows = forms.arm32 and compute_dtype(dtype) == np.float32
    wino = None
    if order in WINOGRAD_ORDERS and winograd_eligible(s, dtype, w_const, finite):
        wino = plan_winograd(s, WINOGRAD_ORDERS[order], V, forms.conv_accumulators, order in WHOLE_ORDERS, forms.gemm_tile)
    return ConvPlan(
        s, b, dtype, V, rp, -(-s.Cog // b.R), -(-s.Cog // rp), blocks_outer, wide, margin,
        s.KH * s.KW <= UNROLL_TAPS, s.KW <= UNROLL_KW, rows, cols,
        inside(s.OW, s.sw, s.dw, s.pw, s.KW, s.W, 0), col_blocks, px_tiles, span, edge_columns,
        b.row_pairs and b.lane_taps and s.Cig == 1 and span is not None and 0 < (s.KH - 1) * len(edge_columns) <= 4,
        V + 2 * (b.U + 1) - 1 if b.row_pairs and bias_const else 0,
        channels and forms.x86, settle_rows,
        s.G // unit + (1 if s.G % unit else 0), 1 if b.kind == "depthwise_c" else s.G, epilogue,
        form, conv_spans(s, b, V, margin, form.startswith("pixels")), border_loop(s, b, rows),
        edges is not None, zero_rows(s, b, rows, V, itemsize, settle_rows), wino,
        forms.taps_outer(channels, s.xs, (s.KH, s.KW, s.sh, s.sw, s.dh, s.dw), b.P, s.Cig, V, itemsize)
        and compute_dtype(dtype) == np.float32)


def pack_weights(plan: ConvPlan, value: np.ndarray) -> np.ndarray:
    """The constant weights as the kernel reads them: channels-last depthwise [kh][kw][G rounded up to vectors],
    else [G][block][Cin/G][kh][kw][RP] with the last block zero-filled; lane taps append V spare zeros."""
    s = plan.shape
    if plan.blocking.kind == "depthwise_c":
        gp = -(-s.G // plan.V) * plan.V
        packed = np.zeros((s.KH, s.KW, gp), value.dtype)
        packed[:, :, :s.G] = value.reshape(s.G, s.KH, s.KW).transpose(1, 2, 0)
    else:
        wv = value.reshape(s.G, s.Cog, s.Cig, s.KH, s.KW)
        pad = plan.NBP * plan.RP - s.Cog
        if pad:
            wv = np.concatenate([wv, np.zeros((s.G, pad, s.Cig, s.KH, s.KW), wv.dtype)], axis=1)
        packed = np.ascontiguousarray(wv.reshape(s.G, plan.NBP, plan.RP, s.Cig, s.KH, s.KW).transpose(0, 1, 3, 4, 5, 2))
    if plan.blocking.lane_taps:
        packed = np.concatenate([packed.ravel(), np.zeros(plan.V, packed.dtype)])
    return packed
