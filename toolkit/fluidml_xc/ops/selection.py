"""Selection ops: TopK (values and int64 indices of the K best elements along an axis), Shrink.

TopK with K <= PARTIAL_MAX keeps a sorted buffer of the K best so far on the stack and scans each row
once: an element enters only when it beats the buffer's last entry, finds its place by binary search
and the worse entries move down one slot (memmove). Elements arrive in index order and only a strictly better value passes another, so ties
keep the lower index first as ONNX requires; NaN ranks above every number, as in ONNX Runtime. O(n) compares per row plus
the insertions (about K log(n / K) of them on unordered data). A larger K picks the elements one
pass at a time: pass j scans the row for the best element strictly after pass j-1's pick in the same
order (NaN above numbers, ties by index), O(n * K), no scratch memory.

K is an attribute before opset 10, an input after. A constant K fixes the outputs' shape. A K computed at run time
makes them data-dependent outputs (frontend/shapes.py, as NonZero's): stored at their bound along the axis (its
length, or a smaller --max-dim NODE=N), written dense at their actual dims, which the kernel reports per run. A K
outside [0, min(axis length, bound)] at run time, or a constant K above a varying axis' actual length, fails the
run (`RUN_CHECKS`: the run's error code, nothing read past the axis): the outputs are then not valid.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from ..errors import InputError
from ..kernels import lowp
from ..kernels.rows import each_row, normalize_axis
from ..kernels.scalar import const, is_float, llvm_type
from ..ir import DEFAULT_BOUND
from ..opspec import register
from ..symbolic import Expr, bounds

I64 = ir.IntType(64)


def bound_topk(op_type: str, attrs: dict, inputs: list, opset: int, where: str, max_dims=None,
               declared=None) -> list[tuple]:
    """[(dtype, shape, data-dependent dims)] of TopK's values and indices: K along the axis when it is a constant,
    else the axis' length (or a smaller --max-dim NODE=N, `max_dims`), data-dependent."""
    x = inputs[0]
    shape = tuple(x.shape)
    axis = normalize_axis(int(attrs.get("axis", -1)), len(shape))
    i64 = np.dtype(np.int64)
    kt = inputs[1] if opset >= 10 and len(inputs) > 1 else None
    if opset < 10 or (kt is not None and kt.is_const):
        count = int(attrs["k"]) if opset < 10 else int(np.ravel(kt.value)[0])
        if count < 0:
            raise InputError(f"node {where!r} (TopK): K = {count} is negative: K counts the elements to keep, 0 or more")
        out = shape[:axis] + (count,) + shape[axis + 1:]
        return [(x.dtype, out, ()), (i64, out, ())]
    if kt is None or kt.size != 1:
        raise InputError(f"node {where!r} (TopK): K must be one int64 value (shape [1])")
    bound = shape[axis]
    for name, value in (max_dims or {}).items():
        if name != DEFAULT_BOUND:  # the axis' length bounds K already
            bound = min(bound, int(value))
    out = shape[:axis] + (bound,) + shape[axis + 1:]
    return [(x.dtype, out, (axis,)), (i64, out, (axis,))]


def _constant_k(k) -> int | None:
    if k.graph.opset < 10:
        return int(k.attr("k"))
    value = k.input_value(1)
    return None if value is None else int(np.ravel(value)[0])


class _Dense:
    """An output written dense at run-time dims (a data-dependent output), through index values as strides."""

    def __init__(self, k, op, dims: list):
        self.k, self.op = k, op
        self.strides = [k.as_index(k.product(dims[d + 1:])) for d in range(len(dims))]

    def store(self, ix, value) -> None:
        b, at = self.k.b, self.k.index(0)
        for i, s in zip(ix, self.strides):
            at = b.add(at, b.mul(i, s))
        self.k.store_ptr(value, self.op.ptr, self.op.dtype, at)


def _put(k, acc, ix, value) -> None:
    if isinstance(acc, _Dense):
        acc.store(ix, value)
    else:
        k.store(acc, ix, value)


def _write_dims(k, i: int, dims: list) -> None:
    ptr = k.dims_out.get(i)
    if ptr is None:
        return
    for d, v in enumerate(dims):
        value = I64(v) if isinstance(v, int) else (k.b.sext(v, I64) if v.type.width < 64 else v)
        k.b.store(value, k.b.gep(ptr, [k.index(d)], inbounds=True))


def _fail(k, bad: ir.Value) -> None:
    """The run fails when `bad` holds: the status word (frontend/shapes.py) gets this node's code (run_check_topk)."""
    with k.b.if_then(bad, likely=False):
        k.b.store(I64(k.check_code), k.b.bitcast(k.status, I64.as_pointer()))


def _runtime_count(k, n_act, cap: int) -> ir.Value:
    """K read at run time, checked against [0, min(actual axis length, cap)]: 0 (nothing to do) when outside."""
    b = k.b
    raw = b.load(b.bitcast(k.inputs[1].ptr, I64.as_pointer()))
    top = b.sext(k.as_index(n_act), I64) if k.idx_t.width < 64 else k.as_index(n_act)
    top = b.select(b.icmp_signed("<", top, I64(cap)), top, I64(cap))
    ok = b.and_(b.icmp_signed(">=", raw, I64(0)), b.icmp_signed("<=", raw, top))
    _fail(k, b.not_(ok))
    raw = b.select(ok, raw, I64(0))
    return b.trunc(raw, k.idx_t) if k.idx_t.width < 64 else raw


def run_check_topk(graph, node) -> str | None:
    """The message of a run this TopK fails: a K read at run time outside [0, min(axis length, bound)], or a
    constant K above a varying axis' minimum; None when no run can fail."""
    x = graph.tensors[node.inputs[0]]
    axis = normalize_axis(int(node.attrs.get("axis", -1)), len(x.shape))
    varying = x.dyn is not None and isinstance(x.dyn[axis], Expr)
    length = f"{x.dyn[axis]}" if varying else f"{x.shape[axis]}"
    where = f"TopK node {node.name!r}"
    k_in = graph.tensors[node.inputs[1]] if graph.opset >= 10 and len(node.inputs) > 1 and node.inputs[1] else None
    if graph.opset < 10 or (k_in is not None and k_in.value is not None):
        count = int(node.attrs["k"]) if graph.opset < 10 else int(np.ravel(k_in.value)[0])
        if not varying or count <= bounds(x.dyn[axis], graph.symbols)[0]:
            return None
        return (f"{where}: K = {count} is above the length of axis {axis} ({length}) in this run; the outputs are not "
                f"valid: feed inputs where {length} is {count} or more")
    out = graph.tensors[next(o for o in node.outputs if o)]
    cap = out.shape[axis]
    limit = f"the length of axis {axis} ({length})"
    if cap < x.shape[axis]:
        limit += f" or its bound {cap} (a larger --max-dim {node.name}=N raises it)"
    return f"{where}: K read in this run is negative or above {limit}; the outputs are not valid: feed a K in that range"


@register("TopK", heavy=True, axis_attr="dim", runtime_extents=True, output_bound=bound_topk, run_check=run_check_topk)
def lower_topk(k):
    x, values, indices = k.inputs[0], k.outputs[0], k.outputs[1]
    r = x.rank
    axis = normalize_axis(int(k.attr("axis", -1)), r)
    largest = int(k.attr("largest", 1))
    n = x.shape[axis]
    ext = k.extents(x) if k.dynamic else None
    count = _constant_k(k)
    v_acc = values.identity_access() if values is not None else None
    i_acc = indices.identity_access() if indices is not None else None
    if count is None:
        _topk_runtime(k, x, (values, indices), axis, largest, ext)
        return
    if count < 0 or count > n:
        raise InputError(f"node {k.node.name!r} (TopK): K = {count} is outside [0, {n}] (the axis' length)")
    short = ext is not None and x.varies(axis) and count > bounds(x.dyn[axis], k.graph.symbols)[0]
    if count == 0 or x.size == 0:
        return
    if short:  # the axis may be shorter than K at run time: that run fails and nothing is read
        too_short = k.b.icmp_signed("<", k.as_index(ext[axis]), k.index(count))
        _fail(k, too_short)
        with k.b.if_then(k.b.not_(too_short)):
            _select(k, x, v_acc, i_acc, axis, count, count, largest, ext)
        return
    _select(k, x, v_acc, i_acc, axis, count, count, largest, ext)


def _topk_runtime(k, x, outs, axis: int, largest: int, ext) -> None:
    """K read at run time: the outputs dense at their actual dims, which are reported per run."""
    cap = next(o.shape[axis] for o in outs if o is not None) if any(o is not None for o in outs) else x.shape[axis]
    n_act = x.shape[axis] if ext is None else ext[axis]
    count = _runtime_count(k, n_act, cap)
    dims = [count if d == axis else (x.shape[d] if ext is None else ext[d]) for d in range(x.rank)]
    for i in range(2):
        _write_dims(k, i, dims)
    if x.size == 0 or cap == 0:
        return
    accs = [_Dense(k, o, dims) if o is not None else None for o in outs]
    with k.b.if_then(k.b.icmp_signed(">", count, k.index(0))):
        _select(k, x, accs[0], accs[1], axis, count, cap, largest, ext)


def _select(k, x, v_acc, i_acc, axis: int, count, cap: int, largest: int, ext) -> None:
    """The K best along `axis` into the accesses; `count` K (an int, or a run-time value at most `cap`: up to
    PARTIAL_MAX the stack buffer, above it the K passes, chosen at run time when `cap` allows both)."""
    if cap <= PARTIAL_MAX:
        _topk_partial(k, x, v_acc, i_acc, axis, count, cap, largest, ext)
    elif isinstance(count, int):
        _topk_passes(k, x, v_acc, i_acc, axis, count, largest, ext)
    else:
        with k.b.if_else(k.b.icmp_signed("<=", count, k.index(PARTIAL_MAX))) as (few, many):
            with few:
                _topk_partial(k, x, v_acc, i_acc, axis, count, PARTIAL_MAX, largest, ext)
            with many:
                _topk_passes(k, x, v_acc, i_acc, axis, count, largest, ext)


def _topk_passes(k, x, v_acc, i_acc, axis: int, count, largest: int, ext) -> None:
    """Pass j picks the best element strictly after pass j-1's pick (O(n * K), no scratch memory)."""
    dt = x.dtype
    n = x.shape[axis] if ext is None else ext[axis]
    x_acc = x.identity_access()
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
                _put(k, v_acc, ix, bv)
            if i_acc is not None:
                _put(k, i_acc, ix, k.s.cast(idx_dt, np.int64, bi))
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


def _topk_partial(k, x, v_acc, i_acc, axis: int, count, cap: int, largest: int, ext=None) -> None:
    """`ext`: x's run-time extents when a dim varies (the vector scan is chosen at the capacity); `count`: K, an int
    or a run-time value (the stack buffers then hold `cap`)."""
    dt, b = x.dtype, k.b
    n = x.shape[axis]
    x_acc = x.identity_access()
    idx_dt = np.dtype(f"int{k.idx_t.width}")
    op = ">" if largest else "<"
    lanes = k.lanes(dt)
    fixed = isinstance(count, int)
    vectorized = x.strides[axis] == 1 and not lowp.is_lowp(dt) and lanes > 1 and n - (count if fixed else 1) >= lanes
    runtime = ext is not None or not fixed

    def row(ix, inner):
        with b.goto_entry_block():
            buf_v = b.alloca(llvm_type(dt), size=cap)
            buf_i = b.alloca(k.idx_t, size=cap)
        last = k.index(count - 1) if fixed else b.sub(count, k.index(1))

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
            length = n if ext is None else ext[axis]
            blocks = b.udiv(b.sub(k.as_index(length), k.as_index(count)), k.index(lanes)) if runtime else (n - count) // lanes
            with k.for_range(blocks) as blk:
                i0 = b.add(k.as_index(count), b.mul(blk, k.index(lanes)))
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
            tail_from = b.add(k.as_index(count), b.mul(blocks, k.index(lanes))) if runtime else count + blocks * lanes
        with k.for_range(n if ext is None else ext[axis], start=tail_from) as i:
            step(i)
        with k.for_range(count) as j:
            ix[axis] = j
            if v_acc is not None:
                _put(k, v_acc, ix, b.load(b.gep(buf_v, [j])))
            if i_acc is not None:
                _put(k, i_acc, ix, k.s.cast(idx_dt, np.int64, b.load(b.gep(buf_i, [j]))))
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
