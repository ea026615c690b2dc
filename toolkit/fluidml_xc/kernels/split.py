"""How a heavy op splits into tiles for the thread pool (runtime_c/pool.c): the work below which it stays on one
thread and the chunk counts of its loops. No llvmlite here: the cost model and the kernels' plans read it too."""
from __future__ import annotations

PARALLEL_MIN_WORK = 500_000
"""Estimated scalar operations (multiply-adds, element ops) below which an op stays on the calling thread:
waking workers costs microseconds, so a small op is faster alone (docs/THREADS.md)."""
UNSHARED_MAC_WORK = 4
"""Split work of a multiply-add reusing no register (depthwise, one-row MatMul): 16 vs 73 GMAC/s, docs/THREADS.md."""
TARGET_TILES = 12
"""Tiles an op is split into when its work allows (divisible by 2, 3, 4 and 6 threads; the pool hands
tiles out one at a time, so more tiles than threads also even out unequal tiles)."""


def chunk_count(extent: int, work: float, target: int = TARGET_TILES) -> int:
    """Chunks to split `extent` independent units of total `work` into, each worth at least a quarter of
    PARALLEL_MIN_WORK: up to `target`; past it (up to 2 * `target`) only for equal chunks, every unit its
    own chunk or a count that divides the units when `target` does not (`target` chunks of 16 channel
    blocks would hold 1 or 2 blocks each and leave 2 threads 8/9 efficient)."""
    if extent <= 1 or work < PARALLEL_MIN_WORK:
        return 1
    most = int(max(1, min(extent, 2 * target, work // (PARALLEL_MIN_WORK // 4))))
    if most <= target:
        return most
    if extent <= most:
        return extent
    return most if extent % most == 0 and extent % target != 0 else target
