"""Scalar arithmetic over numpy dtypes for kernel bodies: one call per operation, whatever the dtype."""
from __future__ import annotations

import numpy as np
from llvmlite import ir

FAST = ("fast",)

_FLOAT_TYPES = {np.dtype("float32"): ir.FloatType(), np.dtype("float64"): ir.DoubleType(), np.dtype("float16"): ir.HalfType()}


def llvm_type(dtype) -> ir.Type:
    dtype = np.dtype(dtype)
    if dtype in _FLOAT_TYPES:
        return _FLOAT_TYPES[dtype]
    if dtype == np.bool_:
        return ir.IntType(8)
    if dtype.kind in "iu":
        return ir.IntType(dtype.itemsize * 8)
    raise TypeError(f"dtype {dtype} has no LLVM lowering")


def is_float(dtype) -> bool:
    return np.dtype(dtype).kind == "f"


def is_signed(dtype) -> bool:
    return np.dtype(dtype).kind in "if"


def const(dtype, value) -> ir.Constant:
    dtype = np.dtype(dtype)
    if is_float(dtype):
        return ir.Constant(llvm_type(dtype), float(value))
    return ir.Constant(llvm_type(dtype), int(value))


class Scalar:
    """Dtype-aware scalar operations emitted through one IRBuilder."""

    def __init__(self, builder: ir.IRBuilder, module: ir.Module):
        self.b, self.module = builder, module

    def intrinsic(self, name: str, value: ir.Value, *more: ir.Value) -> ir.Value:
        fn = self.module.declare_intrinsic(name, [value.type], ir.FunctionType(value.type, [value.type] * (1 + len(more))))
        return self.b.call(fn, [value, *more])

    def libm(self, name: str, dtype, *args: ir.Value) -> ir.Value:
        ty = llvm_type(dtype)
        if dtype == np.float64:
            symbol = name
        elif dtype == np.float32:
            symbol = name + "f"
        else:
            widened = [self.b.fpext(a, ir.FloatType()) for a in args]
            return self.b.fptrunc(self.libm(name, np.float32, *widened), ty)
        fn = self.module.globals.get(symbol)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(ty, [ty] * len(args)), symbol)
        return self.b.call(fn, list(args))

    def add(self, dtype, x, y):
        return self.b.fadd(x, y, flags=FAST) if is_float(dtype) else self.b.add(x, y)

    def sub(self, dtype, x, y):
        return self.b.fsub(x, y, flags=FAST) if is_float(dtype) else self.b.sub(x, y)

    def mul(self, dtype, x, y):
        return self.b.fmul(x, y, flags=FAST) if is_float(dtype) else self.b.mul(x, y)

    def div(self, dtype, x, y):
        if is_float(dtype):
            return self.b.fdiv(x, y)
        return self.b.sdiv(x, y) if is_signed(dtype) else self.b.udiv(x, y)

    def rem(self, dtype, x, y):
        if is_float(dtype):
            return self.b.frem(x, y)
        return self.b.srem(x, y) if is_signed(dtype) else self.b.urem(x, y)

    def cmp(self, dtype, op: str, x, y) -> ir.Value:
        """Comparison giving i1; op is one of < <= > >= == !=."""
        if is_float(dtype):
            return self.b.fcmp_ordered(op, x, y) if op != "!=" else self.b.fcmp_unordered(op, x, y)
        return self.b.icmp_signed(op, x, y) if is_signed(dtype) else self.b.icmp_unsigned(op, x, y)

    def max(self, dtype, x, y):
        if is_float(dtype):
            return self.intrinsic_binary("llvm.maxnum", x, y)
        return self.b.select(self.cmp(dtype, ">", x, y), x, y)

    def min(self, dtype, x, y):
        if is_float(dtype):
            return self.intrinsic_binary("llvm.minnum", x, y)
        return self.b.select(self.cmp(dtype, "<", x, y), x, y)

    def intrinsic_binary(self, name: str, x, y):
        fn = self.module.declare_intrinsic(name, [x.type], ir.FunctionType(x.type, [x.type, x.type]))
        return self.b.call(fn, [x, y])

    def neg(self, dtype, x):
        return self.b.fneg(x) if is_float(dtype) else self.b.neg(x)

    def to_bool(self, value: ir.Value) -> ir.Value:
        """i1 -> the i8 storage of a bool tensor."""
        return self.b.zext(value, ir.IntType(8))

    def truth(self, dtype, value: ir.Value) -> ir.Value:
        """Any stored value -> i1 (nonzero)."""
        if is_float(dtype):
            return self.b.fcmp_unordered("!=", value, const(dtype, 0))
        return self.b.icmp_unsigned("!=", value, ir.Constant(value.type, 0))

    def cast(self, src, dst, x):
        src, dst = np.dtype(src), np.dtype(dst)
        if src == dst:
            return x
        st, dt = llvm_type(src), llvm_type(dst)
        if dst == np.bool_:
            return self.to_bool(self.truth(src, x))
        if is_float(src) and is_float(dst):
            return self.b.fpext(x, dt) if src.itemsize < dst.itemsize else self.b.fptrunc(x, dt)
        if is_float(src):
            return self.b.fptosi(x, dt) if dst.kind == "i" else self.b.fptoui(x, dt)
        if is_float(dst):
            return self.b.sitofp(x, dt) if src.kind == "i" else self.b.uitofp(x, dt)
        if st.width == dt.width:
            return x
        if st.width > dt.width:
            return self.b.trunc(x, dt)
        return self.b.sext(x, dt) if src.kind == "i" else self.b.zext(x, dt)
