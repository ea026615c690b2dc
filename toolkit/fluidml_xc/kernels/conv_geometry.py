"""Conv geometry shared by the Conv kernels (ops/conv/, ops/pool.py) and the optimizer's cost model
(fluid/costs.py): padding and tap ranges, the target's tiles and instruction forms, the register blocking."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from ..symbolic import Dim, SymRange, bounds, floordiv, is_static, maximum
from ..target.arch import Arch, arch_of, riscv_vector, riscv_vlen
from .matmul_geometry import outer_tile
from .scalar_tile import scalar_tile
from .split import chunk_count


# -- padding and tap ranges ----------------------------------------------------------------------
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


def settle(d: Dim, ranges) -> Dim:
    """`d` as an int when it takes one value over `ranges` (name -> symbolic.SymRange)."""
    if is_static(d):
        return int(d)
    lo, hi = bounds(d, ranges)
    return lo if lo == hi else d


def same_pads(k, in_dims, out_dims, k_sp, strides, dils, ranges: dict[str, SymRange]) -> tuple[list[int], list[int]] | None:
    """(begin, end) pads of auto_pad SAME_UPPER / SAME_LOWER over spatial dims that may vary (symbolic.Dim); None for
    other modes. Each pad must be one value over the ranges: the kernels fix the padding at build time."""
    mode = auto_pad_mode(k)
    if mode not in ("SAME_UPPER", "SAME_LOWER"):
        return None
    begin, end = [], []
    for i, (size, out) in enumerate(zip(in_dims, out_dims)):
        total = maximum(0, (out - 1) * strides[i] + (k_sp[i] - 1) * dils[i] + 1 - size)
        small = floordiv(total, 2)
        pads = [settle(small, ranges), settle(total - small, ranges)]
        if not all(is_static(p) for p in pads):
            raise InputError(f"node {k.node.name!r} ({k.node.op_type}): auto_pad={mode} pads dim {i + 2} by "
                             f"{total}, which changes with the run-time size {size}: export the model with explicit "
                             "pads, or give that dimension one value")
        begin.append(pads[0] if mode == "SAME_UPPER" else pads[1])
        end.append(pads[1] if mode == "SAME_UPPER" else pads[0])
    return begin, end


def runtime_tap_range(k, o, stride: int, dil: int, pad: int, taps: int, size):
    """tap_range at run time: index values [lo, hi) for position o (an index value) over an input of `size` (an
    index value or int)."""
    b, idx = k.b, k.index

    def floor(a, c: int):
        if c == 1:
            return a
        below = b.icmp_signed("<", b.srem(a, idx(c)), idx(0))
        return b.sub(b.sdiv(a, idx(c)), b.zext(below, k.idx_t))
    base = b.sub(o if stride == 1 else b.mul(o, idx(stride)), idx(pad)) if pad else (o if stride == 1 else b.mul(o, idx(stride)))
    lo = k.imax(floor(b.sub(idx(dil - 1), base), dil), idx(0))
    size = idx(size) if isinstance(size, int) else size
    hi = k.imin(b.add(floor(b.sub(b.sub(size, idx(1)), base), dil), idx(1)), idx(taps))
    return lo, k.imax(hi, lo)


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
        lo, hi = tap_ranges(outs[d], strides[d], dils[d], pads[d], taps[d], sizes[d])
        tables.append((k.constant_array(lo.astype(int_t)), k.constant_array(hi.astype(int_t))))
    return tables


def tap_ranges(outs: int, stride: int, dil: int, pad: int, taps: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """tap_range of every output position 0 <= o < outs, as two int64 arrays (lo, hi)."""
    base = np.arange(outs, dtype=np.int64) * stride - pad
    lo = np.maximum(0, -(base // dil))
    return lo, np.maximum(lo, np.minimum(taps, (size - 1 - base) // dil + 1))


# -- target forms and blocking -------------------------------------------------------------------
FLAT_ROW_MIN_PIXELS = 512
"""Flat 1x1 convs run row vectors (pixel vectors) from this many pixels on, channel vectors below
(measured on AVX2: channel vectors win at 14x14 for every Cin, row vectors from 28x28)."""
DW_PIXELS = 8
"""Most pixels per channels-last depthwise block (one accumulator per channel vector each)."""
DW_ROW_PIXELS = 3
"""Pixels per channels-last depthwise block when a channel unit's weight vectors stay in registers across the row
(TargetForms.dw_rows): RVV's 16 LMUL-2 groups hold 9 weights, 3 accumulators and the input vectors in flight
(benchmarks/mca.py on the X60: 3 pixels 34% of peak, no spills; 4 and 5 spill, 19-20%)."""
PACK_MAX_PIXELS = 256
"""Flat 1x1 convs pack their input (TargetForms.packs_input) up to this many pixels (14x14 measured on AVX2)."""
PACK_MAX_BYTES = 256 * 1024
"""Largest packed input on the stack (templates/model.h.j2: packing buffers up to 256 KiB)."""
L1_SET_LINES = 8
"""L1's ways (32 KiB, 8 ways, 64 sets on Zen 3 and most x86 cores): more lines of one input channel's taps in one set
cannot all stay (TargetForms.taps_outer; AVX2 on Zen 3, docs/CNN_OPS.md: 21 lines, 512 channels at stride 2, taps
outermost 0.67x; 12 lines 0.87x; 6 lines 0.99x)."""
L1_BYTES = 32 * 1024
AVX2_INPUT_SHARE = 0.5
SHORT_TAPS = 64
"""Taps per output (input channels x kernel taps) of a short reduction (TargetForms.input_kept, weights_kept)."""
RVV_CHANNEL_PIXELS = 12
"""Pixels of an RVV channel-vector block of one vector of output channels over consecutive input pixels (NCHW or
packed; TargetForms.channel_block): 12 accumulators, each weight vector load feeding 12 `vfmacc.vf` (llvm-mca-22 on the
X60 against 2 vectors x 5 pixels: the 7x7 stride-2 stem 49% -> 84% of peak, 1x1 NCHW -> NHWC 68-70% -> 74-75%, packed
72% -> 75%; channels-last pixels unpacked keep 2 x 5: their broadcasts take an address `add` each, 70% -> 62% at 12)."""
RVV_PACK_MIN_CHANNELS = 48
"""Output channels per group from which an RVV channels-last 1x1 conv packs its input (TargetForms.packs_input): the
pack copies each input float once (llvm-mca-22 on the X60: 35-46 cycles per 12, about 3.2 per float), the packed
loop saves about 0.077 x Cog cycles per input float (Cog / 8 multiply-adds at 73% of peak instead of 51%): even at
42 output channels, a loss below (Inception's 480 -> 16 would take twice its time)."""
RVV_UNPACKED_K_STEPS = 8
"""Input channels per loop iteration of an RVV channel-vector 1x1 conv over unpacked channels-last pixels (ops/conv/
walk.py channel_steps; Arch.k_steps, 3, elsewhere): each pixel's broadcasts take an address `add` per iteration,
which waits for the multiply-add before it (in-order write-back), so more channels share it (llvm-mca-22 on the X60,
480 -> 16 / 512 -> 32 / 832 -> 32 / 256 -> 32 at 6x6-28x28: 3 steps 68-72%, 4 67-73%, 6 68-74%, 8 72.5-74%)."""
RVV_UNPACKED_TAP_STEPS = 2
"""Input channels per iteration of an RVV channel-vector conv of more than one tap over unpacked channels-last pixels:
a tap's broadcast addresses (past the 12-bit offsets: an `add` each) serve both channels, 4 bytes apart
(llvm-mca-22 on the X60: 3x3 s2 512 -> 512 at 14x14 62% -> 66.5% of peak, 3x3 128 -> 32 at 7x7 67.5% -> 69.8%, 5x5
48 -> 128 at 6x6 62.8% either way; 3 and 4 channels spill: 46-65%)."""
RVV_ROW_CHANNELS = 12
"""Most output channels per row-vector block of a flat 1x1 conv with constant weights on RVV, one vector of pixels
(TargetForms.row_channels / row_vectors): 12 accumulators, each vector load feeding 12 `vfmacc.vf` (llvm-mca-22 on
the X60, 1x1 convs over 729-3136 pixels: 4 channels x 2 vectors 70-71% of peak, 6 x 2 75-76%, 8 x 1 72-77%, 10 x 1
74-78%, 12 x 1 77-81%; docs/RISCV_KERNELS.md). Channels are split into equal blocks of at most this many (24: two
of 12; 16: two of 8)."""
TAIL_ACCUMULATORS = 8
"""Accumulators a channel-vector block needs to keep both FMA ports busy (x86: two ports x 4 cycles latency)."""
CONV_ORDERS = ("co>px", "px>co")
"""Conv loop orders: output-channel blocks outermost (weights of a block stay cached while the input
streams past once per block) or pixel rows (pixel tiles when flat) outermost (the input row stays
cached while every block's weights stream past)."""


def channel_k_steps(k_steps: int, unpacked_last: bool, Cig: int, taps: int) -> int:
    """Input channels per loop iteration of a conv of `taps` kernel taps (ops/conv/walk.py channel_steps) on a target
    of `k_steps` (Arch.k_steps) for a 1x1 conv, 1 for larger kernels (their taps fill the iteration); for an RVV
    channel-vector block over unpacked channels-last pixels (`unpacked_last`) RVV_UNPACKED_K_STEPS and
    RVV_UNPACKED_TAP_STEPS; at most Cig, else 1."""
    if taps > 1:
        steps = RVV_UNPACKED_TAP_STEPS if unpacked_last else 1
    else:
        steps = RVV_UNPACKED_K_STEPS if unpacked_last and Cig >= RVV_UNPACKED_K_STEPS else k_steps
    return steps if Cig >= steps else 1


def pixel_runs(start: int, sizes: list[int]) -> list[tuple[int, int, int]]:
    """Consecutive blocks of the given sizes from column start as runs (first column, size, blocks) of equal size."""
    runs = []
    for size in sizes:
        if runs and runs[-1][1] == size:
            runs[-1] = (runs[-1][0], size, runs[-1][2] + 1)
        else:
            runs.append((start, size, 1))
        start += size
    return runs


def pixel_groups(width: int, most: int, groups: int) -> list[list[tuple[int, int, int]]]:
    """The pixel blocks of packs_input: ceil(width / most) near-equal blocks, the larger first (49 pixels at most 6
    each: 4 x 6 + 5 x 5, no lone pixel waiting on the FMA latency), split into `groups` near-equal runs of
    blocks; each group as its runs."""
    count = -(-width // most)
    base, extra = divmod(width, count)
    sizes = [base + 1] * extra + [base] * (count - extra)
    bounds = [count * g // groups for g in range(groups + 1)]
    return [pixel_runs(sum(sizes[:a]), sizes[a:b]) for a, b in zip(bounds, bounds[1:])]



@dataclass(frozen=True)
class TargetForms:
    """The target-dependent tiles and instruction forms of the Conv kernel's (ops/conv/conv2d.py lower_conv) row-vector and channels-last depthwise
    kernels, from the triple and the register budget. fluid/costs.py reads the same answers, so the
    optimizer's estimate follows the kernel (docs/ARM_KERNELS.md)."""

    triple: str
    """The target triple; "" for none (the cost model without a target: no architecture's special forms)."""
    conv_accumulators: int = 12
    features: str = ""
    """The target's LLVM features (RISC-V: whether it has V, target/arch.py riscv_vlen)."""
    parallel: bool = False
    """The conv runs as tiles of the thread pool (a build for more than one thread): an input-packing conv whose
    output stores channels innermost splits over its pixel groups (pack_groups)."""
    private_caches: bool = False
    """The target's cores may not share a cache (target/boards.py Target.private_caches)."""
    cpu: str = ""
    """LLVM's name of the CPU: a scalar RISC-V core may have a hand-scheduled GEMM tile (gemm_tile)."""

    @property
    def arch(self) -> Arch | None:
        return arch_of(self.triple) if self.triple else None

    @property
    def aarch64(self) -> bool:
        return self.arch is not None and self.arch.aarch64

    @property
    def arm32(self) -> bool:
        return self.arch is not None and self.arch.arm32

    @property
    def x86(self) -> bool:
        return self.arch is not None and self.arch.x86

    @property
    def gemm_tile(self) -> tuple[int, int] | None:
        """(rows, columns) of the CPU's hand-scheduled float32 GEMM tile (kernels/scalar_tile.py), else None."""
        tile = scalar_tile(self.triple, self.cpu, self.features)
        return None if tile is None else (tile.rows, tile.cols)

    def outer_tile(self, m: int, n: int, lanes: int, float32: bool) -> tuple[int, int]:
        """The MatMul kernels' outer-product tile (kernels/matmul_blocked.py _emit_outer): gemm_tile for float32 when
        the problem has as many rows and columns, else matmul_geometry.outer_tile's."""
        tile = self.gemm_tile
        return tile if tile and float32 and m >= tile[0] and n >= tile[1] else outer_tile(m, n, lanes)

    @property
    def rvv(self) -> bool:
        """RISC-V with the V extension: the kernels' vectors are register groups (vector_lmul), 16 of them."""
        return riscv_vector(self.triple, self.features)

    def vector_cycles(self, vector_bits: int) -> int:
        """Cycles per vector operation of vector_bits (fluid/costs.py): RVV's register groups take one per register
        (llvm-mca's SpacemitX60: `vfmacc` 1 cycle at LMUL 1, 2 at LMUL 2; docs/RISCV_KERNELS.md); 1 elsewhere."""
        return max(1, vector_bits // riscv_vlen(self.features)) if self.rvv else 1

    def dw_rows(self) -> bool:
        """Channels-last depthwise rows with the channel units outside the row's pixel tiles: each unit's KH x KW
        weight vectors are loaded once per row and stay in registers across its tiles (RVV: in-order cores whose
        vector loads cost as much as two multiply-adds; benchmarks/mca.py, docs/RISCV_KERNELS.md)."""
        return self.rvv

    def dw_vectors(self) -> int:
        """Channel vectors per channels-last depthwise block: two on aarch64 (their loads and stores pair)."""
        return 2 if self.aarch64 else 1

    def channel_pixels(self, vectors: int, vector_bytes: int) -> int:
        """Pixels per channel-vector block of `vectors` vectors of output channels: conv_accumulators / vectors (6 or
        12 at 12); a two-vector block on x86 at 64-byte vectors (AVX-512: 32 zmm, twice AVX2's 16) keeps twice the
        accumulators, 12 pixels (docs/CNN_OPS.md)."""
        acc = self.conv_accumulators * (2 if self.x86 and vectors == 2 and vector_bytes >= 64 else 1)
        return max(1, acc // vectors)

    def channel_block(self, Cog: int, V: int, itemsize: int, consecutive: bool) -> tuple[int, int]:
        """(R, P) of a channel-vector block: 2 vectors of output channels when Cog has them, else 1, x channel_pixels;
        on RVV one vector x RVV_CHANNEL_PIXELS when the block's pixels are consecutive floats (`consecutive`: NCHW
        input or packed, so each broadcast is an `flw` at an immediate offset from one pointer)."""
        if self.rvv and consecutive:
            return V, RVV_CHANNEL_PIXELS
        R = 2 * V if Cog >= 2 * V else V
        return R, self.channel_pixels(R // V, V * itemsize)

    def taps_outer(self, channels: bool, xs: tuple[int, ...], taps: tuple[int, int, int, int, int, int], P: int, Cig: int,
                   V: int, itemsize: int) -> bool:
        """Channel vectors over a channels-last input (xs: element strides N, C, H, W): the taps outermost and the input
        channels innermost (each tap a loop over them) on x86 up to 32-byte vectors where the taps' lines of one
        input channel crowd L1: a block of P pixels reads, per input channel, one line per (kh, kw, pixel); taps
        innermost keep all of them live while 16 channels use each line, and where more than L1_SET_LINES fall into
        one of L1's 64 sets (addresses 4 KiB apart: 512 channels at stride 2) every line is refetched per channel.
        taps: (KH, KW, sh, sw, dh, dw)."""
        KH, KW, sh, sw, dh, dw = taps
        if not (channels and xs[1] == 1 and KH * KW > 1 and Cig >= V and itemsize == 4 and self.x86 and V * itemsize <= 32):
            return False
        lines = {(kh * dh * xs[2] + (p * sw + kw * dw) * xs[3]) * itemsize // 64
                 for kh in range(KH) for kw in range(KW) for p in range(P)}
        per_set: dict[int, int] = {}
        for line in lines:
            per_set[line % 64] = per_set.get(line % 64, 0) + 1
        return max(per_set.values()) > L1_SET_LINES

    def avx2(self, vector_bytes: int) -> bool:
        return self.x86 and vector_bytes <= 32

    def input_kept(self, cache_bytes: int, taps: int, vector_bytes: int) -> int:
        """Most input bytes of a channel-vector conv that stay cached across its channel blocks (co>px, fluid/costs.py):
        on AVX2 x86 past a short reduction half of them, AVX2_INPUT_SHARE (each block's pass also streams its output
        and residual lines through Zen 3's 512 KiB L2: ResNet-50's 128@28 -> 512 1x1 convs with their residual, 401
        KiB of input, run px>co in 0.95-0.97 of co>px's CPU time, Inception-v2's 576@14 ones 0.92-1.0; MobileNetV2's
        24@56 -> 144, 24 taps, px>co 1.07x)."""
        return int(cache_bytes * AVX2_INPUT_SHARE) if self.avx2(vector_bytes) and taps > SHORT_TAPS else cache_bytes

    def weights_kept(self, cache_bytes: int, taps: int, vector_bytes: int) -> int:
        """Most weight bytes of a channel-vector conv that stay cached across its pixel tiles (px>co): on AVX2 x86 with
        a short reduction (at most SHORT_TAPS taps, 4 KiB of weights per channel block) those of L1 only (Zen 3:
        ResNet-50's 64@56 -> 256 1x1 convs, 64 KiB of weights, run co>px in 0.88-0.90 of px>co's CPU time)."""
        return L1_BYTES if self.avx2(vector_bytes) and taps <= SHORT_TAPS else cache_bytes

    def tail_tiles(self, tiles: int, rest: int, P: int, vectors: int, vector_bytes: int) -> int:
        """Interior tiles of P pixels a channel-vector row gives back to the balanced blocks after them (`rest`
        columns) so that each of those keeps TAIL_ACCUMULATORS accumulators, on x86 up to 32-byte vectors: 49 pixels
        (ResNet-50's 7x7 stage, flat) ran 8 tiles of 6 and a lone pixel whose 2 accumulators wait on the FMA
        latency; now 6 tiles and blocks of 4, 4 and 5 pixels."""
        if rest == 0 or not (self.x86 and vector_bytes <= 32):
            return 0
        for k in range(tiles + 1):
            pixels = rest + k * P
            if pixels // -(-pixels // P) * vectors >= TAIL_ACCUMULATORS:
                return k
        return 0

    def dw_pixels(self) -> int:
        if self.dw_rows():
            return DW_ROW_PIXELS
        return min(DW_PIXELS, self.conv_accumulators // self.dw_vectors())

    def by_lane(self, f32: bool, V: int, Cog: int, taps: int) -> bool:
        """armv7 depthwise rows: each tap a lane of the channel's weight vectors (vmla.f32 q, q, d[x]), where
        9 splatted weights, the bias, two clip bounds and the accumulators overflow its 16 q registers."""
        return self.arm32 and f32 and V == 4 and Cog == 1 and taps <= 4 * V

    def edges(self, V: int, sw: int, rows_unit: bool, W: int) -> bool:
        """aarch64 and RVV row vectors at stride 1 (constant finite weights, not flat): the first and last vector of a
        row are vector blocks whose taps read zeros for the columns outside the input (one ext; RVV: slides), not
        pixels (RVV, benchmarks/mca.py on the X60: NCHW depthwise 64x28x28 17% -> 19%, MobileNetV2's 56x56 stage
        23% -> 34% of peak)."""
        return (self.aarch64 or self.rvv) and V > 1 and sw == 1 and rows_unit and W >= V

    @staticmethod
    def row_pairs(edges: bool, Cog: int, sh: int, dh: int, KH: int, KW: int) -> bool:
        """aarch64 depthwise edge-block rows: pairs of output rows share their input rows' loads and edge shifts."""
        return edges and Cog == 1 and sh == 1 and dh == 1 and KH * KW <= 49

    def row_channels(self, Cog: int, flat_packed: bool) -> int:
        """R, output channels per row-vector block: up to 4; x86 flat 1x1 convs with constant weights run the
        GEMM tile of 16 ymm (MLAS's 6 x 16): half the accumulator budget in channels x 2 vectors of pixels; RISC-V
        at most half its budget (the U74's 4: 2 channels x 2 vectors of 4 scalars; 4 x 2 spilled, benchmarks/mca.py
        Conv 1x1 256->64 27% -> 59%); RVV flat 1x1 convs with constant weights equal blocks of at most
        RVV_ROW_CHANNELS."""
        if flat_packed and self.x86:
            return min(max(1, self.conv_accumulators // 2), Cog)
        if flat_packed and self.rvv:
            return -(-Cog // -(-Cog // RVV_ROW_CHANNELS))
        if self.arch is not None and self.arch.riscv:
            return min(4, Cog, max(1, self.conv_accumulators // 2))
        return min(4, Cog)

    def row_vectors(self, R: int, pairs: bool, flat_packed: bool = False) -> int:
        """U, vectors along the row per row-vector block (per row of a pair: a quarter of the budget, 3 of 3-6
        measured best by benchmarks/mca.py on the A76; 2 for the x86 flat tile of row_channels, 1 for RVV's)."""
        if flat_packed and (self.x86 or self.rvv):
            return 2 if self.x86 else 1
        if pairs:
            return max(1, self.conv_accumulators // 4)
        return min(4 if R <= 2 else 2, max(1, self.conv_accumulators // 2))

    def packs_input(self, channels: bool, flat: bool, xs: tuple[int, ...], pixels: int, block_bytes: int,
                    Cog: int = 0) -> bool:
        """Flat 1x1 channel-vector convs over small images with pixels innermost (NCHW, e.g. ResNet's 7x7 stage):
        the input is packed into [pixel block][channel][the block's pixels] on the stack, so a block's
        broadcasts read one contiguous run instead of a few bytes of every channel plane (a cache line per
        channel and block). block_bytes: one block of P pixels, every image and channel. xs: the input's element
        strides (N, C, H, W). On RVV channels-last inputs too, with at least RVV_PACK_MIN_CHANNELS output channels
        per group (Cog): a block's pixels are 4 x C bytes apart, past the loads' 12-bit offsets from C = 128 on, and
        every broadcast then took an address `add` that waits for the multiply-add before it (llvm-mca-22 on the X60:
        384->96 at 14x14 51% of peak, packed 73%). Those pack any pixel count, in chunks (pack_groups: each group of
        pixel blocks packed by itself within PACK_MAX_BYTES; 56x56 at 256 -> 64: 70% -> 76%)."""
        rvv_last = self.rvv and xs[1] == 1 and Cog >= RVV_PACK_MIN_CHANNELS
        return (channels and flat and (xs[3] == 1 or rvv_last) and (pixels <= PACK_MAX_PIXELS or rvv_last)
                and block_bytes <= PACK_MAX_BYTES)

    def pack_groups(self, blocks: int, block_bytes: int, work: float, channels_inner: bool, weights_bytes: int,
                    input_bytes: int, chunked: bool = False) -> int:
        """Pixel-block groups of packs_input, each packed whole within PACK_MAX_BYTES (the stack budget model.h
        promises): one (packed once per call, before the parallel region), or several, each packed by the
        parallel tile that runs it (channel blocks outermost inside it, all weights read once per group).
        Split for threads when the output stores channels innermost (NHWC) and the weights are no larger than
        the input: one group per tile, since one group's pack would run again in every tile (the pool calls a
        tile at a time) and tiles of channel blocks would write parts of the same cache lines at once
        (shufflenet's grouped 1x1 convs ran 2.5x slower on 2 threads than on one); larger weights (ResNet's
        2048 -> 512 at 7x7) would be read once per group instead. `chunked`: an input of more than PACK_MAX_PIXELS
        packed in chunks (RVV channels-last), split for threads whatever the output's layout: the groups already
        re-read the weights, and a group's pixels are its own in either layout."""
        groups = -(-blocks // max(1, PACK_MAX_BYTES // block_bytes))
        if self.parallel and (chunked or channels_inner and weights_bytes <= input_bytes):
            groups = max(groups, chunk_count(blocks, work))
        return groups

    @staticmethod
    def packed_channels(Cog: int, R: int, V: int, pack_V: int) -> int:
        """Output channels per block of the packed weights (RP) of a channel-vector conv with R channels per
        block at V lanes: the R of a kernel at pack_V lanes, the same for every code variant, so all read one
        copy (ops/conv/channels.py: a narrower block is a sub-block, a wider one reads each vector from its own
        block, taps RP apart); R itself when a vector of this kernel would straddle two blocks."""
        lanes = pack_V
        while lanes > 1 and Cog < lanes:
            lanes //= 2
        rp = 2 * lanes if Cog >= 2 * lanes else lanes
        return rp if rp % V == 0 and (rp % R == 0 or R % rp == 0) else R

    @staticmethod
    def lane_taps(by_lane: bool, pairs: bool, f32: bool, V: int, taps: int) -> bool:
        """The taps as lanes of weight vectors (by-element multiply-adds): armv7 by-lane rows, and aarch64 row
        pairs (fmla v, v, w.s[x]: 3 registers for 9 taps, not 9)."""
        return by_lane or (pairs and f32 and V == 4 and taps <= 4 * V)


@dataclass(frozen=True)
class ConvBlocking:
    """The Conv kernel's register blocking (ops/conv/), decided once from the facts of a float 1D/2D conv (rank 3
    as one row, flat 1x1 convs as one row of H * W pixels) by kernels/conv_plan.py plan_conv, for the kernel and the
    cost model alike. by_lane, edges, row_pairs, lane_taps, packs_input: TargetForms' answers of those names."""

    kind: str
    """"depthwise_c": channels-last depthwise, vectors over channels x P pixels; "channels": R output channels
    (1-2 vectors) x P pixels; "rows": R output channels x U vectors along the output row."""
    R: int
    """Output channels per block."""
    P: int
    """Pixels per depthwise or channel-vector block (0 for row vectors)."""
    U: int
    """Vectors along the row per row-vector block (0 for the others)."""
    dw_vec: int
    """Channel vectors per channels-last depthwise block (1 for the others)."""
    by_lane: bool
    edges: bool
    row_pairs: bool
    lane_taps: bool
    packs_input: bool
    pack_groups: int
    """0 unless packs_input, else the groups of pixel blocks packed at once."""
    pointwise_tiles: bool
    """Channel vectors of a 1x1 conv over a small output that is not flat (strided, or not flattenable) and reads
    no padding: pixel tiles of P run across row ends (build-time offsets per pixel), so narrow rows leave no
    ragged tiles."""
    orders: tuple[str, ...]
    """Loop orders the kernel implements for this blocking (CONV_ORDERS)."""
    default_order: str
    """The order the kernel runs when the optimizer gives none: for channel vectors, channel blocks outermost
    unless re-reading all weights once per output row (pixel tile when flat) moves fewer bytes than
    re-reading the input once per channel block; the others have one order."""
    dw_rows: bool = False
    """Channels-last depthwise: per output row, each channel unit runs all the row's pixel blocks (its weights kept
    in registers, TargetForms.dw_rows); else each pixel block runs every channel unit."""

    @classmethod
    def choose(cls, forms: TargetForms, *, N: int, C: int, H: int, W: int, OC: int, OH: int, OW: int, KH: int, KW: int,
               G: int, sh: int, sw: int, dh: int, xs: tuple[int, ...], os: tuple[int, ...], flat: bool, w_const: bool,
               finite: bool, itemsize: int, V: int, unpadded: bool = False, fixed_geometry: bool = True) -> ConvBlocking:
        """xs, os: element strides of input and output as (N, C, H, W); w_const: the weights are build-time
        constants, finite: all of them finite (edge blocks multiply zeros by them); V: vector lanes; unpadded: no
        begin pads and every output pixel reads an input pixel (end pads may only cut the input short);
        fixed_geometry: no row or column count varies at run time (else no form that bakes them in: edge blocks,
        input packs, pixel tiles across rows)."""
        Cig, Cog = C // G, OC // G
        taps, f32 = Cig * KH * KW, itemsize == 4
        rows_unit = xs[3] == 1 and os[3] == 1
        if w_const and Cig == 1 and Cog == 1 and V > 1 and G >= V and xs[1] == 1 and os[1] == 1:
            kind = "depthwise_c"
        elif w_const and Cog >= V and V > 1 and (not flat or W < FLAT_ROW_MIN_PIXELS or not rows_unit):
            kind = "channels"  # needs packed weights and enough channels; suits narrow rows
        else:
            kind = "rows"
        by_lane = edges = row_pairs = False
        dw_vec, U = 1, 0
        if kind == "depthwise_c":
            R, P, dw_vec = 1, forms.dw_pixels(), forms.dw_vectors()
        elif kind == "channels":
            packs = forms.packs_input(True, flat, xs, W, N * C * RVV_CHANNEL_PIXELS * itemsize, Cog) and fixed_geometry
            R, P = forms.channel_block(Cog, V, itemsize, xs[3] == 1 or packs)
        else:
            R, P = forms.row_channels(Cog, flat and w_const), 0
            by_lane = w_const and forms.by_lane(f32, V, Cog, taps)
            edges = w_const and not flat and forms.edges(V, sw, rows_unit, W) and finite and fixed_geometry  # 0 * w adds nothing
            row_pairs = forms.row_pairs(edges, Cog, sh, dh, KH, KW)
            U = forms.row_vectors(R, row_pairs, flat and w_const)
        block_bytes = N * C * P * itemsize if kind == "channels" else 0
        packs_input = forms.packs_input(kind == "channels", flat, xs, W, block_bytes, Cog) and fixed_geometry
        pack_groups = (forms.pack_groups(-(-W // P), block_bytes, float(N) * OC * OH * OW * taps, os[1] == 1,
                                         OC * taps * itemsize, N * C * H * W * itemsize, W > PACK_MAX_PIXELS)
                       if packs_input else 0)
        if kind == "channels":
            orders = CONV_ORDERS
            units = -(-OW // P) if flat else OH
            default = "co>px" if Cig * H * W * -(-Cog // R) <= Cog * taps * units else "px>co"
        else:
            orders = ("px>co",) if kind == "depthwise_c" or flat else ("co>px",)
            default = orders[0]
        pointwise_tiles = (kind == "channels" and not flat and KH == 1 and KW == 1 and unpadded and OH > 1 and OW % P != 0
                           and OH * OW <= 64 and fixed_geometry)
        return cls(kind, R, P, U, dw_vec, by_lane, edges, row_pairs, forms.lane_taps(by_lane, row_pairs, f32, V, taps),
                   packs_input, pack_groups, pointwise_tiles, orders, default, kind == "depthwise_c" and forms.dw_rows())
