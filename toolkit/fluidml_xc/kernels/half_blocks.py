"""float16 sums in short blocks added into float32 (build --precision fp16, docs/FP16.md): the GEMM kernels'
reduction loops (kernels/matmul_blocked.py, ops/conv/) keep their register tile in float16 vectors, so each
multiply-add is one 8-lane fmla.8h (twice float32's rate on the Cortex-A76/A78), and every HALF_BLOCK steps the
block's float16 sums are widened and added into float32 accumulators: a product is rounded into a float16 sum of
at most HALF_BLOCK terms, never into one of K terms, and the model's sums are float32 across blocks."""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from .scalar import FAST

HALF = np.dtype(np.float16)
HALF_BLOCK = 32
"""Reduction steps per float16 block, chosen by measured error (benchmarks/fp16_blocks.py, docs/FP16.md): for K = 1024
N(0,1) terms the worst error is 1.3e-4 of sum|a*b| at 32 steps, 1.1e-3 with float16 sums over all of K; 32 keeps it
under the 2.4e-4 (2^-12) that storing the result in float16 costs anyway, and the block's widening (2 fcvtl + 2 fadd
per accumulator) stays under 1/8 of its multiply-adds."""


def is_half(dtype) -> bool:
    return np.dtype(dtype) == HALF


def _wide_type(slot) -> ir.Type:
    ty = slot.type.pointee
    return ir.VectorType(ir.FloatType(), ty.count) if isinstance(ty, ir.VectorType) else ir.FloatType()


def reduce_in_blocks(k, dtype, kk, slots: list, body, start=0, step: int = 1) -> None:
    """body(kv) for kv in range(start, kk, step), accumulating into `slots` (allocas of dtype vectors or scalars).
    float16: in blocks of HALF_BLOCK steps (in_blocks); any other dtype: the one loop."""
    def run(lo, hi):
        with k.for_range(hi, lo, step) as kv:
            body(kv)
    if not is_half(dtype):
        run(start, kk)
        return
    in_blocks(k, kk, slots, run, start, HALF_BLOCK * step)


def in_blocks(k, stop, slots: list, run, start=0, span: int = HALF_BLOCK) -> None:
    """run(lo, hi) over [start, stop) in blocks of `span`, each accumulating into float16 `slots` that start the
    block at zero; their sums are added into float32 (starting from the slots' values on entry: a bias) and, at the
    end, stored back into `slots` rounded once. `start`/`stop`: ints or index values."""
    b = k.b
    wide = []
    for s in slots:
        w = k.local(_wide_type(s))
        b.store(b.fpext(b.load(s), w.type.pointee), w)
        wide.append(w)

    def block(lo, hi):
        for s in slots:
            b.store(ir.Constant(s.type.pointee, None), s)
        run(lo, hi)
        for s, w in zip(slots, wide):
            b.store(b.fadd(b.load(w), b.fpext(b.load(s), w.type.pointee), flags=FAST), w)

    def at(blk, lo0):
        lo = b.add(lo0, b.mul(blk, k.index(span), flags=("nsw",)), flags=("nsw",))
        return lo, b.add(lo, k.index(span), flags=("nsw",))
    if isinstance(stop, int) and isinstance(start, int):
        full = (stop - start) // span
        if full == 1:
            block(start, start + span)
        elif full:
            with k.for_range(full) as blk:
                block(*at(blk, k.index(start)))
        if start + full * span < stop:
            block(start + full * span, stop)
    else:
        lo0, hi = k.as_index(start), k.as_index(stop)
        full = b.udiv(b.sub(hi, lo0), k.index(span))
        with k.for_range(full) as blk:
            block(*at(blk, lo0))
        block(b.add(lo0, b.mul(full, k.index(span), flags=("nsw",)), flags=("nsw",)), hi)
    for s, w in zip(slots, wide):
        b.store(b.fptrunc(b.load(w), s.type.pointee), s)
