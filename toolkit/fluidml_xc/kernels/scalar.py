"""Scalar arithmetic over numpy dtypes for kernel bodies: one call per operation, whatever the dtype."""
from __future__ import annotations

import functools
import math
import struct

import numpy as np
from llvmlite import ir

from . import lowp
from ..dtypes import compute_dtype
from ..strings import capacity, is_slot

FAST = ("reassoc", "contract")
"""Reassociation for vectorized reductions and FMA contraction (docs/GUARANTEES.md: what each may change). No nnan
or ninf (NaN and infinity tests would fold away), and no nsz: with reassoc it lets LLVM factor x * c + y * c into
(x + y) * c, which is +-inf where the rule gives inf - inf = NaN (a weight of inf met by inputs of both signs).
arcp and afn are not set either: FAST goes on fadd/fsub/fmul only, where they would allow nothing we need."""

_FLOAT_TYPES = {np.dtype("float32"): ir.FloatType(), np.dtype("float64"): ir.DoubleType(), np.dtype("float16"): ir.HalfType()}


def llvm_type(dtype) -> ir.Type:
    """The LLVM type a kernel computes `dtype` in (see `storage_type` for memory)."""
    dtype = compute_dtype(dtype)
    if dtype in _FLOAT_TYPES:
        return _FLOAT_TYPES[dtype]
    if dtype == np.bool_:
        return ir.IntType(8)
    if dtype.kind in "iu":
        return ir.IntType(dtype.itemsize * 8)
    raise TypeError(f"dtype {dtype} has no LLVM lowering")


def storage_type(dtype) -> ir.Type:
    """The LLVM type of one element in memory: `llvm_type`, except for the storage-only dtypes (kernels/lowp.py) and
    string slots ({i64 length, [room x i8]}, strings.py)."""
    if is_slot(dtype):
        return ir.LiteralStructType([ir.IntType(64), ir.ArrayType(ir.IntType(8), capacity(dtype) + 1)])
    return lowp.storage_type(dtype) if lowp.is_lowp(dtype) else llvm_type(dtype)


def is_float(dtype) -> bool:
    return compute_dtype(dtype).kind == "f"


def is_signed(dtype) -> bool:
    return compute_dtype(dtype).kind in "if"


HALF_MAX = 65504.0
"""float16's largest finite value."""


def saturate_half(value: float) -> float:
    """A build-time float as a float16 constant holds it: finite values clamped to +-65504 (as passes/precision.py
    narrows constant tensors, so a bound of 1e5 or a -1e9 mask stays finite), NaN and +-inf kept."""
    return min(max(value, -HALF_MAX), HALF_MAX) if math.isfinite(value) else value


def saturated(values: np.ndarray, dtype) -> np.ndarray:
    """values converted to dtype; to float16 with saturate_half's clamping (numpy would give +-inf)."""
    values = np.asarray(values)
    if np.dtype(dtype) == np.float16:
        values = np.where(np.isfinite(values), np.clip(values, -HALF_MAX, HALF_MAX), values)
    return values.astype(dtype)


def scalar_const(ty: ir.Type, value) -> ir.Constant:
    """A scalar constant of type ty; a float16 one saturated (saturate_half): llvmlite cannot encode |x| > 65504."""
    if isinstance(ty, ir.HalfType):
        return ir.Constant(ty, saturate_half(float(value)))
    return ir.Constant(ty, value)


def const(dtype, value) -> ir.Constant:
    dtype = compute_dtype(dtype)
    if is_float(dtype):
        return scalar_const(llvm_type(dtype), float(value))
    return ir.Constant(llvm_type(dtype), int(value))


def splat_const(ty: ir.Type, value) -> ir.Constant:
    """A constant of `ty`, a scalar or every lane of a vector (float16 saturated, scalar_const); vector constants
    are made once per type and value (bits: -0.0 is not 0.0) and shared, as llvmlite's constants are immutable."""
    if isinstance(ty, ir.VectorType):
        if isinstance(value, (float, np.floating)):
            key = struct.pack("<d", float(value))
        else:
            key = ("int", int(value)) if isinstance(value, (int, np.integer)) else (type(value), value)
        return _vector_const(ty, key, value)
    return scalar_const(ty, value)


@functools.lru_cache(maxsize=256)
def splat_constants(element: ir.Type, lanes: int) -> tuple[ir.Constant, ir.Constant, ir.Constant]:
    """Kernel.splat's undefined vector, lane 0 and all-zeros shuffle mask, made once per type (immutable)."""
    undef = ir.Constant(ir.VectorType(element, lanes), ir.Undefined)
    return undef, ir.Constant(ir.IntType(32), 0), ir.Constant(ir.VectorType(ir.IntType(32), lanes), [0] * lanes)


@functools.lru_cache(maxsize=4096)
def _vector_const(ty: ir.VectorType, key, value) -> ir.Constant:
    return ir.Constant(ty, [scalar_const(ty.element, value)] * ty.count)


def _same_shape(ty: ir.Type, element: ir.Type) -> ir.Type:
    """`element`, or a vector of it with as many lanes as `ty` has."""
    return ir.VectorType(element, ty.count) if isinstance(ty, ir.VectorType) else element


def _overload_suffix(ty: ir.Type) -> str:
    """The type suffix of an overloaded intrinsic's name (llvmlite spells vectors as "<8 x float>")."""
    if isinstance(ty, ir.VectorType):
        return f"v{ty.count}{ty.element.intrinsic_name}"
    return ty.intrinsic_name


def _is_f32(ty: ir.Type) -> bool:
    return isinstance(ty.element if isinstance(ty, ir.VectorType) else ty, ir.FloatType)


def _poly(b: ir.IRBuilder, x: ir.Value, coefficients: tuple[float, ...]) -> ir.Value:
    """Horner evaluation, highest degree first."""
    acc = splat_const(x.type, coefficients[0])
    for c in coefficients[1:]:
        acc = b.fadd(b.fmul(acc, x, flags=FAST), splat_const(x.type, c), flags=FAST)
    return acc


_EXP_POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1)
_SIGMOID_EXP_POLY = (0.0013750663492828608, 0.00836912076920271, 0.0416695661842823, 0.16666516661643982, 0.49999988079071045)
"""exp(r) = 1 + r + r^2 p(r) on |r| <= ln(2) / 2 with p of degree 4 (least squares weighted by r^2 / e^r, float32
coefficients): within 0.07 ulp of e^r, one multiply-add fewer than Cephes' degree 5 (_EXP_POLY)."""
_SIGMOID_EXP_POLY_NEGATED = tuple(c * (-1) ** i for i, c in enumerate((*_SIGMOID_EXP_POLY, 1.0, 1.0)))
"""e^r as a polynomial in -r (sigmoid_f32 computes -r): the odd-degree coefficients negated (degree 6 first)."""
TANH_LIMIT = 8.095857
"""Where tanh_f32 clamps its argument: x * P(x^2) / Q(x^2) rounds to exactly 1 there in float32 with FMAs (x86, Arm,
RISC-V) and without, and stays at or below 1 over [0, TANH_LIMIT] both ways (the first value over 1 is at 8.0964
without FMAs, 8.1247 with). tanh(8.095857) is 1 - 1.9e-7: 3.1 ulps from 1."""
_ERF_NUM = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
            -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02)
_LOG_POLY = (7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1, 1.4249322787e-1, -1.6668057665e-1,
             2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1)
_TANH_NUM = (-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11, 5.12229709037114e-08,
             1.48572235717979e-05, 6.37261928875436e-04, 4.89352455891786e-03)
_TANH_DEN = (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03, 4.89352518554385e-03)
_ERF_DEN = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03, -1.42647390514189e-02)


def _keep_nan(b: ir.IRBuilder, x: ir.Value, result: ir.Value) -> ir.Value:
    """NaN in, NaN out (the clamps in front of a polynomial would turn NaN into a number)."""
    return b.select(b.fcmp_unordered("uno", x, x), x, result)


class Scalar:
    """Dtype-aware scalar operations emitted through one IRBuilder."""

    def __init__(self, builder: ir.IRBuilder, module: ir.Module):
        self.b, self.module = builder, module

    def intrinsic(self, name: str, value: ir.Value, *more: ir.Value) -> ir.Value:
        if name == "llvm.exp" and _is_f32(value.type):
            return self.exp_f32(value)
        if name == "llvm.log" and _is_f32(value.type):
            return self.log_f32(value)
        fn = self.module.declare_intrinsic(f"{name}.{_overload_suffix(value.type)}", (),
                                           ir.FunctionType(value.type, [value.type] * (1 + len(more))))
        return self.b.call(fn, [value, *more])

    def libm(self, name: str, dtype, *args: ir.Value) -> ir.Value:
        dtype = compute_dtype(dtype)
        if name == "erf" and np.dtype(dtype) == np.float32:
            return self.erf_f32(args[0])
        if name == "tanh" and np.dtype(dtype) == np.float32:
            return self.tanh_f32(args[0])
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
        return self._int_divide(dtype, x, y, remainder=False)

    def rem(self, dtype, x, y):
        if is_float(dtype):
            return self.b.frem(x, y)
        return self._int_divide(dtype, x, y, remainder=True)

    def _int_divide(self, dtype, x, y, remainder: bool):
        """Integer x / y or x % y that never traps (the hardware faults on y == 0 and on MIN / -1, which
        a branch computed but not taken may hold): y == 0 divides by 1; y == -1 gives -x (remainder 0)."""
        b = self.b
        zero, one = ir.Constant(y.type, 0), ir.Constant(y.type, 1)
        bad = b.icmp_unsigned("==", y, zero)
        if is_signed(dtype):
            minus_one = b.icmp_signed("==", y, ir.Constant(y.type, -1))
            safe = b.select(b.or_(bad, minus_one), one, y)
            result = b.srem(x, safe) if remainder else b.sdiv(x, safe)
            return b.select(minus_one, zero if remainder else b.sub(zero, x), result)
        safe = b.select(bad, one, y)
        return b.urem(x, safe) if remainder else b.udiv(x, safe)

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

    # max/min above are llvm.maxnum/minnum: a NaN operand is dropped. ONNX's Max, Min, Clip, Relu and the
    # activations built on them propagate NaN (as onnx.reference and ONNX Runtime do): these keep it, with
    # compares and selects only (no nnan flag anywhere), which every target vectorizes.
    def maximum(self, dtype, x, y):
        """max(x, y), NaN when either is NaN."""
        if not is_float(dtype):
            return self.max(dtype, x, y)
        r = self.b.select(self.b.fcmp_ordered("<", x, y), y, x)  # NaN x: x
        return self.b.select(self.b.fcmp_unordered("uno", y, y), y, r)

    def minimum(self, dtype, x, y):
        """min(x, y), NaN when either is NaN."""
        if not is_float(dtype):
            return self.min(dtype, x, y)
        r = self.b.select(self.b.fcmp_ordered(">", x, y), y, x)
        return self.b.select(self.b.fcmp_unordered("uno", y, y), y, r)

    def clamp(self, dtype, x, lo, hi):
        """Clip: lo <= x <= hi, a NaN x stays NaN (lo or hi None: no bound on that side)."""
        if not is_float(dtype):
            x = x if lo is None else self.max(dtype, x, lo)
            return x if hi is None else self.min(dtype, x, hi)
        if lo is not None:
            x = self._nan_bound(lo, self.b.select(self.b.fcmp_ordered("<", x, lo), lo, x))
        if hi is not None:
            x = self._nan_bound(hi, self.b.select(self.b.fcmp_ordered(">", x, hi), hi, x))
        return x

    def _nan_bound(self, bound, clamped):
        """A NaN bound makes the result NaN (Clip is Min(Max(x, lo), hi), both NaN-propagating, as onnx.reference);
        a finite constant bound needs no check."""
        if isinstance(bound, ir.Constant) and isinstance(bound.constant, float) and bound.constant == bound.constant:
            return clamped
        return self.b.select(self.b.fcmp_unordered("uno", bound, bound), bound, clamped)

    def intrinsic_binary(self, name: str, x, y):
        fn = self.module.declare_intrinsic(f"{name}.{_overload_suffix(x.type)}", (), ir.FunctionType(x.type, [x.type, x.type]))
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

    def load_value(self, dtype, stored: ir.Value) -> ir.Value:
        """An element as loaded from memory -> the value kernels compute with."""
        return lowp.decode(self.b, dtype, stored) if lowp.is_lowp(dtype) else stored

    def store_value(self, dtype, value: ir.Value) -> ir.Value:
        """A computed value -> the element to store (storage-only dtypes: rounded as ml_dtypes' astype)."""
        return lowp.encode(self.b, dtype, value) if lowp.is_lowp(dtype) else value

    def cast(self, src, dst, x, saturate: bool = True, round_mode: str = "up"):
        """ONNX Cast of a computed value. For a storage-only `dst` the result is the value the stored
        element holds: float8 targets honour `saturate`, FLOAT8E8M0 `saturate` and `round_mode`, and
        float -> any integer type is NaN -> 0, truncation, saturation (cast_rules.py)."""
        src, dst = np.dtype(src), np.dtype(dst)
        if src == dst:
            return x
        if lowp.is_lowp(dst):
            b = self.b
            csrc = compute_dtype(src)
            if dst.name in lowp.INT_FORMATS:
                v = lowp.float_to_small_int(b, x, dst) if is_float(csrc) else self.cast(csrc, np.int64, x)
                v = v if v.type == ir.IntType(8) else b.trunc(v, ir.IntType(8))
                return lowp.decode(b, dst, lowp.encode(b, dst, v))
            v = self.cast(csrc, np.float32, x)
            if dst.name == "float8_e8m0fnu":
                return lowp.decode(b, dst, lowp.e8m0_cast(b, v, saturate, round_mode))
            return lowp.decode(b, dst, lowp.encode(b, dst, v, saturate))
        src, dst = compute_dtype(src), compute_dtype(dst)
        if src == dst:
            return x
        st, dt = llvm_type(src), llvm_type(dst)
        if dst == np.bool_:
            return self.to_bool(self.truth(src, x))
        if is_float(src) and is_float(dst):
            return self.b.fpext(x, dt) if src.itemsize < dst.itemsize else self.b.fptrunc(x, dt)
        if is_float(src):
            return lowp.float_to_int_sat(self.b, x, dt, dst.kind == "i")
        if is_float(dst):
            return self.b.sitofp(x, dt) if src.kind == "i" else self.b.uitofp(x, dt)
        if st.width == dt.width:
            return x
        if st.width > dt.width:
            return self.b.trunc(x, dt)
        return self.b.sext(x, dt) if src.kind == "i" else self.b.zext(x, dt)

    def exp_f32(self, x: ir.Value, nonpositive: bool = False) -> ir.Value:
        """expf without a libm call, so loops around it vectorize (Cephes range reduction + degree-6 polynomial, < 1e-7 rel);
        `x` a float32 scalar or vector. `nonpositive`: x <= 0 or NaN (Softmax's x - max), no upper bound to check.
        NaN stays NaN through every step (ordered compares keep it, no float -> int conversion that would be poison)."""
        b, f32 = self.b, x.type
        i32 = _same_shape(f32, ir.IntType(32))

        def k(value):
            return splat_const(f32, value)
        given = x
        lo, hi = k(-88.3762626647949), k(88.3762626647949)
        x = b.select(b.fcmp_ordered("<", x, lo), lo, x)  # maxps / minps
        if not nonpositive:
            x = b.select(b.fcmp_ordered(">", x, hi), hi, x)
        c = ("contract",)
        fx = self.intrinsic("llvm.floor", b.fadd(b.fmul(x, k(1.44269504088896341), flags=c), k(0.5), flags=c))
        r = b.fsub(b.fsub(x, b.fmul(fx, k(0.693359375), flags=c), flags=c), b.fmul(fx, k(-2.12194440e-4), flags=c), flags=c)
        y = b.fadd(b.fadd(b.fmul(_poly(b, r, _EXP_POLY), b.fmul(r, r), flags=c), r, flags=c), k(1.0), flags=c)
        # 2^fx: fx + 1.5 * 2^23 holds fx as an integer in its low bits; shifted into the exponent field its own
        # exponent bits leave the word, so this is (fx + 127) << 23
        n = b.bitcast(b.fadd(fx, k(12582912.0)), i32)
        scale = b.bitcast(b.shl(b.add(n, splat_const(i32, 127)), splat_const(i32, 23)), f32)
        result = b.fmul(y, scale)
        if nonpositive:
            return result
        return b.select(b.fcmp_ordered(">", given, k(88.72283935546875)), k(float("inf")), result)

    def log_f32(self, x: ir.Value) -> ir.Value:
        """logf without a libm call, so loops around it vectorize (Cephes: mantissa and exponent from the bits,
        subnormals scaled by 2^23 first, degree-8 polynomial); 0 -> -inf, inf -> inf, negative or NaN -> NaN.
        `x` a float32 scalar or vector."""
        b, f32 = self.b, x.type
        i32 = _same_shape(f32, ir.IntType(32))

        def k(value):
            return splat_const(f32, value)

        def n(value):
            return splat_const(i32, value)
        subnormal = b.fcmp_ordered("<", x, k(1.17549435e-38))
        scaled = b.select(subnormal, b.fmul(x, k(8388608.0)), x)
        bits = b.bitcast(scaled, i32)
        exponent = b.sub(b.and_(b.lshr(bits, n(23)), n(0xFF)), b.select(subnormal, n(126 + 23), n(126)))
        m = b.bitcast(b.or_(b.and_(bits, n(0x007FFFFF)), n(0x3F000000)), f32)  # x = m * 2^exponent, m in [0.5, 1)
        low = b.fcmp_ordered("<", m, k(0.707106781186547524))
        e = b.sitofp(b.sub(exponent, b.zext(low, i32)), f32)
        f = b.fsub(b.select(low, b.fadd(m, m), m), k(1.0))
        c = ("contract",)  # the small terms are summed in Cephes' order
        z = b.fmul(f, f, flags=c)
        y = b.fmul(b.fmul(f, z, flags=c), _poly(b, f, _LOG_POLY), flags=c)
        y = b.fsub(b.fadd(y, b.fmul(e, k(-2.12194440e-4), flags=c), flags=c), b.fmul(z, k(0.5), flags=c), flags=c)
        r = b.fadd(b.fadd(f, y, flags=c), b.fmul(e, k(0.693359375), flags=c), flags=c)
        r = b.select(b.fcmp_ordered("==", x, k(float("inf"))), x, r)
        r = b.select(b.fcmp_ordered("==", x, k(0.0)), k(float("-inf")), r)
        return b.select(b.fcmp_unordered("<", x, k(0.0)), k(float("nan")), r)

    def tanh_f32(self, x: ir.Value) -> ir.Value:
        """tanhf as Eigen's rational approximation (as ORT's MLAS), vectorizable, < 5 ulps: x * (P(x^2) / Q(x^2))
        with x clamped to +-TANH_LIMIT, where the ratio rounds to exactly +-1 (with FMAs and without), so large |x|
        give +-1 with no clamp of the result and |tanh| never exceeds 1. P(0) / Q(0) is 1 - 1.3e-7, so tiny and
        subnormal x give x to within 2 ulps with no test for them; NaN stays NaN (ordered compares keep it through the
        clamp). `x` a float32 scalar or vector."""
        b, f32 = self.b, x.type
        lo, hi = splat_const(f32, -TANH_LIMIT), splat_const(f32, TANH_LIMIT)
        clamped = b.select(b.fcmp_ordered("<", x, lo), lo, x)  # maxps / minps
        clamped = b.select(b.fcmp_ordered(">", clamped, hi), hi, clamped)
        x2 = b.fmul(clamped, clamped, flags=FAST)
        return b.fmul(b.fdiv(_poly(b, x2, _TANH_NUM), _poly(b, x2, _TANH_DEN)), clamped, flags=FAST)

    def sigmoid(self, dtype, x: ir.Value) -> ir.Value:
        if _is_f32(x.type):
            return self.sigmoid_f32(x)
        one = const(dtype, 1)
        return self.b.fdiv(one, self.b.fadd(one, self.intrinsic("llvm.exp", self.b.fneg(x))))

    def sigmoid_f32(self, x: ir.Value) -> ir.Value:
        """1 / (1 + exp(-x)) in one division with no select and no multiply by 2^n: with exp(-x) = y 2^n (Cephes'
        reduction, n = round(-x log2 e) by adding 1.5 * 2^23, y = e^r on |r| <= ln(2) / 2 by a degree-6 polynomial in
        one Horner chain), the result is 2^-n / (2^-n + y), 2^-n made from n's bits. x is clamped to [-88, 88] so that
        n stays in [-127, 127]: 2^-n is then 2^127 at most and exactly 0 at n = 127 (x <= -87.68, where the exact value
        is under 1.2e-38). Tiny results keep their relative precision (the sum and the quotient round once each, also
        to a subnormal); sigmoid(+inf) = 1, sigmoid(-inf) = 0, NaN stays NaN (ordered compares keep it through the
        clamp). `x` a float32 scalar or vector."""
        b, f32 = self.b, x.type
        i32 = _same_shape(f32, ir.IntType(32))

        def k(value):
            return splat_const(f32, value)
        c = ("contract",)
        lo, hi = k(-88.0), k(88.0)
        x = b.select(b.fcmp_ordered("<", x, lo), lo, x)  # maxps / minps
        x = b.select(b.fcmp_ordered(">", x, hi), hi, x)
        t = b.fadd(b.fmul(x, k(-1.44269504088896341), flags=c), k(12582912.0), flags=c)
        n = b.fsub(t, k(12582912.0))
        minus_r = b.fadd(b.fadd(x, b.fmul(n, k(0.693359375), flags=c), flags=c), b.fmul(n, k(-2.12194440e-4), flags=c), flags=c)
        y = _poly(b, minus_r, _SIGMOID_EXP_POLY_NEGATED)
        # 2^-n: n sits in t's low bits; shifted into the exponent field, t's own exponent bits leave the word
        inverse = b.bitcast(b.sub(splat_const(i32, 127 << 23), b.shl(b.bitcast(t, i32), splat_const(i32, 23))), f32)
        return b.fdiv(inverse, b.fadd(inverse, y))

    def erf_f32(self, x: ir.Value) -> ir.Value:
        """erff as a rational approximation on [-4, 4] (the one Eigen and XLA use), vectorizable, < 5e-7 abs."""
        b, f32 = self.b, ir.FloatType()
        given = x
        x = self.intrinsic_binary("llvm.minnum", self.intrinsic_binary("llvm.maxnum", x, ir.Constant(f32, -4.0)), ir.Constant(f32, 4.0))
        x2 = b.fmul(x, x)
        return _keep_nan(b, given, b.fdiv(b.fmul(x, _poly(b, x2, _ERF_NUM)), _poly(b, x2, _ERF_DEN)))
