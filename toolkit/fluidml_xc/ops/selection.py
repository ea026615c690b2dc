"""Selection ops: TopK (values and int64 indices of the K best elements along an axis), Shrink.

TopK picks the K elements of each row one after another: pass j scans the row for the best element
that comes strictly after pass j-1's pick in the total order (value first, then lower index first),
so ties are broken by the lower index as ONNX requires and the output is sorted. O(n * K) per row,
no scratch memory; K must be a build-time constant (an attribute before opset 10, an input after).
"""
from __future__ import annotations

import numpy as np

from ..codegen.scalar import const, is_float, llvm_type
from ..errors import InputError
from .reduce import _axis, _rows
from .registry import register


@register("TopK")
def lower_topk(k):
    x, values, indices = k.inputs[0], k.outputs[0], k.outputs[1]
    r, dt = x.rank, x.dtype
    axis = _axis(int(k.attr("axis", -1)), r)
    if k.graph.opset < 10:
        count = int(k.attr("k"))
    else:
        value = k.input_value(1)
        if value is None:
            raise InputError(f"node {k.node.name!r} (TopK): K must be a build-time constant")
        count = int(np.ravel(value)[0])
    largest = int(k.attr("largest", 1))
    n = x.shape[axis]
    if count == 0 or x.size == 0:
        return
    x_acc = x.identity_access()
    v_acc = values.identity_access() if values is not None else None
    i_acc = indices.identity_access() if indices is not None else None
    idx_dt = np.dtype(f"int{k.idx_t.width}")
    better_op, worse_op = (">", "<") if largest else ("<", ">")
    b = k.b

    def row(ix, inner):
        prev_v = k.local(llvm_type(dt), const(dt, 0))
        prev_i = k.local(k.idx_t, k.index(-1))
        best_v = k.local(llvm_type(dt), const(dt, 0))
        best_i = k.local(k.idx_t, k.index(-1))
        with k.for_range(count) as j:
            b.store(k.index(-1), best_i)
            first = b.icmp_signed("==", j, k.index(0))
            pv, pi = b.load(prev_v), b.load(prev_i)
            with k.for_range(n) as i:
                ix[axis] = i
                v = k.load(x_acc, ix)
                # strictly after the previous pick: worse value, or equal value at a higher index
                after = b.or_(k.s.cmp(dt, worse_op, v, pv), b.and_(k.s.cmp(dt, "==", v, pv), b.icmp_signed(">", i, pi)))
                bi = b.load(best_i)
                take = b.and_(b.or_(first, after),
                              b.or_(b.icmp_signed("<", bi, k.index(0)), k.s.cmp(dt, better_op, v, b.load(best_v))))
                b.store(b.select(take, v, b.load(best_v)), best_v)
                b.store(b.select(take, i, bi), best_i)
            # a row with NaNs may leave no candidate: fall back to the first index not taken
            bi = b.load(best_i)
            none = b.icmp_signed("<", bi, k.index(0))
            bi = b.select(none, b.select(first, k.index(0), b.add(pi, k.index(1))), bi)
            bi = b.select(b.icmp_signed(">=", bi, k.index(n)), k.index(n - 1), bi)
            ix[axis] = bi
            bv = k.load(x_acc, ix)
            b.store(bv, prev_v)
            b.store(bi, prev_i)
            ix[axis] = j
            if v_acc is not None:
                k.store(v_acc, ix, bv)
            if i_acc is not None:
                k.store(i_acc, ix, k.s.cast(idx_dt, indices.dtype, bi))
        ix[axis] = k.index(0)
    _rows(k, x.shape, x.strides, [axis], row)


@register("Shrink")
def lower_shrink(k):
    """y = x + bias where x < -lambd, x - bias where x > lambd, else 0."""
    x, out = k.inputs[0], k.outputs[0]
    dt = x.dtype
    bias, lambd = float(k.attr("bias", 0.0)), float(k.attr("lambd", 0.5))
    if not out.size:
        return
    b = k.b

    def fn(v):
        x0 = v[0]
        if is_float(dt):
            lo, hi = const(dt, -lambd), const(dt, lambd)
            low, high = k.s.cmp(dt, "<", x0, lo), k.s.cmp(dt, ">", x0, hi)
        else:
            # integers: compare in double so fractional thresholds keep their meaning
            xf = k.s.cast(dt, np.float64, x0)
            low = k.s.cmp(np.float64, "<", xf, const(np.float64, -lambd))
            high = k.s.cmp(np.float64, ">", xf, const(np.float64, lambd))
        bc = const(dt, bias)
        return b.select(low, k.s.add(dt, x0, bc), b.select(high, k.s.sub(dt, x0, bc), const(dt, 0)))
    k.elementwise(fn, out, [x])
