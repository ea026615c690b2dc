"""Storage-only low-precision dtypes: bfloat16, the float8/float4 formats, int4/uint4/int2/uint2.

ABI: a tensor of one of these dtypes holds one element per ml_dtypes item (bfloat16: 16 bits, every
other one: one byte per element, unpacked; the 4-bit and 2-bit integers keep their value in the low
bits of the byte with the high bits zero, as ml_dtypes stores them). Kernels never compute in these
types: a load converts the stored bits to the *compute* dtype (float32 for the float formats, int8 /
uint8 for the small integers) and a store converts back, so every op lowering written for
float32/int8 works on them unchanged. Conversions are integer bit manipulation in LLVM IR (no
`bfloat` type, no libcalls, no float rounding modes), so x86_64, aarch64 and armv7 agree bit for bit.

Rounding (the ground truth is ml_dtypes / onnx.reference where ONNX defines the result, and our
rules in cast_rules.py where it does not; checked over every bit pattern in tests/test_lowp_dtypes.py):

- `encode(dtype, v, saturate=False)`: ml_dtypes' `astype` (round to nearest even; overflow gives
  inf/NaN as the format has them; float4 saturates); with `saturate=True` the float8 formats clamp
  to +-max first (ONNX Cast/QuantizeLinear `saturate=1`, `onnx.numpy_helper.saturate_cast`).
- `e8m0_cast(v, saturate, round_mode)`: onnx.numpy_helper.to_float8e8m0 (ONNX Cast to FLOAT8E8M0).
- float -> int4/uint4/int2/uint2 (Cast): NaN -> 0, truncation toward zero, saturated to the range (our
  rule for what ONNX leaves undefined, the same as every float -> integer Cast; cast_rules.py in numpy).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from llvmlite import ir

from ..dtypes import is_storage_only

try:  # ml_dtypes comes with onnx
    import ml_dtypes
except ImportError:  # pragma: no cover
    ml_dtypes = None

I8, I16, I32, I64 = ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64)
F32 = ir.FloatType()


@dataclass(frozen=True)
class FloatFormat:
    exp_bits: int
    mant_bits: int
    bias: int
    kind: str
    """"ieee" (inf and NaNs, e5m2), "fn" (no inf, NaN = all ones), "fnuz" (no inf, no -0, NaN = 0x80), "fp4" (neither)."""
    max_code: int
    """The largest finite magnitude's encoding (sign bit clear)."""

    @property
    def sign_shift(self) -> int:
        return self.exp_bits + self.mant_bits


@dataclass(frozen=True)
class IntFormat:
    bits: int
    signed: bool


FLOAT_FORMATS: dict[str, FloatFormat] = {
    "float8_e4m3fn": FloatFormat(4, 3, 7, "fn", 0x7E),
    "float8_e4m3fnuz": FloatFormat(4, 3, 8, "fnuz", 0x7F),
    "float8_e5m2": FloatFormat(5, 2, 15, "ieee", 0x7B),
    "float8_e5m2fnuz": FloatFormat(5, 2, 16, "fnuz", 0x7F),
    "float4_e2m1fn": FloatFormat(2, 1, 1, "fp4", 0x7),
}
INT_FORMATS: dict[str, IntFormat] = {
    "int4": IntFormat(4, True), "uint4": IntFormat(4, False), "int2": IntFormat(2, True), "uint2": IntFormat(2, False),
}
FLOATLIKE = frozenset(FLOAT_FORMATS) | {"bfloat16", "float8_e8m0fnu"}
SATURATING = frozenset({"float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"})
"""The formats ONNX's `saturate` attribute applies to."""


def _name(dtype) -> str | None:
    return np.dtype(dtype).name if is_storage_only(dtype) else None


is_lowp = is_storage_only


def storage_type(dtype) -> ir.Type:
    return I16 if np.dtype(dtype).itemsize == 2 else I8


def int_info(dtype) -> tuple[int, int]:
    """(min, max) of a small integer dtype."""
    f = INT_FORMATS[_name(dtype)]
    return (-(1 << (f.bits - 1)), (1 << (f.bits - 1)) - 1) if f.signed else (0, (1 << f.bits) - 1)


def float_max(dtype) -> float:
    return float(ml_dtypes.finfo(np.dtype(dtype)).max)


# ------------------------------------------------------------------------------------------------
# IR helpers
# ------------------------------------------------------------------------------------------------
def _c(ty, v):
    return ir.Constant(ty, v)


def _sel(b, cond, x, y):
    return b.select(cond, x, y)


def _f32_bits(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    return b.bitcast(v, I32)


# ------------------------------------------------------------------------------------------------
# decode: stored bits -> compute value
# ------------------------------------------------------------------------------------------------
def decode(b: ir.IRBuilder, dtype, bits: ir.Value) -> ir.Value:
    name = _name(dtype)
    if name in INT_FORMATS:
        f = INT_FORMATS[name]
        if f.signed:
            shift = _c(I8, 8 - f.bits)
            return b.ashr(b.shl(bits, shift), shift)
        return b.and_(bits, _c(I8, (1 << f.bits) - 1))
    if name == "bfloat16":
        return b.bitcast(b.shl(b.zext(bits, I32), _c(I32, 16)), F32)
    if name == "float8_e8m0fnu":
        e = b.zext(bits, I32)
        normal = b.shl(e, _c(I32, 23))
        out = _sel(b, b.icmp_unsigned("==", e, _c(I32, 0)), _c(I32, 0x00400000), normal)
        out = _sel(b, b.icmp_unsigned("==", e, _c(I32, 0xFF)), _c(I32, 0x7FC00000), out)
        return b.bitcast(out, F32)
    return _decode_float(b, FLOAT_FORMATS[name], bits)


def _decode_float(b: ir.IRBuilder, f: FloatFormat, bits: ir.Value) -> ir.Value:
    x = b.zext(bits, I32)
    sign = b.shl(b.lshr(x, _c(I32, f.sign_shift)), _c(I32, 31))
    e = b.and_(b.lshr(x, _c(I32, f.mant_bits)), _c(I32, (1 << f.exp_bits) - 1))
    m = b.and_(x, _c(I32, (1 << f.mant_bits) - 1))
    normal = b.or_(b.shl(b.add(e, _c(I32, 127 - f.bias)), _c(I32, 23)), b.shl(m, _c(I32, 23 - f.mant_bits)))
    # subnormals: m * 2^(1 - bias - M), exact in float32 (a normal float32 for every format here)
    sub = b.fmul(b.uitofp(m, F32), _c(F32, 2.0 ** (1 - f.bias - f.mant_bits)))
    mag = _sel(b, b.icmp_unsigned("==", e, _c(I32, 0)), b.bitcast(sub, I32), normal)
    out = b.or_(mag, sign)
    nan = b.or_(sign, _c(I32, 0x7FC00000))
    emax = (1 << f.exp_bits) - 1
    if f.kind == "ieee":
        special = b.icmp_unsigned("==", e, _c(I32, emax))
        inf_or_nan = _sel(b, b.icmp_unsigned("==", m, _c(I32, 0)), b.or_(sign, _c(I32, 0x7F800000)), nan)
        out = _sel(b, special, inf_or_nan, out)
    elif f.kind == "fn":
        out = _sel(b, b.icmp_unsigned("==", b.and_(x, _c(I32, (1 << f.sign_shift) - 1)), _c(I32, (1 << f.sign_shift) - 1)), nan, out)
    elif f.kind == "fnuz":
        out = _sel(b, b.icmp_unsigned("==", x, _c(I32, 1 << f.sign_shift)), _c(I32, 0xFFC00000), out)
    return b.bitcast(out, F32)


# ------------------------------------------------------------------------------------------------
# encode: compute value -> stored bits
# ------------------------------------------------------------------------------------------------
def encode(b: ir.IRBuilder, dtype, value: ir.Value, saturate: bool = False) -> ir.Value:
    name = _name(dtype)
    if name in INT_FORMATS:
        return b.and_(value, _c(I8, (1 << INT_FORMATS[name].bits) - 1))
    u = _f32_bits(b, value)
    if name == "bfloat16":
        return _encode_bf16(b, u)
    if name == "float8_e8m0fnu":
        return _encode_e8m0_astype(b, u)
    return _encode_float(b, FLOAT_FORMATS[name], u, saturate and name in SATURATING)


def _encode_bf16(b: ir.IRBuilder, u: ir.Value) -> ir.Value:
    a = b.and_(u, _c(I32, 0x7FFFFFFF))
    lsb = b.and_(b.lshr(u, _c(I32, 16)), _c(I32, 1))
    rounded = b.lshr(b.add(u, b.add(lsb, _c(I32, 0x7FFF))), _c(I32, 16))
    nan = b.or_(b.lshr(b.and_(u, _c(I32, 0x80000000)), _c(I32, 16)), _c(I32, 0x7FC0))
    out = _sel(b, b.icmp_unsigned(">", a, _c(I32, 0x7F800000)), nan, rounded)
    return b.trunc(out, I16)


def _round_magnitude(b: ir.IRBuilder, f: FloatFormat, a: ir.Value) -> ir.Value:
    """|x| (float32 bits, finite) rounded to nearest even in format f: the magnitude code, possibly past max_code."""
    shift = 23 - f.mant_bits
    # normal in the target: add half an ulp minus one plus the lsb, drop the low bits, rebias the exponent
    lsb = b.and_(b.lshr(a, _c(I32, shift)), _c(I32, 1))
    normal = b.sub(b.lshr(b.add(a, b.add(lsb, _c(I32, (1 << (shift - 1)) - 1))), _c(I32, shift)),
                   _c(I32, (127 - f.bias) << f.mant_bits))
    # subnormal in the target (or below): shift the full significand right by s = shift + 1 - e_target
    ef = b.lshr(a, _c(I32, 23))
    sig = b.or_(b.and_(a, _c(I32, 0x7FFFFF)), _c(I32, 0x800000))
    s = b.sub(_c(I32, shift + 1 + 127 - f.bias), ef)
    s = _sel(b, b.icmp_unsigned(">", s, _c(I32, 31)), _c(I32, 31), s)
    q = b.lshr(sig, s)
    rem = b.and_(sig, b.sub(b.shl(_c(I32, 1), s), _c(I32, 1)))
    half = b.shl(_c(I32, 1), b.sub(s, _c(I32, 1)))
    up = b.or_(b.icmp_unsigned(">", rem, half), b.and_(b.icmp_unsigned("==", rem, half), b.icmp_unsigned("!=", b.and_(q, _c(I32, 1)), _c(I32, 0))))
    sub = b.add(q, b.zext(up, I32))
    sub = _sel(b, b.icmp_unsigned("==", ef, _c(I32, 0)), _c(I32, 0), sub)  # float32 subnormals: far below
    is_normal = b.icmp_signed(">", ef, _c(I32, 127 - f.bias))  # target exponent >= 1
    return _sel(b, is_normal, normal, sub)


def _encode_float(b: ir.IRBuilder, f: FloatFormat, u: ir.Value, saturate: bool) -> ir.Value:
    sign = b.lshr(u, _c(I32, 31))
    sign_bit = b.shl(sign, _c(I32, f.sign_shift))
    a = b.and_(u, _c(I32, 0x7FFFFFFF))
    mag = _round_magnitude(b, f, a)
    maxc = _c(I32, f.max_code)
    if f.kind == "fnuz":
        nan = _c(I32, 1 << f.sign_shift)
    elif f.kind == "fn":
        nan = b.or_(sign_bit, _c(I32, (1 << f.sign_shift) - 1))
    elif f.kind == "ieee":
        nan = b.or_(sign_bit, _c(I32, ((1 << f.exp_bits) - 1) << f.mant_bits | 1 << (f.mant_bits - 1)))
    else:  # float4: ml_dtypes gives a zero of the opposite sign
        nan = b.xor(sign_bit, _c(I32, 1 << f.sign_shift))
    if saturate or f.kind == "fp4":
        too_big = b.or_(sign_bit, maxc)
    elif f.kind == "ieee":
        too_big = b.or_(sign_bit, _c(I32, ((1 << f.exp_bits) - 1) << f.mant_bits))
    else:
        too_big = nan
    out = b.or_(sign_bit, mag)
    if f.kind == "fnuz":
        out = _sel(b, b.icmp_unsigned("==", mag, _c(I32, 0)), _c(I32, 0), out)
    out = _sel(b, b.icmp_unsigned(">", mag, maxc), too_big, out)
    out = _sel(b, b.icmp_unsigned(">=", a, _c(I32, 0x7F800000)), too_big, out)  # inf (NaN below)
    out = _sel(b, b.icmp_unsigned(">", a, _c(I32, 0x7F800000)), nan, out)
    return b.trunc(out, I8)


def _encode_e8m0_astype(b: ir.IRBuilder, u: ir.Value) -> ir.Value:
    """ml_dtypes' float32 -> float8_e8m0fnu: round half up on the exponent; zero, negatives, inf, NaN -> 0xFF."""
    e = b.lshr(b.and_(u, _c(I32, 0x7FFFFFFF)), _c(I32, 23))
    m = b.and_(u, _c(I32, 0x7FFFFF))
    normal = b.add(e, b.zext(b.icmp_unsigned(">=", m, _c(I32, 0x400000)), I32))
    # float32 subnormals: up to 2^-127 (m = 0x400000) code 0, above it code 1 (as ml_dtypes does)
    sub = b.zext(b.icmp_unsigned(">", m, _c(I32, 0x400000)), I32)
    code = _sel(b, b.icmp_unsigned("==", e, _c(I32, 0)), sub, normal)
    bad = b.or_(b.icmp_unsigned(">", code, _c(I32, 0xFE)), b.or_(b.icmp_unsigned("==", b.and_(u, _c(I32, 0x7FFFFFFF)), _c(I32, 0)),
                                                             b.icmp_unsigned(">=", u, _c(I32, 0x80000000))))
    bad = b.or_(bad, b.icmp_unsigned("==", b.and_(u, _c(I32, 0x7F800000)), _c(I32, 0x7F800000)))
    return b.trunc(_sel(b, bad, _c(I32, 0xFF), code), I8)


def e8m0_cast(b: ir.IRBuilder, value: ir.Value, saturate: bool = True, round_mode: str = "up") -> ir.Value:
    """onnx.numpy_helper.to_float8e8m0 (ONNX Cast to FLOAT8E8M0): the stored bits."""
    u = _f32_bits(b, value)
    e = b.and_(b.lshr(u, _c(I32, 23)), _c(I32, 0xFF))
    special = b.icmp_unsigned("==", e, _c(I32, 0xFF))
    if round_mode == "nearest":
        g = b.icmp_unsigned("!=", b.and_(u, _c(I32, 0x400000)), _c(I32, 0))
        r = b.icmp_unsigned("!=", b.and_(u, _c(I32, 0x200000)), _c(I32, 0))
        s = b.icmp_unsigned("!=", b.and_(u, _c(I32, 0x1FFFFF)), _c(I32, 0))
        lsb = b.icmp_unsigned(">", e, _c(I32, 0))
        up = b.and_(g, b.or_(r, b.or_(s, lsb)))
    elif round_mode == "up":
        up = b.icmp_unsigned("!=", b.and_(u, _c(I32, 0x7FFFFF)), _c(I32, 0))
    elif round_mode == "down":
        up = _c(ir.IntType(1), 0)
    else:
        raise ValueError(f"unsupported round_mode {round_mode!r}")
    if saturate:
        up = b.and_(up, b.icmp_unsigned("!=", e, _c(I32, 0xFE)))
    code = b.add(e, b.zext(up, I32))
    return b.trunc(_sel(b, special, _c(I32, 0xFF), code), I8)


def round_to(b: ir.IRBuilder, dtype, value: ir.Value, saturate: bool = False) -> ir.Value:
    """The compute value that storing `value` as `dtype` and loading it back gives (identity for other dtypes)."""
    if not is_lowp(dtype):
        return value
    return decode(b, dtype, encode(b, dtype, value, saturate))


def float_to_int_sat(b: ir.IRBuilder, value: ir.Value, ty: ir.IntType, signed: bool) -> ir.Value:
    """Float -> integer by the rule for what ONNX leaves undefined (docs/INTERNALS.md, Conversions): NaN
    -> 0, truncation toward zero, out of range -> the type's min/max (LLVM's fpto[su]i.sat), on every target."""
    if isinstance(value.type, ir.HalfType):
        value = b.fpext(value, F32)
    fn = b.module.declare_intrinsic("llvm.fptosi.sat" if signed else "llvm.fptoui.sat", [ty, value.type],
                                    ir.FunctionType(ty, [value.type]))
    return b.call(fn, [value])


def float_to_small_int(b: ir.IRBuilder, value: ir.Value, dtype) -> ir.Value:
    """A float (compute value) -> int8 holding its int4/uint4/int2/uint2 value: NaN -> 0, truncation
    toward zero, saturated to the format's range (the same rule as every float -> integer Cast)."""
    lo, hi = int_info(dtype)
    v = float_to_int_sat(b, value, I32, True)
    v = _sel(b, b.icmp_signed("<", v, _c(I32, lo)), _c(I32, lo), v)
    v = _sel(b, b.icmp_signed(">", v, _c(I32, hi)), _c(I32, hi), v)
    return b.trunc(v, I8)
