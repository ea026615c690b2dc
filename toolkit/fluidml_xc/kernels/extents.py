"""Run-time extents: a symbolic dim (symbolic.Expr) as LLVM integer arithmetic over the symbols' values."""
from __future__ import annotations

from llvmlite import ir

from ..errors import InputError
from ..symbolic import emit


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


def broadcast_check(node, out, ins) -> None:
    """InputError unless each input dim is the output's dim (the same symbolic.Expr where it varies) or a
    build-time 1 that broadcasts: two run-time sizes are never broadcast against each other."""
    def dim(op, d: int):
        return op.dyn[d] if op.varies(d) else int(op.shape[d])
    for op in ins:
        shift = out.rank - op.rank
        for j in range(op.rank):
            have, want = dim(op, j), dim(out, j + shift)
            if have != want and not (isinstance(have, int) and have == 1):
                raise InputError(f"node {node.name!r} ({node.op_type}): dim {j} of {op.name!r} is {have} where the output's "
                                 f"is {want}; run-time sizes broadcast only against a fixed 1: give that dimension one "
                                 "value (--dim NAME=N)")
