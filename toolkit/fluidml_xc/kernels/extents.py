"""Run-time extents: a symbolic dim (symbolic.Expr) as LLVM integer arithmetic over the symbols' values."""
from __future__ import annotations

import itertools
import math

from llvmlite import ir

from ..errors import InputError
from ..symbolic import emit, evaluate, free_symbols


def dim_value(k, d) -> int | ir.Value:
    """`d` (an int or symbolic.Expr) in kernel `k`'s index type: symbols are loaded from `k.syms`."""
    b, idx = k.b, k.idx_t

    def sym(name: str) -> ir.Value:
        v = b.load(b.gep(k.syms, [ir.Constant(ir.IntType(32), k.sym_index[name])]))
        return v if idx.width == 64 else b.trunc(v, idx)

    def value(x) -> ir.Value:
        return x if isinstance(x, ir.Value) else ir.Constant(idx, int(x))

    def add(xs) -> ir.Value:
        out = value(xs[0])
        for x in xs[1:]:
            out = b.add(out, value(x))
        return out

    def floordiv(xs) -> ir.Value:
        a, c = value(xs[0]), value(xs[1])
        below = b.icmp_signed("<", b.srem(a, c), ir.Constant(idx, 0))
        return b.sub(b.sdiv(a, c), b.zext(below, idx))

    ops = {
        "add": add,
        "mul": lambda xs: b.mul(value(xs[0]), value(xs[1])),
        "floordiv": floordiv,
        "min": lambda xs: k.imin(value(xs[0]), value(xs[1])),
        "max": lambda xs: k.imax(value(xs[0]), value(xs[1])),
    }
    return emit(d, sym, ops)


EQUAL_CHECK_LIMIT = 4096
"""Two different expressions of a dim are compared at every point of their symbols' ranges up to this many points."""


def same_dim(a, b, ranges) -> bool:
    """Are dims `a` and `b` (ints or symbolic.Expr) equal at every size in `ranges` (Graph.symbols)? The same
    expression, or, for a few points, equal values at each of them (min(W, 64) is W over W=1..64)."""
    if a == b:
        return True
    names = sorted(free_symbols([a, b]))
    if not names or any(n not in ranges for n in names):
        return False
    spans = [range(ranges[n].lo, ranges[n].hi + 1) for n in names]
    if math.prod(len(r) for r in spans) > EQUAL_CHECK_LIMIT:
        return False
    return all(evaluate(a, env) == evaluate(b, env) for env in (dict(zip(names, v)) for v in itertools.product(*spans)))


def broadcast_check(node, out, ins, ranges) -> None:
    """InputError unless each input dim is the output's dim (equal at every size in `ranges` where it varies) or a
    build-time 1 that broadcasts: two run-time sizes are never broadcast against each other."""
    def dim(op, d: int):
        return op.dyn[d] if op.varies(d) else int(op.shape[d])
    for op in ins:
        shift = out.rank - op.rank
        for j in range(op.rank):
            have, want = dim(op, j), dim(out, j + shift)
            if not (isinstance(have, int) and have == 1) and not same_dim(have, want, ranges):
                raise InputError(f"node {node.name!r} ({node.op_type}): dim {j} of {op.name!r} is {have} where the output's "
                                 f"is {want}; run-time sizes broadcast only against a fixed 1: give that dimension one "
                                 "value (--dim NAME=N)")
