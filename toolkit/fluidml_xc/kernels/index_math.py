"""Index arithmetic of the blocked GEMM and its callers (kernels/matmul_blocked.py, ops/conv/winograd.py): sums
and products of index values whose terms may be build-time ints or run-time values, and the offsets of B's packed
panels."""
from __future__ import annotations

from llvmlite import ir


def add_index(k, x, y):
    if isinstance(y, int):
        if y == 0:
            return x
        y = k.index(y)
    if isinstance(x, int):
        x = k.index(x)
    return k.b.add(x, y, flags=("nsw",))


def mul_index(k, x, c):
    """x * c; c an int, or a run-time index value (ops/conv/winograd.py's run-time strides)."""
    if isinstance(c, ir.Value):
        return k.b.mul(k.as_index(x), c, flags=("nsw",))
    if c == 0:
        return k.index(0)
    if isinstance(x, int):
        return k.index(x * c)
    return x if c == 1 else k.b.mul(x, k.index(c), flags=("nsw",))


def panel_bases(k, bb, pidx, nr: int, panel: int, kk: int, offs: list[int]) -> list:
    """Per vector of the kernel's panel pidx (nr columns, vectors at offs): the offset of its first row in B packed
    in panels of `panel` columns, (p, K, panel); a narrower panel is a slice of one packed panel, a wider one
    takes each vector from its own."""
    if not isinstance(kk, int):  # a run-time K (ops/conv/winograd.py): the panels' length kk * panel
        span = k.b.mul(kk, k.index(panel), flags=("nsw",))
        if nr >= panel:
            first = add_index(k, bb, mul_index(k, mul_index(k, pidx, nr // panel), span))
            return [add_index(k, add_index(k, first, mul_index(k, k.index(off // panel), span)) if off >= panel else first,
                              off % panel) for off in offs]
    if nr >= panel:
        return [add_index(k, add_index(k, bb, mul_index(k, pidx, nr // panel * kk * panel)), off // panel * kk * panel + off % panel)
                for off in offs]
    ratio = panel // nr
    hi, lo = divmod(pidx, ratio) if isinstance(pidx, int) else (k.b.udiv(pidx, k.index(ratio)), k.b.urem(pidx, k.index(ratio)))
    base = add_index(k, add_index(k, bb, mul_index(k, hi, kk * panel if isinstance(kk, int) else span)), mul_index(k, lo, nr))
    return [add_index(k, base, off) for off in offs]
