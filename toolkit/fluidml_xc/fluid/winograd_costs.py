"""The price of a Winograd Conv (ops/conv/winograd.py) in the analytic model's figures (fluid/costs.py passes them):
the input transform per tile and channel group, the blocked GEMM's tile per point (as costs.py prices the MatMul
kernel: vector FMAs, B loads, A broadcasts), the output transform and its stores, and the transformed weights re-read
once per block of tiles when they exceed the cache. The layout search sees these orders next to the direct ones."""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..kernels.winograd import ALLOWED_ATTR, TRANSFORMS, WHOLE_ATTR, WinogradPlan, plan_winograd
from .geometry import ConvGeometry


L2_FACTOR = 4
MEMORY_FACTOR = 4.0
V_LINE_FACTOR = 3.0
"""The whole-image form's V beyond the cache: a line per this many LINE_NS, written once and read once per panel."""


@dataclass(frozen=True)
class Figures:
    """The analytic model's unit costs (ns), fluid/costs.py's constants."""

    vfma: float
    vload: float
    bcast: float
    store: float
    flop: float
    scatter: float
    line: float
    line_bytes: int
    cache_bytes: int

    def vectors_times(self, cycles: int) -> Figures:
        """The vector operations' figures times `cycles` (RVV's register groups: AnalyticModel.vector_cycles)."""
        if cycles == 1:
            return self
        return replace(self, vfma=self.vfma * cycles, vload=self.vload * cycles, bcast=self.bcast * cycles,
                       store=self.store * cycles, scatter=self.scatter * cycles)


def allowed_orders(node, geo: ConvGeometry | None, accumulators: int, whole: bool = True,
                   tile: tuple[int, int] | None = None) -> dict[str, WinogradPlan]:
    """The Winograd orders passes/winograd.py allowed on `node` whose blocking fits, with their plans (the
    whole-image forms too unless `whole` is False; `tile`: TargetForms.gemm_tile)."""
    if geo is None:
        return {}
    plans = {}
    for m in node.attrs.get(ALLOWED_ATTR) or ():
        wp = plan_winograd(geo.plan.shape, m, geo.V, accumulators, tile=tile)
        if wp is not None:
            plans[f"wino{m}"] = wp
    for m in (node.attrs.get(WHOLE_ATTR) or ()) if whole else ():
        plans[f"wimg{m}"] = plan_winograd(geo.plan.shape, m, geo.V, accumulators, whole=True, tile=tile)
    return plans


def tiles(geo: ConvGeometry, wp: WinogradPlan, copies: int = 1) -> int:
    """Parallel tiles of the kernel that have work: images x groups x blocks of tiles (whole image: x panels of output
    channels, or x copies of V, one share of the panels each)."""
    panels = -(-geo.Cog // wp.NR)
    n = geo.N * geo.G * ((min(copies, panels) if copies > 1 else panels) if wp.whole else wp.blocks)
    return n if n >= 2 else 1


def winograd_ns(geo: ConvGeometry, wp: WinogradPlan, f: Figures, copies: int = 1) -> tuple[float, float]:
    """ns of the Winograd kernel for this geometry on one thread: (the work threads divide, the transformed weights'
    traffic from beyond the cache, which they share). The whole-image form splits the weights among the threads
    (panels of output channels) and streams them once per chunk of tiles, overlapped with the GEMM's multiply-adds
    (one sequential pass: the time is the larger of the two); its V is written once and read once per panel, a line
    per V_LINE_FACTOR * LINE_NS when V exceeds the cache (calibrated: 64x56x56 stays blocked, docs/WINOGRAD.md);
    with `copies` of V every thread transforms the whole input (the threads divide `copies` transforms)."""
    t = TRANSFORMS[wp.m]
    a2, V, C, OC = wp.alpha ** 2, geo.V, geo.Cig, geo.Cog
    blocks = geo.N * geo.G * wp.blocks
    padded_tiles = blocks * wp.T
    lanes = V if geo.xs[1] == 1 and C >= V else 1
    ops_in = 2 * wp.alpha * int(np.count_nonzero(t.BT))
    load = f.vload if lanes > 1 or geo.xs[1] == 1 else f.vload * 2
    input_ns = padded_tiles * -(-C // lanes) * (a2 * (load + f.store) + ops_in * f.flop / 2)
    nv = -(-wp.NR // V)
    groups = -(-OC // wp.NR) * nv
    gemm = blocks * a2 * (wp.T * C * groups * f.vfma + -(-wp.T // wp.MR) * C * groups * f.vload
                          + wp.T * C * -(-OC // wp.NR) * f.bcast + wp.T * groups * f.store)
    ops_out = (wp.alpha + wp.m) * int(np.count_nonzero(t.AT))
    out_vecs = padded_tiles * groups
    stores = wp.m ** 2 * (f.store if geo.os[1] == 1 else V * f.scatter)
    res = 0.0 if geo.residual is None else wp.m ** 2 * (f.vload if geo.residual[1] == 1 else V * f.scatter)
    output_ns = out_vecs * (a2 * f.vload + ops_out * f.flop / 2 + stores + res)
    io = geo.N * (geo.C * geo.H * geo.W + geo.OC * geo.OH * geo.OW) * 4 / f.line_bytes * f.line * 0.25
    if not wp.whole:
        return input_ns + gemm + output_ns + io, weight_traffic(a2 * C * OC * 4, blocks, f)
    v_bytes = a2 * wp.tiles * C * 4
    v_ns = geo.N * geo.G * v_bytes / f.line_bytes * (1 + -(-OC // wp.NR)) * (
        f.line * 0.25 if v_bytes <= f.cache_bytes else V_LINE_FACTOR * f.line)
    return input_ns * copies + max(gemm, weight_traffic(a2 * C * OC * 4, blocks, f)) + output_ns + io, v_ns


def weight_traffic(u_bytes: int, blocks: int, f: Figures) -> float:
    """ns of reading the transformed weights once per block of tiles: free while they stay in the cache, a line per
    LINE_NS up to L2_FACTOR caches, then a line per MEMORY_FACTOR * LINE_NS (calibrated on this AVX-512 Xeon: F(4x4)
    on 512x7x7 streams its 38 MB of weights twice at about 28 GB/s, 2.7 ms; benchmarks/winograd.py)."""
    lines = u_bytes / f.line_bytes
    if u_bytes <= f.cache_bytes:
        return lines * f.line * 0.25
    per_line = f.line if u_bytes <= L2_FACTOR * f.cache_bytes else MEMORY_FACTOR * f.line
    return blocks * lines * per_line
