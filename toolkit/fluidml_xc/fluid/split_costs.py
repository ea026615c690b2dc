"""The price of splitting an op into tiles for the thread pool (runtime_c/pool.c), in the analytic model's terms
(fluid/costs.py): the busiest thread's share of the tiles, the pool's fixed cost, and the tiles each kernel family's
split (kernels/kernel.py, ops/matmul.py) makes."""
from __future__ import annotations

import math
from typing import Sequence

from ..kernels.kernel import PARALLEL_MIN_WORK, Kernel, chunk_count

PARALLEL_FOR_NS = 2000.0
"""Handing an op's tiles to the pool (runtime_c/pool.c): publishing the job, workers taking tiles, the wait."""
PARALLEL_EFFICIENCY = 0.87
"""Per-core efficiency of split tiles (a 512^3 and a 128^3 MatMul scale 1.70x / 1.78x on 2 threads, docs/THREADS.md)."""


def parallel_time(ns: float, tiles: int, threads: int) -> float:
    """ns of an op whose one-thread time is `ns`, split into `tiles` tiles on `threads` threads: the busiest
    thread runs ceil(tiles / threads) of them (the pool deals tiles out whole)."""
    if threads <= 1 or tiles <= 1:
        return ns
    return ns * math.ceil(tiles / threads) / tiles / PARALLEL_EFFICIENCY + PARALLEL_FOR_NS


def generic_tiles(extents: Sequence[int], order: Sequence[int], work: float) -> int:
    """Tiles Kernel.loops_tiled splits a loop nest (k.generic, pools, fused chains) into."""
    plan = Kernel.split_plan(extents, order, work)
    return plan[2] if plan else 1


def split_tiles(batch_points: int, work: float, extents: Sequence[int], splittable: Sequence[bool]) -> int:
    """Tiles of ops/matmul.py's _split: batch points x chunks per extent (outermost split first)."""
    if work < PARALLEL_MIN_WORK:
        return 1
    have = batch_points
    for e, ok in zip(extents, splittable):
        have *= chunk_count(e, work, -(-chunk_count(1 << 30, work) // have)) if ok else 1
    return have if have >= 2 else 1


RVV_PACK_FLOAT_CYCLES = 3.2
"""Cycles per float of a channel-vector conv's input pack (ops/conv/channels.py pack_input) on the X60 (llvm-mca-22:
35-46 cycles per 12 floats, an `flw` and an `fsw` each plus the addresses; docs/RISCV_KERNELS.md)."""


def rvv_pack_ns(geo, rvv: bool, cycle_ns: float) -> tuple[float, float]:
    """(ns split with the conv's tiles, ns every tile range's call pays whole) of copying a ConvGeometry's packed input
    on RVV, at `cycle_ns` per cycle: groups of pixel blocks (pack_groups > 1) are packed by the tile that runs them;
    one group is packed once per call of the function, before the parallel region, so every thread copies it all."""
    if not (rvv and geo.pack_groups):
        return 0.0, 0.0
    ns = float(geo.N) * geo.C * geo.H * geo.W * RVV_PACK_FLOAT_CYCLES * cycle_ns
    return (ns, 0.0) if geo.pack_groups > 1 else (0.0, ns)
