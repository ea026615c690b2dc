"""Conv and ConvTranspose.

1D and 2D float Conv use direct kernels (1D is 2D with one row); weights are repacked at build time
into [group][channel block][Cin/group][kh][kw][R] so one block's taps are contiguous. Two register
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

ARM forms (docs/ARM_KERNELS.md; TargetForms, which fluid/costs.py reads too): float32 multiply-adds are
llvm.fma on armv7 (vfma.f32); armv7 depthwise rows take each tap as a lane of the channel's weight
vectors (vmla.f32 q, q, d[x]); armv7 channels-last depthwise blocks finish one kernel row before the
next one's loads; aarch64 row vectors at stride 1 run a row's first and last vector with zeros
shifted in for the padding, and depthwise rows run in pairs sharing their input rows, taps as lanes
of weight vectors, accumulators starting from a loaded bias vector.

Loop order: node.attrs["_loop_order"] from the optimizer ("co>px" channel blocks outermost, "px>co"
pixel rows / tiles outermost, chosen under the operands' layouts by fluid/costs.py), else channel
blocks outermost unless re-reading all weights once per output row (pixel tile when flat) moves
fewer bytes than re-reading the input once per channel block. Flat 1x1 convs use
channel vectors below FLAT_ROW_MIN_PIXELS pixels; unpadded 1x1 convs with tiny outputs (e.g. 7x7
after a stride-2 1x1) tile pixels across row ends so narrow rows leave no ragged tiles.

Fused epilogue (passes/conv_epilogue.py, node.attrs["_epilogue"]): every store path (both
blockings, vector and scalar, and the generic nest) adds the residual input (input 3, read through
its own strides) and applies Relu / Clip / LeakyRelu to the accumulators before they are stored.

Padding never reaches the hot loop: output rows and columns whose windows lie inside the input are
found at build time and run with constant, unrolled tap ranges; border rows and columns take their
tap ranges from build-time constants or tables. Other ranks and ConvTranspose use a generic nest with
per-position tap ranges from build-time tables.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
from llvmlite import ir

from ..codegen.kernel import PARALLEL_MIN_WORK, chunk_count
from ..codegen.scalar import FAST, const, is_float, llvm_type
from .registry import register


# -- geometry ----------------------------------------------------------------------------------
def auto_pad_mode(k) -> str:
    mode = k.attr("auto_pad", "NOTSET")
    return mode.decode() if isinstance(mode, bytes) else mode


def begin_pads(k, in_sp, k_sp, strides, dils, out_sp) -> list[int]:
    """Leading pad per spatial dim (the trailing pad is implied by the output shape)."""
    mode, n = auto_pad_mode(k), len(in_sp)
    if mode in ("SAME_UPPER", "SAME_LOWER"):
        pads = []
        for i in range(n):
            total = max(0, (out_sp[i] - 1) * strides[i] + (k_sp[i] - 1) * dils[i] + 1 - in_sp[i])
            pads.append(total // 2 if mode == "SAME_UPPER" else total - total // 2)
        return pads
    if mode == "VALID":
        return [0] * n
    pads = k.attr("pads") or [0] * (2 * n)
    return [int(p) for p in pads[:n]]


def tap_range(o: int, stride: int, dil: int, pad: int, taps: int, size: int) -> tuple[int, int]:
    """Taps t in [lo, hi) with 0 <= o*stride + t*dil - pad < size."""
    base = o * stride - pad
    lo = max(0, -(base // dil))
    hi = min(taps, (size - 1 - base) // dil + 1)
    return lo, max(lo, hi)


def tap_tables(k, outs, strides, dils, pads, taps, sizes):
    """Per spatial dim: constant arrays lo[o], hi[o] of tap ranges (index-typed)."""
    int_t = np.int64 if k.idx_t.width == 64 else np.int32
    tables = []
    for d in range(len(outs)):
        ranges = np.array([tap_range(o, strides[d], dils[d], pads[d], taps[d], sizes[d]) for o in range(outs[d])], dtype=int_t)
        tables.append((k.constant_array(ranges[:, 0].copy()), k.constant_array(ranges[:, 1].copy())))
    return tables


def offset(k, const_part: int, *terms):
    """const_part + sum(value * stride); int values fold into the constant (an int result when all are)."""
    total, acc = const_part, None
    for value, stride in terms:
        if stride == 0:
            continue
        if isinstance(value, int):
            total += value * stride
            continue
        term = value if stride == 1 else k.b.mul(value, k.index(stride), flags=("nsw",))
        acc = term if acc is None else k.b.add(acc, term, flags=("nsw",))
    if acc is None:
        return total
    return acc if total == 0 else k.b.add(acc, k.index(total), flags=("nsw",))


@contextmanager
def loop(k, stop, start=0):
    """k.for_range that LLVM must not unroll: bodies here are unrolled already, more only bloats code."""
    with k.for_range(stop, start) as i:
        yield i
    module = k.module
    flag = module.add_metadata([ir.MetaDataString(module, "llvm.loop.unroll.disable")])
    loop_id = module.add_metadata([flag, ir.MetaDataString(module, f"loop{len(module.metadata)}")])
    loop_id.operands = (loop_id, flag)
    i.incomings[-1][1].terminator.set_metadata("llvm.loop", loop_id)


def element(k, ptr, off):
    return k.b.gep(ptr, [k.index(off) if isinstance(off, int) else off], inbounds=True)


# -- vector helpers ----------------------------------------------------------------------------
def splat(k, value, lanes: int):
    vt = ir.VectorType(value.type, lanes)
    v = k.b.insert_element(ir.Constant(vt, None), value, ir.Constant(ir.IntType(32), 0))
    return k.b.shuffle_vector(v, ir.Constant(vt, None), ir.Constant(ir.VectorType(ir.IntType(32), lanes), [0] * lanes))


def fused_f32(k) -> bool:
    """armv7 with VFPv4 (the module emitter's machine spec): float32 multiply-adds as llvm.fma."""
    spec = getattr(getattr(k.constant_data, "__self__", None), "spec", None)
    return (str(k.module.triple).startswith(("arm", "thumb")) and spec is not None
            and "+vfp4" in str(getattr(spec, "features", "")).split(","))


def fma(k, acc, x, y):
    """acc + x * y for floats, as k.fma; float32 on armv7 with VFPv4 an explicit llvm.fma (vfma.f32):
    LLVM's ARM backend never fuses a NEON fmul + fadd and emits the unfused vmla.f32 (two roundings,
    unlike aarch64's fmla)."""
    elem = x.type.element if isinstance(x.type, ir.VectorType) else x.type
    if elem != ir.FloatType() or not fused_f32(k):
        return k.fma(acc, x, y)
    name = f"llvm.fma.v{x.type.count}f32" if isinstance(x.type, ir.VectorType) else "llvm.fma.f32"
    fn = k.module.globals.get(name) or ir.Function(k.module, ir.FunctionType(x.type, [x.type] * 3), name)
    return k.b.call(fn, [x, y, acc])


def mac(k, dt, acc, x, y):
    """acc + x * y: fma for floats, multiply + add for integers."""
    return fma(k, acc, x, y) if is_float(dt) else k.s.add(dt, acc, k.s.mul(dt, x, y))


def load_lanes(k, ptr, off, lanes: int, step: int, wide: bool):
    """`lanes` elements step apart from ptr[off]; wide: one contiguous load + shuffle (stays in bounds)."""
    b, p = k.b, element(k, ptr, off)
    ft = p.type.pointee
    size = ft.width // 8 if isinstance(ft, ir.IntType) else {"float": 4, "double": 8, "half": 2}[str(ft)]
    if lanes == 1:
        return b.load(p)
    if step == 1 or wide:
        n = lanes * step if step > 1 else lanes
        v = b.load(b.bitcast(p, ir.VectorType(ft, n).as_pointer()), align=size)
        if step == 1:
            return v
        mask = ir.Constant(ir.VectorType(ir.IntType(32), lanes), [i * step for i in range(lanes)])
        return b.shuffle_vector(v, v, mask)
    v = ir.Constant(ir.VectorType(ft, lanes), None)
    for i in range(lanes):
        x = b.load(element(k, ptr, offset(k, i * step, (off, 1))))
        v = b.insert_element(v, x, ir.Constant(ir.IntType(32), i))
    return v


def store_lanes(k, ptr, off, value, lanes: int, step: int):
    b, p = k.b, element(k, ptr, off)
    if lanes == 1:
        b.store(value, p)
    elif step == 1:
        ft = p.type.pointee
        size = {"float": 4, "double": 8, "half": 2}[str(ft)]
        b.store(value, b.bitcast(p, ir.VectorType(ft, lanes).as_pointer()), align=size)
    else:
        for i in range(lanes):
            b.store(b.extract_element(value, ir.Constant(ir.IntType(32), i)), element(k, ptr, offset(k, i * step, (off, 1))))


# -- fused epilogue (passes/conv_epilogue.py) -----------------------------------------------------
def _fill(ty, value: float):
    """A float constant of type ty (scalar or vector), every lane `value`."""
    if isinstance(ty, ir.VectorType):
        return ir.Constant(ty, [ir.Constant(ty.element, value)] * ty.count)
    return ir.Constant(ty, value)


def activate(k, epi, value):
    """The epilogue's activation applied to a float scalar or vector (NaN passes through)."""
    act = epi.get("activation") if epi else None
    b = k.b
    if act == "relu":
        zero = _fill(value.type, 0.0)
        return b.select(b.fcmp_ordered("<", value, zero), zero, value)
    if act == "leaky_relu":
        zero = _fill(value.type, 0.0)
        scaled = b.fmul(value, _fill(value.type, float(epi.get("alpha", 0.01))))
        return b.select(b.fcmp_ordered("<", value, zero), scaled, value)
    if act == "clip":
        # ARM float32: llvm.maximum/minimum are one NaN-propagating fmax/fmin (vmax/vmin) each, where the
        # compare + select pair is two; x86 has no NaN-propagating max, so it keeps the select (so do
        # other float types: double trips an LLVM assertion legalizing llvm.maximum for armv7)
        elem = value.type.element if isinstance(value.type, ir.VectorType) else value.type
        arm = isinstance(elem, ir.FloatType) and str(getattr(k.module, "triple", "")).startswith(("aarch64", "arm"))
        if epi.get("min") is not None:
            lo = _fill(value.type, float(epi["min"]))
            value = (_intrinsic(k, "llvm.maximum", value, lo) if arm
                     else b.select(b.fcmp_ordered("<", value, lo), lo, value))
        if epi.get("max") is not None:
            hi = _fill(value.type, float(epi["max"]))
            value = (_intrinsic(k, "llvm.minimum", value, hi) if arm
                     else b.select(b.fcmp_ordered(">", value, hi), hi, value))
    return value


def _intrinsic(k, name: str, x, y):
    """llvm.maximum / llvm.minimum of two floats or float vectors (.f32, .v4f32 ...)."""
    ty = x.type
    suffix = f"v{ty.count}{ty.element.intrinsic_name}" if isinstance(ty, ir.VectorType) else ty.intrinsic_name
    full = f"{name}.{suffix}"
    fn = k.module.globals.get(full) or ir.Function(k.module, ir.FunctionType(ty, [ty, ty]), full)
    return k.b.call(fn, [x, y])


def epilogue(k, epi, value, residual=None):
    """value (+ residual) then the activation; residual() loads the matching residual value."""
    if residual is not None:
        value = k.b.fadd(value, residual())
    return activate(k, epi, value)


# -- target forms (shared with the optimizer's cost model) ---------------------------------------
DW_PIXELS = 8
"""Most pixels per channels-last depthwise block (one accumulator per channel vector each)."""


@dataclass(frozen=True)
class TargetForms:
    """The target-dependent tiles and instruction forms of Conv2D's row-vector and channels-last depthwise
    kernels, from the triple and the register budget. fluid/costs.py reads the same answers, so the
    optimizer's estimate follows the kernel (docs/ARM_KERNELS.md)."""

    triple: str
    conv_accumulators: int = 12

    @property
    def aarch64(self) -> bool:
        return self.triple.startswith("aarch64")

    @property
    def arm32(self) -> bool:
        return self.triple.startswith(("arm", "thumb"))

    def dw_vectors(self) -> int:
        """Channel vectors per channels-last depthwise block: two on aarch64 (their loads and stores pair)."""
        return 2 if self.aarch64 else 1

    def dw_pixels(self) -> int:
        return min(DW_PIXELS, self.conv_accumulators // self.dw_vectors())

    def by_lane(self, f32: bool, V: int, Cog: int, taps: int) -> bool:
        """armv7 depthwise rows: each tap a lane of the channel's weight vectors (vmla.f32 q, q, d[x]), where
        9 splatted weights, the bias, two clip bounds and the accumulators overflow its 16 q registers."""
        return self.arm32 and f32 and V == 4 and Cog == 1 and taps <= 4 * V

    def edges(self, V: int, sw: int, rows_unit: bool, W: int) -> bool:
        """aarch64 row vectors at stride 1 (constant finite weights, not flat): the first and last vector of a
        row are vector blocks whose taps read zeros for the columns outside the input (one ext), not pixels."""
        return self.aarch64 and V > 1 and sw == 1 and rows_unit and W >= V

    @staticmethod
    def row_pairs(edges: bool, Cog: int, sh: int, dh: int, KH: int, KW: int) -> bool:
        """aarch64 depthwise edge-block rows: pairs of output rows share their input rows' loads and edge shifts."""
        return edges and Cog == 1 and sh == 1 and dh == 1 and KH * KW <= 49

    def row_channels(self, Cog: int, flat_packed: bool) -> int:
        """R, output channels per row-vector block: up to 4; x86 flat 1x1 convs with constant weights run the
        GEMM tile of 16 ymm (MLAS's 6 x 16): half the accumulator budget in channels x 2 vectors of pixels."""
        if flat_packed and self.triple.startswith("x86_64"):
            return min(max(1, self.conv_accumulators // 2), Cog)
        return min(4, Cog)

    def row_vectors(self, R: int, pairs: bool, flat_packed: bool = False) -> int:
        """U, vectors along the row per row-vector block (per row of a pair: a quarter of the budget, 3 of 3-6
        measured best by benchmarks/mca.py on the A76; 2 for the x86 flat tile of row_channels)."""
        if flat_packed and self.triple.startswith("x86_64"):
            return 2
        if pairs:
            return max(1, self.conv_accumulators // 4)
        return min(4 if R <= 2 else 2, max(1, self.conv_accumulators // 2))

    @staticmethod
    def lane_taps(by_lane: bool, pairs: bool, f32: bool, V: int, taps: int) -> bool:
        """The taps as lanes of weight vectors (by-element multiply-adds): armv7 by-lane rows, and aarch64 row
        pairs (fmla v, v, w.s[x]: 3 registers for 9 taps, not 9)."""
        return by_lane or (pairs and f32 and V == 4 and taps <= 4 * V)


# -- direct 2D kernel --------------------------------------------------------------------------
class Conv2D:
    """Emits out = conv(x, w) + bias for (N, C, H, W) views given as (shape, strides, ptr)."""

    # flat 1x1 convs run row vectors (pixel vectors) from this many pixels on, channel vectors below
    # (measured on AVX2: channel vectors win at 14x14 for every Cin, row vectors from 28x28)
    FLAT_ROW_MIN_PIXELS = 512

    def __init__(self, k, dtype, x, w, bias, out, strides, dils, pads, groups, flat: bool, epi=None, res=None, order=None):
        self.k, self.dtype = k, dtype
        self.order = order  # "co>px" | "px>co" from the optimizer (fluid/costs.py CONV_ORDERS), else blocks_outer()
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
        # channel vectors (R = 1-2 vectors of output channels x P pixels) need packed weights and
        # enough channels; they suit narrow rows. Otherwise vectors run along the output row.
        # row vectors need pixels at unit stride (channels-last tensors store channels there instead)
        self.rows_unit = self.xs[3] == 1 and self.os[3] == 1
        self.by_channel = (wvalue is not None and self.Cog >= self.V and self.V > 1
                           and (not flat or self.W < self.FLAT_ROW_MIN_PIXELS or not self.rows_unit))
        # depthwise with channels innermost in input and output: vectors over channels (groups)
        self.depthwise_c = (wvalue is not None and self.Cig == 1 and self.Cog == 1 and self.V > 1 and self.G >= self.V
                            and self.xs[1] == 1 and self.os[1] == 1)
        forms = self.forms = TargetForms(str(k.module.triple), k.conv_accumulators)
        self.dw_vec = forms.dw_vectors() if self.depthwise_c else 1
        if self.depthwise_c:
            self.by_channel = False
            self.R, self.P = 1, forms.dw_pixels()
        elif self.by_channel:
            self.R = 2 * self.V if self.Cog >= 2 * self.V else self.V
            self.P = max(1, k.conv_accumulators // (self.R // self.V))  # 6 or 12 pixels at 12 accumulators
        else:
            self.R = forms.row_channels(self.Cog, flat and wvalue is not None)
        self.NB = -(-self.Cog // self.R)
        taps, f32 = self.Cig * self.KH * self.KW, np.dtype(dtype) == np.float32
        rows = wvalue is not None and not self.by_channel and not self.depthwise_c
        self.by_lane = rows and forms.by_lane(f32, self.V, self.Cog, taps)
        self.edges = (rows and not flat and forms.edges(self.V, self.sw, self.rows_unit, self.W)
                      and bool(np.isfinite(wvalue).all()))  # 0 * w adds nothing
        self.row_pairs = forms.row_pairs(self.edges, self.Cog, self.sh, self.dh, self.KH, self.KW)
        if not self.by_channel and not self.depthwise_c:
            self.U = forms.row_vectors(self.R, self.row_pairs, flat and wvalue is not None)
        self.lane_taps = forms.lane_taps(self.by_lane, self.row_pairs, f32, self.V, taps)
        # row pairs: accumulators start from a load of the channel's bias splatted in read-only data (a load
        # pipe) instead of a register copy of it (a vector pipe: fmla overwrites its accumulator)
        bvalue = None if bias is None else getattr(bias, "value", None)
        self.bias_rows = np.asarray(bvalue).reshape(-1) if self.row_pairs and bvalue is not None else None
        self.bias_splat = None
        # x86 (16 ymm): each tap broadcasts its own input values; merged across the taps of a row (the same
        # column feeds pixel p at tap kw and pixel p + 1 at kw + 1) they stay live beside the 12 accumulators and spill
        self.fresh_broadcasts = self.by_channel and str(k.module.triple).startswith("x86_64")
        self.wvalue, self.packed, self.tables = wvalue, None, None
        # wide (load + shuffle) strided row reads need unit element stride and stay inside the row
        self.wide = self.xs[3] == 1 and 1 < self.sw <= 4
        self.margin = self.sw - 1 if self.wide else 0
        self.unroll = self.KH * self.KW <= 49
        # parallel tiles (emit_tiled): run-time [lo, hi) of channel blocks, output rows, or row tiles (flat)
        self.cb_rng = self.row_rng = self.px_rng = None

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

    def weight(self, g, cb, r, ci, kh, kw):
        k = self.k
        if self.packed is not None:
            R = self.R
            per_ci = self.KH * self.KW * R
            off = offset(k, r, (g, self.NB * self.Cig * per_ci), (cb, self.Cig * per_ci), (ci, per_ci), (kh, self.KW * R), (kw, R))
            return k.b.load(element(k, self.packed, off))
        s = self.ws
        off = offset(k, r * s[0], (g, self.Cog * s[0]), (cb, self.R * s[0]), (ci, s[1]), (kh, s[2]), (kw, s[3]))
        return k.b.load(element(k, self.w_operand.ptr, off))

    def block(self, n, g, cb, R, oh, ow, nvec, kh_range, kw_range, rows: int = 1):
        """R output channels x (nvec vectors | one pixel when nvec == 0) at row oh, columns from ow.
        rows > 1 (self.row_pairs: stride and dilation 1 down the column, full kh_range): output rows oh ..
        oh + rows - 1, which share each input row's loads (and edge shifts); every accumulator takes its
        taps in the same order as in a block of one row."""
        k, b, dt = self.k, self.k.b, self.dtype
        lanes = self.V if nvec else 1
        count = max(nvec, 1)
        ty = ir.VectorType(llvm_type(dt), lanes) if nvec else llvm_type(dt)
        slots = [[] for _ in range(rows)]
        for r in range(R):
            if nvec and self.bias_splat is not None:
                # one load per accumulator through an opaque address: LLVM neither hoists nor merges them, so
                # each fmla starts from a loaded register instead of a register copy of the bias
                ch = offset(k, r, (g, self.Cog), (cb, self.R))
                for j in range(rows):
                    slots[j].append([k.local(ty, load_lanes(k, self.opaque(element(k, self.bias_splat, offset(k, 0, (ch, lanes)))),
                                                            0, lanes, 1, False)) for _ in range(count)])
                continue
            if self.bias is not None:
                bs = self.bias.strides[0]
                bv = b.load(element(k, self.bias.ptr, offset(k, r * bs, (g, self.Cog * bs), (cb, self.R * bs))))
            else:
                bv = const(dt, 0)
            init = splat(k, bv, lanes) if nvec else bv
            for j in range(rows):
                slots[j].append([k.local(ty, init) for _ in range(count)])
        xs, sx = self.xs, self.sw * self.xs[3]
        lane_w = self.lane_weights(g, cb) if self.lane_taps and nvec else None

        def row_taps(ci, d):
            # input row d of the block: tap kh = d - j of output row j
            ih = offset(k, -self.ph, (oh, self.sh), (d, self.dh))
            row = offset(k, -self.pw * xs[3], (n, xs[0]), (g, self.Cig * xs[1]), (ci, xs[1]), (ih, xs[2]), (ow, sx))

            def tap(kw):
                base = offset(k, 0, (row, 1), (kw, self.dw * xs[3]))
                xv = [self.edge_load(base, ow, kw, u) if nvec and self.edges and isinstance(ow, int) and isinstance(kw, int)
                      else load_lanes(k, self.xp, offset(k, u * lanes * sx, (base, 1)), lanes, sx, self.wide) for u in range(count)]
                for j in range(rows):
                    kh = d if rows == 1 else d - j
                    if rows > 1 and not 0 <= kh < self.KH:
                        continue
                    for r in range(R):
                        if lane_w is not None and all(isinstance(i, int) for i in (ci, kh, kw)):
                            t = (ci * self.KH + kh) * self.KW + kw
                            wv = b.shuffle_vector(lane_w[t // lanes], ir.Constant(ty, None), ir.Constant(ir.VectorType(ir.IntType(32), lanes), [t % lanes] * lanes))
                        else:
                            wv = self.weight(g, cb, r, ci, kh, kw)
                            if nvec:
                                wv = splat(k, wv, lanes)
                        for u in range(count):
                            acc = b.load(slots[j][r][u])
                            b.store(k.b.fadd(acc, k.b.fmul(wv, xv[u], flags=FAST), flags=FAST) if self.by_lane else mac(k, dt, acc, wv, xv[u]), slots[j][r][u])
            self.each(kw_range, tap, self.KW <= 16)

        d_range = kh_range if rows == 1 else (0, self.KH + rows - 1)
        self.each((0, self.Cig), lambda ci: self.each(d_range, lambda d: row_taps(ci, d), self.unroll), False)
        os_ = self.os
        for j in range(rows):
            for r in range(R):
                for u in range(count):
                    off = offset(k, r * os_[1] + u * lanes * os_[3] + j * os_[2], (n, os_[0]), (g, self.Cog * os_[1]), (cb, self.R * os_[1]), (oh, os_[2]), (ow, os_[3]))
                    residual = None
                    if self.res is not None:
                        rs, rp = self.res
                        roff = offset(k, r * rs[1] + u * lanes * rs[3] + j * rs[2], (n, rs[0]), (g, self.Cog * rs[1]), (cb, self.R * rs[1]), (oh, rs[2]), (ow, rs[3]))
                        residual = lambda roff=roff: load_lanes(k, rp, roff, lanes, rs[3], False)
                    store_lanes(k, self.op, off, epilogue(k, self.epi, b.load(slots[j][r][u]), residual), lanes, os_[3])
        if rows > 1 and count >= self.U:
            # after each full tile: the next blocks' loads stay after its stores (all of a row pair's blocks
            # interleaved hold more vectors than the 32 registers and spill)
            self.fence()

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

    def lane_weights(self, g, cb):
        """The block's taps as vectors (packed [g][taps] with V spare zeros at the end), loaded through an
        empty asm statement's copy of their address: LLVM cannot hoist them, or the lane splats, out of the
        tile loop, so instruction selection sees each splat beside its multiply and folds it (vmla q, q, d[x])."""
        k, V = self.k, self.V
        per_ci = self.KH * self.KW * self.R
        ptr = element(k, self.packed, offset(k, 0, (g, self.NB * self.Cig * per_ci), (cb, self.Cig * per_ci)))
        ptr = self.opaque(ptr)
        vt = ir.VectorType(ptr.type.pointee, V)
        return [k.b.load(k.b.bitcast(element(k, ptr, j * V), vt.as_pointer()), align=4)
                for j in range(-(-self.Cig * self.KH * self.KW // V))]

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
        """Interior tiles of the (single, flat) output row: the units px_rng splits."""
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

    def edge_load(self, base, ow: int, kw: int, u: int):
        """Vector u of tap kw at column ow (base: its first column), zeros for the columns outside the row."""
        k, V = self.k, self.V
        s = ow - self.pw + kw * self.dw + u * V
        if 0 <= s and s + V <= self.W:
            return load_lanes(k, self.xp, offset(k, u * V, (base, 1)), V, 1, False)
        c0 = max(s, 0) if s < 0 else self.W - V  # W >= V: only one side is outside
        v = load_lanes(k, self.xp, offset(k, c0 - s + u * V, (base, 1)), V, 1, False)
        zero = ir.Constant(v.type, [ir.Constant(v.type.element, 0.0)] * V)
        # one ext: lanes consecutive in (zero, v) on the left, in (v, zero) on the right
        pair, first = ((zero, v), V + s) if s < 0 else ((v, zero), s - c0)
        return k.b.shuffle_vector(*pair, ir.Constant(ir.VectorType(ir.IntType(32), V), [first + i for i in range(V)]))

    def edge_span(self):
        """(V, OW - V) when the row's first and last V columns run as edge blocks (self.edges), else None."""
        V = self.V
        lo, hi = self.interior(self.OW, self.sw, self.dw, self.pw, self.KW, self.W, self.margin)
        if not self.edges or self.OW < 2 * V or lo > V or hi < self.OW - V:
            return None
        return V, self.OW - V

    def row(self, oh, kh_range, emit):
        """Every column of output row oh: emit(ow, nvec, kw_range) per block; border columns at run time."""
        k, V, T = self.k, self.V, self.U * self.V
        edge = self.edge_span()
        lo, hi = edge or self.interior(self.OW, self.sw, self.dw, self.pw, self.KW, self.W, self.margin)
        hi = max(hi, lo)
        width, full = hi - lo, (0, self.KW)
        tiles = width // T
        first, last, trange = self.px_parts(tiles)
        with self.when(first):
            if edge:
                emit(0, 1, full)
            else:
                self.span(0, lo, lambda ow: emit(ow, 0, self.border_taps(1, ow)))
        if trange is not None:
            with loop(k, trange[1], trange[0]) as t:
                emit(offset(k, lo, (t, T)), self.U, full)
        elif tiles == 1:
            emit(lo, self.U, full)
        elif tiles:
            with loop(k, tiles) as t:
                emit(offset(k, lo, (t, T)), self.U, full)
        with self.when(last):
            pos, rest = lo + tiles * T, width - tiles * T
            if rest >= V:
                emit(pos, rest // V, full)
                pos, rest = pos + rest // V * V, rest % V
            if rest and width >= V:
                emit(hi - V, 1, full)
            elif rest:
                self.span(pos, hi, lambda ow: emit(ow, 0, full))
            if edge:
                emit(self.OW - V, 1, full)
            else:
                self.span(hi, self.OW, lambda ow: emit(ow, 0, self.border_taps(1, ow)))

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
        per_ci = self.KH * self.KW * self.R
        kw_lo, kw_hi = min(r[0] for r in pixels), max(r[1] for r in pixels)
        fresh = self.fresh_broadcasts and kw_hi - kw_lo > 1 and npix > 1

        def row_taps(ci, kh):
            ih = offset(k, -self.ph, (oh, self.sh), (kh, self.dh))
            row = offset(k, -self.pw * xs[3], (n, xs[0]), (g, self.Cig * xs[1]), (ci, xs[1]), (ih, xs[2]), (ow, self.sw * xs[3]))
            wrow = offset(k, 0, (g, self.NB * self.Cig * per_ci), (cb, self.Cig * per_ci), (ci, per_ci), (kh, self.KW * self.R))

            def tap(kw):
                wbase = offset(k, 0, (wrow, 1), (kw, self.R))
                wv = [load_lanes(k, self.packed, offset(k, v * V, (wbase, 1)), V, 1, False) for v in range(nv)]
                xbase = offset(k, 0, (row, 1), (kw, self.dw * xs[3]))
                xptr, xbase = (self.opaque(element(k, self.xp, xbase)), 0) if fresh else (self.xp, xbase)
                for p, (plo, phi) in enumerate(pixels):
                    if isinstance(kw, int) and not plo <= kw < phi:
                        continue
                    xp_off = p * self.sw * xs[3] if spots is None else spots[p][0] * self.sh * xs[2] + spots[p][1] * self.sw * xs[3]
                    xv = splat(k, b.load(element(k, xptr, offset(k, xp_off, (xbase, 1)))), V)
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

    # -- depthwise, channels innermost ---------------------------------------------------------
    def pack_depthwise(self, value: np.ndarray) -> np.ndarray:
        """[kh][kw][G rounded up to vectors], zero-filled."""
        gp = -(-self.G // self.V) * self.V
        wv = np.zeros((self.KH, self.KW, gp), value.dtype)
        wv[:, :, :self.G] = value.reshape(self.G, self.KH, self.KW).transpose(1, 2, 0)
        return wv

    def block_dw(self, n, c0, lanes: int, nvec: int, oh, ow, pixels, kh_range):
        """Channels [c0, c0 + nvec * lanes) (nvec vectors) x pixels (their kw ranges) of row oh from column ow, depthwise."""
        k, b, dt = self.k, self.k.b, self.dtype
        ty = ir.VectorType(llvm_type(dt), lanes) if lanes > 1 else llvm_type(dt)
        slots = []
        for v in range(nvec):
            if self.bias is not None:
                bs = self.bias.strides[0]
                init = load_lanes(k, self.bias.ptr, offset(k, v * lanes * bs, (c0, bs)), lanes, bs, False)
            else:
                init = _fill(ty, 0.0)
            slots.append([k.local(ty, init) for _ in pixels])
        xs, os_, gp = self.xs, self.os, -(-self.G // self.V) * self.V
        kw_lo, kw_hi = min(r[0] for r in pixels), max(r[1] for r in pixels)

        def row_taps(kh):
            ih = offset(k, -self.ph, (oh, self.sh), (kh, self.dh))
            row = offset(k, -self.pw * xs[3], (n, xs[0]), (c0, xs[1]), (ih, xs[2]), (ow, self.sw * xs[3]))
            wrow = offset(k, 0, (kh, self.KW * gp), (c0, 1))

            def tap(kw):
                wv = [load_lanes(k, self.packed, offset(k, v * lanes, (wrow, 1), (kw, gp)), lanes, 1, False) for v in range(nvec)]
                xbase = offset(k, 0, (row, 1), (kw, self.dw * xs[3]))
                for p, (plo, phi) in enumerate(pixels):
                    if isinstance(kw, int) and not plo <= kw < phi:
                        continue
                    for v in range(nvec):
                        xv = load_lanes(k, self.xp, offset(k, p * self.sw * xs[3] + v * lanes * xs[1], (xbase, 1)), lanes, xs[1], False)
                        b.store(mac(k, dt, b.load(slots[v][p]), xv, wv[v]), slots[v][p])
            self.each((kw_lo, kw_hi), tap, self.KW <= 16 or len(set(pixels)) > 1)  # per-pixel ranges need constant kw
            if self.forms.arm32 and isinstance(ty, ir.VectorType) and ty.element == ir.FloatType():
                # armv7: one kernel row at a time, or the scheduler hoists the next rows' loads and spills
                self.settle(slots)
        self.each(kh_range, row_taps, self.unroll)
        if nvec == 2 and self.res is None and os_[1] == 1 and isinstance(ty, ir.VectorType) and ty.element == ir.FloatType() and ty.count == 4:
            # one st1 {v.4s, v.4s} per pixel, whatever the pixel stride (LLVM's Neoverse-N1 model charges
            # each str q at an immediate offset both V pipes, one st1 of two vectors one each)
            st = k.module.globals.get("llvm.aarch64.neon.st1x2.v4f32.p0") or ir.Function(
                k.module, ir.FunctionType(ir.VoidType(), [ty, ty, ty.element.as_pointer()]), "llvm.aarch64.neon.st1x2.v4f32.p0")
            for p in range(len(pixels)):
                off = offset(k, p * os_[3], (n, os_[0]), (c0, os_[1]), (oh, os_[2]), (ow, os_[3]))
                b.call(st, [epilogue(k, self.epi, b.load(slots[v][p])) for v in range(2)] + [element(k, self.op, off)])
            return
        for p in range(len(pixels)):
            for v in range(nvec):
                off = offset(k, p * os_[3] + v * lanes * os_[1], (n, os_[0]), (c0, os_[1]), (oh, os_[2]), (ow, os_[3]))
                residual = None
                if self.res is not None:
                    rs, rp = self.res
                    roff = offset(k, p * rs[3] + v * lanes * rs[1], (n, rs[0]), (c0, rs[1]), (oh, rs[2]), (ow, rs[3]))
                    residual = lambda roff=roff: load_lanes(k, rp, roff, lanes, rs[1], False)
                store_lanes(k, self.op, off, epilogue(k, self.epi, b.load(slots[v][p]), residual), lanes, os_[1])

    def channels_dw(self, fn):
        """fn(c0, lanes, nvec): units of dw_vec channel vectors in a loop, then the remaining vectors
        one by one, then the remaining channels one by one (under cb_rng: the units [lo, hi) of them,
        the rest with the last chunk)."""
        k, V, unit = self.k, self.V, self.dw_vec * self.V
        full = self.G // unit

        def rest():
            self.span(0, (self.G - full * unit) // V, lambda j: fn(offset(k, full * unit, (j, V)), V, 1))
            self.span(self.G // V * V, self.G, lambda c: fn(c, 1, 1))
        if self.cb_rng is not None:
            lo, hi = self.cb_rng
            with loop(k, k.imin(hi, k.index(full)), lo) as cb:
                fn(offset(k, 0, (cb, unit)), V, self.dw_vec)
            if self.G % unit:
                with k.b.if_then(k.b.icmp_signed(">", hi, k.index(full))):
                    rest()
            return
        self.span(0, full, lambda cb: fn(offset(k, 0, (cb, unit)), V, self.dw_vec))
        rest()

    def rows(self, emit_row, emit_pair=None):
        """Interior rows with the full constant tap range (emit_pair(oh): rows oh and oh + 1 at once, then
        the odd one); border rows with table ranges."""
        lo, hi = self.interior(self.OH, self.sh, self.dh, self.ph, self.KH, self.H, 0)
        hi = max(hi, lo)
        k, full = self.k, (0, self.KH)

        def interior(a, b):
            if emit_pair is None:
                with loop(k, b, a) as oh:
                    emit_row(oh, full)
                return
            pairs = k.b.sdiv(k.b.sub(b, a), k.index(2))
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
        if emit_pair is not None and hi - lo >= 2:
            self.span(0, (hi - lo) // 2, lambda p: emit_pair(offset(k, lo, (p, 2))))
            if (hi - lo) % 2:
                emit_row(hi - 1, full)
        else:
            self.span(lo, hi, lambda oh: emit_row(oh, full))
        self.span(hi, self.OH, lambda oh: emit_row(oh, self.border_taps(0, oh)))

    def pointwise_tiles(self) -> bool:
        """Unpadded 1x1 convs with small outputs (strided, or not flattenable): pixel tiles of P run
        across row ends (build-time offsets per pixel), so narrow rows leave no ragged tiles."""
        return (self.by_channel and not self.flat and self.KH == 1 and self.KW == 1 and self.ph == 0 and self.pw == 0
                and self.OH > 1 and self.OW % self.P != 0 and self.OH * self.OW <= 64)

    def blocks_outer(self) -> bool:
        """Channel blocks outermost (each block's weights stay cached while the input streams past
        once per block) unless re-reading all weights once per output row (pixel tile when flat)
        moves fewer bytes than re-reading the input once per channel block. The optimizer's order wins."""
        if self.order in ("co>px", "px>co"):
            return self.order == "co>px"
        item = np.dtype(self.dtype).itemsize
        in_bytes = self.Cig * self.H * self.W * item
        w_bytes = self.Cog * self.Cig * self.KH * self.KW * item
        units = -(-self.OW // self.P) if self.flat else self.OH
        return in_bytes * self.NB <= w_bytes * units

    def pack(self, value: np.ndarray) -> np.ndarray:
        """[G][block][Cin/G][kh][kw][R] with the last block zero-filled."""
        wv = value.reshape(self.G, self.Cog, self.Cig, self.KH, self.KW)
        pad = self.NB * self.R - self.Cog
        if pad:
            wv = np.concatenate([wv, np.zeros((self.G, pad, self.Cig, self.KH, self.KW), wv.dtype)], axis=1)
        return np.ascontiguousarray(wv.reshape(self.G, self.NB, self.R, self.Cig, self.KH, self.KW).transpose(0, 1, 3, 4, 5, 2))

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

    def dw_units(self) -> int:
        """Channel units of the channels-last depthwise kernel: full units of dw_vec vectors, plus one for the rest."""
        unit = self.dw_vec * self.V
        return self.G // unit + (1 if self.G % unit else 0)

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
            self.bias_splat = k.constant_array(np.repeat(self.bias_rows.astype(self.dtype), self.V))
        self.tables = tap_tables(k, (self.OH, self.OW), (self.sh, self.sw), (self.dh, self.dw), (self.ph, self.pw),
                                 (self.KH, self.KW), (self.H, self.W))
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
                self.channel_blocks(lambda cb, R: self.rows(lambda oh, khr: self.row(
                    oh, khr, lambda ow, nvec, kw: self.block(n, g, cb, R, oh, ow, nvec, khr, kw)), pair and pair(cb, R)))

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


@register("Conv")
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
           strides, dils, pads, groups, flat, epi, res, k.attr("_loop_order")).emit()


# -- generic N-D nests -------------------------------------------------------------------------
def nest(k, extents, fn, idx=()):
    """Runtime loops over `extents` (outermost first); fn(list of index values)."""
    if len(idx) == len(extents):
        fn(list(idx))
        return
    if extents[len(idx)] == 1:
        nest(k, extents, fn, (*idx, k.index(0)))
        return
    with k.for_range(extents[len(idx)]) as i:
        nest(k, extents, fn, (*idx, i))


def table_nest(k, tables, pos, fn, taps=()):
    """Loops over taps t_d in [lo_d[pos_d], hi_d[pos_d]); fn(list of tap values)."""
    d = len(taps)
    if d == len(tables):
        fn(list(taps))
        return
    lo_t, hi_t = tables[d]
    lo = k.b.load(element(k, lo_t, pos[d]))
    hi = k.b.load(element(k, hi_t, pos[d]))
    with k.for_range(hi, lo) as t:
        table_nest(k, tables, pos, fn, (*taps, t))


def conv_generic(k, x, w, bias, out, strides, dils, pads, groups, epi=None, residual=None):
    """Any-rank Conv with tap ranges from build-time tables (no bounds tests per tap)."""
    b, s, dt = k.b, k.s, out.dtype
    sp = x.rank - 2
    Cig, Cog = x.shape[1] // groups, out.shape[1] // groups
    tables = tap_tables(k, out.shape[2:], strides, dils, pads, w.shape[2:], x.shape[2:])

    def point(ix):
        n, g, co, pos = ix[0], ix[1], ix[2], ix[3:]
        oc = b.add(b.mul(g, k.index(Cog)), co)
        init = b.load(element(k, bias.ptr, offset(k, 0, (oc, bias.strides[0])))) if bias is not None else const(dt, 0)
        acc = k.local(llvm_type(dt), init)

        def over_ci(ci):
            ic = b.add(b.mul(g, k.index(Cig)), ci)

            def tap(ts):
                xi = [b.sub(b.add(b.mul(pos[d], k.index(strides[d])), b.mul(ts[d], k.index(dils[d]))), k.index(pads[d])) for d in range(sp)]
                xv = b.load(element(k, x.ptr, offset(k, 0, (n, x.strides[0]), (ic, x.strides[1]), *zip(xi, x.strides[2:]))))
                wv = b.load(element(k, w.ptr, offset(k, 0, (oc, w.strides[0]), (ci, w.strides[1]), *zip(ts, w.strides[2:]))))
                b.store(s.add(dt, b.load(acc), s.mul(dt, xv, wv)), acc)
            table_nest(k, tables, pos, tap)
        with k.for_range(Cig) as ci:
            over_ci(ci)
        result = b.load(acc)
        if epi:
            res = None
            if residual is not None:
                rs = residual.strides
                res = lambda: b.load(element(k, residual.ptr, offset(k, 0, (n, rs[0]), (oc, rs[1]), *zip(pos, rs[2:]))))
            result = epilogue(k, epi, result, res)
        b.store(result, element(k, out.ptr, offset(k, 0, (n, out.strides[0]), (oc, out.strides[1]), *zip(pos, out.strides[2:]))))
    nest(k, [x.shape[0], groups, Cog, *out.shape[2:]], point)


@register("ConvTranspose")
def lower_conv_transpose(k):
    """Scatter form: every input pixel adds x * w into the output taps it reaches (tables per input position)."""
    x, w = k.inputs[0], k.inputs[1]
    bias = k.inputs[2] if len(k.inputs) > 2 else None
    out = k.outputs[0]
    b, s, dt = k.b, k.s, out.dtype
    sp = x.rank - 2
    groups = int(k.attr("group", 1))
    k_sp = list(w.shape[2:])
    strides = list(k.attr("strides") or [1] * sp)
    dils = list(k.attr("dilations") or [1] * sp)
    mode = auto_pad_mode(k)
    if k.attr("pads") is None and mode in ("SAME_UPPER", "SAME_LOWER"):
        out_pad = list(k.attr("output_padding") or [0] * sp)
        pads = []
        for d in range(sp):
            total = strides[d] * (x.shape[2 + d] - 1) + out_pad[d] + (k_sp[d] - 1) * dils[d] + 1 - out.shape[2 + d]
            pads.append(total // 2 if mode == "SAME_UPPER" else total - total // 2)
    else:
        pads = [int(p) for p in (k.attr("pads") or [0] * (2 * sp))[:sp]]
    Cig, Cog = x.shape[1] // groups, out.shape[1] // groups
    if out.size == 0:
        return
    if bias is not None:
        k.generic(out.shape, [out.identity_access()], [bias.access([1], out.rank)], lambda v, i: [v[0]])
    else:
        k.generic(out.shape, [out.identity_access()], [], lambda v, i: [const(dt, 0)])
    if x.size == 0:
        return
    tables = tap_tables(k, x.shape[2:], strides, dils, pads, k_sp, out.shape[2:])

    def point(ix):
        n, g, ci, pos = ix[0], ix[1], ix[2], ix[3:]
        ic = b.add(b.mul(g, k.index(Cig)), ci)
        xv = b.load(element(k, x.ptr, offset(k, 0, (n, x.strides[0]), (ic, x.strides[1]), *zip(pos, x.strides[2:]))))

        def tap(ts):
            oi = [b.sub(b.add(b.mul(pos[d], k.index(strides[d])), b.mul(ts[d], k.index(dils[d]))), k.index(pads[d])) for d in range(sp)]
            with k.for_range(Cog) as co:
                oc = b.add(b.mul(g, k.index(Cog)), co)
                wv = b.load(element(k, w.ptr, offset(k, 0, (ic, w.strides[0]), (co, w.strides[1]), *zip(ts, w.strides[2:]))))
                p = element(k, out.ptr, offset(k, 0, (n, out.strides[0]), (oc, out.strides[1]), *zip(oi, out.strides[2:])))
                b.store(s.add(dt, b.load(p), s.mul(dt, xv, wv)), p)
        table_nest(k, tables, pos, tap)
    nest(k, [x.shape[0], groups, Cig, *x.shape[2:]], point)
