"""Scans: CumProd (running product along an axis), with CumSum's semantics: exclusive, reverse and
an axis input (a build-time constant, or at run time one loop per possible axis)."""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from ..codegen.scalar import const, llvm_type
from .reduce import _axis, _rows
from .registry import register


@register("CumProd")
def lower_cumprod(k):
    x = k.inputs[0]
    value = k.input_value(1)
    if value is not None:
        _cumprod(k, _axis(int(np.ravel(value)[0]), x.rank))
        return
    axis_op = k.inputs[1]
    i64 = ir.IntType(64)
    axis = k.s.cast(axis_op.dtype, np.int64, k.b.load(axis_op.ptr))
    axis = k.b.select(k.b.icmp_signed("<", axis, ir.Constant(i64, 0)), k.b.add(axis, ir.Constant(i64, x.rank)), axis)
    for a in range(x.rank):
        with k.b.if_then(k.b.icmp_signed("==", axis, ir.Constant(i64, a))):
            _cumprod(k, a)


def _cumprod(k, axis: int) -> None:
    x, out = k.inputs[0], k.outputs[0]
    dt, n = x.dtype, x.shape[axis]
    exclusive, reverse = int(k.attr("exclusive", 0)), int(k.attr("reverse", 0))
    x_acc, out_acc = x.identity_access(), out.identity_access()

    def row(ix, inner):
        acc = k.local(llvm_type(dt))
        k.b.store(const(dt, 1), acc)
        with k.for_range(n) as j:
            ix[axis] = k.b.sub(k.index(n - 1), j) if reverse else j
            before = k.b.load(acc)
            after = k.s.mul(dt, before, k.load(x_acc, ix))
            k.store(out_acc, ix, before if exclusive else after)
            k.b.store(after, acc)
    _rows(k, x.shape, x.strides, [axis], row)
