"""Fused epilogues (passes/epilogues.py writes an `Epilogue` to node.attrs["_epilogue"]): the residual add and
the activation (Relu / Clip / LeakyRelu) applied to accumulators before they are stored."""
from __future__ import annotations

import math
from dataclasses import dataclass

from llvmlite import ir

from ..target.arch import arch_of, riscv_vector
from .scalar import splat_const

EPILOGUE_ATTR = "_epilogue"
"""The node attribute holding a fused Epilogue."""


@dataclass(frozen=True)
class Epilogue:
    """What a kernel applies to its accumulators before it stores them: the residual input (the node's input 3)
    added, then the activation."""

    activation: str | None = None
    """Float kernels (Conv, BatchNormalization, MatMul, Gemm): None, "relu", "clip" or "leaky_relu". QLinear
    kernels: "relu_floor" (the requantized result at least params[0]) or "lut" (params: the result for every
    int8 / uint8 value, index q - min)."""
    params: tuple[float | int | None, ...] = ()
    """clip: (min, max), either None for no bound; leaky_relu: (alpha,); relu_floor: (zero point,); lut: the
    table; otherwise ()."""
    residual: bool = False

    @property
    def alpha(self) -> float:
        return self.params[0] if self.activation == "leaky_relu" else 0.0

    @property
    def bounds(self) -> tuple[float | None, float | None]:
        return (self.params[0], self.params[1]) if self.activation == "clip" else (None, None)

    @property
    def relu_floor(self) -> int | None:
        return int(self.params[0]) if self.activation == "relu_floor" else None

    @property
    def lut(self) -> tuple[int, ...] | None:
        return self.params if self.activation == "lut" else None


NO_EPILOGUE = Epilogue()


def fused_epilogue(k) -> Epilogue:
    """The Epilogue the fusion passes (passes/epilogues.py) gave kernel k's node; NO_EPILOGUE when none."""
    return k.attr(EPILOGUE_ATTR) or NO_EPILOGUE


def fill(ty, value: float):
    """A float constant of type ty (scalar or vector), every lane `value` (float16 saturated: kernels/scalar.py)."""
    return splat_const(ty, value)


def activate(k, epi, value):
    """The epilogue's activation applied to a float scalar or vector (NaN passes through)."""
    act = epi.activation if epi else None
    b = k.b
    if act == "relu":
        zero = fill(value.type, 0.0)
        return b.select(b.fcmp_ordered("<", value, zero), zero, value)
    if act == "leaky_relu":
        zero = fill(value.type, 0.0)
        scaled = b.fmul(value, fill(value.type, float(epi.alpha)))
        return b.select(b.fcmp_ordered("<", value, zero), scaled, value)
    if act == "clip":
        low, high = epi.bounds
        if any(side is not None and math.isnan(float(side)) for side in (low, high)):
            return fill(value.type, float("nan"))  # a NaN bound: NaN, as Clip computes it
        # float32 where llvm.maximum/minimum are one NaN-propagating instruction (target/arch.py); RVV targets'
        # float32: _clip_rvv; elsewhere a compare + select (other float types too: double trips an LLVM assertion
        # legalizing llvm.maximum for armv7)
        elem = value.type.element if isinstance(value.type, ir.VectorType) else value.type
        if isinstance(elem, ir.FloatType) and _rvv(k):
            return _clip_rvv(k, value, low, high)
        triple = str(getattr(k.module, "triple", ""))
        minmax = isinstance(elem, ir.FloatType) and bool(triple) and arch_of(triple).nan_propagating_minmax
        if low is not None:
            lo = fill(value.type, float(low))
            value = (_intrinsic(k, "llvm.maximum", value, lo) if minmax
                     else b.select(b.fcmp_ordered("<", value, lo), lo, value))
        if high is not None:
            hi = fill(value.type, float(high))
            value = (_intrinsic(k, "llvm.minimum", value, hi) if minmax
                     else b.select(b.fcmp_ordered(">", value, hi), hi, value))
    return value


def _rvv(k) -> bool:
    spec = getattr(k, "spec", None)
    return spec is not None and riscv_vector(spec.triple, spec.features)


def _clip_rvv(k, value, low, high):
    """RVV targets' float32 Clip: vfmax / vfmin (NaN-dropping, 2 vector-FP cycles at LMUL 2) and the NaN lanes put
    back by an integer test on the bits (|bits| above +inf's, on the vector integer unit), where compare + select
    costs two 4-cycle FP compares; a scalar (a conv's edge pixel) takes fmax.s / fmin.s and ORs a NaN's bits back
    (still a NaN), where a float select is a branch per bound (docs/RISCV_KERNELS.md)."""
    b, ty = k.b, value.type
    out = value
    if low is not None:
        out = _intrinsic(k, "llvm.maxnum", out, fill(ty, float(low)))
    if high is not None:
        out = _intrinsic(k, "llvm.minnum", out, fill(ty, float(high)))
    if not isinstance(ty, ir.VectorType):  # an edge pixel: a NaN's bits ORed in keep it a NaN (no branch)
        i32 = ir.IntType(32)
        nan = b.sext(b.fcmp_unordered("uno", value, value), i32)
        return b.bitcast(b.or_(b.bitcast(out, i32), b.and_(nan, b.bitcast(value, i32))), ty)
    ity = ir.VectorType(ir.IntType(32), ty.count)
    shifted = b.shl(b.bitcast(value, ity), ir.Constant(ity, [1] * ty.count))
    number = b.icmp_unsigned("<=", shifted, ir.Constant(ity, [0xFF000000] * ty.count))
    return b.select(number, out, value)


def _intrinsic(k, name: str, x, y):
    """llvm.maximum / llvm.minimum of two floats or float vectors (.f32, .v4f32 ...)."""
    ty = x.type
    suffix = f"v{ty.count}{ty.element.intrinsic_name}" if isinstance(ty, ir.VectorType) else ty.intrinsic_name
    full = f"{name}.{suffix}"
    fn = k.module.globals.get(full) or ir.Function(k.module, ir.FunctionType(ty, [ty, ty]), full)
    return k.b.call(fn, [x, y])


def epilogue(k, epi, value, residual=None):
    """value (+ residual) then the activation; residual() loads the matching residual value."""
    if residual is not None:
        value = k.b.fadd(value, residual())
    return activate(k, epi, value)
