"""Selection ops: TopK (values and int64 indices of the K best elements along an axis), Shrink.

TopK with K <= PARTIAL_MAX keeps a sorted buffer of the K best so far on the stack and scans each row
once: an element enters only when it beats the buffer's last entry, finds its place by binary search
and the worse entries move down one slot (memmove). Elements arrive in index order and only a strictly better value passes another, so ties
keep the lower index first as ONNX requires; NaN ranks above every number, as in ONNX Runtime. O(n) compares per row plus
the insertions (about K log(n / K) of them on unordered data). A larger K picks the elements one
pass at a time: pass j scans the row for the best element strictly after pass j-1's pick in the same
order (NaN above numbers, ties by index), O(n * K), no scratch memory. K must be a build-time constant (an attribute before opset 10,
an input after).
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from ..errors import InputError, NeedsConstant
from ..kernels import lowp
from ..kernels.rows import each_row, normalize_axis
from ..kernels.scalar import const, is_float, llvm_type
from ..opspec import register
from ..symbolic import bounds


@register("TopK", heavy=True, axis_attr="dim", runtime_extents=True)
def lower_topk(k):
    x, values, indices = k.inputs[0], k.outputs[0], k.outputs[1]
    r, dt = x.rank, x.dtype
    axis = normalize_axis(int(k.attr("axis", -1)), r)
    if k.graph.opset < 10:
        count = int(k.attr("k"))
    else:
        value = k.input_value(1)
        if value is None:
            raise NeedsConstant(f"node {k.node.name!r} (TopK): K must be a build-time constant", k.node.name)
        count = int(np.ravel(value)[0])
    largest = int(k.attr("largest", 1))
    n = x.shape[axis]
    if count < 0 or count > n:
        raise InputError(f"node {k.node.name!r} (TopK): K = {count} is outside [0, {n}] (the axis' length)")
    ext = k.extents(x) if k.dynamic else None
    if ext is not None and x.varies(axis) and count > bounds(x.dyn[axis], k.graph.symbols)[0]:
        raise InputError(f"node {k.node.name!r} (TopK): K = {count} is above the axis' length {x.dyn[axis]} at its "
                         f"minimum {bounds(x.dyn[axis], k.graph.symbols)[0]}: raise the range's minimum to {count} or more")
    if count == 0 or x.size == 0:
        return
    if count <= PARTIAL_MAX:
        _topk_partial(k, x, values, indices, axis, count, largest, ext)
        return
    n = n if ext is None else ext[axis]
    x_acc = x.identity_access()
    v_acc = values.identity_access() if values is not None else None
    i_acc = indices.identity_access() if indices is not None else None
    idx_dt = np.dtype(f"int{k.idx_t.width}")
    op = ">" if largest else "<"
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
                # strictly after the previous pick: worse value, or the same value at a higher index
                after = b.or_(_better(k, dt, op, pv, v), b.and_(_same(k, dt, v, pv), b.icmp_signed(">", i, pi)))
                bi = b.load(best_i)
                take = b.and_(b.or_(first, after), b.or_(b.icmp_signed("<", bi, k.index(0)), _better(k, dt, op, v, b.load(best_v))))
                b.store(b.select(take, v, b.load(best_v)), best_v)
                b.store(b.select(take, i, bi), best_i)
            bi = b.load(best_i)
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
    each_row(k, x.shape, x.strides, [axis], row, ext)


def _better(k, dt, op: str, v, w):
    """v ranks before w: `op` on numbers, NaN above every number (first for largest, last for smallest),
    as ONNX Runtime orders them."""
    b = k.b
    if not is_float(dt):
        return k.s.cmp(dt, op, v, w)
    nan_v, nan_w = b.fcmp_unordered("uno", v, v), b.fcmp_unordered("uno", w, w)
    if op == ">":
        return b.or_(b.fcmp_ordered(">", v, w), b.and_(nan_v, b.not_(nan_w)))
    return b.or_(b.fcmp_ordered("<", v, w), b.and_(nan_w, b.not_(nan_v)))


def _same(k, dt, v, w):
    if not is_float(dt):
        return k.s.cmp(dt, "==", v, w)
    b = k.b
    return b.or_(b.fcmp_ordered("==", v, w), b.and_(b.fcmp_unordered("uno", v, v), b.fcmp_unordered("uno", w, w)))


PARTIAL_MAX = 256
"""The largest K kept in a stack buffer (K * (element + index) bytes per row)."""


def _topk_partial(k, x, values, indices, axis: int, count: int, largest: int, ext=None) -> None:
    """`ext`: x's run-time extents when a dim varies (the vector scan is chosen at the capacity)."""
    dt, b = x.dtype, k.b
    n = x.shape[axis]
    x_acc = x.identity_access()
    v_acc = values.identity_access() if values is not None else None
    i_acc = indices.identity_access() if indices is not None else None
    idx_dt = np.dtype(f"int{k.idx_t.width}")
    op = ">" if largest else "<"
    lanes = k.lanes(dt)
    vectorized = x.strides[axis] == 1 and not lowp.is_lowp(dt) and lanes > 1 and n - count >= lanes

    def row(ix, inner):
        with b.goto_entry_block():
            buf_v = b.alloca(llvm_type(dt), size=count)
            buf_i = b.alloca(k.idx_t, size=count)
        last = k.index(count - 1)

        i8p = ir.IntType(8).as_pointer()
        memmove = k.module.declare_intrinsic("llvm.memmove", [i8p, i8p, ir.IntType(64)])
        v_bytes, i_bytes = np.dtype(dt).itemsize, k.idx_t.width // 8

        def sink(v, i, start):
            """Insert (v, i) at its place in buf[0..start]: a binary search for the first entry v beats
            (equal values keep their earlier place), then the entries from there move down one slot."""
            lo, hi = k.local(k.idx_t, k.index(0)), k.local(k.idx_t, start)
            head = b.append_basic_block("topk.search")
            body = b.append_basic_block("topk.halve")
            done = b.append_basic_block("topk.place")
            b.branch(head)
            b.position_at_end(head)
            b.cbranch(b.icmp_signed("<", b.load(lo), b.load(hi)), body, done)
            b.position_at_end(body)
            mid = b.ashr(b.add(b.load(lo), b.load(hi)), k.index(1))
            beats = _better(k, dt, op, v, b.load(b.gep(buf_v, [mid])))
            b.store(b.select(beats, b.load(lo), b.add(mid, k.index(1))), lo)
            b.store(b.select(beats, mid, b.load(hi)), hi)
            b.branch(head)
            b.position_at_end(done)
            pos = b.load(lo)
            count = b.zext(b.sub(start, pos), ir.IntType(64)) if k.idx_t.width < 64 else b.sub(start, pos)
            for buf, size in ((buf_v, v_bytes), (buf_i, i_bytes)):
                src = b.bitcast(b.gep(buf, [pos]), i8p)
                dst = b.bitcast(b.gep(buf, [b.add(pos, k.index(1))]), i8p)
                b.call(memmove, [dst, src, b.mul(count, ir.Constant(ir.IntType(64), size)), ir.Constant(ir.IntType(1), 0)])
            b.store(v, b.gep(buf_v, [pos]))
            b.store(i, b.gep(buf_i, [pos]))

        def element(i):
            ix[axis] = i
            return k.load(x_acc, ix)

        with k.for_range(count) as i:  # the first K elements, sorted
            sink(element(i), i, i)

        def step(i):
            v = element(i)
            with b.if_then(_better(k, dt, op, v, b.load(b.gep(buf_v, [last])))):
                sink(v, i, last)

        tail_from = count
        if vectorized:
            # a vector compare against the K-th best so far skips the blocks where nothing enters
            # (unordered compares let NaN through to the exact scalar test)
            ix[axis] = k.index(0)
            base = k.address(x_acc, ix)
            blocks = (n - count) // lanes if ext is None else b.udiv(b.sub(k.as_index(ext[axis]), k.index(count)), k.index(lanes))
            with k.for_range(blocks) as blk:
                i0 = b.add(k.index(count), b.mul(blk, k.index(lanes)))
                vec = k.vload(base, dt, i0, lanes)
                threshold = k.splat(b.load(b.gep(buf_v, [last])), lanes)
                if is_float(dt):
                    hit = b.fcmp_unordered(op, vec, threshold)
                else:
                    hit = k.s.cmp(dt, op, vec, threshold)
                any_hit = b.icmp_unsigned("!=", b.bitcast(hit, ir.IntType(lanes)), ir.Constant(ir.IntType(lanes), 0))
                with b.if_then(any_hit, likely=False):
                    with k.for_range(lanes) as t:
                        step(b.add(i0, t))
            tail_from = count + blocks * lanes if ext is None else b.add(k.index(count), b.mul(blocks, k.index(lanes)))
        with k.for_range(n if ext is None else ext[axis], start=tail_from) as i:
            step(i)
        with k.for_range(count) as j:
            ix[axis] = j
            if v_acc is not None:
                k.store(v_acc, ix, b.load(b.gep(buf_v, [j])))
            if i_acc is not None:
                k.store(i_acc, ix, k.s.cast(idx_dt, indices.dtype, b.load(b.gep(buf_i, [j]))))
        ix[axis] = k.index(0)
    each_row(k, x.shape, x.strides, [axis], row, ext)


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
