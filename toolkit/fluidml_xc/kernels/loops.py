"""Loop and address helpers over a Kernel: folded index arithmetic, loops LLVM must not unroll, element
pointers, and runtime loop nests (plain, or with per-position tap ranges from build-time tables)."""
from __future__ import annotations

from contextlib import contextmanager

from llvmlite import ir


def offset(k, const_part: int, *terms):
    """const_part + sum(value * stride); int products fold into the constant (an int result when all are); a stride
    may be a run-time value (with an int value: ops/conv/winograd.py's run-time strides)."""
    total, acc = const_part, None
    for value, stride in terms:
        if isinstance(stride, ir.Value):
            if isinstance(value, int) and value == 0:
                continue
            term = stride if isinstance(value, int) and value == 1 else k.b.mul(k.as_index(value), stride, flags=("nsw",))
        elif stride == 0:
            continue
        elif isinstance(value, int):
            total += value * stride
            continue
        else:
            term = value if stride == 1 else k.b.mul(value, k.index(stride), flags=("nsw",))
        acc = term if acc is None else k.b.add(acc, term, flags=("nsw",))
    if acc is None:
        return total
    return acc if total == 0 else k.b.add(acc, k.index(total), flags=("nsw",))


@contextmanager
def loop(k, stop, start=0, vectorize: bool = True):
    """k.for_range that LLVM must not unroll: bodies here are unrolled already, more only bloats code.
    vectorize=False: nor vectorize it (a loop of a few taps, whose reduction LLVM would vectorize into a vector
    body, its remainder and their checks: more code and compile time for a loop that never runs 8 times)."""
    with k.for_range(stop, start) as i:
        yield i
    keep_rolled(k, i.incomings[-1][1].terminator, vectorize)


def keep_rolled(k, back_edge: ir.Instruction, vectorize: bool = True) -> None:
    """Tell LLVM not to unroll (nor, unless `vectorize`, vectorize) the loop whose back edge is `back_edge`."""
    module = k.module
    flags = (module.add_metadata([ir.MetaDataString(module, "llvm.loop.unroll.disable")]),)
    if not vectorize:
        flags += (module.add_metadata([ir.MetaDataString(module, "llvm.loop.vectorize.enable"), ir.Constant(ir.IntType(1), 0)]),)
    loop_id = module.add_metadata([*flags, ir.MetaDataString(module, f"loop{len(module.metadata)}")])
    loop_id.operands = (loop_id, *flags)
    back_edge.set_metadata("llvm.loop", loop_id)


def element(k, ptr, off):
    return k.b.gep(ptr, [k.index(off) if isinstance(off, int) else off], inbounds=True)


def nest(k, extents, fn, idx=()):
    """Runtime loops over `extents` (outermost first, ints or run-time values); fn(list of index values)."""
    if len(idx) == len(extents):
        fn(list(idx))
        return
    if not isinstance(extents[len(idx)], ir.Value) and extents[len(idx)] == 1:
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
