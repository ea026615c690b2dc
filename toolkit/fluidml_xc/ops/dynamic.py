"""Ops whose output shape depends on input data: NonZero, Compress, Unique, NonMaxSuppression.

Each gets a static upper bound for its outputs (`bound_outputs`, called by the frontend) and writes,
at run time, its outputs row-major and contiguous from the start of their (bound-sized) buffers plus
their actual dims into the dims slots the emitter passes (`Kernel.dims_out`); see frontend/shapes.py for the
contract and the arena tail. Kernels that sort get scratch memory (`scratch_bytes`, `Kernel.scratch`).

- NonZero: bound (rank, numel); two passes (count, then write with the actual row stride).
- Compress: bound = the input's extent along axis (numel without axis), capped by len(condition);
  a constant condition gives a static shape.
- Unique: bound numel (or the extent along axis) unique entries; a stable merge sort of the entries
  (lexicographic for slices along axis; NaN after numbers, NaNs equal, as np.unique) gives the groups
  of equal entries in ascending order, each starting at its first occurrence; sorted=0 reorders the
  groups by first occurrence (a second merge sort over the groups).
- NonMaxSuppression: bound num_batches * num_classes * min(max_output_boxes_per_class, num_boxes)
  rows when max_output_boxes_per_class is a constant, else num_batches * num_classes * num_boxes.
  Candidates over score_threshold are merge-sorted by score (descending; equal scores keep the lower
  box index first, as onnx.reference), then kept greedily unless their IoU with a kept box of the
  class exceeds iou_threshold; the IoU arithmetic is onnx.reference's, in the boxes' dtype.
"""
from __future__ import annotations

from contextlib import contextmanager

import numpy as np
from llvmlite import ir

from ..errors import InputError
from ..kernels.kernel import row_major_strides
from ..kernels.scalar import const, is_float
from ..opspec import register
from ..ir import is_onnx_domain

I64 = ir.IntType(64)


# --------------------------------------------------------------------------------------------------
# bounds (frontend) and scratch (emitter)
# --------------------------------------------------------------------------------------------------
def _axis_attr(attrs: dict, rank: int, where: str):
    axis = attrs.get("axis")
    if axis is None:
        return None
    axis = int(axis)
    if not -rank <= axis < max(rank, 1):
        raise InputError(f"node {where!r}: axis {axis} is out of range for rank {rank}")
    return axis % max(rank, 1)


def bound_outputs(op_type: str, attrs: dict, inputs: list, opset: int, where: str, max_dims=None,
                 declared=None) -> list[tuple]:
    """[(dtype, bound shape, data-dependent dims)] per output of a node of `op_type` (`max_dims`: the --max-dim
    values given for the node's or its outputs' names, `declared`: the shapes the model declares; these bounds take
    neither)."""
    x = inputs[0]
    if x is None:
        raise InputError(f"node {where!r} ({op_type}) has no input")
    shape, numel = tuple(x.shape), int(np.prod(x.shape, dtype=np.int64))
    i64 = np.dtype(np.int64)
    if op_type == "NonZero":
        return [(i64, (max(len(shape), 1), numel), (1,))]
    if op_type == "Compress":
        cond = inputs[1]
        axis = _axis_attr(attrs, len(shape), where)
        extent = numel if axis is None else shape[axis]
        extent = min(extent, cond.size)
        dims = (0,) if axis is None else (axis,)
        if cond.is_const:  # the count is known at build time
            extent, dims = int(np.count_nonzero(np.ravel(cond.value)[:extent])), ()
        out = (extent,) if axis is None else shape[:axis] + (extent,) + shape[axis + 1:]
        return [(x.dtype, out, dims)]
    if op_type == "Unique":
        axis = _axis_attr(attrs, len(shape), where)
        n = numel if axis is None else shape[axis]
        y = (n,) if axis is None else shape
        return [(x.dtype, y, (0 if axis is None else axis,)), (i64, (n,), (0,)), (i64, (n,), ()), (i64, (n,), (0,))]
    if op_type == "NonMaxSuppression":
        scores = inputs[1] if len(inputs) > 1 else None
        if len(shape) != 3 or scores is None or len(scores.shape) != 3:
            raise InputError(f"node {where!r} (NonMaxSuppression): boxes must be [batches, boxes, 4] and scores [batches, classes, boxes]")
        batches, boxes, classes = shape[0], shape[1], scores.shape[1]
        per_class = boxes
        m = inputs[2] if len(inputs) > 2 else None
        if m is None or m.size == 0:
            per_class = 0
        elif m.is_const:
            per_class = min(max(int(np.ravel(m.value)[0]), 0), boxes)
        return [(i64, (batches * classes * per_class, 3), (0,))]
    raise InputError(f"node {where!r}: {op_type} has no bounded dynamic shape")


def scratch_bytes(graph, node) -> int:
    """Scratch memory the kernel of `node` needs (0 for most ops)."""
    if not is_onnx_domain(node.domain) or node.op_type not in ("Unique", "NonMaxSuppression"):
        return 0
    x = graph.tensors[node.inputs[0]]
    if node.op_type == "NonMaxSuppression":
        return 3 * 8 * max(x.shape[1], 1)
    axis = node.attrs.get("axis")
    n = x.size if axis is None else x.shape[int(axis) % len(x.shape)]
    return 7 * 8 * max(n, 1)


# --------------------------------------------------------------------------------------------------
# IR helpers
# --------------------------------------------------------------------------------------------------
def _i64(k, v):
    if isinstance(v, int):
        return ir.Constant(I64, v)
    if v.type.width < 64:
        return k.b.sext(v, I64)
    return v


def _set_dims(k, i: int, values) -> None:
    ptr = k.dims_out.get(i)
    if ptr is None:
        return
    for d, v in enumerate(values):
        k.b.store(_i64(k, v), k.b.gep(ptr, [k.index(d)], inbounds=True))


def _inc(k, slot, by=1):
    k.b.store(k.b.add(k.b.load(slot), k.index(by)), slot)


@contextmanager
def _while(k, cond):
    """while cond(): body (cond builds its i1 in the loop header)."""
    b = k.b
    header = k.fn.append_basic_block("while")
    body = k.fn.append_basic_block("while_body")
    done = k.fn.append_basic_block("while_done")
    b.branch(header)
    b.position_at_end(header)
    b.cbranch(cond(), body, done)
    b.position_at_end(body)
    yield
    b.branch(header)
    b.position_at_end(done)


def _scratch(k, slot: int, n: int):
    """The slot-th array of n index-typed entries in the kernel's scratch (8 bytes per entry reserved)."""
    base = k.b.gep(k.scratch, [k.index(slot * 8 * max(n, 1))], inbounds=True)
    return k.b.bitcast(base, k.idx_t.as_pointer())


def _aget(k, arr, i):
    return k.b.load(k.b.gep(arr, [i], inbounds=True))


def _aset(k, arr, i, v):
    k.b.store(v, k.b.gep(arr, [i], inbounds=True))


def _imin(k, a, b):
    return k.b.select(k.b.icmp_signed("<", a, b), a, b)


def _merge_sort(k, arr, tmp, count, right_first) -> None:
    """Stable bottom-up merge sort of arr[0:count] (index-typed) with tmp as the second buffer;
    right_first(r, l) -> i1: element r must come before l. The result ends in arr."""
    b = k.b
    src, dst = k.local(arr.type, arr), k.local(arr.type, tmp)
    width = k.local(k.idx_t, k.index(1))
    with _while(k, lambda: b.icmp_signed("<", b.load(width), count)):
        w = b.load(width)
        s, d = b.load(src), b.load(dst)
        lo = k.local(k.idx_t, k.index(0))
        with _while(k, lambda: b.icmp_signed("<", b.load(lo), count)):
            l0 = b.load(lo)
            mid = _imin(k, b.add(l0, w), count)
            hi = _imin(k, b.add(mid, w), count)
            i, j = k.local(k.idx_t, l0), k.local(k.idx_t, mid)
            with k.for_range(hi, l0) as t:
                iv, jv = b.load(i), b.load(j)
                left_ok = b.icmp_signed("<", iv, mid)
                right_ok = b.icmp_signed("<", jv, hi)
                iv_safe = b.select(left_ok, iv, l0)
                jv_safe = b.select(right_ok, jv, l0)
                le, re = _aget(k, s, iv_safe), _aget(k, s, jv_safe)
                take_right = b.and_(right_ok, b.or_(b.not_(left_ok), right_first(re, le)))
                _aset(k, d, t, b.select(take_right, re, le))
                b.store(b.select(take_right, iv, b.add(iv, k.index(1))), i)
                b.store(b.select(take_right, b.add(jv, k.index(1)), jv), j)
            b.store(b.add(l0, b.add(w, w)), lo)
        b.store(d, src)
        b.store(s, dst)
        b.store(b.add(w, w), width)
    final = b.load(src)
    with b.if_then(b.icmp_unsigned("!=", b.ptrtoint(final, I64), b.ptrtoint(arr, I64))):
        with k.for_range(count) as t:
            _aset(k, arr, t, _aget(k, final, t))


def _row_major(op, what: str, k) -> None:
    if op.size and tuple(op.strides) != row_major_strides(op.shape):
        raise InputError(f"node {k.node.name!r} ({k.node.op_type}): {what} must be stored row-major")


def _flat_index(k, idx, shape) -> ir.Value:
    total = k.index(0)
    for i, s in zip(idx, row_major_strides(shape)):
        if s and i is not None:
            total = k.b.add(total, i if s == 1 else k.b.mul(i, k.index(s)))
    return total


# --------------------------------------------------------------------------------------------------
# NonZero
# --------------------------------------------------------------------------------------------------
@register("NonZero", since=9, heavy=True, output_bound=bound_outputs)
def lower_nonzero(k):
    x, out = k.inputs[0], k.outputs[0]
    b = k.b
    shape = x.shape if x.rank else (1,)
    rank = len(shape)
    acc = x.identity_access() if x.rank else x.access([], 1)
    count = k.local(k.idx_t, k.index(0))
    if x.size:
        def counting(ix):
            with b.if_then(k.s.truth(x.dtype, k.load(acc, ix))):
                _inc(k, count)
        k.loops(shape, list(range(rank)), [None] * rank, counting)
    n = b.load(count)
    if x.size and out is not None:
        j = k.local(k.idx_t, k.index(0))
        idx_dt = np.dtype(f"int{k.idx_t.width}")

        def writing(ix):
            with b.if_then(k.s.truth(x.dtype, k.load(acc, ix))):
                jj = b.load(j)
                for d in range(rank):
                    at = b.add(b.mul(k.index(d), n), jj)
                    k.store_ptr(k.s.cast(idx_dt, np.int64, ix[d]), out.ptr, np.int64, at)
                b.store(b.add(jj, k.index(1)), j)
        k.loops(shape, list(range(rank)), [None] * rank, writing)
    _set_dims(k, 0, [rank, n])


# --------------------------------------------------------------------------------------------------
# Compress
# --------------------------------------------------------------------------------------------------
@register("Compress", since=9, output_bound=bound_outputs, axis_attr="dim")
def lower_compress(k):
    x, cond, out = k.inputs[0], k.inputs[1], k.outputs[0]
    b = k.b
    axis = _axis_attr(k.node.attrs, x.rank, k.node.name)
    if out is None:
        return
    xacc = x.identity_access() if x.rank else x.access([], 1)
    cacc = cond.identity_access() if cond.rank else cond.access([], 1)

    def taken(i):
        return k.s.truth(cond.dtype, k.load(cacc, [i]))

    if axis is None:
        shape = x.shape if x.rank else (1,)
        extent = min(x.size, cond.size)
        j = k.local(k.idx_t, k.index(0))
        if extent:
            lin = k.local(k.idx_t, k.index(0))

            def body(ix):
                i = b.load(lin)
                with b.if_then(b.icmp_signed("<", i, k.index(extent))):
                    with b.if_then(taken(i)):
                        jj = b.load(j)
                        k.store_ptr(k.load(xacc, ix), out.ptr, out.dtype, jj)
                        b.store(b.add(jj, k.index(1)), j)
                b.store(b.add(i, k.index(1)), lin)
            k.loops(shape, list(range(len(shape))), [None] * len(shape), body)
        _set_dims(k, 0, [b.load(j)])
        return
    shape = x.shape
    extent = min(shape[axis], cond.size)
    count = k.local(k.idx_t, k.index(0))
    if extent:
        with k.for_range(extent) as i:
            with b.if_then(taken(i)):
                _inc(k, count)
    n = b.load(count)
    outer_shape, inner_shape = shape[:axis], shape[axis + 1:]
    inner = int(np.prod(inner_shape, dtype=np.int64))
    if extent and x.size:
        ix: list = [None] * x.rank
        j = k.local(k.idx_t, k.index(0))

        def outer_body(ix):
            olin = _flat_index(k, ix[:axis], outer_shape)
            b.store(k.index(0), j)
            with k.for_range(extent) as i:
                with b.if_then(taken(i)):
                    base = b.mul(b.add(b.mul(olin, n), b.load(j)), k.index(inner))
                    ix[axis] = i

                    def inner_body(ix2):
                        ilin = _flat_index(k, ix2[axis + 1:], inner_shape)
                        k.store_ptr(k.load(xacc, ix2), out.ptr, out.dtype, b.add(base, ilin))
                    k.loops(shape, list(range(axis + 1, x.rank)), ix, inner_body)
                    _inc(k, j)
        k.loops(shape, list(range(axis)), ix, outer_body)
    _set_dims(k, 0, [shape[d] if d != axis else n for d in range(x.rank)])


# --------------------------------------------------------------------------------------------------
# Unique
# --------------------------------------------------------------------------------------------------
@register("Unique", since=11, heavy=True, output_bound=bound_outputs)
def lower_unique(k):
    x = k.inputs[0]
    y, indices, inverse, counts = (list(k.outputs) + [None] * 4)[:4]
    b = k.b
    _row_major(x, "the input", k)
    axis = _axis_attr(k.node.attrs, x.rank, k.node.name)
    sort = int(k.attr("sorted", 1))
    if axis is None:
        outer, n, inner = 1, x.size, 1
    else:
        outer = int(np.prod(x.shape[:axis], dtype=np.int64))
        n, inner = x.shape[axis], int(np.prod(x.shape[axis + 1:], dtype=np.int64))
    m = outer * inner
    dt = x.dtype
    u = k.local(k.idx_t, k.index(0))
    if n and m:
        first, cnt, inv, perm, tmp, rank, order = (_scratch(k, s, n) for s in range(7))

        def element(i, e):
            """Element e of entry i (row-major over the dims other than axis)."""
            if inner == 1:
                at = b.add(b.mul(e, k.index(n)), i)
            else:
                o, r = b.sdiv(e, k.index(inner)), b.srem(e, k.index(inner))
                at = b.add(b.mul(b.add(b.mul(o, k.index(n)), i), k.index(inner)), r)
            return k.load_ptr(x.ptr, dt, at)

        def compare(i, j):
            """-1, 0 or 1 as entry i is less than, equal to or greater than entry j (lexicographic)."""
            res = k.local(k.idx_t, k.index(0))
            b.store(k.index(0), res)
            with k.for_range(m) as e:
                with b.if_then(b.icmp_signed("==", b.load(res), k.index(0))):
                    a, c = element(i, e), element(j, e)
                    lt, gt = k.s.cmp(dt, "<", a, c), k.s.cmp(dt, ">", a, c)
                    if is_float(dt):  # NaN after every number, NaNs equal (np.unique's equal_nan)
                        an, cn = k.s.cmp(dt, "!=", a, a), k.s.cmp(dt, "!=", c, c)
                        lt = b.or_(lt, b.and_(b.not_(an), cn))
                        gt = b.or_(gt, b.and_(an, b.not_(cn)))
                    b.store(b.select(lt, k.index(-1), b.select(gt, k.index(1), k.index(0))), res)
            return b.load(res)

        # entries sorted (stable: equal entries keep their order, so a group starts at its first occurrence)
        with k.for_range(n) as i:
            _aset(k, order, i, i)
        _merge_sort(k, order, tmp, k.index(n),
                    lambda rv, lv: b.icmp_signed("<", compare(rv, lv), k.index(0)))
        # groups of equal entries, in ascending order
        with k.for_range(n) as t:
            e = _aget(k, order, t)
            if n > 1:
                starts = b.or_(b.icmp_signed("==", t, k.index(0)),
                               b.icmp_signed("!=", compare(e, _aget(k, order, b.select(b.icmp_signed(">", t, k.index(0)),
                                                                                       b.sub(t, k.index(1)), t))), k.index(0)))
            else:
                starts = ir.Constant(ir.IntType(1), 1)
            with b.if_then(starts):
                uu = b.load(u)
                _aset(k, first, uu, e)
                _aset(k, cnt, uu, k.index(0))
                b.store(b.add(uu, k.index(1)), u)
            g = b.sub(b.load(u), k.index(1))
            _aset(k, cnt, g, b.add(_aget(k, cnt, g), k.index(1)))
            _aset(k, inv, e, g)
        total = b.load(u)
        with k.for_range(total) as r:
            _aset(k, perm, r, r)
        if not sort:  # groups in first-occurrence order
            _merge_sort(k, perm, tmp, total,
                        lambda rv, lv: b.icmp_signed("<", _aget(k, first, rv), _aget(k, first, lv)))
        idx_dt = np.dtype(f"int{k.idx_t.width}")
        with k.for_range(total) as r:
            p = _aget(k, perm, r)
            _aset(k, rank, p, r)
            src = _aget(k, first, p)
            if indices is not None:
                k.store_ptr(k.s.cast(idx_dt, np.int64, src), indices.ptr, np.int64, r)
            if counts is not None:
                k.store_ptr(k.s.cast(idx_dt, np.int64, _aget(k, cnt, p)), counts.ptr, np.int64, r)
            if y is not None:
                with k.for_range(m) as e:
                    if inner == 1:
                        at = b.add(b.mul(e, total), r)
                    else:
                        o, rr = b.sdiv(e, k.index(inner)), b.srem(e, k.index(inner))
                        at = b.add(b.mul(b.add(b.mul(o, total), r), k.index(inner)), rr)
                    k.store_ptr(element(src, e), y.ptr, y.dtype, at)
        if inverse is not None:
            with k.for_range(n) as i:
                k.store_ptr(k.s.cast(idx_dt, np.int64, _aget(k, rank, _aget(k, inv, i))), inverse.ptr, np.int64, i)
    total = b.load(u)
    if axis is None:
        _set_dims(k, 0, [total])
    else:
        _set_dims(k, 0, [x.shape[d] if d != axis else total for d in range(x.rank)])
    _set_dims(k, 1, [total])
    _set_dims(k, 3, [total])


# --------------------------------------------------------------------------------------------------
# NonMaxSuppression
# --------------------------------------------------------------------------------------------------
@register("NonMaxSuppression", since=10, heavy=True, output_bound=bound_outputs)
def lower_nms(k):
    boxes, scores = k.inputs[0], k.inputs[1]
    ins = list(k.inputs) + [None] * 3
    m_op, iou_op, th_op = ins[2], ins[3], ins[4]
    out = k.outputs[0]
    b = k.b
    center = int(k.attr("center_point_box", 0))
    batches, nboxes, _ = boxes.shape
    classes = scores.shape[1]
    dt = boxes.dtype
    sdt = scores.dtype
    rows = k.local(k.idx_t, k.index(0))
    present = lambda op: op is not None and op.size > 0  # noqa: E731
    if batches and classes and nboxes and present(m_op) and out is not None:
        mval = k.s.cast(m_op.dtype, np.int64, k.load_ptr(m_op.ptr, m_op.dtype, 0))
        mval = b.select(b.icmp_signed("<", mval, ir.Constant(I64, 0)), ir.Constant(I64, 0), mval)
        mval = b.select(b.icmp_signed("<", mval, ir.Constant(I64, nboxes)), mval, ir.Constant(I64, nboxes))
        limit = mval if k.idx_t.width == 64 else b.trunc(mval, k.idx_t)
        iou_th = k.s.cast(iou_op.dtype, dt, k.load_ptr(iou_op.ptr, iou_op.dtype, 0)) if present(iou_op) else const(dt, 0)
        score_th = k.s.cast(th_op.dtype, sdt, k.load_ptr(th_op.ptr, th_op.dtype, 0)) if present(th_op) else None
        bacc, sacc = boxes.identity_access(), scores.identity_access()
        cand, tmp, sel = (_scratch(k, s, nboxes) for s in range(3))
        half = const(dt, 2)

        def pmax(p, q):  # Python's max(p, q) / min(p, q)
            return b.select(k.s.cmp(dt, ">", q, p), q, p)

        def pmin(p, q):
            return b.select(k.s.cmp(dt, "<", q, p), q, p)

        def max_min(p, q):  # onnx.reference's max_min: (min, max)
            ge = k.s.cmp(dt, ">=", p, q)
            return b.select(ge, q, p), b.select(ge, p, q)

        def extents(bi, i):
            c = [k.load(bacc, [bi, i, k.index(d)]) for d in range(4)]
            if center == 0:
                xmin, xmax = max_min(c[1], c[3])
                ymin, ymax = max_min(c[0], c[2])
            else:
                wh, hh = k.s.div(dt, c[2], half), k.s.div(dt, c[3], half)
                xmin, xmax = k.s.sub(dt, c[0], wh), k.s.add(dt, c[0], wh)
                ymin, ymax = k.s.sub(dt, c[1], hh), k.s.add(dt, c[1], hh)
            return xmin, xmax, ymin, ymax

        def suppress(bi, i, j):
            x1min, x1max, y1min, y1max = extents(bi, i)
            x2min, x2max, y2min, y2max = extents(bi, j)
            ixmin, ixmax = pmax(x1min, x2min), pmin(x1max, x2max)
            iymin, iymax = pmax(y1min, y2min), pmin(y1max, y2max)
            zero = const(dt, 0)
            inter = k.s.mul(dt, k.s.sub(dt, ixmax, ixmin), k.s.sub(dt, iymax, iymin))
            area1 = k.s.mul(dt, k.s.sub(dt, x1max, x1min), k.s.sub(dt, y1max, y1min))
            area2 = k.s.mul(dt, k.s.sub(dt, x2max, x2min), k.s.sub(dt, y2max, y2min))
            union = k.s.sub(dt, k.s.add(dt, area1, area2), inter)
            keep_going = [k.s.cmp(dt, "<=", ixmax, ixmin), k.s.cmp(dt, "<=", iymax, iymin), k.s.cmp(dt, "<=", inter, zero),
                          k.s.cmp(dt, "<=", area1, zero), k.s.cmp(dt, "<=", area2, zero), k.s.cmp(dt, "<=", union, zero)]
            result = k.s.cmp(dt, ">", k.s.div(dt, inter, union), iou_th)
            for no in keep_going:
                result = b.and_(result, b.not_(no))
            return result

        idx_dt = np.dtype(f"int{k.idx_t.width}")
        with k.for_range(batches) as bi:
            with k.for_range(classes) as ci:
                nc = k.local(k.idx_t, k.index(0))
                b.store(k.index(0), nc)
                with k.for_range(nboxes) as i:
                    s = k.load(sacc, [bi, ci, i])
                    ok = k.s.cmp(sdt, ">", s, score_th) if score_th is not None else ir.Constant(ir.IntType(1), 1)
                    with b.if_then(ok):
                        _aset(k, cand, b.load(nc), i)
                        _inc(k, nc)
                total = b.load(nc)
                _merge_sort(k, cand, tmp, total,
                            lambda rv, lv: k.s.cmp(sdt, ">", k.load(sacc, [bi, ci, rv]), k.load(sacc, [bi, ci, lv])))
                nsel = k.local(k.idx_t, k.index(0))
                b.store(k.index(0), nsel)
                with k.for_range(total) as t:
                    with b.if_then(b.icmp_signed("<", b.load(nsel), limit)):
                        i = _aget(k, cand, t)
                        hit = k.local(ir.IntType(1), ir.Constant(ir.IntType(1), 0))
                        b.store(ir.Constant(ir.IntType(1), 0), hit)
                        q = k.local(k.idx_t, k.index(0))
                        b.store(k.index(0), q)
                        with _while(k, lambda: b.and_(b.icmp_signed("<", b.load(q), b.load(nsel)), b.not_(b.load(hit)))):
                            qq = b.load(q)
                            b.store(suppress(bi, i, _aget(k, sel, qq)), hit)
                            b.store(b.add(qq, k.index(1)), q)
                        with b.if_then(b.not_(b.load(hit))):
                            _aset(k, sel, b.load(nsel), i)
                            _inc(k, nsel)
                            row = b.load(rows)
                            for c, v in enumerate((bi, ci, i)):
                                at = b.add(b.mul(row, k.index(3)), k.index(c))
                                k.store_ptr(k.s.cast(idx_dt, np.int64, v), out.ptr, np.int64, at)
                            b.store(b.add(row, k.index(1)), rows)
    _set_dims(k, 0, [b.load(rows), 3])
