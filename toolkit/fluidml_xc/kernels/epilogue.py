"""Fused epilogues (passes/conv_epilogue.py, node.attrs["_epilogue"]): the residual add and the activation
(Relu / Clip / LeakyRelu) applied to accumulators before they are stored."""
from __future__ import annotations

import math

from llvmlite import ir


def fill(ty, value: float):
    """A float constant of type ty (scalar or vector), every lane `value`."""
    if isinstance(ty, ir.VectorType):
        return ir.Constant(ty, [ir.Constant(ty.element, value)] * ty.count)
    return ir.Constant(ty, value)


def activate(k, epi, value):
    """The epilogue's activation applied to a float scalar or vector (NaN passes through)."""
    act = epi.get("activation") if epi else None
    b = k.b
    if act == "relu":
        zero = fill(value.type, 0.0)
        return b.select(b.fcmp_ordered("<", value, zero), zero, value)
    if act == "leaky_relu":
        zero = fill(value.type, 0.0)
        scaled = b.fmul(value, fill(value.type, float(epi.get("alpha", 0.01))))
        return b.select(b.fcmp_ordered("<", value, zero), scaled, value)
    if act == "clip":
        if any(epi.get(side) is not None and math.isnan(float(epi[side])) for side in ("min", "max")):
            return fill(value.type, float("nan"))  # a NaN bound: NaN, as Clip computes it
        # ARM float32: llvm.maximum/minimum are one NaN-propagating fmax/fmin (vmax/vmin) each, where the
        # compare + select pair is two; x86 has no NaN-propagating max, so it keeps the select (so do
        # other float types: double trips an LLVM assertion legalizing llvm.maximum for armv7)
        elem = value.type.element if isinstance(value.type, ir.VectorType) else value.type
        arm = isinstance(elem, ir.FloatType) and str(getattr(k.module, "triple", "")).startswith(("aarch64", "arm"))
        if epi.get("min") is not None:
            lo = fill(value.type, float(epi["min"]))
            value = (_intrinsic(k, "llvm.maximum", value, lo) if arm
                     else b.select(b.fcmp_ordered("<", value, lo), lo, value))
        if epi.get("max") is not None:
            hi = fill(value.type, float(epi["max"]))
            value = (_intrinsic(k, "llvm.minimum", value, hi) if arm
                     else b.select(b.fcmp_ordered(">", value, hi), hi, value))
    return value


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
