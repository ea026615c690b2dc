"""Depthwise convs priced by llvm-mca-22's cycles: the U74's by their routines' (kernels/depthwise_tile.py; fluid/costs.py
turns cycles into its ns through the GEMM tile's SCALAR_TILE_CYCLES), RVV's channels-last block against the column strips."""
from __future__ import annotations

from ..kernels import depthwise_stride2 as stride2, rvv_depthwise as rvv
from ..kernels.depthwise_tile import bands as depthwise_bands, plane_cycles
from .geometry import ConvGeometry

U74_CHANNELS_LAST_CYCLES = 448 / 16
"""llvm-mca-22 cycles per channel and pixel of the U74's channels-last depthwise block (4 channels x 4 pixels of
9 taps and the Clip: 448 cycles), which runs the depthwise convs the bands do not take (docs/RISCV_KERNELS.md)."""


def scalar_depthwise_cycles(geo: ConvGeometry) -> float | None:
    """llvm-mca-22 cycles of a float32 depthwise conv on a CPU with the hand-scheduled tiles (the U74), None for
    other convs: 3 x 3 at stride 1 in either layout as kernels/depthwise_tile.py's bands, at stride 2 as
    kernels/depthwise_stride2.py's (`stride2_plane_cycles`), the other channels-last ones at
    U74_CHANNELS_LAST_CYCLES per channel and pixel of a 3 x 3 window, in proportion to the window's taps."""
    s = geo.plan.shape
    if geo.itemsize != 4 or s.Cig != 1 or s.Cog != 1 or s.dyn is not None or s.rs is not None:
        return None
    plane = None
    if (s.KH, s.KW, s.sh, s.sw, s.dh, s.dw) == (3, 3, 1, 1, 1, 1):
        plane = depthwise_bands(s.H, s.W, s.OH, s.OW, s.ph, s.pw, s.xs[2:], s.os[2:], geo.plan.epilogue)
    if plane is not None:
        return geo.N * geo.G * plane_cycles(plane)
    if (s.KH, s.KW, s.sh, s.sw, s.dh, s.dw) == (3, 3, 2, 2, 1, 1):
        plane = stride2.bands(s.H, s.W, s.OH, s.OW, s.ph, s.pw, s.xs[2:], s.os[2:], geo.plan.epilogue)
        if plane is not None:
            return geo.N * geo.G * stride2_plane_cycles(plane)
    taps = s.KH * s.KW / 9  # the block's figure is 3 x 3's
    return geo.N * geo.G * geo.OH * geo.OW * U74_CHANNELS_LAST_CYCLES * taps if geo.kind == "depthwise_c" else None


def stride2_plane_cycles(plane: list) -> float:
    """One channel's stride-2 bands: each routine's cycles as its issue model counts them (within 3% of llvm-mca-22
    over the loop: tests/test_riscv_stride2.py), and the caller's stores of its argument block."""
    return sum(stride2.cycles(band) + len(stride2.arguments(band)) for band in plane)


RVV_STRIDED_ROWS = 2.5
"""RVV row vectors at stride 2-4 (wide loads split by `vnsrl` between two `vsetivli`): their work over the model's
count (llvm-mca-22 on the X60, MobileNetV2's stride-2 depthwise convs at 112 and 56: NCHW rows 7.2-7.8% of peak, the
channels-last block 22-24%, 3.0-3.1x the time; with this factor the model prices 3.1x, before 1.3x)."""

STRIP_VECTOR_LOADS = 3
"""Loads fluid/costs.py prices per output vector of the RVV column strips (ops/conv/strips.py): one vector load and
the two slides of it."""
X60_VFMACC_CYCLES = 1
X60_VMEM_CYCLES = 2
"""Cycles per register of a `vfmacc.vv` and of a unit-stride `vle32.v` / `vse32.v` on the X60 (llvm-mca-22's
SpacemitX60: 2 and 4 at LMUL 2, on the FP unit and on the one load/store pipe)."""


def rvv_channels_last_factor(geo: ConvGeometry) -> float:
    """The RVV channels-last depthwise block's price per output vector over the column strips' (the model prices the
    strips' multiply-adds and loads; STRIP_VECTOR_LOADS): the ratio of the two loops' X60 cycles counted as their
    multiply-adds' plus their vector loads' and stores', because the in-order core issues the block's loads and
    stores between its multiply-adds and their load/store-pipe cycles add to the FP unit's instead of hiding under
    them. Per output vector the strips have one load and one store; the block KH x ((P - 1) sw + KW) / P loads (its
    P pixels share their kernel rows' spans), a store and 1 / P bias reload (9 weights, 3 accumulators and the
    inputs fill the 16 register groups). 3x3 at P = 3: 21.7 against 13 cycles per register, 1.67x; llvm-mca-22
    (docs/RISCV_KERNELS.md): 135 cycles per 27 `vfmacc` against 128 per 45, 1.76x (FP 54 + load/store 76 = 130
    and 90 + 40 = 130 resource cycles: the sum holds for both within 5%, the FP-bound strips 2% over, the block 4%
    under)."""
    taps = geo.KH * geo.KW
    loads = geo.KH * ((geo.P - 1) * geo.sw + geo.KW) / geo.P
    block = taps * X60_VFMACC_CYCLES + (loads + 1 + 1 / geo.P) * X60_VMEM_CYCLES
    strips = taps * X60_VFMACC_CYCLES + 2 * X60_VMEM_CYCLES
    return block / strips


X60_STRIP_VECTOR_CYCLES = 128 / 5
"""llvm-mca-22 cycles per output vector (16 floats) of the NCHW column strips (5 steps in 128 cycles): the model's
strips price (STRIP_VECTOR_LOADS) is that many cycles."""


def rvv_routine_cycles(geo: ConvGeometry, forms) -> float | None:
    """Cycles (one thread) of a channels-last depthwise conv as kernels/rvv_depthwise.py's routine runs it (its
    `cycles`: the loop within a cycle of llvm-mca-22's, the head and tail columns and the prologue issued the
    same way), None when the routine does not take the conv (as ops/conv/depthwise_rvv.py decides)."""
    s = geo.plan.shape
    if (not rvv.for_cpu(forms.triple, forms.cpu, forms.features) or geo.itemsize != 4 or s.rs is not None
            or s.dyn is not None or (s.KH, s.KW, s.dh, s.dw) != (3, 3, 1, 1) or s.sh != s.sw
            or s.xs[1] != 1 or s.os[1] != 1):
        return None
    form = rvv.clip_form(geo.plan.epilogue)
    plane = None if form is None else rvv.bands(s.H, s.W, s.OH, s.OW, s.ph, s.pw, form[0], s.sh)
    if plane is None:
        return None
    return geo.N * -(-geo.G // rvv.LANES) * sum(rvv.cycles(band) for band in plane)
