"""Reductions and row-wise normalizations: ReduceX, ArgMax/ArgMin, CumSum/CumProd, Softmax/LogSoftmax/Hardmax,
LayerNormalization.

ReduceX are `generic` reductions (reduce loops innermost, fast-math so LLVM vectorizes them), except float32
reductions over a contiguous run (explicit vectors) or over one middle axis (kernels/rows.py column_fold). The
row-wise ops loop over the outer dims and run a few passes over each row (max, exp-sum, scale for
Softmax; mean, variance, normalize for LayerNormalization), addressing every operand by strides.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from ..errors import NeedsConstant
from ..kernels.rows import (UNROLL, RowAccumulators, column_fold, column_run, contiguous_span, dims_by_stride, each_in_run,
                            each_row, fast_add, fold_row, greater, normalize_axis, over_row, row_ptr, vector_rows, walk_run)
from ..kernels.rows_runtime import copy as copy_runtime
from ..kernels.rows_runtime import count_as, masked_load, masked_store, runtime_span, walk_run_masked
from ..kernels.scalar import FAST, const, is_float, llvm_type
from ..kernels.size_classes import lower_by_size
from ..opspec import register

FLOATS = ("float32", "float64", "float16")


def _lowest(dt) -> ir.Constant:
    if np.dtype(dt) == np.bool_:
        return const(dt, 0)
    return const(dt, -np.inf) if is_float(dt) else const(dt, np.iinfo(dt).min)


def _highest(dt) -> ir.Constant:
    if np.dtype(dt) == np.bool_:
        return const(dt, 1)
    return const(dt, np.inf) if is_float(dt) else const(dt, np.iinfo(dt).max)


def _fmax(k, dt, a, b):
    """max, NaN when either is NaN (ONNX Runtime and onnx.reference propagate NaN through ReduceMax);
    floats through llvm.maximum, which the loop vectorizer turns into a vector reduction."""
    # float32 only: llvm.maximum on double trips an LLVM assertion when legalizing for armv7 (NEON has no f64 lanes)
    return k.s.intrinsic_binary("llvm.maximum", a, b) if np.dtype(dt) == np.float32 else k.s.maximum(dt, a, b)


def _fmin(k, dt, a, b):
    return k.s.intrinsic_binary("llvm.minimum", a, b) if np.dtype(dt) == np.float32 else k.s.minimum(dt, a, b)


def _exp(k, dt, x):
    return k.s.intrinsic("llvm.exp", x)


# -- ReduceX -------------------------------------------------------------------------------------
def _reduce_axes(k, rank: int) -> list[int] | None:
    """Reduced axes (sorted, non-negative); None means 'no-op' (empty axes with noop_with_empty_axes)."""
    from_input = k.graph.opset >= (13 if k.node.op_type == "ReduceSum" else 18)
    if from_input:
        axes = None
        if len(k.inputs) > 1 and k.inputs[1] is not None:
            value = k.input_value(1)
            if value is None:
                raise NeedsConstant(f"node {k.node.name!r} ({k.node.op_type}): axes must be a build-time constant",
                                    k.node.name)
            axes = [int(a) for a in np.ravel(value)]
    else:
        axes = k.attr("axes")
    if not axes:
        return None if from_input and k.attr("noop_with_empty_axes", 0) else list(range(rank))
    return sorted({normalize_axis(int(a), rank) for a in axes})


def _sq(k, dt, x):
    return k.s.mul(dt, x, x)


def _abs(k, dt, x):
    if is_float(dt):
        return k.s.intrinsic("llvm.fabs", x)
    return k.b.select(k.s.cmp(dt, "<", x, const(dt, 0)), k.s.neg(dt, x), x) if np.dtype(dt).kind == "i" else x


def _mean(k, dt, acc, n):
    return k.s.div(dt, acc, count_as(k, n, dt))


# name -> (init, per-element value, combine, finalize(acc, count)); None = identity / add
REDUCERS = {
    "ReduceSum": (lambda dt: const(dt, 0), None, None, None),
    "ReduceMean": (lambda dt: const(dt, 0), None, None, _mean),
    "ReduceSumSquare": (lambda dt: const(dt, 0), _sq, None, None),
    "ReduceL1": (lambda dt: const(dt, 0), _abs, None, None),
    "ReduceL2": (lambda dt: const(dt, 0), _sq, None, lambda k, dt, acc, n: k.s.intrinsic("llvm.sqrt", acc)),
    "ReduceLogSum": (lambda dt: const(dt, 0), None, None, lambda k, dt, acc, n: k.s.intrinsic("llvm.log", acc)),
    "ReduceProd": (lambda dt: const(dt, 1), None, lambda k, dt, a, x: k.s.mul(dt, a, x), None),
    "ReduceMax": (_lowest, None, _fmax, None),
    "ReduceMin": (_highest, None, _fmin, None),
}
FLOAT_ONLY = {"ReduceL2", "ReduceLogSum", "ReduceLogSumExp"}


def _reduce(k, name: str) -> None:
    x, out = k.inputs[0], k.outputs[0]
    dt, r = x.dtype, x.rank
    axes = _reduce_axes(k, r)
    if axes is None:
        if out.size and k.dynamic:
            copy_runtime(k, k.extents(out), out.shape, out.identity_access(), x.identity_access(), dims_by_stride(out.strides))
        elif out.size:
            k.copy(x, out)
        return
    if not out.size:
        return
    keep = int(k.attr("keepdims", 1))
    out_acc = out.access(list(range(r)) if keep else [d for d in range(r) if d not in axes], r)
    if k.dynamic:
        _reduce_dynamic(k, name, x, out_acc, axes)
        return
    count = int(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    x_acc, order = x.identity_access(), dims_by_stride(x.strides)
    if name == "ReduceLogSumExp":
        # max first (into the output), then log(sum(exp(x - max))) + max
        k.generic(x.shape, [out_acc], [x_acc], lambda v, i: [v[0]], axes, [_lowest(dt)],
                  lambda a, v: [_fmax(k, dt, a[0], v[0])], order=order)

        def finalize(accs, ix):  # an infinite max is the result (x - max would make it NaN)
            top = k.load(out_acc, ix)
            infinite = k.b.fcmp_ordered("==", k.s.intrinsic("llvm.fabs", top), const(dt, float("inf")))
            return [k.b.select(infinite, top, k.s.add(dt, k.s.intrinsic("llvm.log", accs[0]), top))]
        k.generic(x.shape, [out_acc], [x_acc, out_acc], lambda v, i: [_exp(k, dt, k.s.sub(dt, v[0], v[1]))], axes,
                  [const(dt, 0)], finalize=finalize, order=order)
        return
    if name in VECTOR_REDUCERS and np.dtype(dt) == np.float32 and x.size and contiguous_span(x, axes) and k.lanes(dt) > 1:
        _vector_reduce(k, x, out_acc, axes, name, count)
        return
    if name in COLUMN_REDUCERS and column_run(k, x, out, axes):
        _column_reduce(k, x, out, axes[0], name)
        return
    init, value, combine, finish = REDUCERS[name]
    body = (lambda v, i: [value(k, dt, v[0])]) if value else (lambda v, i: [v[0]])
    comb = (lambda a, v: [combine(k, dt, a[0], v[0])]) if combine else None
    fin = (lambda a, i: [finish(k, dt, a[0], count)]) if finish else None
    k.generic(x.shape, [out_acc], [x_acc], body, axes, [init(dt)], comb, fin, order=order)


VECTOR_REDUCERS = {"ReduceSum": 0.0, "ReduceMean": 0.0, "ReduceSumSquare": 0.0, "ReduceL1": 0.0, "ReduceL2": 0.0,
                   "ReduceLogSum": 0.0, "ReduceProd": 1.0, "ReduceMax": -np.inf, "ReduceMin": np.inf}
"""Reductions `_vector_reduce` runs over contiguous float32 runs, with the accumulators' start value."""


COLUMN_REDUCERS = ("ReduceSum", "ReduceMean", "ReduceSumSquare", "ReduceL1", "ReduceMax", "ReduceMin")
"""Reductions _column_reduce runs over one middle axis (kernels/rows.py column_fold)."""


def _column_reduce(k, x, out, axis: int, name: str, ext=None) -> None:
    """A reduction over one middle axis whose inner dims are a contiguous run, lanes across the columns. Max/Min
    keep a NaN once seen, as onnx.reference does."""
    b = k.b
    _, value, _, finish = REDUCERS[name]
    if name in ("ReduceMax", "ReduceMin"):
        op = ">" if name == "ReduceMax" else "<"
        combine = lambda a, v: b.select(b.or_(b.fcmp_ordered(op, v, a), b.fcmp_unordered("uno", v, v)), v, a)  # noqa: E731
    else:
        combine = fast_add(k)
    column_fold(k, x, out, axis, VECTOR_REDUCERS[name], combine, value, finish is not None, ext)


def _vector_reduce(k, x, out_acc, axes, name: str, count, ext=None) -> None:
    """A reduction over a contiguous run of float32 in vectors, UNROLL accumulators (LLVM would unroll a short
    run whole and vectorize across rows with gathers). ReduceMax/Min: maxps/minps and a NaN mask, so a NaN
    anywhere in the run gives NaN (as onnx.reference); the sums carry NaN themselves."""
    b, V, f32 = k.b, k.lanes(np.float32), np.float32
    n = contiguous_span(x, axes) if ext is None else runtime_span(k, x, axes)
    vt = k.vector_type(f32, V)
    _, value, _, finish = REDUCERS[name]
    extreme = name in ("ReduceMax", "ReduceMin")
    if extreme:
        combine = greater(k, name == "ReduceMax")
    elif name == "ReduceProd":
        combine = lambda a, v: b.fmul(a, v, flags=FAST)  # noqa: E731
    else:
        combine = fast_add(k)

    def row(ix, inner):
        ptr = row_ptr(k, x, ix, inner)
        acc = RowAccumulators(k, vt, VECTOR_REDUCERS[name])
        nan_v = k.local(ir.VectorType(ir.IntType(1), V), ir.Constant(ir.VectorType(ir.IntType(1), V), [0] * V))
        nan_s = k.local(ir.IntType(1), ir.Constant(ir.IntType(1), 0))

        def step(slot, v, nan):
            acc.update(slot, lambda a: combine(a, value(k, f32, v) if value else v))
            if extreme:
                b.store(b.or_(b.load(nan), b.fcmp_unordered("uno", v, v)), nan)
        walk_run(k, n, V, lambda u, at: step(u, k.vload(ptr, f32, at, V), nan_v),
              lambda at: step(None, b.load(b.gep(ptr, [at], inbounds=True)), nan_s))
        result = acc.result(combine)
        if extreme:
            seen = b.or_(b.icmp_unsigned("!=", b.bitcast(b.load(nan_v), ir.IntType(V)), ir.Constant(ir.IntType(V), 0)), b.load(nan_s))
            result = b.select(seen, const(f32, np.nan), result)
        elif finish:
            result = finish(k, f32, result, count)
        k.store(out_acc, ix, result)
    each_row(k, x.shape, x.strides, axes, row, ext)


def _reduce_dynamic(k, name: str, x, out_acc, axes) -> None:
    """ReduceX over run-time extents: each row over the reduced axes folded, in vectors with a scalar tail when the
    row is one contiguous float32 run; ReduceMean divides by the run-time count."""
    dt, ext, x_acc = x.dtype, k.extents(x), x.identity_access()
    count = k.product([ext[a] for a in axes])
    if name in VECTOR_REDUCERS and np.dtype(dt) == np.float32 and k.lanes(dt) > 1 and runtime_span(k, x, axes) is not None:
        _vector_reduce(k, x, out_acc, axes, name, count, ext)
        return
    out = k.outputs[0]
    if name in COLUMN_REDUCERS and column_run(k, x, out, axes) and not any(x.varies(d) for d in range(axes[0] + 1, x.rank)):
        _column_reduce(k, x, out, axes[0], name, ext)
        return

    def row(ix, inner):
        if name == "ReduceLogSumExp":  # an infinite max is the result (x - max would make it NaN)
            top = fold_row(k, ext, inner, ix, dt, _lowest(dt), lambda a, i: _fmax(k, dt, a, k.load(x_acc, i)))
            total = fold_row(k, ext, inner, ix, dt, const(dt, 0),
                             lambda a, i: k.s.add(dt, a, _exp(k, dt, k.s.sub(dt, k.load(x_acc, i), top))))
            infinite = k.b.fcmp_ordered("==", k.s.intrinsic("llvm.fabs", top), const(dt, float("inf")))
            k.store(out_acc, ix, k.b.select(infinite, top, k.s.add(dt, k.s.intrinsic("llvm.log", total), top)))
            return
        init, value, combine, finish = REDUCERS[name]

        def step(a, i):
            v = k.load(x_acc, i)
            v = value(k, dt, v) if value else v
            return combine(k, dt, a, v) if combine else k.s.add(dt, a, v)
        result = fold_row(k, ext, inner, ix, dt, init(dt), step)
        k.store(out_acc, ix, finish(k, dt, result, count) if finish else result)
    each_row(k, x.shape, x.strides, axes, row, ext)


def _register_reduce(name: str) -> None:
    @register(name, dtypes=FLOATS if name in FLOAT_ONLY else None, axis_attr="dim", runtime_extents=True)
    def lower(k):
        _reduce(k, name)


for _name in [*REDUCERS, "ReduceLogSumExp"]:
    _register_reduce(_name)


# -- ArgMax / ArgMin -----------------------------------------------------------------------------
def _beats(k, dt, op: str, v, best, last: bool):
    """v replaces the best so far: `op` holds, or v is the first (last: any) NaN, NaN being both the
    maximum and the minimum as in onnx.reference (numpy's argmax/argmin)."""
    better = k.s.cmp(dt, op, v, best)
    if not is_float(dt):
        return better
    nan_v = k.b.fcmp_unordered("uno", v, v)
    return k.b.or_(better, nan_v if last else k.b.and_(nan_v, k.b.fcmp_ordered("ord", best, best)))


def _arg(k, largest: bool) -> None:
    x, out = k.inputs[0], k.outputs[0]
    r, dt = x.rank, x.dtype
    axis = normalize_axis(int(k.attr("axis", 0)), r)
    keep, last = int(k.attr("keepdims", 1)), int(k.attr("select_last_index", 0))
    out_acc = out.access(list(range(r)) if keep else [d for d in range(r) if d != axis], r)
    x_acc = x.identity_access()
    op = (">" if largest else "<") + ("=" if last else "")
    idx_dt = np.dtype(f"int{k.idx_t.width}")

    floats = is_float(dt)
    ext = k.extents(x) if k.dynamic else None
    n = x.shape[axis] if ext is None else ext[axis]

    def row(ix, inner):
        ix[axis] = k.index(0)
        first = k.load(x_acc, ix)
        best = k.local(llvm_type(dt), first)
        pos = k.local(k.idx_t, k.index(0))
        nan = k.local(ir.IntType(1), k.b.fcmp_unordered("uno", first, first) if floats else ir.Constant(ir.IntType(1), 0))
        with k.for_range(n, 1) as j:
            ix[axis] = j
            v, b = k.load(x_acc, ix), k.b.load(best)
            better = k.s.cmp(dt, op, v, b)
            k.b.store(k.b.select(better, v, b), best)
            k.b.store(k.b.select(better, j, k.b.load(pos)), pos)
            if floats:  # off the select chain: the row's NaN, if any, is found again below
                k.b.store(k.b.or_(k.b.load(nan), k.b.fcmp_unordered("uno", v, v)), nan)
        if floats:
            with k.b.if_then(k.b.load(nan)):
                _nan_position(k, x_acc, ix, axis, n, pos, last)
        ix[axis] = k.index(0)
        k.store(out_acc, ix, k.s.cast(idx_dt, out.dtype, k.b.load(pos)))
    each_row(k, x.shape, x.strides, [axis], row, ext)


def _nan_position(k, x_acc, ix, axis: int, extent, pos, last: bool) -> None:
    """pos = the row's first (last) NaN: NaN is both the maximum and the minimum, as in onnx.reference (numpy)."""
    found = k.local(ir.IntType(1), ir.Constant(ir.IntType(1), 0))
    with k.for_range(extent) as j:
        ix[axis] = j
        v = k.load(x_acc, ix)
        take = k.b.fcmp_unordered("uno", v, v)
        if not last:
            take = k.b.and_(take, k.b.not_(k.b.load(found)))
        k.b.store(k.b.select(take, j, k.b.load(pos)), pos)
        k.b.store(k.b.or_(k.b.load(found), take), found)


@register("ArgMax", axis_attr="dim", runtime_extents=True)
def lower_argmax(k):
    _arg(k, True)


@register("ArgMin", axis_attr="dim", runtime_extents=True)
def lower_argmin(k):
    _arg(k, False)


# -- CumSum, CumProd -----------------------------------------------------------------------------
@register("CumSum", runtime_extents=True)
def lower_cumsum(k):
    _running(k, 0, k.s.add)


@register("CumProd", runtime_extents=True)
def lower_cumprod(k):
    _running(k, 1, k.s.mul)


def _running(k, identity, combine) -> None:
    """Running sum/product along the axis (exclusive, reverse); a run-time axis selects one of the
    per-axis loops."""
    x = k.inputs[0]
    value = k.input_value(1)
    if value is not None:
        _running_along(k, normalize_axis(int(np.ravel(value)[0]), x.rank), identity, combine)
        return
    axis_op = k.inputs[1]
    i64 = ir.IntType(64)
    axis = k.s.cast(axis_op.dtype, np.int64, k.b.load(axis_op.ptr))
    axis = k.b.select(k.b.icmp_signed("<", axis, ir.Constant(i64, 0)), k.b.add(axis, ir.Constant(i64, x.rank)), axis)
    for a in range(x.rank):
        with k.b.if_then(k.b.icmp_signed("==", axis, ir.Constant(i64, a))):
            _running_along(k, a, identity, combine)


def _running_along(k, axis: int, identity, combine) -> None:
    x, out = k.inputs[0], k.outputs[0]
    ext = k.extents(x) if k.dynamic else None
    dt, n = x.dtype, x.shape[axis] if ext is None else ext[axis]
    exclusive, reverse = int(k.attr("exclusive", 0)), int(k.attr("reverse", 0))
    x_acc, out_acc = x.identity_access(), out.identity_access()

    def row(ix, inner):
        acc = k.local(llvm_type(dt), const(dt, identity))
        with k.for_range(n) as j:
            last = k.index(n - 1) if ext is None else k.b.sub(k.as_index(n), k.index(1))
            ix[axis] = k.b.sub(last, j) if reverse else j
            before = k.b.load(acc)
            after = combine(dt, before, k.load(x_acc, ix))
            k.store(out_acc, ix, before if exclusive else after)
            k.b.store(after, acc)
    each_row(k, x.shape, x.strides, [axis], row, ext)


# -- Softmax family ------------------------------------------------------------------------------
def _softmax_dims(k, rank: int) -> list[int]:
    """Opset < 13: the input is coerced to 2D at `axis` (all dims from axis on); later, one axis."""
    if k.graph.opset < 13:
        return list(range(normalize_axis(int(k.attr("axis", 1)), rank), rank))
    return [normalize_axis(int(k.attr("axis", -1)), rank)]


def _softmax(k, log: bool) -> None:
    x, out = k.inputs[0], k.outputs[0]
    dt = x.dtype
    dims = _softmax_dims(k, x.rank)
    ext = k.extents(x) if k.dynamic else None
    if vector_rows(k, x, dims) and (ext is None or runtime_span(k, x, dims) is not None):
        _softmax_vector_rows(k, dims, log, ext)
        return
    shape = x.shape if ext is None else ext
    half = np.dtype(dt) == np.float16
    acc_t = np.float32 if half else dt  # float16: the sum in float32, rounded once, then divided (as numpy)
    x_acc, out_acc = x.identity_access(), out.identity_access()

    def row(ix, inner):
        # maxnum skips a NaN here, but the NaN still reaches the sum, so the whole row is NaN as in ORT
        top = fold_row(k, shape, inner, ix, dt, _lowest(dt), lambda a, i: k.s.max(dt, a, k.load(x_acc, i)))

        def exp_term(i):
            e = _exp(k, dt, k.s.sub(dt, k.load(x_acc, i), top))
            if not log:
                k.store(out_acc, i, e)
            return e
        total = fold_row(k, shape, inner, ix, acc_t, const(acc_t, 0), lambda a, i: k.s.add(acc_t, a, k.s.cast(dt, acc_t, exp_term(i))))
        total = k.s.cast(acc_t, dt, total)
        if log:  # (x - max) - log(sum), no reassociation: x - (max + log(sum)) loses log(sum) beside a huge max
            lse = k.s.intrinsic("llvm.log", total)
            over_row(k, shape, inner, ix, lambda i: k.store(out_acc, i, k.b.fsub(k.b.fsub(k.load(x_acc, i), top), lse)))
        elif half:
            over_row(k, shape, inner, ix, lambda i: k.store(out_acc, i, k.b.fdiv(k.load(out_acc, i), total)))
        else:
            inv = k.b.fdiv(const(dt, 1), total)
            over_row(k, shape, inner, ix, lambda i: k.store(out_acc, i, k.s.mul(dt, k.load(out_acc, i), inv)))
    each_row(k, x.shape, x.strides, _softmax_dims(k, x.rank), row, ext)


def _softmax_vector_rows(k, dims, log: bool, ext=None) -> None:
    """Softmax/LogSoftmax of contiguous float32 rows in explicit vectors: the max with UNROLL accumulators,
    exp and its sum fused in one pass (storing exp for Softmax), then one pass scaling by 1/sum (x - max -
    log(sum) for LogSoftmax). A NaN is skipped by the max but reaches the sum, so its row is NaN as in ORT."""
    x, out = k.inputs[0], k.outputs[0]
    b, s, f32, V = k.b, k.s, np.float32, k.lanes(np.float32)
    n = contiguous_span(x, dims) if ext is None else runtime_span(k, x, dims)
    vt = k.vector_type(f32, V)
    larger, add = greater(k, True), fast_add(k)

    def row(ix, inner):
        src, dst = row_ptr(k, x, ix, inner), row_ptr(k, out, ix, inner)

        def at(ptr, off, lanes, mask=None, fill=0.0):
            if mask is not None:
                return masked_load(k, ptr, off, mask, fill)
            return k.vload(ptr, f32, off, lanes) if lanes > 1 else b.load(b.gep(ptr, [off], inbounds=True))

        def put(value, off, mask=None):
            if mask is not None:
                masked_store(k, value, dst, off, mask)
            else:
                k.vstore(value, dst, f32, off)

        def each(fn, unroll=UNROLL):
            """fn(slot, offset, lanes, mask): a run-time row ends in one masked vector (mask: its lanes in the row)."""
            if isinstance(n, ir.Value):
                walk_run_masked(k, n, V, lambda u, off: fn(u, off, V, None), lambda off, m: fn(0, off, V, m), unroll)
            else:
                each_in_run(k, n, V, lambda u, off, lanes: fn(u, off, lanes, None), unroll)

        top = RowAccumulators(k, vt, -np.inf)
        each(lambda u, off, lanes, m: top.update(u, lambda a: larger(a, at(src, off, lanes, m, -np.inf))))
        top = top.result(larger)
        total = RowAccumulators(k, vt, 0.0)

        def exp_sum(u, off, lanes, m):
            e = s.exp_f32(b.fsub(at(src, off, lanes, m, -np.inf), k.splat(top, lanes), flags=FAST), nonpositive=True)
            if m is not None:
                e = b.select(m, e, k.vzero(f32, lanes))
            if not log:
                put(e, off, m)
            total.update(u, lambda a: add(a, e))
        each(exp_sum, 2)  # exp needs many registers: two vectors in flight, no spills
        total = total.result(add)
        if log:  # (x - max) - log(sum), no reassociation: x - (max + log(sum)) loses log(sum) beside a huge max
            lse = s.intrinsic("llvm.log", total)
            each(lambda u, off, lanes, m: put(b.fsub(b.fsub(at(src, off, lanes, m), k.splat(top, lanes)), k.splat(lse, lanes)),
                                              off, m))
        else:
            inv = b.fdiv(const(f32, 1), total)
            each(lambda u, off, lanes, m: put(b.fmul(at(dst, off, lanes, m), k.splat(inv, lanes), flags=FAST), off, m))
    each_row(k, x.shape, x.strides, dims, row, ext)


def _softmax_by_size(k, log: bool) -> None:
    """_softmax in the size classes of its row length (kernels/size_classes.py)."""
    x = k.inputs[0]
    dims = _softmax_dims(k, x.rank)
    lower_by_size(k, "softmax", x.dyn[dims[-1]] if x.dyn is not None and len(dims) == 1 else None,
                  lambda k: _softmax(k, log))


@register("Softmax", dtypes=FLOATS, axis_attr="dim", runtime_extents=True)
def lower_softmax(k):
    _softmax_by_size(k, False)


@register("LogSoftmax", dtypes=FLOATS, axis_attr="dim", runtime_extents=True)
def lower_log_softmax(k):
    _softmax_by_size(k, True)


@register("Hardmax", axis_attr="dim", runtime_extents=True)
def lower_hardmax(k):
    """1 at the first maximum of each row (identified by its element offset), 0 elsewhere."""
    x, out = k.inputs[0], k.outputs[0]
    dt = x.dtype
    ext = k.extents(x) if k.dynamic else None
    shape = x.shape if ext is None else ext
    x_acc, out_acc = x.identity_access(), out.identity_access()
    one, zero = const(out.dtype, 1), const(out.dtype, 0)

    def row(ix, inner):
        best = k.local(llvm_type(dt), _lowest(dt))
        where = k.local(k.idx_t, k.index(-1))

        def visit(i):  # the first element is taken whatever it is (a row of -inf has its 1 at the start)
            v, b = k.load(x_acc, i), k.b.load(best)
            unset = k.b.icmp_signed("==", k.b.load(where), k.index(-1))
            better = k.b.or_(_beats(k, dt, ">", v, b, False), unset)
            k.b.store(k.b.select(better, v, b), best)
            k.b.store(k.b.select(better, k.linear(x_acc, i), k.b.load(where)), where)
        over_row(k, shape, inner, ix, visit)
        at = k.b.load(where)
        over_row(k, shape, inner, ix, lambda i: k.store(out_acc, i, k.b.select(k.b.icmp_signed("==", k.linear(x_acc, i), at), one, zero)))
    each_row(k, x.shape, x.strides, _softmax_dims(k, x.rank), row, ext)


# -- LayerNormalization --------------------------------------------------------------------------
@register("LayerNormalization", dtypes=FLOATS, axis_attr="dim", runtime_extents=True)
def lower_layer_norm(k):
    """Per row: mean, then variance around it, then normalize with scale and bias; compute in float32 for fp16."""
    x, scale = k.inputs[0], k.inputs[1]
    bias = k.inputs[2] if len(k.inputs) > 2 else None
    y, mean_out, inv_out = (list(k.outputs) + [None, None])[:3]
    r, dt = x.rank, x.dtype
    cdt = np.dtype(np.float32) if dt == np.float16 else dt
    axis = normalize_axis(int(k.attr("axis", -1)), r)
    eps = const(cdt, float(k.attr("epsilon", 1e-5)))
    dims = list(range(axis, r))
    ext = k.extents(x) if k.dynamic else None
    shape = x.shape if ext is None else ext
    count = const(cdt, int(np.prod(x.shape[axis:], dtype=np.int64))) if ext is None else count_as(k, k.product(ext[axis:]), cdt)
    x_acc, y_acc, s_acc = x.identity_access(), y.identity_access(), scale.broadcast_access(x.shape)
    b_acc = bias.broadcast_access(x.shape) if bias is not None else None
    stats = [(op, op.access(list(range(r)), r) if op is not None else None) for op in (mean_out, inv_out)]

    def load(acc, i):
        return k.s.cast(dt, cdt, k.load(acc, i))

    def row(ix, inner):
        total = fold_row(k, shape, inner, ix, cdt, const(cdt, 0), lambda a, i: k.s.add(cdt, a, load(x_acc, i)))
        mean = k.b.fdiv(total, count)

        def sq(a, i):
            d = k.s.sub(cdt, load(x_acc, i), mean)
            return k.s.add(cdt, a, k.s.mul(cdt, d, d))
        var = k.b.fdiv(fold_row(k, shape, inner, ix, cdt, const(cdt, 0), sq), count)
        inv = k.b.fdiv(const(cdt, 1), k.s.intrinsic("llvm.sqrt", k.s.add(cdt, var, eps)))

        def norm(i):
            v = k.s.mul(cdt, k.s.mul(cdt, k.s.sub(cdt, load(x_acc, i), mean), inv), k.s.cast(scale.dtype, cdt, k.load(s_acc, i)))
            if b_acc is not None:
                v = k.s.add(cdt, v, k.s.cast(bias.dtype, cdt, k.load(b_acc, i)))
            k.store(y_acc, i, k.s.cast(cdt, y.dtype, v))
        over_row(k, shape, inner, ix, norm)
        for (op, acc), value in zip(stats, (mean, inv)):
            if op is not None:
                k.store(acc, ix, k.s.cast(cdt, op.dtype, value))
    each_row(k, x.shape, x.strides, dims, row, ext)
