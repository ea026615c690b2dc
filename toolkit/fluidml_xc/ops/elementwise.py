"""Elementwise ops with numpy broadcasting: unary math, binary arithmetic, comparisons, logic, Where, Cast, Clip."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
from llvmlite import ir

from ..kernels import lowp
from ..dtypes import compute_dtype
from ..errors import InputError
from ..kernels.kernel import Access
from ..kernels.rows import each_row, row_ptr, vector_rows, walk_run
from ..kernels.scalar import const, is_float, llvm_type
from ..opspec import register
from ..strings import is_slot
from ..target.arch import arch_of
from .strings import lower_string_equal

FLOATS = ("float32", "float64", "float16")
NUMERIC = FLOATS + ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


def _unary(k, fn):
    dtype = k.inputs[0].dtype
    k.elementwise(lambda v: fn(k, dtype, v[0]), ins=[k.inputs[0]])


def _intrinsic(name):
    return lambda k, dt, x: k.s.intrinsic(name, x)


def _libm(name):
    return lambda k, dt, x: k.s.libm(name, dt, x)


def _relu(k, dt, x):
    return k.s.clamp(dt, x, const(dt, 0), None) if is_float(dt) else k.b.select(k.s.cmp(dt, ">", x, const(dt, 0)), x, const(dt, 0))


def _sigmoid(k, dt, x):
    return k.s.sigmoid(dt, x)


def _leaky(k, dt, x):
    alpha = const(dt, k.attr("alpha", 0.01))
    return k.b.select(k.s.cmp(dt, ">=", x, const(dt, 0)), x, k.b.fmul(x, alpha))


def _elu(k, dt, x):
    alpha = const(dt, k.attr("alpha", 1.0))
    neg = k.b.fmul(alpha, k.b.fsub(k.s.intrinsic("llvm.exp", x), const(dt, 1)))
    return k.b.select(k.s.cmp(dt, ">=", x, const(dt, 0)), x, neg)


def _selu(k, dt, x):
    alpha, gamma = const(dt, k.attr("alpha", 1.67326319217681884765625)), const(dt, k.attr("gamma", 1.05070102214813232421875))
    neg = k.b.fmul(alpha, k.b.fsub(k.s.intrinsic("llvm.exp", x), const(dt, 1)))
    return k.b.fmul(gamma, k.b.select(k.s.cmp(dt, ">", x, const(dt, 0)), x, neg))


def _hard_sigmoid(k, dt, x):
    alpha, beta = const(dt, k.attr("alpha", 0.2)), const(dt, k.attr("beta", 0.5))
    y = k.b.fadd(k.b.fmul(alpha, x), beta)
    return k.s.clamp(dt, y, const(dt, 0), const(dt, 1))


def _hard_swish(k, dt, x):
    y = k.b.fadd(k.b.fmul(const(dt, 1 / 6), x), const(dt, 0.5))
    return k.b.fmul(x, k.s.clamp(dt, y, const(dt, 0), const(dt, 1)))


def _softplus(k, dt, x):
    """max(x, 0) + log1p(exp(-|x|)) (numpy's logaddexp(0, x), as onnx.reference and ORT): log(1 + exp(x)) overflowed
    to inf above x = 88 and gave 0 below -17. log1p(u), u in (0, 1]: log(1 + u) from u = 0.05 up, below it
    u - u^2/2 + u^3/3 - u^4/4 (within 2e-6 relative; log(1 + u) would lose digits to the rounding of 1 + u)."""
    b, s = k.b, k.s
    u = s.intrinsic("llvm.exp", b.fneg(s.intrinsic("llvm.fabs", x)))
    c = lambda v: const(dt, v)  # noqa: E731
    series = s.mul(dt, u, s.sub(dt, c(1), s.mul(dt, u, s.sub(dt, c(0.5), s.mul(dt, u, s.sub(dt, c(1 / 3), s.mul(dt, u, c(0.25))))))))
    log1p = b.select(b.fcmp_ordered("<", u, c(0.05)), series, s.intrinsic("llvm.log", s.add(dt, u, c(1))))
    return b.fadd(b.select(b.fcmp_ordered(">", x, c(0)), x, c(0)), log1p)


def _softsign(k, dt, x):
    return k.b.fdiv(x, k.b.fadd(k.s.intrinsic("llvm.fabs", x), const(dt, 1)))


def _abs(k, dt, x):
    if is_float(dt):
        return k.s.intrinsic("llvm.fabs", x)
    if np.dtype(dt).kind == "u":
        return x
    return k.b.select(k.s.cmp(dt, "<", x, const(dt, 0)), k.b.neg(x), x)


def _sign(k, dt, x):
    zero, one = const(dt, 0), const(dt, 1)
    pos = k.b.select(k.s.cmp(dt, ">", x, zero), one, zero)
    if np.dtype(dt).kind == "u":
        return pos
    sign = k.b.select(k.s.cmp(dt, "<", x, zero), const(dt, -1), pos)
    return k.b.select(k.b.fcmp_unordered("uno", x, x), x, sign) if is_float(dt) else sign  # Sign(NaN) = NaN


def _reciprocal(k, dt, x):
    return k.b.fdiv(const(dt, 1), x)


def _gelu(k, dt, x):
    half = const(dt, 0.5)
    if k.attr("approximate", "none") == "tanh":
        inner = k.b.fmul(const(dt, math.sqrt(2 / math.pi)), k.b.fadd(x, k.b.fmul(const(dt, 0.044715), k.b.fmul(x, k.b.fmul(x, x)))))
        t = k.s.libm("tanh", dt, inner)
    else:
        t = k.s.libm("erf", dt, k.b.fmul(x, const(dt, 1 / math.sqrt(2))))
    return k.b.fmul(k.b.fmul(half, x), k.b.fadd(const(dt, 1), t))


def _round(k, dt, x):
    return k.s.intrinsic("llvm.roundeven", x)


def _not(k, dt, x):
    return k.b.xor(x, ir.Constant(x.type, 1))


def _bitwise_not(k, dt, x):
    return k.b.not_(x)


@dataclass(frozen=True)
class ScalarOp:
    """An elementwise op's scalar lowering (k, dtype, *operands) -> value and the traits it registers with."""

    fn: Callable
    work: float = 1.0
    """OpSpec.work."""
    epilogue_activation: bool = False
    """OpSpec.epilogue_activation."""


UNARY_OPS = {
    "Relu": ScalarOp(_relu, epilogue_activation=True), "Neg": ScalarOp(lambda k, dt, x: k.s.neg(dt, x)),
    "Abs": ScalarOp(_abs), "Sign": ScalarOp(_sign), "Sqrt": ScalarOp(_intrinsic("llvm.sqrt"), 4),
    "Exp": ScalarOp(_intrinsic("llvm.exp"), 10), "Log": ScalarOp(_intrinsic("llvm.log"), 10),
    "Floor": ScalarOp(_intrinsic("llvm.floor")), "Ceil": ScalarOp(_intrinsic("llvm.ceil")), "Round": ScalarOp(_round),
    "Sin": ScalarOp(_intrinsic("llvm.sin"), 10), "Cos": ScalarOp(_intrinsic("llvm.cos"), 10),
    "Tan": ScalarOp(_libm("tan"), 12), "Asin": ScalarOp(_libm("asin"), 12), "Acos": ScalarOp(_libm("acos"), 12),
    "Atan": ScalarOp(_libm("atan"), 12), "Sinh": ScalarOp(_libm("sinh"), 12), "Cosh": ScalarOp(_libm("cosh"), 12),
    "Asinh": ScalarOp(_libm("asinh"), 14), "Acosh": ScalarOp(_libm("acosh"), 14), "Atanh": ScalarOp(_libm("atanh"), 14),
    "Tanh": ScalarOp(_libm("tanh"), 10), "Erf": ScalarOp(_libm("erf"), 10), "Sigmoid": ScalarOp(_sigmoid, 10),
    "Reciprocal": ScalarOp(_reciprocal, 4), "LeakyRelu": ScalarOp(_leaky, epilogue_activation=True),
    "Elu": ScalarOp(_elu), "Selu": ScalarOp(_selu), "HardSigmoid": ScalarOp(_hard_sigmoid),
    "HardSwish": ScalarOp(_hard_swish, 3), "Softplus": ScalarOp(_softplus, 12), "Softsign": ScalarOp(_softsign, 4),
    "Gelu": ScalarOp(_gelu, 14), "Not": ScalarOp(_not), "BitwiseNot": ScalarOp(_bitwise_not),
}
"""Unary elementwise ops (work: transcendental functions are calls or long polynomials)."""
UNARY = {name: op.fn for name, op in UNARY_OPS.items()}
FLOAT_ONLY = {"Sqrt", "Exp", "Log", "Floor", "Ceil", "Round", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh",
              "Asinh", "Acosh", "Atanh", "Tanh", "Erf", "Sigmoid", "Reciprocal", "LeakyRelu", "Elu", "Selu", "HardSigmoid",
              "HardSwish", "Softplus", "Softsign", "Gelu"}


BITWISE = frozenset({"BitwiseNot", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "And", "Or", "Xor"})
"""Bit and logic ops: storage-only operands are widened before them (passes/lowp_compute.py)."""


VECTOR_UNARY = frozenset({"Sigmoid"})
"""float32 ops lowered in explicit vectors on x86, one vector per loop step (_vector_unary)."""
ROW_MIN = 1024
"""Elements a row of _vector_unary holds at least (innermost dims joined until then; rows are the parallel tiles)."""


def _vector_unary(k, fn) -> bool:
    """out = fn(x) over contiguous float32 rows in explicit vectors, one per loop step, the last n % lanes elements
    one by one; False (the generic loop) off x86, for run-time shapes, strided tensors or a single row. LLVM's loop
    vectorizer runs 4 vectors per step: with Sigmoid's long chain per vector (a dozen dependent operations and a
    division) that loop is 9% slower on Zen 3 cache-resident, as is 2 per step (Tanh gains nothing either way;
    docs/OPS.md, issue #28)."""
    x, out = k.inputs[0], k.outputs[0]
    lanes = k.lanes(np.float32)
    if k.spec is None or not arch_of(k.spec.triple).x86 or k.dynamic or x.shape != out.shape or not x.size:
        return False
    dims, run = [], 1
    for d in reversed(range(x.rank)):
        if run >= ROW_MIN:
            break
        dims.append(d)
        run *= x.shape[d]
    n = vector_rows(k, x, dims)
    if n is None or n < lanes or n == x.size:  # one row: the generic loop splits it over threads
        return False

    def row(ix, inner):
        src, dst = row_ptr(k, x, ix, inner), row_ptr(k, out, ix, inner)
        walk_run(k, n, lanes, lambda _, at: k.vstore(fn(k.vload(src, np.float32, at, lanes)), dst, np.float32, at),
                 lambda at: k.store_ptr(fn(k.load_ptr(src, np.float32, at)), dst, np.float32, at), unroll=1)
    each_row(k, x.shape, x.strides, dims, row)
    return True


def _register_unary(name, op: ScalarOp):
    dtypes = FLOATS if name in FLOAT_ONLY else (("bool",) if name == "Not" else None)

    @register(name, inplace=True, dtypes=dtypes, elementwise=True, fusable=True, lowp_native=name not in BITWISE,
              work=op.work, epilogue_activation=op.epilogue_activation, runtime_extents=True)
    def lower(k):
        if (name in VECTOR_UNARY and np.dtype(k.inputs[0].dtype) == np.float32
                and _vector_unary(k, lambda v: op.fn(k, np.float32, v))):
            return
        _unary(k, op.fn)


for _name, _op in UNARY_OPS.items():
    _register_unary(_name, _op)


def power(k, dt, x, y, ydt):
    """x ** y in dt; integers through double."""
    if is_float(dt):
        if ydt != dt:
            y = k.s.cast(ydt, dt, y)
        return k.s.intrinsic_binary("llvm.pow", x, y)
    xf = k.s.cast(dt, np.float64, x)
    yf = k.s.cast(ydt, np.float64, y)
    return k.s.cast(np.float64, dt, k.s.intrinsic_binary("llvm.pow", xf, yf))


def _div(k, dt, x, y):
    return k.s.div(dt, x, y)


def _mod(k, dt, x, y):
    r = k.s.rem(dt, x, y)
    if k.attr("fmod", 0) or np.dtype(dt).kind == "u":
        return r
    zero = const(dt, 0)
    if is_float(dt):
        # numpy's mod: the remainder takes the sign of the divisor (zero included); plain fadd, since
        # an infinite divisor gives r + y = +-inf for a remainder of the other sign
        adjust = k.b.and_(k.b.fcmp_ordered("!=", r, zero),
                          k.b.xor(k.b.fcmp_ordered("<", r, zero), k.b.fcmp_ordered("<", y, zero)))
        signed_zero = k.s.intrinsic_binary("llvm.copysign", zero, y)
        r = k.b.select(k.b.fcmp_ordered("==", r, zero), signed_zero, r)
        return k.b.select(adjust, k.b.fadd(r, y), r)
    adjust = k.b.and_(k.b.icmp_signed("!=", r, zero), k.b.icmp_signed("!=", k.b.icmp_signed("<", r, zero), k.b.icmp_signed("<", y, zero)))
    return k.b.select(adjust, k.b.add(r, y), r)




def ieee_add(k, dt, x, y):
    """IEEE add: no fast-math flags, so infinities (attention masks: x + -inf) and NaNs survive."""
    return k.b.fadd(x, y) if is_float(dt) else k.b.add(x, y)


def _sub(k, dt, x, y):
    return k.b.fsub(x, y) if is_float(dt) else k.b.sub(x, y)


def _mul(k, dt, x, y):
    return k.b.fmul(x, y) if is_float(dt) else k.b.mul(x, y)


BINARY_OPS = {
    "Add": ScalarOp(ieee_add), "Sub": ScalarOp(_sub), "Mul": ScalarOp(_mul), "Div": ScalarOp(_div, 4), "Mod": ScalarOp(_mod, 6),
    "BitwiseAnd": ScalarOp(lambda k, dt, x, y: k.b.and_(x, y)), "BitwiseOr": ScalarOp(lambda k, dt, x, y: k.b.or_(x, y)),
    "BitwiseXor": ScalarOp(lambda k, dt, x, y: k.b.xor(x, y)),
    "And": ScalarOp(lambda k, dt, x, y: k.b.and_(x, y)), "Or": ScalarOp(lambda k, dt, x, y: k.b.or_(x, y)),
    "Xor": ScalarOp(lambda k, dt, x, y: k.b.xor(x, y)),
}
BINARY = {name: op.fn for name, op in BINARY_OPS.items()}
COMPARE = {"Equal": "==", "Less": "<", "LessOrEqual": "<=", "Greater": ">", "GreaterOrEqual": ">="}


def _register_binary(name, op: ScalarOp):
    @register(name, inplace=True, elementwise=True, fusable=True, lowp_native=name not in BITWISE, work=op.work,
              runtime_extents=True)
    def lower(k):
        dt = k.inputs[0].dtype
        k.elementwise(lambda v: op.fn(k, dt, v[0], v[1]), ins=k.inputs[:2])


for _name, _op in BINARY_OPS.items():
    _register_binary(_name, _op)


CONSTANT_POWERS = {
    0.0: lambda k, dt, x: const(dt, 1.0),
    1.0: lambda k, dt, x: x,
    2.0: lambda k, dt, x: k.b.fmul(x, x),
    3.0: lambda k, dt, x: k.b.fmul(k.b.fmul(x, x), x),
    4.0: lambda k, dt, x: (lambda sq: k.b.fmul(sq, sq))(k.b.fmul(x, x)),
    -1.0: lambda k, dt, x: k.b.fdiv(const(dt, 1.0), x),
    -2.0: lambda k, dt, x: k.b.fdiv(const(dt, 1.0), k.b.fmul(x, x)),
    0.5: lambda k, dt, x: k.s.intrinsic("llvm.sqrt", x),
}
"""x ** e for a constant scalar exponent: multiplications, a division or sqrt instead of a pow call
(within an ulp or two of pow; ONNX Runtime takes the same shortcuts for 2, 3 and 0.5)."""


def constant_power(k, dt, x, exponent) -> ir.Value | None:
    if not is_float(dt) or exponent is None or np.size(exponent) != 1:
        return None
    fn = CONSTANT_POWERS.get(float(np.ravel(exponent)[0]))
    return None if fn is None else fn(k, dt, x)


@register("Pow", inplace=True, elementwise=True, fusable=True, lowp_native=True, work=20, runtime_extents=True)
def lower_pow(k):
    dt, ydt = k.inputs[0].dtype, k.inputs[1].dtype
    exponent = k.input_value(1)
    if constant_power(k, dt, const(dt, 1.0), exponent) is not None:
        k.elementwise(lambda v: constant_power(k, dt, v[0], exponent), ins=[k.inputs[0]])
        return
    k.elementwise(lambda v: power(k, dt, v[0], v[1], ydt), ins=k.inputs[:2])


def _register_compare(name, op):
    @register(name, elementwise=True, fusable=True, lowp_native=True, runtime_extents=True, strings=name == "Equal")
    def lower(k):
        dt = k.inputs[0].dtype
        if is_slot(dt):
            return lower_string_equal(k)
        k.elementwise(lambda v: k.s.to_bool(k.s.cmp(dt, op, v[0], v[1])), ins=k.inputs[:2])


for _name, _op in COMPARE.items():
    _register_compare(_name, _op)


@register("BitShift", elementwise=True, runtime_extents=True)
def lower_bitshift(k):
    """numpy semantics: a shift by the bit width or more, or by a negative amount, shifts everything out
    (0, or -1 for an arithmetic right shift of a negative signed value) instead of C's undefined result."""
    dt = k.inputs[0].dtype
    left = k.attr("direction") == "LEFT"
    signed = np.dtype(dt).kind == "i"
    width = np.dtype(dt).itemsize * 8

    def fn(v):
        x, y = v[0], v[1]
        in_range = k.b.icmp_unsigned("<", y, ir.Constant(y.type, width))
        amount = k.b.select(in_range, y, ir.Constant(y.type, 0))
        if left:
            return k.b.select(in_range, k.b.shl(x, amount), ir.Constant(x.type, 0))
        if signed:
            return k.b.select(in_range, k.b.ashr(x, amount), k.b.ashr(x, ir.Constant(x.type, width - 1)))
        return k.b.select(in_range, k.b.lshr(x, amount), ir.Constant(x.type, 0))
    k.elementwise(fn, ins=k.inputs[:2])


def _variadic(name, combine, finish=None):
    @register(name, inplace=True, elementwise=True, fusable=True, lowp_native=True, runtime_extents=True)
    def lower(k):
        dt = k.outputs[0].dtype
        ins = [op for op in k.inputs if op is not None]

        def fn(values):
            acc = values[0]
            for v in values[1:]:
                acc = combine(k, dt, acc, v)
            return finish(k, dt, acc, len(values)) if finish else acc
        k.elementwise(fn, ins=ins)


_variadic("Sum", ieee_add)
_variadic("Max", lambda k, dt, a, b: k.s.maximum(dt, a, b))
_variadic("Min", lambda k, dt, a, b: k.s.minimum(dt, a, b))
_variadic("Mean", ieee_add, lambda k, dt, acc, n: k.b.fdiv(acc, const(dt, n)))


@register("Where", elementwise=True, fusable=True, lowp_native=True, runtime_extents=True, strings=True)
def lower_where(k):
    k.elementwise(lambda v: k.b.select(k.b.trunc(v[0], ir.IntType(1)), v[1], v[2]), ins=k.inputs[:3])


@register("Cast", elementwise=True, fusable=True, lowp_native=True, runtime_extents=True)
@register("CastLike", elementwise=True, fusable=True, lowp_native=True, type_only_inputs=(1,), runtime_extents=True)
def lower_cast(k):
    """ONNX Cast; to the storage-only dtypes with `saturate` and `round_mode` (kernels/lowp.py). A Cast the
    lowp_compute pass inserted (`_astype`) rounds as a kernel's store does (ml_dtypes' astype)."""
    src, dst = k.inputs[0].dtype, k.outputs[0].dtype
    if k.attr("_astype"):
        k.elementwise(lambda v: k.s.cast(src, compute_dtype(dst), v[0]), ins=[k.inputs[0]])
        return
    saturate, round_mode = bool(k.attr("saturate", 1)), k.attr("round_mode", "up")
    round_mode = round_mode.decode() if isinstance(round_mode, bytes) else round_mode
    k.elementwise(lambda v: k.s.cast(src, dst, v[0], saturate, round_mode), ins=[k.inputs[0]])


@register("Clip", inplace=True, elementwise=True, fusable=True, lowp_native=True, epilogue_activation=True,
          runtime_extents=True)
def lower_clip(k):
    dt = k.inputs[0].dtype
    if k.graph.opset < 11:
        lo, hi = k.attr("min", -3.4028234663852886e38), k.attr("max", 3.4028234663852886e38)
        bounds = [const(dt, lo), const(dt, hi)]
    else:
        cdt = compute_dtype(dt)
        info = np.finfo(cdt) if is_float(cdt) else np.iinfo(cdt)
        bounds = []
        for i, default in ((1, info.min), (2, info.max)):
            value = k.input_value(i) if i < len(k.inputs) else None
            if i < len(k.inputs) and k.inputs[i] is not None and value is None:
                bounds.append(k.load_ptr(k.inputs[i].ptr, k.inputs[i].dtype))
            else:
                bounds.append(const(dt, value.reshape(-1)[0] if value is not None else default))
    k.elementwise(lambda v: k.s.clamp(dt, v[0], bounds[0], bounds[1]), ins=[k.inputs[0]])


@register("PRelu", inplace=True, elementwise=True, lowp_native=True, runtime_extents=True)
def lower_prelu(k):
    dt = k.inputs[0].dtype
    zero = const(dt, 0)
    k.elementwise(lambda v: k.b.select(k.s.cmp(dt, "<", v[0], zero), _mul(k, dt, v[0], v[1]), v[0]), ins=k.inputs[:2])


@register("ThresholdedRelu", inplace=True, elementwise=True, lowp_native=True, runtime_extents=True)
def lower_thresholded_relu(k):
    dt = k.inputs[0].dtype
    alpha = const(dt, k.attr("alpha", 1.0))
    k.elementwise(lambda v: k.b.select(k.s.cmp(dt, ">", v[0], alpha), v[0], const(dt, 0)), ins=[k.inputs[0]])


@register("Celu", inplace=True, elementwise=True, lowp_native=True, runtime_extents=True)
def lower_celu(k):
    dt = k.inputs[0].dtype
    alpha = const(dt, k.attr("alpha", 1.0))

    def fn(v):
        x = v[0]
        neg = k.b.fmul(alpha, k.b.fsub(k.s.intrinsic("llvm.exp", k.b.fdiv(x, alpha)), const(dt, 1)))
        return k.b.fadd(k.s.clamp(dt, x, const(dt, 0), None), k.s.clamp(dt, neg, None, const(dt, 0)))
    k.elementwise(fn, ins=[k.inputs[0]])


@register("IsNaN", elementwise=True, lowp_native=True, runtime_extents=True)
def lower_isnan(k):
    k.elementwise(lambda v: k.s.to_bool(k.b.fcmp_unordered("uno", v[0], v[0])), ins=[k.inputs[0]])


@register("IsInf", elementwise=True, lowp_native=True, runtime_extents=True)
def lower_isinf(k):
    dt = k.inputs[0].dtype
    pos, neg = k.attr("detect_positive", 1), k.attr("detect_negative", 1)
    inf = const(dt, float("inf"))

    def fn(v):
        hits = ir.Constant(ir.IntType(1), 0)
        if pos:
            hits = k.b.or_(hits, k.b.fcmp_ordered("==", v[0], inf))
        if neg:
            hits = k.b.or_(hits, k.b.fcmp_ordered("==", v[0], k.b.fneg(inf)))
        return k.s.to_bool(hits)
    k.elementwise(fn, ins=[k.inputs[0]])



@register("BitCast", elementwise=True, lowp_native=True, runtime_extents=True)
def lower_bitcast(k):
    """Reinterpret each element's bits as the output dtype (same item size)."""
    src, dst = k.inputs[0].dtype, k.outputs[0].dtype
    if np.dtype(src).itemsize != np.dtype(dst).itemsize:
        raise InputError(f"node {k.node.name!r} (BitCast): {src} -> {dst} changes the item size, which is not supported")
    if lowp.is_lowp(src) or lowp.is_lowp(dst):  # storage-only dtypes: their stored bits, unconverted
        def raw(op):
            acc = op.identity_access()
            bits = np.dtype(np.uint16 if np.dtype(op.dtype).itemsize == 2 else np.uint8) if lowp.is_lowp(op.dtype) else op.dtype
            return Access(acc.storage, bits, acc.strides, acc.offset)
        target = lowp.storage_type(dst) if lowp.is_lowp(dst) else llvm_type(dst)
        domain, capacity = k.domain(k.outputs[0], k.inputs[:1])
        k.generic(domain, [raw(k.outputs[0])], [raw(k.inputs[0])],
                  lambda v, i: [v[0] if v[0].type == target else k.b.bitcast(v[0], target)], capacity=capacity)
        return
    target = llvm_type(dst)
    k.elementwise(lambda v: v[0] if v[0].type == target else k.b.bitcast(v[0], target), ins=[k.inputs[0]])


@register("EyeLike", elementwise=True, lowp_native=True, runtime_extents=True)
def lower_eyelike(k):
    """Ones on diagonal `k` (column - row == k) of a 2-D output, zeros elsewhere."""
    out = k.outputs[0]
    dt = out.dtype
    diagonal = int(k.attr("k", 0))
    one, zero = const(dt, 1), const(dt, 0)

    def body(values, idx):
        hit = k.b.icmp_signed("==", k.b.sub(idx[1], idx[0]), k.index(diagonal))
        return [k.b.select(hit, one, zero)]
    domain, capacity = k.domain(out)
    k.generic(domain, [out.identity_access()], [], body, capacity=capacity)


def _quant_param(k, op, x, axis: int, block: int, idx):
    """The scale/zero-point element for the x element at idx: per tensor, per axis or per block along axis."""
    if op is None:
        return None
    if op.size == 1:
        return k.load_ptr(op.ptr, op.dtype)
    if op.rank == 1 and block == 0:
        return k.load_at(op, idx[axis] if op.strides[0] == 1 else k.b.mul(idx[axis], k.index(op.strides[0])))
    total = k.index(0)
    for d in range(op.rank):
        if op.shape[d] == 1:
            continue
        i = k.b.udiv(idx[d], k.index(block)) if d == axis and block else idx[d]
        total = k.b.add(total, k.b.mul(i, k.index(op.strides[d])))
    return k.load_at(op, total)


def _quant_setup(k):
    x = k.inputs[0]
    axis = int(k.attr("axis", 1))
    if axis < 0:
        axis += max(x.rank, 1)
    return x, axis, int(k.attr("block_size", 0))


@register("DequantizeLinear", since=10, elementwise=True, lowp_native=True, runtime_extents=True)
def lower_dequantize(k):
    """y = (x - zero_point) * scale, computed in float32 (float64 for a float64 scale)."""
    x, axis, block = _quant_setup(k)
    scale = k.inputs[1]
    zp = k.inputs[2] if len(k.inputs) > 2 else None
    out = k.outputs[0]
    domain, capacity = k.domain(out, [x])
    work = np.float64 if scale.dtype == np.float64 else np.float32

    def body(values, idx):
        v = k.s.cast(x.dtype, work, values[0])
        if zp is not None:
            v = k.b.fsub(v, k.s.cast(zp.dtype, work, _quant_param(k, zp, x, axis, block, idx)))
        v = k.b.fmul(v, k.s.cast(scale.dtype, work, _quant_param(k, scale, x, axis, block, idx)))
        return [k.s.cast(work, out.dtype, v)]
    k.generic(domain, [out.identity_access()], [x.identity_access()], body, capacity=capacity)


@register("QuantizeLinear", since=10, elementwise=True, lowp_native=True, runtime_extents=True)
def lower_quantize(k):
    """y = saturate(round_half_even(x / scale) + zero_point) to the output integer type; float8 outputs:
    cast(x / scale) honouring `saturate`; float4: cast(x / scale + zero_point) (onnx.reference's rules)."""
    x, axis, block = _quant_setup(k)
    scale = k.inputs[1]
    zp = k.inputs[2] if len(k.inputs) > 2 else None
    out = k.outputs[0]
    odt = np.dtype(out.dtype)
    name = odt.name if lowp.is_lowp(odt) else None
    if odt.kind not in "iu" and name not in lowp.INT_FORMATS and name not in lowp.FLOAT_FORMATS:
        raise InputError(f"node {k.node.name!r} (QuantizeLinear): output dtype {out.dtype} is not supported")
    work = np.float64 if np.float64 in (x.dtype, scale.dtype) else np.float32
    saturate = bool(k.attr("saturate", 1))
    domain, capacity = k.domain(out, [x])

    def scaled(values, idx):
        return k.b.fdiv(k.s.cast(x.dtype, work, values[0]), k.s.cast(scale.dtype, work, _quant_param(k, scale, x, axis, block, idx)))

    if name in lowp.FLOAT_FORMATS:
        def fbody(values, idx):
            v = scaled(values, idx)
            if name == "float4_e2m1fn" and zp is not None:
                v = k.b.fadd(v, k.s.cast(zp.dtype, work, _quant_param(k, zp, x, axis, block, idx)))
            return [k.s.cast(work, out.dtype, v, saturate)]
        k.generic(domain, [out.identity_access()], [x.identity_access()], fbody, capacity=capacity)
        return
    lo_v, hi_v = lowp.int_info(odt) if name else (np.iinfo(odt).min, np.iinfo(odt).max)
    lo, hi = const(work, lo_v), const(work, hi_v)

    def body(values, idx):
        v = k.s.intrinsic("llvm.roundeven", scaled(values, idx))
        if zp is not None:
            v = k.b.fadd(v, k.s.cast(zp.dtype, work, _quant_param(k, zp, x, axis, block, idx)))
        v = k.s.min(work, k.s.max(work, v, lo), hi)
        if name is None and odt.itemsize <= 2:  # rounded, clamped to a range float32 holds exactly, NaN dropped by maxnum:
            # a plain conversion is exact, and vectorizes (the saturating one does not on x86)
            conv = k.b.fptosi if odt.kind == "i" else k.b.fptoui
            return [conv(v, llvm_type(odt))]
        return [k.s.cast(work, out.dtype, v)]
    k.generic(domain, [out.identity_access()], [x.identity_access()], body, capacity=capacity)
