"""The quantized integer kernels of MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv (ops/qlinear.py).

int8/uint8 operands minus their zero points, products accumulated exactly in int32. The QLinear ops
requantize like onnx.reference: multiplier = x_scale * w_scale / y_scale in the scales' own dtype
(float32 or float16), then acc * multiplier + y_zero_point in double, rounded half to even and
saturated to the output type. Zero points and scales are per tensor, or per row of A / per column of
B (MatMul) and per output channel of W (Conv), as the spec allows.

integer_matmul.py: the MatMul forms; integer_conv.py: the Conv direct loops; integer_conv_gemm.py: the Conv's
blocked int8 GEMM form (qgemm.py). Here: what they share (zero points and
scales, requantizing, the conv window, masked byte loads).
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from .epilogue import fused_epilogue
from ..errors import InputError
from .scalar import const
from . import qgemm

I32 = np.dtype(np.int32)
F64 = np.dtype(np.float64)


def opt_input(k, i):
    return k.inputs[i] if i < len(k.inputs) else None


def param_access(k, op, what: str, ndom: int, dim: int | None, extent: int | None):
    """Access of a zero point / scale: one value (size 1), or `extent` values along domain dim `dim`."""
    if op is None:
        return None
    if op.size == 1:
        return op.access([None] * op.rank, ndom)
    if dim is not None and op.rank == 1 and op.shape[0] == extent:
        return op.access([dim], ndom)
    raise InputError(f"node {k.node.name!r} ({k.node.op_type}): {what} of shape {list(op.shape)} is not supported; "
                     f"use a scalar{'' if dim is None else f' or a 1-D tensor of {extent} values'}")


def widen(k, dt, v):
    return k.s.cast(dt, I32, v)


def requantize(k, acc, scales: list, y_zp, out_dt):
    """round(acc * (s0 * s1 / s2) + y_zp) saturated to out_dt (and at least the node's Epilogue relu_floor,
    passes/epilogues.py); scales = [(dtype, value)] x3."""
    b = k.b
    (d0, s0), (d1, s1), (d2, s2) = scales
    sdt = np.dtype(d0)
    s1 = k.s.cast(d1, sdt, s1)
    s2 = k.s.cast(d2, sdt, s2)
    mult = b.fdiv(b.fmul(s0, s1), s2)
    mult = k.s.cast(sdt, F64, mult)
    value = b.fmul(k.s.cast(I32, F64, acc), mult)
    if y_zp is not None:
        value = b.fadd(value, k.s.cast(y_zp[0], F64, y_zp[1]))
    value = k.s.intrinsic("llvm.roundeven", value)
    info = np.iinfo(out_dt)
    floor = fused_epilogue(k).relu_floor
    value = k.s.min(F64, k.s.max(F64, value, const(F64, info.min if floor is None else max(info.min, floor))), const(F64, info.max))
    value = k.b.fptosi(value, ir.IntType(32))
    if fused_epilogue(k).lut is not None:  # a folded DequantizeLinear -> Relu -> QuantizeLinear (passes/epilogues.py)
        table = qgemm.lut_table(k, out_dt, fused_epilogue(k).lut)
        return k.load_ptr(table, out_dt, qgemm.lut_index(k, value, int(info.min)))
    return k.s.cast(I32, out_dt, value)



def single_value(op):
    return op is None or op.size == 1


def per_extent(op, extent):
    """None, one value, or a 1-D tensor of `extent` values."""
    return op is None or op.size == 1 or (op.rank == 1 and op.shape[0] == extent)


def multipliers(k, scales, extent: int, padded: int, per_index: int | None):
    """double[padded] with multiplier i = double((s0 * s1 / s2) in s0's dtype) for i < extent (0 after).

    scales = [(operand, per-index?)] x3; one of them (index `per_index`) may hold `extent` values.
    Build-time constants when every scale is one, else computed at run time into a stack array."""
    ops = [s for s in scales]
    if all(op.value is not None for op in ops):
        sdt = np.dtype(ops[0].dtype)
        vals = [np.asarray(op.value).reshape(-1).astype(sdt) for op in ops]
        vals = [v if v.size > 1 else np.repeat(v, extent) for v in vals]
        with np.errstate(all="ignore"):
            mult = ((vals[0] * vals[1]) / vals[2]).astype(np.float64)
        table = np.zeros(padded, np.float64)
        table[:extent] = mult
        return k.constant_array(table)
    b = k.b
    with b.goto_entry_block():
        table = b.alloca(ir.DoubleType(), size=ir.Constant(ir.IntType(32), padded))
    zero = k.index(0)
    with k.for_range(extent) as i:
        vals = []
        for j, op in enumerate(ops):
            at = i if (j == per_index and op.size > 1) else zero
            vals.append(k.load(param_access(k, op, "scale", 1, 0 if op.size > 1 else None, op.size), [at]))
        sdt = np.dtype(ops[0].dtype)
        s1 = k.s.cast(ops[1].dtype, sdt, vals[1])
        s2 = k.s.cast(ops[2].dtype, sdt, vals[2])
        mult = k.s.cast(sdt, F64, b.fdiv(b.fmul(vals[0], s1), s2))
        b.store(mult, b.gep(table, [i], inbounds=True))
    for i in range(extent, padded):
        b.store(ir.Constant(ir.DoubleType(), 0.0), b.gep(table, [k.index(i)], inbounds=True))
    return table


def y_zero_splat(k, y_zp, lanes):
    if y_zp is None:
        return None
    v = k.s.cast(y_zp.dtype, F64, k.load(param_access(k, y_zp, "y_zero_point", 1, None, None), [k.index(0)]))
    return k.splat(v, lanes)



MAX_PACK_BYTES = 1 << 18
"""Largest run-time pack (stack) of the blocked int8 kernels; bigger operands take the plain loops."""


def scalar_or_indexed(k, op, idx, ndom, dim, extent, what):
    acc = param_access(k, op, what, ndom, dim, extent)
    return None if acc is None else k.load(acc, idx)


def conv_window(k, x, w, out):
    """(spatial dims, kernel, strides, dilations, leading pads) of an integer Conv node."""
    spatial = x.rank - 2
    kernel = list(k.attr("kernel_shape", None) or w.shape[2:])
    strides = list(k.attr("strides", None) or [1] * spatial)
    dilations = list(k.attr("dilations", None) or [1] * spatial)
    auto_pad = k.attr("auto_pad", "NOTSET")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        begins = []
        for i in range(spatial):
            total = max(0, (out.shape[2 + i] - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - x.shape[2 + i])
            begins.append(total // 2 if auto_pad == "SAME_UPPER" else total - total // 2)
    elif auto_pad == "VALID":
        begins = [0] * spatial
    else:
        begins = list(k.attr("pads", None) or [0] * (2 * spatial))[:spatial]
    return spatial, kernel, strides, dilations, begins


def tap_columns(kw: int, d_w: int, p_w: int, s_w: int, iw_n: int, ow_n: int) -> tuple[int, int, int]:
    """(input column offset, lo, hi) of tap kw along a row: output columns [lo, hi) read inside the image."""
    off = kw * d_w - p_w
    lo = 0
    while lo * s_w + off < 0:
        lo += 1
    hi = (iw_n - 1 - off) // s_w + 1 if iw_n - 1 - off >= 0 else 0
    return off, lo, max(lo, min(ow_n, hi))


def masked_load(k, ptr, first_index, shift: int, mask: list, passthru_scalar):
    """Lanes l (mask[l - shift] true, shifted so lane `shift`.. start at ptr[first_index]) of bytes, others passthru.

    Only the bytes of true mask lanes are read (llvm.masked.load), counted from ptr[first_index] for
    the first true lane; the vector returned has the lanes in their block positions (shift <= 0)."""
    b = k.b
    n = len(mask)
    vt = ir.VectorType(ir.IntType(8), n)
    name = f"llvm.masked.load.v{n}i8.p0v{n}i8"
    fn = k.module.globals.get(name) or ir.Function(k.module, ir.FunctionType(vt, [vt.as_pointer(), ir.IntType(32), ir.VectorType(ir.IntType(1), n), vt]), name)
    at = b.bitcast(b.gep(ptr, [first_index]), vt.as_pointer())
    m = ir.Constant(ir.VectorType(ir.IntType(1), n), [ir.Constant(ir.IntType(1), int(x)) for x in mask])
    loaded = b.call(fn, [at, ir.Constant(ir.IntType(32), 1), m, k.splat(passthru_scalar, n)])
    if shift == 0:
        return loaded
    # lane j of the result = loaded[j + shift] (shift < 0: the first -shift lanes are passthru)
    pad = k.splat(passthru_scalar, n)
    idx = [j + shift if j + shift >= 0 else n + j for j in range(n)]
    return b.shuffle_vector(loaded, pad, ir.Constant(ir.VectorType(ir.IntType(32), n), idx))
