"""Ops that generate a tensor whose size is an input's value: Range, HannWindow, HammingWindow, BlackmanWindow,
MelWeightMatrix.

With every input a build-time constant the frontend folds them (a static tensor, as before). Otherwise the sizes
come at run time: the output is a data-dependent output (frontend/shapes.py, as NonZero's), stored at its bound
(`--max-dim NODE=N`, `--max-dim OUTPUT=N` or `--max-dim '*=N'` for every such dim without a bound of its own),
written dense at its actual dims, which the kernel reports per run. A run whose size is above the bound (or not a
size: a zero `delta`, a window of size < 1) writes nothing and fails (`FXC_ERR_RUN`, the run's status word).

- Range: count = max(ceil((limit - start) / delta), 0) as ONNX's reference computes it: integers exactly in int64,
  floats in float64 (numpy's arange); element i = start + i * delta in int64, in float64 for float/double, and in
  the `stash_type` (float32 or float64) for float16/bfloat16, then stored in the output type.
- Windows: w[n] for n < size in float64 (N = size when periodic, else size - 1; Hann sin(pi n / N)^2, Hamming
  25/46 - 21/46 cos(2 pi n / N), Blackman 0.42 - 0.5 cos(2 pi n / N) + 0.08 cos(4 pi n / N)), cast to
  output_datatype.
- MelWeightMatrix: [dft_length / 2 + 1, num_mel_bins] with the filter edges and triangles computed as
  frontend/mel.py's expansion computes them (ONNX Runtime's float32 arithmetic), element by element.
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from onnx import TensorProto, helper

from ..dtypes import compute_dtype
from ..errors import InputError, NeedsBound
from ..ir import BOUND_ATTR, DEFAULT_BOUND as DEFAULT_NAME
from ..opspec import register

I64 = ir.IntType(64)
F64 = ir.DoubleType()
F32 = ir.FloatType()
WINDOWS = ("HannWindow", "HammingWindow", "BlackmanWindow")


# --------------------------------------------------------------------------------------------------
# bounds (frontend)
# --------------------------------------------------------------------------------------------------
def _scalar(t) -> int | None:
    return None if t is None or not t.is_const else int(np.ravel(t.value)[0])


def _bound(attrs: dict, where: str, what: str, max_dims) -> int:
    """The --max-dim bound of a run-time size (recorded in attrs[BOUND_ATTR] for the run-time check's message)."""
    named = {n: v for n, v in (max_dims or {}).items() if n != DEFAULT_NAME}
    if named:
        name = min(named, key=named.get)
        attrs[BOUND_ATTR] = name
        return int(named[name])
    if DEFAULT_NAME in (max_dims or {}):
        attrs[BOUND_ATTR] = DEFAULT_NAME
        return int(max_dims[DEFAULT_NAME])
    raise NeedsBound(f"node {where!r}: {what} comes at run time", where)


def bound_generator(op_type: str, attrs: dict, inputs: list, opset: int, where: str, max_dims=None,
                    declared=None) -> list[tuple]:
    """[(dtype, bound shape, data-dependent dims)] of a Range, window or MelWeightMatrix whose sizes are not all
    build-time constants."""
    if op_type == "Range":
        start = inputs[0]
        if any(t is None or t.size != 1 for t in inputs[:3]) or len(inputs) < 3:
            raise InputError(f"node {where!r} (Range): start, limit and delta must be scalars")
        return [(start.dtype, (_bound(attrs, where, "its length", max_dims),), (0,))]
    out = np.dtype(helper.tensor_dtype_to_np_dtype(int(attrs.get("output_datatype", TensorProto.FLOAT))))
    if op_type in WINDOWS:
        size = _scalar(inputs[0])
        if size is not None:
            return [(out, (size,), ())]
        return [(out, (_bound(attrs, where, "its size", max_dims),), (0,))]
    mels, dft = _scalar(inputs[0]), _scalar(inputs[1])
    shape, dims = [], []
    for d, (value, what) in enumerate(((None if dft is None else dft // 2 + 1, "dft_length"), (mels, "num_mel_bins"))):
        if value is None:
            value = _bound(attrs, where, what, max_dims)
            dims.append(d)
        shape.append(value)
    return [(out, tuple(shape), tuple(dims))]


def run_check_generator(graph, node) -> str | None:
    """The message of a run this node fails (its size above the bound, or not a size); None when it is static."""
    name = node.attrs.get(BOUND_ATTR)
    if name is None:
        return None
    out = graph.tensors[node.outputs[0]]
    bound = max(out.shape) if node.op_type == "MelWeightMatrix" else out.shape[0]
    flag, end = (f"--max-dim '{name}", "'") if name == DEFAULT_NAME else (f"--max-dim {name}", "")
    what = {"Range": "length ceil((limit - start) / delta) is above its bound of {b}, or delta is 0",
            "MelWeightMatrix": "dft_length / 2 + 1 or num_mel_bins is negative or above its bound of {b}"}.get(
        node.op_type, "size is below 1 or above its bound of {b}").format(b=bound)
    return (f"{node.op_type} node {node.name!r}: this run's {what} ({flag}={bound}{end}); the outputs are not "
            f"valid: rebuild with a larger {flag}=N{end}")


# --------------------------------------------------------------------------------------------------
# kernels
# --------------------------------------------------------------------------------------------------
def _fail_unless(k, ok: ir.Value) -> None:
    if k.status is not None:
        with k.b.if_then(k.b.not_(ok), likely=False):
            k.b.store(I64(k.check_code), k.b.bitcast(k.status, I64.as_pointer()))


def _set_dims(k, values) -> None:
    ptr = k.dims_out.get(0)
    if ptr is not None:
        for d, v in enumerate(values):
            k.b.store(I64(v) if isinstance(v, int) else v, k.b.gep(ptr, [k.index(d)], inbounds=True))


def _scalar_in(k, i: int, dtype) -> ir.Value:
    """Input i's one element as a `dtype` compute value."""
    op = k.inputs[i]
    return k.s.cast(op.dtype, dtype, k.load_ptr(op.ptr, op.dtype, 0))


def _checked_count(k, count: ir.Value, bound: int, ok: ir.Value | None = None) -> ir.Value:
    """count (int64, >= 0) as an index when it is <= bound (and `ok`), else 0 and the run fails."""
    good = k.b.icmp_signed("<=", count, I64(bound))
    good = good if ok is None else k.b.and_(good, ok)
    _fail_unless(k, good)
    count = k.b.select(good, count, I64(0))
    return count if k.idx_t.width == 64 else k.b.trunc(count, k.idx_t)


def _index_i64(k, i: ir.Value) -> ir.Value:
    return i if k.idx_t.width == 64 else k.b.zext(i, I64)


def _range_count(k, dtype) -> tuple[ir.Value, ir.Value]:
    """(count as int64 clamped at 0, delta != 0)."""
    b = k.b
    if np.dtype(dtype).kind in "iu":
        start, limit, delta = (_scalar_in(k, i, np.int64) for i in range(3))
        nonzero = b.icmp_signed("!=", delta, I64(0))
        step = b.select(nonzero, delta, I64(1))
        # ceil(|limit - start| / |delta|) in unsigned arithmetic: exact for every int64 input (no signed overflow,
        # no INT64_MIN / -1 trap); a count past INT64_MAX saturates there and fails the bound check
        up, down = b.icmp_signed(">", limit, start), b.icmp_signed("<", limit, start)
        rising = b.icmp_signed(">", step, I64(0))
        forward = b.or_(b.and_(up, rising), b.and_(down, b.not_(rising)))
        span = b.select(up, b.sub(limit, start), b.sub(start, limit))
        stride = b.select(rising, step, b.sub(I64(0), step))
        q, r = b.udiv(span, stride), b.urem(span, stride)
        steps = b.add(q, b.zext(b.icmp_unsigned("!=", r, I64(0)), I64))
        steps = b.select(b.icmp_signed("<", steps, I64(0)), I64((1 << 63) - 1), steps)
        count = b.select(forward, steps, I64(0))
    else:
        start, limit, delta = (_scalar_in(k, i, np.float64) for i in range(3))
        nonzero = b.fcmp_ordered("!=", delta, ir.Constant(F64, 0.0))
        ratio = k.s.intrinsic("llvm.ceil", b.fdiv(b.fsub(limit, start), delta))
        count = k.s.cast(np.float64, np.int64, ratio)
    return b.select(b.icmp_signed("<", count, I64(0)), I64(0), count), nonzero


@register("Range", since=11, heavy=True, lowp_native=True, output_bound=bound_generator, run_check=run_check_generator)
def lower_range(k):
    out = k.outputs[0]
    if out is None:
        return
    dtype = np.dtype(out.dtype)
    count, nonzero = _range_count(k, dtype)
    n = _checked_count(k, count, out.shape[0], nonzero)
    if dtype.kind in "iu":
        work = np.dtype(np.int64)
    elif compute_dtype(dtype) != dtype or dtype == np.float16:
        work = np.dtype(np.float64 if int(k.attr("stash_type", TensorProto.FLOAT)) == TensorProto.DOUBLE else np.float32)
    else:
        work = np.dtype(np.float64)
    start, delta = _scalar_in(k, 0, work), _scalar_in(k, 2, work)
    with k.for_range(n) as i:
        step = k.s.cast(np.int64, work, _index_i64(k, i))
        k.store_ptr(k.s.cast(work, dtype, k.s.add(work, start, k.s.mul(work, step, delta))), out.ptr, dtype, i)
    _set_dims(k, [k.b.sext(n, I64) if k.idx_t.width < 64 else n])


def _cos(k, v: ir.Value) -> ir.Value:
    return k.s.libm("cos", np.float64, v)


def _window(op_type: str, k, x: ir.Value) -> ir.Value:
    """w at x = n / N (float64)."""
    b, c = k.b, (lambda v: ir.Constant(F64, v))
    if op_type == "HannWindow":
        s = k.s.libm("sin", np.float64, b.fmul(x, c(np.pi)))
        return b.fmul(s, s)
    if op_type == "HammingWindow":
        return b.fsub(c(25.0 / 46.0), b.fmul(c(1.0 - 25.0 / 46.0), _cos(k, b.fmul(x, c(2 * np.pi)))))
    first = b.fmul(c(-0.5), _cos(k, b.fmul(x, c(2 * np.pi))))
    return b.fadd(b.fadd(first, b.fmul(c(0.08), _cos(k, b.fmul(x, c(4 * np.pi))))), c(0.42))


@register(WINDOWS, since=17, heavy=True, lowp_native=True, output_bound=bound_generator, run_check=run_check_generator)
def lower_window(k):
    out = k.outputs[0]
    if out is None:
        return
    b = k.b
    size = _scalar_in(k, 0, np.int64)
    n = _checked_count(k, size, out.shape[0], b.icmp_signed(">=", size, I64(1)))
    periodic = int(k.attr("periodic", 1))
    span = b.sitofp(size if periodic else b.sub(size, I64(1)), F64)
    with k.for_range(n) as i:
        x = b.fdiv(b.sitofp(_index_i64(k, i), F64), span)
        k.store_ptr(k.s.cast(np.float64, out.dtype, _window(k.node.op_type, k, x)), out.ptr, out.dtype, i)
    _set_dims(k, [k.b.sext(n, I64) if k.idx_t.width < 64 else n])


def _mel_edges(k):
    """edge(p) -> the float32 spectrogram bin number of filter point p (an int64 value), as frontend/mel.py."""
    b, s = k.b, k.s
    f32 = np.float32

    def c(v):
        return ir.Constant(F32, float(np.float32(v)))

    def to_mel(hz):
        ln = s.intrinsic("llvm.log", b.fadd(c(1.0), b.fdiv(hz, c(700.0))))
        return b.fmul(b.fdiv(ln, c(np.log(10.0))), c(2595.0))
    low, high = (to_mel(_scalar_in(k, i, f32)) for i in (3, 4))
    mels, dft = _scalar_in(k, 0, np.int64), _scalar_in(k, 1, np.int64)
    step = b.fdiv(b.fsub(high, low), b.sitofp(b.add(mels, I64(2)), F32))
    scale, rate = b.sitofp(b.add(dft, I64(1)), F32), _scalar_in(k, 2, f32)

    def edge(p):
        mel = b.fadd(low, b.fmul(b.sitofp(p, F32), step))
        power = s.libm("pow", f32, c(10.0), b.fdiv(mel, c(2595.0)))
        hz = b.fmul(b.fsub(power, c(1.0)), c(700.0))
        return s.intrinsic("llvm.floor", b.fdiv(b.fmul(hz, scale), rate))
    return edge, mels, dft


@register("MelWeightMatrix", since=17, heavy=True, lowp_native=True, output_bound=bound_generator,
          run_check=run_check_generator)
def lower_mel_weight_matrix(k):
    out = k.outputs[0]
    if out is None:
        return
    b = k.b
    edge, mels, dft = _mel_edges(k)
    bins = b.add(b.sdiv(dft, I64(2)), I64(1))
    ok = b.and_(b.icmp_signed(">=", mels, I64(0)), b.icmp_signed(">=", dft, I64(0)))
    ok = b.and_(ok, b.icmp_signed("<=", mels, I64(out.shape[1])))
    rows = _checked_count(k, bins, out.shape[0], ok)
    cols = b.select(ok, mels, I64(0))
    cols = cols if k.idx_t.width == 64 else b.trunc(cols, k.idx_t)
    work = np.dtype(np.float64 if np.dtype(out.dtype) == np.float64 else np.float32)
    wt = F64 if work == np.float64 else F32
    one, zero = ir.Constant(wt, 1.0), ir.Constant(wt, 0.0)
    with k.for_range(cols) as i:
        at = _index_i64(k, i)
        left, centre, right = (k.s.cast(np.float32, work, edge(b.add(at, I64(d)))) for d in range(3))
        with k.for_range(rows) as j:
            x = b.sitofp(_index_i64(k, j), wt)
            rise = b.fdiv(b.fsub(x, left), b.fsub(centre, left))
            fall = b.fdiv(b.fsub(right, x), b.fsub(right, centre))
            rising = b.and_(b.fcmp_ordered(">=", x, left), b.fcmp_ordered("<", x, centre))
            falling = b.and_(b.fcmp_ordered(">", x, centre), b.fcmp_ordered("<", x, right))
            value = b.select(rising, rise, b.select(falling, fall, zero))
            peak = b.or_(b.fcmp_ordered("<=", left, centre), b.fcmp_ordered(">", right, centre))
            value = b.select(b.and_(b.fcmp_ordered("==", x, centre), peak), one, value)
            k.store_ptr(k.s.cast(work, out.dtype, value), out.ptr, out.dtype, b.add(b.mul(j, cols), i))
    wide = [v if k.idx_t.width == 64 else b.sext(v, I64) for v in (rows, cols)]
    _set_dims(k, wide)
