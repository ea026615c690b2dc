"""The U74's depthwise convs priced by llvm-mca-22's cycles of their routines (kernels/depthwise_tile.py; fluid/costs.py
turns cycles into its ns through the GEMM tile's SCALAR_TILE_CYCLES)."""
from __future__ import annotations

from ..kernels.depthwise_tile import bands as depthwise_bands, plane_cycles
from .geometry import ConvGeometry

U74_CHANNELS_LAST_CYCLES = 448 / 16
"""llvm-mca-22 cycles per channel and pixel of the U74's channels-last depthwise block (4 channels x 4 pixels of
9 taps and the Clip: 448 cycles), which runs the depthwise convs the bands do not take (docs/RISCV_KERNELS.md)."""


def scalar_depthwise_cycles(geo: ConvGeometry) -> float | None:
    """llvm-mca-22 cycles of a float32 depthwise conv on a CPU with the hand-scheduled tiles (the U74), None for
    other convs: 3 x 3 at stride 1 in either layout as kernels/depthwise_tile.py's bands, the other channels-last
    ones at U74_CHANNELS_LAST_CYCLES per channel and pixel."""
    s = geo.plan.shape
    if geo.itemsize != 4 or s.Cig != 1 or s.Cog != 1 or s.dyn is not None or s.rs is not None:
        return None
    plane = None
    if (s.KH, s.KW, s.sh, s.sw, s.dh, s.dw) == (3, 3, 1, 1, 1, 1):
        plane = depthwise_bands(s.H, s.W, s.OH, s.OW, s.ph, s.pw, s.xs[2:], s.os[2:], geo.plan.epilogue)
    if plane is not None:
        return geo.N * geo.G * plane_cycles(plane)
    return geo.N * geo.G * geo.OH * geo.OW * U74_CHANNELS_LAST_CYCLES if geo.kind == "depthwise_c" else None

