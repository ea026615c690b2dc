"""Kernels whose loops do not depend on the layer's shape (issue #27: build time): elementwise ops over operands of
one shape and one dense storage order as a single loop over their elements, and Concat of dense operands stored in
one dim order as row copies. Their lengths, strides and parallel split are read at run time from an argument of no
declared size, so every layer of the same elementwise program (a SiLU after each conv, a HardSwish) or every Concat
of as many inputs compiles once per code variant whatever its shape (emit/units.py: units of the same IR share one
object). Each output element is computed from the same input elements as before, so the results do not depend on
the split or the loop's form.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
from llvmlite import ir

from .operand import Access, Operand
from .split import chunk_count

FLAT_TILES = 24
"""Parallel tiles of every flat kernel (kernels/split.py's most: 2 x TARGET_TILES): the layer's own chunks spread
evenly over them (Kernel.spread), the others idle."""

FIELDS = ("elements", "chunks")


def dense(op: Operand) -> bool:
    """Do the operand's strides lay its elements out without gaps (any order of its dims)?"""
    dims = sorted((d for d in range(op.rank) if op.shape[d] > 1), key=lambda d: -op.strides[d])
    step = 1
    for d in reversed(dims):
        if op.strides[d] != step:
            return False
        step *= op.shape[d]
    return True


def run_time_fields(k, values) -> list[ir.Value]:
    """`values` (build-time ints) as a constant argument of no declared size (Kernel.argument_array: a unit's IR
    does not depend on them), each loaded as an index value."""
    b, fields = k.b, k.argument_array(np.asarray(values, np.int64))
    loaded = [b.load(b.gep(fields, [ir.Constant(ir.IntType(32), i)], inbounds=True)) for i in range(len(values))]
    return loaded if k.idx_t.width == 64 else [b.trunc(v, k.idx_t) for v in loaded]


def even_chunk(k, c, chunks, extent) -> tuple[ir.Value, ir.Value]:
    """[lo, hi) of chunk c of `chunks` near-equal chunks of range(extent) (run-time values), without Kernel.chunk's
    product c * extent, which a 32-bit index overflows past 2^32 / chunks elements."""
    b = k.b
    q, r = b.udiv(extent, chunks), b.urem(extent, chunks)
    lo = b.add(b.mul(c, q), k.imin(c, r))
    return lo, b.add(b.add(lo, q), b.zext(b.icmp_unsigned("<", c, r), k.idx_t))


def flat_eligible(out: Operand, ins: Sequence[Operand]) -> bool:
    """Static numeric operands, every input an activation of the output's shape and strides, densely stored, at
    least two elements."""
    operands = [out, *ins]
    return (out.size >= 2 and all(op.dyn is None and np.dtype(op.dtype).kind in "biuf" for op in operands)
            and all(op.value is None and op.shape == out.shape and op.strides == out.strides for op in ins)
            and dense(out))


def flat_elementwise(k, out: Operand, ins: Sequence[Operand], body: Callable[[list], list],
                     in_place_first: bool = False) -> bool:
    """out[i] = body([in[i] for in in ins])[0] over the elements as one run-time loop, split into up to FLAT_TILES
    chunks; False (nothing emitted) when the operands are not flat_eligible. in_place_first: when the output's
    pointer equals input 0's, a copy of the loop reads input 0 through the output's pointer (LLVM's dependence
    analysis then proves the loop element-wise and vectorizes it instead of guarding it with an overlap check)."""
    if not flat_eligible(out, ins):
        return False
    work = k.generic_work(out.shape, len(ins))
    chunks = min(chunk_count(out.size, work), FLAT_TILES)
    b = k.b
    f = dict(zip(FIELDS, run_time_fields(k, (out.size, chunks))))

    def run(pointers: list, lo, hi) -> None:
        accesses = [Access(p, op.dtype, (1,)) for p, op in zip(pointers, ins)]
        target = Access(out.ptr, out.dtype, (1,))
        with k.for_range(hi, lo) as i:
            k.store(target, [i], body([k.load(a, [i]) for a in accesses])[0])

    def emit(lo, hi) -> None:
        pointers = [op.ptr for op in ins]
        if not (in_place_first and ins and np.dtype(ins[0].dtype).itemsize == np.dtype(out.dtype).itemsize):
            run(pointers, lo, hi)
            return
        i64 = ir.IntType(64)
        same = b.icmp_unsigned("==", b.ptrtoint(pointers[0], i64), b.ptrtoint(out.ptr, i64))
        with b.if_else(same) as (aliased, separate):
            with aliased:
                run([b.bitcast(out.ptr, pointers[0].type), *pointers[1:]], lo, hi)
            with separate:
                run(pointers, lo, hi)
    if chunks < 2:
        emit(k.index(0), f["elements"])
        return True
    with k.parallel_tiles([FLAT_TILES], work) as (t,):
        active, c = k.spread(t, f["chunks"], FLAT_TILES)
        with b.if_then(active):
            emit(*even_chunk(k, c, f["chunks"], f["elements"]))
    return True


def storage_order(op: Operand) -> list[int]:
    """The operand's dims from the outermost in storage to the innermost (ties, as size-1 dims: in dim order)."""
    return sorted(range(op.rank), key=lambda d: -op.strides[d])


def dense_in(op: Operand, order: Sequence[int]) -> bool:
    """Is the operand stored densely with its dims in `order` (outermost first; size-1 dims anywhere)?"""
    step = 1
    for d in reversed(order):
        if op.shape[d] > 1 and op.strides[d] != step:
            return False
        step *= op.shape[d]
    return True


def flat_concat(k, out: Operand, ins: Sequence[Operand], axis: int) -> bool:
    """Concat along `axis` as row copies: in storage order the output is `outer` rows of axis x inner elements and
    input j fills a run of each row; False (nothing emitted) unless every operand is static, numeric, a non-empty
    activation and dense in the output's dim order."""
    order = storage_order(out)
    if (out.size == 0 or not all(op.dyn is None and op.value is None and op.size > 0 and np.dtype(op.dtype).kind in "biuf"
                                 and dense_in(op, order) for op in [out, *ins])):
        return False
    at = order.index(axis)
    outer = int(np.prod([out.shape[d] for d in order[:at]], dtype=np.int64))
    inner = int(np.prod([out.shape[d] for d in order[at + 1:]], dtype=np.int64))
    runs = [x.shape[axis] * inner for x in ins]
    starts = np.cumsum([0, *runs[:-1]])
    work = float(out.size) * 2
    chunks = min(chunk_count(outer, work), FLAT_TILES)
    b = k.b
    f = run_time_fields(k, (outer, chunks, out.shape[axis] * inner, *runs, *starts))
    rows, row = f[0], f[2]
    target = Access(out.ptr, out.dtype, (1,))

    def copy(lo, hi) -> None:
        for j, x in enumerate(ins):
            run, start = f[3 + j], f[3 + len(ins) + j]
            source = Access(x.ptr, x.dtype, (1,))
            with k.for_range(hi, lo) as r:
                src, dst = b.mul(r, run), b.add(b.mul(r, row), start)
                with k.for_range(run) as i:
                    k.store(target, [b.add(dst, i)], k.load(source, [b.add(src, i)]))
    if chunks < 2:
        copy(k.index(0), rows)
        return True
    with k.parallel_tiles([FLAT_TILES], work) as (t,):
        active, c = k.spread(t, f[1], FLAT_TILES)
        with b.if_then(active):
            copy(*even_chunk(k, c, f[1], rows))
    return True
